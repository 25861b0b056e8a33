//! Preparing an operation: what it syncs (the history entry a rollback returns to, the revision and
//! objects a sync asks for), the sync options in force, and the project's rules, which refuse an
//! operation before anything is applied.

use capstan_api::Application;
use capstan_api::application::{ApplicationSource, ApplicationStatus, RevisionHistory, RollbackRefused};
use capstan_api::operation::Operation;
use capstan_compare::normalize::Tracking;
use capstan_compare::{Comparison, SyncCode};
use capstan_kube::ObjectKey;
use capstan_sync::SyncOptions;
use kube::ResourceExt;

use super::guard;
use crate::context::Ctx;
use crate::error::PipelineError;
use crate::pipeline::AppState;
use crate::projects::Project;

/// Why an operation is refused before anything is applied (recorded as its failure).
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// The rollback is refused: automated sync is on, or it names no entry of `status.history`.
    #[error(transparent)]
    Rollback(#[from] RollbackRefused),
    /// A requested object is not `GROUP/KIND/NAMESPACE/NAME`.
    #[error("invalid resource {0:?}: use GROUP/KIND/NAMESPACE/NAME")]
    InvalidResource(String),
    /// The revision to sync could not be resolved or compared.
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// A pruning sync would delete objects whose kind the project does not permit.
    #[error("the sync would prune objects the project does not permit: {}", .0.join("; "))]
    PruneNotPermitted(Vec<String>),
    /// Rendered objects the project does not permit.
    #[error("the sync would break the project's rules: {}", .0.join("; "))]
    ProjectRules(Vec<String>),
    /// `CreateNamespace=true` where the project does not permit it.
    #[error("the sync would break the project's rules: {0}")]
    CreateNamespace(String),
    /// No client acting as the project's ServiceAccount for the destination could be made.
    #[error(transparent)]
    Impersonation(#[from] capstan_kube::impersonate::ImpersonationError),
    /// A policy denies objects of the sync (or the policies cannot be evaluated).
    #[error("the sync is denied by policy: {0}")]
    PolicyDenied(String),
    /// The sync would prune more than the project's deletion budget allows, unconfirmed.
    #[error("{0}: confirm with `capstan app sync {1} --allow-deletions`")]
    DeletionBudget(String, String),
    /// `Force=true` (delete and recreate) asked for what it may not recreate.
    #[error("Force=true refused: {0}")]
    ForceRefused(String),
}

/// What an operation does, once prepared.
pub struct Plan {
    /// The source it syncs (a rollback's is its history entry's), for the history entry it adds.
    pub source: ApplicationSource,
    /// The sources it syncs, for a multi-source Application (empty otherwise).
    pub sources: Vec<ApplicationSource>,
    /// Whether it prunes.
    pub prune: bool,
    /// Whether it only validates (applies nothing).
    pub dry_run: bool,
    /// The objects it syncs (all when empty).
    pub selected: Vec<ObjectKey>,
    /// The sync options of the spec and of the request.
    pub options: SyncOptions,
    /// The client it writes with: the destination's, acting as the project's ServiceAccount for it
    /// if the project names one (`destinationServiceAccounts`).
    pub client: kube::Client,
    /// The policies' warnings on its objects (`validationActions: [Warn]`).
    pub warnings: Vec<String>,
}

/// An operation prepared: the state it acts on (compared at the revision it syncs; the state it was
/// given when preparing failed early) and what it does, or why it is refused.
pub struct Prepared {
    /// The state the operation acts on.
    pub state: AppState,
    /// What it does, or why it may not run.
    pub plan: Result<Plan, PrepareError>,
}

/// Prepare `op` for `app`, whose current comparison is `state`.
pub async fn prepare(
    ctx: &Ctx,
    app: &Application,
    project: &Project,
    status: &ApplicationStatus,
    state: AppState,
    op: &Operation,
) -> Prepared {
    let mut state = state;
    let plan = plan(ctx, app, project, status, &mut state, op).await;
    Prepared { state, plan }
}

async fn plan(
    ctx: &Ctx,
    app: &Application,
    project: &Project,
    status: &ApplicationStatus,
    state: &mut AppState,
    op: &Operation,
) -> Result<Plan, PrepareError> {
    let mut plan = Plan {
        source: app.spec.source.clone(),
        sources: app.spec.sources.clone(),
        prune: op.sync.as_ref().is_some_and(|s| s.prune),
        dry_run: false,
        selected: Vec::new(),
        options: SyncOptions::default(),
        client: state.destination.client.clone(),
        warnings: Vec::new(),
    };
    let mut allow_deletions = false;
    let mut requested_options: &[String] = &[];
    if let Some(rollback) = &op.rollback {
        let entry = rollback_entry(app, status, rollback.id)?;
        plan.prune = rollback.prune;
        plan.source = entry.source;
        plan.sources = entry.sources;
        let mut target = app.clone();
        target.spec.source = plan.source.clone();
        target.spec.sources = plan.sources.clone();
        let revision = if entry.revisions.is_empty() {
            entry.revision
        } else {
            entry.revisions.join(",")
        };
        let resolved = ctx.pipeline.resolve(&target, project, Some(&revision), false).await?;
        *state = ctx.pipeline.compare_fresh(&target, project, resolved).await?;
    } else if let Some(sync) = &op.sync {
        plan.dry_run = sync.dry_run;
        allow_deletions = sync.allow_deletions;
        requested_options = &sync.sync_options;
        plan.selected = selected(&sync.resources)?;
        if !sync.revision.is_empty() {
            let resolved = ctx.pipeline.resolve(app, project, Some(&sync.revision), true).await?;
            if resolved != state.revision {
                *state = ctx.pipeline.compare_fresh(app, project, resolved).await?;
            }
        }
    }
    // In the spec or in the request, in any spelling the sync accepts.
    plan.options = options(app, requested_options);
    if plan.options.force {
        check_force(app, &plan.selected, &state.comparison)?;
    }
    check_rules(
        plan.prune,
        plan.options.create_namespace,
        &state.project_violations,
        &state.prune_violations,
        state.create_namespace_violation.as_deref(),
    )?;
    if plan.prune
        && !allow_deletions
        && let Some(over) = guard::over_budget(project.spec.deletion_budget.as_ref(), &state.comparison, &plan.selected)
    {
        return Err(PrepareError::DeletionBudget(over, app.name_any()));
    }
    plan.warnings = guard::policies(ctx, app, project, state, &plan.selected, plan.prune)
        .await
        .map_err(PrepareError::PolicyDenied)?
        .warnings;
    // The state the sync acts on (a rollback's or a requested revision's) says whom it acts as.
    plan.client = state.sync_client()?;
    Ok(plan)
}

/// The sync options of `app`'s spec and of a request's `requested` options together.
pub fn options(app: &Application, requested: &[String]) -> SyncOptions {
    SyncOptions::parse(
        app.spec
            .sync_policy
            .iter()
            .flat_map(|p| p.sync_options.iter())
            .chain(requested),
    )
}

/// The history entry `id` a rollback of `app` returns to (the CLI and the server refused the
/// request already if they could; the spec or the history may have changed since).
fn rollback_entry(app: &Application, status: &ApplicationStatus, id: i64) -> Result<RevisionHistory, PrepareError> {
    Ok(app.rollback_entry(&status.history, id)?.clone())
}

/// `Force=true` deletes an object and creates it again: the retry of a failed Job. It is held to
/// exactly that, whoever wrote the request (the server's retry action, a kubeconfig, an
/// ApplicationSet's template): named objects only, each a Job of this Application in Git and live,
/// tracked by it. A Namespace, a CRD or a volume claim deleted and recreated would take everything
/// in it, every resource of its kind, or its data with it.
fn check_force(app: &Application, selected: &[ObjectKey], comparison: &Comparison) -> Result<(), PrepareError> {
    if selected.is_empty() {
        return Err(PrepareError::ForceRefused(
            "it recreates only the objects the request names (resources)".into(),
        ));
    }
    let tracking = Tracking::new(&app.namespace().unwrap_or_default(), &app.name_any());
    for key in selected {
        if key.group != "batch" || key.kind != "Job" {
            return Err(PrepareError::ForceRefused(format!(
                "{key} is not a Job (only a Job is recreated)"
            )));
        }
        let state = comparison.resources.iter().find(|r| &r.key == key);
        let Some(state) = state.filter(|r| !r.hook && r.desired.is_some()) else {
            return Err(PrepareError::ForceRefused(format!(
                "{key} is not an object of this Application in Git"
            )));
        };
        if let Some(live) = &state.live
            && (!tracking.owns(live) || state.owned_by_other.is_some())
        {
            return Err(PrepareError::ForceRefused(format!(
                "{key} on the cluster is not this Application's"
            )));
        }
    }
    Ok(())
}

/// The objects a sync request names.
fn selected(resources: &[String]) -> Result<Vec<ObjectKey>, PrepareError> {
    resources
        .iter()
        .map(|r| ObjectKey::parse(r).ok_or_else(|| PrepareError::InvalidResource(r.clone())))
        .collect()
}

/// The project's rules for a sync (pruning or not, creating the namespace or not) of a state with
/// these violations.
fn check_rules(
    prune: bool,
    create_namespace: bool,
    project_violations: &[String],
    prune_violations: &[String],
    create_namespace_violation: Option<&str>,
) -> Result<(), PrepareError> {
    if prune && !prune_violations.is_empty() {
        return Err(PrepareError::PruneNotPermitted(prune_violations.to_vec()));
    }
    if !project_violations.is_empty() {
        return Err(PrepareError::ProjectRules(project_violations.to_vec()));
    }
    // `CreateNamespace=true` given in the request (not in the spec) is held to the same rules.
    if create_namespace && let Some(message) = create_namespace_violation {
        return Err(PrepareError::CreateNamespace(message.to_string()));
    }
    Ok(())
}

/// Whether `op` has nothing to do on `comparison`: a sync (not a rollback) of an Application whose
/// objects are all Synced, with no hooks, nothing to prune and no re-apply of unchanged objects
/// asked for (`ApplyOutOfSyncOnly=false`, or `Force=true`, which recreates them).
pub fn nothing_to_do(app: &Application, op: &Operation, comparison: &Comparison) -> bool {
    let reapply = |options: &[String]| {
        let parsed = SyncOptions::parse(options);
        !parsed.apply_out_of_sync_only || parsed.force
    };
    op.rollback.is_none()
        && comparison.sync() == SyncCode::Synced
        && !comparison.resources.iter().any(|r| r.hook || r.requires_pruning)
        && !op.sync.as_ref().is_some_and(|s| reapply(&s.sync_options))
        && !app.spec.sync_policy.as_ref().is_some_and(|p| reapply(&p.sync_options))
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_api::operation::{RollbackOperation, SyncOperation};

    fn app(automated: bool, sync_options: &[&str]) -> Application {
        let mut policy = serde_json::json!({"syncOptions": sync_options});
        if automated {
            policy["automated"] = serde_json::json!({});
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
            "metadata": {"name": "a", "namespace": "capstan"},
            "spec": {
                "source": {"repoURL": "file:///repo", "path": "."},
                "destination": {"namespace": "n"},
                "syncPolicy": policy,
            },
        }))
        .expect("application")
    }

    fn sync(options: &[&str]) -> Operation {
        Operation {
            sync: Some(SyncOperation {
                sync_options: options.iter().map(|o| o.to_string()).collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn rollbacks_need_manual_sync_and_an_existing_entry() {
        let status = ApplicationStatus {
            history: vec![RevisionHistory {
                id: 3,
                revision: "abc".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(matches!(
            rollback_entry(&app(true, &[]), &status, 3),
            Err(PrepareError::Rollback(RollbackRefused::Automated))
        ));
        assert_eq!(
            rollback_entry(&app(false, &[]), &status, 3).expect("entry").revision,
            "abc"
        );
        let missing = rollback_entry(&app(false, &[]), &status, 4).expect_err("refused");
        assert_eq!(missing.to_string(), "history entry 4 not found (entries: 3)");
    }

    #[test]
    fn requested_objects_must_be_keys() {
        let keys = selected(&["apps/Deployment/web/api".into(), "/ConfigMap/web/settings".into()]).expect("keys");
        assert_eq!(keys.len(), 2);
        let refused = selected(&["Deployment/api".into()]).expect_err("refused");
        assert_eq!(
            refused.to_string(),
            "invalid resource \"Deployment/api\": use GROUP/KIND/NAMESPACE/NAME"
        );
    }

    #[test]
    fn the_project_refuses_before_anything_is_applied() {
        let v = |m: &str| vec![m.to_string()];
        assert!(
            check_rules(false, false, &[], &v("p"), Some("ns")).is_ok(),
            "no prune, no namespace"
        );
        assert_eq!(
            check_rules(true, false, &[], &v("a; b"), None)
                .err()
                .map(|e| e.to_string()),
            Some("the sync would prune objects the project does not permit: a; b".into())
        );
        assert_eq!(
            check_rules(false, false, &["x".into(), "y".into()], &[], None)
                .err()
                .map(|e| e.to_string()),
            Some("the sync would break the project's rules: x; y".into())
        );
        assert_eq!(
            check_rules(false, true, &[], &[], Some("Namespace/n: denied"))
                .err()
                .map(|e| e.to_string()),
            Some("the sync would break the project's rules: Namespace/n: denied".into())
        );
        assert!(check_rules(true, true, &[], &[], None).is_ok());
    }

    #[test]
    fn options_come_from_the_spec_and_the_request() {
        let spec = app(false, &["PruneLast=true"]);
        let both = options(&spec, &["createnamespace=true".into()]);
        assert!(both.prune_last && both.create_namespace && both.apply_out_of_sync_only);
        assert_eq!(options(&app(false, &[]), &[]), SyncOptions::default());
    }

    #[test]
    fn a_sync_of_a_synced_application_has_nothing_to_do() {
        let synced = Comparison { resources: Vec::new() };
        assert!(nothing_to_do(&app(false, &[]), &sync(&[]), &synced));
        assert!(!nothing_to_do(
            &app(false, &[]),
            &sync(&["ApplyOutOfSyncOnly=false"]),
            &synced
        ));
        assert!(!nothing_to_do(
            &app(false, &["ApplyOutOfSyncOnly=false"]),
            &sync(&[]),
            &synced
        ));
        assert!(!nothing_to_do(
            &app(false, &[]),
            &sync(&["Force=true", "Replace=true"]),
            &synced
        ));
        let rollback = Operation {
            rollback: Some(RollbackOperation { id: 1, prune: false }),
            ..Default::default()
        };
        assert!(!nothing_to_do(&app(false, &[]), &rollback, &synced));
    }
}

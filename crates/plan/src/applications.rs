//! Planning the Applications that follow a repository: each one rendered at the planned revision
//! and compared with its destination exactly as a sync would (the controller's pipeline), without
//! writing anything; then the policies in scope and the project's deletion budget judge the
//! objects the sync would apply and prune.

use capstan_api::Application;
use capstan_api::RepoUrl;
use capstan_compare::SyncCode;
use capstan_controller::Pipeline;
use capstan_controller::operation::guard;
use capstan_controller::policies::SyncScope;
use futures::StreamExt;
use kube::ResourceExt;

use crate::PlanRequest;
use crate::model::{Action, AppPlan, Change, ObjectPlan, VerdictPlan};

/// Applications planned at once.
const PARALLELISM: usize = 8;

/// Whether `app` follows `request`'s repository (at its base revision, when one is given).
pub fn follows(app: &Application, request: &PlanRequest) -> bool {
    let Ok(repo) = RepoUrl::parse(&request.repo) else {
        return false;
    };
    app.spec.sources().iter().any(|s| {
        RepoUrl::parse(&s.repo_url).is_ok_and(|u| u.same_repository(&repo))
            && request.base.as_ref().is_none_or(|b| *b == s.target_revision)
    })
}

/// The revision to resolve `app` at: the planned one for each source of the repository, its own
/// target revision for the others (one per source, joined with `,`, for several).
fn revision_for(app: &Application, request: &PlanRequest) -> String {
    let repo = RepoUrl::parse(&request.repo).ok();
    let each: Vec<String> = app
        .spec
        .sources()
        .iter()
        .map(|s| {
            let same = repo
                .as_ref()
                .is_some_and(|r| RepoUrl::parse(&s.repo_url).is_ok_and(|u| u.same_repository(r)));
            if same {
                request.revision.clone()
            } else {
                s.target_revision.clone()
            }
        })
        .collect();
    each.join(",")
}

/// Plan every Application of `apps` that follows the repository, sorted by name.
pub async fn plan_all(pipeline: &Pipeline, apps: Vec<Application>, request: &PlanRequest) -> Vec<AppPlan> {
    let following: Vec<Application> = apps.into_iter().filter(|a| follows(a, request)).collect();
    let mut plans: Vec<AppPlan> = futures::stream::iter(following)
        .map(|app| async move { plan_one(pipeline, &app, request).await })
        .buffer_unordered(PARALLELISM)
        .collect()
        .await;
    plans.sort_by(|a, b| a.name.cmp(&b.name));
    plans
}

/// Plan one Application; a failure to render or compare is its plan's error.
pub async fn plan_one(pipeline: &Pipeline, app: &Application, request: &PlanRequest) -> AppPlan {
    let mut plan = AppPlan {
        name: app.name_any(),
        project: app.spec.project.clone(),
        cluster: if app.spec.destination.name.is_empty() {
            app.spec.destination.server.clone()
        } else {
            app.spec.destination.name.clone()
        },
        namespace: app.spec.destination.namespace.clone(),
        change: Change::Unchanged,
        resolved: String::new(),
        error: None,
        objects: Vec::new(),
        verdicts: Vec::new(),
        deletion_budget: None,
    };
    if let Err(e) = fill(pipeline, app, request, &mut plan).await {
        plan.change = Change::Failed;
        plan.error = Some(capstan_redact::scrub(&e));
    }
    plan
}

async fn fill(pipeline: &Pipeline, app: &Application, request: &PlanRequest, plan: &mut AppPlan) -> Result<(), String> {
    let project = pipeline.project(app).await.map_err(|e| e.to_string())?;
    plan.project = project.name.clone();
    let revision = revision_for(app, request);
    let resolved = pipeline
        .resolve(app, &project, Some(&revision), true)
        .await
        .map_err(|e| e.to_string())?;
    plan.resolved = resolved.id();
    let state = pipeline
        .compare_fresh(app, &project, resolved)
        .await
        .map_err(|e| e.to_string())?;
    plan.cluster = state.destination.name.clone();
    if !state.project_violations.is_empty() {
        return Err(format!(
            "the sync would break the project's rules: {}",
            state.project_violations.join("; ")
        ));
    }
    let prune = app
        .spec
        .sync_policy
        .as_ref()
        .and_then(|p| p.automated.as_ref())
        .is_some_and(|a| a.prune);
    for r in state.comparison.resources.iter().filter(|r| !r.hook) {
        let action = if r.requires_pruning {
            if prune { Action::Delete } else { Action::RequiresPruning }
        } else if r.live.is_none() {
            Action::Create
        } else if r.sync == SyncCode::OutOfSync {
            Action::Update
        } else {
            continue;
        };
        // Secret values are never shown: which keys changed is.
        let mut r = r.clone();
        let mut live = r.live.clone();
        capstan_redact::objects::redact_pair(&mut live, &mut r.predicted);
        capstan_redact::objects::redact_pair(&mut r.live, &mut r.desired);
        plan.objects.push(ObjectPlan {
            key: r.key.to_string(),
            action,
            diff: capstan_redact::scrub(&capstan_compare::render_diff(&r)),
        });
    }
    plan.objects.sort_by(|a, b| a.key.cmp(&b.key));
    if !plan.objects.is_empty() {
        plan.change = Change::Changed;
    }
    let scope = SyncScope {
        application: format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any()),
        project: &project.name,
        destination: &state.destination,
        cluster_labels: pipeline.clusters.labels_of(&state.destination.name),
        prune,
    };
    let evaluation = pipeline
        .policies
        .check(&scope, &state.comparison.resources)
        .await
        .map_err(|e| e.to_string())?;
    plan.verdicts = evaluation.verdicts.iter().map(VerdictPlan::from).collect();
    if prune {
        plan.deletion_budget = guard::over_budget(project.spec.deletion_budget.as_ref(), &state.comparison, &[]);
    }
    Ok(())
}

//! Generating one set's Applications: gathering the inputs (clusters, checkouts) and turning
//! generation errors into the `ErrorOccurred` condition's reason and message.

use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_api::applicationset::{ApplicationsSyncPolicy, RollingSyncStep};
use capstan_api::labels::{ALLOW_DELETIONS_ANNOTATION, REFRESH_ANNOTATION};
use capstan_api::status::ApplicationSetConditionType;
use capstan_api::{Application, ApplicationSet};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::problem::Problem;
use super::project::SetProject;
use super::*;
use crate::Inputs;
use crate::rollout::{self, Summary};

/// Reconcile one ApplicationSet.
pub(super) async fn reconcile(set: Arc<ApplicationSet>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let name = set.name_any();
    let namespace = set.namespace().unwrap_or_else(|| ctx.config.namespace.clone());
    let api: Api<ApplicationSet> = Api::namespaced(ctx.client.clone(), &namespace);
    let fail = |source: WriteError| ReconcileError {
        set: format!("{namespace}/{name}"),
        source,
    };
    // Decide on the stored object, not the watch cache.
    let Some(mut set) = api.get_opt(&name).await.map_err(|e| fail(e.into()))? else {
        return Ok(Action::await_change());
    };
    if set.metadata.deletion_timestamp.is_some() {
        finalize(&ctx, &api, &set).await.map_err(fail)?;
        return Ok(Action::await_change());
    }
    ensure_finalizer(&api, &mut set).await.map_err(fail)?;
    let started = Instant::now();
    let refresh = set.annotations().contains_key(REFRESH_ANNOTATION);

    let generated = generate_all(&ctx, &set, &namespace, refresh).await;
    let mut status = set.status.clone().unwrap_or_default();
    let action = match generated {
        Err(problem) => {
            tracing::info!(set = %name, reason = problem.reason, message = %redact(&problem.message), "generation failed; Applications left as they are");
            set_condition(
                &mut status.conditions,
                ApplicationSetConditionType::ErrorOccurred,
                true,
                problem.reason,
                &problem.message,
            );
            set_condition(
                &mut status.conditions,
                ApplicationSetConditionType::ParametersGenerated,
                false,
                problem.reason,
                &problem.message,
            );
            set_condition(
                &mut status.conditions,
                ApplicationSetConditionType::ResourcesUpToDate,
                false,
                problem.reason,
                &problem.message,
            );
            Action::requeue(ctx.config.poll_interval)
        }
        Ok(generated) => {
            let outcome = apply(&ctx, &set, &namespace, generated).await.map_err(fail)?;
            tracing::debug!(
                set = %name,
                created = outcome.created,
                updated = outcome.updated.len(),
                deleted = outcome.deleted,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "generated"
            );
            record(&mut status, &set, &outcome);
            if let Some(why) = &outcome.held {
                deletion_held_event(&ctx, &set, why).await;
            }
            if outcome.confirmed || set.annotations().contains_key(ALLOW_DELETIONS_ANNOTATION) {
                // The confirmation is spent, used or not: it confirms the pass that sees it, never
                // a later excess.
                let patch = json!({"metadata": {"annotations": {ALLOW_DELETIONS_ANNOTATION: null}}});
                if let Err(err) = api.patch(&name, &PatchParams::default(), &Patch::Merge(patch)).await {
                    tracing::warn!(set = %name, %err, "the deletion confirmation could not be removed");
                }
            }
            if !outcome.errors.is_empty() {
                Action::requeue(Duration::from_secs(10))
            } else if matches!(outcome.rollout, Some(Summary::Progressing(_))) {
                // A safety net: owned Applications' changes normally advance the rollout.
                Action::requeue(Duration::from_secs(10).min(ctx.config.poll_interval))
            } else {
                Action::requeue(ctx.config.poll_interval)
            }
        }
    };
    write_status(&api, &set, &status).await.map_err(fail)?;
    if refresh {
        let patch = json!({"metadata": {"annotations": {REFRESH_ANNOTATION: null}}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(|e| fail(e.into()))?;
    }
    Ok(action)
}

/// A Warning Event on `set`: its pass deleted nothing, being over the deletion budget. Published
/// when the condition is new, so a held pass does not repeat it every poll.
async fn deletion_held_event(ctx: &Ctx, set: &ApplicationSet, why: &str) {
    let already = set.status.as_ref().is_some_and(|s| {
        s.conditions.iter().any(|c| {
            c.type_ == ApplicationSetConditionType::DeletionBudgetExceeded && c.status == "True" && c.message == why
        })
    });
    if already {
        return;
    }
    let reporter = kube::runtime::events::Reporter {
        controller: "capstan-applicationset".into(),
        instance: None,
    };
    let recorder = kube::runtime::events::Recorder::new(ctx.client.clone(), reporter);
    let event = kube::runtime::events::Event {
        type_: kube::runtime::events::EventType::Warning,
        reason: "DeletionBudgetExceeded".into(),
        note: Some(redact(why)),
        action: "Delete".into(),
        secondary: None,
    };
    if let Err(err) = recorder.publish(&event, &set.object_ref(&())).await {
        tracing::debug!(%err, "publishing an event");
    }
}

/// Gather inputs and generate, checking out Git sources a matrix only names during generation.
pub(super) async fn generate_all(
    ctx: &Ctx,
    set: &ApplicationSet,
    namespace: &str,
    force: bool,
) -> Result<Vec<Application>, Problem> {
    if let Some(steps) = rolling_steps(set) {
        rollout::validate(steps).map_err(|e| Problem {
            reason: "InvalidStrategy",
            message: e.to_string(),
        })?;
    }
    let mut inputs = Inputs::default();
    if uses_clusters(set) {
        tokio::time::timeout(Duration::from_secs(30), ctx.clusters.wait_until_ready())
            .await
            .map_err(|_| Problem {
                reason: "ClustersUnavailable",
                message: "cluster Secrets could not be listed within 30 s".into(),
            })?
            .map_err(|_| Problem {
                reason: "ClustersUnavailable",
                message: "the cluster Secret watch stopped".into(),
            })?;
        inputs.clusters = inputs::clusters(&ctx.clusters.state()).map_err(|e| Problem {
            reason: e.reason(),
            message: e.to_string(),
        })?;
    }
    // The set's project decides which repositories its git generators read and which projects its
    // Applications may name.
    let project = SetProject::of(&ctx.client, namespace, set, ctx.config.deny_implicit_default_project).await?;
    // Held until generation is done: the checkouts are not evicted while generators read them.
    let mut leases = Vec::new();
    let checkout = async |source: &crate::GitSource| -> Result<capstan_source::Checkout, Problem> {
        project.check_repository(source)?;
        inputs::checkout(&ctx.client, namespace, &ctx.repos, &ctx.config.cache_dir, source, force)
            .await
            .map_err(|message| Problem {
                reason: "RepositoryError",
                message: format!(
                    "repository {} at revision {}: {message}",
                    source.repo_url, source.revision
                ),
            })
    };
    for source in crate::git_sources(&set.spec)? {
        let tree = checkout(&source).await?;
        inputs.checkouts.insert(source, tree.to_path_buf());
        leases.push(tree);
    }
    // A matrix child may name a repository or revision with its sibling's parameters: check those
    // out as generation asks for them.
    for _ in 0..32 {
        match crate::generate(set, &inputs) {
            Ok(apps) => {
                if let Some(other) = apps
                    .iter()
                    .find(|a| a.metadata.namespace.as_deref().is_some_and(|n| n != namespace))
                {
                    return Err(Problem {
                        reason: "InvalidTemplate",
                        message: format!(
                            "template: metadata.namespace: Application {} would be in namespace {:?}; generated Applications must be in the ApplicationSet's namespace {namespace:?}",
                            other.name_any(),
                            other.metadata.namespace.as_deref().unwrap_or_default()
                        ),
                    });
                }
                // The final objects, after templating, patching and every generator's template.
                project.check_generated(&apps)?;
                return Ok(apps);
            }
            Err(err) => match err.missing_git_source() {
                Some(source) if !inputs.checkouts.contains_key(source) => {
                    let source = source.clone();
                    let tree = checkout(&source).await?;
                    inputs.checkouts.insert(source, tree.to_path_buf());
                    leases.push(tree);
                }
                _ => return Err(err.into()),
            },
        }
    }
    Err(Problem {
        reason: "InvalidGenerator",
        message: "generators name more than 32 Git sources during generation".into(),
    })
}

pub(super) fn rolling_steps(set: &ApplicationSet) -> Option<&[RollingSyncStep]> {
    let strategy = set.spec.strategy.as_ref()?;
    (strategy.type_ == "RollingSync").then(|| {
        strategy
            .rolling_sync
            .as_ref()
            .map(|r| r.steps.as_slice())
            .unwrap_or_default()
    })
}

pub(super) fn policy(set: &ApplicationSet) -> ApplicationsSyncPolicy {
    set.spec
        .sync_policy
        .as_ref()
        .and_then(|p| p.applications_sync)
        .unwrap_or(ApplicationsSyncPolicy::Sync)
}

pub(super) fn preserve(set: &ApplicationSet) -> bool {
    set.spec
        .sync_policy
        .as_ref()
        .is_some_and(|p| p.preserve_resources_on_deletion)
}

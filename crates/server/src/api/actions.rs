//! Resource actions on an Application's objects: restart a Deployment, StatefulSet or DaemonSet
//! (the pod template's `kubectl.kubernetes.io/restartedAt` annotation, as `kubectl rollout
//! restart` writes it), suspend or resume a CronJob (`spec.suspend`), and retry a failed Job.
//!
//! An action is offered only for an object of the Application's tree, needs the `action` role in
//! its project, and is recorded in an Event on the Application naming the user. The list of
//! actions is closed ([`Action`]): a name that is not one of them, or that does not apply to the
//! kind, is refused with the ones that do.
//!
//! Restart, suspend and resume are one merge patch on the destination. `retry` is not: the server
//! may only patch objects there, and a Job's template cannot be changed, so a retry asks the
//! controller for a sync operation of that one Job with `Force=true,Replace=true` (deleted with its
//! Pods and created again from Git). It is offered for a Job of Git that has failed
//! (`Failed=True`), not for a hook (hooks run with their sync), nor for a Job something else made
//! (a CronJob's), nor while an operation runs or is requested.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State as AxState};
use axum::http::StatusCode;
use capstan_api::Application;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::access::authorized;
use super::apps::{annotate, not_held};
use super::audit;
use super::model::Items;
use crate::auth::Auth;
use crate::auth::rbac::Role;
use crate::error::ApiError;
use crate::state::State;
use capstan_api::operation::{OPERATION_ANNOTATION, Operation, SyncOperation};

/// An action Capstan knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Replace every Pod of a Deployment, StatefulSet or DaemonSet, as `kubectl rollout restart`.
    Restart,
    /// Stop a CronJob from starting Jobs.
    Suspend,
    /// Let a suspended CronJob start Jobs again.
    Resume,
    /// Run a failed Job again: the controller deletes it (with its Pods) and creates it from Git.
    Retry,
}

impl Action {
    /// Its name in the API and the CLI.
    pub fn name(self) -> &'static str {
        match self {
            Action::Restart => "restart",
            Action::Suspend => "suspend",
            Action::Resume => "resume",
            Action::Retry => "retry",
        }
    }

    /// The action named `name`, if any.
    pub fn parse(name: &str) -> Option<Action> {
        [Action::Restart, Action::Suspend, Action::Resume, Action::Retry]
            .into_iter()
            .find(|a| a.name() == name)
    }
}

/// The actions of a kind, with the API resource they patch.
fn actions_of(group: &str, kind: &str) -> Option<(&'static [Action], ApiResource)> {
    let (actions, version): (&'static [Action], &str) = match (group, kind) {
        ("apps", "Deployment" | "StatefulSet" | "DaemonSet") => (&[Action::Restart], "v1"),
        ("batch", "CronJob") => (&[Action::Suspend, Action::Resume], "v1"),
        ("batch", "Job") => (&[Action::Retry], "v1"),
        _ => return None,
    };
    Some((
        actions,
        ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind)),
    ))
}

/// Where an object sits in its Application, for the actions that depend on it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Place {
    /// The id (`group/kind/namespace/name`) of the object that made it (`None`: from Git).
    owner: Option<String>,
    /// It is a sync hook of the Application (or an object its sync skips, `hook: Skip`).
    hook: bool,
    /// It is tracked but no longer in Git.
    requires_pruning: bool,
    /// Why no operation may be requested now (one runs, or another is requested).
    busy: Option<String>,
}

/// Whether a Job has failed: its condition `Failed` is `True`.
fn job_failed(live: &Value) -> bool {
    live.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|conditions| {
            conditions.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some("Failed") // vocabulary: Job conditions
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

/// Why an action cannot run on this object now (`None`: it can).
fn disabled(action: Action, live: &Value, place: &Place) -> Option<String> {
    let suspended = live.pointer("/spec/suspend").and_then(Value::as_bool).unwrap_or(false);
    match action {
        Action::Restart => None,
        Action::Suspend if suspended => Some("already suspended".into()),
        Action::Resume if !suspended => Some("not suspended".into()),
        Action::Suspend | Action::Resume => None,
        Action::Retry => {
            if let Some(owner) = &place.owner {
                Some(format!("not in Git: made by {owner}"))
            } else if place.hook {
                Some("a sync hook (or skipped by the sync): it runs with its sync".into())
            } else if place.requires_pruning {
                Some("no longer in Git".into())
            } else if !job_failed(live) {
                Some("has not failed (no condition Failed=True)".into())
            } else {
                place.busy.clone()
            }
        }
    }
}

/// The patch an action makes, at `now` (RFC 3339); `None` for `retry`, which the controller does.
fn patch_of(action: Action, now: &str) -> Option<Value> {
    Some(match action {
        Action::Restart => json!({"spec": {"template": {"metadata": {"annotations": {
            "kubectl.kubernetes.io/restartedAt": now,
        }}}}}),
        Action::Suspend => json!({"spec": {"suspend": true}}),
        Action::Resume => json!({"spec": {"suspend": false}}),
        Action::Retry => return None,
    })
}

/// The sync operation a `retry` of `target` requests, as `user`: that Job only, deleted and
/// created again (`Force=true,Replace=true`, as Argo CD's `kubectl replace --force`).
fn retry_operation(target: &ActionTarget, user: &str) -> Operation {
    Operation {
        sync: Some(SyncOperation {
            resources: vec![format!(
                "{}/{}/{}/{}",
                target.group, target.kind, target.namespace, target.name
            )],
            sync_options: vec!["Force=true".into(), "Replace=true".into()],
            ..Default::default()
        }),
        rollback: None,
        initiated_by: user.to_string(),
        id: capstan_api::operation::new_request_id(),
    }
}

/// The object an action is about.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ActionTarget {
    /// API group (`apps`, `batch`).
    #[serde(default)]
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Namespace.
    #[serde(default)]
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// One action offered for an object.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ActionItem {
    /// Its name (`restart`, `suspend`, `resume`, `retry`).
    pub name: String,
    /// Why it cannot run now; empty when it can.
    #[serde(default)]
    pub disabled: String,
}

/// Body of `POST /api/applications/{name}/actions`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunAction {
    /// The object.
    #[serde(flatten)]
    pub target: ActionTarget,
    /// The action's name.
    pub action: String,
}

/// Answer of a run action.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct ActionDone {
    /// What was done, for a person.
    pub message: String,
}

/// What an action acts on: the kind's actions, the API of the object, the live object and where it
/// sits in the Application.
struct Found {
    actions: &'static [Action],
    api: Api<DynamicObject>,
    live: Value,
    place: Place,
}

/// The live object `target` of `app`'s tree and the API it lives in: 404 when it is not part of
/// the tree, 422 when its kind has no actions.
async fn target_of(state: &State, app: &Application, target: &ActionTarget) -> Result<Found, ApiError> {
    let name = app.metadata.name.clone().unwrap_or_default();
    let tree = super::tree::build(state, app).await?;
    // Live nodes only: an object Git names but the project denies is listed `Missing` and was never
    // read; it is no target.
    let node = tree
        .iter()
        .filter(|n| super::tree::is_live_root(n))
        .find(|n| {
            n.group == target.group && n.kind == target.kind && n.namespace == target.namespace && n.name == target.name
        })
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "{}/{} {:?} in the tree of Application {name:?}",
                target.group, target.kind, target.name
            ))
        })?;
    let (actions, resource) = actions_of(&target.group, &target.kind).ok_or_else(|| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("{}/{} has no actions", target.group, target.kind),
        )
    })?;
    let dest = state
        .pipeline
        .destination(app)
        .await
        .map_err(|e| ApiError::new(StatusCode::BAD_GATEWAY, e.to_string()))?;
    let api: Api<DynamicObject> = Api::namespaced_with(dest.client.clone(), &target.namespace, &resource);
    let live = api
        .get_opt(&target.name)
        .await
        .map_err(|e| ApiError::kube(&format!("reading {} {}", target.kind, target.name), &e))?
        .ok_or_else(|| ApiError::not_found(format!("{} {:?}", target.kind, target.name)))?;
    let live = serde_json::to_value(&live).unwrap_or_default();
    // A hook is marked in the tree while its operation runs, and by its annotation always.
    let hook = node.sync.ends_with(super::tree::HOOK)
        || !matches!(
            capstan_kube::annotations::hook(&live),
            Ok(capstan_kube::annotations::HookSpec::None)
        );
    let place = Place {
        owner: node.parent_id.clone(),
        hook,
        requires_pruning: node.requires_pruning,
        busy: app.busy().map(|b| b.to_string()),
    };
    Ok(Found {
        actions,
        api,
        live,
        place,
    })
}

fn items(actions: &[Action], live: &Value, place: &Place) -> Vec<ActionItem> {
    actions
        .iter()
        .map(|a| ActionItem {
            name: a.name().into(),
            disabled: disabled(*a, live, place).unwrap_or_default(),
        })
        .collect()
}

/// `GET /api/applications/{name}/actions`: the actions of one object of its tree.
pub async fn list(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
    Query(target): Query<ActionTarget>,
) -> Result<Json<Items<ActionItem>>, ApiError> {
    let app = authorized(&state, &auth, &name, Role::ReadOnly)?;
    let found = target_of(&state, &app, &target).await?;
    Ok(Json(Items {
        items: items(found.actions, &found.live, &found.place),
    }))
}

/// `POST /api/applications/{name}/actions`: run one.
pub async fn run(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
    Json(body): Json<RunAction>,
) -> Result<Json<ActionDone>, ApiError> {
    let app = authorized(&state, &auth, &name, Role::Action)?;
    let target = &body.target;
    let Found {
        actions,
        api,
        live,
        place,
    } = target_of(&state, &app, target).await?;
    let known: Vec<&str> = actions.iter().map(|a| a.name()).collect();
    let action = Action::parse(&body.action)
        .filter(|a| actions.contains(a))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "no action {:?} for {}/{}; its actions: {}",
                body.action,
                target.group,
                target.kind,
                known.join(", ")
            ))
        })?;
    if let Some(why) = disabled(action, &live, &place) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("cannot {} {} {:?}: {why}", action.name(), target.kind, target.name),
        ));
    }
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let mut message = format!(
        "{} ran {} on {} {}/{}",
        auth.principal.name,
        action.name(),
        target.kind,
        target.namespace,
        target.name
    );
    match patch_of(action, &now) {
        Some(patch) => {
            let params = PatchParams {
                field_manager: Some("capstan-server-action".into()),
                ..PatchParams::default()
            };
            api.patch(&target.name, &params, &Patch::Merge(patch))
                .await
                .map_err(|e| ApiError::kube(&format!("{} {} {}", action.name(), target.kind, target.name), &e))?;
        }
        None => {
            // The sync windows and dependencies that hold a manual sync hold this one too.
            not_held(&state, &app).await?;
            let op = retry_operation(target, &auth.principal.name);
            let raw = serde_json::to_string(&op)
                .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
            annotate(&state, &name, json!({OPERATION_ANNOTATION: raw})).await?;
            message.push_str(&format!(
                ": the controller deletes it with its Pods and creates it again from Git (operation {})",
                op.id
            ));
        }
    }
    tracing::info!(application = %name, user = %auth.principal.name, action = action.name(), kind = %target.kind, object = %target.name, "resource action");
    audit::record(&state, &app, "ResourceActionRan", "Action", &message).await;
    Ok(Json(ActionDone { message }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_are_offered_by_kind_and_state() {
        assert!(actions_of("apps", "Deployment").is_some_and(|(a, _)| a == [Action::Restart]));
        assert!(actions_of("", "Pod").is_none());
        assert!(
            actions_of("example.com", "Deployment").is_none(),
            "a kind is its group and name"
        );
        let (cron, resource) = actions_of("batch", "CronJob").expect("cronjob");
        assert_eq!(resource.plural, "cronjobs");
        let running = json!({"spec": {"schedule": "* * * * *"}});
        let suspended = json!({"spec": {"suspend": true}});
        let place = Place::default();
        assert_eq!(
            items(cron, &running, &place),
            [
                ActionItem {
                    name: "suspend".into(),
                    disabled: String::new()
                },
                ActionItem {
                    name: "resume".into(),
                    disabled: "not suspended".into()
                }
            ]
        );
        assert_eq!(
            disabled(Action::Suspend, &suspended, &place).as_deref(),
            Some("already suspended")
        );
        assert_eq!(Action::parse("restart"), Some(Action::Restart));
        assert_eq!(Action::parse("Restart"), None);
        assert_eq!(
            patch_of(Action::Restart, "T").unwrap_or_default()["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"],
            "T"
        );
    }

    #[test]
    fn retry_is_offered_for_a_failed_job_of_git_only() {
        let (jobs, resource) = actions_of("batch", "Job").expect("job");
        assert_eq!((jobs, resource.plural.as_str()), (&[Action::Retry][..], "jobs"));
        let failed = json!({"status": {"conditions": [
            {"type": "Complete", "status": "False"},
            {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"},
        ]}});
        let running = json!({"status": {"active": 1}});
        let not_failed = json!({"status": {"conditions": [{"type": "Failed", "status": "False"}]}});
        let of_git = Place::default();
        assert_eq!(disabled(Action::Retry, &failed, &of_git), None);
        for job in [&running, &not_failed] {
            assert_eq!(
                disabled(Action::Retry, job, &of_git).as_deref(),
                Some("has not failed (no condition Failed=True)")
            );
        }
        let made = Place {
            owner: Some("batch/CronJob/shop/nightly".into()),
            ..Place::default()
        };
        assert_eq!(
            disabled(Action::Retry, &failed, &made).as_deref(),
            Some("not in Git: made by batch/CronJob/shop/nightly")
        );
        let hook = Place {
            hook: true,
            ..Place::default()
        };
        assert!(disabled(Action::Retry, &failed, &hook).is_some_and(|w| w.contains("hook")));
        let pruned = Place {
            requires_pruning: true,
            ..Place::default()
        };
        assert_eq!(
            disabled(Action::Retry, &failed, &pruned).as_deref(),
            Some("no longer in Git")
        );
        let busy = Place {
            busy: Some("another operation is already in progress".into()),
            ..Place::default()
        };
        assert_eq!(
            disabled(Action::Retry, &failed, &busy).as_deref(),
            Some("another operation is already in progress")
        );
        assert_eq!(patch_of(Action::Retry, "T"), None, "the controller retries");
        let target = ActionTarget {
            group: "batch".into(),
            kind: "Job".into(),
            namespace: "shop".into(),
            name: "migrate".into(),
        };
        let op = retry_operation(&target, "dev");
        let sync = op.sync.expect("a sync");
        assert_eq!(sync.resources, ["batch/Job/shop/migrate"]);
        assert!(capstan_kube::ObjectKey::parse(&sync.resources[0]).is_some());
        assert_eq!(sync.sync_options, ["Force=true", "Replace=true"]);
        assert!(!sync.prune && !sync.dry_run);
        assert_eq!(op.initiated_by, "dev");
        assert!(!op.id.is_empty(), "a request Capstan's clients write carries an id");
    }
}

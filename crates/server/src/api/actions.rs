//! Resource actions on an Application's objects: restart a Deployment, StatefulSet or DaemonSet
//! (the pod template's `kubectl.kubernetes.io/restartedAt` annotation, as `kubectl rollout
//! restart` writes it) and suspend or resume a CronJob (`spec.suspend`).
//!
//! An action is offered only for an object of the Application's tree, needs the `action` role in
//! its project, is one merge patch on the destination, and is recorded in an Event on the
//! Application naming the user. The list of actions is closed ([`Action`]): a name that is not one
//! of them, or that does not apply to the kind, is refused with the ones that do.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State as AxState};
use axum::http::StatusCode;
use capstan_api::Application;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::{Api, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::access::authorized;
use super::model::Items;
use crate::auth::Auth;
use crate::auth::rbac::Role;
use crate::error::ApiError;
use crate::state::State;

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
}

impl Action {
    /// Its name in the API and the CLI.
    pub fn name(self) -> &'static str {
        match self {
            Action::Restart => "restart",
            Action::Suspend => "suspend",
            Action::Resume => "resume",
        }
    }

    /// The action named `name`, if any.
    pub fn parse(name: &str) -> Option<Action> {
        [Action::Restart, Action::Suspend, Action::Resume]
            .into_iter()
            .find(|a| a.name() == name)
    }
}

/// The actions of a kind, with the API resource they patch.
fn actions_of(group: &str, kind: &str) -> Option<(&'static [Action], ApiResource)> {
    let (actions, version): (&'static [Action], &str) = match (group, kind) {
        ("apps", "Deployment" | "StatefulSet" | "DaemonSet") => (&[Action::Restart], "v1"),
        ("batch", "CronJob") => (&[Action::Suspend, Action::Resume], "v1"),
        _ => return None,
    };
    Some((
        actions,
        ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind)),
    ))
}

/// Why an action cannot run on this object now (`None`: it can).
fn disabled(action: Action, live: &Value) -> Option<String> {
    let suspended = live.pointer("/spec/suspend").and_then(Value::as_bool).unwrap_or(false);
    match action {
        Action::Restart => None,
        Action::Suspend if suspended => Some("already suspended".into()),
        Action::Resume if !suspended => Some("not suspended".into()),
        Action::Suspend | Action::Resume => None,
    }
}

/// The patch an action makes, at `now` (RFC 3339).
fn patch_of(action: Action, now: &str) -> Value {
    match action {
        Action::Restart => json!({"spec": {"template": {"metadata": {"annotations": {
            "kubectl.kubernetes.io/restartedAt": now,
        }}}}}),
        Action::Suspend => json!({"spec": {"suspend": true}}),
        Action::Resume => json!({"spec": {"suspend": false}}),
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
    /// Its name (`restart`, `suspend`, `resume`).
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

/// The live object `target` of `app`'s tree and the API it lives in: 404 when it is not part of
/// the tree, 422 when its kind has no actions.
async fn target_of(
    state: &State,
    app: &Application,
    target: &ActionTarget,
) -> Result<(&'static [Action], Api<DynamicObject>, DynamicObject), ApiError> {
    let name = app.metadata.name.clone().unwrap_or_default();
    let tree = super::tree::build(state, app).await?;
    // Live nodes only: an object Git names but the project denies is listed `Missing` and was never
    // read; it is no target.
    let found = tree.iter().filter(|n| super::tree::is_live_root(n)).any(|n| {
        n.group == target.group && n.kind == target.kind && n.namespace == target.namespace && n.name == target.name
    });
    if !found {
        return Err(ApiError::not_found(format!(
            "{}/{} {:?} in the tree of Application {name:?}",
            target.group, target.kind, target.name
        )));
    }
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
    Ok((actions, api, live))
}

fn items(actions: &[Action], live: &Value) -> Vec<ActionItem> {
    actions
        .iter()
        .map(|a| ActionItem {
            name: a.name().into(),
            disabled: disabled(*a, live).unwrap_or_default(),
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
    let (actions, _, live) = target_of(&state, &app, &target).await?;
    let live = serde_json::to_value(&live).unwrap_or_default();
    Ok(Json(Items {
        items: items(actions, &live),
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
    let (actions, api, live) = target_of(&state, &app, target).await?;
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
    let live = serde_json::to_value(&live).unwrap_or_default();
    if let Some(why) = disabled(action, &live) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("cannot {} {} {:?}: {why}", action.name(), target.kind, target.name),
        ));
    }
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let params = PatchParams {
        field_manager: Some("capstan-server-action".into()),
        ..PatchParams::default()
    };
    api.patch(&target.name, &params, &Patch::Merge(patch_of(action, &now)))
        .await
        .map_err(|e| ApiError::kube(&format!("{} {} {}", action.name(), target.kind, target.name), &e))?;
    let message = format!(
        "{} ran {} on {} {}/{}",
        auth.principal.name,
        action.name(),
        target.kind,
        target.namespace,
        target.name
    );
    tracing::info!(application = %name, user = %auth.principal.name, action = action.name(), kind = %target.kind, object = %target.name, "resource action");
    record(&state, &app, &message).await;
    Ok(Json(ActionDone { message }))
}

/// An Event on the Application naming who ran what (best effort: the action is done).
async fn record(state: &State, app: &Application, message: &str) {
    let reporter = Reporter {
        controller: "capstan-server".into(),
        instance: None,
    };
    let recorder = Recorder::new(state.client.clone(), reporter);
    let event = KubeEvent {
        type_: EventType::Normal,
        reason: "ResourceActionRan".into(),
        note: Some(message.to_string()),
        action: "Action".into(),
        secondary: None,
    };
    if let Err(err) = recorder.publish(&event, &app.object_ref(&())).await {
        tracing::warn!(%err, "recording the action's Event");
    }
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
        assert_eq!(
            items(cron, &running),
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
            disabled(Action::Suspend, &suspended).as_deref(),
            Some("already suspended")
        );
        assert_eq!(Action::parse("restart"), Some(Action::Restart));
        assert_eq!(Action::parse("Restart"), None);
        assert_eq!(
            patch_of(Action::Restart, "T")["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"],
            "T"
        );
    }
}

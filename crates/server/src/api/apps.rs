//! Application endpoints: the summary lists show (the list itself is answered in `list.rs`), get,
//! diff, manifests, live objects, events, history, and the operations (sync, refresh, rollback,
//! terminate), which are requests written onto the Application for the controller to execute —
//! exactly what the CLI does.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State as AxState};
use axum::http::StatusCode;
use capstan_api::Application;
use capstan_api::application::{RevisionHistory, RollbackRefused};
use capstan_api::labels::REFRESH_ANNOTATION;
use capstan_api::operation::{OPERATION_ANNOTATION, Operation, RollbackOperation, SyncOperation, TERMINATE_ANNOTATION};
use k8s_openapi::api::core::v1::Event;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::model::{
    Accept, AppSummary, ConditionSummary, Diff, DiffStatus, EventItem, Items, Manifests, ObjectDiff, OperationSummary,
    Permissions, RefreshKind, Refreshing, Requested, Reverted, RollbackAnswer, SUMMARY_CONDITIONS, SUMMARY_MESSAGE,
    Terminating,
};

use super::access::{authorized, cluster_of, project_of};
use crate::auth::Auth;
use crate::auth::rbac::Role;
use crate::error::ApiError;
use crate::redact;
use crate::state::State;

/// `message` cut to [`SUMMARY_MESSAGE`] bytes (on a character boundary, ending in `…`).
fn bounded(message: &str) -> String {
    if message.len() <= SUMMARY_MESSAGE {
        return message.to_string();
    }
    let mut end = SUMMARY_MESSAGE - '…'.len_utf8();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

/// The summary of `app` shown in lists and live updates.
pub fn summary(app: &Application, role: Role) -> AppSummary {
    let status = app.status.clone().unwrap_or_default();
    let operation = status.operation_state.as_ref().map(|o| OperationSummary {
        phase: o.phase,
        message: bounded(&o.message),
        started_at: o.started_at.clone(),
        finished_at: o.finished_at.clone(),
    });
    let sources = app.spec.sources();
    let first = sources.iter().find(|s| s.is_rendered()).or(sources.first());
    AppSummary {
        name: app.name_any(),
        namespace: app.namespace().unwrap_or_default(),
        project: project_of(app).to_string(),
        labels: app.labels().clone(),
        // A multi-source Application is summed up by its first rendered source (a chart by its name).
        repo_url: first.map(|s| s.repo_url.clone()).unwrap_or_default(),
        path: first
            .map(|s| if s.is_chart() { s.chart.clone() } else { s.path.clone() })
            .unwrap_or_default(),
        target_revision: first.map(|s| s.target_revision.clone()).unwrap_or_default(),
        cluster: cluster_of(app),
        server: app.spec.destination.server.clone(),
        dest_namespace: app.spec.destination.namespace.clone(),
        sync: status.sync.as_ref().map(|s| s.status).unwrap_or_default(),
        revision: status.sync.as_ref().map(|s| s.revision.clone()).unwrap_or_default(),
        health: status.health.as_ref().map(|h| h.status).unwrap_or_default(),
        health_message: status.health.as_ref().map(|h| bounded(&h.message)).unwrap_or_default(),
        operation,
        automated: app.spec.sync_policy.as_ref().is_some_and(|p| p.automated.is_some()),
        reconciled_at: status.reconciled_at.clone(),
        conditions: status
            .conditions
            .iter()
            .take(SUMMARY_CONDITIONS)
            .map(|c| ConditionSummary {
                type_: c.type_.clone(),
                message: bounded(&c.message),
            })
            .collect(),
        permissions: Permissions {
            sync: role >= Role::Sync,
            action: role >= Role::Action,
            admin: role >= Role::Admin,
        },
    }
}

/// `GET /api/applications/{name}`.
pub async fn get(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
) -> Result<Json<Application>, ApiError> {
    let app = authorized(&state, &auth, &name, Role::ReadOnly)?;
    Ok(Json(Application::clone(&app)))
}

/// `GET /api/applications/{name}/history`, newest first.
pub async fn history(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
) -> Result<Json<Items<RevisionHistory>>, ApiError> {
    let app = authorized(&state, &auth, &name, Role::ReadOnly)?;
    let mut items = app.status.as_ref().map(|s| s.history.clone()).unwrap_or_default();
    items.reverse();
    Ok(Json(Items { items }))
}

/// Compare `app` at the revision the controller last compared (its `status.sync`), so that the diff
/// and manifests answered are those of the sync status shown beside them; the server's own source
/// cache may not have seen a newer commit yet (it polls on its own). Before a first comparison, at
/// the target revision.
async fn compare(state: &State, app: &Application) -> Result<capstan_controller::pipeline::AppState, ApiError> {
    let unprocessable =
        |e: capstan_controller::PipelineError| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, e.to_string());
    let project = state.pipeline.project(app).await.map_err(unprocessable)?;
    let compared = app.status.as_ref().and_then(|s| s.sync.as_ref()).and_then(|s| {
        if !s.revisions.is_empty() {
            Some(s.revisions.join(","))
        } else {
            (!s.revision.is_empty()).then(|| s.revision.clone())
        }
    });
    let resolved = state
        .pipeline
        .resolve(app, &project, compared.as_deref(), false)
        .await
        .map_err(unprocessable)?;
    state
        .pipeline
        .compare(app, &project, resolved)
        .await
        .map_err(unprocessable)
}

/// `GET /api/applications/{name}/diff`: every out-of-sync object as a unified diff (live → desired).
pub async fn diff(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
) -> Result<Json<Diff>, ApiError> {
    let app = authorized(&state, &auth, &name, Role::ReadOnly)?;
    let compared = compare(&state, &app).await?;
    let objects = compared
        .comparison
        .resources
        .iter()
        .filter(|r| !r.hook && r.sync == capstan_compare::SyncCode::OutOfSync)
        .map(|r| {
            let mut r = r.clone();
            let mut live = r.live.clone();
            redact::redact_pair(&mut live, &mut r.predicted);
            redact::redact_pair(&mut r.live, &mut r.desired);
            ObjectDiff {
                group: r.key.group.clone(),
                kind: r.key.kind.clone(),
                namespace: r.key.namespace.clone(),
                name: r.key.name.clone(),
                status: if r.requires_pruning {
                    DiffStatus::RequiresPruning
                } else {
                    DiffStatus::OutOfSync
                },
                diff: capstan_compare::render_diff(&r),
            }
        })
        .collect();
    Ok(Json(Diff {
        revision: compared.revision.id(),
        objects,
    }))
}

/// `GET /api/applications/{name}/manifests`: the desired objects rendered from Git.
pub async fn manifests(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
) -> Result<Json<Manifests>, ApiError> {
    let app = authorized(&state, &auth, &name, Role::ReadOnly)?;
    let compared = compare(&state, &app).await?;
    let objects = compared
        .comparison
        .resources
        .iter()
        .filter_map(|r| r.desired.clone())
        .map(|mut o| {
            redact::redact(&mut o);
            o
        })
        .collect();
    Ok(Json(Manifests {
        revision: compared.revision.id(),
        objects,
    }))
}

/// Query of `GET /api/applications/{name}/resource`: which object of the tree.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ResourceQuery {
    /// API group (empty for the core group).
    #[serde(default)]
    group: String,
    /// API version (any when empty).
    #[serde(default)]
    version: String,
    /// Kind.
    kind: String,
    /// Namespace (empty for cluster-scoped objects).
    #[serde(default)]
    namespace: String,
    /// Name.
    name: String,
}

/// `GET /api/applications/{name}/resource`: the live object, if it is part of the Application's
/// tree.
pub async fn resource(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
    Query(q): Query<ResourceQuery>,
) -> Result<Json<Value>, ApiError> {
    let app = authorized(&state, &auth, &name, Role::ReadOnly)?;
    let tree = super::tree::build(&state, &app).await?;
    let node = tree
        .into_iter()
        .find(|n| n.group == q.group && n.kind == q.kind && n.namespace == q.namespace && n.name == q.name)
        .filter(|n| q.version.is_empty() || n.version == q.version)
        // A root the controller never found live (possibly one the project denies) is not read.
        .filter(super::tree::is_live_root)
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "{}/{} {:?} in the tree of Application {name:?}",
                q.group, q.kind, q.name
            ))
        })?;
    let dest = state
        .pipeline
        .destination(&app)
        .await
        .map_err(|e| ApiError::new(StatusCode::BAD_GATEWAY, e.to_string()))?;
    let api_version = if node.group.is_empty() {
        node.version.clone()
    } else {
        format!("{}/{}", node.group, node.version)
    };
    let info = dest
        .discovery
        .resolve(&api_version, &node.kind)
        .await
        .map_err(|e| ApiError::new(StatusCode::BAD_GATEWAY, e.to_string()))?
        .ok_or_else(|| ApiError::not_found(format!("kind {} ({api_version})", node.kind)))?;
    let api: Api<kube::api::DynamicObject> = if info.namespaced {
        Api::namespaced_with(dest.client.clone(), &node.namespace, &info.resource)
    } else {
        Api::all_with(dest.client.clone(), &info.resource)
    };
    let obj = api
        .get_opt(&node.name)
        .await
        .map_err(|e| ApiError::kube(&format!("reading {} {}", node.kind, node.name), &e))?
        .ok_or_else(|| ApiError::not_found(format!("{} {:?}", node.kind, node.name)))?;
    let mut value = serde_json::to_value(obj).unwrap_or_default();
    value["apiVersion"] = json!(api_version);
    value["kind"] = json!(node.kind);
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    redact::redact(&mut value);
    Ok(Json(value))
}

/// `GET /api/applications/{name}/events`: Events of the Application and of its objects.
pub async fn events(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
) -> Result<Json<Items<EventItem>>, ApiError> {
    let app = authorized(&state, &auth, &name, Role::ReadOnly)?;
    let mut items: Vec<Event> = Vec::new();
    let own: Api<Event> = Api::namespaced(state.client.clone(), &state.config.namespace);
    let lp = ListParams::default().fields(&format!("involvedObject.name={name},involvedObject.kind=Application"));
    items.extend(
        own.list(&lp)
            .await
            .map_err(|e| ApiError::kube("listing Events", &e))?
            .items,
    );
    // Objects of the tree, by namespace (one LIST per namespace the Application deploys to).
    if let Ok(dest) = state.pipeline.destination(&app).await {
        let tree = super::tree::build(&state, &app).await.unwrap_or_default();
        let mut by_ns: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        for n in tree.iter().filter(|n| !n.namespace.is_empty()) {
            by_ns
                .entry(n.namespace.clone())
                .or_default()
                .push((n.kind.clone(), n.name.clone()));
        }
        for (ns, objects) in by_ns {
            let api: Api<Event> = Api::namespaced(dest.client.clone(), &ns);
            if let Ok(list) = api.list(&ListParams::default()).await {
                items.extend(list.items.into_iter().filter(|e| {
                    let o = &e.involved_object;
                    objects
                        .iter()
                        .any(|(k, n)| o.kind.as_deref() == Some(k) && o.name.as_deref() == Some(n))
                }));
            }
        }
    }
    let when = |e: &Event| {
        e.last_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .or_else(|| e.event_time.as_ref().map(|t| t.0.to_string()))
            .unwrap_or_default()
    };
    items.sort_by_key(|e| std::cmp::Reverse(when(e)));
    let items = items
        .iter()
        .map(|e| {
            let o = &e.involved_object;
            EventItem {
                type_: e.type_.clone(),
                reason: e.reason.clone(),
                message: e.message.clone(),
                object: format!(
                    "{}/{}",
                    o.kind.clone().unwrap_or_default(),
                    o.name.clone().unwrap_or_default()
                ),
                count: e.count,
                last_timestamp: when(e),
            }
        })
        .collect();
    Ok(Json(Items { items }))
}

/// Body of `POST /api/applications/{name}/sync` (optional: an empty body syncs everything).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SyncBody {
    /// Delete objects no longer in Git.
    #[serde(default)]
    prune: bool,
    /// Validate against the API server without changing anything.
    #[serde(default)]
    dry_run: bool,
    /// Sync this revision instead of the target revision.
    #[serde(default)]
    revision: String,
    /// Only these objects, as `GROUP/KIND/NAMESPACE/NAME`.
    #[serde(default)]
    resources: Vec<String>,
    /// Sync options for this sync (`CreateNamespace=true`, `ServerSideApply=true`, …).
    #[serde(default)]
    sync_options: Vec<String>,
    /// Confirm deletions above the project's deletion budget (implies `prune`).
    #[serde(default)]
    allow_deletions: bool,
}

pub(super) async fn annotate(state: &State, name: &str, annotations: Value) -> Result<(), ApiError> {
    let api: Api<Application> = Api::namespaced(state.client.clone(), &state.config.namespace);
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": annotations}})),
    )
    .await
    .map(|_| ())
    .map_err(|e| ApiError::kube(&format!("updating Application {name}"), &e))
}

/// Refuse a manual operation that its dependencies or its project's sync windows do not let start
/// now (409 with the reason; the controller would refuse it too, later and less visibly).
pub(super) async fn not_held(state: &State, app: &Application) -> Result<(), ApiError> {
    let capstan_controller::projects::Project { name: project, spec } = match state.pipeline.project(app).await {
        Ok(found) => found,
        // The project itself is reported by the comparison and refused by the sync.
        Err(_) => return Ok(()),
    };
    let namespace = app.namespace().unwrap_or_default();
    let lookup = |name: &str| {
        state
            .apps
            .get(&kube::runtime::reflector::ObjectRef::new(name).within(&namespace))
            .map(|a| (*a).clone())
    };
    let at = capstan_controller::gates::system_now();
    match capstan_controller::gates::manual_refusal(app, &lookup, &project, &spec, at) {
        Some(why) => Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("cannot sync Application {:?} now: {why}", app.name_any()),
        )),
        None => Ok(()),
    }
}

/// Refuse a new operation while one runs or another request is pending (as Argo CD does), instead of
/// silently replacing someone else's request.
fn idle(app: &Application) -> Result<(), ApiError> {
    match app.busy() {
        Some(busy) => Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("{busy} for Application {:?}", app.name_any()),
        )),
        None => Ok(()),
    }
}

async fn request(state: &State, name: &str, op: Operation) -> Result<Accept<Requested>, ApiError> {
    let raw = serde_json::to_string(&op).map_err(|e| ApiError::bad_request(e.to_string()))?;
    annotate(state, name, json!({OPERATION_ANNOTATION: raw})).await?;
    Ok(Accept(Requested { requested: op }))
}

/// `POST /api/applications/{name}/sync`.
pub async fn sync(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
    body: Option<Json<SyncBody>>,
) -> Result<Accept<Requested>, ApiError> {
    let app = authorized(&state, &auth, &name, Role::Sync)?;
    idle(&app)?;
    not_held(&state, &app).await?;
    let body = body.map(|b| b.0).unwrap_or_default();
    // Delete-and-recreate is the retry action's, under the `action` role.
    if capstan_sync::SyncOptions::parse(&body.sync_options).force {
        return Err(ApiError::bad_request(
            "Force=true is not a sync request's option: retry a failed Job with its `retry` action (POST …/actions)",
        ));
    }
    for r in &body.resources {
        if capstan_kube::ObjectKey::parse(r).is_none() {
            return Err(ApiError::bad_request(format!(
                "invalid resource {r:?}: use GROUP/KIND/NAMESPACE/NAME"
            )));
        }
    }
    let op = Operation {
        sync: Some(SyncOperation {
            revision: body.revision,
            prune: body.prune || body.allow_deletions,
            dry_run: body.dry_run,
            resources: body.resources,
            sync_options: body.sync_options,
            allow_deletions: body.allow_deletions,
        }),
        rollback: None,
        id: capstan_api::operation::new_request_id(),
        initiated_by: auth.principal.name.clone(),
    };
    request(&state, &name, op).await
}

/// Body of `POST /api/applications/{name}/rollback`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RollbackBody {
    /// The history entry to go back to.
    id: i64,
    /// Delete objects that entry did not have (not with `revert`).
    #[serde(default)]
    prune: bool,
    /// Roll back by a Git revert commit on the Application's branch instead of syncing the old
    /// revision: allowed while automated sync is on (the sync then follows the branch). Answers
    /// 200 with the commit, 409 on a conflict, 422 when refused (a Helm chart source, sources in
    /// several repositories, a merge commit in the range, nothing to revert ...).
    #[serde(default)]
    revert: bool,
    /// Why (with `revert`: the commit message's body and the Event; at most 1000 characters).
    #[serde(default)]
    reason: Option<String>,
}

/// `POST /api/applications/{name}/rollback`.
pub async fn rollback(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
    Json(body): Json<RollbackBody>,
) -> Result<RollbackAnswer, ApiError> {
    let app = authorized(&state, &auth, &name, Role::Sync)?;
    if body.revert {
        return revert(&state, &auth, &name, &body).await.map(RollbackAnswer::Reverted);
    }
    if body.reason.is_some() {
        return Err(ApiError::bad_request("reason is only recorded with revert"));
    }
    // Refused now, with the reason, rather than recorded and refused by the controller later (an
    // Event nobody sees): 409 while automated sync is on (the Application's state conflicts),
    // 422 for an entry that is not in the history.
    let history = app.status.as_ref().map(|s| s.history.as_slice()).unwrap_or_default();
    if let Err(refused) = app.rollback_entry(history, body.id) {
        let status = match refused {
            RollbackRefused::Automated => StatusCode::CONFLICT,
            RollbackRefused::NoHistoryEntry { .. } => StatusCode::UNPROCESSABLE_ENTITY,
        };
        return Err(ApiError::new(status, format!("Application {name:?}: {refused}")));
    }
    idle(&app)?;
    not_held(&state, &app).await?;
    let op = Operation {
        sync: None,
        rollback: Some(RollbackOperation {
            id: body.id,
            prune: body.prune,
        }),
        id: capstan_api::operation::new_request_id(),
        initiated_by: auth.principal.name.clone(),
    };
    let Accept(requested) = request(&state, &name, op).await?;
    Ok(RollbackAnswer::Requested(requested))
}

/// A rollback by revert commit, with the repository credentials promotions use, authored by the
/// caller.
async fn revert(state: &State, auth: &Auth, name: &str, body: &RollbackBody) -> Result<Reverted, ApiError> {
    if body.prune {
        return Err(ApiError::bad_request(
            "prune does not apply to a revert: the sync that follows prunes as its policy says",
        ));
    }
    let reason = body.reason.as_deref().unwrap_or_default();
    if reason.chars().count() > capstan_promote::rollback::MAX_REASON_CHARS {
        return Err(ApiError::bad_request(format!(
            "reason is longer than {} characters",
            capstan_promote::rollback::MAX_REASON_CHARS
        )));
    }
    // Each revert fetches a branch's history into a scratch clone: two at a time per server.
    static REVERTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);
    let Ok(_turn) = REVERTS.try_acquire() else {
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "two reverts are running on this server: try again in a moment",
        ));
    };
    let mut promoter = capstan_promote::Promoter::new(state.client.clone(), state.config.namespace.clone());
    promoter.deny_implicit_default = state.config.deny_implicit_default_project;
    let reverted = promoter
        .revert_rollback(name, body.id, &auth.principal.name, reason, "capstan-server")
        .await
        .map_err(|err| {
            let status = match err.kind() {
                capstan_promote::ErrorKind::BadRequest => StatusCode::BAD_REQUEST,
                capstan_promote::ErrorKind::NotFound => StatusCode::NOT_FOUND,
                capstan_promote::ErrorKind::Conflict => StatusCode::CONFLICT,
                capstan_promote::ErrorKind::Unprocessable => StatusCode::UNPROCESSABLE_ENTITY,
                capstan_promote::ErrorKind::Forbidden => StatusCode::FORBIDDEN,
                capstan_promote::ErrorKind::Internal => StatusCode::BAD_GATEWAY,
            };
            ApiError::new(status, err.to_string())
        })?;
    Ok(Reverted {
        commit: reverted.sha,
        reverted: reverted.reverted,
        branch: reverted.branch,
    })
}

/// Body of `POST /api/applications/{name}/refresh` (optional).
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct RefreshBody {
    /// Render again, bypassing cached results.
    #[serde(default)]
    hard: bool,
}

/// `POST /api/applications/{name}/refresh`.
pub async fn refresh(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
    body: Option<Json<RefreshBody>>,
) -> Result<Accept<Refreshing>, ApiError> {
    authorized(&state, &auth, &name, Role::Sync)?;
    let (refresh, kind) = if body.is_some_and(|b| b.hard) {
        (RefreshKind::Hard, "hard")
    } else {
        (RefreshKind::Normal, "normal")
    };
    annotate(&state, &name, json!({REFRESH_ANNOTATION: kind})).await?;
    Ok(Accept(Refreshing { refresh }))
}

/// `DELETE /api/applications/{name}/operation`: ask the controller to stop the running operation.
pub async fn terminate(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
) -> Result<Accept<Terminating>, ApiError> {
    let app = authorized(&state, &auth, &name, Role::Sync)?;
    let running = app.operation_running();
    if !running {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("Application {name:?} has no running operation"),
        ));
    }
    annotate(&state, &name, json!({TERMINATE_ANNOTATION: auth.principal.name})).await?;
    Ok(Accept(Terminating { terminating: true }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_messages_are_bounded() {
        assert_eq!(bounded("short"), "short");
        let exact = "x".repeat(SUMMARY_MESSAGE);
        assert_eq!(bounded(&exact), exact);
        for long in ["y".repeat(10_000), "é".repeat(SUMMARY_MESSAGE)] {
            let cut = bounded(&long);
            assert!(cut.len() <= SUMMARY_MESSAGE && cut.ends_with('…'), "{}", cut.len());
            assert!(long.starts_with(cut.trim_end_matches('…')));
        }
    }
}

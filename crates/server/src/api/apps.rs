//! Application endpoints: list (with filters), get, diff, manifests, live objects, events, history,
//! and the operations (sync, refresh, rollback, terminate), which are requests written onto the
//! Application for the controller to execute — exactly what the CLI does.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State as AxState};
use axum::http::StatusCode;
use capstan_api::Application;
use capstan_api::cluster::{IN_CLUSTER_NAME, IN_CLUSTER_SERVER};
use capstan_api::labels::REFRESH_ANNOTATION;
use capstan_api::operation::{OPERATION_ANNOTATION, Operation, RollbackOperation, SyncOperation, TERMINATE_ANNOTATION};
use k8s_openapi::api::core::v1::Event;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde::Deserialize;
use serde_json::{Value, json};

use super::valid_name;
use crate::auth::Auth;
use crate::auth::rbac::Role;
use crate::error::ApiError;
use crate::redact;
use crate::state::State;

/// The cluster an Application deploys to, as shown in lists.
pub fn cluster_of(app: &Application) -> String {
    let d = &app.spec.destination;
    if !d.name.is_empty() {
        d.name.clone()
    } else if d.server.trim_end_matches('/') == IN_CLUSTER_SERVER || d.server.is_empty() {
        IN_CLUSTER_NAME.into()
    } else {
        d.server.clone()
    }
}

/// The project of `app` (`default` when empty).
pub fn project_of(app: &Application) -> &str {
    if app.spec.project.is_empty() {
        "default"
    } else {
        &app.spec.project
    }
}

/// The summary of `app` shown in lists and live updates.
pub fn summary(app: &Application, role: Role) -> Value {
    let status = app.status.clone().unwrap_or_default();
    let op = status.operation_state.as_ref().map(
        |o| json!({"phase": o.phase, "message": o.message, "startedAt": o.started_at, "finishedAt": o.finished_at}),
    );
    json!({
        "name": app.name_any(),
        "namespace": app.namespace().unwrap_or_default(),
        "project": project_of(app),
        "labels": app.labels(),
        "repoURL": app.spec.source.repo_url,
        "path": app.spec.source.path,
        "targetRevision": app.spec.source.target_revision,
        "cluster": cluster_of(app),
        "server": app.spec.destination.server,
        "destNamespace": app.spec.destination.namespace,
        "sync": status.sync.as_ref().map(|s| s.status.as_str()).unwrap_or("Unknown"),
        "revision": status.sync.as_ref().map(|s| s.revision.as_str()).unwrap_or(""),
        "health": status.health.as_ref().map(|h| h.status.as_str()).unwrap_or("Unknown"),
        "healthMessage": status.health.as_ref().map(|h| h.message.as_str()).unwrap_or(""),
        "operation": op,
        "automated": app.spec.sync_policy.as_ref().is_some_and(|p| p.automated.is_some()),
        "reconciledAt": status.reconciled_at,
        "conditions": status.conditions.iter().map(|c| json!({"type": c.type_, "message": c.message})).collect::<Vec<_>>(),
        "permissions": {"sync": role >= Role::Sync, "admin": role >= Role::Admin},
    })
}

/// Query filters of the list.
#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    project: Option<String>,
    cluster: Option<String>,
    namespace: Option<String>,
    sync: Option<String>,
    health: Option<String>,
    label: Option<String>,
    search: Option<String>,
}

impl ListQuery {
    fn matches(&self, s: &Value) -> bool {
        let eq = |want: &Option<String>, field: &str| {
            want.as_deref()
                .filter(|w| !w.is_empty())
                .is_none_or(|w| s.get(field).and_then(Value::as_str) == Some(w))
        };
        let label = self.label.as_deref().filter(|l| !l.is_empty()).is_none_or(|l| {
            let (k, v) = l.split_once('=').unwrap_or((l, ""));
            s.pointer(&format!("/labels/{}", k.replace('~', "~0").replace('/', "~1")))
                .and_then(Value::as_str)
                .is_some_and(|have| v.is_empty() || have == v)
        });
        let search = self.search.as_deref().filter(|q| !q.is_empty()).is_none_or(|q| {
            s.get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| n.contains(&q.to_lowercase()))
        });
        eq(&self.project, "project")
            && eq(&self.cluster, "cluster")
            && eq(&self.namespace, "destNamespace")
            && eq(&self.sync, "sync")
            && eq(&self.health, "health")
            && label
            && search
    }
}

/// `GET /api/applications`.
pub async fn list(auth: Auth, AxState(state): AxState<Arc<State>>, Query(q): Query<ListQuery>) -> Json<Value> {
    let policy = state.policy();
    let mut items: Vec<Value> = state
        .apps
        .state()
        .iter()
        .filter_map(|app| {
            let role = policy.role(&auth.principal, project_of(app));
            (role >= Role::ReadOnly).then(|| summary(app, role))
        })
        .filter(|s| q.matches(s))
        .collect();
    items.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Json(json!({"items": items}))
}

/// The Application `name` if `auth` may act on it with `needed`: 404 when it does not exist or the
/// caller may not even read it (no disclosure of names), 403 when it may read but not act.
pub fn authorized(state: &State, auth: &Auth, name: &str, needed: Role) -> Result<Arc<Application>, ApiError> {
    valid_name(name)?;
    let app = state
        .app(name)
        .ok_or_else(|| ApiError::not_found(format!("Application {name:?}")))?;
    let project = project_of(&app);
    if auth.role(state, project) < Role::ReadOnly {
        return Err(ApiError::not_found(format!("Application {name:?}")));
    }
    auth.require(state, project, needed)?;
    Ok(app)
}

/// `GET /api/applications/{name}`.
pub async fn get(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = authorized(&state, &auth, &name, Role::ReadOnly)?;
    Ok(Json(serde_json::to_value(&*app).unwrap_or_default()))
}

/// `GET /api/applications/{name}/history`, newest first.
pub async fn history(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = authorized(&state, &auth, &name, Role::ReadOnly)?;
    let mut items = app.status.as_ref().map(|s| s.history.clone()).unwrap_or_default();
    items.reverse();
    Ok(Json(json!({"items": items})))
}

async fn compare(state: &State, app: &Application) -> Result<capstan_controller::pipeline::AppState, ApiError> {
    let resolved = state
        .pipeline
        .resolve(app, None, false)
        .await
        .map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()))?;
    state
        .pipeline
        .compare(app, resolved)
        .await
        .map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()))
}

/// `GET /api/applications/{name}/diff`: every out-of-sync object as a unified diff (live → desired).
pub async fn diff(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = authorized(&state, &auth, &name, Role::ReadOnly)?;
    let compared = compare(&state, &app).await?;
    let objects: Vec<Value> = compared
        .comparison
        .resources
        .iter()
        .filter(|r| !r.hook && r.sync == capstan_compare::SyncCode::OutOfSync)
        .map(|r| {
            let mut r = r.clone();
            let mut live = r.live.clone();
            redact::redact_pair(&mut live, &mut r.predicted);
            redact::redact_pair(&mut r.live, &mut r.desired);
            json!({
                "group": r.key.group, "kind": r.key.kind, "namespace": r.key.namespace, "name": r.key.name,
                "status": if r.requires_pruning { "RequiresPruning" } else { "OutOfSync" },
                "diff": capstan_compare::render_diff(&r),
            })
        })
        .collect();
    Ok(Json(json!({"revision": compared.revision.sha, "objects": objects})))
}

/// `GET /api/applications/{name}/manifests`: the desired objects rendered from Git.
pub async fn manifests(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = authorized(&state, &auth, &name, Role::ReadOnly)?;
    let compared = compare(&state, &app).await?;
    let objects: Vec<Value> = compared
        .comparison
        .resources
        .iter()
        .filter_map(|r| r.desired.clone())
        .map(|mut o| {
            redact::redact(&mut o);
            o
        })
        .collect();
    Ok(Json(json!({"revision": compared.revision.sha, "objects": objects})))
}

/// Query of `GET /api/applications/{name}/resource`.
#[derive(Debug, Deserialize)]
pub struct ResourceQuery {
    #[serde(default)]
    group: String,
    #[serde(default)]
    version: String,
    kind: String,
    #[serde(default)]
    namespace: String,
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
) -> Result<Json<Value>, ApiError> {
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
    let items: Vec<Value> = items
        .iter()
        .map(|e| {
            let o = &e.involved_object;
            json!({
                "type": e.type_, "reason": e.reason, "message": e.message,
                "object": format!("{}/{}", o.kind.clone().unwrap_or_default(), o.name.clone().unwrap_or_default()),
                "count": e.count, "lastTimestamp": when(e),
            })
        })
        .collect();
    Ok(Json(json!({"items": items})))
}

/// Body of `POST /api/applications/{name}/sync`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SyncBody {
    #[serde(default)]
    prune: bool,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    revision: String,
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    sync_options: Vec<String>,
}

async fn annotate(state: &State, name: &str, annotations: Value) -> Result<(), ApiError> {
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

/// Refuse a new operation while one runs or another request is pending (as Argo CD does), instead of
/// silently replacing someone else's request.
fn idle(app: &Application) -> Result<(), ApiError> {
    let running = capstan_api::operation::operation_running(app);
    let pending = capstan_api::operation::pending_request(app).is_some();
    if running || pending {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "another operation is already {} for Application {:?}",
                if running { "in progress" } else { "requested" },
                app.name_any()
            ),
        ));
    }
    Ok(())
}

async fn request(state: &State, name: &str, op: Operation) -> Result<(StatusCode, Json<Value>), ApiError> {
    let raw = serde_json::to_string(&op).map_err(|e| ApiError::bad_request(e.to_string()))?;
    annotate(state, name, json!({OPERATION_ANNOTATION: raw})).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({"requested": op}))))
}

/// `POST /api/applications/{name}/sync`.
pub async fn sync(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
    body: Option<Json<SyncBody>>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let app = authorized(&state, &auth, &name, Role::Sync)?;
    idle(&app)?;
    let body = body.map(|b| b.0).unwrap_or_default();
    for r in &body.resources {
        if r.split('/').count() != 4 {
            return Err(ApiError::bad_request(format!(
                "invalid resource {r:?}: use GROUP/KIND/NAMESPACE/NAME"
            )));
        }
    }
    let op = Operation {
        sync: Some(SyncOperation {
            revision: body.revision,
            prune: body.prune,
            dry_run: body.dry_run,
            resources: body.resources,
            sync_options: body.sync_options,
        }),
        rollback: None,
        id: capstan_api::operation::new_request_id(),
        initiated_by: auth.principal.name.clone(),
    };
    request(&state, &name, op).await
}

/// Body of `POST /api/applications/{name}/rollback`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RollbackBody {
    id: i64,
    #[serde(default)]
    prune: bool,
}

/// `POST /api/applications/{name}/rollback`.
pub async fn rollback(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
    Json(body): Json<RollbackBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let app = authorized(&state, &auth, &name, Role::Sync)?;
    idle(&app)?;
    if app.spec.sync_policy.as_ref().is_some_and(|p| p.automated.is_some()) {
        return Err(ApiError::bad_request(
            "rollback is not allowed while automated sync is enabled: disable syncPolicy.automated first",
        ));
    }
    let known = app
        .status
        .as_ref()
        .is_some_and(|s| s.history.iter().any(|h| h.id == body.id));
    if !known {
        return Err(ApiError::bad_request(format!(
            "Application {name:?} has no history entry {}",
            body.id
        )));
    }
    let op = Operation {
        sync: None,
        rollback: Some(RollbackOperation {
            id: body.id,
            prune: body.prune,
        }),
        id: capstan_api::operation::new_request_id(),
        initiated_by: auth.principal.name.clone(),
    };
    request(&state, &name, op).await
}

/// Body of `POST /api/applications/{name}/refresh`.
#[derive(Debug, Default, Deserialize)]
pub struct RefreshBody {
    #[serde(default)]
    hard: bool,
}

/// `POST /api/applications/{name}/refresh`.
pub async fn refresh(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
    body: Option<Json<RefreshBody>>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    authorized(&state, &auth, &name, Role::Sync)?;
    let kind = if body.is_some_and(|b| b.hard) { "hard" } else { "normal" };
    annotate(&state, &name, json!({REFRESH_ANNOTATION: kind})).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({"refresh": kind}))))
}

/// `DELETE /api/applications/{name}/operation`: ask the controller to stop the running operation.
pub async fn terminate(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let app = authorized(&state, &auth, &name, Role::Sync)?;
    let running = capstan_api::operation::operation_running(&app);
    if !running {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("Application {name:?} has no running operation"),
        ));
    }
    annotate(&state, &name, json!({TERMINATE_ANNOTATION: auth.principal.name})).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({"terminating": true}))))
}

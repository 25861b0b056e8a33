//! ApplicationSets and clusters, read-only. Cluster credentials never leave the server: only the
//! name, server, Secret name, labels, annotations, managed namespaces and the connection state the
//! controller records are answered.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State as AxState};
use capstan_api::ApplicationSet;
use capstan_api::cluster::{IN_CLUSTER_NAME, IN_CLUSTER_SERVER};
use capstan_cluster::status::{ConnectionState, STATUS_CONFIGMAP, key_for};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, ResourceExt};
use serde_json::Value;

use super::model::{AppSetSummary, ClusterItem, Items};
use super::valid_name;
use crate::auth::Auth;
use crate::auth::rbac::Role;
use crate::error::ApiError;
use crate::state::State;

/// The project a set's Applications belong to; a templated project could be any, so it is `*`
/// (only a grant on every project may read such a set).
pub(crate) fn appset_project(set: &ApplicationSet) -> String {
    let project = serde_json::to_value(&set.spec.template)
        .ok()
        .and_then(|t| t.pointer("/spec/project").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_default();
    if project.contains("{{") {
        "*".into()
    } else if project.is_empty() {
        "default".into()
    } else {
        project
    }
}

fn appset_summary(set: &ApplicationSet) -> AppSetSummary {
    let status = set.status.clone().unwrap_or_default();
    AppSetSummary {
        name: set.name_any(),
        project: appset_project(set),
        generators: set.spec.generators.len(),
        applications: status.resources.len(),
        conditions: status.conditions,
        rolling_sync: serde_json::to_value(&set.spec)
            .ok()
            .and_then(|s| s.pointer("/strategy/rollingSync").cloned()),
    }
}

/// `GET /api/applicationsets`: the sets whose (templated) project the caller may read.
pub async fn list(auth: Auth, AxState(state): AxState<Arc<State>>) -> Json<Items<AppSetSummary>> {
    let policy = state.policy();
    let mut items: Vec<AppSetSummary> = state
        .appsets
        .state()
        .iter()
        .filter(|s| policy.role(&auth.principal, &appset_project(s)) >= Role::ReadOnly)
        .map(|s| appset_summary(s))
        .collect();
    items.sort_by(|a, b| a.name.cmp(&b.name));
    Json(Items { items })
}

/// `GET /api/applicationsets/{name}`.
pub async fn get(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
) -> Result<Json<ApplicationSet>, ApiError> {
    valid_name(&name)?;
    let set = state
        .appsets
        .state()
        .into_iter()
        .find(|s| s.name_any() == name)
        .filter(|s| auth.role(&state, &appset_project(s)) >= Role::ReadOnly)
        .ok_or_else(|| ApiError::not_found(format!("ApplicationSet {name:?}")))?;
    Ok(Json(ApplicationSet::clone(&set)))
}

/// `GET /api/clusters`: every destination with its labels and last known connection state.
pub async fn clusters(auth: Auth, AxState(state): AxState<Arc<State>>) -> Result<Json<Items<ClusterItem>>, ApiError> {
    // Cluster metadata is visible to anyone who may read some project.
    let policy = state.policy();
    let any = policy.default >= Role::ReadOnly
        || policy.role(&auth.principal, "*") >= Role::ReadOnly
        || state
            .apps
            .state()
            .iter()
            .any(|a| policy.role(&auth.principal, super::access::project_of(a)) >= Role::ReadOnly);
    if !any {
        return Err(ApiError::new(
            axum::http::StatusCode::FORBIDDEN,
            format!("{} may not read any project", auth.principal.name),
        ));
    }
    let sees_all = policy.role(&auth.principal, "*") >= Role::Admin;
    let maps: Api<ConfigMap> = Api::namespaced(state.client.clone(), &state.config.namespace);
    let recorded = maps
        .get_opt(STATUS_CONFIGMAP)
        .await
        .map_err(|e| ApiError::kube("reading the cluster status", &e))?
        .and_then(|m| m.data)
        .unwrap_or_default();
    let connection = |name: &str| {
        recorded
            .get(&key_for(name))
            .map(|t| ConnectionState::from_json(t))
            .unwrap_or_else(|| ConnectionState::from_json(""))
    };
    let items = state
        .pipeline
        .clusters
        .all()
        .iter()
        .map(|d| {
            let c = connection(&d.name);
            // From the Secret as it is now (`in-cluster`'s metadata-only Secret included).
            let mut metadata = state.pipeline.clusters.metadata_of(&d.name).unwrap_or_default();
            // Annotations (any tool's, some copy whole objects into them) and the namespaces
            // every team deploys to are for administrators of every project only.
            if !sees_all {
                metadata.annotations.clear();
                metadata.namespaces.clear();
            }
            let server = if d.name == IN_CLUSTER_NAME {
                IN_CLUSTER_SERVER.to_string()
            } else {
                d.server.clone()
            };
            ClusterItem {
                name: d.name.clone(),
                server,
                secret: metadata.secret,
                labels: metadata.labels,
                annotations: metadata.annotations,
                namespaces: metadata.namespaces,
                state: c.status,
                version: c.server_version,
                message: c.message,
                checked_at: c.checked_at,
            }
        })
        .collect();
    Ok(Json(Items { items }))
}

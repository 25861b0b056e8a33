//! Deleting an Application through the API (`DELETE /api/applications/{name}`), as `capstan app
//! delete` does with a kubeconfig: with the objects it deployed (Capstan's resources finalizer, the
//! default, as Argo CD's cascade) or leaving them running (`cascade=false`). Deleting needs the
//! `admin` role in the Application's project (Argo CD's built-in roles keep `delete` for admins) and
//! is recorded in an Event naming the user.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State as AxState};
use capstan_api::Application;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::access::authorized;
use super::audit;
use crate::auth::Auth;
use crate::auth::rbac::Role;
use crate::error::ApiError;
use crate::state::State;

/// Query of `DELETE /api/applications/{name}`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct DeleteQuery {
    /// Delete the Application's objects too (default true); false leaves them running, no longer
    /// managed.
    #[serde(default = "yes")]
    pub cascade: bool,
}

fn yes() -> bool {
    true
}

/// The answer: deletion has started (the controller removes the objects, then the finalizer).
#[derive(Debug, Serialize, JsonSchema)]
pub struct Deleting {
    /// Whether the objects are deleted too.
    pub cascade: bool,
}

/// `DELETE /api/applications/{name}?cascade=true|false`.
pub async fn delete(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
    Query(query): Query<DeleteQuery>,
) -> Result<Json<Deleting>, ApiError> {
    let app = authorized(&state, &auth, &name, Role::Admin)?;
    let api: Api<Application> = Api::namespaced(state.client.clone(), &state.config.namespace);
    // The Application the caller was allowed to delete, not one recreated meanwhile in another
    // project under the same name.
    let uid = app.uid();
    if let Some(finalizers) = app.finalizers_for_delete(query.cascade) {
        let patch = json!({"metadata": {"uid": uid, "finalizers": finalizers}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(|e| ApiError::kube(&format!("updating the finalizers of Application {name}"), &e))?;
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    api.delete(&name, &params)
        .await
        .map_err(|e| ApiError::kube(&format!("deleting Application {name}"), &e))?;
    let what = if query.cascade {
        "with its resources"
    } else {
        "leaving its resources"
    };
    let note = format!("{} deleted the Application {what}", auth.principal.name);
    audit::record(&state, &app, "ApplicationDeleted", "Delete", &note).await;
    tracing::info!(application = %name, user = %auth.principal.name, cascade = query.cascade, "Application deleted");
    Ok(Json(Deleting { cascade: query.cascade }))
}

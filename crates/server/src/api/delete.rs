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

use super::access::{authorized, project_of};
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
    authorized(&state, &auth, &name, Role::Admin)?;
    let api: Api<Application> = Api::namespaced(state.client.clone(), &state.config.namespace);
    // Judged again on the Application as the API server has it now (this server's copy may lag a
    // move to another project), and deleted only as it was judged: the same uid (not one recreated
    // under the name) and resourceVersion. A change in between is judged afresh.
    let mut attempts = 0;
    let app = loop {
        attempts += 1;
        let app = api
            .get_opt(&name)
            .await
            .map_err(|e| ApiError::kube(&format!("reading Application {name}"), &e))?
            .ok_or_else(|| ApiError::not_found(format!("Application {name:?}")))?;
        let project = project_of(&app);
        if auth.role(&state, project) < Role::ReadOnly {
            return Err(ApiError::not_found(format!("Application {name:?}")));
        }
        auth.require(&state, project, Role::Admin)?;
        match delete_as_judged(&api, &app, query.cascade).await {
            Ok(()) => break app,
            Err(kube::Error::Api(e)) if e.code == 409 && attempts < 3 => continue,
            Err(e) => return Err(ApiError::kube(&format!("deleting Application {name}"), &e)),
        }
    };
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

/// Set the finalizers `cascade` asks for, then delete `app`, both on the condition that it is still
/// the version read.
async fn delete_as_judged(api: &Api<Application>, app: &Application, cascade: bool) -> Result<(), kube::Error> {
    let name = app.name_any();
    let uid = app.uid();
    let mut version = app.resource_version();
    if let Some(finalizers) = app.finalizers_for_delete(cascade) {
        let patch = json!({"metadata": {"uid": uid, "resourceVersion": version, "finalizers": finalizers}});
        let patched = api.patch(&name, &PatchParams::default(), &Patch::Merge(patch)).await?;
        version = patched.resource_version();
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version: version,
        }),
        ..DeleteParams::default()
    };
    api.delete(&name, &params).await.map(|_| ())
}

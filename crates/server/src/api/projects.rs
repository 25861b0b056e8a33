//! AppProjects, read-only: `GET /api/projects/{name}` answers a project to a caller holding a role
//! in it (any other caller gets 404, as for Applications: no disclosure of names). The CLI shows a
//! project's sync windows from it, and `app get` the windows that apply to an Application.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State as AxState};
use capstan_api::AppProject;
use kube::Api;

use super::valid_name;
use crate::auth::Auth;
use crate::auth::rbac::Role;
use crate::error::ApiError;
use crate::state::State;

/// `GET /api/projects/{name}`.
pub async fn get(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
) -> Result<Json<AppProject>, ApiError> {
    valid_name(&name)?;
    let not_found = || ApiError::not_found(format!("AppProject {name:?}"));
    if auth.role(&state, &name) < Role::ReadOnly {
        return Err(not_found());
    }
    let api: Api<AppProject> = Api::namespaced(state.client.clone(), &state.config.namespace);
    let mut project = api
        .get_opt(&name)
        .await
        .map_err(|e| ApiError::kube(&format!("reading AppProject {name}"), &e))?
        .ok_or_else(not_found)?;
    // Who wrote what when is the API server's business, not the caller's.
    project.metadata.managed_fields = None;
    Ok(Json(project))
}

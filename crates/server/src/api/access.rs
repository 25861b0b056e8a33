//! Who may see and act on an Application: the lookup every Application endpoint starts with, and
//! the project and cluster an Application is filed under.

use std::sync::Arc;

use capstan_api::Application;
use capstan_api::cluster::{IN_CLUSTER_NAME, IN_CLUSTER_SERVER};

use super::valid_name;
use crate::auth::Auth;
use crate::auth::rbac::Role;
use crate::error::ApiError;
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
    capstan_api::project::project_name(&app.spec.project)
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

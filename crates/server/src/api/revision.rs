//! `GET /api/applications/{name}/revisions/{revision}/metadata`: author, date and message of a commit
//! the Application deploys or deployed, read from the server's Git cache (the web UI's header shows
//! them). Only commits of the Application's own Git source are read; one the cache lacks is fetched
//! as for a diff (through the project's rules and the repository's credentials).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State as AxState};
use axum::http::StatusCode;

use super::access::authorized;
use super::model::RevisionMetadata;
use crate::auth::Auth;
use crate::auth::rbac::Role;
use crate::error::ApiError;
use crate::state::State;

/// The metadata of `revision` (a full commit SHA) in one of the Application's Git sources.
pub async fn metadata(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path((name, revision)): Path<(String, String)>,
) -> Result<Json<RevisionMetadata>, ApiError> {
    let app = authorized(&state, &auth, &name, Role::ReadOnly)?;
    let sha = revision.to_ascii_lowercase();
    if sha.len() != 40 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApiError::bad_request(format!(
            "revision {revision:?} is not a full commit SHA (40 hexadecimal digits)"
        )));
    }
    let not_found = || ApiError::not_found(format!("commit {sha} in the Git source of Application {name:?}"));
    if app.spec.is_multi_source() || app.spec.source.is_chart() {
        return Err(not_found());
    }
    let url = &app.spec.source.repo_url;
    let read = |info: Result<Option<capstan_source::CommitInfo>, capstan_source::SourceError>| match info {
        Ok(found) => Ok(found.map(|info| {
            Json(RevisionMetadata {
                author: info.author,
                date: info.date,
                message: info.message,
            })
        })),
        Err(err) => Err(ApiError::new(StatusCode::BAD_GATEWAY, err.to_string())),
    };
    if let Some(found) = read(state.pipeline.repos.commit_info(url, &sha).await)? {
        return Ok(found);
    }
    // Not in the server's cache yet: resolving the commit fetches it (or says it does not exist).
    let project = state.pipeline.project(&app).await;
    let resolved = match project {
        Ok(project) => state.pipeline.resolve(&app, &project, Some(&sha), false).await,
        Err(e) => Err(e),
    };
    resolved.map_err(|e| {
        tracing::debug!(app = %name, %sha, err = %e, "revision metadata: commit not resolved");
        not_found()
    })?;
    read(state.pipeline.repos.commit_info(url, &sha).await)?.ok_or_else(not_found)
}

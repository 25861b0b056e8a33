//! `POST /api/plan`: what a revision of a repository would change (docs/guardrails.md, "Plan"),
//! the same plan `capstan plan` makes ([`capstan_plan`]), with nothing applied. The caller sees
//! only the Applications and ApplicationSets it may read, and may plan only a repository that one
//! of them follows: the server fetches no URL a caller merely names. Plans render and compare
//! whole fleets, so at most [`AT_ONCE`] run at a time; one more is answered 429.

use std::sync::{Arc, LazyLock};

use axum::Json;
use axum::extract::State as AxState;
use axum::http::StatusCode;
use capstan_api::RepoUrl;
use capstan_plan::{Plan, PlanError, PlanRequest};
use kube::ResourceExt;
use schemars::JsonSchema;
use serde::Deserialize;

use super::access::project_of;
use super::fleet::appset_project;
use crate::auth::Auth;
use crate::auth::rbac::Role;
use crate::error::ApiError;
use crate::state::State;

/// Plans run at once by this server.
pub const AT_ONCE: usize = 2;

static RUNNING: LazyLock<tokio::sync::Semaphore> = LazyLock::new(|| tokio::sync::Semaphore::new(AT_ONCE));

/// Body of `POST /api/plan`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlanBody {
    /// The repository's URL (one an Application or ApplicationSet the caller may read follows).
    pub repo: String,
    /// The branch, tag or commit to plan.
    pub revision: String,
    /// Only what follows this revision of the repository (the pull request's target branch).
    #[serde(default)]
    pub base: Option<String>,
}

fn revision_ok(what: &str, r: &str) -> Result<(), ApiError> {
    if r.is_empty() || r.len() > 255 || r.starts_with('-') || r.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(ApiError::bad_request(format!("invalid {what} {r:?}")));
    }
    Ok(())
}

/// `POST /api/plan`.
pub async fn plan(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Json(body): Json<PlanBody>,
) -> Result<Json<Plan>, ApiError> {
    revision_ok("revision", &body.revision)?;
    if let Some(base) = &body.base {
        revision_ok("base", base)?;
    }
    let repo = RepoUrl::parse(&body.repo).map_err(|e| ApiError::bad_request(format!("repo: {e}")))?;
    let follows = |url: &str| RepoUrl::parse(url).is_ok_and(|u| u.same_repository(&repo));
    let readable_app = |app: &capstan_api::Application| auth.role(&state, project_of(app)) >= Role::ReadOnly;
    let followed = state
        .apps
        .state()
        .iter()
        .any(|a| readable_app(a) && a.spec.sources().iter().any(|s| follows(&s.repo_url)))
        || state.appsets.state().iter().any(|s| {
            auth.role(&state, &appset_project(s)) >= Role::ReadOnly
                && capstan_appset::git_sources(&s.spec).is_ok_and(|g| g.iter().any(|g| follows(&g.repo_url)))
        });
    if !followed {
        return Err(ApiError::not_found(format!(
            "an Application or ApplicationSet you may read that follows {}",
            body.repo
        )));
    }
    let Ok(_permit) = RUNNING.try_acquire() else {
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!("{AT_ONCE} plans are running already: try again when one is done"),
        ));
    };
    let request = PlanRequest {
        repo: body.repo,
        revision: body.revision,
        base: body.base,
    };
    let mut plan = capstan_plan::plan(&state.pipeline, &request)
        .await
        .map_err(|e| match e {
            PlanError::Revision { .. } => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
            other => ApiError::new(StatusCode::BAD_GATEWAY, other.to_string()),
        })?;
    plan.applications
        .retain(|a| state.app(&a.name).is_some_and(|app| readable_app(&app)));
    let sets = state.appsets.state();
    plan.application_sets.retain(|p| {
        sets.iter()
            .find(|s| s.name_any() == p.name)
            .is_some_and(|s| auth.role(&state, &appset_project(s)) >= Role::ReadOnly)
    });
    Ok(Json(plan))
}

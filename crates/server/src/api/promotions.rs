//! Promotions between environments over HTTP: `POST /api/promotions` and its dry run
//! `POST /api/promotions/preview` (both need the `promote` role on the target environment's
//! Application), and `GET /api/promotions/{pipeline}/history`. The rules, the plan and the commit are
//! `capstan-promote`'s, shared with the CLI.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State as AxState};
use axum::http::StatusCode;
use capstan_api::promotion::{FieldChange, PromotionRecord};
use capstan_promote::{ErrorKind, Outcome, PromoteError, PromoteRequest, Promoter};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::access::{authorized, project_of};
use super::model::Items;
use super::valid_name;
use crate::auth::Auth;
use crate::auth::rbac::Role;
use crate::error::ApiError;
use crate::state::State;

/// Body of `POST /api/promotions`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PromoteBody {
    /// The PromotionPipeline (optional when exactly one exists).
    #[serde(default)]
    pipeline: Option<String>,
    /// The service to promote.
    service: String,
    /// The source environment.
    from: String,
    /// The target environment.
    to: String,
    /// Override a failing check (the source not Synced and Healthy, a backwards promotion).
    #[serde(default)]
    force: bool,
    /// Why the checks are overridden (required with `force`, recorded in the commit message).
    #[serde(default)]
    reason: String,
    /// The `sourceRevision` of the preview the caller confirmed: refused with 409 if the source
    /// Application has moved since.
    #[serde(default, rename = "expectedSourceRevision")]
    expected_source_revision: Option<String>,
}

/// What a promotion did.
#[derive(Debug, Serialize, JsonSchema)]
pub struct PromoteAnswer {
    /// `promoted` (one commit pushed) or `unchanged` (the target had the values already).
    pub result: String,
    /// The pipeline used.
    pub pipeline: String,
    /// The history entry recorded (promoted only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promotion: Option<PromotionRecord>,
}

/// What a promotion would change (`POST /api/promotions/preview`): nothing is committed.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreviewAnswer {
    /// The pipeline used.
    pub pipeline: String,
    /// The source environment's Application.
    pub source_application: String,
    /// The target environment's Application.
    pub target_application: String,
    /// The commit the source's values are read at (its synced revision).
    pub source_revision: String,
    /// The file a promotion changes.
    pub path: String,
    /// The branch head the target's file was read at.
    pub target_revision: String,
    /// Each promoted field that differs, the target's value → the source's (empty: nothing to do).
    pub changes: Vec<FieldChange>,
    /// Whether the checks pass (the source Synced and Healthy, the promotion forward); when not, a
    /// promotion needs `force` and a reason.
    pub checks_passed: bool,
    /// Why the checks fail.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check_failure: Option<String>,
    /// The target file before → after, as a unified diff (empty when nothing changes).
    pub diff: String,
}

/// Query of the history.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct HistoryQuery {
    /// Only this service's promotions.
    #[serde(default)]
    service: Option<String>,
}

pub(crate) fn api_error(err: PromoteError) -> ApiError {
    let status = match err.kind() {
        ErrorKind::BadRequest => StatusCode::BAD_REQUEST,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::Unprocessable => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorKind::Forbidden => StatusCode::FORBIDDEN,
        ErrorKind::Internal => StatusCode::BAD_GATEWAY,
    };
    ApiError::new(status, err.to_string())
}

/// The pipeline of `body`, with its names checked and the caller's `promote` role on the target
/// environment's Application checked: what both the promotion and its preview start with.
async fn authorized_request(state: &State, auth: &Auth, body: PromoteBody) -> Result<PromoteRequest, ApiError> {
    if let Some(name) = &body.pipeline {
        valid_name(name)?;
    }
    let namespace = &state.config.namespace;
    let pipeline = capstan_promote::find_pipeline(&state.client, namespace, body.pipeline.as_deref())
        .await
        .map_err(api_error)?;
    let pipeline_name = pipeline.metadata.name.clone().unwrap_or_default();
    capstan_promote::check_names(&pipeline.spec, &body.service, &body.from, &body.to).map_err(api_error)?;
    let target = pipeline.spec.application(&body.service, &body.to);
    authorized(state, auth, &target, Role::Promote)?;
    // The source's state and values are shown too: the caller must be able to read it (not found
    // otherwise, as for any Application the caller may not see).
    let source = pipeline.spec.application(&body.service, &body.from);
    authorized(state, auth, &source, Role::ReadOnly)?;
    Ok(PromoteRequest {
        pipeline: Some(pipeline_name),
        service: body.service,
        from: body.from,
        to: body.to,
        force: body.force,
        reason: body.reason,
        user: auth.principal.name.clone(),
        expected_source_revision: body.expected_source_revision,
    })
}

/// `POST /api/promotions/preview`: what `POST /api/promotions` with the same body would change, and
/// whether its checks pass, without committing.
pub async fn preview(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Json(body): Json<PromoteBody>,
) -> Result<Json<PreviewAnswer>, ApiError> {
    let request = authorized_request(&state, &auth, body).await?;
    let mut promoter = Promoter::new(state.client.clone(), state.config.namespace.clone());
    promoter.deny_implicit_default = state.config.deny_implicit_default_project;
    let plan = promoter.plan(&request).await.map_err(api_error)?;
    Ok(Json(PreviewAnswer {
        diff: plan.diff(),
        pipeline: plan.pipeline,
        source_application: plan.source_app,
        target_application: plan.target_app,
        source_revision: plan.source_revision,
        path: plan.target_path,
        target_revision: plan.target_revision,
        changes: plan.changes,
        checks_passed: plan.check_failure.is_none(),
        check_failure: plan.check_failure.map(|e| e.to_string()),
    }))
}

/// `POST /api/promotions`: copy the promoted fields of a service from one environment's file to
/// another's, as one commit.
pub async fn promote(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Json(body): Json<PromoteBody>,
) -> Result<Json<PromoteAnswer>, ApiError> {
    let request = authorized_request(&state, &auth, body).await?;
    let mut promoter = Promoter::new(state.client.clone(), state.config.namespace.clone());
    promoter.deny_implicit_default = state.config.deny_implicit_default_project;
    let answer = match promoter.promote(&request).await.map_err(api_error)? {
        Outcome::Unchanged { pipeline } => PromoteAnswer {
            result: "unchanged".into(),
            pipeline,
            promotion: None,
        },
        Outcome::Promoted { pipeline, record } => PromoteAnswer {
            result: "promoted".into(),
            pipeline,
            promotion: Some(*record),
        },
    };
    Ok(Json(answer))
}

/// `GET /api/promotions/{pipeline}/history`: the promotions made, newest first, to the Applications
/// the caller may read.
pub async fn history(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
    Query(query): Query<HistoryQuery>,
) -> Result<Json<Items<PromotionRecord>>, ApiError> {
    valid_name(&name)?;
    let pipeline = capstan_promote::find_pipeline(&state.client, &state.config.namespace, Some(&name))
        .await
        .map_err(api_error)?;
    let readable = |record: &PromotionRecord| {
        let target = pipeline.spec.application(&record.service, &record.to);
        state
            .app(&target)
            .is_some_and(|app| auth.role(&state, project_of(&app)) >= Role::ReadOnly)
    };
    let items = capstan_promote::history::of(&pipeline, query.service.as_deref())
        .into_iter()
        .filter(readable)
        .collect();
    Ok(Json(Items { items }))
}

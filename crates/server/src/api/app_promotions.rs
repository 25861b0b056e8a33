//! An Application's promotions (`GET /api/applications/{name}/promotions`): the promotions into or
//! out of it recorded in the namespace's PromotionPipelines, and where the caller may promote it to
//! (the UI shows a "Promote to …" button for each).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State as AxState};
use capstan_api::promotion::PromotionRecord;
use schemars::JsonSchema;
use serde::Serialize;

use super::access::{authorized, project_of};
use super::promotions::api_error;
use crate::auth::Auth;
use crate::auth::rbac::Role;
use crate::error::ApiError;
use crate::state::State;

/// A promotion the caller may make from this Application's environment.
#[derive(Debug, Serialize, JsonSchema, PartialEq, Eq)]
pub struct PromoteTarget {
    /// The PromotionPipeline.
    pub pipeline: String,
    /// The service.
    pub service: String,
    /// The source environment (this Application's).
    pub from: String,
    /// The target environment.
    pub to: String,
    /// The target environment's Application.
    pub application: String,
}

/// `GET /api/applications/{name}/promotions`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppPromotions {
    /// Promotions into or out of this Application, newest first (those out of it only when the
    /// caller may read the target).
    pub items: Vec<PromotionRecord>,
    /// Where the caller may promote this Application to (the `promote` role on the target's
    /// project); empty when it is no pipeline's environment.
    pub promote_targets: Vec<PromoteTarget>,
}

/// `GET /api/applications/{name}/promotions` (read-only on the Application's project).
pub async fn promotions(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
) -> Result<Json<AppPromotions>, ApiError> {
    authorized(&state, &auth, &name, Role::ReadOnly)?;
    let pipelines = capstan_promote::places::pipelines(&state.client, &state.config.namespace)
        .await
        .map_err(api_error)?;
    let role_on = |app: &str| {
        state
            .app(app)
            .map(|a| auth.role(&state, project_of(&a)))
            .unwrap_or(Role::None)
    };
    let role_on = &role_on;
    let mut items: Vec<PromotionRecord> = pipelines
        .iter()
        .flat_map(|p| {
            capstan_promote::places::records(p, &name)
                .into_iter()
                .filter(move |r| role_on(&p.spec.application(&r.service, &r.to)) >= Role::ReadOnly)
        })
        .collect();
    // Newest first across pipelines (RFC 3339 times sort as text).
    items.sort_by(|a, b| b.time.cmp(&a.time));
    let promote_targets = pipelines
        .iter()
        .flat_map(|p| capstan_promote::places::targets(p, &name))
        .filter(|t| role_on(&t.application) >= Role::Promote)
        .map(|t| PromoteTarget {
            pipeline: t.pipeline,
            service: t.service,
            from: t.from,
            to: t.to,
            application: t.application,
        })
        .collect();
    Ok(Json(AppPromotions { items, promote_targets }))
}

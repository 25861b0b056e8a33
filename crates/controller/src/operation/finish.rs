//! After an operation: the state to report, compared against the Application's own target — from
//! the API server's answers to the sync where possible, read again where not (after a rollback or a
//! stop).

use std::collections::HashMap;
use std::time::Instant;

use capstan_api::Application;
use capstan_api::application::ApplicationStatus;
use capstan_api::operation::Operation;
use capstan_kube::ObjectKey;
use kube::ResourceExt;
use serde_json::Value;

use crate::context::Ctx;
use crate::error::ReconcileError;
use crate::pipeline::AppState;
use crate::status::{clear_terminate, write_status};

use super::record;

/// The state after `op` ran on `state`: `observed` holds the sync's last view of the objects it
/// wrote; `terminated` says a person stopped it (its stop is recorded before the request is cleared).
pub async fn state_after(
    ctx: &Ctx,
    app: &mut Application,
    status: &mut ApplicationStatus,
    op: &Operation,
    state: AppState,
    observed: HashMap<ObjectKey, Option<Value>>,
    terminated: bool,
) -> Result<AppState, ReconcileError> {
    if terminated {
        // Recorded before the request is cleared: a restart in between must not resume the
        // operation the user stopped.
        write_status(ctx, app, status, Some(&state), None).await?;
        clear_terminate(ctx, app).await;
    }
    // Report the state after the operation, against the Application's own target. When the sync
    // changed nothing, the comparison made before it still holds.
    if !record::changed_anything(status) && op.rollback.is_none() {
        return Ok(state);
    }
    let compared = Instant::now();
    // What a sync applied, waited for and deleted is known from the API server's answers: no need to
    // read every object again (only if that fails, or after a rollback or a stop).
    let from_answers = if op.rollback.is_none() && !terminated {
        ctx.pipeline.after_sync(app, &state, observed).await.ok()
    } else {
        None
    };
    let after = match from_answers {
        Some(after) => Some(after),
        None => ctx.pipeline.compare_fresh(app, state.revision.clone()).await.ok(),
    };
    let key = format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any());
    tracing::debug!(app = %key, elapsed_ms = compared.elapsed().as_millis() as u64, "compared after the sync");
    Ok(match after {
        Some(a) if op.rollback.is_none() => a,
        Some(a) => {
            let current = ctx.pipeline.resolve(app, None, false).await.ok();
            match current {
                Some(r) => ctx.pipeline.compare_fresh(app, r).await.unwrap_or(a),
                None => a,
            }
        }
        None => state,
    })
}

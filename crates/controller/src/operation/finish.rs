//! After an operation: the state to report, compared against the Application's own target — from
//! the API server's answers to the sync where possible, read again where not (after a rollback or a
//! stop). Nothing here writes: the reconcile records it.

use std::collections::HashMap;
use std::time::Instant;

use capstan_api::Application;
use capstan_api::application::ApplicationStatus;
use capstan_api::operation::Operation;
use capstan_kube::ObjectKey;
use kube::ResourceExt;
use serde_json::Value;

use crate::context::Ctx;
use crate::pipeline::AppState;
use crate::projects::Project;

use super::record;

/// What an operation's execution leaves behind.
pub struct Executed {
    /// The state it ran on.
    pub state: AppState,
    /// The sync's last view of the objects it wrote (`None`: deleted).
    pub observed: HashMap<ObjectKey, Option<Value>>,
    /// A person stopped it (the reconcile records the stop, then clears the request: a restart in
    /// between finds the request and stops the resumed operation again).
    pub terminated: bool,
}

/// The state after `op` ran.
pub async fn state_after(
    ctx: &Ctx,
    app: &Application,
    project: &Project,
    status: &ApplicationStatus,
    op: &Operation,
    executed: Executed,
) -> AppState {
    let Executed {
        state,
        observed,
        terminated,
    } = executed;
    // Report the state after the operation, against the Application's own target. When the sync
    // changed nothing, the comparison made before it still holds.
    if !record::changed_anything(status) && op.rollback.is_none() {
        return state;
    }
    let compared = Instant::now();
    // What a sync applied, waited for and deleted is known from the API server's answers: no need to
    // read every object again (only if that fails, or after a rollback or a stop).
    let from_answers = if op.rollback.is_none() && !terminated {
        ctx.pipeline.after_sync(app, project, &state, observed).await.ok()
    } else {
        None
    };
    let after = match from_answers {
        Some(after) => Some(after),
        None => ctx
            .pipeline
            .compare_fresh(app, project, state.revision.clone())
            .await
            .ok(),
    };
    let key = format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any());
    tracing::debug!(app = %key, elapsed_ms = compared.elapsed().as_millis() as u64, "compared after the sync");
    match after {
        Some(a) if op.rollback.is_none() => a,
        Some(a) => {
            let current = ctx.pipeline.resolve(app, project, None, false).await.ok();
            match current {
                Some(r) => ctx.pipeline.compare_fresh(app, project, r).await.unwrap_or(a),
                None => a,
            }
        }
        None => state,
    }
}

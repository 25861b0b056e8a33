//! Acting on a reconcile's decision: the operation runs (it keeps its own journal while it does),
//! then the status is written once — the comparison or the failure, with what was decided — the
//! handled requests are cleared, and the next look is scheduled.

use std::time::Duration;

use capstan_api::Application;
use capstan_api::application::{ApplicationStatus, HealthStatus, SyncStatus};
use capstan_api::operation::Operation;
use capstan_api::status::{HealthCode, SyncCode};
use kube::ResourceExt;
use kube::runtime::controller::Action;

use super::decide::{Act, Decision, Gates, next_look};
use crate::auto_revert::{self, Armed};
use crate::clock;
use crate::context::Ctx;
use crate::error::{PipelineError, PipelineErrorKind, ReconcileError};
use crate::gates::{self, Windows};
use crate::operation::{self, Ran, record};
use crate::pipeline::{AppState, Resolved};
use crate::projects::Project;
use crate::status::{clear_handled_request, clear_terminate, write_status};

/// What a successful comparison found.
pub struct Observed {
    /// The Application's project, as this pass read it.
    pub project: Project,
    /// The revisions compared with.
    pub resolved: Resolved,
    /// The comparison and the state it sums up.
    pub state: AppState,
    /// What holds a new operation back.
    pub gates: Gates,
}

/// What the status reports at the end of the reconcile, and when to look again.
struct Outcome {
    report: Report,
    next: Next,
    /// A person stopped the operation: the request is cleared once the stop is recorded.
    terminated: bool,
}

enum Report {
    /// The state compared (after the operation, if one ran).
    State(AppState),
    /// Git, rendering or the destination failed.
    Failed(PipelineError),
}

enum Next {
    /// After a failure: soon, with the controller's backoff.
    Failure,
    /// After an operation refused before it started: at once.
    Refused,
    /// The retry of a failed automated sync, a sync window's change, or the poll.
    Compared(Option<Windows>),
}

impl Outcome {
    fn failed(err: PipelineError) -> Outcome {
        Outcome {
            report: Report::Failed(err),
            next: Next::Failure,
            terminated: false,
        }
    }
}

/// Act on `decision` for `app`, whose comparison is `observed`; `raw_operation` is the operation
/// request as read (removed once its operation has finished).
pub async fn act(
    ctx: &Ctx,
    app: &mut Application,
    observed: Result<Observed, PipelineError>,
    decision: Decision,
    raw_operation: Option<String>,
) -> Result<Action, ReconcileError> {
    let mut status = app.status.clone().unwrap_or_default();
    decision.record(&mut status, observed.as_ref().ok().map(|o| &o.gates));
    let stamp = decision.stamp;
    let project = observed.as_ref().ok().map(|o| o.project.clone());
    let outcome = match (decision.act, observed) {
        (
            Act::Operate {
                op,
                fresh,
                from_request,
            },
            Ok(observed),
        ) => operate(ctx, app, &mut status, observed, op, fresh, from_request).await?,
        (Act::Record | Act::ReportFailure { .. }, Ok(observed)) => Outcome {
            report: Report::State(observed.state),
            next: Next::Compared(observed.gates.windows),
            terminated: false,
        },
        // Decided from the failed comparison: only `ReportFailure`.
        (act, Err(err)) => {
            if let Act::ReportFailure {
                failed_request: Some(op),
            } = &act
            {
                status.operation_state = Some(record::failed_to_start(op, &err));
            }
            Outcome::failed(err)
        }
    };

    // The one status write of this reconcile.
    if stamp {
        // A refresh is visible as a new reconciledAt even when nothing else changed.
        status.reconciled_at = Some(clock::now_precise());
    }
    let (state, error) = match &outcome.report {
        Report::State(state) => (Some(state), None),
        Report::Failed(err) => {
            tracing::info!(app = %app.name_any(), %err, "comparison failed");
            mark_unknown(&mut status, err);
            (None, Some((err.condition_type(), err.to_string())))
        }
    };
    // `spec.syncPolicy.autoRevert`: whether it can act, shown with this write.
    let armed = match &outcome.report {
        Report::State(_) => auto_revert::before_write(ctx, app, project.as_ref(), state, &mut status).await,
        Report::Failed(_) => Armed::Off,
    };
    write_status(ctx, app, &mut status, state, error).await?;
    // Then, on the status as stored, whether the Application has been Degraded for too long.
    let sooner = match (armed, &project) {
        (Armed::On(limit), Some(project)) => auto_revert::after_write(ctx, app, project, limit).await,
        _ => None,
    };
    if outcome.terminated {
        clear_terminate(ctx, app).await;
    }
    clear_handled_request(ctx, app, raw_operation).await?;

    let key = format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any());
    let next = match (outcome.next, &outcome.report) {
        (Next::Failure, _) => Duration::from_secs(30).min(ctx.config.poll_interval),
        (Next::Refused, _) => Duration::from_secs(1),
        (Next::Compared(windows), Report::State(state)) => next_look(
            app,
            &status,
            &state.comparison,
            windows.as_ref(),
            clock::jitter(ctx.config.poll_interval, &key),
            gates::now(ctx),
        ),
        (Next::Compared(_), Report::Failed(_)) => ctx.config.poll_interval,
    };
    Ok(Action::requeue(sooner.map_or(next, |sooner| sooner.min(next))))
}

/// Run `op` on the comparison `observed`, first made again against the API server when `fresh`.
async fn operate(
    ctx: &Ctx,
    app: &mut Application,
    status: &mut ApplicationStatus,
    observed: Observed,
    op: Operation,
    fresh: bool,
    from_request: bool,
) -> Result<Outcome, ReconcileError> {
    let Observed {
        project,
        resolved,
        state,
        gates,
    } = observed;
    let state = if fresh {
        match ctx.pipeline.compare_fresh(app, &project, resolved).await {
            Ok(state) => state,
            Err(err) => {
                if from_request {
                    status.operation_state = Some(record::failed_to_start(&op, &err));
                }
                return Ok(Outcome::failed(err));
            }
        }
    } else {
        state
    };
    Ok(match operation::run(ctx, app, &project, status, state, op).await? {
        Ran::Finished { state, terminated } => Outcome {
            report: Report::State(state),
            next: Next::Compared(gates.windows),
            terminated,
        },
        Ran::Refused { state } => Outcome {
            report: Report::State(state),
            next: Next::Refused,
            terminated: false,
        },
    })
}

/// After a failure the sync status is Unknown (its revisions kept); so is the health, unless the
/// comparison itself failed (the objects' health is still known).
fn mark_unknown(status: &mut ApplicationStatus, err: &PipelineError) {
    status.sync = Some(SyncStatus {
        status: SyncCode::Unknown,
        revision: status.sync.as_ref().map(|s| s.revision.clone()).unwrap_or_default(),
        revisions: status.sync.as_ref().map(|s| s.revisions.clone()).unwrap_or_default(),
    });
    if err.kind() != PipelineErrorKind::Comparison {
        status.health = Some(HealthStatus {
            status: HealthCode::Unknown,
            message: err.to_string(),
        });
    }
}

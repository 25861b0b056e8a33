//! Running an operation — a sync requested by a person, an automated sync, self-heal, a rollback —
//! and recording it in `status.operationState` (while it runs and after), `status.history` (on
//! success) and Kubernetes Events. [`run`] takes it through its steps, each in its own module:
//!
//! - [`prepare`]: what the operation syncs and with which options; the project's rules refuse it
//!   before anything is applied.
//! - [`guard`]: the guardrails checked while preparing: the deletion budget and the policies.
//! - [`record`]: the operation state at each step (start, resume, fail, finish, terminate) and the
//!   history; pure.
//! - [`progress`]: while it runs, its progress writes and the terminate request that stops it.
//! - [`finish`]: the state to report after it.

pub mod finish;
pub mod guard;
pub mod prepare;
pub mod progress;
pub mod record;

use std::time::Instant;

use capstan_api::Application;
use capstan_api::application::ApplicationStatus;
use capstan_api::operation::{Operation, TERMINATE_ANNOTATION};
use capstan_sync::{ExecuteOptions, Progress, RecordError, Recorded, SyncOutcome};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;

use crate::context::Ctx;
use crate::error::ReconcileError;
use crate::pipeline::{AppState, short};
use crate::projects::Project;
use crate::status::write_status;

pub use prepare::nothing_to_do;

/// How an operation ended; its record is in the status the reconcile writes next.
pub enum Ran {
    /// It ran, to success, failure or a stop; `state` is the state after it.
    Finished {
        /// The state after the operation.
        state: AppState,
        /// A person stopped it: its request is cleared once the stop is recorded.
        terminated: bool,
    },
    /// It could not start (its target did not resolve, or the project's rules refuse it); nothing
    /// was applied. `state` is the state it was judged on.
    Refused {
        /// The state the operation was judged on.
        state: AppState,
    },
}

/// The guardrails' conditions after preparing an operation: a policy denial, a deletion budget
/// exceeded, and (when it goes on) the policies' warnings; each cleared when absent.
fn guard_conditions(
    status: &mut ApplicationStatus,
    denied: Option<String>,
    over_budget: Option<String>,
    warnings: Option<&[String]>,
) {
    use capstan_api::status::ConditionType;
    let mut set = |type_: ConditionType, message: Option<String>| {
        status.conditions.retain(|c| c.type_ != type_);
        if let Some(message) = message {
            crate::status::set_condition(status, type_, message);
        }
    };
    set(ConditionType::PolicyDenied, denied);
    set(ConditionType::DeletionBudgetExceeded, over_budget);
    if let Some(warnings) = warnings {
        set(
            ConditionType::PolicyWarning,
            (!warnings.is_empty()).then(|| warnings.join("; ")),
        );
    }
}

/// Run `op` for `app` of `project`; its record goes into `status`.
///
/// While it runs, the operation keeps its own journal in the stored status: the `Running` record a
/// restart resumes from (written once, while the first stage is applied) and its progress. The
/// record of how it ended is written by the reconcile, with the state after it.
pub async fn run(
    ctx: &Ctx,
    app: &mut Application,
    project: &Project,
    status: &mut ApplicationStatus,
    state: AppState,
    op: Operation,
) -> Result<Ran, ReconcileError> {
    // Listen for a terminate request from the start, so one that arrives while the operation is
    // being prepared or recorded as Running is not missed.
    let op_key = format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any());
    let terminate_rx = ctx.watch_terminate(&op_key);
    // Changes to the Application's objects while it runs are decided when it ends, once every
    // version it wrote is known: its own writes' echoes trigger no reconcile, others' changes do.
    let _hold = state.destination.watches.hold(ObjectRef::from_obj(&*app));
    let previous = status.operation_state.clone();
    let resuming = record::resumes(previous.as_ref(), &op);

    let prepared = prepare::prepare(ctx, app, project, status, state, &op).await;
    let work_state = prepared.state;
    let mut op_state = record::start(previous.as_ref(), &op, &work_state.revision.id(), resuming);
    op_state.revisions = work_state.revision.revisions();
    let plan = match prepared.plan {
        Ok(plan) => plan,
        Err(refused) => {
            ctx.unwatch_terminate(&op_key);
            let message = refused.to_string();
            let (denied, over_budget) = match &refused {
                prepare::PrepareError::PolicyDenied(_) => (Some(message.clone()), None),
                prepare::PrepareError::DeletionBudget(..) => (None, Some(message.clone())),
                _ => (None, None),
            };
            guard_conditions(status, denied, over_budget, None);
            record::fail(&mut op_state, message.clone());
            status.operation_state = Some(op_state);
            ctx.event(app, EventType::Warning, "OperationFailed", message).await;
            return Ok(Ran::Refused { state: work_state });
        }
    };
    guard_conditions(status, None, None, Some(&plan.warnings));
    if !plan.warnings.is_empty() {
        ctx.event(app, EventType::Warning, "PolicyWarning", plan.warnings.join("; "))
            .await;
    }
    let completed_hooks = record::completed_hooks(previous.as_ref(), resuming);
    status.operation_state = Some(op_state.clone());
    // A sync with nothing to do needs no `Running` record to resume from: it is recorded once, when
    // it has succeeded. On a large Application this saves a status write of the whole resource list.
    let no_work = !resuming && nothing_to_do(app, &op, &work_state.comparison);
    let what = if op.rollback.is_some() { "rollback" } else { "sync" };
    let started_event = ctx.event(
        app,
        EventType::Normal,
        "OperationStarted",
        format!("{what} to {} started ({})", short(&op_state.revision), op.initiated_by),
    );
    // Published while the operation runs; the event of its end waits for it (events keep their order).
    let started_event = tokio::spawn(started_event);

    let sync_opts = ExecuteOptions {
        prune: plan.prune,
        dry_run: plan.dry_run,
        prune_last: plan.options.prune_last,
        // Objects equal to Git are not applied again unless `ApplyOutOfSyncOnly=false` asks for it.
        apply_out_of_sync_only: plan.options.apply_out_of_sync_only,
        create_namespace: plan.options.create_namespace,
        destination_namespace: app.spec.destination.namespace.clone(),
        selected: plan.selected,
        // `Force=true` comes from the request only (refused in the spec's list).
        force: plan.options.force,
        recreated: record::recreated(previous.as_ref(), resuming),
        wave_timeout: ctx.config.wave_timeout,
        completed_hooks,
        run: op_state.started_at.clone(),
        writes: work_state.destination.sync_writes.clone(),
        own_writes: work_state.destination.own_writes.clone(),
        health: ctx.pipeline.health.current(),
    };
    let apps: Api<Application> = Api::namespaced(ctx.client.clone(), &app.namespace().unwrap_or_default());
    let app_name = app.name_any();
    let terminate_asked = app.annotations().get(TERMINATE_ANNOTATION).cloned();
    // `spec.syncPolicy.syncTimeout` (validated with the spec; a value that does not parse never gets
    // here). The operation is failed, not terminated: an automated sync is retried per `retry`.
    let sync_timeout = app
        .spec
        .sync_policy
        .as_ref()
        .and_then(|p| crate::automated::parse_duration(&p.sync_timeout));

    // The `Running` record is written while the first stage's objects are applied (applying twice
    // changes nothing); hooks and later stages wait for it, so a restart resumes the operation
    // instead of running its hooks again. A resumed operation is recorded already.
    let (recording, recorded) = Recorded::gate();
    let write_cost = progress::WriteCost::default();
    let record_start = async {
        if no_work || resuming {
            recording.finish(Ok(()));
            if no_work {
                return Ok(());
            }
            return write_status(ctx, app, status, Some(&work_state), None).await;
        }
        let started = Instant::now();
        let written = write_status(ctx, app, status, Some(&work_state), None).await;
        write_cost.set(started.elapsed());
        tracing::debug!(app = %op_key, elapsed_ms = started.elapsed().as_millis() as u64, "Running recorded");
        recording.finish(
            written
                .as_ref()
                .map(|_| ())
                .map_err(|e| RecordError::Failed(e.to_string())),
        );
        written
    };

    let (tx, rx) = tokio::sync::watch::channel(Progress::default());
    let so_far = tx.subscribe();
    let reporter = progress::report(apps, &app_name, recorded.clone(), rx, &write_cost);
    // The cluster the comparison was made against, never one looked up again, as the account the
    // project names for it.
    let client = plan.client;
    let execution = async {
        let outcome = capstan_sync::execute(&client, &work_state.comparison, &sync_opts, Some(&tx), recorded).await;
        drop(tx);
        outcome
    };
    let sync_started = Instant::now();
    let terminated = progress::terminate_requested(terminate_asked, terminate_rx);
    let mut terminated_by = None;
    let timed_out = async {
        match sync_timeout {
            Some(limit) => tokio::time::sleep(limit).await,
            None => std::future::pending().await,
        }
    };
    let running = async {
        tokio::select! {
            (outcome, ()) = async { tokio::join!(execution, reporter) } => outcome,
            () = timed_out => {
                // Dropping the execution stops it between requests, as a termination does.
                let progress = so_far.borrow().clone();
                record::timed_out(sync_timeout.unwrap_or_default(), &progress.message, progress.results)
            }
            who = terminated => {
                // Dropping the execution stops it between requests: waves not started are not applied.
                let outcome = record::terminate(&who, so_far.borrow().results.clone());
                terminated_by = Some(who);
                outcome
            }
        }
    };
    // The record is never abandoned half-way: the final write below is computed from it.
    let (outcome, recorded) = tokio::join!(running, record_start);
    if let Err(err) = recorded {
        // Nothing but the first stage's applies ran; the request is still there and runs again.
        ctx.unwatch_terminate(&op_key);
        return Err(err);
    }
    let elapsed = sync_started.elapsed();
    tracing::info!(
        app = %app.name_any(),
        objects = outcome.results.len(),
        succeeded = outcome.succeeded,
        elapsed_ms = elapsed.as_millis() as u64,
        "sync executed"
    );
    if !plan.dry_run {
        let namespace = app.namespace().unwrap_or_default();
        capstan_metrics::global().sync(&namespace, &app.name_any(), outcome.succeeded, elapsed);
    }

    let SyncOutcome {
        succeeded,
        message,
        results,
        observed,
    } = outcome;
    let terminated = terminated_by.is_some();
    record::finish(&mut op_state, succeeded, message.clone(), results, terminated_by);
    let revision = short(&op_state.revision).to_string();
    let finished_event = if succeeded && !plan.dry_run {
        let limit = app.spec.revision_history_limit.unwrap_or(10).max(1) as usize;
        let deployed = record::Deployed {
            revision: &op_state.revision,
            revisions: work_state.revision.revisions(),
            source: &plan.source,
            sources: &plan.sources,
        };
        record::push_history(status, deployed, limit);
        let note = format!("{what} to {revision} succeeded: {message}");
        Some(ctx.event(app, EventType::Normal, "OperationSucceeded", note))
    } else if !succeeded {
        let note = format!("{what} to {revision} failed: {message}");
        Some(ctx.event(app, EventType::Warning, "OperationFailed", note))
    } else {
        None
    };
    status.operation_state = Some(op_state);
    ctx.unwatch_terminate(&op_key);
    // The event is published while the state after the operation is read.
    let finished_event = async {
        let _ = started_event.await;
        if let Some(event) = finished_event {
            event.await;
        }
    };
    let executed = finish::Executed {
        state: work_state,
        observed,
        terminated,
    };
    let after = finish::state_after(ctx, app, project, status, &op, executed);
    let (state, ()) = tokio::join!(after, finished_event);
    Ok(Ran::Finished { state, terminated })
}

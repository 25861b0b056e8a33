//! Running operations — syncs requested by a person, automated syncs, self-heal, rollbacks — and
//! recording them: `status.operationState` while running and after, `status.history` on success,
//! Kubernetes Events. Also the deletion of an Application's objects by the resources finalizer.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use capstan_api::Application;
use capstan_api::application::{ApplicationStatus, OperationState, RevisionHistory};
use capstan_api::labels::RESOURCES_FINALIZER;
use capstan_api::operation::{Operation, OperationPhase, SyncOperation, TERMINATE_ANNOTATION};
use capstan_compare::normalize::Tracking;
use capstan_compare::{ObjectKey, SyncCode, describe_kube_error};
use capstan_sync::{ExecuteOptions, Progress, Recorded, SyncOptions};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PropagationPolicy};
use kube::runtime::events::EventType;
use serde_json::json;

use crate::pipeline::{AppState, short};
use crate::reconcile::{Ctx, ReconcileError, now, now_precise, write_status};

/// How the message of a terminated operation starts (who stopped it is in `terminatedBy`).
const TERMINATED_PREFIX: &str = "terminated by ";

/// The automated sync `app` needs now, if any: a new revision is synced once; with `selfHeal` drift at
/// an already synced revision is reverted; a failed sync is retried per `retry` with backoff.
pub fn automated(app: &Application, status: &ApplicationStatus, state: &AppState) -> Option<Operation> {
    let auto = app.spec.sync_policy.as_ref()?.automated.as_ref()?;
    if !automated_could_act(app, &state.comparison) {
        return None;
    }
    let op = Operation {
        sync: Some(SyncOperation {
            prune: auto.prune,
            ..Default::default()
        }),
        rollback: None,
        initiated_by: "automated".into(),
        id: String::new(),
    };
    let Some(last) = &status.operation_state else {
        return Some(op);
    };
    if last.revision != state.revision.sha {
        return Some(op);
    }
    match last.phase {
        OperationPhase::Succeeded => auto.self_heal.then_some(op),
        OperationPhase::Running => None,
        // A person stopped it: not retried at the same revision.
        _ if last.terminated_by.is_some() => None,
        _ => retry_due_in(app, status).is_some_and(|due| due.is_zero()).then_some(op),
    }
}

/// Whether an automated sync of `state` could change something (whatever the last operation was).
/// Not when it is Synced; not when the only differences are objects that require pruning while prune
/// is off (or they say `Prune=false`): they would stay OutOfSync and trigger a sync forever; not when
/// Git renders nothing and the sync would prune everything, unless `allowEmpty` (as in Argo CD).
pub fn automated_could_act(app: &Application, comparison: &capstan_compare::Comparison) -> bool {
    let Some(auto) = app.spec.sync_policy.as_ref().and_then(|p| p.automated.as_ref()) else {
        return false;
    };
    if comparison.sync() == SyncCode::Synced {
        return false;
    }
    let actionable = comparison.resources.iter().any(|r| {
        !r.hook
            && r.sync == SyncCode::OutOfSync
            && (!r.requires_pruning
                || (auto.prune && !r.live.as_ref().is_some_and(|l| !SyncOptions::of_object(l).prune)))
    });
    let desired = comparison.resources.iter().any(|r| !r.hook && r.desired.is_some());
    actionable && (desired || auto.allow_empty)
}

/// When the failed automated sync in `status` may be retried (zero: now), per `syncPolicy.retry`;
/// `None` when it is not retried (no retry policy, the limit reached, stopped by a person, or the
/// last operation did not fail).
pub fn retry_due_in(app: &Application, status: &ApplicationStatus) -> Option<Duration> {
    let policy = app.spec.sync_policy.as_ref()?;
    policy.automated.as_ref()?;
    let retry = policy.retry.as_ref()?;
    let last = status.operation_state.as_ref()?;
    if matches!(last.phase, OperationPhase::Succeeded | OperationPhase::Running) || last.terminated_by.is_some() {
        return None;
    }
    if retry.limit >= 0 && last.retry_count >= retry.limit {
        return None;
    }
    let backoff = retry.backoff.clone().unwrap_or_default();
    let base = parse_duration(&backoff.duration).unwrap_or(Duration::from_secs(5));
    let max = parse_duration(&backoff.max_duration).unwrap_or(Duration::from_secs(180));
    let factor = backoff.factor.unwrap_or(2).max(1) as u32;
    let delay = base
        .saturating_mul(factor.saturating_pow(last.retry_count.clamp(0, 16) as u32))
        .min(max);
    let Some(finished) = last
        .finished_at
        .as_deref()
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
    else {
        return Some(Duration::ZERO);
    };
    let elapsed = k8s_openapi::jiff::Timestamp::now().duration_since(finished);
    let elapsed = Duration::try_from_secs_f64(elapsed.as_secs_f64().max(0.0)).unwrap_or(Duration::ZERO);
    Some(delay.saturating_sub(elapsed))
}

/// Parse `5s`, `2m`, `1h`, `1m30s`.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let mut total = 0f64;
    let mut number = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() || c == '.' {
            number.push(c);
            continue;
        }
        let n: f64 = number.parse().ok()?;
        number.clear();
        total += n * match c {
            'h' => 3600.0,
            'm' => 60.0,
            's' => 1.0,
            _ => return None,
        };
    }
    if !number.is_empty() {
        total += number.parse::<f64>().ok()?;
    }
    // A spec value must never panic the controller: absurd durations are no duration.
    Duration::try_from_secs_f64(total).ok()
}

/// Run `op` for `app`. Returns the state to report afterwards, or None when the operation could not
/// start (its failure is recorded in `status`).
pub async fn run(
    ctx: &Ctx,
    app: &mut Application,
    status: &mut ApplicationStatus,
    state: AppState,
    op: Operation,
) -> Result<Option<AppState>, ReconcileError> {
    // Listen for a terminate request from the start, so one that arrives while the operation is
    // being prepared or recorded as Running is not missed.
    let op_key = format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any());
    let terminate_rx = ctx.watch_terminate(&op_key);
    // Changes to the Application's objects while it runs are decided when it ends, once every
    // version it wrote is known: its own writes' echoes trigger no reconcile, others' changes do.
    let _hold = state
        .destination
        .watches
        .hold(kube::runtime::reflector::ObjectRef::from_obj(&*app));
    let resuming = status
        .operation_state
        .as_ref()
        .is_some_and(|o| o.phase == OperationPhase::Running && o.operation.as_ref() == Some(&op));
    let mut target_app = app.clone();
    let mut work_state = state;
    let mut prune = op.sync.as_ref().is_some_and(|s| s.prune);
    let mut dry_run = false;
    let mut selected = Vec::new();
    let mut extra_options = Vec::new();

    let prepared: Result<(), String> = async {
        if let Some(rollback) = &op.rollback {
            if app
                .spec
                .sync_policy
                .as_ref()
                .and_then(|p| p.automated.as_ref())
                .is_some()
            {
                return Err(
                    "rollback is not allowed while automated sync is enabled: disable syncPolicy.automated first"
                        .into(),
                );
            }
            let entry = status
                .history
                .iter()
                .find(|h| h.id == rollback.id)
                .ok_or_else(|| format!("history entry {} not found", rollback.id))?
                .clone();
            prune = rollback.prune;
            target_app.spec.source = entry.source.clone();
            let resolved = ctx
                .pipeline
                .resolve(&target_app, Some(&entry.revision), false)
                .await
                .map_err(|e| e.to_string())?;
            work_state = ctx
                .pipeline
                .compare_fresh(&target_app, resolved)
                .await
                .map_err(|e| e.to_string())?;
        } else if let Some(sync) = &op.sync {
            dry_run = sync.dry_run;
            extra_options = sync.sync_options.clone();
            for r in &sync.resources {
                selected.push(
                    ObjectKey::parse(r)
                        .ok_or_else(|| format!("invalid resource {r:?}: use GROUP/KIND/NAMESPACE/NAME"))?,
                );
            }
            if !sync.revision.is_empty() {
                let resolved = ctx
                    .pipeline
                    .resolve(app, Some(&sync.revision), true)
                    .await
                    .map_err(|e| e.to_string())?;
                if resolved.sha != work_state.revision.sha {
                    work_state = ctx
                        .pipeline
                        .compare_fresh(app, resolved)
                        .await
                        .map_err(|e| e.to_string())?;
                }
            }
        }
        if prune && !work_state.prune_violations.is_empty() {
            return Err(format!(
                "the sync would prune objects the project does not permit: {}",
                work_state.prune_violations.join("; ")
            ));
        }
        if !work_state.project_violations.is_empty() {
            // Refused before anything is applied.
            return Err(format!(
                "the sync would break the project's rules: {}",
                work_state.project_violations.join("; ")
            ));
        }
        // `CreateNamespace=true` given in the request (not in the spec) is held to the same rules.
        // In the spec or in the request, in any spelling the sync accepts.
        let requested_namespace = SyncOptions::parse(
            app.spec
                .sync_policy
                .iter()
                .flat_map(|p| p.sync_options.iter())
                .chain(extra_options.iter()),
        )
        .create_namespace;
        if requested_namespace && let Some(message) = &work_state.create_namespace_violation {
            return Err(format!("the sync would break the project's rules: {message}"));
        }
        Ok(())
    }
    .await;

    let previous = status.operation_state.clone();
    let retry_count = match &previous {
        Some(p)
            if op.initiated_by == "automated"
                && p.revision == work_state.revision.sha
                && p.phase != OperationPhase::Succeeded =>
        {
            p.retry_count + 1
        }
        _ => 0,
    };
    let started_at = if resuming {
        previous
            .as_ref()
            .map(|p| p.started_at.clone())
            .unwrap_or_else(now_precise)
    } else {
        // To the millisecond, as `finishedAt`: operations that follow each other within a second
        // (a rollout's steps) keep their order.
        now_precise()
    };
    let mut op_state = OperationState {
        phase: OperationPhase::Running,
        message: if resuming {
            "resuming after a controller restart".into()
        } else {
            "syncing".into()
        },
        revision: work_state.revision.sha.clone(),
        started_at,
        finished_at: None,
        retry_count,
        // A resumed operation keeps the results recorded so far (the completed hooks among them).
        resources: if resuming {
            previous.as_ref().map(|p| p.resources.clone()).unwrap_or_default()
        } else {
            Vec::new()
        },
        operation: Some(op.clone()),
        terminated_by: None,
    };
    if let Err(message) = prepared {
        ctx.unwatch_terminate(&op_key);
        op_state.phase = OperationPhase::Failed;
        op_state.message = message.clone();
        op_state.finished_at = Some(now_precise());
        status.operation_state = Some(op_state);
        ctx.event(app, EventType::Warning, "OperationFailed", message).await;
        write_status(ctx, app, status, Some(&work_state), None).await?;
        return Ok(None);
    }
    let completed_hooks: HashSet<String> = if resuming {
        previous
            .as_ref()
            .map(|p| {
                p.resources
                    .iter()
                    .filter(|r| r.status == "Synced" && r.hook)
                    .map(|r| format!("{}:{}/{}/{}/{}", r.sync_phase, r.group, r.kind, r.namespace, r.name))
                    .collect()
            })
            .unwrap_or_default()
    } else {
        HashSet::new()
    };
    status.operation_state = Some(op_state.clone());
    // A sync with nothing to do needs no `Running` record to resume from: it is recorded once, when
    // it has succeeded. On a large Application this saves a status write of the whole resource list.
    let nothing_to_do = !resuming && nothing_to_do(app, &op, &work_state);
    let what = if op.rollback.is_some() { "rollback" } else { "sync" };
    let started_event = ctx.event(
        app,
        EventType::Normal,
        "OperationStarted",
        format!("{what} to {} started ({})", short(&op_state.revision), op.initiated_by),
    );
    // Published while the operation runs; the event of its end waits for it (events keep their order).
    let started_event = tokio::spawn(started_event);

    let options = SyncOptions::parse(
        app.spec
            .sync_policy
            .iter()
            .flat_map(|p| p.sync_options.iter())
            .chain(extra_options.iter()),
    );
    let sync_opts = ExecuteOptions {
        prune,
        dry_run,
        prune_last: options.prune_last,
        // Objects equal to Git are not applied again unless `ApplyOutOfSyncOnly=false` asks for it.
        apply_out_of_sync_only: options.apply_out_of_sync_only,
        create_namespace: options.create_namespace,
        destination_namespace: app.spec.destination.namespace.clone(),
        selected,
        wave_timeout: ctx.config.wave_timeout,
        completed_hooks,
        writes: work_state.destination.sync_writes.clone(),
        own_writes: work_state.destination.own_writes.clone(),
    };
    let app_name = app.name_any();
    let app_namespace = app.namespace().unwrap_or_default();
    let terminate_asked = app.annotations().get(TERMINATE_ANNOTATION).cloned();

    // The `Running` record is written while the first stage's objects are applied (applying twice
    // changes nothing); hooks and later stages wait for it, so a restart resumes the operation
    // instead of running its hooks again. A resumed operation is recorded already.
    let (recording, recorded) = Recorded::gate();
    let reporter_gate = recorded.clone();
    let write_cost = WriteCost::default();
    let record = async {
        if nothing_to_do || resuming {
            recording.finish(Ok(()));
            if nothing_to_do {
                return Ok(());
            }
            return write_status(ctx, app, status, Some(&work_state), None).await;
        }
        let started = Instant::now();
        let written = write_status(ctx, app, status, Some(&work_state), None).await;
        write_cost.set(started.elapsed());
        tracing::debug!(app = %op_key, elapsed_ms = started.elapsed().as_millis() as u64, "Running recorded");
        recording.finish(written.as_ref().map(|_| ()).map_err(|e| e.to_string()));
        written
    };

    let (tx, mut rx) = tokio::sync::watch::channel(Progress::default());
    let so_far = tx.subscribe();
    // Progress is a small merge patch: the message, and the hook results a resumed operation needs.
    // The full status is written once at the end (rewriting thousands of resources every half
    // second would cost more than the sync). A completed hook is written at once: until it is, a
    // restart would run it again.
    let reporter = async {
        let mut gate = reporter_gate;
        if gate.wait().await.is_err() {
            return;
        }
        let apps: Api<Application> = Api::namespaced(ctx.client.clone(), &app_namespace);
        let mut hooks_written = 0;
        while rx.changed().await.is_ok() {
            // Coalesce updates, but stop as soon as the sync ends: its final status write follows,
            // and waiting here would only delay it.
            let ended = hooks_done(&rx.borrow()) <= hooks_written && {
                let written = hooks_written;
                let coalesce = async {
                    while rx.changed().await.is_ok() {
                        if hooks_done(&rx.borrow()) > written {
                            return false;
                        }
                    }
                    true
                };
                tokio::time::timeout(progress_interval(write_cost.get()), coalesce)
                    .await
                    .unwrap_or(false)
            };
            if ended {
                break;
            }
            let p = rx.borrow_and_update().clone();
            hooks_written = hooks_done(&p);
            let hooks: Vec<_> = p.results.into_iter().filter(|r| r.hook).collect();
            let patch = json!({"status": {"operationState": {"message": p.message, "resources": hooks}}});
            let pp = PatchParams::default();
            let written = Instant::now();
            if let Err(err) = apps.patch_status(&app_name, &pp, &Patch::Merge(patch)).await {
                tracing::debug!(err = %describe_kube_error(&err), "progress update");
            }
            write_cost.set(written.elapsed());
        }
    };
    // The cluster the comparison was made against, never one looked up again.
    let client = work_state.destination.client.clone();
    let execution = async {
        let outcome = capstan_sync::execute(&client, &work_state.comparison, &sync_opts, Some(&tx), recorded).await;
        drop(tx);
        outcome
    };
    let sync_started = Instant::now();
    let terminated = terminate_requested(terminate_asked, terminate_rx);
    let mut terminated_by = None;
    let running = async {
        tokio::select! {
            (outcome, ()) = async { tokio::join!(execution, reporter) } => outcome,
            who = terminated => {
                // Dropping the execution stops it between requests: waves not started are not applied.
                let results = so_far.borrow().results.clone();
                let message = format!("{TERMINATED_PREFIX}{who}");
                terminated_by = Some(who);
                capstan_sync::SyncOutcome {
                    succeeded: false,
                    message,
                    results,
                    ..Default::default()
                }
            }
        }
    };
    // The record is never abandoned half-way: the final write below is computed from it.
    let (outcome, recorded) = tokio::join!(running, record);
    if let Err(err) = recorded {
        // Nothing but the first stage's applies ran; the request is still there and runs again.
        ctx.unwatch_terminate(&op_key);
        return Err(err);
    }

    tracing::info!(
        app = %app.name_any(),
        objects = outcome.results.len(),
        succeeded = outcome.succeeded,
        elapsed_ms = sync_started.elapsed().as_millis() as u64,
        "sync executed"
    );

    if !dry_run {
        capstan_metrics::global().sync(
            &app.namespace().unwrap_or_default(),
            &app.name_any(),
            outcome.succeeded,
            sync_started.elapsed(),
        );
    }
    op_state.phase = if outcome.succeeded {
        OperationPhase::Succeeded
    } else {
        OperationPhase::Failed
    };
    let was_terminated = terminated_by.is_some();
    op_state.terminated_by = terminated_by;
    op_state.message = outcome.message.clone();
    op_state.finished_at = Some(now_precise());
    let observed = outcome.observed;
    let (listed, unlisted) = listed_results(outcome.results);
    op_state.resources = listed;
    if unlisted > 0 {
        op_state.message.push_str(&format!(
            "; {unlisted} objects applied without a problem are not listed"
        ));
    }
    let finished_event = if outcome.succeeded && !dry_run {
        let id = status.history.iter().map(|h| h.id).max().unwrap_or(-1) + 1;
        status.history.push(RevisionHistory {
            id,
            revision: work_state.revision.sha.clone(),
            deployed_at: now(),
            source: target_app.spec.source.clone(),
        });
        let limit = app.spec.revision_history_limit.unwrap_or(10).max(1) as usize;
        let excess = status.history.len().saturating_sub(limit);
        status.history.drain(..excess);
        Some(ctx.event(
            app,
            EventType::Normal,
            "OperationSucceeded",
            format!("{what} to {} succeeded: {}", short(&op_state.revision), outcome.message),
        ))
    } else if !outcome.succeeded {
        Some(ctx.event(
            app,
            EventType::Warning,
            "OperationFailed",
            format!("{what} to {} failed: {}", short(&op_state.revision), outcome.message),
        ))
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
    let after = async {
        if was_terminated {
            // Recorded before the request is cleared: a restart in between must not resume the
            // operation the user stopped.
            write_status(ctx, app, status, Some(&work_state), None).await?;
            clear_terminate(ctx, app).await;
        }
        // Report the state after the operation, against the Application's own target. When the
        // sync changed nothing, the comparison made before it still holds.
        if !op_state_changed(status) && op.rollback.is_none() {
            return Ok(Some(work_state));
        }
        let compared = Instant::now();
        // What a sync applied, waited for and deleted is known from the API server's answers: no
        // need to read every object again (only if that fails, or after a rollback or a stop).
        let from_answers = if op.rollback.is_none() && !was_terminated {
            ctx.pipeline.after_sync(app, &work_state, observed).await.ok()
        } else {
            None
        };
        let after = match from_answers {
            Some(after) => Some(after),
            None => ctx.pipeline.compare_fresh(app, work_state.revision.clone()).await.ok(),
        };
        tracing::debug!(app = %op_key, elapsed_ms = compared.elapsed().as_millis() as u64, "compared after the sync");
        let after = match after {
            Some(a) if op.rollback.is_none() => a,
            Some(a) => {
                let current = ctx.pipeline.resolve(app, None, false).await.ok();
                match current {
                    Some(r) => ctx.pipeline.compare_fresh(app, r).await.unwrap_or(a),
                    None => a,
                }
            }
            None => work_state,
        };
        Ok(Some(after))
    };
    let (after, ()) = tokio::join!(after, finished_event);
    after
}

/// Hooks a running operation has completed so far.
fn hooks_done(p: &Progress) -> usize {
    p.results.iter().filter(|r| r.hook && r.status == "Synced").count()
}

/// How long the last write of the Application took (shared by the record and the progress writes).
#[derive(Default)]
struct WriteCost(std::sync::atomic::AtomicU64);

impl WriteCost {
    fn set(&self, cost: Duration) {
        self.0
            .store(cost.as_micros() as u64, std::sync::atomic::Ordering::Relaxed);
    }

    fn get(&self) -> Duration {
        Duration::from_micros(self.0.load(std::sync::atomic::Ordering::Relaxed))
    }
}

/// How long progress updates of a running operation are coalesced, given how long the last write
/// of the Application took: every 500 ms for an ordinary Application, but the API server's work for
/// each write grows with the Application's size, and on a large one it would compete with the
/// sync's own requests; so at most about an eighth of the time goes to progress writes.
fn progress_interval(write_cost: Duration) -> Duration {
    (write_cost * 8).max(Duration::from_millis(500))
}

/// How many routine results (non-hook objects applied without a problem) an operation lists.
///
/// Every object of a large first sync would otherwise be listed: 2,000 objects add ~200 KB to the
/// Application, and the API server's work for each later write of it (the request annotation, every
/// status update) grows with its size, as does the risk of reaching etcd's limit on one object.
pub const LISTED_ROUTINE_RESULTS: usize = 250;

/// The results to record: every hook, failure and prune, and the first [`LISTED_ROUTINE_RESULTS`]
/// routine applies; with the number of routine applies left out.
fn listed_results(
    results: Vec<capstan_api::application::ResourceResult>,
) -> (Vec<capstan_api::application::ResourceResult>, usize) {
    let mut routine = 0;
    let listed = results
        .into_iter()
        .filter(|r| {
            if r.hook || r.status != "Synced" || !r.message.is_empty() {
                return true;
            }
            routine += 1;
            routine <= LISTED_ROUTINE_RESULTS
        })
        .collect();
    (listed, routine.saturating_sub(LISTED_ROUTINE_RESULTS))
}

/// Whether `op` has nothing to do on `state`: a sync (not a rollback) of an Application whose
/// objects are all Synced, with no hooks, nothing to prune and no re-apply of unchanged objects
/// asked for.
pub fn nothing_to_do(app: &Application, op: &Operation, state: &AppState) -> bool {
    let reapply = |options: &[String]| !SyncOptions::parse(options).apply_out_of_sync_only;
    op.rollback.is_none()
        && state.comparison.sync() == SyncCode::Synced
        && !state.comparison.resources.iter().any(|r| r.hook || r.requires_pruning)
        && !op.sync.as_ref().is_some_and(|s| reapply(&s.sync_options))
        && !app.spec.sync_policy.as_ref().is_some_and(|p| reapply(&p.sync_options))
}

/// Resolves with who asked once the Application carries the terminate annotation (seen by the
/// controller's Application watch, see [`Ctx::observe`], or `asked`: there when the operation started).
async fn terminate_requested(asked: Option<String>, mut rx: tokio::sync::watch::Receiver<Option<String>>) -> String {
    if let Some(who) = asked {
        return if who.is_empty() { "a user".into() } else { who };
    }
    let asked = rx
        .wait_for(Option::is_some)
        .await
        .map(|who| who.clone().unwrap_or_default());
    match asked {
        Ok(who) => who,
        // The sender is only dropped when the operation ends: never terminate then.
        Err(_) => std::future::pending().await,
    }
}

/// Remove the terminate annotation (a request for an operation that has ended means nothing).
pub async fn clear_terminate(ctx: &Ctx, app: &Application) {
    let apps: Api<Application> = Api::namespaced(ctx.client.clone(), &app.namespace().unwrap_or_default());
    let patch = json!({"metadata": {"annotations": {TERMINATE_ANNOTATION: null}}});
    if let Err(err) = apps
        .patch(&app.name_any(), &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        tracing::debug!(err = %describe_kube_error(&err), "clearing the terminate annotation");
    }
}

/// Whether the recorded operation applied, pruned or ran anything (objects left as they were are not
/// listed in its results).
fn op_state_changed(status: &ApplicationStatus) -> bool {
    status
        .operation_state
        .as_ref()
        .is_none_or(|o| o.phase != OperationPhase::Succeeded || !o.resources.is_empty())
}

/// Delete the objects of an Application being deleted with the resources finalizer, then remove
/// the finalizer. Objects with `sync-options: Delete=false` are left in place.
pub async fn finalize(app: &Application, ctx: &Ctx) -> Result<(), ReconcileError> {
    if !crate::reconcile::has_finalizer(app) {
        return Ok(());
    }
    let tracking = Tracking::new(&app.namespace().unwrap_or_default(), &app.name_any());
    // The kinds of its objects, and of the hooks its last operation ran (hooks are not among its
    // resources, but a hook left behind carries its tracking label too).
    let status = app.status.as_ref();
    let resources = status.into_iter().flat_map(|s| &s.resources);
    let last_results = status
        .and_then(|s| s.operation_state.as_ref())
        .into_iter()
        .flat_map(|o| &o.resources);
    let mut kinds: Vec<(String, String)> = resources
        .map(|r| (&r.group, &r.version, &r.kind))
        .chain(last_results.map(|r| (&r.group, &r.version, &r.kind)))
        .filter(|(_, version, _)| !version.is_empty())
        .map(|(group, version, kind)| {
            (
                if group.is_empty() {
                    version.clone()
                } else {
                    format!("{group}/{version}")
                },
                kind.clone(),
            )
        })
        .collect();
    kinds.sort();
    kinds.dedup();
    let mut pending: Vec<(Api<DynamicObject>, String)> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    let dest = match ctx.pipeline.destination(app).await {
        Ok(dest) => dest,
        Err(err @ crate::PipelineError::InvalidSpec(_)) => {
            // The cluster is no longer registered: its objects cannot be reached, and deleting them
            // later, should a cluster of that name be registered again, would surprise everyone.
            // Leave them in place (as Argo CD does) and let the Application go.
            ctx.event(
                app,
                EventType::Warning,
                "ResourcesLeftInPlace",
                format!("the Application's objects were not deleted: {err}"),
            )
            .await;
            return remove_finalizer(app, ctx).await;
        }
        Err(err) => {
            // The objects cannot be reached: keep the finalizer and say why (removing it by hand
            // leaves them in place).
            let message = format!("cannot delete the Application's objects: {err}");
            ctx.event(app, EventType::Warning, "DeletionFailed", message.clone())
                .await;
            return Err(ReconcileError::Update(app.name_any(), message));
        }
    };
    for (api_version, kind) in kinds {
        let info = match dest.discovery.resolve(&api_version, &kind).await {
            Ok(Some(info)) => info,
            Ok(None) => continue, // the kind is gone, and its objects with it
            Err(e) => {
                failures.push(e.to_string());
                continue;
            }
        };
        let api: Api<DynamicObject> = Api::all_with(dest.client.clone(), &info.resource);
        let list = match api.list(&ListParams::default().labels(&tracking.selector())).await {
            Ok(list) => list,
            Err(e) => {
                failures.push(format!("listing {kind}: {}", describe_kube_error(&e)));
                continue;
            }
        };
        for obj in list.items {
            let value = serde_json::to_value(&obj).unwrap_or_default();
            if !tracking.owns(&value) || !SyncOptions::of_object(&value).delete {
                continue;
            }
            let ns = obj.namespace();
            let scoped: Api<DynamicObject> = match &ns {
                Some(ns) if info.namespaced => Api::namespaced_with(dest.client.clone(), ns, &info.resource),
                _ => Api::all_with(dest.client.clone(), &info.resource),
            };
            let name = obj.name_any();
            let dp = DeleteParams {
                propagation_policy: Some(PropagationPolicy::Foreground),
                preconditions: obj.metadata.uid.clone().map(|uid| kube::api::Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match scoped.delete(&name, &dp).await {
                Ok(_) => pending.push((scoped, name)),
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => failures.push(format!("deleting {kind} {name}: {}", describe_kube_error(&e))),
            }
        }
    }
    if !failures.is_empty() {
        // Keep the finalizer: the next attempt deletes what is left.
        ctx.event(app, EventType::Warning, "DeletionFailed", failures.join("; "))
            .await;
        return Err(ReconcileError::Update(app.name_any(), failures.join("; ")));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for (api, name) in pending {
        while Instant::now() < deadline && matches!(api.get_opt(&name).await, Ok(Some(_))) {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    remove_finalizer(app, ctx).await
}

/// Remove the resources finalizer, keeping any other.
async fn remove_finalizer(app: &Application, ctx: &Ctx) -> Result<(), ReconcileError> {
    let remaining: Vec<String> = app
        .finalizers()
        .iter()
        .filter(|f| *f != RESOURCES_FINALIZER)
        .cloned()
        .collect();
    let apps: Api<Application> = Api::namespaced(ctx.client.clone(), &app.namespace().unwrap_or_default());
    apps.patch(
        &app.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": remaining}})),
    )
    .await
    .map(|_| ())
    .map_err(|e| ReconcileError::Update(app.name_any(), describe_kube_error(&e)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_api::application::ResourceResult;

    fn result(name: &str, status: &str, hook: bool, message: &str) -> ResourceResult {
        ResourceResult {
            kind: "ConfigMap".into(),
            name: name.into(),
            status: status.into(),
            hook,
            message: message.into(),
            sync_phase: "Sync".into(),
            ..Default::default()
        }
    }

    #[test]
    fn results_list_every_hook_failure_and_prune_but_only_some_routine_applies() {
        let mut results: Vec<ResourceResult> = (0..LISTED_ROUTINE_RESULTS + 40)
            .map(|i| result(&format!("cm-{i:04}"), "Synced", false, ""))
            .collect();
        results.push(result("hook", "Synced", true, ""));
        results.push(result("broken", "SyncFailed", false, "rejected"));
        results.push(result("gone", "Pruned", false, ""));
        results.push(result("warned", "Synced", false, "replaced"));
        let (listed, unlisted) = listed_results(results);
        assert_eq!(unlisted, 40);
        assert_eq!(listed.len(), LISTED_ROUTINE_RESULTS + 4);
        for name in ["hook", "broken", "gone", "warned", "cm-0000"] {
            assert!(listed.iter().any(|r| r.name == name), "{name} listed");
        }
        assert!(
            !listed
                .iter()
                .any(|r| r.name == format!("cm-{:04}", LISTED_ROUTINE_RESULTS))
        );

        let few: Vec<ResourceResult> = (0..3)
            .map(|i| result(&format!("cm-{i}"), "Synced", false, ""))
            .collect();
        assert_eq!(listed_results(few.clone()), (few, 0));
    }

    fn state(name: &str, sync: SyncCode, desired: bool, requires_pruning: bool) -> capstan_compare::ResourceState {
        use kube::core::GroupVersionKind;
        use kube::discovery::ApiResource;
        let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
        capstan_compare::ResourceState {
            key: ObjectKey::of(&cm).expect("key"),
            api_version: "v1".into(),
            info: capstan_compare::KindInfo {
                resource: ApiResource::from_gvk_with_plural(
                    &GroupVersionKind::gvk("", "v1", "ConfigMap"),
                    "configmaps",
                ),
                namespaced: true,
            },
            desired: desired.then(|| cm.clone()),
            live: (!desired || sync == SyncCode::Synced).then(|| cm.clone()),
            predicted: None,
            sync,
            requires_pruning,
            hook: false,
            wave: 0,
            owned_by_other: None,
            error: None,
        }
    }

    fn automated_app(prune: bool, allow_empty: bool) -> Application {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
            "metadata": {"name": "a", "namespace": "capstan"},
            "spec": {
                "source": {"repoURL": "file:///repo", "path": "."},
                "destination": {"server": "https://kubernetes.default.svc", "namespace": "n"},
                "syncPolicy": {"automated": {"prune": prune, "allowEmpty": allow_empty},
                    "retry": {"limit": 3}},
            },
        }))
        .expect("application")
    }

    #[test]
    fn automated_syncs_act_only_when_they_can_change_something() {
        let comparison = |resources| capstan_compare::Comparison { resources };
        let kept = state("kept", SyncCode::Synced, true, false);
        let changed = state("changed", SyncCode::OutOfSync, true, false);
        let removed = state("removed", SyncCode::OutOfSync, false, true);
        // Only an object to prune, with prune off: a sync (or a retry of one) would change nothing,
        // so a failed sync's retry must not be waited for either (it would requeue forever).
        let only_prune = comparison(vec![kept.clone(), removed.clone()]);
        assert!(!automated_could_act(&automated_app(false, false), &only_prune));
        assert!(automated_could_act(&automated_app(true, false), &only_prune));
        assert!(automated_could_act(
            &automated_app(false, false),
            &comparison(vec![kept.clone(), changed])
        ));
        assert!(!automated_could_act(
            &automated_app(true, false),
            &comparison(vec![kept])
        ));
        // Git renders nothing: pruning everything needs allowEmpty.
        let empty = comparison(vec![removed]);
        assert!(!automated_could_act(&automated_app(true, false), &empty));
        assert!(automated_could_act(&automated_app(true, true), &empty));
        let mut manual = automated_app(true, true);
        manual.spec.sync_policy = None;
        assert!(!automated_could_act(&manual, &empty));
    }

    #[test]
    fn progress_writes_take_a_small_share_of_the_time() {
        assert_eq!(progress_interval(Duration::from_millis(10)), Duration::from_millis(500));
        assert_eq!(
            progress_interval(Duration::from_millis(300)),
            Duration::from_millis(2400)
        );
    }

    #[test]
    fn parses_go_style_durations() {
        assert_eq!(parse_duration("5s"), Some(Duration::from_secs(5)));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_duration("7"), Some(Duration::from_secs(7)));
        assert_eq!(parse_duration(""), None);
        assert_eq!(parse_duration("5x"), None);
        assert_eq!(
            parse_duration(&format!("{}s", "9".repeat(400))),
            None,
            "overflow is not a panic"
        );
    }
}

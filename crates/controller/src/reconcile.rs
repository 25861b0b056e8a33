//! What happens to one Application on each trigger: the request annotations it carries (refresh,
//! operation, terminate) are read and cleared, it is compared with Git, a requested, resumed or
//! automated operation runs, and its status is written; a deleted one is finalized.

use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_api::Application;
use capstan_api::application::{ApplicationStatus, HealthStatus, SyncStatus};
use capstan_api::labels::REFRESH_ANNOTATION;
use capstan_api::operation::{OPERATION_ANNOTATION, Operation, OperationPhase, TERMINATE_ANNOTATION};
use capstan_api::status::{ConditionType, HealthCode, SyncCode};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

use crate::context::Ctx;
use crate::dependencies::{self, Gate};
use crate::error::{InvalidRequest, PipelineError, PipelineErrorKind, ReconcileError};
use crate::operation::{self, record};
use crate::pipeline::Resolved;
use crate::status::{clear_handled_request, clear_terminate, set_condition, write_status};
use crate::{automated, clock, finalize, gates};

// Kept here for their users outside the crate.
pub use crate::status::clear_annotations;

/// The trigger predicate: spec changes, operation and refresh requests, deletion — not status writes.
pub fn relevant_change(app: &Application) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    app.metadata.generation.hash(&mut h);
    let ann = app.metadata.annotations.as_ref();
    ann.and_then(|a| a.get(OPERATION_ANNOTATION)).hash(&mut h);
    ann.and_then(|a| a.get(REFRESH_ANNOTATION)).hash(&mut h);
    ann.and_then(|a| a.get(TERMINATE_ANNOTATION)).hash(&mut h);
    app.metadata.deletion_timestamp.is_some().hash(&mut h);
    app.metadata.finalizers.hash(&mut h);
    Some(h.finish())
}

/// Backoff after a failed reconcile.
pub fn error_policy(_app: Arc<Application>, err: &ReconcileError, _ctx: Arc<Ctx>) -> Action {
    tracing::warn!(%err, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

/// Reconcile one Application.
pub async fn reconcile(app: Arc<Application>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let started = Instant::now();
    let result = reconcile_inner(app, ctx).await;
    capstan_metrics::global()
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    result
}

async fn reconcile_inner(app: Arc<Application>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let started = Instant::now();
    let name = app.name_any();
    let namespace = app.namespace().unwrap_or_default();
    // Decide on the stored object, not an older copy: a reconcile queued during a sync may run
    // before the watch cache has seen that sync's final status, and would act on a stale operation
    // state. The cached copy is used once the watch has delivered this controller's last write, if
    // it is the version the watch delivered last.
    let key = format!("{namespace}/{name}");
    let cached_is_fresh = ctx.cache_is_fresh(&key, &app);
    let api: Api<Application> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut app = if cached_is_fresh {
        (*app).clone()
    } else {
        match api.get_opt(&name).await {
            Ok(Some(fresh)) => fresh,
            Ok(None) => {
                ctx.pollers.forget(&ObjectRef::new(&name).within(&namespace));
                ctx.forget(&key);
                return Ok(Action::await_change());
            }
            Err(e) => return Err(ReconcileError::update(name, e)),
        }
    };
    if app.metadata.deletion_timestamp.is_some() {
        ctx.pollers.forget(&ObjectRef::from_obj(&app));
        return finalize::finalize(&app, &ctx).await.map(|_| Action::await_change());
    }

    let annotations = app.metadata.annotations.clone().unwrap_or_default();
    let refresh = annotations.get(REFRESH_ANNOTATION).cloned();
    if refresh.as_deref() == Some("hard") {
        // A hard refresh renders again instead of reusing the render cache (as Argo CD's does).
        let dropped: usize = app
            .spec
            .sources()
            .iter()
            .map(|source| {
                ctx.pipeline
                    .renderer
                    .invalidate(source, &name, &app.spec.destination.namespace)
            })
            .sum();
        // And Helm is told the cluster's APIs as they are now.
        if let Ok(dest) = ctx.pipeline.destination(&app).await {
            dest.discovery.forget_api_versions().await;
        }
        tracing::debug!(app = %key, dropped, "hard refresh: the next render runs again");
    }
    let raw_request = annotations.get(OPERATION_ANNOTATION).cloned();
    // A request the operation in status carries is being (or has been) handled.
    let requested: Option<Result<Operation, InvalidRequest>> = raw_request
        .as_deref()
        .filter(|raw| !app.handled(raw))
        .map(|raw| serde_json::from_str(raw).map_err(InvalidRequest::from));
    // A request with an id is removed once its operation has finished (the id in status keeps it
    // from running twice); one without is removed before anything else happens.
    let identified = |r: &Option<Result<Operation, InvalidRequest>>| {
        r.as_ref().is_some_and(|r| r.as_ref().is_ok_and(|op| !op.id.is_empty()))
    };
    let clear_first = raw_request
        .clone()
        .filter(|_| requested.is_some() && !identified(&requested));
    tracing::debug!(
        app = %key,
        read = !cached_is_fresh,
        rv = app.resource_version().unwrap_or_default(),
        phase = app.status.as_ref().and_then(|s| s.operation_state.as_ref()).map(|o| o.phase.as_str()).unwrap_or_default(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "reconcile started"
    );
    let mut status = app.status.clone().unwrap_or_default();
    let op_running = status
        .operation_state
        .as_ref()
        .is_some_and(|o| o.phase == OperationPhase::Running);
    let running = status
        .operation_state
        .as_ref()
        .filter(|o| o.phase == OperationPhase::Running)
        .and_then(|o| o.operation.clone());

    // A refresh (and a request without an id) is cleared while Git is asked and the state compared
    // (neither changes anything): on a large Application the write takes as long as both. Nothing
    // else happens until it is cleared: an operation must not run twice after a restart, and a write
    // of the Application at the same time would make the API server redo one of them (both would
    // take longer).
    let clearing = async {
        if refresh.is_none() && clear_first.is_none() {
            return Ok(());
        }
        clear_annotations(&ctx.client, &app, refresh.clone(), clear_first.clone()).await?;
        tracing::debug!(app = %key, elapsed_ms = started.elapsed().as_millis() as u64, "request cleared");
        Ok::<(), ReconcileError>(())
    };
    // Revision: ask Git at most once per poll interval, unless a refresh or an operation asks.
    // A refresh or an operation asks Git now; a periodic poll shares one answer per repository among
    // all its Applications (see `Pipeline::new`).
    let force = refresh.is_some() || requested.is_some() || running.is_some();
    // Comparisons read the watch cache (fed before the watch event that triggered them), except
    // for an operation that resumes: it acts on what it compares, read from the API server.
    let resuming = running.is_some();
    let comparing = async {
        let resolved = resolve(&ctx, &app, force).await?;
        tracing::debug!(app = %key, force, elapsed_ms = started.elapsed().as_millis() as u64, "resolved");
        let compare_started = Instant::now();
        let state = if resuming {
            ctx.pipeline.compare_fresh(&app, resolved.clone()).await
        } else {
            ctx.pipeline.compare(&app, resolved.clone()).await
        }?;
        Ok::<_, PipelineError>((resolved, state, compare_started.elapsed()))
    };
    let (cleared, compared) = tokio::join!(clearing, comparing);
    cleared?;
    if annotations.contains_key(TERMINATE_ANNOTATION) && !op_running {
        // Nothing runs: the request is stale (and must not stop an operation requested after it).
        clear_terminate(&ctx, &app).await;
        if let Some(a) = app.metadata.annotations.as_mut() {
            a.remove(TERMINATE_ANNOTATION);
        }
    }
    let (resolved, state, compare_time) = match compared {
        Ok(c) => c,
        Err(err) => {
            let mut status = with_failed_request(status, &requested, &err);
            if refresh.is_some() {
                // A refresh is visible as a new reconciledAt even when the comparison failed again.
                status.reconciled_at = Some(clock::now_precise());
            }
            let action = report_error(&ctx, &mut app, status, err).await?;
            clear_handled_request(&ctx, &app, raw_request).await?;
            return Ok(action);
        }
    };
    tracing::debug!(
        app = %key,
        objects = state.comparison.resources.len(),
        elapsed_ms = compare_time.as_millis() as u64,
        sync = state.comparison.sync().as_str(),
        "compared"
    );
    for r in &state.comparison.resources {
        state.destination.watches.ensure(&r.info);
    }

    let from_request = matches!(requested, Some(Ok(_)));
    // What holds a new operation back: dependencies not ready, a sync window. A running one goes on.
    let deps = gates::dependencies(&ctx, &app).await;
    let windows = gates::windows(&ctx, &app).await;
    let mut held = Held::default();
    let op = match requested {
        Some(Ok(op)) if op.sync.is_some() || op.rollback.is_some() => match refusal(&deps, &windows, true) {
            // A request written past the CLI's and the server's checks (or before a dependency
            // changed) is refused, as they would have.
            Some(why) => {
                tracing::info!(app = %key, %why, "requested operation refused");
                status.operation_state = Some(record::failed_to_start(&op, &why));
                held.request = true;
                None
            }
            None => Some(op),
        },
        Some(Ok(op)) => Some(op),
        Some(Err(message)) => {
            set_condition(&mut status, ConditionType::InvalidSpecError, message.to_string());
            None
        }
        None => running.or_else(|| {
            let due = automated::automated(&app, &status, &state.revision.id(), &state.comparison)?;
            held.dependencies = !matches!(deps, Gate::Ready);
            held.window = windows.as_ref().is_some_and(|w| w.refusal(false).is_some());
            (!held.dependencies && !held.window).then_some(due)
        }),
    };
    gate_conditions(&mut status, &deps, &windows, &held);
    let state = match op {
        Some(op) => {
            // An operation is decided on the cached view; one that will change something acts on a
            // fresh one. (The cache may lag behind the cluster by a watch event: a sync found to
            // have nothing to do is recorded as such, and a change the cache had not seen yet
            // triggers its own comparison when its event arrives.)
            let state = if !resuming && !operation::nothing_to_do(&app, &op, &state.comparison) {
                match ctx.pipeline.compare_fresh(&app, resolved.clone()).await {
                    Ok(s) => s,
                    Err(err) => {
                        let status = if from_request {
                            with_failed_request(status, &Some(Ok(op)), &err)
                        } else {
                            status
                        };
                        let action = report_error(&ctx, &mut app, status, err).await?;
                        clear_handled_request(&ctx, &app, raw_request).await?;
                        return Ok(action);
                    }
                }
            } else {
                state
            };
            let after = operation::run(&ctx, &mut app, &mut status, state, op).await?;
            match after {
                Some(s) => s,
                None => return Ok(Action::requeue(Duration::from_secs(1))),
            }
        }
        None => state,
    };
    if refresh.is_some() {
        // A refresh is visible as a new reconciledAt even when nothing else changed.
        status.reconciled_at = Some(clock::now_precise());
    }
    write_status(&ctx, &mut app, &mut status, Some(&state), None).await?;
    tracing::debug!(app = %key, elapsed_ms = started.elapsed().as_millis() as u64, "reconciled");
    clear_handled_request(&ctx, &app, raw_request).await?;
    if automated::automated_could_act(&app, &state.comparison)
        && let Some(due) = automated::retry_due_in(&app, &status)
    {
        // A failed automated sync is retried once its backoff has passed (never sooner than in
        // 250 ms: a reconcile that decides against the retry must not come back at once).
        return Ok(Action::requeue(due.max(Duration::from_millis(250))));
    }
    let poll = clock::jitter(ctx.config.poll_interval, &key);
    // A window opening or closing is a reason to look again (not only the next poll).
    let change = windows
        .as_ref()
        .and_then(|w| w.next_change)
        .and_then(|t| (t - gates::now(&ctx)).to_std().ok())
        .map(|d| d + Duration::from_secs(1));
    Ok(Action::requeue(change.map_or(poll, |c| c.min(poll))))
}

/// What held a new operation back in this reconcile.
#[derive(Default)]
struct Held {
    /// An automated sync was due, its dependencies are not ready.
    dependencies: bool,
    /// An automated sync was due, a sync window holds it.
    window: bool,
    /// A requested operation was refused.
    request: bool,
}

/// Why a new operation (`manual`: requested) may not start now: dependencies first, then windows.
fn refusal(deps: &Gate, windows: &Option<gates::Windows>, manual: bool) -> Option<String> {
    if !matches!(deps, Gate::Ready) {
        return Some(deps.to_string());
    }
    windows.as_ref().and_then(|w| w.refusal(manual))
}

/// The conditions that say what holds the Application back: a missing dependency or a cycle (always),
/// waiting for dependencies and a window holding the sync (while a sync is held), a window that
/// does not parse (always).
fn gate_conditions(status: &mut ApplicationStatus, deps: &Gate, windows: &Option<gates::Windows>, held: &Held) {
    status.conditions.retain(|c| {
        ![
            dependencies::WAITING_CONDITION,
            dependencies::ERROR_CONDITION,
            gates::WINDOW_CONDITION,
            gates::WINDOW_ERROR_CONDITION,
        ]
        .contains(&c.type_)
    });
    match deps {
        Gate::Missing(_) | Gate::Cycle(_) => set_condition(status, dependencies::ERROR_CONDITION, deps.to_string()),
        Gate::Waiting(_) if held.dependencies || held.request => {
            set_condition(status, dependencies::WAITING_CONDITION, deps.to_string())
        }
        _ => {}
    }
    if let Some(w) = windows {
        if let Some(message) = w.error_message() {
            set_condition(status, gates::WINDOW_ERROR_CONDITION, message);
        } else if held.window
            && let Some(why) = w.refusal(false)
        {
            set_condition(status, gates::WINDOW_CONDITION, format!("automated sync held: {why}"));
        }
    }
}

/// A requested operation that could not start (Git or rendering failed) is recorded as failed, so
/// the request is not lost silently.
fn with_failed_request(
    mut status: ApplicationStatus,
    requested: &Option<Result<Operation, InvalidRequest>>,
    err: &PipelineError,
) -> ApplicationStatus {
    if let Some(Ok(op)) = requested {
        status.operation_state = Some(record::failed_to_start(op, err));
    }
    status
}

async fn resolve(ctx: &Ctx, app: &Application, force: bool) -> Result<Resolved, PipelineError> {
    // Git repositories are polled (chart sources are resolved again on every reconcile interval), only
    // those the project permits: a poller lists refs with the repository Secret's credentials.
    let owned = ctx.pipeline.polled_urls(app).await;
    let urls: Vec<&str> = owned.iter().map(String::as_str).collect();
    ctx.pollers.watch(&urls, ObjectRef::from_obj(app));
    // Not forced, this is answered from the refs the repository's poller keeps fresh (see `poller`).
    ctx.pipeline.resolve(app, None, force).await
}

async fn report_error(
    ctx: &Ctx,
    app: &mut Application,
    mut status: ApplicationStatus,
    err: PipelineError,
) -> Result<Action, ReconcileError> {
    tracing::info!(app = %app.name_any(), %err, "comparison failed");
    let unknown = err.kind() != PipelineErrorKind::Comparison;
    status.sync = Some(SyncStatus {
        status: SyncCode::Unknown,
        revision: status.sync.as_ref().map(|s| s.revision.clone()).unwrap_or_default(),
        revisions: status.sync.as_ref().map(|s| s.revisions.clone()).unwrap_or_default(),
    });
    if unknown {
        status.health = Some(HealthStatus {
            status: HealthCode::Unknown,
            message: err.to_string(),
        });
    }
    write_status(
        ctx,
        app,
        &mut status,
        None,
        Some((err.condition_type(), err.to_string())),
    )
    .await?;
    Ok(Action::requeue(Duration::from_secs(30).min(ctx.config.poll_interval)))
}

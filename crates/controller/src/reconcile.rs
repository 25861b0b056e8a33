//! What happens to one Application on each trigger.

use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_api::Application;
use capstan_api::application::{ApplicationCondition, ApplicationStatus, HealthStatus, SyncStatus};
use capstan_api::labels::{REFRESH_ANNOTATION, RESOURCES_FINALIZER};
use capstan_api::operation::{OPERATION_ANNOTATION, Operation, OperationPhase, TERMINATE_ANNOTATION};
use capstan_source::Resolved;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use crate::pipeline::{AppState, Pipeline, PipelineError};
use crate::{Config, operation};

/// Shared state of the controller.
pub struct Ctx {
    /// Client of the cluster Capstan runs in.
    pub client: Client,
    /// The pipeline.
    pub pipeline: Arc<Pipeline>,
    /// Git pollers, one per repository.
    pub pollers: crate::poller::Pollers,
    /// Settings.
    pub config: Config,
    /// Who publishes Kubernetes Events.
    reporter: Reporter,
    /// Per Application, the resourceVersion of this controller's last status write and of the
    /// last version its watch delivered (see [`Ctx::cache_is_fresh`]).
    written: std::sync::Mutex<std::collections::HashMap<String, Versions>>,
    /// Running operations' terminate signals, fed by the Application watch.
    terminations: std::sync::Mutex<std::collections::HashMap<String, tokio::sync::watch::Sender<Option<String>>>>,
}

impl Ctx {
    /// A new context.
    pub fn new(client: Client, pipeline: Arc<Pipeline>, pollers: crate::poller::Pollers, config: Config) -> Self {
        let reporter = Reporter {
            controller: "capstan-controller".into(),
            instance: std::env::var("HOSTNAME").ok(),
        };
        Self {
            reporter,
            client,
            pipeline,
            pollers,
            config,
            written: Default::default(),
            terminations: Default::default(),
        }
    }

    /// Whether `cached`, the watch cache's copy of `key` handed to a reconcile, is as fresh as a
    /// read (see [`Versions::fresh`]).
    fn cache_is_fresh(&self, key: &str, cached: &Application) -> bool {
        let rv = cached.resource_version().unwrap_or_default();
        lock(&self.written).get(key).is_some_and(|v| v.fresh(&rv))
    }

    fn record_written(&self, app: &Application) {
        let key = format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any());
        tracing::trace!(app = %key, rv = app.resource_version().unwrap_or_default(), "wrote");
        let mut written = lock(&self.written);
        match app.resource_version() {
            Some(rv) => written.entry(key).or_default().wrote(rv),
            None => {
                written.remove(&key);
            }
        }
    }

    /// The watch delivered `app`, and the cache holds it (not so for the events of a re-list, which
    /// the cache takes in only when the list is complete).
    pub fn record_observed(&self, app: &Application) {
        let Some(rv) = app.resource_version() else { return };
        let key = format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any());
        tracing::trace!(app = %key, %rv, "observed");
        lock(&self.written).entry(key).or_default().observed(rv);
    }

    /// Forget what is kept per Application (it was deleted).
    pub fn forget(&self, key: &str) {
        lock(&self.written).remove(key);
    }

    /// A receiver that turns `Some(who)` when a terminate of `key`'s running operation is asked.
    pub fn watch_terminate(&self, key: &str) -> tokio::sync::watch::Receiver<Option<String>> {
        let (tx, rx) = tokio::sync::watch::channel(None);
        lock(&self.terminations).insert(key.to_string(), tx);
        rx
    }

    /// The operation of `key` ended: no terminate signal for it any more.
    pub fn unwatch_terminate(&self, key: &str) {
        lock(&self.terminations).remove(key);
    }

    /// Called for every Application the watch sees: signal a running operation's terminate request.
    pub fn observe(&self, app: &Application) {
        let Some(who) = app.annotations().get(TERMINATE_ANNOTATION) else {
            return;
        };
        let key = format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any());
        if let Some(tx) = lock(&self.terminations).get(&key) {
            tx.send_replace(Some(if who.is_empty() { "a user".into() } else { who.clone() }));
        }
    }

    /// Publish a Kubernetes Event about `app` (best effort). The returned future owns what it needs,
    /// so it can run beside a write of `app`.
    pub fn event(
        &self,
        app: &Application,
        type_: EventType,
        reason: &str,
        note: String,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "Sync".into(),
            secondary: None,
        };
        // A recorder per event: one shared recorder folds every later event of the same type and
        // reason about an Application into a series of the first one, keeping the first one's
        // message (a second failure would still name the first failed object).
        let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        let reference = app.object_ref(&());
        async move {
            if let Err(err) = recorder.publish(&event, &reference).await {
                tracing::debug!(%err, "publishing an event");
            }
        }
    }
}

/// Resource versions of one Application, as this controller wrote and watched them.
#[derive(Default)]
struct Versions {
    /// Of this controller's last status write.
    written: String,
    /// Of the last version the watch delivered.
    observed: String,
    /// Whether the watch has delivered `written`.
    written_seen: bool,
}

impl Versions {
    /// This controller wrote version `rv`.
    fn wrote(&mut self, rv: String) {
        // The watch may deliver the write before its response arrives.
        self.written_seen = self.observed == rv;
        self.written = rv;
    }

    /// Whether the copy at version `rv` is as fresh as a read: the watch has delivered this
    /// controller's last status write (so a reconcile queued during a sync cannot act on the state
    /// from before that sync's final write), and `rv` is the last version it delivered. The copy a
    /// reconcile gets is taken from the cache when the reconcile is dispatched, which may be just
    /// before the watch delivers the write that the previous reconcile made.
    fn fresh(&self, rv: &str) -> bool {
        self.written_seen && !rv.is_empty() && self.observed == rv
    }

    /// The watch delivered version `rv`.
    fn observed(&mut self, rv: String) {
        if self.written == rv {
            self.written_seen = true;
        }
        self.observed = rv;
    }
}

/// Errors of one reconcile (they are retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// Writing status or metadata failed.
    #[error("updating Application {0}: {1}")]
    Update(String, String),
}

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
            Err(e) => return Err(ReconcileError::Update(name, capstan_compare::describe_kube_error(&e))),
        }
    };
    if app.metadata.deletion_timestamp.is_some() {
        ctx.pollers.forget(&ObjectRef::from_obj(&app));
        return operation::finalize(&app, &ctx).await.map(|_| Action::await_change());
    }

    let annotations = app.metadata.annotations.clone().unwrap_or_default();
    let refresh = annotations.get(REFRESH_ANNOTATION).cloned();
    if refresh.as_deref() == Some("hard") {
        // A hard refresh renders again instead of reusing the render cache (as Argo CD's does).
        let dropped = ctx
            .pipeline
            .renderer
            .invalidate(&app.spec.source, &name, &app.spec.destination.namespace);
        // And Helm is told the cluster's APIs as they are now.
        if let Ok(dest) = ctx.pipeline.destination(&app).await {
            dest.discovery.forget_api_versions().await;
        }
        tracing::debug!(app = %key, dropped, "hard refresh: the next render runs again");
    }
    let raw_request = annotations.get(OPERATION_ANNOTATION).cloned();
    // A request the operation in status carries is being (or has been) handled.
    let requested: Option<Result<Operation, String>> = raw_request
        .as_deref()
        .filter(|raw| !capstan_api::operation::handled(&app, raw))
        .map(|raw| serde_json::from_str(raw).map_err(|e| format!("invalid {OPERATION_ANNOTATION} annotation: {e}")));
    // A request with an id is removed once its operation has finished (the id in status keeps it
    // from running twice); one without is removed before anything else happens.
    let identified = |r: &Option<Result<Operation, String>>| {
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
        operation::clear_terminate(&ctx, &app).await;
        if let Some(a) = app.metadata.annotations.as_mut() {
            a.remove(TERMINATE_ANNOTATION);
        }
    }
    let (resolved, state, compare_time) = match compared {
        Ok(c) => c,
        Err(err) => {
            let action = report_error(&ctx, &mut app, with_failed_request(status, &requested, &err), err).await?;
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
    let op = match requested {
        Some(Ok(op)) => Some(op),
        Some(Err(message)) => {
            set_condition(&mut status, "InvalidSpecError", message);
            None
        }
        None => running.or_else(|| operation::automated(&app, &status, &state)),
    };
    let state = match op {
        Some(op) => {
            // An operation is decided on the cached view; one that will change something acts on a
            // fresh one. (The cache may lag behind the cluster by a watch event: a sync found to
            // have nothing to do is recorded as such, and a change the cache had not seen yet
            // triggers its own comparison when its event arrives.)
            let state = if !resuming && !operation::nothing_to_do(&app, &op, &state) {
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
        status.reconciled_at = Some(now_precise());
    }
    write_status(&ctx, &mut app, &mut status, Some(&state), None).await?;
    tracing::debug!(app = %key, elapsed_ms = started.elapsed().as_millis() as u64, "reconciled");
    clear_handled_request(&ctx, &app, raw_request).await?;
    if operation::automated_could_act(&app, &state.comparison)
        && let Some(due) = operation::retry_due_in(&app, &status)
    {
        // A failed automated sync is retried once its backoff has passed (never sooner than in
        // 250 ms: a reconcile that decides against the retry must not come back at once).
        return Ok(Action::requeue(due.max(Duration::from_millis(250))));
    }
    Ok(Action::requeue(jitter(ctx.config.poll_interval, &key)))
}

/// A requested operation that could not start (Git or rendering failed) is recorded as failed, so
/// the request is not lost silently.
fn with_failed_request(
    mut status: ApplicationStatus,
    requested: &Option<Result<Operation, String>>,
    err: &PipelineError,
) -> ApplicationStatus {
    if let Some(Ok(op)) = requested {
        status.operation_state = Some(capstan_api::application::OperationState {
            phase: OperationPhase::Failed,
            message: format!("the operation could not start: {err}"),
            started_at: now_precise(),
            finished_at: Some(now_precise()),
            operation: Some(op.clone()),
            ..Default::default()
        });
    }
    status
}

async fn resolve(ctx: &Ctx, app: &Application, force: bool) -> Result<Resolved, PipelineError> {
    ctx.pollers.watch(&app.spec.source.repo_url, ObjectRef::from_obj(app));
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
    let unknown = matches!(err, PipelineError::Destination(_) | PipelineError::InvalidSpec(_));
    status.sync = Some(SyncStatus {
        status: "Unknown".into(),
        revision: status.sync.as_ref().map(|s| s.revision.clone()).unwrap_or_default(),
    });
    if unknown {
        status.health = Some(HealthStatus {
            status: "Unknown".into(),
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

/// Put `state` (and an error condition, if any) into `status` and write it when it changed.
pub async fn write_status(
    ctx: &Ctx,
    app: &mut Application,
    status: &mut ApplicationStatus,
    state: Option<&AppState>,
    error: Option<(&str, String)>,
) -> Result<(), ReconcileError> {
    let before = app.status.clone().unwrap_or_default();
    if let Some(state) = state {
        status.sync = Some(SyncStatus {
            status: state.comparison.sync().as_str().into(),
            revision: state.revision.sha.clone(),
        });
        status.health = Some(state.health.clone());
        status.resources = state.resources.clone();
        status
            .conditions
            .retain(|c| !matches!(c.type_.as_str(), "ComparisonError" | "InvalidSpecError"));
        let shared: Vec<String> = state
            .comparison
            .resources
            .iter()
            .filter_map(|r| {
                r.owned_by_other
                    .as_ref()
                    .map(|o| format!("{} is tracked by Application {o}", r.key))
            })
            .collect();
        status.conditions.retain(|c| c.type_ != "SharedResourceWarning");
        if !shared.is_empty() {
            set_condition(status, "SharedResourceWarning", shared.join("; "));
        }
        status.conditions.retain(|c| c.type_ != "ProjectViolation");
        if !state.project_violations.is_empty() {
            set_condition(status, "ProjectViolation", state.project_violations.join("; "));
        }
    }
    if let Some((type_, message)) = error {
        status
            .conditions
            .retain(|c| !matches!(c.type_.as_str(), "ComparisonError" | "InvalidSpecError"));
        set_condition(status, type_, message);
    }
    let mut compare_before = before.clone();
    compare_before.reconciled_at = None;
    let forced = status.reconciled_at.is_some() && status.reconciled_at != before.reconciled_at;
    status.reconciled_at = None;
    if *status == compare_before && !forced {
        status.reconciled_at = before.reconciled_at;
        return Ok(());
    }
    status.reconciled_at = Some(now_precise());
    patch_status(ctx, app, status).await
}

/// Write `status`, sending only what changed from the stored status as a JSON merge patch.
///
/// `app` must hold the status as last stored; it is updated with the stored result, so that several
/// writes in one reconcile each send the difference from the previous one.
pub async fn patch_status(ctx: &Ctx, app: &mut Application, status: &ApplicationStatus) -> Result<(), ReconcileError> {
    let api: Api<Application> = Api::namespaced(ctx.client.clone(), &app.namespace().unwrap_or_default());
    let to_json = |s: &ApplicationStatus| serde_json::to_value(s).unwrap_or(serde_json::Value::Null);
    let before = app.status.as_ref().map(to_json).unwrap_or(serde_json::Value::Null);
    let patch = json!({"status": merge_patch(&before, &to_json(status))});
    let stored = api
        .patch_status(&app.name_any(), &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(|e| ReconcileError::Update(app.name_any(), capstan_compare::describe_kube_error(&e)))?;
    ctx.record_written(&stored);
    *app = stored;
    Ok(())
}

/// The RFC 7386 merge patch that turns `old` into `new`: changed keys, `null` for removed keys,
/// arrays and scalars replaced whole.
///
/// Hand-written because the maintained JSON patch crates create RFC 6902 patches (index-based array
/// operations that break when the stored object moved on), not merge patches.
pub fn merge_patch(old: &serde_json::Value, new: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut patch = serde_json::Map::new();
            for (k, nv) in n {
                match o.get(k) {
                    Some(ov) if ov == nv => {}
                    Some(ov) if ov.is_object() && nv.is_object() => {
                        patch.insert(k.clone(), merge_patch(ov, nv));
                    }
                    _ => {
                        patch.insert(k.clone(), nv.clone());
                    }
                }
            }
            for k in o.keys().filter(|k| !n.contains_key(*k)) {
                patch.insert(k.clone(), Value::Null);
            }
            Value::Object(patch)
        }
        (_, n) => n.clone(),
    }
}

fn set_condition(status: &mut ApplicationStatus, type_: &str, message: String) {
    if let Some(c) = status.conditions.iter_mut().find(|c| c.type_ == type_) {
        if c.message != message {
            c.message = message;
            c.last_transition_time = now();
        }
        return;
    }
    status.conditions.push(ApplicationCondition {
        type_: type_.into(),
        message,
        last_transition_time: now(),
    });
}

/// Remove the request `raw` once the stored `app` says its operation has finished (the request
/// names the operation in status, which is not running). Before that it stays: a restart resumes the
/// operation it names, and never runs it twice.
async fn clear_handled_request(ctx: &Ctx, app: &Application, raw: Option<String>) -> Result<(), ReconcileError> {
    let Some(raw) = raw.filter(|raw| capstan_api::operation::handled(app, raw)) else {
        return Ok(());
    };
    let running = capstan_api::operation::operation_running(app);
    if running {
        return Ok(());
    }
    clear_annotations(&ctx.client, app, None, Some(raw)).await
}

/// Remove the refresh and operation request annotations, unless they changed since `app` was read
/// (a JSON patch that first tests their values: a request written meanwhile is kept for the next
/// reconcile).
pub async fn clear_annotations(
    client: &Client,
    app: &Application,
    refresh: Option<String>,
    operation: Option<String>,
) -> Result<(), ReconcileError> {
    let api: Api<Application> = Api::namespaced(client.clone(), &app.namespace().unwrap_or_default());
    use json_patch::{PatchOperation, RemoveOperation, TestOperation, jsonptr::PointerBuf};
    let mut ops = Vec::new();
    for (key, value) in [(REFRESH_ANNOTATION, refresh), (OPERATION_ANNOTATION, operation)] {
        let Some(value) = value else { continue };
        let path = PointerBuf::from_tokens(["metadata", "annotations", key]);
        ops.push(PatchOperation::Test(TestOperation {
            path: path.clone(),
            value: value.into(),
        }));
        ops.push(PatchOperation::Remove(RemoveOperation { path }));
    }
    let patch = json_patch::Patch(ops);
    match api
        .patch(&app.name_any(), &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
    {
        Ok(_) => Ok(()),
        // A test failed: a newer request replaced the one read; its own reconcile follows.
        Err(kube::Error::Api(s)) if s.code == 422 => {
            tracing::debug!(app = %app.name_any(), message = %s.message, "request changed before it was cleared");
            Ok(())
        }
        Err(e) => Err(ReconcileError::Update(
            app.name_any(),
            capstan_compare::describe_kube_error(&e),
        )),
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether `app` carries the resources finalizer.
pub fn has_finalizer(app: &Application) -> bool {
    app.finalizers().iter().any(|f| f == RESOURCES_FINALIZER)
}

/// Now, RFC 3339.
pub fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Now, RFC 3339 with milliseconds: `reconciledAt` must change between two reconciles in one second,
/// since clients wait for it to change after a refresh.
pub fn now_precise() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

/// `base` plus up to 10 % that is stable per `key` (an Application, a repository URL), so polls
/// spread out.
pub(crate) fn jitter(base: Duration, key: &str) -> Duration {
    let hash = {
        use std::hash::Hasher;
        let mut h = fnv::FnvHasher::default();
        h.write(key.as_bytes());
        h.finish()
    };
    let extra = base.as_millis() as u64 / 10;
    base + Duration::from_millis(if extra == 0 { 0 } else { hash % extra })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_is_fresh_once_the_watch_delivered_the_last_write() {
        let mut v = Versions::default();
        assert!(!v.fresh(""), "nothing written, nothing seen: read");
        v.wrote("10".into());
        assert!(!v.fresh("10"), "written, not delivered yet");
        v.observed("9".into());
        assert!(!v.fresh("9"), "an older version delivered late");
        v.observed("10".into());
        assert!(v.fresh("10"));
        assert!(!v.fresh("9"), "a copy taken before the write was delivered");
        v.observed("11".into());
        assert!(v.fresh("11"), "someone else's later change keeps the cache fresh");
        assert!(!v.fresh("10"), "a copy taken before that change was delivered");
        v.wrote("12".into());
        assert!(!v.fresh("11"), "a new write is not delivered yet");
        // The watch delivering a write before the response to it arrives.
        v.observed("13".into());
        v.wrote("13".into());
        assert!(v.fresh("13"));
    }

    #[test]
    fn merge_patches_carry_only_changes_and_null_removed_keys() {
        let old = json!({"a": 1, "b": {"c": 1, "d": 2}, "e": [1, 2], "gone": true});
        let new = json!({"a": 1, "b": {"c": 1, "d": 3}, "e": [1], "f": "x"});
        assert_eq!(
            merge_patch(&old, &new),
            json!({"b": {"d": 3}, "e": [1], "f": "x", "gone": null})
        );
        assert_eq!(merge_patch(&json!(null), &json!({"a": 1})), json!({"a": 1}));
        assert_eq!(merge_patch(&old, &old), json!({}));
    }
}

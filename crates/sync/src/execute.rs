//! Running a sync plan against a cluster.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_api::application::ResourceResult;
use capstan_compare::annotations::{self, DeletePolicy, Phase};
use capstan_compare::diff::FIELD_MANAGER;
use capstan_compare::normalize::owner;
use capstan_compare::{Comparison, ObjectKey, OwnWrites, ResourceState};
use capstan_health::HealthCode;
use futures::{StreamExt, stream};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, PropagationPolicy};
use serde_json::Value;
use tokio::sync::{Semaphore, watch};

use crate::error::{RecordError, SyncError};
use crate::options::SyncOptions;
use crate::plan::{self, Action, PlanOptions, Task};

/// Result message of objects that already equalled Git and were not applied again.
pub const UNCHANGED: &str = "unchanged";

/// How many write requests of syncs may be in flight to one cluster: the objects of one wave are
/// applied this many at a time, and the syncs of several Applications to one cluster share the limit
/// (see [`ExecuteOptions::writes`]). On the playground's 2-core API server a first sync of 2,000
/// ConfigMaps took 2.2 s with 64 at a time against 2.5 s with 16; the API server's own limit of
/// mutating requests in flight is 200 by default (more are answered 429, which the client retries).
pub const PARALLELISM: usize = 64;

/// Kinds whose objects decide whether others are admitted: a sync that changes one is not validated
/// in advance (see `Run::validate_new_objects`).
const DECIDE_ADMISSION: &[&str] = &[
    "CustomResourceDefinition",
    "Namespace",
    "ResourceQuota",
    "LimitRange",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "PodSecurityPolicy",
    "APIService",
];

/// How one sync operation runs (the sync options it was given among them, see [`SyncOptions`]).
#[derive(Debug, Clone)]
pub struct ExecuteOptions {
    /// Delete tracked objects that are no longer in Git.
    pub prune: bool,
    /// Validate with the API server, change nothing.
    pub dry_run: bool,
    /// Prune after everything else.
    pub prune_last: bool,
    /// Apply only OutOfSync objects (objects that already equal Git are kept as they are).
    pub apply_out_of_sync_only: bool,
    /// Create the destination namespace if it is missing.
    pub create_namespace: bool,
    /// The destination namespace.
    pub destination_namespace: String,
    /// Only these objects (all when empty).
    pub selected: Vec<ObjectKey>,
    /// How long one wave may take to become healthy (and a hook to complete).
    pub wave_timeout: Duration,
    /// Hook tasks (`PHASE:KEY`) already completed by an interrupted run of this operation.
    pub completed_hooks: HashSet<String>,
    /// The write requests (applies, prunes, validations) in flight to the destination, shared by
    /// the syncs of every Application that deploys there: at most [`PARALLELISM`].
    pub writes: Arc<Semaphore>,
    /// Where the versions this sync writes are recorded, so the destination's watches know them as
    /// Capstan's own (see [`OwnWrites`]).
    pub own_writes: OwnWrites,
}

impl Default for ExecuteOptions {
    fn default() -> Self {
        Self {
            prune: false,
            dry_run: false,
            prune_last: false,
            apply_out_of_sync_only: true,
            create_namespace: false,
            destination_namespace: String::new(),
            selected: Vec::new(),
            wave_timeout: Duration::from_secs(600),
            completed_hooks: HashSet::new(),
            writes: Arc::new(Semaphore::new(PARALLELISM)),
            own_writes: OwnWrites::default(),
        }
    }
}

/// Progress of a running sync.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    /// What is happening now (names the object being waited for).
    pub message: String,
    /// Results so far.
    pub results: Vec<ResourceResult>,
}

/// The end of a sync.
#[derive(Debug, Clone, Default)]
pub struct SyncOutcome {
    /// Whether every task succeeded.
    pub succeeded: bool,
    /// Summary or the first error.
    pub message: String,
    /// Per-object results.
    pub results: Vec<ResourceResult>,
    /// The last state the sync saw of each object it applied, waited for or deleted (`None`:
    /// deleted), with only Capstan's own `managedFields` entry: the API server's answers to its
    /// requests. Hooks are not included.
    pub observed: HashMap<ObjectKey, Option<Value>>,
}

/// Whether the operation has been recorded as running, so that a controller restart resumes it
/// rather than starting it again.
///
/// Applying an object twice changes nothing, so the applies of the first stage need not wait for
/// the record; hooks (which must never run twice) and every later stage do. A record that failed
/// stops the sync before its next stage.
#[derive(Clone)]
pub struct Recorded(watch::Receiver<Option<Result<(), RecordError>>>);

/// Opens a [`Recorded`] gate once the operation's record has been written (or has failed).
pub struct Recording(watch::Sender<Option<Result<(), RecordError>>>);

impl Recorded {
    /// A closed gate and the [`Recording`] that opens it.
    pub fn gate() -> (Recording, Recorded) {
        let (tx, rx) = watch::channel(None);
        (Recording(tx), Recorded(rx))
    }

    /// Why the record could not be written, if it has failed already (without waiting).
    pub fn failure(&self) -> Option<RecordError> {
        self.0.borrow().as_ref().and_then(|r| r.clone().err())
    }

    /// Wait until the record has been written; its error if it failed.
    pub async fn wait(&mut self) -> Result<(), RecordError> {
        match self.0.wait_for(Option::is_some).await {
            Ok(done) => done.clone().unwrap_or(Ok(())),
            Err(_) => Err(RecordError::NotRecorded),
        }
    }
}

impl Recording {
    /// The record was written (`Ok`) or could not be (`Err`, with why).
    pub fn finish(self, result: Result<(), RecordError>) {
        let _ = self.0.send(Some(result));
    }
}

/// Run the sync of `comparison`. Progress is published on `progress` when given. Only the applies of
/// the first stage run before `recorded` is open (see [`Recorded`]).
pub async fn execute(
    client: &kube::Client,
    comparison: &Comparison,
    opts: &ExecuteOptions,
    progress: Option<&watch::Sender<Progress>>,
    recorded: Recorded,
) -> SyncOutcome {
    let resources = &comparison.resources;
    let plan_opts = PlanOptions {
        prune: opts.prune,
        prune_last: opts.prune_last,
        apply_out_of_sync_only: opts.apply_out_of_sync_only,
        selected: opts.selected.clone(),
    };
    let tasks = match plan::plan(resources, &plan_opts) {
        Ok(t) => t,
        Err(err) => return failed(SyncError::from(err).to_string(), Vec::new()),
    };
    let (main, sync_fail): (Vec<Task>, Vec<Task>) = tasks.into_iter().partition(|t| t.phase != Phase::SyncFail);
    // A SyncFail hook that cannot run fails the sync before anything at all happens.
    if let Some(message) = refusal(resources, &sync_fail) {
        return failed(message, Vec::new());
    }
    let mut run = Run {
        client,
        resources,
        opts,
        progress,
        recorded: Some(recorded),
        results: Vec::new(),
        unchanged: 0,
        observed: HashMap::new(),
    };
    // Refused before anything is applied (the SyncFail hooks still run, as for any failed sync).
    if let Some(message) = refusal(resources, &main) {
        return run.fail(SyncError::Refused(message), &sync_fail).await;
    }
    if opts.create_namespace
        && !opts.destination_namespace.is_empty()
        && !opts.dry_run
        && let Err(err) = ensure_namespace(client, &opts.destination_namespace).await
    {
        return run.fail(err, &sync_fail).await;
    }
    if let Err(err) = run.validate_new_objects(&main).await {
        return run.fail(err, &sync_fail).await;
    }
    let groups = plan::waves(&main);
    let group_count = groups.len();
    for (i, group) in groups.into_iter().enumerate() {
        let last = i + 1 == group_count;
        // Only plain applies may run before the operation is recorded (see `Recorded`).
        let idempotent = group.iter().all(|t| matches!(t.action, Action::Apply | Action::Keep));
        if (i > 0 || !idempotent)
            && let Err(err) = run.wait_recorded().await
        {
            return run.finish(false, err.to_string());
        }
        if let Err(err) = run.stage(group, last).await {
            return run.fail(err, &sync_fail).await;
        }
    }
    if let Err(err) = run.wait_recorded().await {
        return run.finish(false, err.to_string());
    }
    let applied = run
        .results
        .iter()
        .filter(|r| r.status == "Synced" && r.sync_phase == "Sync")
        .count();
    let unchanged = run.unchanged;
    let pruned = run.results.iter().filter(|r| r.status == "Pruned").count();
    let message = if opts.dry_run {
        format!("dry run: {applied} objects would be applied, {pruned} pruned")
    } else {
        format!("successfully synced ({applied} applied, {unchanged} unchanged, {pruned} pruned)")
    };
    run.finish(true, message)
}

/// Why `tasks` must not run at all: an object tracked by another Application, or one the API server
/// already refused when it was compared.
fn refusal(resources: &[ResourceState], tasks: &[Task]) -> Option<String> {
    tasks.iter().find_map(|t| {
        let state = &resources[t.index];
        if let Some(other) = &state.owned_by_other {
            return Some(format!(
                "refusing to take over {}: it is tracked by Application {other}",
                t.key
            ));
        }
        match (&state.error, t.action) {
            (Some(error), Action::Apply) => Some(format!("applying {}: {error}", t.key)),
            _ => None,
        }
    })
}

fn failed(message: String, results: Vec<ResourceResult>) -> SyncOutcome {
    SyncOutcome {
        succeeded: false,
        message,
        results,
        observed: HashMap::new(),
    }
}

struct Run<'a> {
    client: &'a kube::Client,
    resources: &'a [ResourceState],
    opts: &'a ExecuteOptions,
    progress: Option<&'a watch::Sender<Progress>>,
    /// The operation's record; `None` once it is known to be written.
    recorded: Option<Recorded>,
    results: Vec<ResourceResult>,
    unchanged: usize,
    observed: HashMap<ObjectKey, Option<Value>>,
}

/// A task's result status (`Synced`, `Pruned`, …) and what it saw of its object, or why it failed.
type TaskOutcome = Result<(String, Seen), SyncError>;

/// What a task saw of its object.
enum Seen {
    /// Nothing new (left as it was, or a hook).
    Nothing,
    /// The object as the API server returned it.
    Object(Value),
    /// The object was deleted.
    Deleted,
}

impl Run<'_> {
    /// Wait for the operation's record (at once when it is known to be written).
    async fn wait_recorded(&mut self) -> Result<(), RecordError> {
        if let Some(recorded) = self.recorded.as_mut() {
            recorded.wait().await?;
            self.recorded = None;
        }
        Ok(())
    }

    /// The outcome of the run so far.
    fn finish(self, succeeded: bool, message: String) -> SyncOutcome {
        SyncOutcome {
            succeeded,
            message,
            results: self.results,
            observed: self.observed,
        }
    }

    /// The sync failed with `message`: run the SyncFail hooks (not in a dry run), then end.
    async fn fail(mut self, err: SyncError, sync_fail: &[Task]) -> SyncOutcome {
        let mut message = err.to_string();
        if !sync_fail.is_empty() && !self.opts.dry_run {
            if let Err(err) = self.wait_recorded().await {
                return self.finish(false, format!("{message}; SyncFail hooks not run: {err}"));
            }
            self.report("running SyncFail hooks");
            for group in plan::waves(sync_fail) {
                if let Err(hook_err) = self.stage(group, true).await {
                    message.push_str(&format!("; SyncFail hook failed too: {hook_err}"));
                    break;
                }
            }
        }
        self.finish(false, message)
    }

    fn report(&self, message: impl Into<String>) {
        if let Some(tx) = self.progress {
            let _ = tx.send(Progress {
                message: message.into(),
                results: self.results.clone(),
            });
        }
    }

    /// Run one (phase, wave) group in parallel, then wait for it to be healthy unless it is the last.
    async fn stage(&mut self, group: &[Task], last: bool) -> Result<(), SyncError> {
        let Some(first) = group.first() else { return Ok(()) };
        self.report(format!(
            "{} wave {}: {} task(s)",
            first.phase.as_str(),
            display_wave(first),
            group.len()
        ));
        let this = &*self;
        // Indices, not references, as stream items: keeps the future `Send` for every lifetime.
        let outcomes: Vec<(usize, TaskOutcome)> = stream::iter(0..group.len())
            .map(|i| {
                let task = &group[i];
                async move { (i, this.task(task).await) }
            })
            .buffer_unordered(PARALLELISM)
            .collect()
            .await;
        let mut outcomes = outcomes;
        outcomes.sort_by_key(|(i, _)| *i);
        let mut first_error = None;
        let mut to_wait = Vec::new();
        for (i, outcome) in outcomes {
            let task = &group[i];
            let outcome = outcome.map(|(status, seen)| {
                self.saw(task, seen);
                status
            });
            let (status, message) = match &outcome {
                Ok(status) if task.action == Action::Keep => (status.clone(), UNCHANGED.to_string()),
                Ok(status) => (status.clone(), String::new()),
                Err(err) => ("SyncFailed".to_string(), err.to_string()),
            };
            let settled = task.action == Action::Keep
                && self.resources[task.index].live.as_ref().is_some_and(|live| {
                    matches!(
                        capstan_health::assess(live).code,
                        HealthCode::Healthy | HealthCode::Suspended
                    )
                });
            if outcome.is_ok() && matches!(task.action, Action::Apply | Action::Keep) && !settled {
                to_wait.push(task);
            }
            let succeeded = outcome.is_ok();
            if let Err(err) = outcome
                && first_error.is_none()
            {
                first_error = Some(SyncError::Task {
                    verb: verb(task.action),
                    key: task.key.clone(),
                    source: Box::new(err),
                });
            }
            if task.action == Action::Keep && succeeded {
                // Objects left as they were are counted, not listed: a re-sync of thousands of
                // unchanged objects should not produce (and store) thousands of results.
                self.unchanged += 1;
            } else {
                self.results
                    .push(result(task, &self.resources[task.index], &status, &message));
            }
        }
        if let Some(err) = first_error {
            return Err(err);
        }
        let hooks = group.iter().filter(|t| t.action == Action::Hook).count();
        if hooks > 0 {
            // Published at once: the operation's record of completed hooks keeps a restart from
            // running them again.
            self.report(format!(
                "{} wave {}: {hooks} hook(s) completed",
                first.phase.as_str(),
                display_wave(first)
            ));
        }
        if !last && !self.opts.dry_run && !to_wait.is_empty() {
            self.wait_healthy(&to_wait).await?;
        }
        Ok(())
    }

    /// When the sync changes or deletes objects that exist, first have the API server validate the
    /// objects it will create (a server-side dry run), so that one it would reject fails the sync
    /// before anything that runs is touched. Objects that exist were validated when they were
    /// compared; a sync that only creates objects needs no such step (nothing running is touched,
    /// and a first sync of thousands of objects is not doubled). An object whose namespace or kind
    /// does not exist yet (created by this sync) cannot be validated in advance.
    async fn validate_new_objects(&self, tasks: &[Task]) -> Result<(), SyncError> {
        if self.opts.dry_run {
            return Ok(());
        }
        let is_new = |t: &&Task| {
            let state = &self.resources[t.index];
            t.action == Action::Apply && state.live.is_none() && state.desired.is_some()
        };
        let touches_existing = tasks.iter().any(|t| {
            let state = &self.resources[t.index];
            match t.action {
                Action::Apply => state.live.is_some(),
                Action::Prune => true,
                Action::Hook | Action::Keep => false,
            }
        });
        // What an earlier wave changes may decide whether a new object is accepted (a quota, a
        // limit range, an admission webhook or policy, a namespace's labels, a CRD's schema): the
        // cluster as it is now would be the wrong judge.
        let changes_admission = tasks
            .iter()
            .any(|t| t.action == Action::Apply && DECIDE_ADMISSION.contains(&t.key.kind.as_str()));
        let new: Vec<&Task> = tasks.iter().filter(is_new).collect();
        if !touches_existing || changes_admission || new.is_empty() {
            return Ok(());
        }
        self.report(format!("validating {} new object(s) with the API server", new.len()));
        let refused: Vec<(usize, Option<SyncError>)> = stream::iter(0..new.len())
            .map(|i| {
                let state = &self.resources[new[i].index];
                async move {
                    let refusal = match write_permit(&self.opts.writes).await {
                        Ok(_permit) => validate(self.client, state).await,
                        Err(stopped) => Some(stopped),
                    };
                    (i, refusal)
                }
            })
            .buffer_unordered(PARALLELISM)
            .collect()
            .await;
        let first = refused
            .into_iter()
            .filter_map(|(i, refusal)| refusal.map(|r| (i, r)))
            .min_by_key(|(i, _)| *i);
        match first {
            Some((i, refusal)) => Err(SyncError::Task {
                verb: "applying",
                key: new[i].key.clone(),
                source: Box::new(refusal),
            }),
            None => Ok(()),
        }
    }

    /// Remember what a task saw of its object (a dry run changes nothing, so it sees nothing).
    fn saw(&mut self, task: &Task, seen: Seen) {
        if self.opts.dry_run || task.action == Action::Hook {
            return;
        }
        match seen {
            Seen::Nothing => {}
            Seen::Object(obj) => {
                self.observed.insert(task.key.clone(), Some(obj));
            }
            Seen::Deleted => {
                self.observed.insert(task.key.clone(), None);
            }
        }
    }

    async fn task(&self, task: &Task) -> TaskOutcome {
        let state = &self.resources[task.index];
        // Hooks are created once and then waited for: only applies (per request, see `apply`) and
        // prunes count as writes.
        let _permit = match task.action {
            Action::Prune => Some(write_permit(&self.opts.writes).await?),
            Action::Apply | Action::Hook | Action::Keep => None,
        };
        match task.action {
            Action::Apply => apply(self.client, state, self.opts.dry_run, &self.opts.writes)
                .await
                .map(|obj| {
                    if let Some(version) = obj.as_ref().and_then(resource_version)
                        && !self.opts.dry_run
                    {
                        self.opts.own_writes.record(&task.key, version);
                    }
                    ("Synced".to_string(), obj.map_or(Seen::Nothing, Seen::Object))
                }),
            Action::Keep => Ok(("Synced".to_string(), Seen::Nothing)),
            Action::Prune => prune(self.client, state, self.opts.dry_run).await,
            Action::Hook => {
                let id = format!("{}:{}", task.phase.as_str(), task.key);
                if self.opts.completed_hooks.contains(&id) {
                    return Ok(("Synced".into(), Seen::Nothing));
                }
                if self.opts.dry_run {
                    return Ok(("Skipped".into(), Seen::Nothing));
                }
                run_hook(self.client, state, self.opts.wave_timeout, |m| self.report(m))
                    .await
                    .map(|_| ("Synced".into(), Seen::Nothing))
            }
        }
    }

    async fn wait_healthy(&mut self, tasks: &[&Task]) -> Result<(), SyncError> {
        let deadline = Instant::now() + self.opts.wave_timeout;
        let mut pending: Vec<&Task> = tasks.to_vec();
        loop {
            // A record that failed ends the sync now, not after the wave's wait.
            if let Some(err) = self.recorded.as_ref().and_then(Recorded::failure) {
                return Err(err.into());
            }
            let this = &*self;
            let checks: Vec<(usize, Option<Value>)> = stream::iter(0..pending.len())
                .map(|i| {
                    let state = &this.resources[pending[i].index];
                    async move { (i, read(this.client, state).await) }
                })
                .buffer_unordered(PARALLELISM)
                .collect()
                .await;
            let mut still = Vec::new();
            let mut waiting_on = None;
            let mut checks = checks;
            checks.sort_by_key(|(i, _)| *i);
            for (i, live) in checks {
                let health = live.as_ref().map(|obj| {
                    let h = capstan_health::assess(obj);
                    (h.code, h.message)
                });
                if let Some(obj) = live {
                    self.saw(pending[i], Seen::Object(obj));
                }
                let healthy = matches!(health, Some((HealthCode::Healthy | HealthCode::Suspended, _)));
                if !healthy {
                    if waiting_on.is_none() {
                        let (code, msg) = health.unwrap_or((HealthCode::Missing, "not found".into()));
                        let detail = if msg.is_empty() {
                            String::new()
                        } else {
                            format!(": {msg}")
                        };
                        waiting_on = Some(format!("{} ({}{detail})", pending[i].key, code.as_str()));
                    }
                    still.push(pending[i]);
                }
            }
            if still.is_empty() {
                return Ok(());
            }
            let waiting_on = waiting_on.unwrap_or_default();
            if Instant::now() > deadline {
                return Err(SyncError::WaveTimeout {
                    seconds: self.opts.wave_timeout.as_secs(),
                    waiting_on,
                });
            }
            self.report(format!(
                "waiting for healthy state of {waiting_on}{}",
                more(still.len())
            ));
            pending = still;
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

fn more(n: usize) -> String {
    if n > 1 {
        format!(" and {} more", n - 1)
    } else {
        String::new()
    }
}

fn display_wave(t: &Task) -> String {
    if t.action == Action::Prune {
        "prune".into()
    } else {
        t.wave.to_string()
    }
}

fn verb(action: Action) -> &'static str {
    match action {
        Action::Apply => "applying",
        Action::Hook => "hook",
        Action::Prune => "pruning",
        Action::Keep => "keeping",
    }
}

fn result(task: &Task, state: &ResourceState, status: &str, message: &str) -> ResourceResult {
    ResourceResult {
        group: task.key.group.clone(),
        version: state.info.resource.version.clone(),
        kind: task.key.kind.clone(),
        namespace: task.key.namespace.clone(),
        name: task.key.name.clone(),
        status: status.to_string(),
        message: message.to_string(),
        sync_phase: task.phase.as_str().to_string(),
        sync_wave: state.wave,
        hook: task.action == Action::Hook,
    }
}

fn api_for(client: &kube::Client, state: &ResourceState, namespace: &str) -> Api<DynamicObject> {
    if state.info.namespaced {
        Api::namespaced_with(client.clone(), namespace, &state.info.resource)
    } else {
        Api::all_with(client.clone(), &state.info.resource)
    }
}

/// Server-side apply (or replace, with `Replace=true`), retrying briefly while a just-created CRD's
/// kind is not yet served. Returns the object as the API server answered. Each request takes a place
/// among `writes` (not held while waiting to retry).
async fn apply(
    client: &kube::Client,
    state: &ResourceState,
    dry_run: bool,
    writes: &Semaphore,
) -> Result<Option<Value>, SyncError> {
    let Some(desired) = &state.desired else { return Ok(None) };
    let api = api_for(client, state, &state.key.namespace);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let permit = write_permit(writes).await?;
        let res = send(&api, state, desired, dry_run).await;
        drop(permit);
        match res {
            Ok(obj) => return Ok(observed(obj)),
            Err(kube::Error::Api(s)) if s.code == 404 && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Why the API server would refuse to create the object of `state` (a server-side dry run), if it
/// would; `None` also when it cannot tell yet (the namespace or kind is created by this sync).
async fn validate(client: &kube::Client, state: &ResourceState) -> Option<SyncError> {
    let desired = state.desired.as_ref()?;
    let api = api_for(client, state, &state.key.namespace);
    match send(&api, state, desired, true).await {
        Ok(_) => None,
        Err(kube::Error::Api(s)) if s.code == 404 => None,
        Err(e) => Some(e.into()),
    }
}

/// A place among the write requests in flight to the destination.
async fn write_permit(writes: &Semaphore) -> Result<tokio::sync::SemaphorePermit<'_>, SyncError> {
    writes.acquire().await.map_err(|_| SyncError::Stopped)
}

/// One request writing `desired`: a server-side apply, or a replace with `Replace=true`.
async fn send(
    api: &Api<DynamicObject>,
    state: &ResourceState,
    desired: &Value,
    dry_run: bool,
) -> Result<DynamicObject, kube::Error> {
    if SyncOptions::of_object(desired).replace {
        return replace(api, state, desired, dry_run).await;
    }
    let mut pp = PatchParams::apply(FIELD_MANAGER).force();
    if dry_run {
        pp = pp.dry_run();
    }
    api.patch(&state.key.name, &pp, &Patch::Apply(desired)).await
}

async fn replace(
    api: &Api<DynamicObject>,
    state: &ResourceState,
    desired: &Value,
    dry_run: bool,
) -> Result<DynamicObject, kube::Error> {
    let mut obj: DynamicObject = serde_json::from_value(desired.clone()).map_err(kube::Error::SerdeError)?;
    let pp = PostParams {
        dry_run,
        field_manager: Some(FIELD_MANAGER.into()),
    };
    match api.get_opt(&state.key.name).await? {
        Some(live) => {
            obj.metadata.resource_version = live.metadata.resource_version;
            api.replace(&state.key.name, &pp, &obj).await
        }
        None => api.create(&pp, &obj).await,
    }
}

async fn prune(client: &kube::Client, state: &ResourceState, dry_run: bool) -> TaskOutcome {
    let live = state.live.as_ref();
    if live.is_some_and(|l| !SyncOptions::of_object(l).prune) {
        return Ok(("PruneSkipped".into(), Seen::Nothing));
    }
    let api = api_for(client, state, &state.key.namespace);
    // Delete exactly the object that was compared: one recreated meanwhile (maybe by someone else)
    // has another uid and is left alone.
    let uid = live
        .and_then(|l| l.pointer("/metadata/uid"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let dp = DeleteParams {
        dry_run,
        propagation_policy: Some(PropagationPolicy::Background),
        preconditions: uid.map(|uid| kube::api::Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    // A deleted object may live on for a while (finalizers): it is gone for the Application,
    // whose next comparison sees it if it is still there.
    match api.delete(&state.key.name, &dp).await {
        Ok(_) => Ok(("Pruned".into(), Seen::Deleted)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(("Pruned".into(), Seen::Deleted)),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(("PruneSkipped".into(), Seen::Nothing)),
        Err(e) => Err(e.into()),
    }
}

async fn ensure_namespace(client: &kube::Client, name: &str) -> Result<(), SyncError> {
    use k8s_namespace::*;
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &namespace_resource());
    match api.get_opt(name).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => {
            let ns: DynamicObject = serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}
            }))?;
            match api.create(&PostParams::default(), &ns).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                Err(source) => Err(SyncError::Namespace {
                    action: "creating",
                    name: name.to_string(),
                    source,
                }),
            }
        }
        Err(source) => Err(SyncError::Namespace {
            action: "reading",
            name: name.to_string(),
            source,
        }),
    }
}

mod k8s_namespace {
    use kube::core::GroupVersionKind;
    use kube::discovery::ApiResource;

    pub fn namespace_resource() -> ApiResource {
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Namespace"), "namespaces")
    }
}

/// The object of `state` as it is now, or None when it does not exist (or cannot be read).
async fn read(client: &kube::Client, state: &ResourceState) -> Option<Value> {
    let api = api_for(client, state, &state.key.namespace);
    observed(api.get_opt(&state.key.name).await.ok()??)
}

/// The `resourceVersion` of an object the API server returned.
fn resource_version(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/resourceVersion").and_then(Value::as_str)
}

/// An object the API server returned, as the comparison reads live objects: of `managedFields`
/// only Capstan's own apply entry (which says what a field removed from Git would change).
fn observed(mut obj: DynamicObject) -> Option<Value> {
    capstan_compare::owned::keep_own_apply_entry(&mut obj.metadata);
    serde_json::to_value(obj).ok()
}

/// Create a hook and wait for it to complete; delete it according to its policy.
async fn run_hook(
    client: &kube::Client,
    state: &ResourceState,
    timeout: Duration,
    report: impl Fn(String),
) -> Result<(), SyncError> {
    let Some(desired) = &state.desired else { return Ok(()) };
    let policies = annotations::delete_policies(desired);
    let api = api_for(client, state, &state.key.namespace);
    let generate = desired
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .is_none();
    let name = if generate {
        let obj: DynamicObject = serde_json::from_value(desired.clone())?;
        let created = api.create(&PostParams::default(), &obj).await?;
        created.metadata.name.unwrap_or_default()
    } else {
        let name = state.key.name.clone();
        if policies.contains(&DeletePolicy::BeforeHookCreation) {
            delete_previous_hook(&api, state, desired).await?;
        }
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        api.patch(&name, &pp, &Patch::Apply(desired)).await?;
        name
    };
    let deadline = Instant::now() + timeout;
    let outcome = loop {
        let live = api.get_opt(&name).await?;
        let Some(live) = live else {
            break Err(SyncError::HookDisappeared(name.clone()));
        };
        let value = serde_json::to_value(live)?;
        let health = capstan_health::assess(&value);
        match health.code {
            HealthCode::Healthy => break Ok(()),
            HealthCode::Degraded => {
                break Err(SyncError::HookFailed {
                    name: name.clone(),
                    message: health.message,
                });
            }
            _ if Instant::now() > deadline => {
                break Err(SyncError::HookTimeout {
                    name: name.clone(),
                    seconds: timeout.as_secs(),
                });
            }
            _ => {
                report(format!("waiting for hook {}/{name} to complete", state.key.kind));
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    };
    let delete = match &outcome {
        Ok(()) => policies.contains(&DeletePolicy::HookSucceeded),
        Err(_) => policies.contains(&DeletePolicy::HookFailed),
    };
    if delete {
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..Default::default()
        };
        let _ = api.delete(&name, &dp).await;
    }
    outcome
}

/// `BeforeHookCreation`: delete the previous run of a hook (and wait until it is gone) — but only an
/// object this Application created: an existing object of the same name that is not tracked by it
/// (someone else's, or nobody's) fails the hook instead. The delete names the uid that was checked,
/// so an object recreated meanwhile is never deleted.
async fn delete_previous_hook(
    api: &Api<DynamicObject>,
    state: &ResourceState,
    desired: &Value,
) -> Result<(), SyncError> {
    let name = &state.key.name;
    let what = format!("{}/{name}", state.key.kind);
    let Some(live) = api.get_opt(name).await? else {
        return Ok(());
    };
    let live = serde_json::to_value(live)?;
    // The desired object carries this Application's tracking id (set when it was prepared).
    let ours = owner(desired);
    if ours.is_none() || owner(&live) != ours {
        return Err(SyncError::HookNotReplaced(format!(
            "{what} exists and is not managed by this Application; refusing to replace it"
        )));
    }
    let Some(uid) = live
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return Err(SyncError::HookNotReplaced(format!(
            "{what} has no uid; refusing to replace it"
        )));
    };
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Foreground),
        preconditions: Some(kube::api::Preconditions {
            uid: Some(uid.clone()),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(name, &dp).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            return Err(SyncError::HookNotReplaced(format!(
                "{what} was replaced by another object while deleting the previous hook; refusing to replace it"
            )));
        }
        Err(e) => return Err(e.into()),
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        match api.get_opt(name).await? {
            None => return Ok(()),
            Some(obj) if obj.metadata.uid.as_deref() != Some(uid.as_str()) => {
                return Err(SyncError::HookNotReplaced(format!(
                    "{what} was recreated by someone else while deleting the previous hook; refusing to replace it"
                )));
            }
            Some(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    Err(SyncError::HookNotReplaced(format!(
        "previous hook {what} was not deleted within 60 s"
    )))
}

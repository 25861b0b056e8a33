//! Running a sync plan against a cluster: stage by stage (phase, then wave), each stage's tasks in
//! parallel, waiting for health between waves, hooks once the operation is recorded.

mod api;
mod gate;
mod hooks;
mod model;
mod report;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use capstan_api::application::ResourceResult;
use capstan_api::status::ResultCode;
use capstan_compare::{Comparison, ResourceState};
use capstan_health::HealthCode;
use capstan_kube::ObjectKey;
use capstan_kube::annotations::Phase;
use futures::{StreamExt, stream};
use serde_json::Value;
use tokio::sync::watch;

use crate::error::{RecordError, SyncError};
use crate::plan::{self, Action, PlanOptions, Task};

use api::*;
pub use gate::{Recorded, Recording};
use hooks::*;
pub use model::{ExecuteOptions, PARALLELISM, Progress, RECREATE_TIMEOUT, RECREATED, SyncOutcome, UNCHANGED};
use report::*;

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
        force: opts.force,
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
        succeeded_hooks: Vec::new(),
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
        // Only plain applies may run before the operation is recorded (see `Recorded`): not a
        // forced one, which deletes.
        let idempotent = group
            .iter()
            .all(|t| matches!(t.action, Action::Apply | Action::Keep) && !run.recreates(t));
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
        .filter(|r| r.status == ResultCode::Synced && r.sync_phase == Phase::Sync.as_str())
        .count();
    let unchanged = run.unchanged;
    let pruned = run.results.iter().filter(|r| r.status == ResultCode::Pruned).count();
    // Only now, every hook of the operation having succeeded (see `hooks`).
    delete_succeeded_hooks(client, resources, &run.succeeded_hooks).await;
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
    /// Hooks that succeeded and are deleted once the operation has succeeded (`HookSucceeded`): the
    /// task's index in `resources` and the hook object's name.
    succeeded_hooks: Vec<(usize, String)>,
}

/// A task's result status (`Synced`, `Pruned`, …) and what it saw of its object, or why it failed.
type TaskOutcome = Result<(ResultCode, Seen), SyncError>;

/// What a task saw of its object.
enum Seen {
    /// Nothing new (left as it was, or a hook).
    Nothing,
    /// The object as the API server returned it.
    Object(Value),
    /// The object was deleted.
    Deleted,
    /// A hook completed.
    Hook(CompletedHook),
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
                if let Seen::Hook(hook) = &seen
                    && hook.delete_on_success
                {
                    self.succeeded_hooks.push((task.index, hook.name.clone()));
                }
                self.saw(task, seen);
                status
            });
            let (status, message) = match &outcome {
                Ok(status) if task.action == Action::Keep => (status.clone(), UNCHANGED.to_string()),
                // Also when an interrupted run recreated it: a second restart must know it too.
                Ok(status) if self.forced(task) => (status.clone(), RECREATED.to_string()),
                Ok(status) => (status.clone(), String::new()),
                Err(err) => (ResultCode::SyncFailed, err.to_string()),
            };
            let settled = task.action == Action::Keep
                && self.resources[task.index].live.as_ref().is_some_and(|live| {
                    matches!(
                        health_of(self.opts, &self.resources[task.index], live).code,
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
                    .push(result(task, &self.resources[task.index], status, &message));
            }
        }
        if let Some(err) = first_error {
            return Err(err);
        }
        let hooks = group.iter().filter(|t| t.action == Action::Hook).count();
        let recreated = group.iter().filter(|t| self.recreates(t)).count();
        if recreated > 0 {
            // Published at once too: a restart does not delete them again.
            self.report(format!(
                "{} wave {}: {recreated} object(s) deleted and recreated",
                first.phase.as_str(),
                display_wave(first)
            ));
        }
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
            Seen::Nothing | Seen::Hook(_) => {}
            Seen::Object(obj) => {
                self.observed.insert(task.key.clone(), Some(obj));
            }
            Seen::Deleted => {
                self.observed.insert(task.key.clone(), None);
            }
        }
    }

    /// Whether `task` is an apply of a `Force=true` operation (not a dry run).
    fn forced(&self, task: &Task) -> bool {
        self.opts.force && task.action == Action::Apply && !self.opts.dry_run
    }

    /// Whether `task` deletes its object and creates it again: forced, and not done yet by an
    /// interrupted run of the operation.
    fn recreates(&self, task: &Task) -> bool {
        self.forced(task) && !self.opts.recreated.contains(&task.key.to_string())
    }

    async fn task(&self, task: &Task) -> TaskOutcome {
        let state = &self.resources[task.index];
        if self.recreates(task) {
            let timeout = self.opts.wave_timeout.min(RECREATE_TIMEOUT);
            return recreate(self.client, state, timeout, &self.opts.writes)
                .await
                .map(|obj| {
                    if let Some(version) = obj.as_ref().and_then(resource_version) {
                        self.opts.own_writes.record(&task.key, version);
                    }
                    (ResultCode::Synced, obj.map_or(Seen::Nothing, Seen::Object))
                });
        }
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
                    (ResultCode::Synced, obj.map_or(Seen::Nothing, Seen::Object))
                }),
            Action::Keep => Ok((ResultCode::Synced, Seen::Nothing)),
            Action::Prune => prune(self.client, state, self.opts.dry_run).await,
            Action::Hook => {
                let id = format!("{}:{}", task.phase.as_str(), task.key);
                if self.opts.completed_hooks.contains(&id) {
                    // Completed by an interrupted run of this operation: still deleted at its end
                    // when its policy says so (a generated name is not known any more).
                    let named = state
                        .desired
                        .as_ref()
                        .is_some_and(|d| d.pointer("/metadata/name").is_some());
                    let delete_on_success = state.desired.as_ref().is_some_and(|d| {
                        capstan_kube::annotations::delete_policies(d)
                            .contains(&capstan_kube::annotations::DeletePolicy::HookSucceeded)
                    });
                    let seen = if named && delete_on_success {
                        Seen::Hook(CompletedHook {
                            name: task.key.name.clone(),
                            delete_on_success,
                        })
                    } else {
                        Seen::Nothing
                    };
                    return Ok((ResultCode::Synced, seen));
                }
                if self.opts.dry_run {
                    return Ok((ResultCode::Skipped, Seen::Nothing));
                }
                run_hook(self.client, state, self.opts, |m| self.report(m))
                    .await
                    .map(|hook| (ResultCode::Synced, hook.map_or(Seen::Nothing, Seen::Hook)))
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
            let checks: Vec<(usize, Result<Option<Value>, kube::Error>)> = stream::iter(0..pending.len())
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
            for (i, read) in checks {
                let live = match read {
                    Ok(live) => live,
                    // Refused (the sync's account may not read it): waiting cannot help.
                    Err(kube::Error::Api(s)) if s.code == 401 || s.code == 403 => {
                        return Err(SyncError::Task {
                            verb: "reading the health of",
                            key: pending[i].key.clone(),
                            source: Box::new(SyncError::Api(kube::Error::Api(s))),
                        });
                    }
                    Err(err) => {
                        if waiting_on.is_none() {
                            waiting_on = Some(format!(
                                "{} (cannot be read: {})",
                                pending[i].key,
                                capstan_kube::describe_kube_error(&err)
                            ));
                        }
                        still.push(pending[i]);
                        continue;
                    }
                };
                let health = live.as_ref().map(|obj| {
                    let h = health_of(self.opts, &self.resources[pending[i].index], obj);
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

/// The health of `obj`, the live object of `state`: the operators' rules first, then the built-in ones.
fn health_of(opts: &ExecuteOptions, state: &ResourceState, obj: &Value) -> capstan_health::Health {
    let ctx = capstan_health::Context::for_kind(&state.info.resource.group, state.info.status_subresource);
    opts.health.assess(obj, &ctx)
}

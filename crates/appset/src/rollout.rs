//! RollingSync planning: which generated Applications the ApplicationSet controller syncs now, and
//! where every one of them stands in the rollout (Argo CD's progressive syncs, `RollingSync`).
//!
//! This module is pure: it reads a snapshot of the generated Applications ([`AppView`]) and the
//! rollout state recorded last time in `status.applicationStatus`, and returns a [`Plan`]. The
//! controller performs the plan (operation requests on the chosen Applications) and records it.
//!
//! The rules:
//! - Each Application belongs to the first step whose `matchExpressions` all match its labels;
//!   Applications matched by no step are never synced by the rollout.
//! - An Application is *Healthy* when it is Synced and Healthy with no operation pending or running.
//!   The *active* step is the first step with an Application that is not Healthy; later steps wait.
//! - In the active step, OutOfSync Applications are synced, at most `maxUpdate` at a time (a number or
//!   a percentage of the step, rounded down but at least one; `0`, `"0%"` or absent means all), counting those
//!   already Progressing. The others are *Pending*.
//! - A sync the rollout requested that fails, or leaves the Application Degraded, marks it *Failed*;
//!   a Failed Application in the active step stops the rollout (nothing more is synced) until it
//!   recovers or a new commit replaces the one that failed.
//! - Applications that share a source (repository and `targetRevision`) but report different commits
//!   have not all seen the latest commit yet: the rollout holds until they agree, so a later step can
//!   never run ahead of an earlier one that simply has not been compared yet.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use capstan_api::applicationset::{ApplicationSetApplicationStatus, RollingSyncStep};
use capstan_api::operation::OperationPhase;
use capstan_api::status::{HealthCode, RolloutStatus, SyncCode};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

/// `initiatedBy` of the sync operations the rollout requests.
pub const INITIATED_BY: &str = "applicationset-rollingsync";

/// How long a requested sync may wait for the Application controller to start it before the rollout
/// considers the request lost and may request it again.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(180);

/// Message prefix marking an Application whose sync the rollout requested (kept across reconciles in
/// `status.applicationStatus`, so a request is recognised until its operation has run).
const REQUESTED: &str = "sync requested by the rollout";

/// What the planner needs to know about one generated Application.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AppView {
    /// Application name.
    pub name: String,
    /// Its labels (what steps select on).
    pub labels: BTreeMap<String, String>,
    /// Its source, `repoURL@targetRevision`: Applications sharing one must report the same commit.
    pub source: String,
    /// `status.sync.status`: `Synced`, `OutOfSync`, `Unknown`, or `None` (not compared yet).
    pub sync: Option<SyncCode>,
    /// `status.sync.revision`: the commit it was compared with.
    pub revision: String,
    /// `status.health.status` (`None` before the first comparison).
    pub health: Option<HealthCode>,
    /// `status.health.message`.
    pub health_message: String,
    /// `status.operationState`, if any.
    pub operation: Option<OperationView>,
    /// An operation request (annotation) is waiting for the Application controller.
    pub request_pending: bool,
    /// The controller changed its spec in this reconcile: its status predates the change.
    pub updated: bool,
}

/// The part of `status.operationState` the planner reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OperationView {
    /// Where the operation stands.
    pub phase: OperationPhase,
    /// What happened.
    pub message: String,
    /// When it started (RFC 3339).
    pub started_at: String,
    /// Who asked for it.
    pub initiated_by: String,
}

/// The outcome of one planning round.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Applications to sync now, by name.
    pub sync: Vec<String>,
    /// The new `status.applicationStatus`, sorted by Application name.
    pub statuses: Vec<ApplicationSetApplicationStatus>,
    /// Where the rollout as a whole stands.
    pub summary: Summary,
}

/// Where the rollout as a whole stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Summary {
    /// Every Application in a step is Synced and Healthy.
    Complete(String),
    /// A step is in progress (or the rollout waits for Applications to be compared).
    Progressing(String),
    /// A failure in the active step stopped the rollout; the message names the Application, the step
    /// and the reason.
    Stopped(String),
}

impl Summary {
    /// The message.
    pub fn message(&self) -> &str {
        match self {
            Summary::Complete(m) | Summary::Progressing(m) | Summary::Stopped(m) => m,
        }
    }
}

/// A step's requirements are invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("strategy.rollingSync.steps[{step}].matchExpressions[{expression}]: {message}")]
pub struct InvalidStep {
    /// 0-based index of the step.
    pub step: usize,
    /// 0-based index of the expression.
    pub expression: usize,
    /// What is wrong.
    pub message: String,
}

/// Check every step's `matchExpressions` and `maxUpdate`.
pub fn validate(steps: &[RollingSyncStep]) -> Result<(), InvalidStep> {
    for (i, step) in steps.iter().enumerate() {
        for (j, req) in step.match_expressions.iter().enumerate() {
            let invalid = |message: String| InvalidStep {
                step: i,
                expression: j,
                message,
            };
            let values = req.values.as_deref().unwrap_or_default();
            match req.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => {
                    return Err(invalid(format!(
                        "operator {} needs at least one value (key {:?})",
                        req.operator, req.key
                    )));
                }
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err(invalid(format!(
                        "operator {} takes no values (key {:?})",
                        req.operator, req.key
                    )));
                }
                "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
                other => {
                    return Err(invalid(format!(
                        "unknown operator {other:?} (expected In, NotIn, Exists or DoesNotExist)"
                    )));
                }
            }
            if req.key.is_empty() {
                return Err(invalid("key is empty".into()));
            }
        }
        if let Some(IntOrString::String(s)) = &step.max_update
            && parse_percent(s).is_none()
        {
            return Err(InvalidStep {
                step: i,
                expression: 0,
                message: format!("maxUpdate {s:?} is neither a number nor a percentage"),
            });
        }
        if let Some(IntOrString::Int(n)) = step.max_update
            && n < 0
        {
            return Err(InvalidStep {
                step: i,
                expression: 0,
                message: format!("maxUpdate {n} is negative"),
            });
        }
    }
    Ok(())
}

/// Whether `labels` satisfy every requirement (an empty list matches everything).
/// Steps are validated before use ([`validate`]); an invalid one matches nothing.
pub fn matches(requirements: &[LabelSelectorRequirement], labels: &BTreeMap<String, String>) -> bool {
    crate::Selector::from_expressions(requirements).is_ok_and(|s| s.matches(labels))
}

/// The 0-based index of the step `labels` belong to.
pub fn step_of(steps: &[RollingSyncStep], labels: &BTreeMap<String, String>) -> Option<usize> {
    steps.iter().position(|s| matches(&s.match_expressions, labels))
}

/// How many Applications of a step of `total` may sync at once (`None`: no limit). As in Argo CD,
/// `0` and `"0%"` mean no limit; any other percentage allows at least one.
pub fn max_update(value: Option<&IntOrString>, total: usize) -> Option<usize> {
    match value {
        None | Some(IntOrString::Int(0)) => None,
        Some(IntOrString::Int(n)) => Some((*n).max(0) as usize),
        Some(IntOrString::String(s)) => match parse_percent(s) {
            None | Some(0) => None,
            Some(p) => Some((total * p as usize / 100).max(1)),
        },
    }
}

fn parse_percent(text: &str) -> Option<u32> {
    let p = text.trim().strip_suffix('%')?;
    p.trim().parse::<u32>().ok().filter(|p| *p <= 100)
}

/// Where one Application stands, before the step logic.
#[derive(Debug, Clone, PartialEq)]
enum State {
    /// Synced and Healthy, nothing running.
    Healthy,
    /// A sync the rollout requested at `since` is pending or running (or waiting for health).
    Requested { since: String, message: String },
    /// Busy for another reason (someone else's sync, or Synced but not yet Healthy).
    Busy(String),
    /// OutOfSync: a candidate for a sync.
    OutOfSync,
    /// A sync the rollout requested failed, or left it Degraded.
    Failed(String),
    /// Not compared yet, compare failed, or its status predates a spec change.
    Unknown(String),
}

/// Plan one round of the rollout. `previous` is the last recorded `status.applicationStatus`.
pub fn plan(
    steps: &[RollingSyncStep],
    apps: &[AppView],
    previous: &[ApplicationSetApplicationStatus],
    now: Timestamp,
) -> Plan {
    let now_text = format_time(now);
    let prev: BTreeMap<&str, &ApplicationSetApplicationStatus> =
        previous.iter().map(|s| (s.application.as_str(), s)).collect();
    let mut apps: Vec<&AppView> = apps.iter().collect();
    apps.sort_by(|a, b| a.name.cmp(&b.name));

    let states: Vec<State> = apps
        .iter()
        .map(|a| classify(a, prev.get(a.name.as_str()).copied(), now))
        .collect();
    let step_of_app: Vec<Option<usize>> = apps.iter().map(|a| step_of(steps, &a.labels)).collect();

    let active = (0..steps.len()).find(|&s| {
        apps.iter()
            .zip(&states)
            .zip(&step_of_app)
            .any(|((_, st), step)| *step == Some(s) && *st != State::Healthy)
    });

    // Applications of one source that report different commits: not all have seen the latest yet.
    let mut revisions: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for a in &apps {
        if matches!(a.sync, Some(SyncCode::Synced | SyncCode::OutOfSync)) && !a.revision.is_empty() && !a.updated {
            revisions.entry(&a.source).or_default().insert(&a.revision);
        }
    }
    let hold = revisions.iter().find(|(_, revs)| revs.len() > 1).map(|(source, revs)| {
        let revs: Vec<&str> = revs.iter().map(|r| short(r)).collect();
        format!(
            "Applications of {source} report different commits ({}): waiting until every one has been compared with the latest",
            revs.join(", ")
        )
    });

    // The first failure in the active step stops the rollout.
    let stopped = active.and_then(|s| {
        apps.iter()
            .zip(&states)
            .zip(&step_of_app)
            .find_map(|((a, st), step)| match st {
                State::Failed(msg) if *step == Some(s) => Some(format!(
                    "rollout stopped at step {} of {}: Application {} failed: {msg}",
                    s + 1,
                    steps.len(),
                    a.name
                )),
                _ => None,
            })
    });

    // Slots in the active step.
    let mut chosen: BTreeSet<usize> = BTreeSet::new();
    if let (Some(s), None, None) = (active, &stopped, &hold) {
        let members: Vec<usize> = (0..apps.len()).filter(|&i| step_of_app[i] == Some(s)).collect();
        let in_flight = members
            .iter()
            .filter(|&&i| matches!(states[i], State::Requested { .. } | State::Busy(_)))
            .count();
        let limit = max_update(steps[s].max_update.as_ref(), members.len());
        let mut free = limit.map(|l| l.saturating_sub(in_flight)).unwrap_or(usize::MAX);
        for &i in &members {
            if free == 0 {
                break;
            }
            if states[i] == State::OutOfSync {
                chosen.insert(i);
                free -= 1;
            }
        }
    }

    let mut statuses = Vec::with_capacity(apps.len());
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for (i, a) in apps.iter().enumerate() {
        let step = step_of_app[i];
        let (status, message, requested_since) = if chosen.contains(&i) {
            (
                RolloutStatus::Progressing,
                format!("{REQUESTED} (step {})", step.map(|s| s + 1).unwrap_or(0)),
                Some(now_text.clone()),
            )
        } else {
            match &states[i] {
                State::Healthy => (RolloutStatus::Healthy, "Synced and Healthy".to_string(), None),
                State::Requested { since, message } => {
                    (RolloutStatus::Progressing, message.clone(), Some(since.clone()))
                }
                State::Busy(m) => (RolloutStatus::Progressing, m.clone(), None),
                State::Failed(m) => (RolloutStatus::Failed, m.clone(), None),
                State::Unknown(m) => (RolloutStatus::Waiting, m.clone(), None),
                State::OutOfSync => match step {
                    None => (
                        RolloutStatus::Waiting,
                        "OutOfSync; matched by no RollingSync step, so the rollout never syncs it".to_string(),
                        None,
                    ),
                    Some(s) if Some(s) == active => {
                        let why = stopped
                            .clone()
                            .or_else(|| hold.clone())
                            .unwrap_or_else(|| "waiting for a maxUpdate slot".into());
                        (RolloutStatus::Pending, format!("OutOfSync; {why}"), None)
                    }
                    Some(_) => (
                        RolloutStatus::Waiting,
                        format!(
                            "OutOfSync; waiting for step {} to be Synced and Healthy",
                            active.map(|s| s + 1).unwrap_or(0)
                        ),
                        None,
                    ),
                },
            }
        };
        *counts.entry(status.to_string()).or_default() += 1;
        let old = prev.get(a.name.as_str());
        let was_requested = old.is_some_and(|o| is_requested(o));
        let same = old.is_some_and(|o| o.status == status) && was_requested == requested_since.is_some();
        let last_transition_time = match (&requested_since, old) {
            (Some(since), _) => since.clone(),
            (None, Some(o)) if same && !o.last_transition_time.is_empty() => o.last_transition_time.clone(),
            _ => now_text.clone(),
        };
        let target_revision = match (&status, old) {
            // The commit that failed stays recorded, so a new commit can be told apart.
            (RolloutStatus::Failed, Some(o)) if same && !o.target_revision.is_empty() => o.target_revision.clone(),
            _ => a.revision.clone(),
        };
        statuses.push(ApplicationSetApplicationStatus {
            application: a.name.clone(),
            status,
            message,
            step: step.map(|s| (s + 1).to_string()).unwrap_or_default(),
            target_revision,
            last_transition_time,
        });
    }

    let in_steps = step_of_app.iter().filter(|s| s.is_some()).count();
    let summary = match (active, stopped, hold) {
        (_, Some(msg), _) => Summary::Stopped(msg),
        (Some(_), None, Some(msg)) => Summary::Progressing(msg),
        (Some(s), None, None) => {
            let parts: Vec<String> = counts.iter().map(|(k, v)| format!("{v} {k}")).collect();
            Summary::Progressing(format!(
                "step {} of {} in progress: {}",
                s + 1,
                steps.len(),
                parts.join(", ")
            ))
        }
        (None, None, _) => Summary::Complete(format!(
            "all {in_steps} Applications selected by the {} steps are Synced and Healthy",
            steps.len()
        )),
    };
    Plan {
        sync: chosen.iter().map(|&i| apps[i].name.clone()).collect(),
        statuses,
        summary,
    }
}

fn is_requested(s: &ApplicationSetApplicationStatus) -> bool {
    s.status == RolloutStatus::Progressing && s.message.starts_with(REQUESTED)
}

fn classify(app: &AppView, prev: Option<&ApplicationSetApplicationStatus>, now: Timestamp) -> State {
    let op = app.operation.as_ref();
    let running = op.is_some_and(|o| o.phase == OperationPhase::Running);
    // A sync the rollout requested, followed until its operation has run.
    if let Some(p) = prev.filter(|p| is_requested(p))
        && let Some(since) = parse_time(&p.last_transition_time)
    {
        let requested = |message: String| State::Requested {
            since: p.last_transition_time.clone(),
            message: format!("{REQUESTED} (step {}); {message}", p.step),
        };
        let ours = op.filter(|o| {
            o.initiated_by == INITIATED_BY && parse_time(&o.started_at).is_some_and(|started| started >= since)
        });
        match ours {
            None if app.request_pending => return requested("waiting for the Application controller".into()),
            None if now.duration_since(since).as_secs_f64() < REQUEST_TIMEOUT.as_secs_f64() => {
                return requested("waiting for the Application controller".into());
            }
            None => {} // lost: decide afresh
            Some(o) => match o.phase {
                OperationPhase::Failed | OperationPhase::Error => {
                    return State::Failed(format!("sync {}: {}", o.phase.as_str().to_lowercase(), o.message));
                }
                OperationPhase::Succeeded => {
                    if app.health == Some(HealthCode::Degraded) {
                        return State::Failed(with_detail("synced, but health is Degraded", &app.health_message));
                    }
                    if app.sync == Some(SyncCode::Synced)
                        && app.health == Some(HealthCode::Healthy)
                        && !app.request_pending
                    {
                        return State::Healthy;
                    }
                    if app.sync == Some(SyncCode::Synced) {
                        return requested(with_detail(
                            &format!("synced; health is {}", app.health.unwrap_or_default()),
                            &app.health_message,
                        ));
                    }
                    // OutOfSync again after a successful sync: a newer commit is a new candidate.
                    if app.revision != p.target_revision {
                        // fall through
                    } else {
                        return requested("synced, but still OutOfSync".into());
                    }
                }
                phase => return requested(format!("operation {phase}")),
            },
        }
    }
    if app.request_pending {
        return State::Busy("a sync has been requested".into());
    }
    if running {
        return State::Busy("a sync is running".into());
    }
    if app.updated {
        return State::Unknown("its spec changed: waiting for the Application controller to compare it".into());
    }
    let healthy = app.sync == Some(SyncCode::Synced) && app.health == Some(HealthCode::Healthy);
    // A failure stays until the Application recovers or a new commit replaces the one that failed.
    if let Some(p) = prev.filter(|p| p.status == RolloutStatus::Failed)
        && !healthy
        && p.target_revision == app.revision
    {
        return State::Failed(p.message.clone());
    }
    match app.sync {
        Some(SyncCode::Synced) if healthy => State::Healthy,
        Some(SyncCode::Synced) => State::Busy(with_detail(
            &format!("Synced; health is {}", app.health.unwrap_or_default()),
            &app.health_message,
        )),
        Some(SyncCode::OutOfSync) => State::OutOfSync,
        None => State::Unknown("not compared with Git yet".into()),
        Some(other @ SyncCode::Unknown) => State::Unknown(format!("sync status is {other}")),
    }
}

fn with_detail(text: &str, detail: &str) -> String {
    if detail.is_empty() {
        text.to_string()
    } else {
        format!("{text}: {detail}")
    }
}

fn short(sha: &str) -> &str {
    sha.get(..7).unwrap_or(sha)
}

/// RFC 3339 at second precision, as every Capstan timestamp in status.
pub fn format_time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn parse_time(text: &str) -> Option<Timestamp> {
    text.parse::<Timestamp>().ok()
}

#[cfg(test)]
mod tests;

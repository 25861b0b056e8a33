//! What one reconcile does, decided from what it found: report a failed comparison, run an
//! operation (requested, resumed or automated), or record the comparison — and what held an
//! operation back. Pure: the decision is a plain value; the `act` module acts on it.

use std::time::Duration;

use capstan_api::Application;
use capstan_api::application::ApplicationStatus;
use capstan_api::operation::Operation;
use capstan_api::status::ConditionType;
use capstan_compare::Comparison;
use capstan_project::windows::{DateTime, Utc};

use super::requests::Requests;
use crate::automated;
use crate::dependencies::{self, Gate};
use crate::gates::{self, Windows};
use crate::operation::{self, record};
use crate::status::set_condition;

/// What holds a new operation back: the Application's dependencies and its project's sync windows.
#[derive(Debug, Clone)]
pub struct Gates {
    /// Its dependencies.
    pub dependencies: Gate,
    /// The sync windows that apply to it, if any does.
    pub windows: Option<Windows>,
}

/// A successful comparison, as the decision needs it.
pub struct Compared<'a> {
    /// The revision compared with.
    pub revision: &'a str,
    /// The comparison.
    pub comparison: &'a Comparison,
    /// What holds a new operation back.
    pub gates: &'a Gates,
}

/// What the reconcile does.
#[derive(Debug)]
pub enum Act {
    /// The comparison failed: report it; a requested operation is recorded as failed to start.
    ReportFailure {
        /// The operation requested in this reconcile, if any.
        failed_request: Option<Operation>,
    },
    /// Nothing runs: record the comparison.
    Record,
    /// Run `op`.
    Operate {
        /// The operation.
        op: Operation,
        /// Compare against the API server first: the comparison read the watch cache, which may
        /// lag behind the cluster by a watch event, and this operation will change something.
        fresh: bool,
        /// It was requested in this reconcile (not resumed, not automated).
        from_request: bool,
    },
}

/// What held a new operation back in this reconcile.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// An automated sync was due, its dependencies are not ready.
    pub dependencies: bool,
    /// An automated sync was due, a sync window holds it.
    pub window: bool,
    /// A requested operation was refused.
    pub request: bool,
}

/// The decision of one reconcile.
#[derive(Debug)]
pub struct Decision {
    /// What it does.
    pub act: Act,
    /// What held a new operation back.
    pub held: Held,
    /// A requested operation the gates refuse, and why: recorded as failed to start.
    pub refused: Option<(Operation, String)>,
    /// Why the operation request does not parse: reported as `InvalidSpecError`.
    pub invalid_request: Option<String>,
    /// A refresh was asked for: `reconciledAt` changes even when nothing else does.
    pub stamp: bool,
}

/// Decide what to do with `app` (its stored `status`) given its `requests` and what the comparison
/// found (`None`: it failed).
pub fn decide(
    app: &Application,
    status: &ApplicationStatus,
    requests: Requests,
    compared: Option<Compared<'_>>,
) -> Decision {
    let stamp = requests.refresh.is_some();
    let Some(compared) = compared else {
        let failed_request = match requests.requested {
            Some(Ok(op)) => Some(op),
            _ => None,
        };
        return Decision {
            act: Act::ReportFailure { failed_request },
            held: Held::default(),
            refused: None,
            invalid_request: None,
            stamp,
        };
    };
    let Gates { dependencies, windows } = compared.gates;
    let resuming = requests.resuming();
    let from_request = matches!(requests.requested, Some(Ok(_)));
    let mut held = Held::default();
    let mut refused = None;
    let mut invalid_request = None;
    let op = match requests.requested {
        Some(Ok(op)) if op.sync.is_some() || op.rollback.is_some() => match refusal(dependencies, windows, true) {
            // A request written past the CLI's and the server's checks (or before a dependency
            // changed) is refused, as they would have.
            Some(why) => {
                held.request = true;
                refused = Some((op, why));
                None
            }
            None => Some(op),
        },
        Some(Ok(op)) => Some(op),
        Some(Err(message)) => {
            invalid_request = Some(message.to_string());
            None
        }
        // A running operation goes on; an automated one waits for the gates.
        None => requests.running.or_else(|| {
            let due = automated::automated(app, status, compared.revision, compared.comparison)?;
            held.dependencies = !matches!(dependencies, Gate::Ready);
            held.window = windows.as_ref().is_some_and(|w| w.refusal(false).is_some());
            (!held.dependencies && !held.window).then_some(due)
        }),
    };
    let act = match op {
        Some(op) => Act::Operate {
            // An operation is decided on the cached view; one that will change something acts on a
            // fresh one. (A sync found to have nothing to do is recorded as such, and a change the
            // cache had not seen yet triggers its own comparison when its event arrives.)
            fresh: !resuming && !operation::nothing_to_do(app, &op, compared.comparison),
            op,
            from_request,
        },
        None => Act::Record,
    };
    Decision {
        act,
        held,
        refused,
        invalid_request,
        stamp,
    }
}

impl Decision {
    /// Put what was decided before acting into `status`: a refused or invalid request, and the
    /// conditions that say what holds the Application back (`gates`: none when the comparison
    /// failed).
    pub fn record(&self, status: &mut ApplicationStatus, gates: Option<&Gates>) {
        if let Some((op, why)) = &self.refused {
            status.operation_state = Some(record::failed_to_start(op, why));
        }
        if let Some(message) = &self.invalid_request {
            set_condition(status, ConditionType::InvalidSpecError, message.clone());
        }
        if let Some(gates) = gates {
            gate_conditions(status, gates, &self.held);
        }
    }
}

/// Why a new operation (`manual`: requested) may not start now: dependencies first, then windows.
fn refusal(deps: &Gate, windows: &Option<Windows>, manual: bool) -> Option<String> {
    if !matches!(deps, Gate::Ready) {
        return Some(deps.to_string());
    }
    windows.as_ref().and_then(|w| w.refusal(manual))
}

/// The conditions that say what holds the Application back: a missing dependency or a cycle (always),
/// waiting for dependencies and a window holding the sync (while a sync is held), a window that
/// does not parse (always).
fn gate_conditions(status: &mut ApplicationStatus, gates: &Gates, held: &Held) {
    status.conditions.retain(|c| {
        ![
            dependencies::WAITING_CONDITION,
            dependencies::ERROR_CONDITION,
            gates::WINDOW_CONDITION,
            gates::WINDOW_ERROR_CONDITION,
        ]
        .contains(&c.type_)
    });
    let deps = &gates.dependencies;
    match deps {
        Gate::Missing(_) | Gate::Cycle(_) => set_condition(status, dependencies::ERROR_CONDITION, deps.to_string()),
        Gate::Waiting(_) if held.dependencies || held.request => {
            set_condition(status, dependencies::WAITING_CONDITION, deps.to_string())
        }
        _ => {}
    }
    if let Some(w) = &gates.windows {
        if let Some(message) = w.error_message() {
            set_condition(status, gates::WINDOW_ERROR_CONDITION, message);
        } else if held.window
            && let Some(why) = w.refusal(false)
        {
            set_condition(status, gates::WINDOW_CONDITION, format!("automated sync held: {why}"));
        }
    }
}

/// When to look at a compared Application again: a failed automated sync's retry once its backoff
/// has passed (never sooner than in 250 ms: a reconcile that decides against the retry must not
/// come back at once); otherwise the `poll` interval, or sooner when a sync window opens or closes
/// (`now` on the controller's clock).
pub fn next_look(
    app: &Application,
    status: &ApplicationStatus,
    comparison: &Comparison,
    windows: Option<&Windows>,
    poll: Duration,
    now: DateTime<Utc>,
) -> Duration {
    if automated::automated_could_act(app, comparison)
        && let Some(due) = automated::retry_due_in(app, status)
    {
        return due.max(Duration::from_millis(250));
    }
    let change = windows
        .and_then(|w| w.next_change)
        .and_then(|t| (t - now).to_std().ok())
        .map(|d| d + Duration::from_secs(1));
    change.map_or(poll, |c| c.min(poll))
}

#[cfg(test)]
mod tests;

//! Health of Argo Rollouts objects (`argoproj.io`): Rollout, AnalysisRun and Experiment.
//!
//! Upstream rules followed: Argo CD `resource_customizations/argoproj.io/Rollout/health.lua` (the
//! version with `checkPaused`, `getStableRS` and `isGenerationObserved`, which Argo Rollouts'
//! `RolloutStatusString` mirrors), `.../AnalysisRun/health.lua` and `.../Experiment/health.lua`.

use serde_json::Value;

use crate::Health;
use crate::json::{Verdict, array_at, int_at, is_true, status_conditions, status_object, str_at};

/// A Rollout's deployment strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strategy {
    BlueGreen,
    Canary,
    Other,
}

fn strategy(obj: &Value) -> Strategy {
    let present = |name: &str| {
        obj.pointer(&format!("/spec/strategy/{name}"))
            .is_some_and(|s| !s.is_null())
    };
    if present("blueGreen") {
        Strategy::BlueGreen
    } else if present("canary") {
        Strategy::Canary
    } else {
        Strategy::Other
    }
}

/// `status.observedGeneration`, a string (or number) in Rollouts. Non-numeric values (v0.9 hashes) and
/// values ahead of `metadata.generation` count as observed, as upstream.
fn generation_observed(obj: &Value) -> bool {
    let observed = match obj.pointer("/status/observedGeneration") {
        Some(Value::String(s)) => s.parse::<i64>().ok(),
        Some(Value::Number(_)) => int_at(obj, &["status", "observedGeneration"]),
        _ => None,
    };
    match (observed, int_at(obj, &["metadata", "generation"])) {
        (Some(observed), Some(generation)) => observed >= generation,
        _ => true,
    }
}

/// argoproj.io Rollout.
pub(crate) fn rollout(obj: &Value) -> Verdict {
    if status_object(obj)?.is_none() || !generation_observed(obj) {
        return Ok(Health::progressing("Waiting for rollout spec update to be observed"));
    }
    for c in status_conditions(obj)?.unwrap_or_default() {
        let failed = c.type_ == "InvalidSpec"
            // vocabulary: Argo Rollouts conditions
            || (c.type_ == "Progressing" && matches!(c.reason, "RolloutAborted" | "ProgressDeadlineExceeded"));
        if failed {
            return Ok(Health::degraded(c.describe(|| c.type_.to_owned())));
        }
    }
    if !array_at(obj, &["status", "pauseConditions"]).is_empty() || is_true(obj, &["spec", "paused"]) {
        return Ok(Health::suspended("Rollout is paused"));
    }
    let Some(current) = str_at(obj, &["status", "currentPodHash"]) else {
        return Ok(Health::progressing(
            "Waiting for rollout to finish: status has not been reconciled.",
        ));
    };
    let desired = int_at(obj, &["spec", "replicas"]).unwrap_or(1);
    let count = |field: &str| int_at(obj, &["status", field]).unwrap_or(0);
    let (replicas, updated, available) = (count("replicas"), count("updatedReplicas"), count("availableReplicas"));
    if updated < desired {
        return Ok(Health::progressing(
            "Waiting for roll out to finish: More replicas need to be updated",
        ));
    }
    if available < updated {
        return Ok(Health::progressing(
            "Waiting for roll out to finish: updated replicas are still becoming available",
        ));
    }
    // Rollouts v0.8 moved status.canary.stableRS to status.stableRS.
    let stable = str_at(obj, &["status", "stableRS"])
        .or_else(|| str_at(obj, &["status", "canary", "stableRS"]))
        .unwrap_or("");
    match strategy(obj) {
        Strategy::BlueGreen => {
            if str_at(obj, &["status", "blueGreen", "activeSelector"]) != Some(current) {
                return Ok(Health::progressing("active service cutover pending"));
            }
            if !stable.is_empty() && stable != current {
                return Ok(Health::progressing("waiting for analysis to complete"));
            }
        }
        Strategy::Canary => {
            if replicas > updated {
                return Ok(Health::progressing(
                    "Waiting for roll out to finish: old replicas are pending termination",
                ));
            }
            if stable.is_empty() || stable != current {
                return Ok(Health::progressing("Waiting for rollout to finish steps"));
            }
        }
        Strategy::Other => {}
    }
    Ok(Health::healthy(""))
}

/// The phase of an AnalysisRun or Experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunPhase {
    Pending,
    Running,
    Successful,
    Failed,
    Error,
    Inconclusive,
}

fn run_phase(obj: &Value) -> Option<RunPhase> {
    Some(match str_at(obj, &["status", "phase"])? {
        "Pending" => RunPhase::Pending,       // vocabulary: Argo Rollouts run phases
        "Running" => RunPhase::Running,       // vocabulary: Argo Rollouts run phases
        "Successful" => RunPhase::Successful, // vocabulary: Argo Rollouts run phases
        "Failed" => RunPhase::Failed,         // vocabulary: Argo Rollouts run phases
        "Error" => RunPhase::Error,           // vocabulary: Argo Rollouts run phases
        "Inconclusive" => RunPhase::Inconclusive,
        _ => return None,
    })
}

/// argoproj.io AnalysisRun: by phase; `status.message` when set, else a default per phase.
pub(crate) fn analysis_run(obj: &Value) -> Verdict {
    if status_object(obj)?.is_none() {
        return Ok(Health::progressing(
            "Waiting for analysis run to finish: status has not been reconciled.",
        ));
    }
    let message = |default: &str| str_at(obj, &["status", "message"]).unwrap_or(default).to_owned();
    Ok(match run_phase(obj) {
        Some(RunPhase::Pending | RunPhase::Running) => Health::progressing("Analysis run is running"),
        Some(RunPhase::Successful) => Health::healthy(message("Analysis run completed successfully")),
        Some(RunPhase::Failed) => Health::degraded(message("Analysis run failed")),
        Some(RunPhase::Error) => Health::degraded(message("Analysis run had an error")),
        Some(RunPhase::Inconclusive) => Health::unknown(message("Analysis run was inconclusive")),
        // Upstream returns no verdict for a status without a known phase; it is still to be run.
        None => Health::progressing("Waiting for analysis run to finish"),
    })
}

/// argoproj.io Experiment: by phase.
pub(crate) fn experiment(obj: &Value) -> Verdict {
    if status_object(obj)?.is_none() {
        return Ok(Health::progressing(
            "Waiting for experiment to finish: status has not been reconciled.",
        ));
    }
    Ok(match run_phase(obj) {
        Some(RunPhase::Pending) => Health::progressing("Experiment is pending"),
        Some(RunPhase::Running) => Health::progressing("Experiment is running"),
        Some(RunPhase::Successful) => Health::healthy("Experiment is successful"),
        Some(RunPhase::Failed) => Health::degraded("Experiment has failed"),
        Some(RunPhase::Error) => Health::degraded("Experiment had an error"),
        Some(RunPhase::Inconclusive) | None => Health::progressing("Waiting for experiment to finish"),
    })
}

#[cfg(test)]
mod tests;

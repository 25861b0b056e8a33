//! Health of the replicated workload controllers (Deployment, StatefulSet, DaemonSet, ReplicaSet) and
//! of the HorizontalPodAutoscaler that scales them. The rollout checks mirror `kubectl rollout status`,
//! as Argo CD's do.

use serde_json::Value;

use crate::Health;
use crate::json::{condition, conditions, generation_lags, int_at, is_true, name, str_at};

/// `spec.replicas`, which the API server defaults to 1.
fn desired_replicas(obj: &Value) -> i64 {
    int_at(obj, &["spec", "replicas"]).unwrap_or(1)
}

/// A `status` counter, absent meaning 0 (the API server omits zero counters).
fn status_count(obj: &Value, field: &str) -> i64 {
    int_at(obj, &["status", field]).unwrap_or(0)
}

/// apps/v1 Deployment.
pub(crate) fn deployment(obj: &Value) -> Health {
    if is_true(obj, &["spec", "paused"]) {
        return Health::suspended("Deployment is paused");
    }
    if generation_lags(obj) {
        return Health::progressing(
            "Waiting for rollout to finish: observed deployment generation less than desired generation",
        );
    }
    if condition(obj, "Progressing").is_some_and(|c| c.reason == "ProgressDeadlineExceeded") {
        return Health::degraded(format!("Deployment \"{}\" exceeded its progress deadline", name(obj)));
    }
    let desired = desired_replicas(obj);
    let replicas = status_count(obj, "replicas");
    let updated = status_count(obj, "updatedReplicas");
    let available = status_count(obj, "availableReplicas");
    if updated < desired {
        return Health::progressing(format!(
            "Waiting for rollout to finish: {updated} out of {desired} new replicas have been updated..."
        ));
    }
    if replicas > updated {
        return Health::progressing(format!(
            "Waiting for rollout to finish: {} old replicas are pending termination...",
            replicas.saturating_sub(updated)
        ));
    }
    if available < updated {
        return Health::progressing(format!(
            "Waiting for rollout to finish: {available} of {updated} updated replicas are available..."
        ));
    }
    Health::healthy("")
}

/// apps/v1 StatefulSet.
pub(crate) fn stateful_set(obj: &Value) -> Health {
    let generation = int_at(obj, &["metadata", "generation"]).unwrap_or(0);
    let observed = status_count(obj, "observedGeneration");
    if observed == 0 || generation > observed {
        return Health::progressing("Waiting for statefulset spec update to be observed...");
    }
    let desired = desired_replicas(obj);
    let ready = status_count(obj, "readyReplicas");
    if ready < desired {
        return Health::progressing(format!(
            "Waiting for {} pods to be ready...",
            desired.saturating_sub(ready)
        ));
    }
    let strategy = str_at(obj, &["spec", "updateStrategy", "type"]).unwrap_or("RollingUpdate");
    if strategy == "OnDelete" {
        // Pods are only replaced when someone deletes them, so there is no rollout to wait for.
        return Health::healthy(format!("statefulset has {ready} ready pods"));
    }
    let updated = status_count(obj, "updatedReplicas");
    let partition = int_at(obj, &["spec", "updateStrategy", "rollingUpdate", "partition"]).unwrap_or(0);
    if partition > 0 {
        // Only ordinals >= partition are updated; the rest deliberately stay on the old revision.
        let target = desired.saturating_sub(partition).max(0);
        if updated < target {
            return Health::progressing(format!(
                "Waiting for partitioned roll out to finish: {updated} out of {target} new pods have been updated..."
            ));
        }
        return Health::healthy(format!(
            "partitioned roll out complete: {updated} new pods have been updated..."
        ));
    }
    if updated < desired {
        return Health::progressing(format!(
            "Waiting for rolling update to finish: {updated} out of {desired} new pods have been updated..."
        ));
    }
    let current_revision = str_at(obj, &["status", "currentRevision"]).unwrap_or("");
    let update_revision = str_at(obj, &["status", "updateRevision"]).unwrap_or("");
    if current_revision != update_revision {
        return Health::progressing(format!(
            "waiting for statefulset rolling update to complete {updated} pods at revision {update_revision}..."
        ));
    }
    Health::healthy(format!(
        "statefulset rolling update complete {} pods at revision {current_revision}...",
        status_count(obj, "currentReplicas")
    ))
}

/// apps/v1 DaemonSet.
pub(crate) fn daemon_set(obj: &Value) -> Health {
    if generation_lags(obj) {
        return Health::progressing(
            "Waiting for rollout to finish: observed daemon set generation less than desired generation",
        );
    }
    let desired = status_count(obj, "desiredNumberScheduled");
    let updated = status_count(obj, "updatedNumberScheduled");
    if str_at(obj, &["spec", "updateStrategy", "type"]) == Some("OnDelete") {
        return Health::healthy(format!(
            "daemon set {updated} out of {desired} new pods have been updated"
        ));
    }
    let name = name(obj);
    if updated < desired {
        return Health::progressing(format!(
            "Waiting for daemon set \"{name}\" rollout to finish: {updated} out of {desired} new pods have been updated..."
        ));
    }
    let available = status_count(obj, "numberAvailable");
    if available < desired {
        return Health::progressing(format!(
            "Waiting for daemon set \"{name}\" rollout to finish: {available} of {desired} updated pods are available..."
        ));
    }
    Health::healthy("")
}

/// apps/v1 ReplicaSet.
pub(crate) fn replica_set(obj: &Value) -> Health {
    if generation_lags(obj) {
        return Health::progressing(
            "Waiting for rollout to finish: observed replica set generation less than desired generation",
        );
    }
    if let Some(failure) = condition(obj, "ReplicaFailure").filter(|c| c.is_true()) {
        return Health::degraded(failure.describe(|| "ReplicaSet failed to create pods".into()));
    }
    let desired = desired_replicas(obj);
    let available = status_count(obj, "availableReplicas");
    if available < desired {
        return Health::progressing(format!(
            "Waiting for rollout to finish: {available} out of {desired} new replicas are available..."
        ));
    }
    Health::healthy("")
}

/// autoscaling HorizontalPodAutoscaler: Degraded when it reports it cannot scale or read its metrics,
/// Healthy otherwise (including autoscaling/v1 objects, which carry no conditions in `status`).
pub(crate) fn horizontal_pod_autoscaler(obj: &Value) -> Health {
    let failing = conditions(obj).find(|c| {
        matches!(c.type_, "AbleToScale" | "ScalingActive")
            && c.is_false()
            && (c.reason.starts_with("Failed") || c.reason.starts_with("Invalid"))
    });
    match failing {
        Some(c) => Health::degraded(c.describe(|| format!("{} is False", c.type_))),
        None => Health::healthy(""),
    }
}

#[cfg(test)]
mod tests;

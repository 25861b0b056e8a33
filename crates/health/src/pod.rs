//! Health of a bare Pod, from its phase, readiness and container states.
//!
//! Pods with `restartPolicy: Always` (the default) are long-running: a container stuck in an error
//! state (CrashLoopBackOff, ImagePullBackOff, ...) makes them Degraded at once. Pods with `Never` or
//! `OnFailure` have a finite life (typically sync hooks), so while running they are only Progressing and
//! a transient image-pull error does not fail the hook prematurely.

use serde_json::Value;

use crate::Health;
use crate::json::{array_at, condition, int_at, str_at};

/// core/v1 Pod. Deletion ("Pod is terminating") is handled by the caller.
pub(crate) fn pod(obj: &Value) -> Health {
    let restart_policy = str_at(obj, &["spec", "restartPolicy"]).unwrap_or("Always");
    let status_message = str_at(obj, &["status", "message"]).unwrap_or("");
    let or_status_message = |fallback: &str| {
        if status_message.is_empty() {
            fallback.to_owned()
        } else {
            status_message.to_owned()
        }
    };

    if restart_policy == "Always" {
        let errors: Vec<String> = container_statuses(obj).filter_map(waiting_error).collect();
        if !errors.is_empty() {
            return Health::degraded(errors.join("; "));
        }
    }

    match str_at(obj, &["status", "phase"]) {
        Some("Pending") => Health::progressing(or_status_message("Pod is pending")), // vocabulary: Pod phases
        Some("Succeeded") => Health::healthy(status_message),                        // vocabulary: Pod phases
        Some("Failed") => Health::degraded(failure_message(obj)),                    // vocabulary: Pod phases
        // vocabulary: Pod phases
        Some("Running") if restart_policy == "Always" => {
            if condition(obj, "Ready").is_some_and(|c| c.is_true()) {
                return Health::healthy(status_message);
            }
            // Not ready after a container already terminated once: it is crashing, not starting.
            if let Some(message) = array_at(obj, &["status", "containerStatuses"])
                .iter()
                .find_map(last_termination)
            {
                return Health::degraded(or_status_message(&message));
            }
            Health::progressing(or_status_message("Waiting for the pod to become ready"))
        }
        Some("Running") => Health::progressing(or_status_message("Pod is running")), // vocabulary: Pod phases
        _ => Health::unknown(or_status_message("Pod phase is unknown")),
    }
}

/// Init container statuses, then regular container statuses.
fn container_statuses(obj: &Value) -> impl Iterator<Item = &Value> {
    array_at(obj, &["status", "initContainerStatuses"])
        .iter()
        .chain(array_at(obj, &["status", "containerStatuses"]))
}

/// A description of the container's waiting state if that state is an error (Argo CD's rule: a reason
/// starting with `Err` or ending in `Error` or `BackOff`, plus `InvalidImageName`).
fn waiting_error(container: &Value) -> Option<String> {
    let reason = str_at(container, &["state", "waiting", "reason"])?;
    let is_error = reason.starts_with("Err")
        || reason.ends_with("Error")
        || reason.ends_with("BackOff")
        || reason == "InvalidImageName";
    if !is_error {
        return None;
    }
    let name = str_at(container, &["name"]).unwrap_or("");
    let message = str_at(container, &["state", "waiting", "message"]).unwrap_or("");
    Some(if message.is_empty() {
        format!("container \"{name}\": {reason}")
    } else {
        format!("container \"{name}\": {reason}: {message}")
    })
}

/// Why a Failed pod failed: its status message, else the first informative terminated container, else
/// its status reason.
fn failure_message(obj: &Value) -> String {
    if let Some(message) = str_at(obj, &["status", "message"]).filter(|m| !m.is_empty()) {
        return message.to_owned();
    }
    if let Some(message) = container_statuses(obj).find_map(|c| terminated_message(c, "state")) {
        return message;
    }
    match str_at(obj, &["status", "reason"]).filter(|r| !r.is_empty()) {
        Some(reason) => format!("Pod failed: {reason}"),
        None => "Pod failed".to_owned(),
    }
}

/// A description of the container's previous termination, if it had one.
fn last_termination(container: &Value) -> Option<String> {
    terminated_message(container, "lastState").map(|m| format!("container restarted after: {m}"))
}

/// The reason a container runtime gives a non-zero exit without a better one (says nothing).
const GENERIC_ERROR_REASON: &str = "Error";

/// A description of `container.<state_field>.terminated`, if it says something useful: its message,
/// else its reason and non-zero exit code.
fn terminated_message(container: &Value, state_field: &str) -> Option<String> {
    let terminated = container.get(state_field)?.get("terminated")?.as_object()?;
    let field = |key: &str| terminated.get(key).and_then(Value::as_str).unwrap_or("");
    let (message, reason) = (field("message"), field("reason"));
    let exit_code = int_at(container, &[state_field, "terminated", "exitCode"]).unwrap_or(0);
    let name = str_at(container, &["name"]).unwrap_or("");
    if !message.is_empty() {
        Some(message.trim_end().to_owned())
    } else if exit_code != 0 && !reason.is_empty() && reason != GENERIC_ERROR_REASON {
        Some(format!(
            "container \"{name}\" terminated: {reason} (exit code {exit_code})"
        ))
    } else if exit_code != 0 {
        Some(format!("container \"{name}\" failed with exit code {exit_code}"))
    } else if !reason.is_empty() && reason != "Completed" {
        Some(format!("container \"{name}\" terminated: {reason}"))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::{Health, HealthCode::*, assess};

    fn pod(restart_policy: &str, status: Value) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web-5d4f-abcde", "namespace": "shop"},
            "spec": {"restartPolicy": restart_policy, "containers": [{"name": "app", "image": "shop/web:1.2.3"}]},
            "status": status
        })
    }

    fn ready(status: &str) -> Value {
        json!([
            {"type": "Initialized", "status": "True"},
            {"type": "Ready", "status": status},
            {"type": "ContainersReady", "status": status},
            {"type": "PodScheduled", "status": "True"}
        ])
    }

    #[test]
    fn running_and_ready_pod_is_healthy() {
        let p = pod(
            "Always",
            json!({
                "phase": "Running", "conditions": ready("True"),
                "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "state": {"running": {"startedAt": "2024-05-01T10:00:00Z"}}}]
            }),
        );
        assert_eq!(assess(&p), Health::new(Healthy, ""));
    }

    #[test]
    fn running_but_not_ready_pod_is_progressing() {
        let p = pod(
            "Always",
            json!({
                "phase": "Running", "conditions": ready("False"),
                "containerStatuses": [{"name": "app", "ready": false, "restartCount": 0, "state": {"running": {}}}]
            }),
        );
        assert_eq!(
            assess(&p),
            Health::new(Progressing, "Waiting for the pod to become ready")
        );
    }

    #[test]
    fn crash_looping_pod_is_degraded() {
        let p = pod(
            "Always",
            json!({
                "phase": "Running", "conditions": ready("False"),
                "containerStatuses": [{
                    "name": "app", "ready": false, "restartCount": 5,
                    "state": {"waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": "back-off 2m40s restarting failed container=app pod=web-5d4f-abcde_shop"
                    }},
                    "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}
                }]
            }),
        );
        assert_eq!(
            assess(&p),
            Health::new(
                Degraded,
                "container \"app\": CrashLoopBackOff: back-off 2m40s restarting failed container=app pod=web-5d4f-abcde_shop"
            )
        );
    }

    #[test]
    fn image_errors_degrade_even_while_pending() {
        for reason in [
            "ErrImagePull",
            "ImagePullBackOff",
            "CreateContainerConfigError",
            "InvalidImageName",
        ] {
            let p = pod(
                "Always",
                json!({
                    "phase": "Pending",
                    "containerStatuses": [{"name": "app", "ready": false, "state": {"waiting": {"reason": reason}}}]
                }),
            );
            assert_eq!(
                assess(&p),
                Health::new(Degraded, format!("container \"app\": {reason}")),
                "{reason}"
            );
        }
    }

    #[test]
    fn crash_looping_init_container_is_degraded() {
        let p = pod(
            "Always",
            json!({
                "phase": "Pending",
                "initContainerStatuses": [{"name": "migrate", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}],
                "containerStatuses": [{"name": "app", "state": {"waiting": {"reason": "PodInitializing"}}}]
            }),
        );
        assert_eq!(
            assess(&p),
            Health::new(Degraded, "container \"migrate\": CrashLoopBackOff")
        );
    }

    #[test]
    fn every_failing_container_is_reported() {
        let p = pod(
            "Always",
            json!({
                "phase": "Running",
                "containerStatuses": [
                    {"name": "app", "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
                    {"name": "sidecar", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}}
                ]
            }),
        );
        assert_eq!(
            assess(&p).message,
            "container \"app\": CrashLoopBackOff; container \"sidecar\": ImagePullBackOff: Back-off pulling image"
        );
    }

    #[test]
    fn benign_waiting_reasons_are_not_errors() {
        let p = pod(
            "Always",
            json!({
                "phase": "Pending",
                "containerStatuses": [{"name": "app", "state": {"waiting": {"reason": "ContainerCreating"}}}]
            }),
        );
        assert_eq!(assess(&p).code, Progressing);
    }

    #[test]
    fn hook_pod_with_image_error_is_not_degraded() {
        let p = pod(
            "Never",
            json!({
                "phase": "Pending",
                "containerStatuses": [{"name": "app", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]
            }),
        );
        assert_eq!(assess(&p).code, Progressing);
    }

    #[test]
    fn running_hook_pod_is_progressing_even_when_ready() {
        for policy in ["Never", "OnFailure"] {
            let p = pod(policy, json!({"phase": "Running", "conditions": ready("True")}));
            assert_eq!(assess(&p), Health::new(Progressing, "Pod is running"), "{policy}");
        }
    }

    #[test]
    fn restarted_and_not_ready_pod_is_degraded() {
        let p = pod(
            "Always",
            json!({
                "phase": "Running", "conditions": ready("False"),
                "containerStatuses": [{
                    "name": "app", "ready": false, "restartCount": 1, "state": {"running": {}},
                    "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
                }]
            }),
        );
        assert_eq!(
            assess(&p),
            Health::new(
                Degraded,
                "container restarted after: container \"app\" terminated: OOMKilled (exit code 137)"
            )
        );
    }

    #[test]
    fn succeeded_pod_is_healthy() {
        let p = pod("Never", json!({"phase": "Succeeded"}));
        assert_eq!(assess(&p).code, Healthy);
    }

    #[test]
    fn pending_pod_is_progressing_with_its_message() {
        let p = pod(
            "Always",
            json!({
                "phase": "Pending",
                "conditions": [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 Insufficient cpu."
                }]
            }),
        );
        assert_eq!(assess(&p), Health::new(Progressing, "Pod is pending"));
        let p = pod("Always", json!({"phase": "Pending", "message": "waiting for volume"}));
        assert_eq!(assess(&p), Health::new(Progressing, "waiting for volume"));
    }

    #[test]
    fn failed_pod_uses_status_message() {
        let p = pod(
            "Always",
            json!({
                "phase": "Failed", "reason": "Evicted",
                "message": "The node was low on resource: memory. Container app was using 1Gi."
            }),
        );
        assert_eq!(
            assess(&p),
            Health::new(
                Degraded,
                "The node was low on resource: memory. Container app was using 1Gi."
            )
        );
    }

    #[test]
    fn failed_pod_uses_terminated_container_message() {
        let p = pod(
            "Never",
            json!({
                "phase": "Failed",
                "containerStatuses": [
                    {"name": "sidecar", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                    {"name": "app", "state": {"terminated": {"exitCode": 2, "reason": "Error", "message": "migration 42 failed\n"}}}
                ]
            }),
        );
        assert_eq!(assess(&p), Health::new(Degraded, "migration 42 failed"));
    }

    #[test]
    fn failed_pod_falls_back_to_exit_code_and_reason() {
        let p = pod(
            "Never",
            json!({
                "phase": "Failed",
                "containerStatuses": [{"name": "app", "state": {"terminated": {"exitCode": 3, "reason": "Error"}}}]
            }),
        );
        assert_eq!(
            assess(&p),
            Health::new(Degraded, "container \"app\" failed with exit code 3")
        );
        let p = pod(
            "Never",
            json!({
                "phase": "Failed",
                "containerStatuses": [{"name": "app", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]
            }),
        );
        assert_eq!(
            assess(&p),
            Health::new(Degraded, "container \"app\" terminated: OOMKilled (exit code 137)")
        );
        let p = pod("Never", json!({"phase": "Failed", "reason": "DeadlineExceeded"}));
        assert_eq!(assess(&p), Health::new(Degraded, "Pod failed: DeadlineExceeded"));
        let p = pod("Never", json!({"phase": "Failed"}));
        assert_eq!(assess(&p), Health::new(Degraded, "Pod failed"));
    }

    #[test]
    fn unknown_or_missing_phase_is_unknown() {
        let p = pod("Always", json!({"phase": "Unknown", "message": "node unreachable"}));
        assert_eq!(assess(&p), Health::new(Unknown, "node unreachable"));
        let p = pod("Always", json!({}));
        assert_eq!(assess(&p).code, Unknown);
    }

    #[test]
    fn restart_policy_defaults_to_always() {
        let mut p = pod(
            "Always",
            json!({"phase": "Running", "containerStatuses": [{"name": "app", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}),
        );
        p["spec"].as_object_mut().unwrap().remove("restartPolicy");
        assert_eq!(assess(&p).code, Degraded);
    }
}

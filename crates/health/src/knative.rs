//! Health of a Knative Service (`serving.knative.dev`).
//!
//! Upstream rule followed: Argo CD `resource_customizations/serving.knative.dev/Service/health.lua`:
//! Healthy when `ConfigurationsReady`, `RoutesReady` and `Ready` are all True and no condition is False
//! or Unknown; Degraded when any condition is False; otherwise Progressing. The message lists every
//! condition that is not True, with its reason and message.

use serde_json::Value;

use crate::Health;
use crate::json::{Verdict, status_conditions};

pub(crate) fn service(obj: &Value) -> Verdict {
    let Some(conditions) = status_conditions(obj)? else {
        return Ok(Health::progressing("Waiting for status update."));
    };
    let (mut ready, mut false_, mut unknown) = (0, 0, 0);
    let mut lines = Vec::new();
    for c in &conditions {
        if c.is_true() && matches!(c.type_, "ConfigurationsReady" | "RoutesReady" | "Ready") {
            ready += 1;
        } else if c.is_false() || c.is_unknown() {
            let mut line = format!("{} is {}", c.type_, c.status);
            if !c.reason.is_empty() {
                line.push_str(&format!(", since {}.", c.reason));
            }
            if !c.message.is_empty() {
                line.push_str(&format!(" {}", c.message));
            }
            lines.push(line);
            if c.is_false() {
                false_ += 1;
            } else {
                unknown += 1;
            }
        }
    }
    let message = lines.join("\n");
    Ok(if ready == 3 && false_ == 0 && unknown == 0 {
        Health::healthy("Knative Service is healthy.")
    } else if false_ > 0 {
        Health::degraded(message)
    } else {
        Health::progressing(message)
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::{Health, HealthCode::*, assess};

    fn ksvc(status: Value) -> Value {
        json!({
            "apiVersion": "serving.knative.dev/v1", "kind": "Service",
            "metadata": {"name": "hello", "namespace": "default", "generation": 2},
            "spec": {"template": {"spec": {"containers": [{"image": "hello:1"}]}}},
            "status": status
        })
    }

    fn cond(t: &str, s: &str) -> Value {
        json!({"type": t, "status": s})
    }

    #[test]
    fn all_ready_is_healthy() {
        let s = json!({"conditions": [cond("ConfigurationsReady", "True"), cond("Ready", "True"), cond("RoutesReady", "True")]});
        assert_eq!(assess(&ksvc(s)), Health::new(Healthy, "Knative Service is healthy."));
    }

    #[test]
    fn a_false_condition_is_degraded_with_reason() {
        let s = json!({"conditions": [
            {"type": "ConfigurationsReady", "status": "False", "reason": "RevisionFailed", "message": "image pull failed"},
            cond("Ready", "False"), cond("RoutesReady", "True")
        ]});
        assert_eq!(
            assess(&ksvc(s)),
            Health::new(
                Degraded,
                "ConfigurationsReady is False, since RevisionFailed. image pull failed\nReady is False"
            )
        );
    }

    #[test]
    fn unknown_conditions_are_progressing() {
        let s = json!({"conditions": [cond("ConfigurationsReady", "Unknown"), cond("Ready", "Unknown"), cond("RoutesReady", "True")]});
        assert_eq!(assess(&ksvc(s)).code, Progressing);
        assert_eq!(
            assess(&ksvc(json!(null))),
            Health::new(Progressing, "Waiting for status update.")
        );
    }

    #[test]
    fn core_service_is_not_judged_as_knative() {
        let core = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hello"}, "spec": {"type": "ClusterIP"}});
        assert_eq!(assess(&core).code, Healthy);
    }

    #[test]
    fn malformed_is_unknown() {
        assert_eq!(assess(&ksvc(json!({"conditions": "Ready"}))).code, Unknown);
    }
}

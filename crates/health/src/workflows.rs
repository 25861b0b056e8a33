//! Health of an Argo Workflows Workflow (`argoproj.io`).
//!
//! Upstream rule followed: Argo CD `resource_customizations/argoproj.io/Workflow/health.lua` (the same
//! as gitops-engine's `pkg/health/health_argo.go`): no phase, Pending or Running is Progressing,
//! Succeeded Healthy, Failed or Error Degraded, any other phase Unknown; the message is
//! `status.message`.

use serde_json::Value;

use crate::Health;
use crate::json::{Verdict, status_object, str_at};

pub(crate) fn workflow(obj: &Value) -> Verdict {
    status_object(obj)?;
    let message = str_at(obj, &["status", "message"]).unwrap_or("");
    Ok(match str_at(obj, &["status", "phase"]).unwrap_or("") {
        "" | "Pending" | "Running" => Health::progressing(message), // vocabulary: Argo Workflows phases
        "Succeeded" => Health::healthy(message),                    // vocabulary: Argo Workflows phases
        "Failed" | "Error" => Health::degraded(message),            // vocabulary: Argo Workflows phases
        _ => Health::unknown(message),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::{Health, HealthCode::*, assess};

    fn wf(status: Value) -> Value {
        json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "build-7", "namespace": "ci"},
            "spec": {"entrypoint": "main"}, "status": status
        })
    }

    #[test]
    fn phases() {
        assert_eq!(assess(&wf(json!(null))).code, Progressing);
        assert_eq!(assess(&wf(json!({"phase": "Running"}))).code, Progressing);
        assert_eq!(
            assess(&wf(json!({"phase": "Pending", "message": "waiting for pod"}))),
            Health::new(Progressing, "waiting for pod")
        );
        assert_eq!(assess(&wf(json!({"phase": "Succeeded"}))), Health::new(Healthy, ""));
        assert_eq!(
            assess(&wf(json!({"phase": "Failed", "message": "child 'build' failed"}))),
            Health::new(Degraded, "child 'build' failed")
        );
        assert_eq!(assess(&wf(json!({"phase": "Error"}))).code, Degraded);
        assert_eq!(assess(&wf(json!({"phase": "Skipped"}))).code, Unknown);
    }

    #[test]
    fn malformed_status_is_unknown() {
        assert_eq!(assess(&wf(json!(["Succeeded"]))).code, Unknown);
        assert_eq!(assess(&wf(json!({"phase": 3}))).code, Progressing);
    }
}

//! Health of Prometheus Operator workloads (`monitoring.coreos.com`): Prometheus, Alertmanager and
//! ThanosRuler.
//!
//! Upstream rules followed: Argo CD `resource_customizations/monitoring.coreos.com/Prometheus/health.lua`
//! and `.../Alertmanager/health.lua` (ThanosRuler gets the same rule). By the `Available` condition, the
//! last one in the list winning: True is Healthy, otherwise Degraded unless the reason is
//! `SomePodsNotReady` (Progressing); without it the object is Progressing ("Waiting for initialization").

use serde_json::Value;

use crate::Health;
use crate::json::{Verdict, status_conditions};

pub(crate) fn prometheus(obj: &Value) -> Verdict {
    let mut verdict = Health::progressing("Waiting for initialization");
    for c in status_conditions(obj)?.unwrap_or_default() {
        if c.type_ != "Available" {
            continue;
        }
        verdict = if c.is_true() {
            Health::healthy("All instances are available")
        } else if c.reason == "SomePodsNotReady" {
            Health::progressing(c.describe(|| "Some pods are not ready".to_owned()))
        } else {
            Health::degraded(c.describe(|| format!("Available is {}", c.status)))
        };
    }
    Ok(verdict)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::{Health, HealthCode::*, assess};

    fn prom(kind: &str, status: Value) -> Value {
        json!({
            "apiVersion": "monitoring.coreos.com/v1", "kind": kind,
            "metadata": {"name": "k8s", "namespace": "monitoring", "generation": 3},
            "spec": {"replicas": 2}, "status": status
        })
    }

    #[test]
    fn available_is_healthy() {
        let status = json!({"conditions": [
            {"type": "Available", "status": "True"},
            {"type": "Reconciled", "status": "True"}
        ]});
        for kind in ["Prometheus", "Alertmanager", "ThanosRuler"] {
            assert_eq!(
                assess(&prom(kind, status.clone())),
                Health::new(Healthy, "All instances are available")
            );
        }
    }

    #[test]
    fn some_pods_not_ready_is_progressing() {
        let status = json!({"conditions": [
            {"type": "Available", "status": "Degraded", "reason": "SomePodsNotReady", "message": "1/2 pods are ready"}
        ]});
        assert_eq!(
            assess(&prom("Prometheus", status)),
            Health::new(Progressing, "1/2 pods are ready")
        );
    }

    #[test]
    fn unavailable_is_degraded() {
        let status = json!({"conditions": [
            {"type": "Available", "status": "False", "reason": "NoPodReady", "message": "shard 0: pod prometheus-k8s-0: containers with incomplete status: [init-config-reloader]"}
        ]});
        assert_eq!(assess(&prom("Alertmanager", status)).code, Degraded);
        let no_message = json!({"conditions": [{"type": "Available", "status": "False", "reason": "NoPodReady"}]});
        assert_eq!(
            assess(&prom("Prometheus", no_message)),
            Health::new(Degraded, "NoPodReady")
        );
    }

    #[test]
    fn no_status_is_progressing() {
        assert_eq!(
            assess(&prom("Prometheus", json!(null))),
            Health::new(Progressing, "Waiting for initialization")
        );
        assert_eq!(assess(&prom("Prometheus", json!({"conditions": []}))).code, Progressing);
    }

    #[test]
    fn malformed_is_unknown() {
        assert_eq!(
            assess(&prom("Prometheus", json!({"conditions": "Available"}))).code,
            Unknown
        );
        assert_eq!(assess(&prom("Alertmanager", json!(42))).code, Unknown);
    }
}

//! Health of KEDA objects (`keda.sh`): ScaledObject and ScaledJob.
//!
//! Upstream rules followed: Argo CD `resource_customizations/keda.sh/ScaledObject/health.lua` and
//! `.../ScaledJob/health.lua`. Every condition is read: `Ready` False (or Unknown, for a ScaledJob) and,
//! for a ScaledObject, `Fallback` True make Degraded; otherwise `Ready` True is Healthy, or Suspended when
//! `Paused` is True; anything else is Progressing. The message is the last relevant condition's.

use serde_json::Value;

use crate::Health;
use crate::json::{Verdict, status_conditions};

/// The KEDA kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KedaKind {
    ScaledObject,
    ScaledJob,
}

pub(crate) fn keda(obj: &Value, kind: KedaKind) -> Verdict {
    let (mut healthy, mut degraded, mut paused) = (false, false, false);
    let mut message = "";
    for c in status_conditions(obj)?.unwrap_or_default() {
        match (c.type_, c.status) {
            ("Ready", "False") => degraded = true,
            ("Ready", "Unknown") if kind == KedaKind::ScaledJob => degraded = true, // vocabulary: KEDA conditions
            ("Ready", "True") => healthy = true,
            ("Paused", "True") => paused = true,
            ("Fallback", "True") if kind == KedaKind::ScaledObject => degraded = true,
            _ => continue,
        }
        message = c.message;
    }
    Ok(if degraded {
        Health::degraded(message)
    } else if healthy && paused {
        Health::suspended(message)
    } else if healthy {
        Health::healthy(message)
    } else {
        Health::progressing(match kind {
            KedaKind::ScaledObject => "Creating HorizontalPodAutoscaler Object",
            KedaKind::ScaledJob => "Waiting for ScaledJob",
        })
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::{Health, HealthCode::*, assess};

    fn scaled(kind: &str, conditions: Value) -> Value {
        json!({
            "apiVersion": "keda.sh/v1alpha1", "kind": kind,
            "metadata": {"name": "worker", "namespace": "jobs", "generation": 1},
            "spec": {"scaleTargetRef": {"name": "worker"}},
            "status": {"conditions": conditions}
        })
    }

    #[test]
    fn ready_is_healthy() {
        let c = json!([
            {"type": "Ready", "status": "True", "message": "ScaledObject is defined correctly and is ready for scaling"},
            {"type": "Active", "status": "False"}
        ]);
        assert_eq!(
            assess(&scaled("ScaledObject", c.clone())),
            Health::new(Healthy, "ScaledObject is defined correctly and is ready for scaling")
        );
        assert_eq!(assess(&scaled("ScaledJob", c)).code, Healthy);
    }

    #[test]
    fn paused_is_suspended() {
        let c = json!([
            {"type": "Ready", "status": "True"},
            {"type": "Paused", "status": "True", "message": "ScaledObject is paused"}
        ]);
        assert_eq!(
            assess(&scaled("ScaledObject", c)),
            Health::new(Suspended, "ScaledObject is paused")
        );
    }

    #[test]
    fn not_ready_or_fallback_is_degraded() {
        let c = json!([{"type": "Ready", "status": "False", "message": "ScaledObject doesn't have correct triggers"}]);
        assert_eq!(assess(&scaled("ScaledObject", c)).code, Degraded);
        let c = json!([{"type": "Ready", "status": "True"}, {"type": "Fallback", "status": "True", "message": "using fallback"}]);
        assert_eq!(
            assess(&scaled("ScaledObject", c)),
            Health::new(Degraded, "using fallback")
        );
        // Fallback is a ScaledObject condition only.
        let c = json!([{"type": "Ready", "status": "True"}, {"type": "Fallback", "status": "True"}]);
        assert_eq!(assess(&scaled("ScaledJob", c)).code, Healthy);
    }

    #[test]
    fn ready_unknown_differs_by_kind() {
        let c = json!([{"type": "Ready", "status": "Unknown", "message": "checking triggers"}]);
        assert_eq!(
            assess(&scaled("ScaledJob", c.clone())),
            Health::new(Degraded, "checking triggers")
        );
        assert_eq!(
            assess(&scaled("ScaledObject", c)),
            Health::new(Progressing, "Creating HorizontalPodAutoscaler Object")
        );
    }

    #[test]
    fn no_status_is_progressing_and_malformed_unknown() {
        let mut obj = scaled("ScaledJob", json!(null));
        obj["status"] = json!(null);
        assert_eq!(assess(&obj), Health::new(Progressing, "Waiting for ScaledJob"));
        assert_eq!(assess(&scaled("ScaledObject", json!("Ready"))).code, Unknown);
    }
}

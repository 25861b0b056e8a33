//! Health of storage objects: a PersistentVolumeClaim by its phase.

use serde_json::Value;

use crate::Health;
use crate::json::str_at;

/// core/v1 PersistentVolumeClaim: Bound is Healthy, Lost is Degraded, Pending (or no phase yet) is
/// Progressing, any other phase is Unknown.
pub(crate) fn persistent_volume_claim(obj: &Value) -> Health {
    match str_at(obj, &["status", "phase"]) {
        Some("Bound") => Health::healthy(""),
        Some("Lost") => Health::degraded("PersistentVolumeClaim lost its underlying volume"),
        // vocabulary: PersistentVolumeClaim phases
        Some("Pending") => Health::progressing("Waiting for the PersistentVolumeClaim to be bound"),
        None => Health::progressing("Waiting for the PersistentVolumeClaim to get a phase"),
        Some(phase) => Health::unknown(format!("Unexpected PersistentVolumeClaim phase \"{phase}\"")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::{HealthCode::*, assess};

    fn pvc(status: Value) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data-db-0", "namespace": "shop"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}, "storageClassName": "standard"},
            "status": status
        })
    }

    #[test]
    fn bound_pvc_is_healthy() {
        let p = pvc(json!({"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "10Gi"}}));
        assert_eq!(assess(&p).code, Healthy);
    }

    #[test]
    fn pending_pvc_is_progressing() {
        assert_eq!(assess(&pvc(json!({"phase": "Pending"}))).code, Progressing);
    }

    #[test]
    fn pvc_without_phase_is_progressing() {
        assert_eq!(assess(&pvc(json!({}))).code, Progressing);
        assert_eq!(assess(&pvc(json!(null))).code, Progressing);
    }

    #[test]
    fn lost_pvc_is_degraded() {
        assert_eq!(assess(&pvc(json!({"phase": "Lost"}))).code, Degraded);
    }

    #[test]
    fn unexpected_phase_is_unknown() {
        let h = assess(&pvc(json!({"phase": "Resizing"})));
        assert_eq!(h.code, Unknown);
        assert!(h.message.contains("Resizing"));
    }
}

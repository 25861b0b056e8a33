//! Health of Istio's IstioOperator (`install.istio.io`), the only Istio kind Argo CD has a check for.
//!
//! Upstream rule followed: Argo CD `resource_customizations/install.istio.io/IstioOperator/health.lua`:
//! `status.status` (a name or its protobuf number) NONE is Unknown, UPDATING and RECONCILING are
//! Progressing, HEALTHY is Healthy, ERROR is Degraded; without it the operator is Progressing. Istio's
//! traffic kinds (VirtualService, DestinationRule, ...) have no status to judge and use the kstatus
//! fallback.

use serde_json::Value;

use crate::Health;
use crate::json::{Verdict, int_at, status_object, str_at};

/// The component status of an IstioOperator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ComponentStatus {
    None,
    Updating,
    Reconciling,
    Healthy,
    Error,
}

fn component_status(obj: &Value) -> Option<ComponentStatus> {
    let by_name = str_at(obj, &["status", "status"]).and_then(|s| match s {
        "NONE" => Some(ComponentStatus::None),
        "UPDATING" => Some(ComponentStatus::Updating),
        "RECONCILING" => Some(ComponentStatus::Reconciling),
        "HEALTHY" => Some(ComponentStatus::Healthy),
        "ERROR" => Some(ComponentStatus::Error),
        _ => None,
    });
    by_name.or_else(|| match int_at(obj, &["status", "status"])? {
        0 => Some(ComponentStatus::None),
        1 => Some(ComponentStatus::Updating),
        2 => Some(ComponentStatus::Reconciling),
        3 => Some(ComponentStatus::Healthy),
        4 => Some(ComponentStatus::Error),
        _ => None,
    })
}

pub(crate) fn istio_operator(obj: &Value) -> Verdict {
    status_object(obj)?;
    Ok(match component_status(obj) {
        Some(ComponentStatus::None) => Health::unknown("Component is not present."),
        Some(ComponentStatus::Updating) => Health::progressing("Component is being updated to a different version."),
        Some(ComponentStatus::Reconciling) => {
            Health::progressing("Controller has started but not yet completed reconciliation loop for the component.")
        }
        Some(ComponentStatus::Healthy) => Health::healthy("Component is healthy."),
        Some(ComponentStatus::Error) => Health::degraded("Component is in an error state."),
        None => Health::progressing("Waiting for Istio Control Plane"),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::{HealthCode::*, assess};

    fn iop(status: Value) -> Value {
        json!({
            "apiVersion": "install.istio.io/v1alpha1", "kind": "IstioOperator",
            "metadata": {"name": "control-plane", "namespace": "istio-system"},
            "spec": {"profile": "default"}, "status": status
        })
    }

    #[test]
    fn by_name_and_number() {
        assert_eq!(assess(&iop(json!({"status": "HEALTHY"}))).code, Healthy);
        assert_eq!(assess(&iop(json!({"status": 3}))).code, Healthy);
        assert_eq!(assess(&iop(json!({"status": "RECONCILING"}))).code, Progressing);
        assert_eq!(assess(&iop(json!({"status": 1}))).code, Progressing);
        assert_eq!(assess(&iop(json!({"status": "ERROR"}))).code, Degraded);
        assert_eq!(assess(&iop(json!({"status": 4}))).code, Degraded);
        assert_eq!(assess(&iop(json!({"status": "NONE"}))).code, Unknown);
    }

    #[test]
    fn no_status_is_progressing_and_malformed_unknown() {
        assert_eq!(assess(&iop(json!(null))).code, Progressing);
        assert_eq!(assess(&iop(json!({"status": "SOMETHING"}))).code, Progressing);
        assert_eq!(assess(&iop(json!({"status": 99}))).code, Progressing);
        assert_eq!(assess(&iop(json!("HEALTHY"))).code, Unknown);
    }
}

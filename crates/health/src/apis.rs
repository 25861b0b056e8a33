//! Health of objects that extend the API itself: an aggregated APIService and a
//! CustomResourceDefinition, judged by the conditions the API server sets on them.

use serde_json::Value;

use crate::Health;
use crate::json::{Condition, condition, conditions};

/// `"reason: message"`, or whichever of the two is present.
fn reason_and_message(c: &Condition<'_>) -> String {
    match (c.reason.is_empty(), c.message.is_empty()) {
        (false, false) => format!("{}: {}", c.reason, c.message),
        (false, true) => c.reason.to_owned(),
        (true, _) => c.message.to_owned(),
    }
}

/// apiregistration.k8s.io APIService: by its Available condition.
pub(crate) fn api_service(obj: &Value) -> Health {
    match condition(obj, "Available") {
        Some(c) if c.is_true() => Health::healthy(reason_and_message(&c)),
        Some(c) if c.is_false() => {
            let detail = reason_and_message(&c);
            Health::degraded(if detail.is_empty() {
                "APIService is not available".to_owned()
            } else {
                detail
            })
        }
        Some(_) | None => Health::progressing("Waiting for the APIService to become available"),
    }
}

/// apiextensions.k8s.io CustomResourceDefinition. Terminating wins (the CRD is going away), rejected
/// names or a non-structural schema are Degraded, Established is Healthy, and anything else is still
/// Progressing: a just-created CRD is not Established for a moment.
pub(crate) fn custom_resource_definition(obj: &Value) -> Health {
    let mut established = false;
    for c in conditions(obj) {
        match c.type_ {
            // vocabulary: APIService condition types
            "Terminating" if c.is_true() => {
                return Health::progressing(with_detail("CRD is being terminated", c.message));
            }
            "NamesAccepted" if c.is_false() => {
                return Health::degraded(with_detail("CRD names have not been accepted", &reason_and_message(&c)));
            }
            "NonStructuralSchema" if c.is_true() => {
                return Health::degraded(with_detail("CRD schema is not structural", c.message));
            }
            "Established" if c.is_true() => established = true,
            _ => {}
        }
    }
    if established {
        Health::healthy("")
    } else {
        Health::progressing("Waiting for the CRD to be established")
    }
}

fn with_detail(summary: &str, detail: &str) -> String {
    if detail.is_empty() {
        summary.to_owned()
    } else {
        format!("{summary}: {detail}")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::{Health, HealthCode::*, assess};

    fn api_service(conditions: Value) -> Value {
        json!({
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": "v1beta1.metrics.k8s.io"},
            "spec": {"group": "metrics.k8s.io", "version": "v1beta1", "service": {"name": "metrics-server", "namespace": "kube-system"}},
            "status": {"conditions": conditions}
        })
    }

    #[test]
    fn available_api_service_is_healthy() {
        let a = api_service(
            json!([{"type": "Available", "status": "True", "reason": "Passed", "message": "all checks passed"}]),
        );
        assert_eq!(assess(&a), Health::new(Healthy, "Passed: all checks passed"));
    }

    #[test]
    fn unavailable_api_service_is_degraded() {
        let a = api_service(json!([{
            "type": "Available", "status": "False", "reason": "MissingEndpoints",
            "message": "endpoints for service/metrics-server in \"kube-system\" have no addresses"
        }]));
        assert_eq!(
            assess(&a),
            Health::new(
                Degraded,
                "MissingEndpoints: endpoints for service/metrics-server in \"kube-system\" have no addresses"
            )
        );
    }

    #[test]
    fn api_service_without_condition_is_progressing() {
        assert_eq!(assess(&api_service(json!([]))).code, Progressing);
        assert_eq!(
            assess(&api_service(json!([{"type": "Available", "status": "Unknown"}]))).code,
            Progressing
        );
    }

    fn crd(conditions: Value) -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "names": {"kind": "Widget", "plural": "widgets"}, "scope": "Namespaced"},
            "status": {"conditions": conditions, "acceptedNames": {"kind": "Widget", "plural": "widgets"}}
        })
    }

    #[test]
    fn established_crd_is_healthy() {
        let c = crd(json!([
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found"},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"}
        ]));
        assert_eq!(assess(&c).code, Healthy);
    }

    #[test]
    fn crd_with_rejected_names_is_degraded() {
        let c = crd(json!([
            {"type": "NamesAccepted", "status": "False", "reason": "ListKindConflict", "message": "\"WidgetList\" is already in use"},
            {"type": "Established", "status": "False", "reason": "NotAccepted"}
        ]));
        assert_eq!(
            assess(&c),
            Health::new(
                Degraded,
                "CRD names have not been accepted: ListKindConflict: \"WidgetList\" is already in use"
            )
        );
    }

    #[test]
    fn terminating_crd_is_progressing() {
        let c = crd(json!([
            {"type": "Established", "status": "True"},
            {"type": "Terminating", "status": "True", "reason": "InstanceDeletionInProgress", "message": "CustomResource deletion is in progress"}
        ]));
        assert_eq!(
            assess(&c),
            Health::new(
                Progressing,
                "CRD is being terminated: CustomResource deletion is in progress"
            )
        );
    }

    #[test]
    fn crd_not_yet_established_is_progressing() {
        assert_eq!(
            assess(&crd(json!([{"type": "NamesAccepted", "status": "True"}]))).code,
            Progressing
        );
        assert_eq!(assess(&crd(json!(null))).code, Progressing);
    }

    #[test]
    fn non_structural_crd_is_degraded() {
        let c = crd(json!([
            {"type": "Established", "status": "True"},
            {"type": "NonStructuralSchema", "status": "True", "message": "spec.validation.openAPIV3Schema.type: Required value"}
        ]));
        assert_eq!(assess(&c).code, Degraded);
    }
}

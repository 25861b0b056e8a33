//! Health of any kind without a dedicated check (ConfigMaps, Secrets, RBAC, most custom resources).
//!
//! An object that exists is Healthy unless it says otherwise through the common status conventions:
//! `status.observedGeneration` behind `metadata.generation` means its controller has not caught up yet,
//! and a `Ready` (or, failing that, `Available`) condition gives the verdict.

use serde_json::Value;

use crate::Health;
use crate::json::{Condition, condition, int_at};

/// Condition types that carry an overall verdict, in order of preference.
const VERDICT_CONDITIONS: [&str; 2] = ["Ready", "Available"];

pub(crate) fn generic(obj: &Value) -> Health {
    let generation = int_at(obj, &["metadata", "generation"]);
    let lags = |observed: Option<i64>| matches!((generation, observed), (Some(g), Some(o)) if o < g);

    if lags(int_at(obj, &["status", "observedGeneration"])) {
        return Health::progressing("Waiting for the controller to observe the latest generation");
    }
    let Some(verdict) = VERDICT_CONDITIONS.iter().find_map(|t| condition(obj, t)) else {
        return Health::healthy("");
    };
    if lags(verdict.observed_generation) {
        return Health::progressing(format!("Waiting for the {} condition to be updated", verdict.type_));
    }
    from_condition(&verdict)
}

/// True is Healthy; False is Degraded unless the reason says work is under way; anything else (Unknown)
/// is Progressing.
fn from_condition(c: &Condition<'_>) -> Health {
    let message = c.describe(|| {
        format!(
            "{} is {}",
            c.type_,
            if c.status.is_empty() { "unset" } else { c.status }
        )
    });
    if c.is_true() {
        Health::healthy(c.message)
    } else if c.is_false() && !reason_means_in_progress(c.reason) {
        Health::degraded(message)
    } else {
        Health::progressing(message)
    }
}

/// Whether a condition reason describes ongoing work (`Progressing`, `Reconciling`,
/// `ReconciliationInProgress`, ...), compared case-insensitively.
fn reason_means_in_progress(reason: &str) -> bool {
    let reason = reason.to_ascii_lowercase();
    ["progress", "reconciling"].iter().any(|word| reason.contains(word))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::{Health, HealthCode::*, assess};

    fn widget(status: Value) -> Value {
        json!({
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w", "namespace": "shop", "generation": 2},
            "spec": {"size": 3},
            "status": status
        })
    }

    #[test]
    fn object_without_status_is_healthy() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"k": "v"}});
        assert_eq!(assess(&cm), Health::new(Healthy, ""));
        assert_eq!(assess(&widget(json!(null))).code, Healthy);
        let role = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "reader"}, "rules": []
        });
        assert_eq!(assess(&role).code, Healthy);
    }

    #[test]
    fn ready_true_is_healthy() {
        let w = widget(json!({"observedGeneration": 2, "conditions": [
            {"type": "Ready", "status": "True", "reason": "Succeeded", "message": "Widget is ready"}
        ]}));
        assert_eq!(assess(&w), Health::new(Healthy, "Widget is ready"));
    }

    #[test]
    fn ready_false_is_degraded_with_message() {
        let w = widget(json!({"conditions": [
            {"type": "Ready", "status": "False", "reason": "ReconciliationFailed", "message": "failed to fetch artifact: 404 Not Found"}
        ]}));
        assert_eq!(
            assess(&w),
            Health::new(Degraded, "failed to fetch artifact: 404 Not Found")
        );
    }

    #[test]
    fn ready_false_without_message_names_reason() {
        let w = widget(json!({"conditions": [{"type": "Ready", "status": "False", "reason": "IssuerNotFound"}]}));
        assert_eq!(assess(&w), Health::new(Degraded, "IssuerNotFound"));
        let w = widget(json!({"conditions": [{"type": "Ready", "status": "False"}]}));
        assert_eq!(assess(&w), Health::new(Degraded, "Ready is False"));
    }

    #[test]
    fn ready_false_while_progressing_is_progressing() {
        for reason in [
            "Progressing",
            "Reconciling",
            "ProgressingWithRetry",
            "ReconciliationInProgress",
        ] {
            let w = widget(json!({"conditions": [
                {"type": "Ready", "status": "False", "reason": reason, "message": "building"}
            ]}));
            assert_eq!(assess(&w), Health::new(Progressing, "building"), "{reason}");
        }
    }

    #[test]
    fn ready_unknown_is_progressing() {
        let w = widget(json!({"conditions": [
            {"type": "Ready", "status": "Unknown", "reason": "Progressing", "message": "Reconciliation in progress"}
        ]}));
        assert_eq!(assess(&w), Health::new(Progressing, "Reconciliation in progress"));
    }

    #[test]
    fn available_is_used_when_ready_is_absent() {
        let w = widget(json!({"conditions": [
            {"type": "Synced", "status": "True"},
            {"type": "Available", "status": "False", "reason": "Unavailable", "message": "no backends"}
        ]}));
        assert_eq!(assess(&w), Health::new(Degraded, "no backends"));
        let w = widget(json!({"conditions": [{"type": "Available", "status": "True"}]}));
        assert_eq!(assess(&w).code, Healthy);
    }

    #[test]
    fn ready_takes_precedence_over_available() {
        let w = widget(json!({"conditions": [
            {"type": "Available", "status": "True"},
            {"type": "Ready", "status": "False", "message": "degraded"}
        ]}));
        assert_eq!(assess(&w).code, Degraded);
    }

    #[test]
    fn unrelated_conditions_are_ignored() {
        let w = widget(json!({"conditions": [{"type": "Synced", "status": "False", "message": "whatever"}]}));
        assert_eq!(assess(&w).code, Healthy);
    }

    #[test]
    fn observed_generation_behind_is_progressing() {
        let w = widget(json!({"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]}));
        assert_eq!(assess(&w).code, Progressing);
        let w = widget(json!({"observedGeneration": 1}));
        assert_eq!(assess(&w).code, Progressing);
    }

    #[test]
    fn stale_ready_condition_is_progressing() {
        let w = widget(json!({"conditions": [
            {"type": "Ready", "status": "False", "observedGeneration": 1, "message": "old failure"}
        ]}));
        assert_eq!(assess(&w).code, Progressing);
        let w = widget(json!({"conditions": [
            {"type": "Ready", "status": "True", "observedGeneration": 2}
        ]}));
        assert_eq!(assess(&w).code, Healthy);
    }

    #[test]
    fn missing_observed_generation_is_not_lagging() {
        let w = widget(json!({"phase": "Running"}));
        assert_eq!(assess(&w).code, Healthy);
    }
}

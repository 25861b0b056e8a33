//! Health of any kind without a dedicated rule (ConfigMaps, Secrets, RBAC, most custom resources),
//! following the kstatus conventions of the Kubernetes cli-utils project (`pkg/kstatus/status`:
//! `checkGenericProperties` and `checkGeneration`) and Capstan's reading of the common `Ready` and
//! `Available` conditions:
//!
//! 1. `status` present but not an object, or `status.conditions` not a list: Unknown (the object says
//!    nothing usable).
//! 2. `status.observedGeneration` behind `metadata.generation`: Progressing (the controller has not
//!    seen the latest spec).
//! 3. In list order, `Reconciling` True is Progressing and `Stalled` True is Degraded (kstatus).
//! 4. A `Ready` (or, failing that, `Available`) condition gives the verdict: True is Healthy, False is
//!    Degraded unless its reason says work is under way, Unknown is Progressing; a condition that
//!    observed an older generation is Progressing.
//! 5. Otherwise the object is Healthy (kstatus "Current"), except one with no status (absent, `null`
//!    or `{}`) whose CRD has a status subresource: its controller has not reported yet, so it is
//!    Progressing. See [`crate::StatusSubresource`].

use serde_json::Value;

use crate::json::{Condition, Verdict, int_at, status_conditions, status_object, str_at};
use crate::{Context, Health, StatusSubresource};

/// Condition types that carry an overall verdict, in order of preference.
const VERDICT_CONDITIONS: [&str; 2] = ["Ready", "Available"];

pub(crate) fn generic(obj: &Value, ctx: &Context) -> Verdict {
    let status = status_object(obj)?;
    let conditions = status_conditions(obj)?.unwrap_or_default();
    let generation = int_at(obj, &["metadata", "generation"]);
    let lags = |observed: Option<i64>| matches!((generation, observed), (Some(g), Some(o)) if o < g);

    let observed = int_at(obj, &["status", "observedGeneration"]);
    if lags(observed) {
        let kind = str_at(obj, &["kind"]).unwrap_or("Object");
        return Ok(Health::progressing(format!(
            "{kind} generation is {}, but latest observed generation is {}",
            generation.unwrap_or(0),
            observed.unwrap_or(0)
        )));
    }
    for c in &conditions {
        if c.type_ == "Reconciling" && c.is_true() {
            return Ok(Health::progressing(c.describe(|| "Reconciling".to_owned())));
        }
        if c.type_ == "Stalled" && c.is_true() {
            return Ok(Health::degraded(c.describe(|| "Stalled".to_owned())));
        }
    }
    if let Some(verdict) = VERDICT_CONDITIONS
        .iter()
        .find_map(|t| conditions.iter().find(|c| c.type_ == *t))
    {
        if lags(verdict.observed_generation) {
            return Ok(Health::progressing(format!(
                "Waiting for the {} condition to be updated",
                verdict.type_
            )));
        }
        return Ok(from_condition(verdict));
    }
    let no_status = status.is_none_or(|s| s.is_empty());
    if no_status && ctx.status_subresource == StatusSubresource::Present {
        return Ok(Health::progressing("Waiting for the controller to report a status"));
    }
    Ok(Health::healthy(""))
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

    use crate::{Context, Health, HealthCode::*, StatusSubresource, assess, assess_with};

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

    #[test]
    fn observed_generation_message_follows_kstatus() {
        let w = widget(json!({"observedGeneration": 1}));
        assert_eq!(
            assess(&w),
            Health::new(
                Progressing,
                "Widget generation is 2, but latest observed generation is 1"
            )
        );
    }

    #[test]
    fn reconciling_true_is_progressing() {
        let w = widget(json!({"observedGeneration": 2, "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "Reconciling", "status": "True", "reason": "Scaling", "message": "adding a replica"}
        ]}));
        assert_eq!(assess(&w), Health::new(Progressing, "adding a replica"));
        let done = widget(
            json!({"conditions": [{"type": "Reconciling", "status": "False"}, {"type": "Ready", "status": "True"}]}),
        );
        assert_eq!(assess(&done).code, Healthy);
    }

    #[test]
    fn stalled_true_is_degraded() {
        let w = widget(json!({"conditions": [
            {"type": "Stalled", "status": "True", "reason": "QuotaExceeded", "message": "cannot allocate volume"},
            {"type": "Ready", "status": "Unknown"}
        ]}));
        assert_eq!(assess(&w), Health::new(Degraded, "cannot allocate volume"));
        let w = widget(json!({"conditions": [{"type": "Stalled", "status": "True"}]}));
        assert_eq!(assess(&w), Health::new(Degraded, "Stalled"));
    }

    #[test]
    fn first_of_reconciling_and_stalled_wins_as_in_kstatus() {
        let w = widget(json!({"conditions": [
            {"type": "Reconciling", "status": "True", "message": "retrying"},
            {"type": "Stalled", "status": "True", "message": "stuck"}
        ]}));
        assert_eq!(assess(&w), Health::new(Progressing, "retrying"));
    }

    #[test]
    fn no_status_depends_on_the_status_subresource() {
        let present = Context {
            status_subresource: StatusSubresource::Present,
        };
        let absent = Context {
            status_subresource: StatusSubresource::Absent,
        };
        for status in [json!(null), json!({})] {
            let w = widget(status);
            assert_eq!(assess(&w).code, Healthy);
            assert_eq!(assess_with(&w, &Context::default()).code, Healthy);
            assert_eq!(assess_with(&w, &absent).code, Healthy);
            assert_eq!(
                assess_with(&w, &present),
                Health::new(Progressing, "Waiting for the controller to report a status")
            );
        }
        // A status without conditions is the controller's report: Current in kstatus terms.
        assert_eq!(
            assess_with(&widget(json!({"phase": "Running"})), &present).code,
            Healthy
        );
    }

    #[test]
    fn status_subresource_does_not_change_kinds_with_a_rule() {
        let present = Context {
            status_subresource: StatusSubresource::Present,
        };
        let svc =
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"type": "ClusterIP"}});
        assert_eq!(assess_with(&svc, &present).code, Healthy);
    }

    #[test]
    fn malformed_status_or_conditions_is_unknown() {
        assert_eq!(
            assess(&widget(json!("Ready"))),
            Health::new(Unknown, "status has an unexpected type")
        );
        assert_eq!(
            assess(&widget(json!({"conditions": {"type": "Ready", "status": "True"}}))),
            Health::new(Unknown, "status.conditions has an unexpected type")
        );
        assert_eq!(assess(&widget(json!([]))).code, Unknown);
    }
}

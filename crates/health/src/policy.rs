//! Health of policy objects: a PodDisruptionBudget (policy/v1) by whether enough of its Pods are
//! healthy.

use serde_json::Value;

use crate::Health;
use crate::json::int_at;

/// policy/v1 PodDisruptionBudget: Degraded while fewer Pods are healthy than it requires
/// (`currentHealthy < desiredHealthy`), Progressing until the disruption controller has observed the
/// current generation, otherwise Healthy. A budget that allows no disruption on purpose
/// (`maxUnavailable: 0`) is still Healthy when all its Pods are.
pub(crate) fn pod_disruption_budget(obj: &Value) -> Health {
    let generation = int_at(obj, &["metadata", "generation"]).unwrap_or(0);
    let observed = int_at(obj, &["status", "observedGeneration"]);
    if observed.is_none_or(|o| o < generation) {
        return Health::progressing("Waiting for the disruption controller to observe the budget");
    }
    let current = int_at(obj, &["status", "currentHealthy"]).unwrap_or(0);
    let desired = int_at(obj, &["status", "desiredHealthy"]).unwrap_or(0);
    if current < desired {
        return Health::degraded(format!(
            "{current} of the {desired} healthy pods the budget requires are healthy"
        ));
    }
    let allowed = int_at(obj, &["status", "disruptionsAllowed"]).unwrap_or(0);
    Health::healthy(format!("{current} healthy pods; {allowed} disruptions allowed"))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::{HealthCode::*, assess};

    fn pdb(generation: i64, status: Value) -> Value {
        json!({
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "shop", "generation": generation},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
            "status": status
        })
    }

    #[test]
    fn a_budget_with_enough_healthy_pods_is_healthy() {
        let h = assess(&pdb(
            1,
            json!({"observedGeneration": 1, "currentHealthy": 3, "desiredHealthy": 2, "disruptionsAllowed": 1, "expectedPods": 3}),
        ));
        assert_eq!(h.code, Healthy);
        assert_eq!(h.message, "3 healthy pods; 1 disruptions allowed");
        // No disruption allowed on purpose, every pod healthy.
        let strict = assess(&pdb(
            1,
            json!({"observedGeneration": 1, "currentHealthy": 2, "desiredHealthy": 2, "disruptionsAllowed": 0}),
        ));
        assert_eq!(strict.code, Healthy);
    }

    #[test]
    fn a_budget_short_of_healthy_pods_is_degraded() {
        let h = assess(&pdb(
            2,
            json!({"observedGeneration": 2, "currentHealthy": 1, "desiredHealthy": 2, "disruptionsAllowed": 0}),
        ));
        assert_eq!(h.code, Degraded);
        assert!(h.message.contains("1 of the 2"), "{}", h.message);
    }

    #[test]
    fn a_budget_not_yet_observed_is_progressing() {
        assert_eq!(assess(&pdb(3, json!({"observedGeneration": 2}))).code, Progressing);
        assert_eq!(assess(&pdb(1, json!(null))).code, Progressing);
    }
}

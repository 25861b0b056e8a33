//! Health of Strimzi Kafka objects (`kafka.strimzi.io`): Kafka, KafkaTopic, KafkaUser, KafkaConnect,
//! KafkaConnector and KafkaBridge.
//!
//! Upstream rules followed: Argo CD `resource_customizations/kafka.strimzi.io/<Kind>/health.lua` for
//! each of these kinds. The first decisive condition in list order wins: `NotReady` True is Degraded
//! (for a Kafka cluster, unless its reason is `Creating`), `Ready` True is Healthy; otherwise the
//! object is Progressing. Other Strimzi kinds use the kstatus fallback.

use serde_json::Value;

use crate::Health;
use crate::json::{Verdict, status_conditions};

/// The Strimzi kinds with a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StrimziKind {
    Kafka,
    KafkaTopic,
    KafkaUser,
    KafkaConnect,
    KafkaConnector,
    KafkaBridge,
}

impl StrimziKind {
    fn waiting(self) -> &'static str {
        match self {
            StrimziKind::Kafka => "Waiting for Kafka Cluster",
            StrimziKind::KafkaTopic => "Waiting for Kafka Topic",
            StrimziKind::KafkaUser => "Waiting for Kafka User",
            StrimziKind::KafkaConnect => "Waiting for Kafka Connect",
            StrimziKind::KafkaConnector => "Waiting for KafkaConnector",
            StrimziKind::KafkaBridge => "Waiting for KafkaBridge",
        }
    }
}

pub(crate) fn strimzi(obj: &Value, kind: StrimziKind) -> Verdict {
    for c in status_conditions(obj)?.unwrap_or_default() {
        if c.type_ == "NotReady" && c.is_true() && !(kind == StrimziKind::Kafka && c.reason == "Creating") {
            return Ok(Health::degraded(c.describe(|| "NotReady".to_owned())));
        }
        if c.type_ == "Ready" && c.is_true() {
            return Ok(Health::healthy(""));
        }
    }
    Ok(Health::progressing(kind.waiting()))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::{Health, HealthCode::*, assess};

    fn kafka(kind: &str, status: Value) -> Value {
        json!({
            "apiVersion": "kafka.strimzi.io/v1beta2", "kind": kind,
            "metadata": {"name": "events", "namespace": "kafka", "generation": 1},
            "spec": {}, "status": status
        })
    }

    #[test]
    fn ready_is_healthy() {
        let status = json!({"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]});
        for kind in [
            "Kafka",
            "KafkaTopic",
            "KafkaUser",
            "KafkaConnect",
            "KafkaConnector",
            "KafkaBridge",
        ] {
            assert_eq!(assess(&kafka(kind, status.clone())), Health::new(Healthy, ""), "{kind}");
        }
    }

    #[test]
    fn not_ready_is_degraded_except_a_kafka_being_created() {
        let failing = json!({"conditions": [
            {"type": "NotReady", "status": "True", "reason": "InvalidResourceException", "message": "replicas must be > 0"}
        ]});
        assert_eq!(
            assess(&kafka("KafkaTopic", failing.clone())),
            Health::new(Degraded, "replicas must be > 0")
        );
        assert_eq!(assess(&kafka("Kafka", failing)).code, Degraded);
        let creating = json!({"conditions": [
            {"type": "NotReady", "status": "True", "reason": "Creating", "message": "Kafka cluster is being deployed"}
        ]});
        assert_eq!(
            assess(&kafka("Kafka", creating.clone())),
            Health::new(Progressing, "Waiting for Kafka Cluster")
        );
        assert_eq!(assess(&kafka("KafkaUser", creating)).code, Degraded);
    }

    #[test]
    fn no_status_or_undecided_is_progressing() {
        assert_eq!(
            assess(&kafka("KafkaTopic", json!(null))),
            Health::new(Progressing, "Waiting for Kafka Topic")
        );
        let undecided = json!({"conditions": [{"type": "Ready", "status": "False"}]});
        assert_eq!(
            assess(&kafka("KafkaConnect", undecided)),
            Health::new(Progressing, "Waiting for Kafka Connect")
        );
    }

    #[test]
    fn first_decisive_condition_wins() {
        let both = json!({"conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "NotReady", "status": "True", "message": "old"}
        ]});
        assert_eq!(assess(&kafka("KafkaBridge", both)).code, Healthy);
    }

    #[test]
    fn malformed_status_is_unknown() {
        assert_eq!(assess(&kafka("Kafka", json!("Ready"))).code, Unknown);
        assert_eq!(
            assess(&kafka("KafkaTopic", json!({"conditions": {"type": "Ready"}}))).code,
            Unknown
        );
    }
}

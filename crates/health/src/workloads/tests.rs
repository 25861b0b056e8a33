//! Unit tests of the workload health rules, one object per case.

use serde_json::{Value, json};

use crate::{Health, HealthCode::*, assess};

fn deployment(generation: i64, spec: Value, status: Value) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "generation": generation},
        "spec": spec,
        "status": status
    })
}

fn progressing_condition(reason: &str) -> Value {
    json!({
        "type": "Progressing", "status": if reason == "ProgressDeadlineExceeded" { "False" } else { "True" },
        "reason": reason, "message": "ReplicaSet \"web-5d4f\" is progressing.",
        "lastUpdateTime": "2024-05-01T10:00:00Z", "lastTransitionTime": "2024-05-01T09:58:00Z"
    })
}

#[test]
fn deployment_fully_rolled_out_is_healthy() {
    let d = deployment(
        4,
        json!({"replicas": 3}),
        json!({
            "observedGeneration": 4, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 3,
            "availableReplicas": 3,
            "conditions": [
                {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                progressing_condition("NewReplicaSetAvailable")
            ]
        }),
    );
    assert_eq!(assess(&d), Health::new(Healthy, ""));
}

#[test]
fn deployment_mid_rollout_waits_for_updates() {
    let d = deployment(
        5,
        json!({"replicas": 3}),
        json!({
            "observedGeneration": 5, "replicas": 4, "updatedReplicas": 1, "readyReplicas": 3,
            "availableReplicas": 3, "unavailableReplicas": 1,
            "conditions": [progressing_condition("ReplicaSetUpdated")]
        }),
    );
    assert_eq!(
        assess(&d),
        Health::new(
            Progressing,
            "Waiting for rollout to finish: 1 out of 3 new replicas have been updated..."
        )
    );
}

#[test]
fn deployment_with_old_replicas_terminating() {
    let d = deployment(
        5,
        json!({"replicas": 3}),
        json!({"observedGeneration": 5, "replicas": 5, "updatedReplicas": 3, "availableReplicas": 3}),
    );
    assert_eq!(
        assess(&d),
        Health::new(
            Progressing,
            "Waiting for rollout to finish: 2 old replicas are pending termination..."
        )
    );
}

#[test]
fn deployment_waiting_for_updated_replicas_to_be_available() {
    let d = deployment(
        5,
        json!({"replicas": 3}),
        json!({"observedGeneration": 5, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 1, "availableReplicas": 1}),
    );
    assert_eq!(
        assess(&d),
        Health::new(
            Progressing,
            "Waiting for rollout to finish: 1 of 3 updated replicas are available..."
        )
    );
}

#[test]
fn deployment_not_yet_observed_is_progressing() {
    let d = deployment(
        6,
        json!({"replicas": 3}),
        json!({"observedGeneration": 5, "replicas": 3, "updatedReplicas": 3, "availableReplicas": 3}),
    );
    let h = assess(&d);
    assert_eq!(h.code, Progressing);
    assert!(
        h.message
            .contains("observed deployment generation less than desired generation")
    );
}

#[test]
fn fresh_deployment_without_status_is_progressing() {
    let d = deployment(1, json!({"replicas": 2}), json!(null));
    assert_eq!(assess(&d).code, Progressing);
}

#[test]
fn deployment_progress_deadline_exceeded_is_degraded() {
    let d = deployment(
        2,
        json!({"replicas": 3, "progressDeadlineSeconds": 600}),
        json!({
            "observedGeneration": 2, "replicas": 4, "updatedReplicas": 1, "availableReplicas": 3,
            "conditions": [progressing_condition("ProgressDeadlineExceeded")]
        }),
    );
    assert_eq!(
        assess(&d),
        Health::new(Degraded, "Deployment \"web\" exceeded its progress deadline")
    );
}

#[test]
fn paused_deployment_is_suspended() {
    let d = deployment(
        3,
        json!({"replicas": 3, "paused": true}),
        json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 0}),
    );
    assert_eq!(assess(&d), Health::new(Suspended, "Deployment is paused"));
}

#[test]
fn deployment_scaled_to_zero_is_healthy() {
    let d = deployment(7, json!({"replicas": 0}), json!({"observedGeneration": 7}));
    assert_eq!(assess(&d).code, Healthy);
}

#[test]
fn deployment_replicas_default_to_one() {
    let d = deployment(1, json!({}), json!({"observedGeneration": 1}));
    assert_eq!(
        assess(&d).message,
        "Waiting for rollout to finish: 0 out of 1 new replicas have been updated..."
    );
    let d = deployment(
        1,
        json!({}),
        json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1}),
    );
    assert_eq!(assess(&d).code, Healthy);
}

#[test]
fn extensions_deployment_is_assessed_too() {
    let mut d = deployment(
        1,
        json!({"replicas": 2}),
        json!({"observedGeneration": 1, "updatedReplicas": 1}),
    );
    d["apiVersion"] = json!("extensions/v1beta1");
    assert_eq!(assess(&d).code, Progressing);
}

fn stateful_set(spec: Value, status: Value) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "shop", "generation": 3},
        "spec": spec,
        "status": status
    })
}

#[test]
fn stateful_set_rolled_out_is_healthy() {
    let s = stateful_set(
        json!({"replicas": 3, "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}}),
        json!({
            "observedGeneration": 3, "replicas": 3, "readyReplicas": 3, "currentReplicas": 3,
            "updatedReplicas": 3, "availableReplicas": 3,
            "currentRevision": "db-7c9f", "updateRevision": "db-7c9f"
        }),
    );
    assert_eq!(
        assess(&s),
        Health::new(
            Healthy,
            "statefulset rolling update complete 3 pods at revision db-7c9f..."
        )
    );
}

#[test]
fn stateful_set_generation_not_observed() {
    let s = stateful_set(
        json!({"replicas": 1}),
        json!({"observedGeneration": 2, "readyReplicas": 1}),
    );
    assert_eq!(
        assess(&s),
        Health::new(Progressing, "Waiting for statefulset spec update to be observed...")
    );
    let s = stateful_set(json!({"replicas": 1}), json!({}));
    assert_eq!(assess(&s).code, Progressing);
}

#[test]
fn stateful_set_waiting_for_ready_pods() {
    let s = stateful_set(
        json!({"replicas": 3}),
        json!({"observedGeneration": 3, "replicas": 3, "readyReplicas": 1, "updatedReplicas": 3}),
    );
    assert_eq!(
        assess(&s),
        Health::new(Progressing, "Waiting for 2 pods to be ready...")
    );
}

#[test]
fn stateful_set_partitioned_rollout_in_progress() {
    let s = stateful_set(
        json!({"replicas": 5, "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}}),
        json!({
            "observedGeneration": 3, "replicas": 5, "readyReplicas": 5, "currentReplicas": 4,
            "updatedReplicas": 1, "currentRevision": "db-1", "updateRevision": "db-2"
        }),
    );
    assert_eq!(
        assess(&s),
        Health::new(
            Progressing,
            "Waiting for partitioned roll out to finish: 1 out of 3 new pods have been updated..."
        )
    );
}

#[test]
fn stateful_set_partitioned_rollout_complete_is_healthy_despite_revisions() {
    let s = stateful_set(
        json!({"replicas": 5, "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}}),
        json!({
            "observedGeneration": 3, "replicas": 5, "readyReplicas": 5, "currentReplicas": 2,
            "updatedReplicas": 3, "currentRevision": "db-1", "updateRevision": "db-2"
        }),
    );
    assert_eq!(
        assess(&s),
        Health::new(
            Healthy,
            "partitioned roll out complete: 3 new pods have been updated..."
        )
    );
}

#[test]
fn stateful_set_rolling_update_without_partition_waits_for_revision() {
    let s = stateful_set(
        json!({"replicas": 3}),
        json!({
            "observedGeneration": 3, "replicas": 3, "readyReplicas": 3, "currentReplicas": 1,
            "updatedReplicas": 2, "currentRevision": "db-1", "updateRevision": "db-2"
        }),
    );
    assert_eq!(assess(&s).code, Progressing);
    let s = stateful_set(
        json!({"replicas": 3}),
        json!({
            "observedGeneration": 3, "replicas": 3, "readyReplicas": 3, "currentReplicas": 0,
            "updatedReplicas": 3, "currentRevision": "db-1", "updateRevision": "db-2"
        }),
    );
    assert_eq!(
        assess(&s),
        Health::new(
            Progressing,
            "waiting for statefulset rolling update to complete 3 pods at revision db-2..."
        )
    );
}

#[test]
fn stateful_set_on_delete_is_healthy_once_ready() {
    let s = stateful_set(
        json!({"replicas": 2, "updateStrategy": {"type": "OnDelete"}}),
        json!({
            "observedGeneration": 3, "replicas": 2, "readyReplicas": 2, "updatedReplicas": 0,
            "currentRevision": "db-1", "updateRevision": "db-2"
        }),
    );
    assert_eq!(assess(&s), Health::new(Healthy, "statefulset has 2 ready pods"));
    let s = stateful_set(
        json!({"replicas": 2, "updateStrategy": {"type": "OnDelete"}}),
        json!({"observedGeneration": 3, "replicas": 2, "readyReplicas": 1}),
    );
    assert_eq!(assess(&s).code, Progressing);
}

#[test]
fn stateful_set_scaled_to_zero_is_healthy() {
    let s = stateful_set(
        json!({"replicas": 0}),
        json!({"observedGeneration": 3, "replicas": 0, "currentRevision": "db-1", "updateRevision": "db-1"}),
    );
    assert_eq!(assess(&s).code, Healthy);
}

fn daemon_set(strategy: &str, status: Value) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "node-agent", "namespace": "kube-system", "generation": 2},
        "spec": {"updateStrategy": {"type": strategy}},
        "status": status
    })
}

#[test]
fn daemon_set_not_yet_scheduled_is_progressing() {
    let d = daemon_set(
        "RollingUpdate",
        json!({
            "observedGeneration": 2, "desiredNumberScheduled": 3, "currentNumberScheduled": 0,
            "numberReady": 0, "numberMisscheduled": 0
        }),
    );
    assert_eq!(
        assess(&d),
        Health::new(
            Progressing,
            "Waiting for daemon set \"node-agent\" rollout to finish: 0 out of 3 new pods have been updated..."
        )
    );
}

#[test]
fn daemon_set_waiting_for_available_pods() {
    let d = daemon_set(
        "RollingUpdate",
        json!({
            "observedGeneration": 2, "desiredNumberScheduled": 3, "currentNumberScheduled": 3,
            "updatedNumberScheduled": 3, "numberReady": 2, "numberAvailable": 2
        }),
    );
    assert_eq!(
        assess(&d),
        Health::new(
            Progressing,
            "Waiting for daemon set \"node-agent\" rollout to finish: 2 of 3 updated pods are available..."
        )
    );
}

#[test]
fn daemon_set_generation_lag_is_progressing() {
    let d = daemon_set(
        "RollingUpdate",
        json!({"observedGeneration": 1, "desiredNumberScheduled": 3, "updatedNumberScheduled": 3, "numberAvailable": 3}),
    );
    assert_eq!(assess(&d).code, Progressing);
}

#[test]
fn daemon_set_rolled_out_is_healthy() {
    let d = daemon_set(
        "RollingUpdate",
        json!({
            "observedGeneration": 2, "desiredNumberScheduled": 3, "currentNumberScheduled": 3,
            "updatedNumberScheduled": 3, "numberReady": 3, "numberAvailable": 3
        }),
    );
    assert_eq!(assess(&d).code, Healthy);
}

#[test]
fn daemon_set_on_delete_is_healthy() {
    let d = daemon_set(
        "OnDelete",
        json!({"observedGeneration": 2, "desiredNumberScheduled": 3, "updatedNumberScheduled": 1, "numberAvailable": 3}),
    );
    assert_eq!(
        assess(&d),
        Health::new(Healthy, "daemon set 1 out of 3 new pods have been updated")
    );
}

fn replica_set(replicas: Value, status: Value) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "web-5d4f", "namespace": "shop", "generation": 1},
        "spec": {"replicas": replicas},
        "status": status
    })
}

#[test]
fn replica_set_with_failure_is_degraded() {
    let r = replica_set(
        json!(3),
        json!({
            "observedGeneration": 1, "replicas": 0,
            "conditions": [{
                "type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                "message": "pods \"web-5d4f-\" is forbidden: exceeded quota: compute"
            }]
        }),
    );
    assert_eq!(
        assess(&r),
        Health::new(Degraded, "pods \"web-5d4f-\" is forbidden: exceeded quota: compute")
    );
}

#[test]
fn replica_set_waiting_for_available_replicas() {
    let r = replica_set(
        json!(3),
        json!({"observedGeneration": 1, "replicas": 3, "availableReplicas": 2}),
    );
    assert_eq!(
        assess(&r),
        Health::new(
            Progressing,
            "Waiting for rollout to finish: 2 out of 3 new replicas are available..."
        )
    );
}

#[test]
fn replica_set_generation_lag_and_healthy() {
    let r = replica_set(json!(1), json!({"availableReplicas": 1}));
    assert_eq!(assess(&r).code, Progressing);
    let r = replica_set(
        json!(2),
        json!({"observedGeneration": 1, "replicas": 2, "availableReplicas": 2}),
    );
    assert_eq!(assess(&r).code, Healthy);
    let r = replica_set(json!(0), json!({"observedGeneration": 1}));
    assert_eq!(assess(&r).code, Healthy);
}

fn hpa(conditions: Value) -> Value {
    json!({
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"minReplicas": 2, "maxReplicas": 10},
        "status": {"currentReplicas": 2, "desiredReplicas": 2, "conditions": conditions}
    })
}

#[test]
fn hpa_scaling_normally_is_healthy() {
    let h = hpa(json!([
        {"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale"},
        {"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound"},
        {"type": "ScalingLimited", "status": "True", "reason": "TooFewReplicas"}
    ]));
    assert_eq!(assess(&h).code, Healthy);
}

#[test]
fn hpa_unable_to_read_metrics_is_degraded() {
    let h = hpa(json!([
        {"type": "AbleToScale", "status": "True", "reason": "SucceededGetScale"},
        {
            "type": "ScalingActive", "status": "False", "reason": "FailedGetResourceMetric",
            "message": "the HPA was unable to compute the replica count: failed to get cpu utilization"
        }
    ]));
    assert_eq!(
        assess(&h),
        Health::new(
            Degraded,
            "the HPA was unable to compute the replica count: failed to get cpu utilization"
        )
    );
}

#[test]
fn hpa_scaling_disabled_or_v1_is_healthy() {
    let h = hpa(json!([{"type": "ScalingActive", "status": "False", "reason": "ScalingDisabled"}]));
    assert_eq!(assess(&h).code, Healthy);
    let v1 = json!({
        "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"}, "status": {"currentReplicas": 1, "desiredReplicas": 1}
    });
    assert_eq!(assess(&v1).code, Healthy);
}

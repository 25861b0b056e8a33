//! Fixture tests of the Argo Rollouts rules: promoted, stepping, paused, aborted, unobserved and malformed objects.

use serde_json::{Value, json};

use crate::{Health, HealthCode::*, assess};

fn rollout(spec: Value, status: Value) -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
        "metadata": {"name": "web", "namespace": "shop", "generation": 4},
        "spec": spec, "status": status
    })
}

fn canary() -> Value {
    json!({"replicas": 3, "strategy": {"canary": {"steps": [{"setWeight": 20}, {"pause": {}}]}}})
}

fn blue_green() -> Value {
    json!({"replicas": 2, "strategy": {"blueGreen": {"activeService": "web", "previewService": "web-preview"}}})
}

fn settled(extra: Value) -> Value {
    let mut s = json!({
        "observedGeneration": "4", "currentPodHash": "abc", "stableRS": "abc",
        "replicas": 3, "updatedReplicas": 3, "availableReplicas": 3, "conditions": []
    });
    if let (Some(s), Some(extra)) = (s.as_object_mut(), extra.as_object()) {
        s.extend(extra.clone());
    }
    s
}

#[test]
fn canary_fully_promoted_is_healthy() {
    assert_eq!(assess(&rollout(canary(), settled(json!({})))), Health::new(Healthy, ""));
}

#[test]
fn canary_mid_steps_is_progressing() {
    let r = rollout(canary(), settled(json!({"stableRS": "old"})));
    assert_eq!(
        assess(&r),
        Health::new(Progressing, "Waiting for rollout to finish steps")
    );
    let r = rollout(canary(), settled(json!({"updatedReplicas": 1, "availableReplicas": 1})));
    assert_eq!(
        assess(&r),
        Health::new(
            Progressing,
            "Waiting for roll out to finish: More replicas need to be updated"
        )
    );
    let r = rollout(canary(), settled(json!({"replicas": 4})));
    assert_eq!(assess(&r).code, Progressing);
}

#[test]
fn paused_is_suspended() {
    let r = rollout(
        canary(),
        settled(json!({"pauseConditions": [{"reason": "CanaryPauseStep"}]})),
    );
    assert_eq!(assess(&r), Health::new(Suspended, "Rollout is paused"));
    let mut spec = canary();
    spec["paused"] = json!(true);
    assert_eq!(assess(&rollout(spec, settled(json!({})))).code, Suspended);
}

#[test]
fn aborted_or_invalid_is_degraded() {
    let r = rollout(
        canary(),
        settled(json!({"conditions": [
            {"type": "Progressing", "status": "False", "reason": "RolloutAborted", "message": "Rollout aborted update to revision 3"}
        ]})),
    );
    assert_eq!(
        assess(&r),
        Health::new(Degraded, "Rollout aborted update to revision 3")
    );
    let r = rollout(
        canary(),
        settled(json!({"conditions": [{"type": "InvalidSpec", "status": "True", "message": "steps invalid"}]})),
    );
    assert_eq!(assess(&r).code, Degraded);
    let r = rollout(
        canary(),
        settled(json!({"conditions": [{"type": "Progressing", "reason": "ProgressDeadlineExceeded"}]})),
    );
    assert_eq!(assess(&r).code, Degraded);
}

#[test]
fn unobserved_generation_or_no_status_is_progressing() {
    let r = rollout(canary(), settled(json!({"observedGeneration": "3"})));
    assert_eq!(
        assess(&r),
        Health::new(Progressing, "Waiting for rollout spec update to be observed")
    );
    assert_eq!(assess(&rollout(canary(), json!(null))).code, Progressing);
    // A v0.9 hash in observedGeneration counts as observed.
    let r = rollout(canary(), settled(json!({"observedGeneration": "7d66d4485f"})));
    assert_eq!(assess(&r).code, Healthy);
    let r = rollout(canary(), json!({"observedGeneration": "4"}));
    assert_eq!(
        assess(&r),
        Health::new(
            Progressing,
            "Waiting for rollout to finish: status has not been reconciled."
        )
    );
}

#[test]
fn blue_green_waits_for_cutover() {
    let pending = rollout(
        blue_green(),
        settled(
            json!({"replicas": 2, "updatedReplicas": 2, "availableReplicas": 2, "blueGreen": {"activeSelector": "old"}}),
        ),
    );
    assert_eq!(
        assess(&pending),
        Health::new(Progressing, "active service cutover pending")
    );
    let done = rollout(
        blue_green(),
        settled(
            json!({"replicas": 4, "updatedReplicas": 2, "availableReplicas": 2, "blueGreen": {"activeSelector": "abc"}}),
        ),
    );
    // Old replicas scaling down later do not hold a blue-green rollout.
    assert_eq!(assess(&done).code, Healthy);
}

#[test]
fn analysis_run_phases() {
    let ar = |status: Value| json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AnalysisRun", "metadata": {"name": "a"}, "spec": {}, "status": status});
    assert_eq!(assess(&ar(json!({"phase": "Running"}))).code, Progressing);
    assert_eq!(
        assess(&ar(json!({"phase": "Successful"}))),
        Health::new(Healthy, "Analysis run completed successfully")
    );
    assert_eq!(
        assess(&ar(
            json!({"phase": "Failed", "message": "metric error-rate assessed Failed"})
        )),
        Health::new(Degraded, "metric error-rate assessed Failed")
    );
    assert_eq!(assess(&ar(json!({"phase": "Error"}))).code, Degraded);
    assert_eq!(assess(&ar(json!({"phase": "Inconclusive"}))).code, Unknown);
    assert_eq!(assess(&ar(json!(null))).code, Progressing);
    assert_eq!(assess(&ar(json!(["Running"]))).code, Unknown);
}

#[test]
fn experiment_phases() {
    let ex = |status: Value| json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Experiment", "metadata": {"name": "e"}, "spec": {}, "status": status});
    assert_eq!(
        assess(&ex(json!({"phase": "Pending"}))),
        Health::new(Progressing, "Experiment is pending")
    );
    assert_eq!(assess(&ex(json!({"phase": "Running"}))).code, Progressing);
    assert_eq!(assess(&ex(json!({"phase": "Successful"}))).code, Healthy);
    assert_eq!(
        assess(&ex(json!({"phase": "Failed"}))),
        Health::new(Degraded, "Experiment has failed")
    );
    assert_eq!(assess(&ex(json!({"phase": "Error"}))).code, Degraded);
    assert_eq!(assess(&ex(json!(null))).code, Progressing);
}

#[test]
fn malformed_rollout_is_unknown() {
    assert_eq!(assess(&rollout(canary(), json!("Healthy"))).code, Unknown);
    assert_eq!(
        assess(&rollout(canary(), settled(json!({"conditions": "x"})))).code,
        Unknown
    );
}

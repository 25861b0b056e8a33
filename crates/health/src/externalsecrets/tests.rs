//! Fixture tests of the External Secrets rules: synced, failing, waiting, stale (`OnChange`) and malformed objects.

use serde_json::{Value, json};

use crate::{Health, HealthCode::*, assess};

fn object(kind: &str, spec: Value, status: Value) -> Value {
    json!({
        "apiVersion": "external-secrets.io/v1", "kind": kind,
        "metadata": {"name": "db-creds", "namespace": "shop", "generation": 1},
        "spec": spec, "status": status
    })
}

fn ready(status: &str, message: &str) -> Value {
    json!({"type": "Ready", "status": status, "reason": "SecretSynced", "message": message, "lastTransitionTime": "2024-05-01T10:00:00Z"})
}

#[test]
fn external_secret_synced_is_healthy() {
    let es = object(
        "ExternalSecret",
        json!({}),
        json!({"conditions": [ready("True", "Secret was synced")]}),
    );
    assert_eq!(assess(&es), Health::new(Healthy, "Secret was synced"));
}

#[test]
fn external_secret_sync_error_is_degraded() {
    let es = object(
        "ExternalSecret",
        json!({}),
        json!({"conditions": [ready("False", "could not get secret data from provider")]}),
    );
    assert_eq!(
        assess(&es),
        Health::new(Degraded, "could not get secret data from provider")
    );
}

#[test]
fn external_secret_without_status_or_verdict_is_progressing() {
    assert_eq!(
        assess(&object("ExternalSecret", json!({}), json!(null))),
        Health::new(Progressing, "Waiting for ExternalSecret")
    );
    let unknown = object(
        "ExternalSecret",
        json!({}),
        json!({"conditions": [ready("Unknown", "")]}),
    );
    assert_eq!(assess(&unknown).code, Progressing);
}

#[test]
fn external_secret_on_change_ignores_a_ready_older_than_the_refresh() {
    let spec = json!({"refreshPolicy": "OnChange"});
    let stale = object(
        "ExternalSecret",
        spec.clone(),
        json!({
            "refreshTime": "2024-05-02T00:00:00Z", "conditions": [ready("True", "old sync")]
        }),
    );
    assert_eq!(assess(&stale), Health::new(Progressing, "Waiting for ExternalSecret"));
    let fresh = object(
        "ExternalSecret",
        spec.clone(),
        json!({
            "refreshTime": "2024-05-01T10:00:00Z", "conditions": [ready("True", "synced")]
        }),
    );
    assert_eq!(assess(&fresh).code, Healthy);
    let no_refresh = object("ExternalSecret", spec, json!({"conditions": [ready("False", "boom")]}));
    assert_eq!(assess(&no_refresh).code, Degraded);
    // Without OnChange the refresh time does not matter.
    let periodic = object(
        "ExternalSecret",
        json!({"refreshInterval": "1h"}),
        json!({
            "refreshTime": "2030-01-01T00:00:00Z", "conditions": [ready("True", "synced")]
        }),
    );
    assert_eq!(assess(&periodic).code, Healthy);
}

#[test]
fn cluster_external_secret_uses_the_last_condition() {
    let ok = object(
        "ClusterExternalSecret",
        json!({}),
        json!({"conditions": [
            {"type": "PartiallyReady", "status": "True", "message": "one namespace failed"},
            {"type": "Ready", "status": "True", "message": ""}
        ]}),
    );
    assert_eq!(assess(&ok).code, Healthy);
    let partial = object(
        "ClusterExternalSecret",
        json!({}),
        json!({"conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "PartiallyReady", "status": "True", "message": "one or more namespaces failed"}
        ]}),
    );
    assert_eq!(assess(&partial), Health::new(Degraded, "one or more namespaces failed"));
    let not_ready = object(
        "ClusterExternalSecret",
        json!({}),
        json!({"conditions": [{"type": "NotReady", "status": "True"}]}),
    );
    assert_eq!(assess(&not_ready).code, Degraded);
    let empty = object("ClusterExternalSecret", json!({}), json!({"conditions": []}));
    assert_eq!(
        assess(&empty),
        Health::new(Progressing, "Waiting for ClusterExternalSecret")
    );
}

#[test]
fn stores_and_push_secrets_follow_ready() {
    for (kind, waiting) in [
        ("SecretStore", "Waiting for SecretStore"),
        ("ClusterSecretStore", "Waiting for ClusterSecretStore"),
        ("PushSecret", "Waiting for PushSecret"),
    ] {
        let valid = object(
            kind,
            json!({}),
            json!({"conditions": [ready("True", "store validated")]}),
        );
        assert_eq!(assess(&valid), Health::new(Healthy, "store validated"), "{kind}");
        let invalid = object(
            kind,
            json!({}),
            json!({"conditions": [ready("False", "unable to validate store")]}),
        );
        assert_eq!(
            assess(&invalid),
            Health::new(Degraded, "unable to validate store"),
            "{kind}"
        );
        assert_eq!(
            assess(&object(kind, json!({}), json!(null))),
            Health::new(Progressing, waiting),
            "{kind}"
        );
    }
}

#[test]
fn malformed_status_is_unknown() {
    for kind in [
        "ExternalSecret",
        "ClusterExternalSecret",
        "SecretStore",
        "ClusterSecretStore",
        "PushSecret",
    ] {
        assert_eq!(assess(&object(kind, json!({}), json!(1))).code, Unknown, "{kind}");
        assert_eq!(
            assess(&object(kind, json!({}), json!({"conditions": {}}))).code,
            Unknown,
            "{kind}"
        );
    }
}

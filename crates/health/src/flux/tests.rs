//! Fixture tests of the Flux rules: ready, reconciling, failed, stalled, suspended, stale and malformed objects.

use serde_json::{Value, json};

use crate::{Health, HealthCode::*, assess};

fn flux(api_version: &str, kind: &str, spec: Value, status: Value) -> Value {
    json!({
        "apiVersion": api_version, "kind": kind,
        "metadata": {"name": "apps", "namespace": "flux-system", "generation": 3},
        "spec": spec, "status": status
    })
}

fn kustomization(spec: Value, status: Value) -> Value {
    flux("kustomize.toolkit.fluxcd.io/v1", "Kustomization", spec, status)
}

fn cond(type_: &str, status: &str, reason: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": format!("{type_} {status}")})
}

#[test]
fn kustomization_ready_is_healthy() {
    let k = kustomization(
        json!({}),
        json!({"observedGeneration": 3, "conditions": [cond("Ready", "True", "ReconciliationSucceeded")]}),
    );
    assert_eq!(assess(&k), Health::new(Healthy, "ReconciliationSucceeded"));
}

#[test]
fn kustomization_reconciling_is_progressing() {
    let k = kustomization(
        json!({}),
        json!({"observedGeneration": 3, "conditions": [
            cond("Reconciling", "True", "Progressing"),
            cond("Ready", "Unknown", "Progressing")
        ]}),
    );
    assert_eq!(assess(&k), Health::new(Progressing, "Progressing"));
}

#[test]
fn kustomization_failed_is_degraded() {
    let k = kustomization(
        json!({}),
        json!({"observedGeneration": 3, "conditions": [cond("Ready", "False", "BuildFailed")]}),
    );
    assert_eq!(assess(&k), Health::new(Degraded, "BuildFailed"));
    // Retrying after a failure (Reconciling True, Ready False) is still Degraded, as upstream.
    let k = kustomization(
        json!({}),
        json!({"observedGeneration": 3, "conditions": [
            cond("Reconciling", "True", "ProgressingWithRetry"), cond("Ready", "False", "HealthCheckFailed")
        ]}),
    );
    assert_eq!(assess(&k).code, Degraded);
    let k = kustomization(json!({}), json!({"conditions": [{"type": "Ready", "status": "False"}]}));
    assert_eq!(assess(&k), Health::new(Degraded, "Not ready"));
}

#[test]
fn stalled_is_degraded() {
    let k = kustomization(
        json!({}),
        json!({"observedGeneration": 3, "conditions": [
            cond("Ready", "Unknown", "Progressing"),
            {"type": "Stalled", "status": "True", "reason": "InvalidPath", "message": "path './apps' not found"}
        ]}),
    );
    assert_eq!(assess(&k), Health::new(Degraded, "path './apps' not found"));
}

#[test]
fn suspended_is_suspended() {
    let k = kustomization(
        json!({"suspend": true}),
        json!({"conditions": [cond("Ready", "False", "BuildFailed")]}),
    );
    assert_eq!(assess(&k), Health::new(Suspended, "Kustomization is suspended"));
    let h = flux(
        "helm.toolkit.fluxcd.io/v2",
        "HelmRelease",
        json!({"suspend": true}),
        json!(null),
    );
    assert_eq!(assess(&h), Health::new(Suspended, "HelmRelease is suspended"));
}

#[test]
fn old_observed_generation_is_progressing() {
    let k = kustomization(
        json!({}),
        json!({"observedGeneration": 2, "conditions": [cond("Ready", "True", "ReconciliationSucceeded")]}),
    );
    assert_eq!(
        assess(&k),
        Health::new(
            Progressing,
            "Waiting for the controller to observe generation 3 (observed 2)"
        )
    );
}

#[test]
fn no_status_is_progressing() {
    assert_eq!(
        assess(&kustomization(json!({}), json!(null))),
        Health::new(Progressing, "Status unknown")
    );
    assert_eq!(
        assess(&kustomization(json!({}), json!({"observedGeneration": -1}))).code,
        Progressing
    );
}

#[test]
fn helm_release_needs_ready_and_released() {
    let hr = |conditions: Value| {
        flux(
            "helm.toolkit.fluxcd.io/v2",
            "HelmRelease",
            json!({"chart": {}}),
            json!({"conditions": conditions}),
        )
    };
    assert_eq!(
        assess(&hr(json!([
            cond("Ready", "True", "InstallSucceeded"),
            cond("Released", "True", "InstallSucceeded")
        ])))
        .code,
        Healthy
    );
    assert_eq!(
        assess(&hr(json!([cond("Ready", "True", "UpgradeSucceeded")]))).code,
        Degraded
    );
    assert_eq!(
        assess(&hr(json!([
            cond("Ready", "False", "InstallFailed"),
            cond("Released", "False", "InstallFailed")
        ]))),
        Health::new(Degraded, "InstallFailed")
    );
    assert_eq!(
        assess(&hr(json!([
            cond("Ready", "Unknown", "Progressing"),
            cond("Reconciling", "True", "Progressing")
        ])))
        .code,
        Progressing
    );
}

#[test]
fn sources_need_ready_and_artifact_in_storage() {
    for kind in [
        "GitRepository",
        "HelmRepository",
        "OCIRepository",
        "Bucket",
        "HelmChart",
    ] {
        let src = |conditions: Value| {
            flux(
                "source.toolkit.fluxcd.io/v1",
                kind,
                json!({"interval": "1m"}),
                json!({"conditions": conditions}),
            )
        };
        let ok = src(json!([
            cond("Ready", "True", "Succeeded"),
            cond("ArtifactInStorage", "True", "Succeeded")
        ]));
        assert_eq!(assess(&ok), Health::new(Healthy, "Succeeded"), "{kind}");
        let outdated = src(json!([
            cond("Ready", "True", "Succeeded"),
            cond("ArtifactOutdated", "True", "NewRevision")
        ]));
        assert_eq!(
            assess(&outdated),
            Health::new(Degraded, "Succeeded NewRevision"),
            "{kind}"
        );
        let failing = src(json!([
            cond("Ready", "False", "GitOperationFailed"),
            cond("FetchFailed", "True", "GitOperationFailed")
        ]));
        assert_eq!(assess(&failing).code, Degraded, "{kind}");
        let working = src(json!([
            cond("Reconciling", "True", "Progressing"),
            cond("Ready", "Unknown", "Progressing")
        ]));
        assert_eq!(assess(&working).code, Progressing, "{kind}");
    }
}

#[test]
fn oci_helm_repository_is_healthy_without_status() {
    let repo = flux(
        "source.toolkit.fluxcd.io/v1",
        "HelmRepository",
        json!({"type": "oci", "url": "oci://registry/charts"}),
        json!(null),
    );
    assert_eq!(assess(&repo).code, Healthy);
}

#[test]
fn image_policy_counts_ready_false_as_in_progress() {
    let ip = |conditions: Value| {
        flux(
            "image.toolkit.fluxcd.io/v1beta2",
            "ImagePolicy",
            json!({"suspend": true}),
            json!({"conditions": conditions}),
        )
    };
    // ImagePolicy has no suspend; its Ready decides.
    assert_eq!(assess(&ip(json!([cond("Ready", "True", "Succeeded")]))).code, Healthy);
    assert_eq!(
        assess(&ip(json!([
            cond("Ready", "False", "Progressing"),
            cond("Reconciling", "True", "NewGeneration")
        ])))
        .code,
        Progressing
    );
    assert_eq!(
        assess(&ip(json!([
            cond("Ready", "False", "Failed"),
            cond("Reconciling", "True", "ProgressingWithRetry")
        ])))
        .code,
        Degraded
    );
    assert_eq!(
        assess(&ip(json!([cond("Ready", "Unknown", "Progressing")]))).code,
        Degraded
    );
}

#[test]
fn malformed_status_is_unknown() {
    assert_eq!(assess(&kustomization(json!({}), json!("Ready"))).code, Unknown);
    assert_eq!(
        assess(&kustomization(json!({}), json!({"conditions": {"Ready": "True"}}))).code,
        Unknown
    );
}

//! Fixture tests of the Crossplane rules: claims, managed and composite resources through their life (no status, creating,
//! ready, failing), configuration kinds, packages and malformed statuses.

use serde_json::{Value, json};

use crate::{Health, HealthCode::*, assess};

/// A claim of a platform's own API group, recognised by shape.
fn claim(status: Value) -> Value {
    json!({
        "apiVersion": "platform.example.org/v1alpha1",
        "kind": "PostgreSQLInstance",
        "metadata": {"name": "orders-db", "namespace": "shop", "generation": 1},
        "spec": {
            "parameters": {"storageGB": 20},
            "compositionRef": {"name": "aws-postgres"},
            "writeConnectionSecretToRef": {"name": "orders-db-conn"}
        },
        "status": status
    })
}

/// A managed resource of a provider group.
fn bucket(status: Value) -> Value {
    json!({
        "apiVersion": "s3.aws.crossplane.io/v1beta1",
        "kind": "Bucket",
        "metadata": {"name": "assets", "generation": 2},
        "spec": {"forProvider": {"region": "eu-west-1"}, "providerConfigRef": {"name": "default"}},
        "status": status
    })
}

fn cond(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": message})
}

#[test]
fn claim_without_status_is_progressing() {
    // Upstream's wildcard check says Healthy here, which would start the next wave before the
    // database exists.
    let mut c = claim(json!(null));
    assert_eq!(assess(&c).code, Progressing);
    c.as_object_mut().map(|o| o.remove("status"));
    assert_eq!(assess(&c).code, Progressing);
    assert_eq!(assess(&claim(json!({}))).code, Progressing);
}

#[test]
fn claim_being_created_is_progressing() {
    let c = claim(json!({"conditions": [
        cond("Synced", "True", "ReconcileSuccess", ""),
        cond("Ready", "False", "Creating", "")
    ]}));
    assert_eq!(assess(&c), Health::new(Progressing, "Provisioning ... (Creating)"));
}

#[test]
fn ready_and_synced_is_healthy() {
    let c = claim(json!({"conditions": [
        cond("Synced", "True", "ReconcileSuccess", ""),
        cond("Ready", "True", "Available", "")
    ]}));
    assert_eq!(assess(&c), Health::new(Healthy, "Resource is up-to-date."));
    let b = bucket(json!({"atProvider": {"arn": "arn:aws:s3:::assets"}, "conditions": [
        cond("Ready", "True", "Available", ""),
        cond("Synced", "True", "ReconcileSuccess", "")
    ]}));
    assert_eq!(assess(&b).code, Healthy);
}

#[test]
fn synced_false_is_degraded_with_message() {
    let b = bucket(json!({"conditions": [
        cond("Synced", "False", "ReconcileError", "cannot create bucket: AccessDenied"),
        cond("Ready", "False", "Creating", "")
    ]}));
    assert_eq!(assess(&b), Health::new(Degraded, "cannot create bucket: AccessDenied"));
    let c = claim(json!({"conditions": [cond("Synced", "False", "ReconcileError", "")]}));
    assert_eq!(assess(&c), Health::new(Degraded, "ReconcileError"));
}

#[test]
fn last_async_operation_false_is_degraded() {
    let b = bucket(json!({"conditions": [
        cond("LastAsyncOperation", "False", "ApplyFailure", "apply failed: quota exceeded"),
        cond("Synced", "True", "", "")
    ]}));
    assert_eq!(assess(&b), Health::new(Degraded, "apply failed: quota exceeded"));
}

#[test]
fn unavailable_managed_resource_is_progressing_as_upstream() {
    let b = bucket(json!({"conditions": [
        cond("Synced", "True", "", ""),
        cond("Ready", "False", "Unavailable", "")
    ]}));
    assert_eq!(assess(&b).code, Progressing);
}

#[test]
fn first_decisive_condition_wins_in_list_order() {
    // Upstream returns at the first Ready True before reaching a later Synced False.
    let b = bucket(json!({"conditions": [
        cond("Ready", "True", "", ""),
        cond("Synced", "False", "", "late failure")
    ]}));
    assert_eq!(assess(&b).code, Healthy);
}

#[test]
fn status_without_conditions_is_provisioning() {
    let b = bucket(json!({"atProvider": {}}));
    assert_eq!(assess(&b), Health::new(Progressing, "Provisioning ..."));
}

#[test]
fn composite_resource_in_v2_shape_is_recognised() {
    let xr = json!({
        "apiVersion": "example.org/v1", "kind": "XNetwork",
        "metadata": {"name": "net", "generation": 1},
        "spec": {"crossplane": {"compositionRef": {"name": "net-aws"}, "resourceRefs": []}}
    });
    assert_eq!(assess(&xr).code, Progressing);
    let xr_v1 = json!({
        "apiVersion": "example.org/v1", "kind": "XNetwork", "metadata": {"name": "net"},
        "spec": {"resourceRefs": [{"apiVersion": "ec2.aws.upbound.io/v1beta1", "kind": "VPC", "name": "net-x"}]},
        "status": {"conditions": [cond("Ready", "True", "Available", "")]}
    });
    assert_eq!(assess(&xr_v1).code, Healthy);
}

#[test]
fn shape_is_not_guessed_in_built_in_groups_or_from_unrelated_fields() {
    // A custom kind without Crossplane's fields keeps the generic rule: Healthy without status.
    let other = json!({
        "apiVersion": "platform.example.org/v1", "kind": "Team", "metadata": {"name": "a"},
        "spec": {"resourceRef": "not-an-object", "providerConfigRef": {"kind": "no name"}}
    });
    assert_eq!(assess(&other).code, Healthy);
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "spec": {"forProvider": {}}});
    assert_eq!(assess(&cm).code, Healthy);
    // A PersistentVolume's claimRef has Crossplane's shape, but the core group is never guessed.
    let pv = json!({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-1"},
        "spec": {"claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "name": "data"}}
    });
    assert_eq!(assess(&pv).code, Healthy);
    // So are the built-in *.k8s.io groups.
    let binding = json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": "va"},
        "spec": {"resourceRef": {"apiVersion": "v1", "kind": "Node"}}
    });
    assert_eq!(assess(&binding).code, Healthy);
}

#[test]
fn configuration_kinds_without_status_are_healthy() {
    for (api_version, kind) in [
        ("apiextensions.crossplane.io/v1", "Composition"),
        ("apiextensions.crossplane.io/v1beta1", "EnvironmentConfig"),
        ("aws.upbound.io/v1beta1", "ProviderConfig"),
        ("pkg.crossplane.io/v1beta1", "DeploymentRuntimeConfig"),
    ] {
        let obj = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}, "spec": {}});
        assert_eq!(assess(&obj), Health::new(Healthy, "Resource is up-to-date."), "{kind}");
        let mut empty = obj.clone();
        empty["status"] = json!({});
        assert_eq!(assess(&empty).code, Healthy, "{kind} with empty status");
    }
}

#[test]
fn provider_config_in_use_is_healthy() {
    let pc = json!({
        "apiVersion": "aws.upbound.io/v1beta1", "kind": "ProviderConfig", "metadata": {"name": "default"},
        "spec": {"credentials": {"source": "IRSA"}}, "status": {"users": 12}
    });
    assert_eq!(assess(&pc), Health::new(Healthy, "Resource is in use."));
}

#[test]
fn xrd_established_and_offered_is_healthy() {
    let xrd = |conditions: Value| {
        json!({
            "apiVersion": "apiextensions.crossplane.io/v1", "kind": "CompositeResourceDefinition",
            "metadata": {"name": "xpostgresqlinstances.platform.example.org"}, "spec": {},
            "status": {"conditions": conditions}
        })
    };
    assert_eq!(
        assess(&xrd(json!([cond(
            "Established",
            "True",
            "WatchingCompositeResource",
            ""
        )])))
        .code,
        Healthy
    );
    assert_eq!(
        assess(&xrd(json!([cond("Established", "False", "", "")]))).code,
        Progressing
    );
}

#[test]
fn upbound_flavour_lets_a_later_failure_win() {
    let mr = |conditions: Value| {
        json!({
            "apiVersion": "rds.aws.upbound.io/v1beta1", "kind": "Instance", "metadata": {"name": "db"},
            "spec": {"forProvider": {"region": "eu-west-1"}}, "status": {"conditions": conditions}
        })
    };
    assert_eq!(
        assess(&mr(json!([
            cond("Ready", "True", "", ""),
            cond("Synced", "False", "", "drifted")
        ]))),
        Health::new(Degraded, "drifted")
    );
    assert_eq!(
        assess(&mr(json!([
            cond("Ready", "True", "", ""),
            cond("Synced", "True", "", "")
        ])))
        .code,
        Healthy
    );
    // Only Ready counts for upbound.io groups.
    assert_eq!(assess(&mr(json!([cond("Healthy", "True", "", "")]))).code, Progressing);
}

#[test]
fn malformed_status_is_unknown() {
    assert_eq!(assess(&claim(json!("Ready"))).code, Unknown);
    assert_eq!(assess(&claim(json!({"conditions": {"type": "Ready"}}))).code, Unknown);
    // Junk entries in the list are skipped.
    let c = claim(json!({"conditions": [7, "x", {"status": "True"}, cond("Ready", "True", "", "")]}));
    assert_eq!(assess(&c).code, Healthy);
}

fn package(kind: &str, status: Value) -> Value {
    json!({
        "apiVersion": "pkg.crossplane.io/v1", "kind": kind,
        "metadata": {"name": "provider-aws-s3"},
        "spec": {"package": "xpkg.example/provider-aws-s3:v1.0.0"},
        "status": status
    })
}

#[test]
fn packages_need_installed_and_healthy() {
    let good = json!({"conditions": [
        cond("Installed", "True", "ActivePackageRevision", ""),
        cond("Healthy", "True", "HealthyPackageRevision", "")
    ]});
    for kind in ["Provider", "Function", "Configuration"] {
        assert_eq!(
            assess(&package(kind, good.clone())),
            Health::new(Healthy, "ActivePackageRevision HealthyPackageRevision"),
            "{kind}"
        );
    }
    let unhealthy = json!({"conditions": [
        cond("Installed", "True", "ActivePackageRevision", ""),
        cond("Healthy", "False", "UnhealthyPackageRevision", "")
    ]});
    assert_eq!(
        assess(&package("Provider", unhealthy)),
        Health::new(Degraded, "ActivePackageRevision UnhealthyPackageRevision")
    );
    let unpacking = json!({"conditions": [cond("Installed", "False", "UnpackingPackage", "")]});
    assert_eq!(assess(&package("Function", unpacking)).code, Degraded);
}

#[test]
fn packages_without_status_are_progressing() {
    assert_eq!(
        assess(&package("Provider", json!(null))),
        Health::new(Progressing, "Waiting for provider to be installed")
    );
    assert_eq!(
        assess(&package("Configuration", json!({}))),
        Health::new(Progressing, "Waiting for Configuration")
    );
    assert_eq!(
        assess(&package("Function", json!({"currentRevision": "x"}))).code,
        Progressing
    );
}

#[test]
fn package_revisions_follow_healthy() {
    for kind in ["ProviderRevision", "FunctionRevision", "ConfigurationRevision"] {
        let ok = package(
            kind,
            json!({"conditions": [cond("Healthy", "True", "HealthyPackageRevision", "")]}),
        );
        assert_eq!(assess(&ok), Health::new(Healthy, "HealthyPackageRevision"), "{kind}");
        let bad = package(
            kind,
            json!({"conditions": [cond("Healthy", "Unknown", "UnknownPackageRevisionHealth", "")]}),
        );
        assert_eq!(assess(&bad).code, Degraded, "{kind}");
        assert_eq!(assess(&package(kind, json!(null))).code, Progressing, "{kind}");
    }
}

#[test]
fn package_malformed_is_unknown() {
    assert_eq!(assess(&package("Provider", json!([1]))).code, Unknown);
    assert_eq!(
        assess(&package("ProviderRevision", json!({"conditions": 3}))).code,
        Unknown
    );
}

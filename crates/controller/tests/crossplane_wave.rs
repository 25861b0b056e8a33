//! End to end: a sync wave waits for a Crossplane-style claim. The claim (its CRD installed by the
//! test, with a status subresource, as Crossplane's XRDs make them) is in wave 0 and a ConfigMap that
//! needs the database in wave 1. The claim without status, then "creating" (`Synced=True`,
//! `Ready=False`, reason `Creating`), keeps the operation waiting with the claim named in its
//! message; once the test marks it Ready the next wave is applied and the operation succeeds.

mod support;

use std::time::Duration;

use kube::api::{Patch, PatchParams};
use serde_json::json;
use support::*;

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: postgresqlinstances.wave.test.capstan.dev}
spec:
  group: wave.test.capstan.dev
  scope: Namespaced
  names: {plural: postgresqlinstances, singular: postgresqlinstance, kind: PostgreSQLInstance}
  versions:
    - name: v1alpha1
      served: true
      storage: true
      subresources: {status: {}}
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
"#;

const CLAIM: &str = r#"apiVersion: wave.test.capstan.dev/v1alpha1
kind: PostgreSQLInstance
metadata:
  name: orders-db
  annotations: {capstan.dev/sync-wave: "0"}
spec:
  parameters: {storageGB: 20}
  compositionSelector: {matchLabels: {provider: local}}
  writeConnectionSecretToRef: {name: orders-db-conn}
"#;

const CONSUMER: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: orders-config, annotations: {capstan.dev/sync-wave: '1'}}\ndata: {database: orders-db}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_next_wave_waits_until_the_claim_is_ready() -> anyhow::Result<()> {
    let env = Env::shared_with(Duration::from_secs(300)).await?;
    env.git.create_repo("claims")?;
    env.git.commit(
        "claims",
        "main",
        &[
            ("app/crd.yaml", Some(CRD)),
            ("app/claim.yaml", Some(CLAIM)),
            ("app/consumer.yaml", Some(CONSUMER)),
        ],
        "a database claim and its consumer",
    )?;
    let dest = "claims";
    env.create_app(app("claims", &env.git.git_url("claims"), "app", dest, true))
        .await?;
    let claims = env.api(
        "wave.test.capstan.dev/v1alpha1",
        "PostgreSQLInstance",
        "postgresqlinstances",
        Some(dest),
    );
    let (v, k, p) = CM_API;

    // Without status: the operation waits on the claim (its message names it) and wave 1 is not applied.
    let waiting = env
        .wait_app(
            "claims",
            "operation waiting on the claim",
            Duration::from_secs(90),
            |a| op_phase(a) == "Running" && op_message(a).contains("orders-db"),
        )
        .await?;
    assert!(
        op_message(&waiting).contains("PostgreSQLInstance"),
        "{}",
        op_message(&waiting)
    );
    assert!(
        env.get(v, k, p, dest, "orders-config").await?.is_none(),
        "wave 1 applied before the claim is ready"
    );

    // Creating: still waiting, now with Crossplane's words.
    claims
        .patch_status(
            "orders-db",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [
                {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"},
                {"type": "Ready", "status": "False", "reason": "Creating"}
            ]}})),
        )
        .await?;
    let creating = env
        .wait_app(
            "claims",
            "operation waiting on a creating claim",
            Duration::from_secs(60),
            |a| {
                op_phase(a) == "Running"
                    && op_message(a).contains("orders-db")
                    && op_message(a).to_lowercase().contains("creat")
            },
        )
        .await?;
    assert!(
        env.get(v, k, p, dest, "orders-config").await?.is_none(),
        "{}",
        op_message(&creating)
    );

    // Ready: the next wave goes and the operation succeeds.
    claims
        .patch_status(
            "orders-db",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [
                {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"},
                {"type": "Ready", "status": "True", "reason": "Available"}
            ]}})),
        )
        .await?;
    env.wait_app(
        "claims",
        "synced after the claim is ready",
        Duration::from_secs(90),
        |a| op_phase(a) == "Succeeded" && synced_healthy(a),
    )
    .await?;
    assert!(env.get(v, k, p, dest, "orders-config").await?.is_some());
    Ok(())
}

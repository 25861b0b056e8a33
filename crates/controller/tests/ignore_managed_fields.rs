//! End to end: `ignoreDifferences[].managedFieldsManagers`. A Deployment's `spec.replicas` changed by
//! another field manager (as an HPA, `kube-controller-manager`, does) is ignored: the Application
//! stays Synced and self-heal leaves it, while a field changed by any other manager is still put back.

mod support;

use std::time::Duration;

use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fields_owned_by_an_ignored_manager_are_not_fought() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("hpa")?;
    let deployment = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  minReadySeconds: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: x}]}
"#;
    env.git
        .commit("hpa", "main", &[("app/web.yaml", Some(deployment))], "web")?;
    let mut manifest = app("hpa", &env.git.git_url("hpa"), "app", "hpa", true);
    manifest["spec"]["ignoreDifferences"] = json!([
        {"group": "apps", "kind": "Deployment", "managedFieldsManagers": ["kube-controller-manager"]}
    ]);
    env.create_app(manifest).await?;
    env.wait_app("hpa", "first sync", Duration::from_secs(90), synced_healthy)
        .await?;

    let (v, k, p) = DEPLOY_API;
    let deployments = env.api(v, k, p, Some("hpa"));
    // The "HPA" scales the Deployment (an update by its field manager) ...
    let scale = PatchParams {
        field_manager: Some("kube-controller-manager".into()),
        ..Default::default()
    };
    deployments
        .patch("web", &scale, &Patch::Merge(json!({"spec": {"replicas": 5}})))
        .await?;
    // ... and someone else changes a field Git sets.
    let intruder = PatchParams {
        field_manager: Some("intruder".into()),
        ..Default::default()
    };
    deployments
        .patch("web", &intruder, &Patch::Merge(json!({"spec": {"minReadySeconds": 9}})))
        .await?;

    // Self-heal puts the intruder's change back: the positive signal that it looked at the object.
    eventually(
        "self-heal reverted minReadySeconds",
        Duration::from_secs(60),
        || async {
            let live = serde_json::to_value(deployments.get("web").await?)?;
            Ok(live.pointer("/spec/minReadySeconds") == Some(&json!(1)))
        },
    )
    .await?;
    let synced = env
        .wait_app("hpa", "Synced again", Duration::from_secs(60), |a| {
            sync_of(a) == "Synced"
        })
        .await?;
    assert_eq!(condition(&synced, "InvalidSpecError"), None);
    let live = serde_json::to_value(deployments.get("web").await?)?;
    assert_eq!(
        live.pointer("/spec/replicas"),
        Some(&json!(5)),
        "the replicas owned by the ignored manager were not fought"
    );
    // A refresh the controller handled still finds it Synced, replicas left alone.
    let after = env.refresh_and_wait("hpa").await?;
    assert_eq!(sync_of(&after), "Synced");
    let live: Value = serde_json::to_value(deployments.get("web").await?)?;
    assert_eq!(live.pointer("/spec/replicas"), Some(&json!(5)));
    Ok(())
}

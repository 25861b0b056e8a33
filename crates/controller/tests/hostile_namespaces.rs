//! Hostile Applications against namespaces, end to end: a project that may manage Namespaces still
//! cannot adopt (and later prune) the cluster's own namespaces, and `CreateNamespace=true` given in a
//! sync request is held to the project's rules like the same option in the spec.

mod support;

use std::time::Duration;

use serde_json::json;
use support::*;

/// A Namespace object taking over kube-system, and a harmless ConfigMap beside it.
const TAKEOVER: &str = r#"apiVersion: v1
kind: Namespace
metadata:
  name: kube-system
  labels: {owner: team-a}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {a: b}
"#;

async fn project(env: &Env, name: &str, cluster_kinds: serde_json::Value) -> anyhow::Result<()> {
    let spec = json!({
        "sourceRepos": ["*"],
        "destinations": [{"server": "*", "namespace": "*"}],
        "clusterResourceWhitelist": cluster_kinds,
    });
    env.apply_project(name, spec).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_project_allowing_namespaces_cannot_adopt_kube_system() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    project(&env, "team-a", json!([{"group": "", "kind": "Namespace"}])).await?;
    env.git.create_repo("takeover")?;
    env.git.commit(
        "takeover",
        "main",
        &[("app/all.yaml", Some(TAKEOVER))],
        "adopt kube-system",
    )?;
    let mut application = app("takeover", &env.git.git_url("takeover"), "app", "team-a-apps", true);
    application["spec"]["project"] = json!("team-a");
    env.create_app(application).await?;
    let refused = env
        .wait_app("takeover", "the sync is refused", Duration::from_secs(60), |a| {
            op_phase(a) == "Failed"
        })
        .await?;
    let message = op_message(&refused);
    assert!(
        message.contains("Namespace/kube-system is protected"),
        "the refusal names the namespace: {message}"
    );
    // Nothing was applied: kube-system keeps its labels, the ConfigMap and namespace do not exist.
    let namespaces = env.api("v1", "Namespace", "namespaces", None);
    let kube_system = namespaces.get("kube-system").await?;
    assert!(
        !kube_system.metadata.labels.unwrap_or_default().contains_key("owner"),
        "kube-system was not adopted"
    );
    assert!(
        !kube_system
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("capstan.dev/tracking-id"),
        "kube-system is not tracked"
    );
    assert!(namespaces.get_opt("team-a-apps").await?.is_none());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn create_namespace_in_a_sync_request_is_held_to_the_project() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    // No cluster-scoped kind at all: creating a namespace is not permitted.
    project(&env, "team-b", json!([])).await?;
    env.git.create_repo("plain")?;
    env.git.commit(
        "plain",
        "main",
        &[(
            "app/cm.yaml",
            Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {a: b}\n"),
        )],
        "v1",
    )?;
    let mut application = app("plain", &env.git.git_url("plain"), "app", "team-b-new", false);
    application["spec"]["project"] = json!("team-b");
    // The spec does not ask for the namespace; the request below does.
    application["spec"]["syncPolicy"] = json!({});
    env.create_app(application).await?;
    env.wait_app("plain", "OutOfSync", Duration::from_secs(60), |a| {
        sync_of(a) == "OutOfSync"
    })
    .await?;
    env.request(
        "plain",
        json!({"sync": {"syncOptions": ["CreateNamespace=true"]}, "initiatedBy": "test", "id": "ns"}),
    )
    .await?;
    let refused = env
        .wait_app("plain", "the sync is refused", Duration::from_secs(60), |a| {
            op_phase(a) == "Failed"
        })
        .await?;
    let message = op_message(&refused);
    assert!(
        message.contains("Namespace") && message.contains("CreateNamespace=true"),
        "the refusal names the rule: {message}"
    );
    let namespaces = env.api("v1", "Namespace", "namespaces", None);
    assert!(
        namespaces.get_opt("team-b-new").await?.is_none(),
        "no namespace was created"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn create_namespace_in_any_spelling_of_the_spec_is_held_to_the_project() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    project(&env, "team-c", json!([])).await?;
    env.git.create_repo("plain")?;
    env.git.commit(
        "plain",
        "main",
        &[(
            "app/cm.yaml",
            Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {a: b}\n"),
        )],
        "v1",
    )?;
    let mut application = app("plain", &env.git.git_url("plain"), "app", "team-c-new", true);
    application["spec"]["project"] = json!("team-c");
    // Lower case, inside a comma-separated list: the sync would read it as CreateNamespace=true.
    application["spec"]["syncPolicy"]["syncOptions"] = json!(["PruneLast=true,createNamespace=true"]);
    env.create_app(application).await?;
    let refused = env
        .wait_app("plain", "the sync is refused", Duration::from_secs(60), |a| {
            op_phase(a) == "Failed"
        })
        .await?;
    let message = op_message(&refused);
    assert!(message.contains("CreateNamespace=true"), "{message}");
    let namespaces = env.api("v1", "Namespace", "namespaces", None);
    assert!(
        namespaces.get_opt("team-c-new").await?.is_none(),
        "no namespace was created"
    );
    Ok(())
}

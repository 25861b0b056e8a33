//! End to end: a hook with `hook-delete-policy: BeforeHookCreation` replaces only the previous run of
//! itself (an object tracked by its own Application). An object of the same name that Capstan does not
//! track for this Application is left exactly as it is (same uid) and the sync fails, naming it.

mod support;

use std::time::Duration;

use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::*;

const TRACKING: &str = "/metadata/annotations/capstan.dev~1tracking-id";

fn uid(obj: &Value) -> String {
    obj.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

async fn create_namespace(env: &Env, name: &str) -> anyhow::Result<()> {
    env.api("v1", "Namespace", "namespaces", None)
        .patch(
            name,
            &PatchParams::apply("test").force(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})),
        )
        .await?;
    Ok(())
}

/// Create an object the way someone other than Capstan would: no tracking label or annotation.
async fn create_untracked(env: &Env, (v, k, p): (&str, &str, &str), ns: &str, obj: Value) -> anyhow::Result<Value> {
    let obj = serde_json::from_value(obj)?;
    let created = env.api(v, k, p, Some(ns)).create(&PostParams::default(), &obj).await?;
    let created = serde_json::to_value(created)?;
    assert!(!uid(&created).is_empty());
    assert_eq!(created.pointer(TRACKING), None);
    Ok(created)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn before_hook_creation_leaves_an_untracked_job_alone() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    create_namespace(&env, "hooksafe").await?;
    // Someone's Job that happens to have the hook's name.
    let theirs = create_untracked(
        &env,
        JOB_API,
        "hooksafe",
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "migrate", "labels": {"owner": "someone-else"}},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "theirs"}]}}}
        }),
    )
    .await?;

    env.git.create_repo("hooksafe")?;
    let manifests = r#"
apiVersion: batch/v1
kind: Job
metadata:
  name: migrate
  annotations: {capstan.dev/hook: PreSync, capstan.dev/hook-delete-policy: BeforeHookCreation}
spec: {template: {spec: {restartPolicy: Never, containers: [{name: c, image: ours}]}}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {a: b}
"#;
    env.git
        .commit("hooksafe", "main", &[("app/all.yaml", Some(manifests))], "hooks")?;
    env.create_app(app("hooksafe", &env.git.git_url("hooksafe"), "app", "hooksafe", true))
        .await?;

    let failed = env
        .wait_app("hooksafe", "operation failed", Duration::from_secs(90), |a| {
            op_phase(a) == "Failed"
        })
        .await?;
    let message = op_message(&failed);
    assert!(
        message.contains("Job/migrate exists and is not managed by this Application; refusing to replace it"),
        "{message}"
    );

    // The controller looked again after the failure (a refresh it handled), then check the Job is
    // the very same object, untouched.
    env.refresh_and_wait("hooksafe").await?;
    let (v, k, p) = JOB_API;
    let live = env
        .get(v, k, p, "hooksafe", "migrate")
        .await?
        .expect("the untracked Job still exists");
    assert_eq!(uid(&live), uid(&theirs), "the untracked Job was replaced");
    assert_eq!(live.pointer(TRACKING), None, "the untracked Job was taken over");
    assert_eq!(
        live.pointer("/spec/template/spec/containers/0/image"),
        Some(&json!("theirs"))
    );
    assert_eq!(live.pointer("/metadata/deletionTimestamp"), None);
    let (v, k, p) = CM_API;
    assert!(
        env.get(v, k, p, "hooksafe", "settings").await?.is_none(),
        "nothing after the refused PreSync hook is applied"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn before_hook_creation_replaces_its_own_hook_but_not_an_untracked_configmap() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("hookcm")?;
    let manifests = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: prep
  annotations: {capstan.dev/hook: PreSync, capstan.dev/hook-delete-policy: BeforeHookCreation}
data: {step: prepare}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {a: b}
"#;
    env.git
        .commit("hookcm", "main", &[("app/all.yaml", Some(manifests))], "hooks")?;
    env.create_app(app("hookcm", &env.git.git_url("hookcm"), "app", "hookcm", false))
        .await?;
    env.wait_app("hookcm", "OutOfSync", Duration::from_secs(30), |a| {
        sync_of(a) == "OutOfSync"
    })
    .await?;
    let (v, k, p) = CM_API;

    // First sync: the hook is created, tracked by this Application.
    env.request("hookcm", json!({"sync": {}, "initiatedBy": "first"}))
        .await?;
    env.wait_app("hookcm", "first sync", Duration::from_secs(90), |a| {
        op_phase(a) == "Succeeded" && a.status.as_ref().is_some_and(|s| s.history.len() == 1)
    })
    .await?;
    let first = env.get(v, k, p, "hookcm", "prep").await?.expect("hook created");
    assert_eq!(first.pointer(TRACKING), Some(&json!(format!("{}/hookcm", env.ns))));

    // Second sync: the previous run is ours, so BeforeHookCreation deletes and re-creates it.
    env.request("hookcm", json!({"sync": {}, "initiatedBy": "second"}))
        .await?;
    env.wait_app("hookcm", "second sync", Duration::from_secs(90), |a| {
        op_phase(a) == "Succeeded" && a.status.as_ref().is_some_and(|s| s.history.len() == 2)
    })
    .await?;
    let second = env.get(v, k, p, "hookcm", "prep").await?.expect("hook re-created");
    assert_ne!(uid(&second), uid(&first), "the tracked previous hook was replaced");
    assert_eq!(second.pointer(TRACKING), Some(&json!(format!("{}/hookcm", env.ns))));

    // Someone else's ConfigMap now has the hook's name: the third sync must not delete it.
    env.api(v, k, p, Some("hookcm"))
        .delete("prep", &Default::default())
        .await?;
    eventually("hook deleted", Duration::from_secs(30), || async {
        Ok(env.get(v, k, p, "hookcm", "prep").await?.is_none())
    })
    .await?;
    let theirs = create_untracked(
        &env,
        CM_API,
        "hookcm",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "prep"}, "data": {"owner": "someone-else"}}),
    )
    .await?;
    env.request("hookcm", json!({"sync": {}, "initiatedBy": "third"}))
        .await?;
    let failed = env
        .wait_app("hookcm", "third sync refused", Duration::from_secs(90), |a| {
            op_phase(a) == "Failed"
        })
        .await?;
    let message = op_message(&failed);
    assert!(
        message.contains("ConfigMap/prep exists and is not managed by this Application; refusing to replace it"),
        "{message}"
    );
    env.refresh_and_wait("hookcm").await?;
    let live = env
        .get(v, k, p, "hookcm", "prep")
        .await?
        .expect("the untracked ConfigMap still exists");
    assert_eq!(uid(&live), uid(&theirs), "the untracked ConfigMap was replaced");
    assert_eq!(live.pointer("/data"), Some(&json!({"owner": "someone-else"})));
    assert_eq!(live.pointer(TRACKING), None);
    Ok(())
}

//! End to end: a CRD and its custom resources in one sync, a failing hook that stops the sync and
//! runs SyncFail hooks, and an app-of-apps whose waves order whole Applications.

mod support;

use std::time::Duration;

use capstan_api::status::ResultCode;
use serde_json::json;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crd_and_its_custom_resources_sync_together() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("crd")?;
    let crd = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Widget, plural: widgets, singular: widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"#;
    let widget = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: gear}\nspec: {teeth: 12}\n";
    env.git.commit(
        "crd",
        "main",
        &[("app/crd.yaml", Some(crd)), ("app/widget.yaml", Some(widget))],
        "crd",
    )?;
    env.create_app(app("crd", &env.git.git_url("crd"), "app", "widgets", true))
        .await?;
    let app = env
        .wait_app("crd", "Synced and Healthy", Duration::from_secs(90), synced_healthy)
        .await?;
    let kinds: Vec<String> = app
        .status
        .unwrap_or_default()
        .resources
        .iter()
        .map(|r| r.kind.clone())
        .collect();
    assert!(
        kinds.contains(&"Widget".to_string()) && kinds.contains(&"CustomResourceDefinition".to_string()),
        "{kinds:?}"
    );
    let gear = env
        .get("example.com/v1", "Widget", "widgets", "widgets", "gear")
        .await?
        .expect("custom resource created");
    assert_eq!(gear.pointer("/spec/teeth"), Some(&json!(12)));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_hook_stops_the_sync_and_runs_sync_fail_hooks() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("hookfail")?;
    let manifests = r#"
apiVersion: batch/v1
kind: Job
metadata: {name: migrate, annotations: {capstan.dev/hook: PreSync}}
spec:
  backoffLimit: 0
  template:
    metadata: {annotations: {capstan.dev/simulate: fail}}
    spec: {restartPolicy: Never, containers: [{name: c, image: x}]}
---
apiVersion: batch/v1
kind: Job
metadata: {generateName: notify-, annotations: {capstan.dev/hook: SyncFail}}
spec: {template: {spec: {restartPolicy: Never, containers: [{name: c, image: x}]}}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {a: b}
"#;
    env.git
        .commit("hookfail", "main", &[("app/all.yaml", Some(manifests))], "hooks")?;
    env.create_app(app("hookfail", &env.git.git_url("hookfail"), "app", "hookfail", true))
        .await?;
    let failed = env
        .wait_app("hookfail", "operation failed", Duration::from_secs(90), |a| {
            op_phase(a) == "Failed"
        })
        .await?;
    let message = op_message(&failed);
    assert!(message.contains("migrate") && message.contains("failed"), "{message}");
    let (v, k, p) = CM_API;
    assert!(
        env.get(v, k, p, "hookfail", "settings").await?.is_none(),
        "nothing after a failed PreSync hook is applied"
    );
    let (v, k, p) = JOB_API;
    let jobs = env.api(v, k, p, Some("hookfail")).list(&Default::default()).await?;
    let notify = jobs
        .items
        .iter()
        .find(|j| j.metadata.name.as_deref().is_some_and(|n| n.starts_with("notify-")));
    assert!(
        notify.is_some(),
        "the SyncFail hook ran (generateName): {:?}",
        jobs.items.iter().map(|j| j.metadata.name.clone()).collect::<Vec<_>>()
    );
    let results = failed
        .status
        .and_then(|s| s.operation_state)
        .map(|o| o.resources)
        .unwrap_or_default();
    assert!(
        results
            .iter()
            .any(|r| r.sync_phase == "SyncFail" && r.status == ResultCode::Synced),
        "{results:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn app_of_apps_waves_order_whole_applications() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("fleet")?;
    let url = env.git.git_url("fleet");
    let ns = &env.ns;
    let child = |name: &str, wave: i32, path: &str| {
        format!(
            "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata: {{name: {name}, namespace: {ns}, annotations: {{capstan.dev/sync-wave: \"{wave}\"}}}}\nspec:\n  source: {{repoURL: '{url}', targetRevision: main, path: {path}}}\n  destination: {{server: 'https://kubernetes.default.svc', namespace: {name}}}\n  syncPolicy: {{automated: {{prune: true, selfHeal: true}}, syncOptions: [CreateNamespace=true]}}\n"
        )
    };
    let slow = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: db}\nspec:\n  selector: {matchLabels: {app: db}}\n  template:\n    metadata: {labels: {app: db}, annotations: {capstan.dev/simulate: \"delay=5\"}}\n    spec: {containers: [{name: c, image: x}]}\n";
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: frontend}\ndata: {a: b}\n";
    env.git.commit(
        "fleet",
        "main",
        &[
            ("root/database.yaml", Some(&child("database", 0, "database"))),
            ("root/frontend.yaml", Some(&child("frontend", 1, "frontend"))),
            ("database/db.yaml", Some(slow)),
            ("frontend/cm.yaml", Some(cm)),
        ],
        "apps",
    )?;
    env.create_app(app("root", &url, "root", &env.ns, true)).await?;

    // While the database Application is not yet Healthy, the frontend Application does not exist.
    env.wait_app("database", "child of wave 0 created", Duration::from_secs(60), |_| true)
        .await?;
    loop {
        let db = env.app("database").await?;
        if synced_healthy(&db) {
            break;
        }
        assert!(
            env.apps.get_opt("frontend").await?.is_none(),
            "wave 1 Application created before wave 0 was Healthy"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    env.wait_app(
        "frontend",
        "wave 1 child Healthy",
        Duration::from_secs(60),
        synced_healthy,
    )
    .await?;
    env.wait_app(
        "root",
        "root Synced and Healthy",
        Duration::from_secs(60),
        synced_healthy,
    )
    .await?;
    let (v, k, p) = CM_API;
    assert!(env.get(v, k, p, "frontend", "frontend").await?.is_some());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn new_commits_arrive_by_polling_alone() -> anyhow::Result<()> {
    let env = Env::shared_full(Duration::from_secs(120), Duration::from_secs(3)).await?;
    env.git.create_repo("polled")?;
    let cm = |v: &str| format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: polled}}\ndata: {{v: \"{v}\"}}\n");
    env.git
        .commit("polled", "main", &[("app/cm.yaml", Some(&cm("1")))], "one")?;
    for name in ["polled-a", "polled-b"] {
        env.create_app(app(name, &env.git.git_url("polled"), "app", name, true))
            .await?;
    }
    for name in ["polled-a", "polled-b"] {
        env.wait_app(name, "first sync", Duration::from_secs(60), synced_healthy)
            .await?;
    }
    let two = env
        .git
        .commit("polled", "main", &[("app/cm.yaml", Some(&cm("2")))], "two")?;
    for name in ["polled-a", "polled-b"] {
        env.wait_app(
            name,
            "the new commit, without a refresh",
            Duration::from_secs(30),
            |a| {
                synced_healthy(a)
                    && a.status
                        .as_ref()
                        .and_then(|s| s.sync.as_ref())
                        .is_some_and(|s| s.revision == two)
            },
        )
        .await?;
        let (v, k, p) = CM_API;
        let live = env.get(v, k, p, name, "polled").await?.expect("configmap");
        assert_eq!(live.pointer("/data/v"), Some(&json!("2")));
    }
    Ok(())
}

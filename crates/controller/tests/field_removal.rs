//! End to end: a field removed from Git is drift. Capstan owns, through server-side apply, every
//! field it set; when Git stops setting one (a ConfigMap key, a container's env var or port), the
//! Application is OutOfSync and a sync removes the field, while fields other managers set and the
//! API server's defaults stay and never count as drift — against a real control plane, with the
//! controller running in-process.

mod support;

use std::time::Duration;

use capstan_api::Application;
use capstan_api::application::OperationState;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use support::*;

fn settings(data: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings}}\ndata: {data}\n")
}

fn ignored(data: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: ignored}}\ndata: {data}\n")
}

/// A Deployment with the given container env and ports (YAML flow sequences). Ports name no
/// protocol: the API server's default is part of the key of a port.
fn deployment(env: &str, ports: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: web}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers:
      - name: web
        image: nginx
        env: {env}
        ports: {ports}
"#
    )
}

fn op_state(app: &Application) -> OperationState {
    app.status
        .as_ref()
        .and_then(|s| s.operation_state.clone())
        .unwrap_or_default()
}

fn revision_of(app: &Application) -> String {
    app.status
        .as_ref()
        .and_then(|s| s.sync.as_ref())
        .map(|s| s.revision.clone())
        .unwrap_or_default()
}

/// The sync status the Application reports for its object `kind`/`name`.
fn resource_sync(app: &Application, kind: &str, name: &str) -> String {
    app.status
        .as_ref()
        .and_then(|s| s.resources.iter().find(|r| r.kind == kind && r.name == name))
        .map(|r| r.status.to_string())
        .unwrap_or_default()
}

/// Request a sync under request id `id` and wait until the operation it started has finished.
async fn sync_and_wait(env: &Env, app: &str, id: &str) -> anyhow::Result<Application> {
    env.request(app, json!({"sync": {}, "initiatedBy": "test", "id": id}))
        .await?;
    env.wait_app(app, &format!("operation {id} finished"), Duration::from_secs(60), |a| {
        op_state(a).operation.is_some_and(|o| o.id == id) && matches!(op_phase(a).as_str(), "Succeeded" | "Failed")
    })
    .await
}

/// Refresh and wait until that refresh has been handled (a new `reconciledAt`).
async fn refresh_and_wait(env: &Env, app: &str) -> anyhow::Result<Application> {
    let reconciled = |a: &Application| a.status.as_ref().and_then(|s| s.reconciled_at.clone());
    let before = reconciled(&env.app(app).await?);
    env.refresh(app).await?;
    env.wait_app(app, "refresh handled", Duration::from_secs(30), |a| {
        reconciled(a).is_some_and(|t| Some(t) != before)
    })
    .await
}

fn text(obj: &Value, pointer: &str) -> String {
    obj.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// What says whether an object was written: its resourceVersion, and for a Deployment (whose
/// status the controller manager keeps writing) its generation and Capstan's apply record.
fn written_state(obj: &Value) -> Value {
    let capstan_apply = obj
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .and_then(|entries| {
            entries
                .iter()
                .find(|e| e["manager"] == "capstan" && e["operation"] == "Apply")
                .cloned()
        });
    if obj["kind"] == "Deployment" {
        json!([obj.pointer("/metadata/generation"), capstan_apply])
    } else {
        json!([obj.pointer("/metadata/resourceVersion"), capstan_apply])
    }
}

struct Objects<'a> {
    env: &'a Env,
    ns: &'a str,
}

impl Objects<'_> {
    async fn get(&self, kind: &str, name: &str) -> anyhow::Result<Value> {
        let (v, k, p) = if kind == "Deployment" { DEPLOY_API } else { CM_API };
        self.env
            .get(v, k, p, self.ns, name)
            .await?
            .ok_or_else(|| anyhow::anyhow!("{kind} {}/{name} does not exist", self.ns))
    }

    /// The written state of every object of the test.
    async fn written(&self) -> anyhow::Result<Value> {
        Ok(json!([
            written_state(&self.get("ConfigMap", "settings").await?),
            written_state(&self.get("ConfigMap", "ignored").await?),
            written_state(&self.get("Deployment", "web").await?),
        ]))
    }

    /// Someone else (field manager `someone-else`) adds an annotation to `kind`/`name`.
    async fn annotate(&self, kind: &str, name: &str) -> anyhow::Result<()> {
        let (v, k, p) = if kind == "Deployment" { DEPLOY_API } else { CM_API };
        let pp = PatchParams {
            field_manager: Some("someone-else".into()),
            ..Default::default()
        };
        let patch = json!({"metadata": {"annotations": {"example.com/owner": "team-a"}}});
        self.env
            .api(v, k, p, Some(self.ns))
            .patch(name, &pp, &Patch::Merge(patch))
            .await?;
        Ok(())
    }
}

/// The container `web` of Deployment `obj`.
fn container(obj: &Value) -> Value {
    obj.pointer("/spec/template/spec/containers/0")
        .cloned()
        .unwrap_or_default()
}

/// Sync with nothing to do: no object is written.
async fn resync_writes_nothing(env: &Env, app: &str, id: &str, objects: &Objects<'_>) -> anyhow::Result<()> {
    let before = objects.written().await?;
    let synced = refresh_and_wait(env, app).await?;
    assert_eq!(sync_of(&synced), "Synced", "{app}: {:?}", synced.status);
    let resync = sync_and_wait(env, app, id).await?;
    let op = op_state(&resync);
    assert_eq!(op.phase, "Succeeded", "{}", op.message);
    assert!(op.message.contains("(0 applied, 3 unchanged"), "{app}: {}", op.message);
    assert_eq!(
        objects.written().await?,
        before,
        "{app}: a sync with nothing to do wrote an object"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_field_removed_from_git_is_drift_and_a_sync_removes_it() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("removal")?;
    let one = env.git.commit(
        "removal",
        "main",
        &[
            ("app/settings.yaml", Some(&settings("{a: \"1\", b: \"2\"}"))),
            ("app/ignored.yaml", Some(&ignored("{keep: \"1\", c: \"3\"}"))),
            (
                "app/web.yaml",
                Some(&deployment(
                    "[{name: MODE, value: fast}, {name: DEBUG, value: \"1\"}]",
                    "[{containerPort: 80}, {containerPort: 9090, name: metrics}]",
                )),
            ),
        ],
        "v1",
    )?;
    let url = env.git.git_url("removal");
    // `auto` syncs itself (with self-heal); `manual` is synced on request, so its OutOfSync state
    // can be watched, and ignores `/data/c` of ConfigMap `ignored`.
    env.create_app(app("auto", &url, "app", "auto-ns", true)).await?;
    let mut manual = app("manual", &url, "app", "manual-ns", false);
    manual["spec"]["ignoreDifferences"] =
        json!([{"kind": "ConfigMap", "name": "ignored", "jsonPointers": ["/data/c"]}]);
    env.create_app(manual).await?;
    let auto_objects = Objects {
        env: &env,
        ns: "auto-ns",
    };
    let manual_objects = Objects {
        env: &env,
        ns: "manual-ns",
    };

    env.wait_app("auto", "v1 synced automatically", Duration::from_secs(90), |a| {
        synced_healthy(a) && op_state(a).revision == one && op_state(a).phase == "Succeeded"
    })
    .await?;
    let first = sync_and_wait(&env, "manual", "manual-1").await?;
    assert_eq!(op_phase(&first), "Succeeded", "{}", op_message(&first));
    env.wait_app(
        "manual",
        "v1 Synced and Healthy",
        Duration::from_secs(90),
        synced_healthy,
    )
    .await?;
    for objects in [&auto_objects, &manual_objects] {
        let cm = objects.get("ConfigMap", "settings").await?;
        assert_eq!(cm["data"], json!({"a": "1", "b": "2"}));
        // Another manager's change to a tracked object: no drift of Capstan's.
        objects.annotate("ConfigMap", "settings").await?;
        objects.annotate("Deployment", "web").await?;
    }

    // Nothing removed: comparisons (from the watch cache, which now keeps Capstan's field
    // ownership, and from the API server) find nothing to do, defaults and others' fields included.
    resync_writes_nothing(&env, "auto", "auto-resync-1", &auto_objects).await?;
    resync_writes_nothing(&env, "manual", "manual-resync-1", &manual_objects).await?;

    // v2 stops setting `b`, `c` (ignored by `manual`), the env var DEBUG and the port 9090.
    let two = env.git.commit(
        "removal",
        "main",
        &[
            ("app/settings.yaml", Some(&settings("{a: \"1\"}"))),
            ("app/ignored.yaml", Some(&ignored("{keep: \"1\"}"))),
            (
                "app/web.yaml",
                Some(&deployment("[{name: MODE, value: fast}]", "[{containerPort: 80}]")),
            ),
        ],
        "v2",
    )?;

    // Without automation it is visible: OutOfSync at v2, for both objects that lost fields, while
    // the field the ignore rule covers does not count.
    env.refresh("manual").await?;
    let out_of_sync = env
        .wait_app("manual", "OutOfSync at v2", Duration::from_secs(30), |a| {
            revision_of(a) == two && sync_of(a) == "OutOfSync"
        })
        .await?;
    assert_eq!(resource_sync(&out_of_sync, "ConfigMap", "settings"), "OutOfSync");
    assert_eq!(resource_sync(&out_of_sync, "Deployment", "web"), "OutOfSync");
    assert_eq!(
        resource_sync(&out_of_sync, "ConfigMap", "ignored"),
        "Synced",
        "a removed field an ignoreDifferences rule covers is not drift"
    );
    assert_eq!(
        manual_objects.get("ConfigMap", "settings").await?["data"],
        json!({"a": "1", "b": "2"}),
        "nothing is written before a sync"
    );
    let second = sync_and_wait(&env, "manual", "manual-2").await?;
    let op = op_state(&second);
    assert_eq!(op.phase, "Succeeded", "{}", op.message);
    assert!(op.message.contains("(2 applied, 1 unchanged"), "{}", op.message);
    env.wait_app("manual", "Synced at v2", Duration::from_secs(60), |a| {
        revision_of(a) == two && synced_healthy(a)
    })
    .await?;

    // With automation, the new revision is synced by itself (an automated sync starts only for an
    // OutOfSync Application).
    env.refresh("auto").await?;
    let synced = env
        .wait_app("auto", "v2 synced automatically", Duration::from_secs(60), |a| {
            op_state(a).revision == two && op_state(a).phase == "Succeeded"
        })
        .await?;
    let op = op_state(&synced);
    assert_eq!(
        op.operation.as_ref().map(|o| o.initiated_by.as_str()),
        Some("automated")
    );
    assert!(op.message.contains("(3 applied, 0 unchanged"), "{}", op.message);
    env.wait_app("auto", "Synced and Healthy at v2", Duration::from_secs(60), |a| {
        revision_of(a) == two && synced_healthy(a)
    })
    .await?;

    for objects in [&auto_objects, &manual_objects] {
        let ns = objects.ns;
        let cm = objects.get("ConfigMap", "settings").await?;
        assert_eq!(cm["data"], json!({"a": "1"}), "{ns}: `b` is removed");
        assert_eq!(
            text(&cm, "/metadata/annotations/example.com~1owner"),
            "team-a",
            "{ns}: another manager's field stays"
        );
        let web = objects.get("Deployment", "web").await?;
        let c = container(&web);
        assert_eq!(c["env"], json!([{"name": "MODE", "value": "fast"}]), "{ns}: {c}");
        assert_eq!(
            c["ports"],
            json!([{"containerPort": 80, "protocol": "TCP"}]),
            "{ns}: {c}"
        );
        assert_eq!(
            text(&web, "/metadata/annotations/example.com~1owner"),
            "team-a",
            "{ns}: another manager's field stays"
        );
        assert_eq!(c["imagePullPolicy"], "Always", "{ns}: the API server's defaults stay");
    }
    assert_eq!(
        auto_objects.get("ConfigMap", "ignored").await?["data"],
        json!({"keep": "1"}),
        "without an ignore rule `c` is drift too"
    );
    assert_eq!(
        manual_objects.get("ConfigMap", "ignored").await?["data"],
        json!({"keep": "1", "c": "3"}),
        "the ignore rule keeps `ignored` Synced, so it is not applied"
    );

    // And once more nothing to do: no write.
    resync_writes_nothing(&env, "auto", "auto-resync-2", &auto_objects).await?;
    resync_writes_nothing(&env, "manual", "manual-resync-2", &manual_objects).await?;
    // Self-heal finds nothing to do either: no automated sync starts after the last request.
    let settled = refresh_and_wait(&env, "auto").await?;
    assert_eq!(sync_of(&settled), "Synced", "{:?}", settled.status);
    assert_eq!(
        op_state(&settled).operation.map(|o| o.id),
        Some("auto-resync-2".to_string()),
        "no automated sync after the last request"
    );
    Ok(())
}

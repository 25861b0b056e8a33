//! End to end: sync options and what happens around a sync — `Replace=true`, `Prune=false`,
//! `Delete=false`, deletion with and without the resources finalizer, `PruneLast=true`,
//! `ApplyOutOfSyncOnly=false`, `Force=true`, the `HookFailed` delete policy and the bounded history — against a
//! real control plane, with the controller running in-process.
//!
//! Longer than the ~600 lines a source file should stay under, on purpose: every test of one test
//! binary shares one control plane, so splitting this file would start another plane (and link
//! another test binary) for no gain in readability — each test here is independent and named for the
//! behaviour it checks.

mod support;

use std::time::Duration;

use capstan_api::Application;
use capstan_api::application::{OperationState, ResourceResult};
use capstan_api::status::ResultCode;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::*;

/// A ConfigMap manifest with the given annotations and data (both as YAML flow mappings).
fn configmap(name: &str, annotations: &str, data: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, annotations: {annotations}}}\ndata: {data}\n")
}

/// The recorded operation (the last one, or the running one).
fn op_state(app: &Application) -> OperationState {
    app.status
        .as_ref()
        .and_then(|s| s.operation_state.clone())
        .unwrap_or_default()
}

/// The id of the request the recorded operation came from.
fn op_id(app: &Application) -> String {
    op_state(app).operation.map(|o| o.id).unwrap_or_default()
}

fn revision_of(app: &Application) -> String {
    app.status
        .as_ref()
        .and_then(|s| s.sync.as_ref())
        .map(|s| s.revision.clone())
        .unwrap_or_default()
}

/// The result recorded for object `name` (not a hook).
fn result_for<'a>(results: &'a [ResourceResult], kind: &str, name: &str) -> Option<&'a ResourceResult> {
    results.iter().find(|r| r.kind == kind && r.name == name)
}

/// Request a sync with the given parameters (`{"prune": true, ...}`) under request id `id`, and wait
/// until the operation that came from it has finished (succeeded or failed).
async fn sync_and_wait(env: &Env, app: &str, id: &str, sync: Value) -> anyhow::Result<Application> {
    env.request(app, json!({"sync": sync, "initiatedBy": "test", "id": id}))
        .await?;
    env.wait_app(app, &format!("operation {id} finished"), Duration::from_secs(60), |a| {
        op_id(a) == id && matches!(op_phase(a).as_str(), "Succeeded" | "Failed")
    })
    .await
}

/// Commit, refresh, and wait until the Application compares against the new commit.
async fn commit_and_refresh(
    env: &Env,
    repo: &str,
    app: &str,
    files: &[(&str, Option<&str>)],
) -> anyhow::Result<String> {
    let sha = env.git.commit(repo, "main", files, "change")?;
    env.refresh(app).await?;
    env.wait_app(app, "compared at the new commit", Duration::from_secs(30), |a| {
        revision_of(a) == sha
    })
    .await?;
    Ok(sha)
}

/// `metadata.managedFields` as (manager, operation) pairs.
fn managers(obj: &Value) -> Vec<(String, String)> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|entries| {
            entries
                .iter()
                .map(|e| {
                    let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
                    (s("manager"), s("operation"))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn pointer_str(obj: &Value, pointer: &str) -> String {
    obj.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Create namespace `ns` and in it the ConfigMap `same` exactly as Application `app` renders it
/// (tracking metadata included), written by field manager `seed` rather than by Capstan.
async fn seed(env: &Env, app: &str, ns: &str) -> anyhow::Result<()> {
    let namespace = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))?;
    env.api("v1", "Namespace", "namespaces", None)
        .create(&PostParams::default(), &namespace)
        .await?;
    let cm = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": "same", "namespace": ns,
            "labels": {"capstan.dev/instance": app},
            "annotations": {"capstan.dev/tracking-id": format!("{}/{app}", env.ns)},
        },
        "data": {"k": "v"},
    }))?;
    let pp = PostParams {
        field_manager: Some("seed".into()),
        ..Default::default()
    };
    let (v, k, p) = CM_API;
    env.api(v, k, p, Some(ns)).create(&pp, &cm).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replace_true_puts_the_object_instead_of_applying_it() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("replace")?;
    let replaced = |data: &str| configmap("replaced", "{capstan.dev/sync-options: Replace=true}", data);
    let applied = configmap("applied", "{}", "{a: \"1\"}");
    env.git.commit(
        "replace",
        "main",
        &[
            ("app/replaced.yaml", Some(&replaced("{a: \"1\", b: \"2\"}"))),
            ("app/applied.yaml", Some(&applied)),
        ],
        "v1",
    )?;
    env.create_app(app("replace", &env.git.git_url("replace"), "app", "replace-ns", false))
        .await?;
    let first = sync_and_wait(&env, "replace", "replace-1", json!({})).await?;
    assert_eq!(op_phase(&first), "Succeeded", "{}", op_message(&first));

    let (v, k, p) = CM_API;
    let live = env
        .get(v, k, p, "replace-ns", "replaced")
        .await?
        .expect("the Replace=true object is created");
    assert_eq!(live.pointer("/data"), Some(&json!({"a": "1", "b": "2"})));
    let owners = managers(&live);
    assert!(
        owners.contains(&("capstan".into(), "Update".into())),
        "created with POST by manager capstan: {owners:?}"
    );
    assert!(
        !owners.iter().any(|(_, op)| op == "Apply"),
        "no server-side apply on a Replace=true object: {owners:?}"
    );
    // The same check on an ordinary object proves it can tell the two apart.
    let ordinary = env.get(v, k, p, "replace-ns", "applied").await?.expect("applied");
    assert!(
        managers(&ordinary).contains(&("capstan".into(), "Apply".into())),
        "{:?}",
        managers(&ordinary)
    );
    let uid = pointer_str(&live, "/metadata/uid");

    // Someone else adds a field: a replace (unlike a server-side apply) drops it with the rest of
    // what Git does not have.
    let pp = PatchParams {
        field_manager: Some("someone-else".into()),
        ..Default::default()
    };
    env.api(v, k, p, Some("replace-ns"))
        .patch("replaced", &pp, &Patch::Merge(json!({"data": {"extra": "x"}})))
        .await?;
    commit_and_refresh(
        &env,
        "replace",
        "replace",
        &[("app/replaced.yaml", Some(&replaced("{a: \"changed\"}")))],
    )
    .await?;
    let second = sync_and_wait(&env, "replace", "replace-2", json!({})).await?;
    assert_eq!(op_phase(&second), "Succeeded", "{}", op_message(&second));
    let live = env.get(v, k, p, "replace-ns", "replaced").await?.expect("replaced");
    assert_eq!(
        live.pointer("/data"),
        Some(&json!({"a": "changed"})),
        "the field removed from Git and the field nobody in Git set are both gone"
    );
    assert_eq!(
        pointer_str(&live, "/metadata/uid"),
        uid,
        "replaced in place (PUT), not deleted and created again"
    );
    let owners = managers(&live);
    assert!(
        owners.contains(&("capstan".into(), "Update".into())) && !owners.iter().any(|(_, op)| op == "Apply"),
        "replaced with PUT by manager capstan: {owners:?}"
    );
    env.wait_app("replace", "Synced after the replace", Duration::from_secs(30), |a| {
        sync_of(a) == "Synced"
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prune_false_keeps_the_object_reports_prune_skipped_and_does_not_loop() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("keeper")?;
    let config = |v: &str| configmap("config", "{}", &format!("{{v: \"{v}\"}}"));
    env.git.commit(
        "keeper",
        "main",
        &[
            (
                "app/kept.yaml",
                Some(&configmap("kept", "{capstan.dev/sync-options: Prune=false}", "{a: b}")),
            ),
            ("app/pruned.yaml", Some(&configmap("pruned", "{}", "{a: b}"))),
            ("app/config.yaml", Some(&config("1"))),
        ],
        "v1",
    )?;
    env.create_app(app("keeper", &env.git.git_url("keeper"), "app", "keeper-ns", true))
        .await?;
    env.wait_app("keeper", "Synced and Healthy", Duration::from_secs(60), synced_healthy)
        .await?;

    // Both objects leave Git, and something else changes so that the automated sync has work to do.
    let two = env.git.commit(
        "keeper",
        "main",
        &[
            ("app/kept.yaml", None),
            ("app/pruned.yaml", None),
            ("app/config.yaml", Some(&config("2"))),
        ],
        "v2",
    )?;
    env.refresh("keeper").await?;
    let synced = env
        .wait_app("keeper", "automated sync of v2", Duration::from_secs(60), |a| {
            let op = op_state(a);
            op.revision == two && op.phase == "Succeeded"
        })
        .await?;
    let op = op_state(&synced);
    assert_eq!(
        result_for(&op.resources, "ConfigMap", "kept").map(|r| r.status.as_str()),
        Some("PruneSkipped"),
        "{:?}",
        op.resources
    );
    assert_eq!(
        result_for(&op.resources, "ConfigMap", "pruned").map(|r| r.status.as_str()),
        Some("Pruned"),
        "{:?}",
        op.resources
    );
    let (v, k, p) = CM_API;
    let kept = env.get(v, k, p, "keeper-ns", "kept").await?;
    assert!(kept.is_some(), "a Prune=false object stays in the cluster");
    eventually("the other object pruned", Duration::from_secs(30), || async {
        Ok(env.get(v, k, p, "keeper-ns", "pruned").await?.is_none())
    })
    .await?;
    assert_eq!(
        env.get(v, k, p, "keeper-ns", "config")
            .await?
            .and_then(|c| c.pointer("/data/v").cloned()),
        Some(json!("2"))
    );

    // The object still requires pruning, so the Application stays OutOfSync; but the automated sync
    // must not start again and again because of it. Each refresh is a full reconcile (its end is
    // visible as a new reconciledAt), after which no new operation may have started.
    let settled = env
        .wait_app(
            "keeper",
            "OutOfSync, kept requires pruning",
            Duration::from_secs(30),
            |a| {
                sync_of(a) == "OutOfSync"
                    && a.status
                        .as_ref()
                        .is_some_and(|s| s.resources.iter().any(|r| r.name == "kept" && r.requires_pruning))
            },
        )
        .await?;
    let started_at = op_state(&settled).started_at;
    let history_len = settled.status.as_ref().map(|s| s.history.len()).unwrap_or_default();
    assert_eq!(history_len, 2, "one sync per revision");
    for round in 0..3 {
        let before = env
            .app("keeper")
            .await?
            .status
            .and_then(|s| s.reconciled_at)
            .unwrap_or_default();
        env.refresh("keeper").await?;
        let after = env
            .wait_app("keeper", "refresh handled", Duration::from_secs(30), |a| {
                a.status
                    .as_ref()
                    .and_then(|s| s.reconciled_at.clone())
                    .is_some_and(|t| t != before)
            })
            .await?;
        assert_eq!(
            op_state(&after).started_at,
            started_at,
            "round {round}: an automated sync started again for an object that must not be pruned"
        );
        assert_eq!(
            after.status.as_ref().map(|s| s.history.len()),
            Some(history_len),
            "round {round}"
        );
    }
    assert!(env.get(v, k, p, "keeper-ns", "kept").await?.is_some());
    Ok(())
}

/// A PostSync hook Job whose delete policy (the default, `BeforeHookCreation`) leaves it in place
/// after it completes.
const LEFT_BEHIND_HOOK: &str = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: after\n  annotations: {capstan.dev/hook: PostSync}\nspec:\n  template:\n    spec: {restartPolicy: Never, containers: [{name: c, image: example/task:1}]}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delete_false_survives_deleting_the_application_with_its_resources() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("cascade")?;
    let service = "apiVersion: v1\nkind: Service\nmetadata: {name: doomed}\nspec: {ports: [{port: 80}]}\n";
    env.git.commit(
        "cascade",
        "main",
        &[
            (
                "app/survivor.yaml",
                Some(&configmap(
                    "survivor",
                    "{capstan.dev/sync-options: Delete=false}",
                    "{a: b}",
                )),
            ),
            ("app/doomed.yaml", Some(&configmap("doomed", "{}", "{a: b}"))),
            ("app/service.yaml", Some(service)),
            ("app/after.yaml", Some(LEFT_BEHIND_HOOK)),
        ],
        "v1",
    )?;
    let mut manifest = app("cascade", &env.git.git_url("cascade"), "app", "cascade-ns", true);
    manifest["metadata"]["finalizers"] = json!(["capstan.dev/resources-finalizer"]);
    env.create_app(manifest).await?;
    env.wait_app("cascade", "Synced and Healthy", Duration::from_secs(60), |a| {
        synced_healthy(a) && op_phase(a) == "Succeeded"
    })
    .await?;
    let (jv, jk, jp) = JOB_API;
    assert!(
        env.get(jv, jk, jp, "cascade-ns", "after").await?.is_some(),
        "the completed hook stays until the next sync"
    );
    let (v, k, p) = CM_API;
    let survivor_uid = pointer_str(
        &env.get(v, k, p, "cascade-ns", "survivor").await?.expect("survivor"),
        "/metadata/uid",
    );
    assert!(env.get(v, k, p, "cascade-ns", "doomed").await?.is_some());

    env.apps.delete("cascade", &Default::default()).await?;
    eventually("the Application deleted", Duration::from_secs(60), || async {
        Ok(env.apps.get_opt("cascade").await?.is_none())
    })
    .await?;
    // The finalizer is removed only after the objects it deletes are gone.
    assert!(
        env.get(v, k, p, "cascade-ns", "doomed").await?.is_none(),
        "an ordinary object is deleted with the Application"
    );
    assert!(
        env.get("v1", "Service", "services", "cascade-ns", "doomed")
            .await?
            .is_none(),
        "objects of every kind are deleted"
    );
    let (jv, jk, jp) = JOB_API;
    assert!(
        env.get(jv, jk, jp, "cascade-ns", "after").await?.is_none(),
        "a hook left behind by the last sync is deleted too, although no other object is a Job"
    );
    let survivor = env
        .get(v, k, p, "cascade-ns", "survivor")
        .await?
        .expect("a Delete=false object is kept when its Application is deleted");
    assert_eq!(pointer_str(&survivor, "/metadata/uid"), survivor_uid);
    assert_eq!(survivor.pointer("/data/a"), Some(&json!("b")));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_an_application_without_the_finalizer_leaves_its_objects() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("orphan")?;
    let service = "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {ports: [{port: 80}]}\n";
    env.git.commit(
        "orphan",
        "main",
        &[
            ("app/settings.yaml", Some(&configmap("settings", "{}", "{a: b}"))),
            ("app/service.yaml", Some(service)),
        ],
        "v1",
    )?;
    env.create_app(app("orphaner", &env.git.git_url("orphan"), "app", "orphan-ns", true))
        .await?;
    let synced = env
        .wait_app(
            "orphaner",
            "Synced and Healthy",
            Duration::from_secs(60),
            synced_healthy,
        )
        .await?;
    assert!(
        synced.metadata.finalizers.as_ref().is_none_or(Vec::is_empty),
        "the controller adds no finalizer by itself: {:?}",
        synced.metadata.finalizers
    );
    let (v, k, p) = CM_API;
    let uid = |obj: Option<Value>| obj.map(|o| pointer_str(&o, "/metadata/uid"));
    let settings_uid = uid(env.get(v, k, p, "orphan-ns", "settings").await?).expect("settings");
    let service_uid = uid(env.get("v1", "Service", "services", "orphan-ns", "web").await?).expect("service");

    env.apps.delete("orphaner", &Default::default()).await?;
    eventually("the Application deleted", Duration::from_secs(30), || async {
        Ok(env.apps.get_opt("orphaner").await?.is_none())
    })
    .await?;
    // The controller has seen the deletion once it has handled a later event: an Application
    // created afterwards (from the same repository, into another namespace) is synced.
    env.create_app(app("later", &env.git.git_url("orphan"), "app", "later-ns", true))
        .await?;
    env.wait_app("later", "Synced and Healthy", Duration::from_secs(60), synced_healthy)
        .await?;
    assert_eq!(
        uid(env.get(v, k, p, "orphan-ns", "settings").await?),
        Some(settings_uid),
        "the ConfigMap stays"
    );
    assert_eq!(
        uid(env.get("v1", "Service", "services", "orphan-ns", "web").await?),
        Some(service_uid),
        "the Service stays"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prune_last_prunes_after_the_post_sync_hook() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("last")?;
    let stays = |v: &str| configmap("stays", "{}", &format!("{{v: \"{v}\"}}"));
    env.git.commit(
        "last",
        "main",
        &[
            ("app/stays.yaml", Some(&stays("1"))),
            ("app/old.yaml", Some(&configmap("old", "{}", "{a: b}"))),
        ],
        "v1",
    )?;
    let mut manifest = app("last", &env.git.git_url("last"), "app", "last-ns", true);
    manifest["spec"]["syncPolicy"]["syncOptions"] = json!(["CreateNamespace=true", "PruneLast=true"]);
    env.create_app(manifest).await?;
    env.wait_app("last", "Synced and Healthy", Duration::from_secs(60), synced_healthy)
        .await?;

    // v2 drops `old` and adds a PostSync hook that takes a few seconds.
    let hook = r#"
apiVersion: batch/v1
kind: Job
metadata: {name: post-check, annotations: {capstan.dev/hook: PostSync}}
spec:
  backoffLimit: 0
  template:
    metadata: {annotations: {capstan.dev/simulate: "delay=3"}}
    spec: {restartPolicy: Never, containers: [{name: c, image: x}]}
"#;
    let two = env.git.commit(
        "last",
        "main",
        &[
            ("app/stays.yaml", Some(&stays("2"))),
            ("app/old.yaml", None),
            ("app/hook.yaml", Some(hook)),
        ],
        "v2",
    )?;
    env.refresh("last").await?;

    // While the PostSync hook runs, the object to prune is still there. A sample counts only when
    // the hook had not completed both before and after the object was read.
    let (cv, ck, cp) = CM_API;
    let (jv, jk, jp) = JOB_API;
    let running = |job: &Option<Value>| {
        job.as_ref()
            .is_some_and(|j| j.pointer("/status/succeeded").is_none() && j.pointer("/status/failed").is_none())
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let old_during_hook = loop {
        if running(&env.get(jv, jk, jp, "last-ns", "post-check").await?) {
            let old = env.get(cv, ck, cp, "last-ns", "old").await?;
            if running(&env.get(jv, jk, jp, "last-ns", "post-check").await?) {
                break Some(old.is_some());
            }
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "timed out waiting to observe the PostSync hook running"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        old_during_hook,
        Some(true),
        "with PruneLast=true nothing is pruned before the PostSync hook has completed"
    );

    let done = env
        .wait_app("last", "sync of v2 finished", Duration::from_secs(60), |a| {
            let op = op_state(a);
            op.revision == two && op.phase != "Running"
        })
        .await?;
    let op = op_state(&done);
    assert_eq!(op.phase, "Succeeded", "{}", op.message);
    let position = |hook: bool, name: &str| op.resources.iter().position(|r| r.hook == hook && r.name == name);
    let (hook_at, prune_at) = (position(true, "post-check"), position(false, "old"));
    assert!(
        matches!((hook_at, prune_at), (Some(h), Some(p)) if h < p),
        "the prune is recorded after the PostSync hook: {:?}",
        op.resources
    );
    let pruned = result_for(&op.resources, "ConfigMap", "old").expect("prune result");
    assert_eq!(
        (pruned.status.as_str(), pruned.sync_phase.as_str()),
        ("Pruned", "PostSync")
    );
    assert_eq!(
        op.resources.last().map(|r| r.name.as_str()),
        Some("old"),
        "the prune is the very last step: {:?}",
        op.resources
    );
    eventually("old pruned", Duration::from_secs(30), || async {
        Ok(env.get(cv, ck, cp, "last-ns", "old").await?.is_none())
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn apply_out_of_sync_only_false_applies_objects_that_already_equal_git() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("reapply")?;
    env.git.commit(
        "reapply",
        "main",
        &[("app/same.yaml", Some(&configmap("same", "{}", "{k: v}")))],
        "v1",
    )?;
    let url = env.git.git_url("reapply");
    // The object already exists, equal to what the Application renders (tracking metadata included),
    // written by someone else: a write by Capstan is visible as its own entry in managedFields and as
    // a new resourceVersion, whatever the API server does about no-op applies.
    let (v, k, p) = CM_API;
    seed(&env, "reapply", "reapply-ns").await?;
    env.create_app(app("reapply", &url, "app", "reapply-ns", false)).await?;
    env.wait_app("reapply", "Synced before any sync", Duration::from_secs(30), |a| {
        sync_of(a) == "Synced"
    })
    .await?;
    let state = |obj: Value| (pointer_str(&obj, "/metadata/resourceVersion"), managers(&obj));
    let (rv0, managers0) = state(env.get(v, k, p, "reapply-ns", "same").await?.expect("seeded"));
    assert_eq!(managers0, [("seed".to_string(), "Update".to_string())]);

    // By default an object equal to Git is not written.
    let default = sync_and_wait(&env, "reapply", "reapply-1", json!({})).await?;
    assert_eq!(op_phase(&default), "Succeeded", "{}", op_message(&default));
    assert!(
        op_message(&default).contains("0 applied, 1 unchanged"),
        "{}",
        op_message(&default)
    );
    let (rv1, managers1) = state(env.get(v, k, p, "reapply-ns", "same").await?.expect("same"));
    assert_eq!((rv1.as_str(), &managers1), (rv0.as_str(), &managers0), "not written");

    // With ApplyOutOfSyncOnly=false in the request, it is applied all the same.
    let all = sync_and_wait(
        &env,
        "reapply",
        "reapply-2",
        json!({"syncOptions": ["ApplyOutOfSyncOnly=false"]}),
    )
    .await?;
    assert_eq!(op_phase(&all), "Succeeded", "{}", op_message(&all));
    assert!(
        op_message(&all).contains("1 applied, 0 unchanged"),
        "{}",
        op_message(&all)
    );
    let (rv2, managers2) = state(env.get(v, k, p, "reapply-ns", "same").await?.expect("same"));
    assert_ne!(rv2, rv0, "written again");
    assert!(
        managers2.contains(&("capstan".into(), "Apply".into())),
        "server-side applied by capstan: {managers2:?}"
    );

    // The same as an Application-wide option.
    seed(&env, "reapply-all", "reapply-all-ns").await?;
    let mut manifest = app("reapply-all", &url, "app", "reapply-all-ns", false);
    manifest["spec"]["syncPolicy"]["syncOptions"] = json!(["CreateNamespace=true", "ApplyOutOfSyncOnly=false"]);
    env.create_app(manifest).await?;
    env.wait_app("reapply-all", "Synced before any sync", Duration::from_secs(30), |a| {
        sync_of(a) == "Synced"
    })
    .await?;
    let (rv0, _) = state(env.get(v, k, p, "reapply-all-ns", "same").await?.expect("seeded"));
    let synced = sync_and_wait(&env, "reapply-all", "reapply-all-1", json!({})).await?;
    assert_eq!(op_phase(&synced), "Succeeded", "{}", op_message(&synced));
    let (rv1, managers1) = state(env.get(v, k, p, "reapply-all-ns", "same").await?.expect("same"));
    assert_ne!(rv1, rv0, "written again");
    assert!(
        managers1.contains(&("capstan".into(), "Apply".into())),
        "server-side applied by capstan: {managers1:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hook_failed_policy_deletes_a_failed_hook_and_the_sync_names_it() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("hookfailed")?;
    let hooks = r#"
apiVersion: batch/v1
kind: Job
metadata:
  name: good-hook
  annotations: {capstan.dev/hook: PreSync, capstan.dev/sync-wave: "-1", capstan.dev/hook-delete-policy: HookFailed}
spec:
  backoffLimit: 0
  template: {spec: {restartPolicy: Never, containers: [{name: c, image: x}]}}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: bad-hook
  annotations: {capstan.dev/hook: PreSync, capstan.dev/hook-delete-policy: HookFailed}
spec:
  backoffLimit: 0
  template:
    metadata: {annotations: {capstan.dev/simulate: fail}}
    spec: {restartPolicy: Never, containers: [{name: c, image: x}]}
"#;
    env.git.commit(
        "hookfailed",
        "main",
        &[
            ("app/hooks.yaml", Some(hooks)),
            ("app/settings.yaml", Some(&configmap("settings", "{}", "{a: b}"))),
        ],
        "v1",
    )?;
    env.create_app(app(
        "hookfailed",
        &env.git.git_url("hookfailed"),
        "app",
        "hookfailed-ns",
        false,
    ))
    .await?;
    let failed = sync_and_wait(&env, "hookfailed", "hookfailed-1", json!({})).await?;
    let op = op_state(&failed);
    assert_eq!(op.phase, "Failed", "{}", op.message);
    assert!(
        op.message.contains("bad-hook") && op.message.contains("failed"),
        "{}",
        op.message
    );
    let bad = result_for(&op.resources, "Job", "bad-hook").expect("result of the failed hook");
    assert!(bad.hook && bad.status == ResultCode::SyncFailed, "{bad:?}");

    let (v, k, p) = JOB_API;
    eventually("the failed hook deleted", Duration::from_secs(30), || async {
        Ok(env.get(v, k, p, "hookfailed-ns", "bad-hook").await?.is_none())
    })
    .await?;
    let good = env
        .get(v, k, p, "hookfailed-ns", "good-hook")
        .await?
        .expect("HookFailed keeps a hook that succeeded");
    assert_eq!(good.pointer("/status/succeeded"), Some(&json!(1)));
    let (v, k, p) = CM_API;
    assert!(
        env.get(v, k, p, "hookfailed-ns", "settings").await?.is_none(),
        "nothing is applied after a failed PreSync hook"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn revision_history_limit_keeps_the_last_entries() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("history")?;
    let cm = |v: &str| configmap("versioned", "{}", &format!("{{v: \"{v}\"}}"));
    let mut shas = vec![
        env.git
            .commit("history", "main", &[("app/cm.yaml", Some(&cm("1")))], "v1")?,
    ];
    let mut manifest = app("history", &env.git.git_url("history"), "app", "history-ns", true);
    manifest["spec"]["revisionHistoryLimit"] = json!(2);
    env.create_app(manifest).await?;
    let synced_at = |sha: String| {
        move |a: &Application| {
            synced_healthy(a)
                && a.status
                    .as_ref()
                    .and_then(|s| s.history.last())
                    .is_some_and(|h| h.revision == sha)
        }
    };
    env.wait_app(
        "history",
        "v1 synced",
        Duration::from_secs(60),
        synced_at(shas[0].clone()),
    )
    .await?;
    for v in ["2", "3"] {
        let sha = env.git.commit("history", "main", &[("app/cm.yaml", Some(&cm(v)))], v)?;
        env.refresh("history").await?;
        env.wait_app(
            "history",
            &format!("v{v} synced"),
            Duration::from_secs(60),
            synced_at(sha.clone()),
        )
        .await?;
        shas.push(sha);
    }
    let app = env.app("history").await?;
    let history = app.status.map(|s| s.history).unwrap_or_default();
    let revisions: Vec<&str> = history.iter().map(|h| h.revision.as_str()).collect();
    assert_eq!(revisions, [shas[1].as_str(), shas[2].as_str()], "the last two syncs");
    let ids: Vec<i64> = history.iter().map(|h| h.id).collect();
    assert_eq!(ids, [1, 2], "ids keep counting: the oldest entry was dropped");
    let (v, k, p) = CM_API;
    let live = env.get(v, k, p, "history-ns", "versioned").await?.expect("configmap");
    assert_eq!(live.pointer("/data/v"), Some(&json!("3")));
    Ok(())
}

/// `Force=true` in a sync request deletes the Job it names and creates it again from Git (a new
/// uid), equal to Git or not, and only that; naming no object, or another kind, fails the operation
/// before anything is deleted; in an Application's own `syncOptions` it is refused, naming the
/// option, and nothing is synced.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn force_true_recreates_the_named_jobs_only_and_is_refused_in_the_spec() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("force")?;
    let job = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: once}\nspec:\n  backoffLimit: 0\n  template:\n    spec: {restartPolicy: Never, containers: [{name: c, image: busybox}]}\n";
    env.git.commit(
        "force",
        "main",
        &[
            ("app/one.yaml", Some(&configmap("one", "{}", "{k: v}"))),
            ("app/two.yaml", Some(&configmap("two", "{}", "{k: v}"))),
            ("app/job.yaml", Some(job)),
        ],
        "v1",
    )?;
    env.create_app(app("force", &env.git.git_url("force"), "app", "force-ns", false))
        .await?;
    let first = sync_and_wait(&env, "force", "force-1", json!({})).await?;
    assert_eq!(op_phase(&first), "Succeeded", "{}", op_message(&first));
    let (v, k, p) = CM_API;
    let (jv, jk, jp) = JOB_API;
    let uid = |obj: Option<Value>| obj.map(|o| pointer_str(&o, "/metadata/uid")).unwrap_or_default();
    let (one, two, once) = (
        uid(env.get(v, k, p, "force-ns", "one").await?),
        uid(env.get(v, k, p, "force-ns", "two").await?),
        uid(env.get(jv, jk, jp, "force-ns", "once").await?),
    );
    assert!(!one.is_empty() && !two.is_empty() && !once.is_empty());

    // Force recreates only named Jobs: a ConfigMap, or no name at all, fails the operation before
    // anything is deleted.
    for (id, body) in [
        (
            "force-cm",
            json!({"resources": ["/ConfigMap/force-ns/one"], "syncOptions": ["Force=true", "Replace=true"]}),
        ),
        ("force-all", json!({"syncOptions": ["Force=true"]})),
    ] {
        let refused = sync_and_wait(&env, "force", id, body).await?;
        assert_eq!(op_phase(&refused), "Failed", "{}", op_message(&refused));
        assert!(
            op_message(&refused).contains("Force=true refused"),
            "{}",
            op_message(&refused)
        );
    }
    assert_eq!(
        uid(env.get(v, k, p, "force-ns", "one").await?),
        one,
        "nothing recreated"
    );
    assert_eq!(uid(env.get(jv, jk, jp, "force-ns", "once").await?), once);

    // The Job equals Git: without Force nothing would be written.
    let forced = sync_and_wait(
        &env,
        "force",
        "force-2",
        json!({"resources": ["batch/Job/force-ns/once"], "syncOptions": ["Force=true", "Replace=true"]}),
    )
    .await?;
    assert_eq!(op_phase(&forced), "Succeeded", "{}", op_message(&forced));
    let results = op_state(&forced).resources;
    assert_eq!(results.len(), 1, "{results:?}");
    let recreated = result_for(&results, "Job", "once").expect("the Job's result");
    assert_eq!(
        (recreated.status.clone(), recreated.message.as_str()),
        (ResultCode::Synced, "deleted and recreated")
    );
    let live = env.get(jv, jk, jp, "force-ns", "once").await?.expect("the Job again");
    assert_ne!(pointer_str(&live, "/metadata/uid"), once, "a new object");
    assert_eq!(
        live.pointer("/spec/template/spec/containers/0/image"),
        Some(&json!("busybox")),
        "from Git"
    );
    assert!(
        managers(&live).contains(&("capstan".into(), "Apply".into())),
        "server-side applied by capstan: {:?}",
        managers(&live)
    );
    assert_eq!(
        (
            uid(env.get(v, k, p, "force-ns", "one").await?),
            uid(env.get(v, k, p, "force-ns", "two").await?)
        ),
        (one, two),
        "objects not selected are left alone"
    );

    // Not as a standing policy of an Application.
    let mut manifest = app("force-spec", &env.git.git_url("force"), "app", "force-spec-ns", true);
    manifest["spec"]["syncPolicy"]["syncOptions"] = json!(["CreateNamespace=true", "Force=true"]);
    env.create_app(manifest).await?;
    let refused = env
        .wait_app("force-spec", "refused", Duration::from_secs(60), |a| {
            condition(a, "InvalidSpecError").is_some()
        })
        .await?;
    let message = condition(&refused, "InvalidSpecError").unwrap_or_default();
    assert!(
        message.contains("spec.syncPolicy.syncOptions[1] \"Force=true\" is not supported by Capstan"),
        "{message}"
    );
    assert!(env.get(v, k, p, "force-spec-ns", "one").await?.is_none());
    Ok(())
}

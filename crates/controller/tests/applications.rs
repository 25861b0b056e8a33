//! End to end: Applications rendered from real git repositories, synced in order into a real control
//! plane by the controller, healed, pruned, rolled back and reported.
//!
//! Longer than the ~600 lines a source file should stay under, on purpose: every test of one test
//! binary shares one control plane, so splitting this file would start another plane (and link
//! another test binary) for no gain in readability — each test here is independent and named for the
//! behaviour it checks.

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::*;

const WEB: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, annotations: {capstan.dev/sync-wave: "-1"}}
data: {color: blue}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx, ports: [{containerPort: 80}]}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, annotations: {argocd.argoproj.io/sync-wave: "1"}}
spec: {selector: {app: web}, ports: [{port: 80}]}
"#;

const HOOKS: &str = r#"
apiVersion: batch/v1
kind: Job
metadata: {name: preflight, annotations: {capstan.dev/hook: PreSync, capstan.dev/hook-delete-policy: HookSucceeded}}
spec: {template: {spec: {restartPolicy: Never, containers: [{name: c, image: busybox}]}}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: smoke, annotations: {capstan.dev/hook: PostSync}}
spec: {template: {spec: {restartPolicy: Never, containers: [{name: c, image: busybox}]}}}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn syncs_in_order_with_hooks_and_reports_health_and_history() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("apps")?;
    let sha = env.git.commit(
        "apps",
        "main",
        &[("web/web.yaml", Some(WEB)), ("web/hooks.yaml", Some(HOOKS))],
        "web",
    )?;
    env.create_app(app("web", &env.git.git_url("apps"), "web", "web", true))
        .await?;

    let app = env
        .wait_app("web", "Synced and Healthy", Duration::from_secs(90), synced_healthy)
        .await?;
    let status = app.status.clone().unwrap_or_default();
    assert_eq!(
        status.sync.as_ref().map(|s| s.revision.clone()),
        Some(sha.clone()),
        "status names the resolved SHA"
    );
    let op = status.operation_state.clone().expect("operation state");
    assert_eq!(op.phase, "Succeeded", "{}", op.message);
    let order: Vec<String> = op
        .resources
        .iter()
        .map(|r| format!("{}:{}:{}", r.sync_phase, r.sync_wave, r.name))
        .collect();
    assert_eq!(
        order,
        [
            "PreSync:0:preflight",
            "Sync:-1:settings",
            "Sync:0:web",
            "Sync:1:web",
            "PostSync:0:smoke"
        ]
    );
    assert_eq!(status.history.len(), 1);
    assert_eq!(status.history[0].revision, sha);
    assert_eq!(
        status.resources.len(),
        3,
        "hooks are not resources of the app: {:?}",
        status.resources
    );

    // HookSucceeded removed the PreSync job; the PostSync job stays (default BeforeHookCreation).
    let (v, k, p) = JOB_API;
    assert!(
        env.get(v, k, p, "web", "preflight").await?.is_none(),
        "PreSync hook deleted after success"
    );
    let smoke = env.get(v, k, p, "web", "smoke").await?.expect("PostSync hook ran");
    assert_eq!(smoke.pointer("/status/succeeded"), Some(&json!(1)));

    // Every applied object carries the tracking label and annotation.
    let (v, k, p) = DEPLOY_API;
    let web = env.get(v, k, p, "web", "web").await?.expect("deployment");
    assert_eq!(
        web.pointer("/metadata/labels/capstan.dev~1instance"),
        Some(&json!("web"))
    );
    assert_eq!(
        web.pointer("/metadata/annotations/capstan.dev~1tracking-id"),
        Some(&json!(format!("{}/web", env.ns)))
    );
    assert_eq!(
        web.pointer("/status/availableReplicas"),
        Some(&json!(2)),
        "health came from the real controllers"
    );

    // A no-op reconcile after the sync writes nothing: the resourceVersion stays.
    let rv = web.pointer("/metadata/resourceVersion").cloned();
    env.refresh_and_wait("web").await?;
    let again = env.get(v, k, p, "web", "web").await?.expect("deployment");
    assert_eq!(
        again.pointer("/metadata/resourceVersion").cloned(),
        rv,
        "nothing differs, nothing is written"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wave_that_never_becomes_healthy_holds_back_the_next_wave() -> anyhow::Result<()> {
    let env = Env::shared_with(Duration::from_secs(10)).await?;
    env.git.create_repo("stuck")?;
    let manifests = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: stuck}
spec:
  selector: {matchLabels: {app: stuck}}
  template:
    metadata: {labels: {app: stuck}, annotations: {capstan.dev/simulate: never-ready}}
    spec: {containers: [{name: c, image: x}]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: after, annotations: {capstan.dev/sync-wave: "1"}}
data: {x: "1"}
"#;
    env.git
        .commit("stuck", "main", &[("app/all.yaml", Some(manifests))], "stuck")?;
    env.create_app(app("stuck", &env.git.git_url("stuck"), "app", "stuck", true))
        .await?;

    let running = env
        .wait_app(
            "stuck",
            "operation running and waiting on the deployment",
            Duration::from_secs(60),
            |a| op_phase(a) == "Running" && op_message(a).contains("apps/Deployment/stuck/stuck"),
        )
        .await?;
    assert!(
        op_message(&running).contains("waiting for healthy state"),
        "{}",
        op_message(&running)
    );
    let (v, k, p) = CM_API;
    assert!(
        env.get(v, k, p, "stuck", "after").await?.is_none(),
        "wave 1 must not start before wave 0 is healthy"
    );

    let failed = env
        .wait_app("stuck", "operation failed on timeout", Duration::from_secs(60), |a| {
            op_phase(a) == "Failed"
        })
        .await?;
    let message = op_message(&failed);
    assert!(
        message.contains("apps/Deployment/stuck/stuck") && message.contains("10 s"),
        "{message}"
    );
    assert!(
        env.get(v, k, p, "stuck", "after").await?.is_none(),
        "a failed wave stops the sync"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn self_heal_reverts_drift_and_prune_follows_git_without_touching_others() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("heal")?;
    env.git.commit("heal", "main", &[("app/web.yaml", Some(WEB))], "one")?;
    env.create_app(app("heal", &env.git.git_url("heal"), "app", "heal", true))
        .await?;
    env.wait_app("heal", "Synced and Healthy", Duration::from_secs(90), synced_healthy)
        .await?;

    // Something else's ConfigMap in the same namespace.
    let (cv, ck, cp) = CM_API;
    let foreign: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "not-ours", "namespace": "heal"}, "data": {"a": "b"}}))?;
    env.api(cv, ck, cp, Some("heal"))
        .create(&Default::default(), &foreign)
        .await?;

    // Drift on a tracked field is reverted, through the watch, quickly.
    let (v, k, p) = DEPLOY_API;
    let deployments = env.api(v, k, p, Some("heal"));
    deployments
        .patch(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await?;
    let drifted = Instant::now();
    eventually("replicas reverted to 2", Duration::from_secs(10), || async {
        let d = env.get(v, k, p, "heal", "web").await?;
        Ok(d.and_then(|d| d.pointer("/spec/replicas").cloned()) == Some(json!(2)))
    })
    .await?;
    assert!(
        drifted.elapsed() < Duration::from_secs(5),
        "self-heal took {:?}",
        drifted.elapsed()
    );

    // A deleted tracked object comes back.
    env.api(cv, ck, cp, Some("heal"))
        .delete("settings", &Default::default())
        .await?;
    eventually("settings recreated", Duration::from_secs(10), || async {
        Ok(env.get(cv, ck, cp, "heal", "settings").await?.is_some())
    })
    .await?;

    // Removing the ConfigMap from Git prunes it (automated prune), and only it.
    let without_cm = WEB.split("---").skip(1).collect::<Vec<_>>().join("---");
    env.git
        .commit("heal", "main", &[("app/web.yaml", Some(&without_cm))], "drop settings")?;
    env.refresh("heal").await?;
    eventually("settings pruned", Duration::from_secs(30), || async {
        Ok(env.get(cv, ck, cp, "heal", "settings").await?.is_none())
    })
    .await?;
    env.wait_app("heal", "Synced again", Duration::from_secs(30), synced_healthy)
        .await?;
    assert!(
        env.get(cv, ck, cp, "heal", "not-ours").await?.is_some(),
        "untracked objects are never deleted"
    );
    assert!(env.get(v, k, p, "heal", "web").await?.is_some());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_commits_leave_what_runs_untouched_and_say_what_is_wrong() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("bad")?;
    env.git.commit("bad", "main", &[("app/web.yaml", Some(WEB))], "good")?;
    env.create_app(app("bad", &env.git.git_url("bad"), "app", "bad", true))
        .await?;
    env.wait_app("bad", "Synced and Healthy", Duration::from_secs(90), synced_healthy)
        .await?;
    let (cv, ck, cp) = CM_API;
    let color = || async {
        let cm = env.get(cv, ck, cp, "bad", "settings").await?;
        anyhow::Ok(cm.and_then(|c| c.pointer("/data/color").cloned()))
    };

    let red = WEB.replace("color: blue", "color: red");
    type Files<'a> = Vec<(&'a str, Option<&'a str>)>;
    let cases: Vec<(&str, Files, &str)> = vec![
        (
            "invalid YAML",
            vec![("app/broken.yaml", Some("kind: ConfigMap\nmetadata: [unclosed\n"))],
            "broken.yaml",
        ),
        (
            "unknown kind",
            vec![(
                "app/broken.yaml",
                Some("apiVersion: example.com/v1\nkind: Gizmo\nmetadata: {name: g}\n"),
            )],
            "Gizmo",
        ),
    ];
    for (what, files, expected) in cases {
        let mut files = files;
        files.push(("app/web.yaml", Some(&red)));
        env.git.commit("bad", "main", &files, what)?;
        env.refresh("bad").await?;
        let app = env
            .wait_app(
                "bad",
                &format!("ComparisonError for {what}"),
                Duration::from_secs(30),
                |a| condition(a, "ComparisonError").is_some_and(|m| m.contains(expected)),
            )
            .await?;
        let message = condition(&app, "ComparisonError").unwrap_or_default();
        assert!(
            message.contains(expected),
            "{what}: condition must name {expected}: {message}"
        );
        assert_eq!(
            color().await?,
            Some(json!("blue")),
            "{what}: nothing may change in the cluster"
        );
    }

    // An object the API server rejects: the sync fails naming it, the rest stays as it was.
    let rejected = WEB
        .replace("color: blue", "color: green")
        .replace("replicas: 2", "replicas: -1");
    env.git.commit(
        "bad",
        "main",
        &[("app/broken.yaml", None), ("app/web.yaml", Some(&rejected))],
        "rejected",
    )?;
    env.refresh("bad").await?;
    let app = env
        .wait_app("bad", "sync failed", Duration::from_secs(60), |a| {
            op_phase(a) == "Failed"
        })
        .await?;
    let message = op_message(&app);
    assert!(
        message.contains("apps/Deployment/bad/web") && message.contains("replicas"),
        "{message}"
    );
    let (v, k, p) = DEPLOY_API;
    let web = env.get(v, k, p, "bad", "web").await?.expect("deployment still there");
    assert_eq!(
        web.pointer("/spec/replicas"),
        Some(&json!(2)),
        "the running deployment is untouched"
    );

    // An unknown revision is a condition too.
    let mut bad_rev = app_manifest_with_revision(&env, "bad", "no-such-branch");
    bad_rev["spec"]["syncPolicy"]["automated"] = json!({"prune": true, "selfHeal": true});
    env.create_app(bad_rev).await?;
    let app = env
        .wait_app("bad", "unknown revision condition", Duration::from_secs(30), |a| {
            condition(a, "ComparisonError").is_some_and(|m| m.contains("no-such-branch"))
        })
        .await?;
    assert_eq!(sync_of(&app), "Unknown");

    // Fixing Git recovers.
    let mut fixed = app_manifest_with_revision(&env, "bad", "main");
    fixed["spec"]["syncPolicy"]["automated"] = json!({"prune": true, "selfHeal": true});
    env.git.commit(
        "bad",
        "main",
        &[("app/web.yaml", Some(&*WEB.replace("color: blue", "color: fixed")))],
        "fix",
    )?;
    env.create_app(fixed).await?;
    env.refresh("bad").await?;
    env.wait_app("bad", "recovered", Duration::from_secs(60), |a| {
        synced_healthy(a) && condition(a, "ComparisonError").is_none()
    })
    .await?;
    assert_eq!(color().await?, Some(json!("fixed")));
    Ok(())
}

fn app_manifest_with_revision(env: &Env, name: &str, revision: &str) -> serde_json::Value {
    let mut a = app(name, &env.git.git_url(name), "app", name, false);
    a["spec"]["source"]["targetRevision"] = json!(revision);
    a
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn manual_sync_rollback_shared_objects_and_cascading_delete() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("manual")?;
    let v1 = env.git.commit("manual", "main", &[("app/web.yaml", Some(WEB))], "v1")?;
    env.create_app(app("manual", &env.git.git_url("manual"), "app", "manual", false))
        .await?;

    let fresh = env
        .wait_app("manual", "OutOfSync", Duration::from_secs(30), |a| {
            sync_of(a) == "OutOfSync"
        })
        .await?;
    assert_eq!(health_of(&fresh), "Missing");
    let (cv, ck, cp) = CM_API;
    assert!(
        env.get(cv, ck, cp, "manual", "settings").await?.is_none(),
        "manual apps are not synced by themselves"
    );

    env.request("manual", json!({"sync": {"prune": true}, "initiatedBy": "test"}))
        .await?;
    env.wait_app("manual", "synced", Duration::from_secs(90), |a| {
        synced_healthy(a) && op_phase(a) == "Succeeded"
    })
    .await?;
    let v2 = env.git.commit(
        "manual",
        "main",
        &[("app/web.yaml", Some(&*WEB.replace("color: blue", "color: v2")))],
        "v2",
    )?;
    env.refresh("manual").await?;
    env.wait_app("manual", "OutOfSync at v2", Duration::from_secs(30), |a| {
        sync_of(a) == "OutOfSync"
            && a.status
                .as_ref()
                .and_then(|s| s.sync.as_ref())
                .is_some_and(|s| s.revision == v2)
    })
    .await?;
    env.request("manual", json!({"sync": {}, "initiatedBy": "test-2"}))
        .await?;
    let synced = env
        .wait_app("manual", "synced v2", Duration::from_secs(60), |a| {
            synced_healthy(a) && a.status.as_ref().is_some_and(|s| s.history.len() == 2)
        })
        .await?;
    let history = synced.status.map(|s| s.history).unwrap_or_default();
    assert_eq!(
        (history[0].revision.as_str(), history[1].revision.as_str()),
        (v1.as_str(), v2.as_str())
    );

    env.request(
        "manual",
        json!({"rollback": {"id": history[0].id}, "initiatedBy": "test-3"}),
    )
    .await?;
    env.wait_app("manual", "rolled back", Duration::from_secs(60), |a| {
        op_phase(a) == "Succeeded" && a.status.as_ref().is_some_and(|s| s.history.len() == 3)
    })
    .await?;
    let cm = env.get(cv, ck, cp, "manual", "settings").await?.expect("settings");
    assert_eq!(cm.pointer("/data/color"), Some(&json!("blue")), "rollback restored v1");
    env.wait_app(
        "manual",
        "OutOfSync against main after rollback",
        Duration::from_secs(30),
        |a| sync_of(a) == "OutOfSync",
    )
    .await?;

    // A second Application claiming the same objects is refused.
    env.create_app(app("intruder", &env.git.git_url("manual"), "app", "manual", false))
        .await?;
    let intruder = env
        .wait_app("intruder", "shared resource warning", Duration::from_secs(30), |a| {
            condition(a, "SharedResourceWarning").is_some()
        })
        .await?;
    assert!(
        condition(&intruder, "SharedResourceWarning")
            .unwrap_or_default()
            .contains(&format!("{}/manual", env.ns))
    );
    env.request("intruder", json!({"sync": {}, "initiatedBy": "test-4"}))
        .await?;
    let refused = env
        .wait_app("intruder", "sync refused", Duration::from_secs(30), |a| {
            op_phase(a) == "Failed"
        })
        .await?;
    assert!(
        op_message(&refused).contains("refusing to take over"),
        "{}",
        op_message(&refused)
    );
    let cm = env.get(cv, ck, cp, "manual", "settings").await?.expect("settings");
    assert_eq!(
        cm.pointer("/metadata/annotations/capstan.dev~1tracking-id"),
        Some(&json!(format!("{}/manual", env.ns)))
    );

    // Deleting with the resources finalizer deletes the objects; without it they stay.
    env.apps.delete("intruder", &Default::default()).await?;
    let patch = json!({"metadata": {"finalizers": ["capstan.dev/resources-finalizer"]}});
    env.apps
        .patch(
            "manual",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await?;
    env.apps.delete("manual", &Default::default()).await?;
    eventually("app and its objects deleted", Duration::from_secs(60), || async {
        Ok(env.apps.get_opt("manual").await?.is_none() && env.get(cv, ck, cp, "manual", "settings").await?.is_none())
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_controller_restart_mid_sync_resumes_the_operation_in_order() -> anyhow::Result<()> {
    let mut env = Env::shared().await?;
    env.git.create_repo("slow")?;
    let manifests = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: slow}
spec:
  selector: {matchLabels: {app: slow}}
  template:
    metadata: {labels: {app: slow}, annotations: {capstan.dev/simulate: "delay=8"}}
    spec: {containers: [{name: c, image: x}]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: after, annotations: {capstan.dev/sync-wave: "1"}}
data: {x: "1"}
"#;
    env.git
        .commit("slow", "main", &[("app/all.yaml", Some(manifests))], "slow")?;
    env.create_app(app("slow", &env.git.git_url("slow"), "app", "slow", false))
        .await?;
    env.wait_app("slow", "compared", Duration::from_secs(30), |a| {
        sync_of(a) == "OutOfSync"
    })
    .await?;
    // A request with an id (as Capstan's clients write them) stays until its operation has
    // finished: the id in status says it is being handled.
    env.request(
        "slow",
        json!({"sync": {}, "initiatedBy": "restart-test", "id": "restart-1"}),
    )
    .await?;
    let running = env
        .wait_app("slow", "waiting on wave 0", Duration::from_secs(30), |a| {
            op_phase(a) == "Running" && op_message(a).contains("slow")
        })
        .await?;
    let request_of = |a: &capstan_api::Application| {
        a.metadata
            .annotations
            .as_ref()
            .and_then(|m| m.get("capstan.dev/operation"))
            .cloned()
    };
    assert!(
        request_of(&running).is_some(),
        "the request stays while its operation runs"
    );
    assert_eq!(
        running
            .status
            .as_ref()
            .and_then(|s| s.operation_state.as_ref())
            .and_then(|o| o.operation.as_ref())
            .map(|o| o.id.as_str()),
        Some("restart-1")
    );
    let started_at = running
        .status
        .and_then(|s| s.operation_state)
        .map(|o| o.started_at)
        .unwrap_or_default();

    env.kill_controller().await;
    let (cv, ck, cp) = CM_API;
    assert!(
        env.get(cv, ck, cp, "slow", "after").await?.is_none(),
        "wave 1 not applied before the crash"
    );
    env.start_controller();

    let done = env
        .wait_app(
            "slow",
            "operation resumed and succeeded",
            Duration::from_secs(60),
            |a| op_phase(a) == "Succeeded",
        )
        .await?;
    let op = done.status.clone().and_then(|s| s.operation_state).expect("operation");
    assert_eq!(
        op.started_at, started_at,
        "the same operation was resumed, not a new one"
    );
    assert_eq!(op.operation.map(|o| o.initiated_by), Some("restart-test".to_string()));
    assert!(env.get(cv, ck, cp, "slow", "after").await?.is_some());
    // The finished operation's request is removed, and is not run again.
    env.wait_app("slow", "request removed", Duration::from_secs(30), |a| {
        request_of(a).is_none()
    })
    .await?;
    env.refresh_and_wait("slow").await?;
    let later = env.app("slow").await?;
    assert_eq!(
        later.status.and_then(|s| s.operation_state).map(|o| o.started_at),
        Some(started_at.clone()),
        "the handled request did not start another operation"
    );
    let (v, k, p) = DEPLOY_API;
    let d = env.get(v, k, p, "slow", "slow").await?.expect("deployment");
    assert_eq!(
        d.pointer("/status/availableReplicas"),
        Some(&json!(1)),
        "wave 1 ran only after wave 0 was healthy"
    );

    // A request is cleared only while it is still the one the controller read: one written in
    // between is kept for the next reconcile. (An Application outside the controller's namespace,
    // so nothing else touches it.)
    let namespaces = env.api("v1", "Namespace", "namespaces", None);
    namespaces
        .patch(
            "elsewhere",
            &kube::api::PatchParams::apply("test"),
            &kube::api::Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "elsewhere"}}),
            ),
        )
        .await?;
    let apps: kube::Api<capstan_api::Application> = kube::Api::namespaced(env.client.clone(), "elsewhere");
    let mut other = app("other", &env.git.git_url("slow"), "app", "slow", false);
    other["metadata"]["namespace"] = json!("elsewhere");
    let first = json!({"sync": {}, "initiatedBy": "first"}).to_string();
    other["metadata"]["annotations"] = json!({"capstan.dev/operation": first, "capstan.dev/refresh": "hard"});
    apps.patch(
        "other",
        &kube::api::PatchParams::apply("test"),
        &kube::api::Patch::Apply(other),
    )
    .await?;
    let read = apps.get("other").await?;
    let second = json!({"sync": {"prune": true}, "initiatedBy": "second"}).to_string();
    let newer = json!({"metadata": {"annotations": {"capstan.dev/operation": second}}});
    apps.patch(
        "other",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(newer),
    )
    .await?;
    let annotation =
        |a: &capstan_api::Application, key: &str| a.metadata.annotations.as_ref().and_then(|m| m.get(key)).cloned();
    capstan_controller::reconcile::clear_annotations(&env.client, &read, Some("hard".into()), Some(first)).await?;
    let kept = apps.get("other").await?;
    assert_eq!(
        annotation(&kept, "capstan.dev/operation"),
        Some(second.clone()),
        "the newer request is kept"
    );
    assert_eq!(
        annotation(&kept, "capstan.dev/refresh"),
        Some("hard".into()),
        "nothing was removed"
    );
    capstan_controller::reconcile::clear_annotations(&env.client, &kept, Some("hard".into()), Some(second)).await?;
    let cleared = apps.get("other").await?;
    assert_eq!(annotation(&cleared, "capstan.dev/operation"), None);
    assert_eq!(annotation(&cleared, "capstan.dev/refresh"), None);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn helm_and_kustomize_apps_from_an_authenticated_https_repo_with_a_private_ca() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("charts")?;
    let chart = "apiVersion: v2\nname: hello\nversion: 0.1.0\n";
    let values = "replicas: 1\nmessage: default\n";
    let template = r#"apiVersion: v1
kind: ConfigMap
metadata: {name: {{ .Release.Name }}-config}
data:
  message: {{ .Values.message | quote }}
  kube: {{ .Capabilities.KubeVersion.Version | quote }}
  crd: {{ .Capabilities.APIVersions.Has "capstan.dev/v1alpha1/Application" | quote }}
  crdVersion: {{ .Capabilities.APIVersions.Has "capstan.dev/v1alpha1" | quote }}
  unknown: {{ .Capabilities.APIVersions.Has "example.com/v9" | quote }}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: {{ .Release.Name }}}
spec:
  replicas: {{ .Values.replicas }}
  selector: {matchLabels: {app: {{ .Release.Name }}}}
  template:
    metadata: {labels: {app: {{ .Release.Name }}}}
    spec: {containers: [{name: c, image: x}]}
"#;
    let kbase = "resources: [cm.yaml]\n";
    let kcm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: base}\ndata: {a: b}\n";
    let overlay = "resources: [../../base]\nnamePrefix: prod-\n";
    env.git.commit(
        "charts",
        "main",
        &[
            ("hello/Chart.yaml", Some(chart)),
            ("hello/values.yaml", Some(values)),
            ("hello/values-prod.yaml", Some("message: production\n")),
            ("hello/templates/all.yaml", Some(template)),
            ("kust/base/kustomization.yaml", Some(kbase)),
            ("kust/base/cm.yaml", Some(kcm)),
            ("kust/overlays/prod/kustomization.yaml", Some(overlay)),
        ],
        "charts",
    )?;
    // Credentials come from a repository Secret, as in Argo CD; the server's certificate is signed by
    // a CA only `ca.crt` makes trusted (as in Flux's repository Secrets).
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "repo-charts", "namespace": env.ns, "labels": {"capstan.dev/secret-type": "repository"}},
        "stringData": {"url": env.git.https_url("charts"), "username": capstan_testkit::git::USER, "password": capstan_testkit::git::PASSWORD, "ca.crt": env.git.ca_pem()},
    }))?;
    kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(env.client.clone(), &env.ns)
        .create(&Default::default(), &secret)
        .await?;

    let mut helm = app("hello", &env.git.https_url("charts"), "hello", "hello", true);
    helm["spec"]["source"]["helm"] =
        json!({"valueFiles": ["values-prod.yaml"], "parameters": [{"name": "replicas", "value": "2"}]});
    env.create_app(helm).await?;
    env.create_app(app(
        "kust",
        &env.git.https_url("charts"),
        "kust/overlays/prod",
        "kust",
        true,
    ))
    .await?;

    env.wait_app("hello", "helm app healthy", Duration::from_secs(90), synced_healthy)
        .await?;
    env.wait_app("kust", "kustomize app healthy", Duration::from_secs(90), synced_healthy)
        .await?;
    let (cv, ck, cp) = CM_API;
    let cm = env
        .get(cv, ck, cp, "hello", "hello-config")
        .await?
        .expect("helm configmap");
    assert_eq!(
        cm.pointer("/data/message"),
        Some(&json!("production")),
        "valueFiles applied"
    );
    assert_eq!(
        cm.pointer("/data/kube"),
        Some(&json!(capstan_playground::KubeVersion::selected()?.tag)),
        "--kube-version comes from the destination"
    );
    // --api-versions too: helm knows built-in APIs by itself, but a CRD only from the destination.
    assert_eq!(cm.pointer("/data/crd"), Some(&json!("true")), "{cm}");
    assert_eq!(cm.pointer("/data/crdVersion"), Some(&json!("true")), "{cm}");
    assert_eq!(cm.pointer("/data/unknown"), Some(&json!("false")), "{cm}");
    let (v, k, p) = DEPLOY_API;
    let d = env.get(v, k, p, "hello", "hello").await?.expect("helm deployment");
    assert_eq!(
        d.pointer("/spec/replicas"),
        Some(&json!(2)),
        "parameters override values"
    );
    assert!(
        env.get(cv, ck, cp, "kust", "prod-base").await?.is_some(),
        "kustomize overlay rendered with its prefix"
    );
    Ok(())
}

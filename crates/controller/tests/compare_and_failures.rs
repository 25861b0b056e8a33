//! End to end: behaviour of the comparison (`ignoreDifferences`, `IgnoreExtraneous`), Kubernetes
//! Events of operations, controller-level failures (render, path, repository) that must leave what
//! runs untouched, and the automated sync's retries with backoff — against a real control plane.

mod support;

use std::time::{Duration, Instant};

use capstan_api::Application;
use capstan_api::status::SyncCode;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use support::*;

const WEB: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
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
    spec: {containers: [{name: web, image: nginx}]}
"#;

/// A ConfigMap the API server refuses (a data key with a space is not a valid key).
fn rejected_config_map(name: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{\"bad key\": x}}\n")
}

fn operation(app: &Application) -> Option<capstan_api::application::OperationState> {
    app.status.as_ref()?.operation_state.clone()
}

fn history_len(app: &Application) -> usize {
    app.status.as_ref().map(|s| s.history.len()).unwrap_or_default()
}

fn synced_at(app: &Application, sha: &str) -> bool {
    sync_of(app) == "Synced"
        && app
            .status
            .as_ref()
            .and_then(|s| s.sync.as_ref())
            .is_some_and(|s| s.revision == sha)
}

/// `(uid, resourceVersion)` of a live object.
fn identity(obj: &Value) -> (Value, Value) {
    (
        obj.pointer("/metadata/uid").cloned().unwrap_or_default(),
        obj.pointer("/metadata/resourceVersion").cloned().unwrap_or_default(),
    )
}

/// A loopback port nobody listens on.
fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// The Kubernetes Events recorded about Application `name` (in Capstan's namespace), oldest first.
async fn app_events(env: &Env, name: &str) -> anyhow::Result<Vec<Event>> {
    let events: Api<Event> = Api::namespaced(env.client.clone(), &env.ns);
    let mut list: Vec<Event> = events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.regarding
                .as_ref()
                .is_some_and(|r| r.kind.as_deref() == Some("Application") && r.name.as_deref() == Some(name))
        })
        .collect();
    list.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    Ok(list)
}

fn describe(events: &[Event]) -> String {
    events
        .iter()
        .map(|e| {
            format!(
                "{} x{}: {}",
                e.reason.as_deref().unwrap_or_default(),
                e.series.as_ref().map(|s| s.count).unwrap_or(1),
                e.note.as_deref().unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ignored_differences_are_neither_drift_nor_reverted_but_other_fields_are() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("ignore")?;
    env.git
        .commit("ignore", "main", &[("app/web.yaml", Some(WEB))], "web")?;
    let mut manifest = app("ignore", &env.git.git_url("ignore"), "app", "ignore", true);
    manifest["spec"]["ignoreDifferences"] =
        json!([{"group": "apps", "kind": "Deployment", "jsonPointers": ["/spec/replicas"]}]);
    env.create_app(manifest).await?;
    let synced = env
        .wait_app("ignore", "Synced and Healthy", Duration::from_secs(90), synced_healthy)
        .await?;
    let syncs = history_len(&synced);

    // Scaled as `kubectl scale` does: through the scale subresource.
    let (v, k, p) = DEPLOY_API;
    let deployments = env.api(v, k, p, Some("ignore"));
    deployments
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await?;
    // Then drift on a field that is not ignored, on another object: self-heal runs a sync, which
    // compares against the API server (which already has the new replica count). Were the replicas
    // not ignored, that sync would apply the Deployment and put them back to 2.
    let (cv, ck, cp) = CM_API;
    env.api(cv, ck, cp, Some("ignore"))
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"color": "red"}})),
        )
        .await?;
    eventually("settings reverted by self-heal", Duration::from_secs(15), || async {
        let cm = env.get(cv, ck, cp, "ignore", "settings").await?;
        Ok(cm.and_then(|c| c.pointer("/data/color").cloned()) == Some(json!("blue")))
    })
    .await?;
    let healed = env
        .wait_app("ignore", "self-heal recorded", Duration::from_secs(15), |a| {
            op_phase(a) == "Succeeded" && history_len(a) > syncs
        })
        .await?;
    let applied: Vec<String> = operation(&healed)
        .map(|o| o.resources.iter().map(|r| format!("{}/{}", r.kind, r.name)).collect())
        .unwrap_or_default();
    assert_eq!(
        applied,
        ["ConfigMap/settings"],
        "self-heal applied only the drifted ConfigMap, not the Deployment whose only difference is ignored"
    );
    let web = env.get(v, k, p, "ignore", "web").await?.expect("deployment");
    assert_eq!(
        web.pointer("/spec/replicas"),
        Some(&json!(5)),
        "ignored replicas are not reverted"
    );
    let app = env
        .wait_app(
            "ignore",
            "Synced with 5 replicas running",
            Duration::from_secs(30),
            synced_healthy,
        )
        .await?;
    let status = app.status.clone().unwrap_or_default();
    let deployment = status
        .resources
        .iter()
        .find(|r| r.kind == "Deployment")
        .expect("deployment in status");
    assert_eq!(
        deployment.status,
        SyncCode::Synced,
        "the scaled Deployment counts as Synced"
    );
    let web = env.get(v, k, p, "ignore", "web").await?.expect("deployment");
    assert_eq!(web.pointer("/spec/replicas"), Some(&json!(5)));

    // A field that is not ignored, on the Deployment itself, is drift: reverted at once.
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:drifted"}]}}}}),
            ),
        )
        .await?;
    eventually("image reverted by self-heal", Duration::from_secs(15), || async {
        let d = env.get(v, k, p, "ignore", "web").await?;
        Ok(d.and_then(|d| d.pointer("/spec/template/spec/containers/0/image").cloned()) == Some(json!("nginx")))
    })
    .await?;
    let reverted = env
        .wait_app("ignore", "Deployment re-applied", Duration::from_secs(15), |a| {
            op_phase(a) == "Succeeded"
                && history_len(a) > syncs + 1
                && operation(a).is_some_and(|o| o.resources.iter().any(|r| r.kind == "Deployment"))
        })
        .await?;
    assert_eq!(
        operation(&reverted).and_then(|o| o.operation).map(|o| o.initiated_by),
        Some("automated".to_string()),
        "reverted by self-heal"
    );
    env.wait_app("ignore", "Synced again", Duration::from_secs(30), synced_healthy)
        .await?;
    Ok(())
}

// What docs/sync.md documents: an IgnoreExtraneous object no longer in Git keeps the Application
// Synced, so no automated sync (and prune) follows; as in Argo CD this only affects the sync status,
// so a sync that prunes (here one a person asks for) deletes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ignore_extraneous_objects_keep_the_app_synced_until_a_sync_prunes_them() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("extra")?;
    let settings = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: blue}\n";
    let doomed = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: doomed}\ndata: {a: b}\n";
    let generated = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: generated\n  annotations: {capstan.dev/compare-options: IgnoreExtraneous}\ndata: {a: b}\n";
    let v1 = env.git.commit(
        "extra",
        "main",
        &[
            ("app/settings.yaml", Some(settings)),
            ("app/doomed.yaml", Some(doomed)),
            ("app/generated.yaml", Some(generated)),
        ],
        "v1",
    )?;
    env.create_app(app("extra", &env.git.git_url("extra"), "app", "extra", true))
        .await?;
    env.wait_app("extra", "Synced at v1", Duration::from_secs(90), |a| {
        synced_at(a, &v1) && synced_healthy(a) && op_phase(a) == "Succeeded"
    })
    .await?;
    let (cv, ck, cp) = CM_API;
    let generated_before = env
        .get(cv, ck, cp, "extra", "generated")
        .await?
        .expect("generated applied");

    // Automated prune works in this Application: an ordinary object removed from Git is pruned.
    let v2 = env
        .git
        .commit("extra", "main", &[("app/doomed.yaml", None)], "drop doomed")?;
    env.refresh("extra").await?;
    eventually("doomed pruned", Duration::from_secs(30), || async {
        Ok(env.get(cv, ck, cp, "extra", "doomed").await?.is_none())
    })
    .await?;
    let pruned = env
        .wait_app("extra", "Synced at v2", Duration::from_secs(30), |a| {
            synced_at(a, &v2) && op_phase(a) == "Succeeded"
        })
        .await?;
    assert_eq!(history_len(&pruned), 2);

    // An IgnoreExtraneous object removed from Git does not make the Application OutOfSync, so no
    // automated sync (and no prune) follows.
    let v3 = env
        .git
        .commit("extra", "main", &[("app/generated.yaml", None)], "drop generated")?;
    env.refresh("extra").await?;
    let app = env
        .wait_app("extra", "compared at v3", Duration::from_secs(30), |a| {
            a.status
                .as_ref()
                .and_then(|s| s.sync.as_ref())
                .is_some_and(|s| s.revision == v3)
        })
        .await?;
    assert_eq!(sync_of(&app), "Synced", "IgnoreExtraneous keeps the Application Synced");
    let status = app.status.clone().unwrap_or_default();
    let tracked = status
        .resources
        .iter()
        .find(|r| r.name == "generated")
        .expect("the extraneous object is still listed among the Application's resources");
    assert!(tracked.requires_pruning, "{tracked:?}");
    let op = operation(&app).expect("operation");
    assert_eq!(op.revision, v2, "no automated sync ran for v3");
    assert_eq!(history_len(&app), 2, "no automated sync ran for v3");
    let generated_after = env
        .get(cv, ck, cp, "extra", "generated")
        .await?
        .expect("generated is not pruned");
    assert_eq!(
        generated_after.pointer("/metadata/uid"),
        generated_before.pointer("/metadata/uid")
    );
    // A later reconcile (a refresh) does not change its mind.
    let reconciled = status.reconciled_at.clone();
    env.refresh("extra").await?;
    let again = env
        .wait_app("extra", "refreshed", Duration::from_secs(30), |a| {
            a.status.as_ref().map(|s| s.reconciled_at.clone()) != Some(reconciled.clone())
        })
        .await?;
    assert_eq!(sync_of(&again), "Synced");
    assert_eq!(history_len(&again), 2);
    assert!(env.get(cv, ck, cp, "extra", "generated").await?.is_some());

    // A sync with prune deletes it.
    env.request(
        "extra",
        json!({"sync": {"prune": true}, "initiatedBy": "test", "id": "prune-extraneous"}),
    )
    .await?;
    env.wait_app("extra", "pruning sync done", Duration::from_secs(30), |a| {
        operation(a).is_some_and(|o| o.phase == "Succeeded" && o.revision == v3)
    })
    .await?;
    assert!(
        env.get(cv, ck, cp, "extra", "generated").await?.is_none(),
        "a sync with prune deletes an IgnoreExtraneous object Git no longer has"
    );
    Ok(())
}

// Each event carries its own message: a second failed sync of an Application names what failed the
// second time (a shared `kube::runtime::events::Recorder` used to fold later events of the same type
// and reason into a series of the first one, keeping its message).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn operations_are_recorded_as_kubernetes_events() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("events")?;
    let settings = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: blue}\n";
    env.git
        .commit("events", "main", &[("app/settings.yaml", Some(settings))], "good")?;
    env.create_app(app("events", &env.git.git_url("events"), "app", "events", true))
        .await?;
    env.wait_app("events", "synced", Duration::from_secs(90), |a| {
        synced_healthy(a) && op_phase(a) == "Succeeded"
    })
    .await?;
    eventually(
        "OperationStarted and OperationSucceeded events",
        Duration::from_secs(15),
        || async {
            let events = app_events(&env, "events").await?;
            let reasons: Vec<String> = events.iter().filter_map(|e| e.reason.clone()).collect();
            Ok(reasons.iter().any(|r| r == "OperationStarted") && reasons.iter().any(|r| r == "OperationSucceeded"))
        },
    )
    .await?;
    let events = app_events(&env, "events").await?;
    let reason_of = |e: &Event| e.reason.clone().unwrap_or_default();
    let started = events
        .iter()
        .position(|e| reason_of(e) == "OperationStarted")
        .expect("started");
    let succeeded = events
        .iter()
        .position(|e| reason_of(e) == "OperationSucceeded")
        .expect("succeeded");
    assert!(started < succeeded, "{}", describe(&events));
    assert_eq!(events[started].type_.as_deref(), Some("Normal"));
    assert_eq!(events[succeeded].type_.as_deref(), Some("Normal"));
    assert!(
        !events.iter().any(|e| reason_of(e) == "OperationFailed"),
        "{}",
        describe(&events)
    );

    // An object the API server rejects: the sync fails, and a Warning event names the object.
    env.git.commit(
        "events",
        "main",
        &[("app/broken.yaml", Some(&rejected_config_map("broken")))],
        "broken",
    )?;
    env.refresh("events").await?;
    let failed = env
        .wait_app("events", "sync failed", Duration::from_secs(30), |a| {
            op_phase(a) == "Failed"
        })
        .await?;
    assert!(
        op_message(&failed).contains("ConfigMap/events/broken"),
        "{}",
        op_message(&failed)
    );
    let failure_named = |name: &'static str| {
        let env = &env;
        move || async move {
            let events = app_events(env, "events").await?;
            Ok(events.iter().any(|e| {
                e.reason.as_deref() == Some("OperationFailed")
                    && e.type_.as_deref() == Some("Warning")
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.contains(&format!("ConfigMap/events/{name}")) && n.contains("bad key"))
            }))
        }
    };
    if let Err(err) = eventually(
        "an OperationFailed event naming ConfigMap broken",
        Duration::from_secs(15),
        failure_named("broken"),
    )
    .await
    {
        anyhow::bail!("{err}; events:\n{}", describe(&app_events(&env, "events").await?));
    }

    // A second, different failure gets its own message: events must not repeat an older one.
    env.git.commit(
        "events",
        "main",
        &[
            ("app/broken.yaml", None),
            ("app/broken-two.yaml", Some(&rejected_config_map("broken-two"))),
        ],
        "broken two",
    )?;
    env.refresh("events").await?;
    env.wait_app("events", "second sync failed", Duration::from_secs(30), |a| {
        op_phase(a) == "Failed" && op_message(a).contains("ConfigMap/events/broken-two")
    })
    .await?;
    if let Err(err) = eventually(
        "an OperationFailed event naming ConfigMap broken-two",
        Duration::from_secs(15),
        failure_named("broken-two"),
    )
    .await
    {
        anyhow::bail!("{err}; events:\n{}", describe(&app_events(&env, "events").await?));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn render_path_and_repository_failures_leave_what_runs_untouched() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("steady")?;
    let settings = |color: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings}}\ndata: {{color: {color}}}\n")
    };
    let red = settings("red");
    env.git.commit(
        "steady",
        "main",
        &[
            ("app/settings.yaml", Some(&settings("blue"))),
            // A chart whose templates fail to render (one of them would change what runs).
            (
                "broken-chart/Chart.yaml",
                Some("apiVersion: v2\nname: broken\nversion: 0.1.0\n"),
            ),
            ("broken-chart/templates/settings.yaml", Some(&red)),
            (
                "broken-chart/templates/image.yaml",
                Some("image: {{ required \"a value for tag is required\" .Values.tag }}\n"),
            ),
            // A kustomization naming a file that does not exist.
            (
                "broken-kustomize/kustomization.yaml",
                Some("resources: [settings.yaml, not-there.yaml]\n"),
            ),
            ("broken-kustomize/settings.yaml", Some(&red)),
        ],
        "steady",
    )?;
    let good = app("steady", &env.git.git_url("steady"), "app", "steady", true);
    env.create_app(good.clone()).await?;
    env.wait_app("steady", "Synced and Healthy", Duration::from_secs(90), |a| {
        synced_healthy(a) && op_phase(a) == "Succeeded"
    })
    .await?;
    let (cv, ck, cp) = CM_API;
    let before = env.get(cv, ck, cp, "steady", "settings").await?.expect("settings");
    let port = free_port()?;
    let unreachable = format!("git://127.0.0.1:{port}/steady.git");
    let address = format!("127.0.0.1:{port}");

    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        (
            "a Helm template that fails",
            json!({"path": "broken-chart"}),
            // helm's own stderr
            vec!["execution error", "a value for tag is required"],
        ),
        (
            "a kustomization naming a missing file",
            json!({"path": "broken-kustomize"}),
            vec!["not-there.yaml"],
        ),
        (
            "a path that does not exist",
            json!({"path": "no/such/dir"}),
            vec!["no/such/dir"],
        ),
        (
            "an unreachable repository",
            json!({"repoURL": unreachable}),
            vec![&address],
        ),
    ];
    for (what, source, expected) in cases {
        let mut broken = good.clone();
        for (k, v) in source.as_object().expect("object") {
            broken["spec"]["source"][k] = v.clone();
        }
        env.create_app(broken).await?;
        let app = match env
            .wait_app(
                "steady",
                &format!("ComparisonError for {what}"),
                Duration::from_secs(30),
                |a| condition(a, "ComparisonError").is_some_and(|m| m.contains(expected[expected.len() - 1])),
            )
            .await
        {
            Ok(app) => app,
            Err(err) => anyhow::bail!("{what}: {err}"),
        };
        let message = condition(&app, "ComparisonError").unwrap_or_default();
        for part in &expected {
            assert!(
                message.contains(part),
                "{what}: the condition must say {part:?}: {message}"
            );
        }
        assert_eq!(sync_of(&app), "Unknown", "{what}");
        assert_eq!(history_len(&app), 1, "{what}: no sync ran");
        assert_eq!(
            op_phase(&app),
            "Succeeded",
            "{what}: the last operation is still the first sync"
        );
        let now = env
            .get(cv, ck, cp, "steady", "settings")
            .await?
            .expect("settings still there");
        assert_eq!(
            identity(&now),
            identity(&before),
            "{what}: the running object is untouched"
        );
    }

    // Back to a good source: the condition goes, and nothing needed to change.
    env.create_app(good).await?;
    let app = env
        .wait_app("steady", "recovered", Duration::from_secs(30), |a| {
            synced_healthy(a) && condition(a, "ComparisonError").is_none()
        })
        .await?;
    assert_eq!(history_len(&app), 1);
    let now = env.get(cv, ck, cp, "steady", "settings").await?.expect("settings");
    assert_eq!(identity(&now), identity(&before));
    Ok(())
}

// The backoff decides when a failed automated sync is retried: the reconcile is requeued for the
// remaining backoff (not a fixed 5 s), measured from a `finishedAt` with milliseconds (a time
// truncated to the second let a reconcile right after a failure late in a second retry at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failed_automated_syncs_are_retried_with_backoff_up_to_the_limit() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("retry")?;
    let settings = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: blue}\n";
    let sha = env.git.commit(
        "retry",
        "main",
        &[
            ("app/settings.yaml", Some(settings)),
            ("app/broken.yaml", Some(&rejected_config_map("broken"))),
        ],
        "broken",
    )?;
    let mut manifest = app("retry", &env.git.git_url("retry"), "app", "retry", true);
    manifest["spec"]["syncPolicy"]["retry"] =
        json!({"limit": 2, "backoff": {"duration": "1s", "factor": 2, "maxDuration": "5s"}});
    env.create_app(manifest).await?;

    // Watch the attempts: when each retryCount is first seen (the controller records an attempt as
    // Running before it runs it), and how each one ended.
    let mut first_seen: Vec<Instant> = Vec::new();
    let mut started: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(45);
    loop {
        let app = env.app("retry").await?;
        if let Some(op) = operation(&app).filter(|o| o.revision == sha) {
            let count = op.retry_count as usize;
            assert!(count <= 2, "retryCount {count} beyond the limit");
            if op.phase == "Failed" {
                assert!(op.message.contains("ConfigMap/retry/broken"), "{}", op.message);
            }
            // An attempt that came and went between two looks took no time at all after the one
            // before it.
            while first_seen.len() <= count {
                first_seen.push(Instant::now());
                started.push(op.started_at.clone());
            }
            if count == 2 && op.phase == "Failed" {
                break;
            }
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {} attempts seen; status: {:?}",
            first_seen.len(),
            app.status
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let gaps: Vec<Duration> = first_seen.windows(2).map(|w| w[1] - w[0]).collect();
    // Each retry waits for its backoff (1 s after the first attempt, 2 s after the second), and not
    // much longer. The attempts are seen by looking every 100 ms (plus a GET on a busy machine), so
    // a gap may look up to ~0.5 s shorter than it was; a retry at once would still be far below.
    for (i, gap) in gaps.iter().enumerate() {
        let backoff = Duration::from_secs(1 << i);
        assert!(
            *gap + Duration::from_millis(500) >= backoff,
            "retry {} came {gap:?} after the attempt before it, before its backoff of {backoff:?} (gaps: {gaps:?})",
            i + 1
        );
        assert!(
            *gap <= backoff + Duration::from_secs(2),
            "retry {} came {gap:?} after the attempt before it, although its backoff was {backoff:?} (gaps: {gaps:?})",
            i + 1
        );
    }
    assert!(gaps[1] > gaps[0], "the gaps between attempts grow: {gaps:?}");

    // The limit reached, nothing more is attempted, although the Application is reconciled again
    // (each refresh below) well after the longest backoff.
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        let before = env.app("retry").await?;
        let reconciled = before.status.as_ref().and_then(|s| s.reconciled_at.clone());
        env.refresh("retry").await?;
        let after = env
            .wait_app("retry", "refreshed", Duration::from_secs(15), |a| {
                a.status.as_ref().and_then(|s| s.reconciled_at.clone()) != reconciled
            })
            .await?;
        let op = operation(&after).expect("operation");
        assert_eq!((op.phase.as_str(), op.retry_count), ("Failed", 2));
        assert_eq!(&op.started_at, started.last().expect("attempts"), "no further attempt");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(())
}

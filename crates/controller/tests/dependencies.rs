//! End to end: dependencies between Applications (`spec.dependsOn`). A chain syncs in order after
//! one commit, judged from the recorded operation times; cycles and missing dependencies are
//! conditions; deletion runs in reverse order.

mod support;

use std::time::Duration;

use capstan_api::Application;
use futures::StreamExt;
use kube::ResourceExt;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use support::*;

fn config_map(name: &str, version: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{version: {version}}}\n")
}

fn depending(mut app: serde_json::Value, on: &[&str]) -> serde_json::Value {
    app["spec"]["dependsOn"] = json!(on.iter().map(|n| json!({"name": n})).collect::<Vec<_>>());
    app
}

/// The operation of `app`: (revision, phase, startedAt, finishedAt).
fn operation(app: &Application) -> (String, String, String, String) {
    let op = app
        .status
        .as_ref()
        .and_then(|s| s.operation_state.clone())
        .unwrap_or_default();
    (
        op.revision,
        op.phase.to_string(),
        op.started_at,
        op.finished_at.unwrap_or_default(),
    )
}

fn instant(text: &str) -> k8s_openapi::jiff::Timestamp {
    capstan_controller::clock::parse(text).unwrap_or_else(|| panic!("not a timestamp: {text:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_chain_of_three_syncs_in_order_after_one_commit() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("chain")?;
    let files = |v: &str| ["a", "b", "c"].map(|n| (format!("{n}/cm.yaml"), config_map(&format!("chain-{n}"), v)));
    let v1 = files("v1");
    env.git.commit(
        "chain",
        "main",
        &v1.iter()
            .map(|(p, c)| (p.as_str(), Some(c.as_str())))
            .collect::<Vec<_>>(),
        "v1",
    )?;
    let repo = env.git.git_url("chain");
    // Created dependents first: C and B wait for what they depend on even at their first sync.
    env.create_app(depending(app("chain-c", &repo, "c", "dep-chain-c", true), &["chain-b"]))
        .await?;
    env.create_app(depending(app("chain-b", &repo, "b", "dep-chain-b", true), &["chain-a"]))
        .await?;
    env.create_app(app("chain-a", &repo, "a", "dep-chain-a", true)).await?;
    for name in ["chain-a", "chain-b", "chain-c"] {
        env.wait_app(name, "synced at v1", Duration::from_secs(90), |a| {
            synced_healthy(a) && op_phase(a) == "Succeeded"
        })
        .await?;
    }
    let first: Vec<_> = [
        env.app("chain-a").await?,
        env.app("chain-b").await?,
        env.app("chain-c").await?,
    ]
    .iter()
    .map(operation)
    .collect();
    assert!(
        instant(&first[1].2) >= instant(&first[0].3),
        "B started after A finished: {first:?}"
    );
    assert!(
        instant(&first[2].2) >= instant(&first[1].3),
        "C started after B finished: {first:?}"
    );

    // One commit changes all three; all three are told at once.
    let v2 = files("v2");
    let sha = env.git.commit(
        "chain",
        "main",
        &v2.iter()
            .map(|(p, c)| (p.as_str(), Some(c.as_str())))
            .collect::<Vec<_>>(),
        "v2",
    )?;
    for name in ["chain-c", "chain-b", "chain-a"] {
        env.refresh(name).await?;
    }
    let mut ops = Vec::new();
    for name in ["chain-a", "chain-b", "chain-c"] {
        let a = env
            .wait_app(name, "synced at v2", Duration::from_secs(90), |a| {
                let (revision, phase, _, _) = operation(a);
                revision == sha && phase == "Succeeded" && synced_healthy(a)
            })
            .await?;
        ops.push(operation(&a));
    }
    assert!(
        instant(&ops[1].2) >= instant(&ops[0].3),
        "B started after A finished: {ops:?}"
    );
    assert!(
        instant(&ops[2].2) >= instant(&ops[1].3),
        "C started after B finished: {ops:?}"
    );
    for n in ["a", "b", "c"] {
        let cm = env
            .get(
                CM_API.0,
                CM_API.1,
                CM_API.2,
                &format!("dep-chain-{n}"),
                &format!("chain-{n}"),
            )
            .await?
            .expect("config map");
        assert_eq!(cm["data"]["version"], "v2");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cycles_and_missing_dependencies_are_named_and_nothing_syncs() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("cycle")?;
    env.git.commit(
        "cycle",
        "main",
        &[
            ("x/cm.yaml", Some(config_map("cyc-x", "v1").as_str())),
            ("y/cm.yaml", Some(config_map("cyc-y", "v1").as_str())),
            ("z/cm.yaml", Some(config_map("cyc-z", "v1").as_str())),
            ("m/cm.yaml", Some(config_map("cyc-m", "v1").as_str())),
        ],
        "v1",
    )?;
    let repo = env.git.git_url("cycle");
    env.create_app(depending(app("cyc-x", &repo, "x", "dep-cyc-x", true), &["cyc-y"]))
        .await?;
    env.create_app(depending(app("cyc-y", &repo, "y", "dep-cyc-y", true), &["cyc-z"]))
        .await?;
    env.create_app(depending(app("cyc-z", &repo, "z", "dep-cyc-z", true), &["cyc-x"]))
        .await?;
    env.create_app(depending(app("cyc-m", &repo, "m", "dep-cyc-m", true), &["cyc-ghost"]))
        .await?;
    for (name, path) in [
        ("cyc-x", "cyc-x -> cyc-y -> cyc-z -> cyc-x"),
        ("cyc-y", "cyc-y -> cyc-z -> cyc-x -> cyc-y"),
        ("cyc-z", "cyc-z -> cyc-x -> cyc-y -> cyc-z"),
    ] {
        let a = env
            .wait_app(name, "the cycle named", Duration::from_secs(60), |a| {
                condition(a, "DependencyError").is_some()
            })
            .await?;
        assert_eq!(
            condition(&a, "DependencyError").as_deref(),
            Some(format!("dependency cycle: {path}").as_str())
        );
        assert_eq!(op_phase(&a), "", "no sync started");
    }
    let m = env
        .wait_app("cyc-m", "the missing dependency named", Duration::from_secs(60), |a| {
            condition(a, "DependencyError").is_some()
        })
        .await?;
    let message = condition(&m, "DependencyError").unwrap_or_default();
    assert!(message.contains("dependency cyc-ghost not found"), "{message}");
    assert_eq!(op_phase(&m), "", "no sync started");
    assert!(
        m.status_message().contains("cyc-ghost"),
        "app list shows it: {}",
        m.status_message()
    );
    assert!(
        env.get(CM_API.0, CM_API.1, CM_API.2, "dep-cyc-m", "cyc-m")
            .await?
            .is_none(),
        "nothing applied"
    );
    // A manual sync is refused too, with the reason.
    env.request("cyc-m", json!({"sync": {}, "initiatedBy": "test", "id": "r1"}))
        .await?;
    let m = env
        .wait_app("cyc-m", "the request refused", Duration::from_secs(60), |a| {
            op_phase(a) == "Failed"
        })
        .await?;
    assert!(op_message(&m).contains("cyc-ghost"), "{}", op_message(&m));
    // The missing Application appears: the dependent syncs after it.
    env.create_app(app("cyc-ghost", &repo, "x", "dep-cyc-ghost", true))
        .await?;
    env.wait_app("cyc-m", "synced once its dependency is", Duration::from_secs(90), |a| {
        synced_healthy(a) && op_phase(a) == "Succeeded" && condition(a, "DependencyError").is_none()
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deletion_runs_in_reverse_dependency_order() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("del")?;
    env.git.commit(
        "del",
        "main",
        &[
            ("a/cm.yaml", Some(config_map("del-a", "v1").as_str())),
            ("b/cm.yaml", Some(config_map("del-b", "v1").as_str())),
        ],
        "v1",
    )?;
    let repo = env.git.git_url("del");
    let finalized = |mut v: serde_json::Value| {
        v["metadata"]["finalizers"] = json!(["capstan.dev/resources-finalizer"]);
        v
    };
    env.create_app(finalized(app("del-a", &repo, "a", "dep-del-a", true)))
        .await?;
    env.create_app(finalized(depending(
        app("del-b", &repo, "b", "dep-del-b", true),
        &["del-a"],
    )))
    .await?;
    for name in ["del-a", "del-b"] {
        env.wait_app(name, "synced", Duration::from_secs(90), |a| {
            synced_healthy(a) && op_phase(a) == "Succeeded"
        })
        .await?;
    }
    // Record the order in which the Applications go.
    let (gone_tx, mut gone_rx) = tokio::sync::mpsc::unbounded_channel();
    let watch = {
        let apps = env.apps.clone();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(watcher(apps, watcher::Config::default()).default_backoff());
            while let Some(Ok(event)) = stream.next().await {
                if let watcher::Event::Delete(a) = event {
                    let _ = gone_tx.send(a.name_any());
                }
            }
        })
    };
    // The dependency is deleted first: it waits for its dependent, and says so.
    env.apps.delete("del-a", &Default::default()).await?;
    let a = env
        .wait_app("del-a", "waiting for its dependent", Duration::from_secs(60), |a| {
            condition(a, "DeletionWaiting").is_some()
        })
        .await?;
    assert!(
        condition(&a, "DeletionWaiting").unwrap_or_default().contains("del-b"),
        "{:?}",
        condition(&a, "DeletionWaiting")
    );
    assert!(
        env.get(CM_API.0, CM_API.1, CM_API.2, "dep-del-a", "del-a")
            .await?
            .is_some(),
        "its objects stay while the dependent exists"
    );
    env.apps.delete("del-b", &Default::default()).await?;
    let first = tokio::time::timeout(Duration::from_secs(60), gone_rx.recv()).await?;
    let second = tokio::time::timeout(Duration::from_secs(60), gone_rx.recv()).await?;
    watch.abort();
    assert_eq!((first.as_deref(), second.as_deref()), (Some("del-b"), Some("del-a")));
    assert!(
        env.get(CM_API.0, CM_API.1, CM_API.2, "dep-del-a", "del-a")
            .await?
            .is_none()
    );
    assert!(
        env.get(CM_API.0, CM_API.1, CM_API.2, "dep-del-b", "del-b")
            .await?
            .is_none()
    );
    Ok(())
}

//! End to end: the project's deletion budget. A commit removes 50 objects from an Application with
//! automated prune; the project allows 10 per sync, so the sync stops before applying or deleting
//! anything, says why in a condition and an Event, and waits. A person's sync with
//! `allowDeletions` prunes them; the condition clears.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{Api, ListParams};
use serde_json::json;
use support::*;

fn many(n: usize) -> String {
    (0..n)
        .map(|i| format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: item-{i:02}}}\ndata: {{i: '{i}'}}\n"))
        .collect::<Vec<_>>()
        .join("---\n")
}

const KEEP: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: keep}\ndata: {v: '1'}\n";
const KEEP_2: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: keep}\ndata: {v: '2'}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_commit_deleting_fifty_objects_stops_at_the_budget_until_confirmed() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    let dest = "deletion-budget-e2e";
    env.git.create_repo("mass")?;
    env.git.commit(
        "mass",
        "main",
        &[("app/keep.yaml", Some(KEEP)), ("app/many.yaml", Some(&many(50)))],
        "51 objects",
    )?;
    env.apply_project(
        "guarded",
        json!({
            "sourceRepos": ["*"],
            "destinations": [{"server": "*", "namespace": "*"}],
            "clusterResourceWhitelist": [{"group": "", "kind": "Namespace"}],
            "deletionBudget": {"maxObjects": 10, "maxPercent": 50},
        }),
    )
    .await?;
    let mut manifest = app("mass", &env.git.git_url("mass"), "app", dest, true);
    manifest["spec"]["project"] = json!("guarded");
    env.create_app(manifest).await?;
    env.wait_app("mass", "Synced and Healthy", Duration::from_secs(120), synced_healthy)
        .await?;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), dest);
    let count = |list: &[ConfigMap]| {
        list.iter()
            .filter(|c| c.metadata.name.as_deref().is_some_and(|n| n.starts_with("item-")))
            .count()
    };
    assert_eq!(count(&cms.list(&ListParams::default()).await?.items), 50);

    // The 50 leave Git, and the kept object changes: the automated sync stops at the budget, and
    // nothing of it is applied (the change to `keep` neither).
    env.git.commit(
        "mass",
        "main",
        &[("app/many.yaml", None), ("app/keep.yaml", Some(KEEP_2))],
        "remove the 50",
    )?;
    env.refresh("mass").await?;
    let held = env
        .wait_app("mass", "the budget condition", Duration::from_secs(90), |a| {
            condition(a, "DeletionBudgetExceeded").is_some()
        })
        .await?;
    let message = condition(&held, "DeletionBudgetExceeded").unwrap_or_default();
    assert!(
        message.contains("would prune 50 objects")
            && message.contains("maxObjects 10")
            && message.contains("maxPercent 50 of 51 tracked objects")
            && message.contains("capstan app sync mass --allow-deletions"),
        "{message}"
    );
    assert_eq!(op_phase(&held), "Failed");
    assert_eq!(
        count(&cms.list(&ListParams::default()).await?.items),
        50,
        "nothing pruned"
    );
    let keep = cms.get("keep").await?;
    assert_eq!(
        keep.data.unwrap_or_default().get("v").map(String::as_str),
        Some("1"),
        "nothing applied"
    );
    let events: Api<Event> = Api::namespaced(env.client.clone(), &env.ns);
    let events = events
        .list(&ListParams::default().fields("involvedObject.name=mass"))
        .await?
        .items;
    assert!(
        events
            .iter()
            .any(|e| e.message.as_deref().is_some_and(|m| m.contains("deletion budget"))),
        "an Event says why"
    );

    // A person confirms.
    env.request(
        "mass",
        json!({"sync": {"prune": true, "allowDeletions": true}, "initiatedBy": "test"}),
    )
    .await?;
    let done = env
        .wait_app("mass", "the confirmed sync", Duration::from_secs(120), |a| {
            op_phase(a) == "Succeeded" && sync_of(a) == "Synced"
        })
        .await?;
    assert_eq!(condition(&done, "DeletionBudgetExceeded"), None);
    assert_eq!(
        count(&cms.list(&ListParams::default()).await?.items),
        0,
        "the 50 pruned"
    );
    let keep = cms.get("keep").await?;
    assert_eq!(keep.data.unwrap_or_default().get("v").map(String::as_str), Some("2"));
    Ok(())
}

//! The watches tell the echoes of Capstan's own writes from changes made by others: a sync's applies
//! trigger no further reconcile, while a change by someone else is noticed and reverted.
//!
//! Its own test binary: the counts come from the process-wide metrics. And its own control plane:
//! the controller's watches see every tracked object of the cluster, whichever Application and
//! namespace it belongs to, so on a shared plane the syncs of other tests would count as changes by
//! someone else.

mod support;

use std::time::Duration;

use capstan_metrics::ChangeLabels;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use support::*;

fn changes(origin: &str) -> u64 {
    capstan_metrics::global()
        .managed_object_changes
        .get_or_create(&ChangeLabels { origin: origin.into() })
        .get()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_echoes_of_a_syncs_own_writes_are_told_from_changes_by_others() -> anyhow::Result<()> {
    let env = Env::start().await?;
    env.git.create_repo("echo")?;
    let files: Vec<(String, String)> = (0..20)
        .map(|i| {
            (
                format!("app/cm-{i:02}.yaml"),
                format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i:02}}}\ndata: {{value: v1}}\n"),
            )
        })
        .collect();
    let first: Vec<(&str, Option<&str>)> = files.iter().map(|(p, c)| (p.as_str(), Some(c.as_str()))).collect();
    env.git.commit("echo", "main", &first, "v1")?;
    env.create_app(app("echo", &env.git.git_url("echo"), "app", "echo", true))
        .await?;
    env.wait_app("echo", "Synced and Healthy", Duration::from_secs(60), synced_healthy)
        .await?;

    // A second sync writes all 20 again (a new commit changes every one of them).
    let second: Vec<(String, String)> = files
        .iter()
        .map(|(p, c)| (p.clone(), c.replace("value: v1", "value: v2")))
        .collect();
    let second_files: Vec<(&str, Option<&str>)> = second.iter().map(|(p, c)| (p.as_str(), Some(c.as_str()))).collect();
    let (own_before, others_before) = (changes("capstan"), changes("other"));
    let v2 = env.git.commit("echo", "main", &second_files, "v2")?;
    env.refresh("echo").await?;
    env.wait_app("echo", "synced at v2", Duration::from_secs(60), |a| {
        synced_healthy(a)
            && a.status
                .as_ref()
                .and_then(|s| s.operation_state.as_ref())
                .is_some_and(|o| o.phase == "Succeeded" && o.revision == v2)
    })
    .await?;
    let (cv, ck, cp) = CM_API;
    eventually("every write's watch event seen", Duration::from_secs(10), || async {
        Ok(changes("capstan") + changes("other") >= own_before + others_before + 20)
    })
    .await?;
    let own = changes("capstan") - own_before;
    let others = changes("other") - others_before;
    // Every echo is told apart, also one that arrives before its write's answer (the operation
    // holds the changes to its objects until it ends).
    assert!(
        own >= 20,
        "all 20 writes were recognised as Capstan's own: {own} own, {others} other"
    );
    assert_eq!(others, 0, "{own} own, {others} other");

    // A change by someone else is one, and self-heal reverts it.
    let others_before = changes("other");
    env.api(cv, ck, cp, Some("echo"))
        .patch(
            "cm-07",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"value": "drift"}})),
        )
        .await?;
    eventually("the drift reverted", Duration::from_secs(10), || async {
        let cm = env.get(cv, ck, cp, "echo", "cm-07").await?;
        Ok(cm.and_then(|c| c.pointer("/data/value").cloned()) == Some(json!("v2")))
    })
    .await?;
    assert!(
        changes("other") > others_before,
        "the drift counts as a change by someone else"
    );
    Ok(())
}

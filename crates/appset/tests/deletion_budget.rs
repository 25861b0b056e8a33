//! Mass deletion guarded, end to end with both controllers on a real API server: an
//! ApplicationSet whose list shrinks past `syncPolicy.deletionBudget` deletes nothing until a
//! person confirms with the annotation (which is then spent), and one whose git generator's
//! repository becomes unreadable deletes nothing at all.

mod support;

use std::time::Duration;

use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use support::*;

/// A set of Applications named `keep-<name>` rendering nothing, so no namespace is needed.
fn set(name: &str, generator: Value, budget: Value) -> Value {
    json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "ApplicationSet",
        "metadata": {"name": name, "namespace": "capstan"},
        "spec": {
            "generators": [generator],
            "syncPolicy": {"deletionBudget": budget},
            "template": {
                "metadata": {"name": format!("{name}-{{{{name}}}}")},
                "spec": {
                    "project": "default",
                    "source": {"repoURL": "file:///nowhere", "targetRevision": "main", "path": "."},
                    "destination": {"server": "https://kubernetes.default.svc", "namespace": "budget"},
                },
            },
        },
    })
}

fn list(names: &[&str]) -> Value {
    let elements: Vec<Value> = names.iter().map(|n| json!({"name": n})).collect();
    json!({"list": {"elements": elements}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pass_over_the_deletion_budget_deletes_nothing_until_confirmed() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    let five = ["a", "b", "c", "d", "e"];
    env.apply_set(&set("fleet", list(&five), json!({"maxApplications": 2})))
        .await?;
    env.wait_set("fleet", "five generated", Duration::from_secs(60), up_to_date)
        .await?;
    assert_eq!(
        env.app_names().await?,
        ["fleet-a", "fleet-b", "fleet-c", "fleet-d", "fleet-e"]
    );

    // Four of five gone from the list: over the budget of 2, nothing is deleted.
    env.apply_set(&set("fleet", list(&["a"]), json!({"maxApplications": 2})))
        .await?;
    let held = env
        .wait_set("fleet", "deletions held", Duration::from_secs(60), |s| {
            condition(s, "DeletionBudgetExceeded").is_some_and(|(status, _, _)| status == "True")
        })
        .await?;
    let (_, reason, message) = condition(&held, "DeletionBudgetExceeded").unwrap_or_default();
    assert_eq!(reason, "DeletionBudgetExceeded");
    assert!(
        message.contains("would delete 4 Applications") && message.contains("maxApplications 2"),
        "{message}"
    );
    assert_eq!(env.app_names().await?.len(), 5, "nothing deleted");
    let events = env.events_about("fleet").await?;
    assert!(
        events.iter().any(|e| e.contains("DeletionBudgetExceeded")),
        "{events:?}"
    );
    // A look again still deletes nothing (the positive signal: the refresh was handled).
    env.refresh_set_and_wait("fleet").await?;
    assert_eq!(env.app_names().await?.len(), 5, "still nothing deleted");

    // A person confirms: the four go, the confirmation is spent, the condition clears.
    let confirm = json!({"metadata": {"annotations": {"capstan.dev/allow-deletions": "true"}}});
    env.sets
        .patch("fleet", &PatchParams::default(), &Patch::Merge(confirm))
        .await?;
    for name in ["fleet-b", "fleet-c", "fleet-d", "fleet-e"] {
        env.wait_gone(name, Duration::from_secs(60)).await?;
    }
    let after = env
        .wait_set("fleet", "confirmation spent", Duration::from_secs(30), |s| {
            !s.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key("capstan.dev/allow-deletions"))
        })
        .await?;
    assert_eq!(env.app_names().await?, ["fleet-a"]);
    let after = env
        .refresh_set_and_wait(&after.metadata.name.unwrap_or_default())
        .await?;
    assert!(
        condition(&after, "DeletionBudgetExceeded").is_none(),
        "{:?}",
        after.status
    );

    // Within the budget (percent of what the set owns), deletions need no confirmation.
    env.apply_set(&set("small", list(&["a", "b", "c", "d"]), json!({"maxPercent": 50})))
        .await?;
    env.wait_set("small", "four generated", Duration::from_secs(60), up_to_date)
        .await?;
    env.apply_set(&set("small", list(&["a", "b", "c"]), json!({"maxPercent": 50})))
        .await?;
    env.wait_gone("small-d", Duration::from_secs(60)).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_git_generator_whose_repository_becomes_unreadable_deletes_nothing() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("services")?;
    env.git.commit(
        "services",
        "main",
        &[
            ("services/orders/config.yaml", Some("name: orders\n")),
            ("services/billing/config.yaml", Some("name: billing\n")),
            ("services/search/config.yaml", Some("name: search\n")),
        ],
        "three services",
    )?;
    let url = env.git.git_url("services");
    let generator = json!({"git": {"repoURL": url, "revision": "main", "files": [{"path": "services/*/config.yaml"}]}});
    env.apply_set(&set("svc", generator, json!({}))).await?;
    env.wait_set("svc", "three generated", Duration::from_secs(60), up_to_date)
        .await?;
    assert_eq!(env.app_names().await?, ["svc-billing", "svc-orders", "svc-search"]);

    // The repository disappears from the server: the generator cannot read it.
    std::fs::remove_dir_all(env.git.repo_path("services"))?;
    // A forced look (the refresh asks the remote again), handled: the positive signal.
    let failed = env.refresh_set_and_wait("svc").await?;
    let (status, _, message) = condition(&failed, "ErrorOccurred").unwrap_or_default();
    assert_eq!(status, "True", "{message}");
    assert!(message.contains("services"), "{message}");
    assert_eq!(
        env.app_names().await?,
        ["svc-billing", "svc-orders", "svc-search"],
        "nothing deleted"
    );
    Ok(())
}

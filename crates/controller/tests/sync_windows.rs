//! End to end: AppProject sync windows. A deny window holds an automated sync (the condition says
//! which window and when a sync may run; the live object stays as it was); a manual sync runs when
//! the window has `manualSync: true` and is refused when it has not; a window that does not parse is
//! a condition naming the project and the window.

mod support;

use std::time::Duration;

use serde_json::json;
use support::*;

fn config_map(version: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: frozen}}\ndata: {{version: {version}}}\n")
}

fn project(env: &Env, windows: serde_json::Value) -> serde_json::Value {
    json!({
        "sourceRepos": [env.git.git_url("windows")],
        "destinations": [{"server": "*", "namespace": "win-*"}],
        "clusterResourceWhitelist": [{"group": "", "kind": "Namespace"}],
        "syncWindows": windows,
    })
}

async fn live_version(env: &Env) -> anyhow::Result<String> {
    live_version_in(env, "win-frozen").await
}

async fn live_version_in(env: &Env, namespace: &str) -> anyhow::Result<String> {
    let cm = env.get(CM_API.0, CM_API.1, CM_API.2, namespace, "frozen").await?;
    Ok(cm
        .and_then(|c| c["data"]["version"].as_str().map(str::to_string))
        .unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deny_window_holds_automated_syncs_and_manual_sync_follows_manual_sync() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("windows")?;
    env.git.commit(
        "windows",
        "main",
        &[("app/cm.yaml", Some(config_map("v1").as_str()))],
        "v1",
    )?;
    env.apply_project("frozen", project(&env, json!([]))).await?;
    let mut manifest = app("frozen", &env.git.git_url("windows"), "app", "win-frozen", true);
    manifest["spec"]["project"] = json!("frozen");
    env.create_app(manifest).await?;
    env.wait_app("frozen", "synced at v1", Duration::from_secs(90), |a| {
        synced_healthy(a) && op_phase(a) == "Succeeded"
    })
    .await?;

    // A deny window that is always active (starts every minute, lasts an hour).
    let deny = json!([{"kind": "deny", "schedule": "* * * * *", "duration": "1h", "applications": ["fro*"]}]);
    env.apply_project("frozen", project(&env, deny)).await?;
    let sha = env.git.commit(
        "windows",
        "main",
        &[("app/cm.yaml", Some(config_map("v2").as_str()))],
        "v2",
    )?;
    env.refresh("frozen").await?;
    let held = env
        .wait_app("frozen", "the window holding the sync", Duration::from_secs(60), |a| {
            condition(a, "SyncWindowBlocked").is_some()
        })
        .await?;
    let message = condition(&held, "SyncWindowBlocked").unwrap_or_default();
    assert!(
        message.contains("deny window syncWindows[0] active") && message.contains("\"frozen\""),
        "{message}"
    );
    assert!(message.contains("no sync may run within a year"), "{message}");
    assert_eq!(sync_of(&held), "OutOfSync");
    assert_eq!(
        held.status
            .as_ref()
            .and_then(|s| s.sync.as_ref())
            .map(|s| s.revision.clone()),
        Some(sha.clone())
    );
    assert_ne!(
        held.status
            .as_ref()
            .and_then(|s| s.operation_state.as_ref())
            .map(|o| o.revision.clone()),
        Some(sha.clone()),
        "no sync of v2 ran"
    );
    assert_eq!(live_version(&env).await?, "v1", "the live object is unchanged");

    // A manual sync while the window does not allow manual syncs: refused, nothing changes.
    env.request("frozen", json!({"sync": {}, "initiatedBy": "test", "id": "m1"}))
        .await?;
    let refused = env
        .wait_app("frozen", "the manual sync refused", Duration::from_secs(60), |a| {
            op_phase(a) == "Failed"
        })
        .await?;
    assert!(
        op_message(&refused).contains("deny window syncWindows[0]"),
        "{}",
        op_message(&refused)
    );
    assert_eq!(live_version(&env).await?, "v1");

    // With manualSync: a manual sync goes through; automated syncs still wait.
    let manual = json!([{"kind": "deny", "schedule": "* * * * *", "duration": "1h", "applications": ["fro*"], "manualSync": true}]);
    env.apply_project("frozen", project(&env, manual)).await?;
    env.request("frozen", json!({"sync": {}, "initiatedBy": "test", "id": "m2"}))
        .await?;
    env.wait_app("frozen", "the manual sync ran", Duration::from_secs(60), |a| {
        op_phase(a) == "Succeeded"
            && a.status
                .as_ref()
                .and_then(|s| s.operation_state.as_ref())
                .is_some_and(|o| o.revision == sha)
    })
    .await?;
    assert_eq!(live_version(&env).await?, "v2");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_window_that_does_not_parse_is_a_condition_naming_it() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("windows")?;
    env.git.commit(
        "windows",
        "main",
        &[("app/cm.yaml", Some(config_map("v1").as_str()))],
        "v1",
    )?;
    let bad = json!([
        {"kind": "allow", "schedule": "0 9 * * 1-5", "duration": "8h", "namespaces": ["win-*"]},
        {"kind": "deny", "schedule": "0 22 * * *", "duration": "1h", "namespaces": ["win-*"], "timeZone": "Mars/Olympus"},
    ]);
    env.apply_project("broken", project(&env, bad)).await?;
    let mut manifest = app("broken", &env.git.git_url("windows"), "app", "win-broken", true);
    manifest["spec"]["project"] = json!("broken");
    env.create_app(manifest).await?;
    let a = env
        .wait_app("broken", "the bad window reported", Duration::from_secs(60), |a| {
            condition(a, "SyncWindowError").is_some()
        })
        .await?;
    let message = condition(&a, "SyncWindowError").unwrap_or_default();
    assert!(
        message.contains("project \"broken\"") && message.contains("syncWindows[1]: timeZone \"Mars/Olympus\""),
        "{message}"
    );
    assert_eq!(op_phase(&a), "", "nothing synced");
    assert!(
        env.get(CM_API.0, CM_API.1, CM_API.2, "win-broken", "frozen")
            .await?
            .is_none()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_end_of_a_window_wakes_the_application() -> anyhow::Result<()> {
    use k8s_openapi::jiff::Timestamp;
    let mut env = Env::shared().await?;
    // The controller's clock reads 10:59:30 UTC now and moves on; the deny window ends at 11:00.
    let shown: Timestamp = "2026-06-01T10:59:30Z".parse()?;
    let offset = shown.duration_since(Timestamp::now());
    env.kill_controller().await;
    env.clock = capstan_controller::clock::Clock::from_fn(move || Timestamp::now() + offset);
    env.start_controller();
    env.git.create_repo("windows")?;
    env.git.commit(
        "windows",
        "main",
        &[("app/cm.yaml", Some(config_map("v1").as_str()))],
        "v1",
    )?;
    let deny = json!([{"kind": "deny", "schedule": "0 10 * * *", "duration": "1h", "applications": ["waking"]}]);
    env.apply_project("waking", project(&env, deny)).await?;
    let mut manifest = app("waking", &env.git.git_url("windows"), "app", "win-waking", true);
    manifest["spec"]["project"] = json!("waking");
    env.create_app(manifest).await?;
    let held = env
        .wait_app("waking", "the window holding the sync", Duration::from_secs(25), |a| {
            condition(a, "SyncWindowBlocked").is_some()
        })
        .await?;
    let message = condition(&held, "SyncWindowBlocked").unwrap_or_default();
    assert!(
        message.contains("next sync may run at 2026-06-01T11:00:00Z"),
        "{message}"
    );
    assert_eq!(op_phase(&held), "");
    // No refresh, and the poll is minutes away: the window's end itself wakes the Application.
    env.wait_app("waking", "synced once the window ended", Duration::from_secs(60), |a| {
        op_phase(a) == "Succeeded" && condition(a, "SyncWindowBlocked").is_none()
    })
    .await?;
    assert_eq!(live_version_in(&env, "win-waking").await?, "v1");
    Ok(())
}

//! What the rollback-by-revert tests share: the Application `web`'s ConfigMap at a colour, the head
//! of the bare repository's `main`, and waiting until a colour is deployed at that head.

use std::path::Path;
use std::time::{Duration, Instant};

use capstan_api::Application;
use capstan_testkit::capstan::sync_of;
use capstan_testkit::run_git;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

/// The ConfigMap `web` with `data.color`.
pub fn config_map(color: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: web}}\ndata: {{color: {color}}}\n")
}

/// The commit `main` points at in `bare`.
pub fn head(bare: &Path) -> String {
    run_git(bare, &["rev-parse", "refs/heads/main"]).expect("rev-parse")
}

/// Wait (at most 120 s) until the Application `web` is Synced at the branch head and the live
/// ConfigMap's color is `color`.
pub async fn wait_deployed(apps: &Api<Application>, cms: &Api<ConfigMap>, bare: &Path, color: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let app = apps.get_opt("web").await.ok().flatten();
        let revision = app
            .as_ref()
            .and_then(|a| a.status.as_ref())
            .and_then(|s| s.sync.as_ref())
            .map(|s| s.revision.clone())
            .unwrap_or_default();
        let live = cms
            .get_opt("web")
            .await
            .ok()
            .flatten()
            .and_then(|c| c.data)
            .and_then(|d| d.get("color").cloned())
            .unwrap_or_default();
        let synced = app.as_ref().is_some_and(|a| sync_of(a) == "Synced");
        if synced && revision == head(bare) && live == color {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for color {color}: live {live:?}, revision {revision}, synced {synced}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

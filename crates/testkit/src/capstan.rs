//! Capstan on a test cluster: installing its CRDs and namespace, waiting for conditions, and reading
//! an Application's status in one call.

use std::future::Future;
use std::time::{Duration, Instant};

use capstan_api::Application;
use capstan_api::status::{HealthCode, SyncCode};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

/// Install the CRDs and the `capstan` namespace, as `capstan install` does, and wait until the CRDs
/// are established.
pub async fn install(client: &kube::Client) -> anyhow::Result<()> {
    let pp = PatchParams::apply("test").force();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (_, crd) in capstan_api::crd::all() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(&name, &pp, &Patch::Apply(&crd)).await?;
        eventually("CRD established", Duration::from_secs(30), || async {
            let c = crds.get(&name).await?;
            Ok(c.status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True"))
        })
        .await?;
    }
    let ns: Api<Namespace> = Api::all(client.clone());
    ns.patch(
        capstan_api::NAMESPACE,
        &pp,
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": capstan_api::NAMESPACE}})),
    )
    .await?;
    Ok(())
}

/// Create the namespace `name` (server-side apply: nothing happens when it exists).
pub async fn create_namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let ns: Api<Namespace> = Api::all(client.clone());
    ns.patch(
        name,
        &PatchParams::apply("test").force(),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})),
    )
    .await?;
    Ok(())
}

/// A namespace name no other test of this test run uses, for a test's Applications on a shared
/// control plane: `capstan-` plus the process id, a counter (tests of one binary run in separate
/// processes under nextest and in one process under `cargo test`) and the clock's nanoseconds,
/// since process ids are reused during a long run and the plane outlives the processes.
pub fn unique_namespace() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("capstan-{}-{n}-{nanos:x}", std::process::id())
}

/// `status.reconciledAt`: when the controller last reconciled the Application.
pub fn reconciled_at(app: &Application) -> Option<String> {
    app.status.as_ref().and_then(|s| s.reconciled_at.clone())
}

/// Whether `app` shows a refresh handled since its `reconciledAt` was `before`: the refresh
/// annotation is gone and `reconciledAt` moved (the positive signal that the controller looked).
pub fn refresh_handled_since(app: &Application, before: &Option<String>) -> bool {
    let refreshing = app
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|m| m.contains_key(capstan_api::labels::REFRESH_ANNOTATION));
    let now = reconciled_at(app);
    !refreshing && now.is_some() && now != *before
}

/// Poll `check` every 200 ms until it returns true, failing after `timeout`.
pub async fn eventually<F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if check().await? {
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `status.sync.status` as spelt in the API (empty before the first comparison): tests compare it
/// with the words a user reads.
pub fn sync_of(app: &Application) -> String {
    app.status
        .as_ref()
        .and_then(|s| s.sync.as_ref())
        .map(|s| s.status.to_string())
        .unwrap_or_default()
}

/// `status.health.status` as spelt in the API (empty before the first comparison).
pub fn health_of(app: &Application) -> String {
    app.status
        .as_ref()
        .and_then(|s| s.health.as_ref())
        .map(|h| h.status.to_string())
        .unwrap_or_default()
}

/// Synced and Healthy.
pub fn synced_healthy(app: &Application) -> bool {
    let status = app.status.as_ref();
    status
        .and_then(|s| s.sync.as_ref())
        .is_some_and(|s| s.status == SyncCode::Synced)
        && status
            .and_then(|s| s.health.as_ref())
            .is_some_and(|h| h.status == HealthCode::Healthy)
}

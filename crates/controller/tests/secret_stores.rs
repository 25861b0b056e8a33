//! End to end: Secrets whose values come from a real OpenBao (`bao server -dev`), resolved by the
//! in-process controller on every pass. A value reaches the cluster and a rotated one follows a
//! refresh; every kind of failure (missing path or key, a policy refusing the path, a sealed or
//! unreachable store, a store the project does not permit, a missing store Secret) fails the pass
//! naming the Secret, the key and the store, and nothing of that sync is applied; Kubernetes auth
//! with a service-account token reviewed by the test control plane; and a value is found nowhere
//! else (Application, Events, the controller's trace log).

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use capstan_testkit::OpenBao;
use capstan_testkit::openbao::{bind_auth_delegator, random_token, service_account_token};
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use support::*;

/// A policy reading `secret/payments` only.
const READ_PAYMENTS: &str = r#"path "secret/data/payments" { capabilities = ["read"] }"#;
/// A policy reading every secret of the `secret` engine (a path that does not exist is then not
/// found rather than refused).
const READ_ALL: &str = r#"path "secret/data/*" { capabilities = ["read"] }"#;
/// A policy reading `secret/other` only.
const READ_OTHER: &str = r#"path "secret/data/other" { capabilities = ["read"] }"#;

/// The manifests: the Secret `payments` from `store` with `lines` as its data annotation, and a
/// ConfigMap `settings` whose `color` is `color`.
fn manifests(store: &str, lines: &str, color: &str) -> String {
    let lines: String = lines.lines().map(|l| format!("      {l}\n")).collect();
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: payments\n  annotations:\n    \
         capstan.dev/secret-store: {store}\n    capstan.dev/secret-data: |\n{lines}type: Opaque\n---\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: {color}\n"
    )
}

/// Create (or replace) the store Secret `name` in Capstan's namespace.
async fn store_secret(env: &Env, name: &str, data: serde_json::Value) -> anyhow::Result<()> {
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": env.ns, "labels": {"capstan.dev/secret-type": "secret-store"}},
        "stringData": data,
    }))?;
    let secrets = Api::<Secret>::namespaced(env.client.clone(), &env.ns);
    let _ = secrets.delete(name, &Default::default()).await;
    secrets.create(&PostParams::default(), &secret).await?;
    Ok(())
}

/// The decoded `data[key]` of the Secret `namespace/name` on the cluster.
async fn secret_value(env: &Env, namespace: &str, name: &str, key: &str) -> anyhow::Result<Option<String>> {
    let secret = Api::<Secret>::namespaced(env.client.clone(), namespace)
        .get_opt(name)
        .await?;
    Ok(secret
        .and_then(|s| s.data)
        .and_then(|d| d.get(key).map(|b| String::from_utf8_lossy(&b.0).to_string())))
}

async fn color(env: &Env, namespace: &str) -> anyhow::Result<Option<String>> {
    let (cv, ck, cp) = CM_API;
    let cm = env.get(cv, ck, cp, namespace, "settings").await?;
    Ok(cm.and_then(|c| c["data"]["color"].as_str().map(String::from)))
}

async fn wait_value(env: &Env, namespace: &str, key: &str, expected: &str, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if secret_value(env, namespace, "payments", key).await?.as_deref() == Some(expected) {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "timed out waiting for Secret {namespace}/payments to hold the expected {key}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Refresh `app` and wait until a condition of `type_` contains all of
/// `expected`; returns its message.
async fn expect_failure(env: &Env, app: &str, type_: &str, expected: &[&str]) -> anyhow::Result<String> {
    env.refresh(app).await?;
    let a = env
        .wait_app(
            app,
            &format!("{type_} naming {expected:?}"),
            Duration::from_secs(60),
            |a| condition(a, type_).is_some_and(|m| expected.iter().all(|e| m.contains(e))),
        )
        .await?;
    Ok(condition(&a, type_).unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_value_from_openbao_reaches_the_cluster_and_follows_a_rotation() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    let bao = OpenBao::start()?;
    let first = format!("first-{}", random_token(16));
    bao.put_kv("secret/payments", &[("apiKey", &first), ("region", "eu")])?;
    bao.write_policy("read-payments", READ_PAYMENTS)?;
    let token = bao.create_token(&["read-payments"])?;
    store_secret(
        &env,
        "openbao",
        json!({"address": bao.address(), "auth": "token", "token": token}),
    )
    .await?;
    env.git.create_repo("payments")?;
    let files = manifests(
        "openbao",
        "apiKey: secret/payments#apiKey\nregion: secret/payments#region",
        "blue",
    );
    env.git
        .commit("payments", "main", &[("app/all.yaml", Some(&files))], "v1")?;
    let ns = "vault-rotation";
    env.create_app(app("payments", &env.git.git_url("payments"), "app", ns, true))
        .await?;
    env.wait_app(
        "payments",
        "synced and healthy",
        Duration::from_secs(90),
        synced_healthy,
    )
    .await?;
    assert_eq!(
        secret_value(&env, ns, "payments", "apiKey").await?.as_deref(),
        Some(first.as_str())
    );
    assert_eq!(
        secret_value(&env, ns, "payments", "region").await?.as_deref(),
        Some("eu")
    );

    // Rotation: the next pass (a refresh here, the refresh interval otherwise) applies the new value.
    let second = format!("second-{}", random_token(16));
    let rotated = Instant::now();
    bao.put_kv("secret/payments", &[("apiKey", &second), ("region", "eu")])?;
    env.refresh("payments").await?;
    wait_value(&env, ns, "apiKey", &second, Duration::from_secs(60)).await?;
    eprintln!(
        "BENCH secret rotation: put_kv to the new value in the cluster with a refresh: {:.2}s",
        rotated.elapsed().as_secs_f64()
    );
    let a = env
        .wait_app("payments", "synced again", Duration::from_secs(30), synced_healthy)
        .await?;
    assert!(condition(&a, "ComparisonError").is_none());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_resolution_applies_nothing_of_the_sync_and_names_secret_key_and_store() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    let bao = OpenBao::start()?;
    let value = format!("kept-{}", random_token(16));
    bao.put_kv("secret/payments", &[("apiKey", &value)])?;
    bao.put_kv("secret/other", &[("apiKey", "other")])?;
    bao.write_policy("read-all", READ_ALL)?;
    bao.write_policy("read-other", READ_OTHER)?;
    let token = bao.create_token(&["read-all"])?;
    let other_token = bao.create_token(&["read-other"])?;
    store_secret(
        &env,
        "openbao",
        json!({"address": bao.address(), "auth": "token", "token": token}),
    )
    .await?;
    store_secret(
        &env,
        "limited",
        json!({"address": bao.address(), "auth": "token", "token": other_token}),
    )
    .await?;
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    store_secret(
        &env,
        "closed",
        json!({"address": format!("http://127.0.0.1:{closed}"), "auth": "token", "token": "unused"}),
    )
    .await?;
    env.git.create_repo("failures")?;
    let commit = |store: &str, lines: &str, color: &str| {
        let files = manifests(store, lines, color);
        env.git
            .commit("failures", "main", &[("app/all.yaml", Some(&files))], "change")
    };
    commit("openbao", "apiKey: secret/payments#apiKey", "blue")?;
    let ns = "vault-failures";
    env.create_app(app("failures", &env.git.git_url("failures"), "app", ns, true))
        .await?;
    env.wait_app(
        "failures",
        "synced and healthy",
        Duration::from_secs(90),
        synced_healthy,
    )
    .await?;
    assert_eq!(
        secret_value(&env, ns, "payments", "apiKey").await?.as_deref(),
        Some(value.as_str())
    );
    assert_eq!(color(&env, ns).await?.as_deref(), Some("blue"));

    let unchanged = |what: &'static str| {
        let env = &env;
        let value = value.clone();
        async move {
            let kept = secret_value(env, ns, "payments", "apiKey").await?;
            anyhow::ensure!(
                kept.as_deref() == Some(value.as_str()),
                "{what}: the Secret lost its value"
            );
            let color = color(env, ns).await?;
            anyhow::ensure!(
                color.as_deref() == Some("blue"),
                "{what}: the ConfigMap changed: {color:?}"
            );
            anyhow::Ok(())
        }
    };

    // A missing key, in the same commit as a change to the ConfigMap: neither is applied.
    commit("openbao", "apiKey: secret/payments#nope", "green")?;
    let message = expect_failure(
        &env,
        "failures",
        "ComparisonError",
        &[
            "Secret vault-failures/payments",
            "\"apiKey\"",
            "\"openbao\"",
            "secret/payments#nope",
            "no key",
        ],
    )
    .await?;
    assert!(!message.contains(&value), "{message}");
    unchanged("missing key").await?;

    // A missing path.
    commit("openbao", "apiKey: secret/missing#apiKey", "green")?;
    expect_failure(
        &env,
        "failures",
        "ComparisonError",
        &[
            "payments",
            "\"apiKey\"",
            "\"openbao\"",
            "secret/missing#apiKey",
            "not found",
        ],
    )
    .await?;
    unchanged("missing path").await?;

    // A token whose policy does not allow the path.
    commit("limited", "apiKey: secret/payments#apiKey", "green")?;
    expect_failure(
        &env,
        "failures",
        "ComparisonError",
        &["payments", "\"apiKey\"", "\"limited\"", "permission denied"],
    )
    .await?;
    unchanged("permission denied").await?;

    // An unreachable store.
    commit("closed", "apiKey: secret/payments#apiKey", "green")?;
    expect_failure(
        &env,
        "failures",
        "ComparisonError",
        &["payments", "\"apiKey\"", "\"closed\"", "unreachable"],
    )
    .await?;
    unchanged("unreachable").await?;

    // A store without its Secret.
    commit("nosuchstore", "apiKey: secret/payments#apiKey", "green")?;
    expect_failure(
        &env,
        "failures",
        "ComparisonError",
        &["payments", "\"nosuchstore\"", "not found"],
    )
    .await?;
    unchanged("store Secret missing").await?;

    // A store the Application's project does not permit.
    commit("openbao", "apiKey: secret/payments#apiKey", "green")?;
    env.apply_project(
        "restricted",
        json!({"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}],
               "clusterResourceWhitelist": [{"group": "*", "kind": "*"}], "secretStores": ["other"]}),
    )
    .await?;
    let mut restricted = app("failures", &env.git.git_url("failures"), "app", ns, true);
    restricted["spec"]["project"] = json!("restricted");
    env.create_app(restricted).await?;
    expect_failure(
        &env,
        "failures",
        "InvalidSpecError",
        &["payments", "secretStores", "\"openbao\""],
    )
    .await?;
    unchanged("store not permitted").await?;

    // A store the project permits, but not at that path (secretStorePaths).
    env.apply_project(
        "team-a",
        json!({"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}],
               "clusterResourceWhitelist": [{"group": "*", "kind": "*"}], "secretStores": ["openbao"],
               "secretStorePaths": [{"store": "openbao", "paths": ["secret/team-a/**"]}]}),
    )
    .await?;
    let mut scoped = app("failures", &env.git.git_url("failures"), "app", ns, true);
    scoped["spec"]["project"] = json!("team-a");
    env.create_app(scoped).await?;
    expect_failure(
        &env,
        "failures",
        "InvalidSpecError",
        &[
            "payments",
            "secretStorePaths",
            "\"secret/payments\"",
            "secret/team-a/**",
        ],
    )
    .await?;
    unchanged("path not permitted").await?;

    // A sealed store (last: the dev server is not unsealed again).
    env.create_app(app("failures", &env.git.git_url("failures"), "app", ns, true))
        .await?;
    bao.seal()?;
    expect_failure(
        &env,
        "failures",
        "ComparisonError",
        &["payments", "\"apiKey\"", "\"openbao\"", "sealed"],
    )
    .await?;
    unchanged("sealed").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubernetes_auth_with_a_service_account_token() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    let reviewer = service_account_token(&env.client, &env.ns, "openbao-reviewer").await?;
    bind_auth_delegator(&env.client, &env.ns, "openbao-reviewer").await?;
    let jwt = service_account_token(&env.client, &env.ns, "capstan-controller").await?;
    let bao = OpenBao::start()?;
    let value = format!("k8s-{}", random_token(16));
    bao.put_kv("secret/payments", &[("apiKey", &value)])?;
    bao.write_policy("read-payments", READ_PAYMENTS)?;
    bao.enable_kubernetes_auth(env.cluster.server(), &env.cluster.ca_pem()?, Some(&reviewer))?;
    bao.create_kubernetes_role("capstan", &["capstan-controller"], &[&env.ns], &["read-payments"])?;
    store_secret(
        &env,
        "openbao-k8s",
        json!({"address": bao.address(), "auth": "kubernetes", "role": "capstan", "jwt": jwt}),
    )
    .await?;
    env.git.create_repo("k8s")?;
    let files = manifests("openbao-k8s", "apiKey: secret/payments#apiKey", "blue");
    env.git.commit("k8s", "main", &[("app/all.yaml", Some(&files))], "v1")?;
    let ns = "vault-k8s-auth";
    env.create_app(app("k8s", &env.git.git_url("k8s"), "app", ns, true))
        .await?;
    env.wait_app("k8s", "synced and healthy", Duration::from_secs(90), synced_healthy)
        .await?;
    assert_eq!(
        secret_value(&env, ns, "payments", "apiKey").await?.as_deref(),
        Some(value.as_str())
    );
    Ok(())
}

/// A writer appending everything to a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).to_string()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_value_is_found_nowhere_but_in_the_target_secret() -> anyhow::Result<()> {
    // The controller runs in this process: capture everything Capstan logs, down to TRACE. (Each
    // test runs in its own process under nextest, so this subscriber is this test's.)
    let log = Captured::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn,capstan=trace"))
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::set_global_default(subscriber)
        .map_err(|e| anyhow::anyhow!("installing the capturing subscriber (run this test with nextest): {e}"))?;

    let env = Env::shared().await?;
    let bao = OpenBao::start()?;
    let value = format!("LEAK-CANARY-{}", random_token(24));
    let encoded = BASE64.encode(&value);
    bao.put_kv("secret/payments", &[("apiKey", &value)])?;
    bao.write_policy("read-payments", READ_PAYMENTS)?;
    let token = bao.create_token(&["read-payments"])?;
    store_secret(
        &env,
        "openbao",
        json!({"address": bao.address(), "auth": "token", "token": token}),
    )
    .await?;
    env.git.create_repo("leak")?;
    let files = manifests("openbao", "apiKey: secret/payments#apiKey", "blue");
    env.git
        .commit("leak", "main", &[("app/all.yaml", Some(&files))], "v1")?;
    let ns = "vault-leak";
    env.create_app(app("leak", &env.git.git_url("leak"), "app", ns, true))
        .await?;
    env.wait_app("leak", "synced and healthy", Duration::from_secs(90), synced_healthy)
        .await?;
    assert_eq!(
        secret_value(&env, ns, "payments", "apiKey").await?.as_deref(),
        Some(value.as_str())
    );
    // A manual sync and a refresh: more passes with the value resolved.
    env.request("leak", json!({"sync": {"prune": true}})).await?;
    env.refresh_and_wait("leak").await?;
    // A failure in the same Secret (a second key missing).
    let files = manifests(
        "openbao",
        "apiKey: secret/payments#apiKey\nother: secret/payments#nope",
        "green",
    );
    env.git
        .commit("leak", "main", &[("app/all.yaml", Some(&files))], "v2")?;
    expect_failure(&env, "leak", "ComparisonError", &["\"other\"", "secret/payments#nope"]).await?;

    let app = env.app("leak").await?;
    let mut places = vec![("the Application", serde_json::to_string(&app)?)];
    for namespace in [env.ns.as_str(), ns] {
        let events = Api::<Event>::namespaced(env.client.clone(), namespace)
            .list(&ListParams::default())
            .await?;
        places.push(("Events", serde_json::to_string(&events.items)?));
    }
    let logged = log.text();
    assert!(
        logged.contains("Secret values read from its secret store"),
        "the capture holds no resolution: {} bytes",
        logged.len()
    );
    places.push(("the controller's log", logged));
    for (place, text) in &places {
        assert!(!text.contains(&value), "{place} holds the secret value");
        assert!(
            !text.contains(&encoded),
            "{place} holds the secret value, base64-encoded"
        );
        assert!(!text.contains(&token), "{place} holds the store's token");
    }
    Ok(())
}

//! End to end: Applications whose source is a chart in a Helm repository (a real static HTTPS server
//! with basic auth, charts made by `helm package`, the index by `helm repo index`) or an OCI registry
//! (Debian's docker-registry, charts pushed by `helm push`): a version constraint resolved, a newly
//! published version picked up, values from a Git `ref` source, and a constraint matching nothing
//! refused with the nearest versions while the running objects stay.

mod support;

use std::time::Duration;

use capstan_testkit::charts::{ChartServer, ChartServerOptions, index_repository, package_chart};
use capstan_testkit::registry::{Registry, RegistryOptions};
use serde_json::{Value, json};
use support::*;

const USER: &str = "charts";
const PASSWORD: &str = "s3cret-chart-pass";

fn chart_app(name: &str, repo: &str, chart: &str, constraint: &str, namespace: &str) -> Value {
    json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": "capstan"},
        "spec": {
            "source": {"repoURL": repo, "chart": chart, "targetRevision": constraint,
                       "helm": {"valuesObject": {"greeting": "from-the-application"}}},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": namespace},
            "syncPolicy": {"automated": {"prune": true, "selfHeal": true}, "syncOptions": ["CreateNamespace=true"]},
        }
    })
}

async fn repository_secret(env: &Env, name: &str, data: Value) -> anyhow::Result<()> {
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": env.ns, "labels": {"capstan.dev/secret-type": "repository"}},
        "stringData": data,
    }))?;
    kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(env.client.clone(), &env.ns)
        .create(&Default::default(), &secret)
        .await?;
    Ok(())
}

fn revision(app: &capstan_api::Application) -> String {
    app.status
        .as_ref()
        .and_then(|s| s.sync.as_ref())
        .map(|s| s.revision.clone())
        .unwrap_or_default()
}

async fn configmap(env: &Env, namespace: &str, name: &str) -> anyhow::Result<Option<Value>> {
    let (cv, ck, cp) = CM_API;
    env.get(cv, ck, cp, namespace, name).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_chart_from_an_authenticated_https_helm_repository_follows_its_constraint() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    let server = ChartServer::start(ChartServerOptions {
        basic_auth: Some((USER.into(), PASSWORD.into())),
        tls: true,
    })
    .await?;
    for version in ["1.0.0", "1.1.0", "2.0.0", "1.9.0-rc.1"] {
        package_chart(server.dir(), "web", version)?;
    }
    index_repository(server.dir(), None)?;
    repository_secret(
        &env,
        "charts",
        json!({"url": server.url(), "type": "helm", "username": USER, "password": PASSWORD,
               "ca.crt": server.ca_pem().unwrap_or_default()}),
    )
    .await?;

    env.create_app(chart_app("web", &server.url(), "web", "1.*", "chart-web"))
        .await?;
    let app = env
        .wait_app("web", "synced and healthy", Duration::from_secs(90), synced_healthy)
        .await?;
    assert_eq!(
        revision(&app),
        "1.1.0",
        "the highest release matching 1.* (not 2.0.0, not the rc)"
    );
    let cm = configmap(&env, "chart-web", "web")
        .await?
        .expect("the chart's ConfigMap");
    assert_eq!(cm.pointer("/data/version"), Some(&json!("1.1.0")));
    assert_eq!(
        cm.pointer("/data/greeting"),
        Some(&json!("from-the-application")),
        "values apply"
    );

    // A new version matching the constraint is picked up at the next resolution.
    package_chart(server.dir(), "web", "1.2.0")?;
    index_repository(server.dir(), None)?;
    env.annotate("web", "capstan.dev/refresh", "hard").await?;
    env.wait_app("web", "synced at 1.2.0", Duration::from_secs(60), |a| {
        revision(a) == "1.2.0" && synced_healthy(a)
    })
    .await?;
    let cm = configmap(&env, "chart-web", "web")
        .await?
        .expect("the chart's ConfigMap");
    assert_eq!(cm.pointer("/data/version"), Some(&json!("1.2.0")));
    let history = env.app("web").await?.status.map(|s| s.history).unwrap_or_default();
    assert_eq!(
        history.iter().map(|h| h.revision.as_str()).collect::<Vec<_>>(),
        ["1.1.0", "1.2.0"],
        "history records chart versions"
    );
    assert!(
        server.requests_with_authorization() > 0,
        "the Secret's credentials were sent"
    );

    // A constraint matching nothing: a ComparisonError naming the nearest versions; nothing changes.
    env.create_app(chart_app("web", &server.url(), "web", ">=3.0.0", "chart-web"))
        .await?;
    let refused = env
        .wait_app("web", "comparison error", Duration::from_secs(30), |a| {
            condition(a, "ComparisonError").is_some()
        })
        .await?;
    let message = condition(&refused, "ComparisonError").unwrap_or_default();
    assert!(
        message.contains(">=3.0.0") && message.contains("2.0.0") && message.contains("spec.source"),
        "names the constraint, the nearest versions and the field: {message}"
    );
    assert!(!message.contains(PASSWORD), "no credentials in conditions: {message}");
    let cm = configmap(&env, "chart-web", "web").await?.expect("still running");
    assert_eq!(
        cm.pointer("/data/version"),
        Some(&json!("1.2.0")),
        "the running chart stays"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_chart_from_a_helm_repository_with_values_from_a_git_ref_source() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    let server = ChartServer::start(ChartServerOptions::default()).await?;
    package_chart(server.dir(), "api", "0.3.0")?;
    index_repository(server.dir(), None)?;
    env.git.create_repo("chart-values")?;
    let sha = env.git.commit(
        "chart-values",
        "main",
        &[("api/prod.yaml", Some("greeting: from-git-values\n"))],
        "values",
    )?;
    let app = json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
        "metadata": {"name": "api", "namespace": "capstan"},
        "spec": {
            "sources": [
                {"repoURL": server.url(), "chart": "api", "targetRevision": "0.3.0",
                 "helm": {"valueFiles": ["$values/api/prod.yaml"]}},
                {"repoURL": env.git.git_url("chart-values"), "targetRevision": "main", "ref": "values"},
            ],
            "destination": {"server": "https://kubernetes.default.svc", "namespace": "chart-api"},
            "syncPolicy": {"automated": {"prune": true}, "syncOptions": ["CreateNamespace=true"]},
        }
    });
    env.create_app(app).await?;
    let synced = env
        .wait_app("api", "synced", Duration::from_secs(90), synced_healthy)
        .await?;
    let revisions = synced
        .status
        .and_then(|s| s.sync)
        .map(|s| s.revisions)
        .unwrap_or_default();
    assert_eq!(revisions, vec!["0.3.0".to_string(), sha]);
    let cm = configmap(&env, "chart-api", "api")
        .await?
        .expect("the chart's ConfigMap");
    assert_eq!(cm.pointer("/data/greeting"), Some(&json!("from-git-values")));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_chart_from_an_oci_registry() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    let registry = Registry::start(RegistryOptions::default()).await?;
    let work = tempfile::tempdir()?;
    for version in ["0.1.0", "0.2.0"] {
        let archive = package_chart(work.path(), "queue", version)?;
        registry.push_chart(&archive, "charts")?;
    }
    let repo = registry.oci_url("charts");
    repository_secret(
        &env,
        "registry",
        json!({"url": repo, "type": "helm", "enableOCI": "true", "insecureOCIForceHttp": "true"}),
    )
    .await?;
    env.create_app(chart_app("queue", &repo, "queue", "~0.1", "chart-queue"))
        .await?;
    let app = env
        .wait_app("queue", "synced", Duration::from_secs(90), synced_healthy)
        .await?;
    assert_eq!(revision(&app), "0.1.0");
    let cm = configmap(&env, "chart-queue", "queue")
        .await?
        .expect("the chart's ConfigMap");
    assert_eq!(cm.pointer("/data/version"), Some(&json!("0.1.0")));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chart_dependencies_come_from_registered_repositories_only() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    let server = ChartServer::start(ChartServerOptions {
        basic_auth: Some((USER.into(), PASSWORD.into())),
        tls: false,
    })
    .await?;
    package_chart(server.dir(), "web", "1.0.0")?;
    index_repository(server.dir(), None)?;
    env.git.create_repo("umbrella")?;
    let chart = format!(
        "apiVersion: v2\nname: umbrella\nversion: 0.1.0\ndependencies:\n- name: web\n  version: 1.x\n  repository: {}\n",
        server.url()
    );
    env.git.commit(
        "umbrella",
        "main",
        &[
            ("umbrella/Chart.yaml", Some(&chart)),
            (
                "umbrella/templates/own.yaml",
                Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: umbrella-own}\ndata: {a: b}\n"),
            ),
        ],
        "umbrella",
    )?;
    env.create_app(app(
        "umbrella",
        &env.git.git_url("umbrella"),
        "umbrella",
        "chart-umbrella",
        true,
    ))
    .await?;

    // No repository Secret for the dependency's repository: refused by name, nothing applied.
    let refused = env
        .wait_app("umbrella", "comparison error", Duration::from_secs(60), |a| {
            condition(a, "ComparisonError").is_some()
        })
        .await?;
    let message = condition(&refused, "ComparisonError").unwrap_or_default();
    assert!(
        message.contains("dependency \"web\"") && message.contains(&server.url()) && message.contains("not registered"),
        "names the dependency and its repository: {message}"
    );
    assert_eq!(
        server.requests("/index.yaml"),
        0,
        "an unregistered repository is never asked"
    );
    assert!(configmap(&env, "chart-umbrella", "umbrella-own").await?.is_none());

    // Registered (with its credentials): fetched, verified, vendored and rendered.
    repository_secret(
        &env,
        "umbrella-deps",
        json!({"url": server.url(), "type": "helm", "username": USER, "password": PASSWORD}),
    )
    .await?;
    env.refresh("umbrella").await?;
    env.wait_app("umbrella", "synced", Duration::from_secs(90), synced_healthy)
        .await?;
    let sub = configmap(&env, "chart-umbrella", "umbrella")
        .await?
        .expect("the dependency's ConfigMap");
    assert_eq!(sub.pointer("/data/version"), Some(&json!("1.0.0")));
    assert!(configmap(&env, "chart-umbrella", "umbrella-own").await?.is_some());
    assert_eq!(server.requests("/web-1.0.0.tgz"), 1, "downloaded once");
    Ok(())
}

/// Kustomize's `helmCharts:` (`--enable-helm`): a chart from a chart repository is fetched by the
/// controller from a registered repository only and vendored where Kustomize looks for it; Kustomize
/// never pulls it.
#[tokio::test]
async fn kustomize_helm_charts_come_from_registered_repositories_only() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    let server = ChartServer::start(ChartServerOptions {
        basic_auth: Some((USER.into(), PASSWORD.into())),
        tls: false,
    })
    .await?;
    package_chart(server.dir(), "web", "1.0.0")?;
    package_chart(server.dir(), "web", "1.1.0")?;
    index_repository(server.dir(), None)?;
    env.git.create_repo("kustomized-helm")?;
    let kustomization = format!(
        "helmCharts:\n- name: web\n  repo: {}\n  version: 1.0.x\n  releaseName: kh\nnamePrefix: k-\nresources:\n- own.yaml\n",
        server.url()
    );
    env.git.commit(
        "kustomized-helm",
        "main",
        &[
            ("app/kustomization.yaml", Some(&kustomization)),
            (
                "app/own.yaml",
                Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: own}\ndata: {a: b}\n"),
            ),
        ],
        "kustomize with a chart",
    )?;
    env.create_app(app(
        "kustomized-helm",
        &env.git.git_url("kustomized-helm"),
        "app",
        "kustomized-helm",
        true,
    ))
    .await?;

    let refused = env
        .wait_app("kustomized-helm", "comparison error", Duration::from_secs(60), |a| {
            condition(a, "ComparisonError").is_some()
        })
        .await?;
    let message = condition(&refused, "ComparisonError").unwrap_or_default();
    assert!(
        message.contains("\"web\"") && message.contains(&server.url()) && message.contains("not registered"),
        "names the chart and its repository: {message}"
    );
    assert_eq!(
        server.requests("/index.yaml"),
        0,
        "an unregistered repository is never asked"
    );
    assert!(
        configmap(&env, "kustomized-helm", "k-own").await?.is_none(),
        "nothing applied"
    );

    repository_secret(
        &env,
        "kustomized-helm-charts",
        json!({"url": server.url(), "type": "helm", "username": USER, "password": PASSWORD}),
    )
    .await?;
    env.refresh("kustomized-helm").await?;
    env.wait_app("kustomized-helm", "synced", Duration::from_secs(90), synced_healthy)
        .await?;
    let chart_cm = configmap(&env, "kustomized-helm", "k-kh")
        .await?
        .expect("the chart's ConfigMap, with Kustomize's prefix");
    assert_eq!(
        chart_cm.pointer("/data/version"),
        Some(&json!("1.0.0")),
        "1.0.x picks 1.0.0"
    );
    assert!(configmap(&env, "kustomized-helm", "k-own").await?.is_some());
    assert_eq!(
        server.requests("/web-1.0.0.tgz"),
        1,
        "downloaded once, by the controller"
    );
    assert_eq!(server.requests("/web-1.1.0.tgz"), 0);
    Ok(())
}

//! The Applications the in-cluster tests sync: `examples/guestbook` (a directory with sync waves and a
//! PreSync hook Job), `examples/helm-guestbook` (a Helm chart with a values file) and
//! `examples/kustomize-guestbook/overlays/staging` (a Kustomize overlay), published to a repository
//! of the test's git server, each deployed to a namespace named after the test's Capstan namespace.

use std::path::Path;
use std::time::{Duration, Instant};

use capstan_api::Application;
use capstan_api::status::ResultCode;
use capstan_testkit::GitServer;
use capstan_testkit::capstan::{health_of, sync_of, synced_healthy};
use kube::api::{Api, PostParams};

/// The three Applications: (name, path, Helm value file).
pub const APPS: [(&str, &str, Option<&str>); 3] = [
    ("guestbook", "guestbook", None),
    ("helm-guestbook", "helm-guestbook", Some("values-production.yaml")),
    ("kustomize-guestbook", "kustomize-guestbook/overlays/staging", None),
];

/// Publish the examples the Applications use to repository `name` of `git`; its `git://` URL.
pub fn publish(git: &GitServer, name: &str) -> anyhow::Result<String> {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let files = capstan_testkit::files_under(&examples)?;
    let used: Vec<(&str, Option<&str>)> = files
        .iter()
        .filter(|(p, _)| {
            ["guestbook/", "helm-guestbook/", "kustomize-guestbook/"]
                .iter()
                .any(|d| p.starts_with(d))
        })
        .map(|(p, t)| (p.as_str(), Some(t.as_str())))
        .collect();
    assert!(used.iter().any(|(p, _)| *p == "guestbook/preflight-job.yaml"));
    git.create_repo(name)?;
    git.commit(name, "main", &used, "the in-cluster test's applications")?;
    Ok(git.git_url(name))
}

/// Create Application `name` of `path` in Capstan's namespace `ns`, automated, deploying to
/// namespace `{ns}-{name}`.
pub async fn create(
    client: &kube::Client,
    ns: &str,
    repo: &str,
    name: &str,
    path: &str,
    values: Option<&str>,
) -> anyhow::Result<()> {
    let mut source = serde_json::json!({"repoURL": repo, "targetRevision": "main", "path": path});
    if let Some(values) = values {
        source["helm"] = serde_json::json!({"valueFiles": [values]});
    }
    let app: Application = serde_json::from_value(serde_json::json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "project": "default",
            "source": source,
            "destination": {"server": "https://kubernetes.default.svc", "namespace": format!("{ns}-{name}")},
            "syncPolicy": {"automated": {"prune": true, "selfHeal": true}, "syncOptions": ["CreateNamespace=true"]},
        },
    }))?;
    Api::<Application>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &app)
        .await?;
    Ok(())
}

/// Wait until every Application of `names` is Synced and Healthy with its last operation
/// Succeeded; `log` (the controller's) is shown if not.
pub async fn wait_synced(
    client: &kube::Client,
    ns: &str,
    names: &[&str],
    timeout: Duration,
    log: &Path,
) -> anyhow::Result<()> {
    let apps = Api::<Application>::namespaced(client.clone(), ns);
    let deadline = Instant::now() + timeout;
    loop {
        let mut waiting = Vec::new();
        for name in names {
            let app = apps.get(name).await?;
            let succeeded = app
                .status
                .as_ref()
                .and_then(|s| s.operation_state.as_ref())
                .is_some_and(|o| o.phase == "Succeeded");
            if !(synced_healthy(&app) && succeeded) {
                let op = app.status.as_ref().and_then(|s| s.operation_state.clone());
                let conditions = app.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
                waiting.push(format!(
                    "{name}: sync={} health={} operation={:?} conditions={:?}",
                    sync_of(&app),
                    health_of(&app),
                    op.map(|o| format!("{}: {}", o.phase, o.message)),
                    conditions
                        .iter()
                        .map(|c| format!("{}: {}", c.type_, c.message))
                        .collect::<Vec<_>>()
                ));
            }
        }
        if waiting.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "not Synced and Healthy after {timeout:?}:\n{}\ncontroller log:\n{}",
                waiting.join("\n"),
                tail(log)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The PreSync hook Job of `guestbook` ran and succeeded.
pub async fn assert_hook_ran(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    let app = Api::<Application>::namespaced(client.clone(), ns)
        .get("guestbook")
        .await?;
    let op = app.status.and_then(|s| s.operation_state).unwrap_or_default();
    let hook = op
        .resources
        .iter()
        .find(|r| r.kind == "Job" && r.name == "guestbook-preflight")
        .unwrap_or_else(|| panic!("the preflight hook ran: {:?}", op.resources));
    assert!(hook.hook && hook.sync_phase == "PreSync", "{hook:?}");
    assert_eq!(hook.status, ResultCode::Synced, "the hook succeeded: {hook:?}");
    Ok(())
}

/// The last 60 lines of a log file.
pub fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}

/// Wait until `log` contains `needle`, while `child` keeps running.
pub async fn wait_log(child: &mut std::process::Child, log: &Path, needle: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        if std::fs::read_to_string(log).unwrap_or_default().contains(needle) {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("exited ({status}) before saying {needle:?}:\n{}", tail(log));
        }
        assert!(Instant::now() < deadline, "never said {needle:?}:\n{}", tail(log));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// GET `http://127.0.0.1:PORT/PATH`: status and body, or None if nothing answers.
pub fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    let mut answer = agent.get(&format!("http://127.0.0.1:{port}{path}")).call().ok()?;
    let status = answer.status().as_u16();
    Some((status, answer.body_mut().read_to_string().unwrap_or_default()))
}

/// Wait until `/readyz` on `port` answers 200.
pub async fn wait_ready(child: &mut std::process::Child, port: u16, log: &Path, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some((200, _)) = get(port, "/readyz") {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("exited ({status}) before it was ready:\n{}", tail(log));
        }
        assert!(
            Instant::now() < deadline,
            "/readyz never answered 200 ({:?}):\n{}",
            get(port, "/readyz"),
            tail(log)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

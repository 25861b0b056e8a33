//! What every controller benchmark shares: [`Bench`] (one local control plane, one git server and
//! the `capstan` binary running as its own controller process), watching an Application until its
//! status satisfies a check, requesting syncs, the API server's write counts, and small helpers
//! (Application manifests, percentiles, cached tool binaries, a process's memory).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use capstan_testkit::{GitServer, TestCluster};
use futures::StreamExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::{Value, json};

/// The controller's Git poll interval during the benchmarks (shorter than the default 180 s so that
/// the poll benchmark finishes in minutes).
pub(crate) const POLL_SECONDS: u64 = 30;

pub(crate) struct Bench {
    /// Base URL of the controller's HTTP server (`--listen`).
    pub(crate) server: String,
    /// The controller's `/metrics` (its `--health-listen` address: no login).
    pub(crate) metrics: String,
    pub(crate) cluster: TestCluster,
    pub(crate) git: GitServer,
    pub(crate) client: kube::Client,
    pub(crate) controller: Child,
    pub(crate) capstan: PathBuf,
    _cache: tempfile::TempDir,
}

impl Drop for Bench {
    fn drop(&mut self) {
        let _ = self.controller.kill();
        let _ = self.controller.wait();
    }
}

/// A running watch on one Application (see [`Bench::watch`]).
pub(crate) struct AppWatch {
    rx: tokio::sync::mpsc::UnboundedReceiver<anyhow::Result<Value>>,
    task: tokio::task::JoinHandle<()>,
    /// The last status seen.
    last: Value,
}

impl AppWatch {
    /// Wait until `check` holds for the Application's status (the last one seen counts).
    pub(crate) async fn until(
        mut self,
        name: &str,
        timeout: Duration,
        check: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        let found = tokio::time::timeout(timeout, async {
            loop {
                if check(&self.last) {
                    return anyhow::Ok(std::mem::take(&mut self.last));
                }
                match self.rx.recv().await {
                    Some(Ok(status)) => self.last = status,
                    // A watch error is retried by the watcher itself; keep waiting.
                    Some(Err(e)) => eprintln!("watch on {name}: {e:#}"),
                    None => bail!("watch on {name} ended"),
                }
            }
        })
        .await;
        match found {
            Ok(result) => result,
            Err(_) => bail!("timed out waiting for {name}: {}", self.last),
        }
    }
}

impl Drop for AppWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Bench {
    pub(crate) async fn start(capstan: PathBuf) -> anyhow::Result<Bench> {
        let capstan_bin = capstan.clone();
        let cluster = TestCluster::start().await?;
        let git = GitServer::start().await?;
        let client = cluster.client().await?;
        let version = client.apiserver_version().await?;
        println!("# Kubernetes {} (kwok nodes, real kube-scheduler)", version.git_version);
        let kubeconfig = cluster.kubeconfig().to_string_lossy().to_string();
        run(&capstan, &["install", "--kubeconfig", &kubeconfig])?;
        let cache = tempfile::tempdir()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let listen = format!("127.0.0.1:{port}");
        let health_port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let health = format!("127.0.0.1:{health_port}");
        let controller = Command::new(&capstan)
            .args([
                "controller",
                "--kubeconfig",
                &kubeconfig,
                "--poll-interval",
                &POLL_SECONDS.to_string(),
                "--listen",
                &listen,
                "--health-listen",
                &health,
                "--cache-dir",
            ])
            .arg(cache.path())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting capstan controller")?;
        Ok(Bench {
            server: format!("http://{listen}"),
            metrics: format!("http://{health}/metrics"),
            cluster,
            git,
            client,
            controller,
            capstan: capstan_bin,
            _cache: cache,
        })
    }

    pub(crate) fn kubeconfig(&self) -> String {
        self.cluster.kubeconfig().to_string_lossy().to_string()
    }

    pub(crate) fn rss(&self) -> (u64, u64) {
        rss_of(self.controller.id())
    }

    pub(crate) async fn app(&self, manifest: Value) -> anyhow::Result<()> {
        let apps = self.apps();
        let name = manifest["metadata"]["name"].as_str().unwrap_or_default().to_string();
        apps.patch(&name, &PatchParams::apply("bench").force(), &Patch::Apply(manifest))
            .await?;
        Ok(())
    }

    pub(crate) fn apps(&self) -> Api<DynamicObject> {
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("capstan.dev", "v1alpha1", "Application"),
            "applications",
        );
        Api::namespaced_with(self.client.clone(), "capstan", &ar)
    }

    pub(crate) async fn status(&self, name: &str) -> anyhow::Result<Value> {
        let app = self.apps().get(name).await?;
        Ok(app.data.get("status").cloned().unwrap_or(Value::Null))
    }

    /// Wait for `check` on the Application's status, through a watch (polling a large Application
    /// would itself load the API server being measured).
    pub(crate) async fn wait(
        &self,
        name: &str,
        timeout: Duration,
        check: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        self.watch(name).await?.until(name, timeout, check).await
    }

    /// Open a watch on one Application and return once its initial listing is done, so that a
    /// measurement started afterwards holds no LIST of the (possibly large) Application.
    pub(crate) async fn watch(&self, name: &str) -> anyhow::Result<AppWatch> {
        use kube::runtime::watcher;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let stream = watcher(self.apps(), config);
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            let mut initial = Value::Null;
            while let Some(event) = stream.next().await {
                let status = |app: DynamicObject| app.data.get("status").cloned().unwrap_or(Value::Null);
                let sent = match event {
                    Ok(watcher::Event::InitApply(app)) => {
                        initial = status(app);
                        Ok(())
                    }
                    Ok(watcher::Event::InitDone) => tx.send(Ok(std::mem::take(&mut initial))),
                    Ok(watcher::Event::Apply(app)) => tx.send(Ok(status(app))),
                    Ok(_) => Ok(()),
                    Err(e) => tx.send(Err(anyhow::Error::from(e))),
                };
                if sent.is_err() {
                    return;
                }
            }
        });
        // The first message is the state at the end of the initial listing.
        let first = rx.recv().await.context("the watch on the Application ended")??;
        Ok(AppWatch { rx, task, last: first })
    }

    /// Request a sync as `capstan app sync` does: initiated by `who`, with a request id.
    pub(crate) async fn request_sync(&self, name: &str, who: &str) -> anyhow::Result<()> {
        let op = json!({"sync": {}, "initiatedBy": who, "id": format!("{who}-{}", std::process::id())}).to_string();
        let patch = json!({"metadata": {"annotations": {"capstan.dev/operation": op}}});
        self.apps()
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(())
    }

    /// Wait until the Application's resourceVersion has not changed for `quiet`.
    pub(crate) async fn settle(&self, name: &str, quiet: Duration, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let mut last = self.apps().get(name).await?.metadata.resource_version;
        let mut since = Instant::now();
        while since.elapsed() < quiet {
            if Instant::now() > deadline {
                bail!("{name} kept changing for {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            let now = self.apps().get(name).await?.metadata.resource_version;
            if now != last {
                last = now;
                since = Instant::now();
            }
        }
        Ok(())
    }

    /// Non-dry-run write requests to ConfigMaps, from the API server's own metrics.
    pub(crate) async fn configmap_writes(&self) -> anyhow::Result<u64> {
        let req = http::Request::get("/metrics").body(Vec::new())?;
        let text = self.client.request_text(req).await?;
        let mut total = 0u64;
        for line in text.lines().filter(|l| l.starts_with("apiserver_request_total{")) {
            let write = [
                "verb=\"APPLY\"",
                "verb=\"PATCH\"",
                "verb=\"POST\"",
                "verb=\"PUT\"",
                "verb=\"DELETE\"",
                "verb=\"CREATE\"",
            ]
            .iter()
            .any(|v| line.contains(v));
            if write && line.contains("resource=\"configmaps\"") && line.contains("dry_run=\"\"") {
                total += line
                    .rsplit(' ')
                    .next()
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.0) as u64;
            }
        }
        Ok(total)
    }
}

/// A free loopback port (bound and released: a benchmark's own processes take it next).
pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The last 20 lines of a process's log file.
pub(crate) fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// Whether `http://127.0.0.1:PORT/readyz` answers with success (within 2 s).
pub(crate) async fn ready(port: u16) -> anyhow::Result<bool> {
    let url = format!("http://127.0.0.1:{port}/readyz");
    Ok(tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(2)))
            .build()
            .into();
        agent.get(&url).call().is_ok_and(|r| r.status().is_success())
    })
    .await?)
}

/// Requests the API server has served, all verbs and clients (the sum of its
/// `apiserver_request_total`).
pub(crate) async fn api_requests(client: &kube::Client) -> anyhow::Result<u64> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(req).await?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64)
}

pub(crate) fn app_manifest(name: &str, repo: &str, path: &str, namespace: &str, automated: bool) -> Value {
    let mut policy = json!({"syncOptions": ["CreateNamespace=true"]});
    if automated {
        policy["automated"] = json!({"prune": true, "selfHeal": true});
    }
    json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": "capstan"},
        "spec": {
            "source": {"repoURL": repo, "targetRevision": "main", "path": path},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": namespace},
            "syncPolicy": policy,
        },
    })
}

/// The `p` quantile (0 < p <= 1) of `samples`, zero when there are none.
pub(crate) fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let rank = ((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len().max(1));
    samples.get(rank - 1).copied().unwrap_or_default()
}

pub(crate) fn capstan_testkit_kubectl() -> anyhow::Result<PathBuf> {
    cached_bin("kubectl")
}

pub(crate) fn cached_bin(name: &str) -> anyhow::Result<PathBuf> {
    let cache = std::env::var_os("CAPSTAN_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/capstan"));
    let path = cache.join("bin").join(name);
    if path.exists() {
        Ok(path)
    } else {
        bail!("{name} not found in {}: run scripts/setup.sh", cache.display())
    }
}

pub(crate) fn run(program: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {}", program.display()))?;
    if !out.status.success() {
        bail!(
            "{} {} failed: {}",
            program.display(),
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// (VmRSS, VmHWM) of a process in KiB.
pub(crate) fn rss_of(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

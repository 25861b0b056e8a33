//! `capstan-bench`: the benchmarks of docs/benchmarks.md, against a real local control plane, a real
//! git server and the release `capstan` binary running as its own process (so its memory is its own).
//!
//! Each benchmark prints one result line; `--only` selects some. Figures depend on the machine: the
//! reference machine has 2 cores and 24 GiB.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use capstan_api::operation::OperationPhase;
use capstan_testkit::{GitServer, TestCluster, git};
use futures::{StreamExt, stream};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::{Value, json};

mod ui;

#[derive(Debug, clap::Parser)]
struct Args {
    /// The capstan binary to benchmark.
    #[arg(long, default_value = "target/release/capstan")]
    capstan: PathBuf,
    /// Comma-separated subset: sync,resync,fleet,selfheal,untracked,appset,webhook,ui.
    #[arg(long, default_value = "sync,resync,selfheal,untracked,fleet,appset,webhook,ui")]
    only: String,
    /// ConfigMaps in the first-sync benchmark.
    #[arg(long, default_value_t = 2000)]
    configmaps: usize,
    /// Applications in the fleet benchmark.
    #[arg(long, default_value_t = 500)]
    apps: usize,
    /// Untracked ConfigMaps in the memory benchmark.
    #[arg(long, default_value_t = 10_000)]
    untracked: usize,
    /// Applications generated in the ApplicationSet benchmark (half per spoke).
    #[arg(long, default_value_t = 200)]
    generated: usize,
    /// Drift samples in the self-heal benchmark.
    #[arg(long, default_value_t = 50)]
    samples: usize,
    /// Applications in the web UI list benchmark.
    #[arg(long, default_value_t = 1000)]
    ui_apps: usize,
}

/// The controller's Git poll interval during the benchmarks (shorter than the default 180 s so that
/// the poll benchmark finishes in minutes).
const POLL_SECONDS: u64 = 30;

struct Bench {
    /// Base URL of the controller's HTTP server (`--listen`).
    server: String,
    cluster: TestCluster,
    git: GitServer,
    client: kube::Client,
    controller: Child,
    capstan: PathBuf,
    _cache: tempfile::TempDir,
}

impl Drop for Bench {
    fn drop(&mut self) {
        let _ = self.controller.kill();
        let _ = self.controller.wait();
    }
}

/// A running watch on one Application (see [`Bench::watch`]).
struct AppWatch {
    rx: tokio::sync::mpsc::UnboundedReceiver<anyhow::Result<Value>>,
    task: tokio::task::JoinHandle<()>,
    /// The last status seen.
    last: Value,
}

impl AppWatch {
    /// Wait until `check` holds for the Application's status (the last one seen counts).
    async fn until(mut self, name: &str, timeout: Duration, check: impl Fn(&Value) -> bool) -> anyhow::Result<Value> {
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Args = clap::Parser::parse();
    let only: Vec<&str> = args.only.split(',').map(str::trim).collect();
    let capstan = std::fs::canonicalize(&args.capstan).with_context(|| {
        format!(
            "{} not found: build it with `cargo build --release`",
            args.capstan.display()
        )
    })?;
    println!(
        "# capstan benchmarks ({} cores)",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)
    );
    if only.iter().any(|b| *b != "ui") {
        controller_benchmarks(&args, &only, capstan.clone()).await?;
    }
    if only.contains(&"ui") {
        // On its own control plane, without a controller: nothing but the benchmark changes the
        // Applications while the page is measured.
        ui::ui_list(&capstan, args.ui_apps).await?;
    }
    Ok(())
}

/// Benchmarks 1–7, against one control plane and one controller.
async fn controller_benchmarks(args: &Args, only: &[&str], capstan: PathBuf) -> anyhow::Result<()> {
    let bench = Bench::start(capstan).await?;
    if only.contains(&"sync") || only.contains(&"resync") {
        bench.first_sync_and_resync(args.configmaps).await?;
    }
    if only.contains(&"selfheal") {
        bench.self_heal(args.samples).await?;
    }
    if only.contains(&"untracked") {
        bench.untracked(args.untracked).await?;
    }
    if only.contains(&"fleet") {
        bench.fleet(args.apps).await?;
    }
    if only.contains(&"appset") {
        bench.appset(args.generated).await?;
    }
    if only.contains(&"webhook") {
        bench.webhook(args.apps).await?;
    }
    Ok(())
}

impl Bench {
    async fn start(capstan: PathBuf) -> anyhow::Result<Bench> {
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
        let controller = Command::new(&capstan)
            .args([
                "controller",
                "--kubeconfig",
                &kubeconfig,
                "--poll-interval",
                &POLL_SECONDS.to_string(),
                "--listen",
                &listen,
                "--cache-dir",
            ])
            .arg(cache.path())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting capstan controller")?;
        Ok(Bench {
            server: format!("http://{listen}"),
            cluster,
            git,
            client,
            controller,
            capstan: capstan_bin,
            _cache: cache,
        })
    }

    fn kubeconfig(&self) -> String {
        self.cluster.kubeconfig().to_string_lossy().to_string()
    }

    fn rss(&self) -> (u64, u64) {
        rss_of(self.controller.id())
    }

    async fn app(&self, manifest: Value) -> anyhow::Result<()> {
        let apps = self.apps();
        let name = manifest["metadata"]["name"].as_str().unwrap_or_default().to_string();
        apps.patch(&name, &PatchParams::apply("bench").force(), &Patch::Apply(manifest))
            .await?;
        Ok(())
    }

    fn apps(&self) -> Api<DynamicObject> {
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("capstan.dev", "v1alpha1", "Application"),
            "applications",
        );
        Api::namespaced_with(self.client.clone(), "capstan", &ar)
    }

    async fn status(&self, name: &str) -> anyhow::Result<Value> {
        let app = self.apps().get(name).await?;
        Ok(app.data.get("status").cloned().unwrap_or(Value::Null))
    }

    /// Wait for `check` on the Application's status, through a watch (polling a large Application
    /// would itself load the API server being measured).
    async fn wait(&self, name: &str, timeout: Duration, check: impl Fn(&Value) -> bool) -> anyhow::Result<Value> {
        self.watch(name).await?.until(name, timeout, check).await
    }

    /// Open a watch on one Application and return once its initial listing is done, so that a
    /// measurement started afterwards holds no LIST of the (possibly large) Application.
    async fn watch(&self, name: &str) -> anyhow::Result<AppWatch> {
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
    async fn request_sync(&self, name: &str, who: &str) -> anyhow::Result<()> {
        let op = json!({"sync": {}, "initiatedBy": who, "id": format!("{who}-{}", std::process::id())}).to_string();
        let patch = json!({"metadata": {"annotations": {"capstan.dev/operation": op}}});
        self.apps()
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(())
    }

    /// Benchmarks 1 and 2: first sync of N ConfigMaps vs `kubectl apply --server-side`, then a
    /// re-sync with nothing changed.
    async fn first_sync_and_resync(&self, n: usize) -> anyhow::Result<()> {
        let manifests: String = (0..n)
            .map(|i| format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i:05}}}\ndata: {{index: \"{i}\", payload: \"{}\"}}\n---\n", "x".repeat(64)))
            .collect();
        // kubectl on the same manifests, into its own namespace.
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("configmaps.yaml");
        std::fs::write(&file, &manifests)?;
        let kubectl = capstan_testkit_kubectl()?;
        run(
            &kubectl,
            &[
                "--kubeconfig",
                &self.kubeconfig(),
                "create",
                "namespace",
                "kubectl-bench",
            ],
        )?;
        let started = Instant::now();
        run(
            &kubectl,
            &[
                "--kubeconfig",
                &self.kubeconfig(),
                "apply",
                "--server-side",
                "-n",
                "kubectl-bench",
                "-f",
                &file.to_string_lossy(),
            ],
        )?;
        let kubectl_time = started.elapsed();

        self.git.create_repo("configmaps")?;
        self.git.commit(
            "configmaps",
            "main",
            &[("cms/all.yaml", Some(&manifests))],
            "configmaps",
        )?;
        self.app(app_manifest(
            "configmaps",
            &self.git.git_url("configmaps"),
            "cms",
            "capstan-bench",
            false,
        ))
        .await?;
        self.wait("configmaps", Duration::from_secs(120), |s| {
            s.pointer("/sync/status") == Some(&json!("OutOfSync"))
        })
        .await?;
        let writes_before = self.configmap_writes().await?;
        let watch = self.watch("configmaps").await?;
        let started = Instant::now();
        self.request_sync("configmaps", "bench-first").await?;
        watch
            .until("configmaps", Duration::from_secs(600), |s| {
                s.pointer("/operationState/operation/initiatedBy") == Some(&json!("bench-first"))
                    && s.pointer("/operationState/phase") == Some(&json!(OperationPhase::Succeeded))
            })
            .await?;
        let capstan_time = started.elapsed();
        let first_writes = self.configmap_writes().await? - writes_before;
        println!(
            "1. first sync of {n} ConfigMaps: capstan {:.2} s, kubectl apply --server-side {:.2} s, ratio {:.2} (target <= 0.5); {first_writes} ConfigMap write requests",
            capstan_time.as_secs_f64(),
            kubectl_time.as_secs_f64(),
            capstan_time.as_secs_f64() / kubectl_time.as_secs_f64()
        );

        self.wait("configmaps", Duration::from_secs(60), |s| {
            s.pointer("/sync/status") == Some(&json!("Synced"))
        })
        .await?;
        // Measure the re-sync itself, not the tail of the first one: wait until the controller has
        // finished reacting to the 2,000 creations (the Application unchanged for 2 s).
        self.settle("configmaps", Duration::from_secs(2), Duration::from_secs(60))
            .await?;
        let writes_before = self.configmap_writes().await?;
        let watch = self.watch("configmaps").await?;
        let started = Instant::now();
        self.request_sync("configmaps", "bench-resync").await?;
        let requested = started.elapsed();
        watch
            .until("configmaps", Duration::from_secs(120), |s| {
                s.pointer("/operationState/operation/initiatedBy") == Some(&json!("bench-resync"))
                    && s.pointer("/operationState/phase") == Some(&json!(OperationPhase::Succeeded))
            })
            .await?;
        let resync_time = started.elapsed();
        let writes = self.configmap_writes().await? - writes_before;
        let size = serde_json::to_vec(&self.apps().get("configmaps").await?)?.len();
        println!(
            "2. re-sync of {n} unchanged ConfigMaps: {:.2} s from request to Succeeded (target <= 1 s; writing the request took {} ms), {writes} ConfigMap write requests (target 0); the Application is {} KB",
            resync_time.as_secs_f64(),
            requested.as_millis(),
            size / 1000
        );
        Ok(())
    }

    /// Wait until the Application's resourceVersion has not changed for `quiet`.
    async fn settle(&self, name: &str, quiet: Duration, timeout: Duration) -> anyhow::Result<()> {
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
    async fn configmap_writes(&self) -> anyhow::Result<u64> {
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

    /// Benchmark 4: time from a change to a tracked field until Capstan has reverted it.
    async fn self_heal(&self, samples: usize) -> anyhow::Result<()> {
        self.git.create_repo("heal")?;
        let configmap = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: target}\ndata: {value: desired}\n";
        let deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: target}\nspec:\n  replicas: 2\n  selector: {matchLabels: {app: target}}\n  template:\n    metadata: {labels: {app: target}}\n    spec: {containers: [{name: c, image: example/app:1}]}\n";
        self.git.commit(
            "heal",
            "main",
            &[("app/cm.yaml", Some(configmap)), ("app/deploy.yaml", Some(deployment))],
            "heal",
        )?;
        self.app(app_manifest(
            "heal",
            &self.git.git_url("heal"),
            "app",
            "heal-bench",
            true,
        ))
        .await?;
        self.wait("heal", Duration::from_secs(120), |s| {
            s.pointer("/sync/status") == Some(&json!("Synced"))
                && s.pointer("/health/status") == Some(&json!("Healthy"))
        })
        .await?;
        let kubectl = capstan_testkit_kubectl()?;
        let kubeconfig = self.kubeconfig();
        let gvk = |g: &str, v: &str, k: &str, plural: &str| {
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(g, v, k), plural)
        };
        let cms: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            "heal-bench",
            &gvk("", "v1", "ConfigMap", "configmaps"),
        );
        let deploys: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            "heal-bench",
            &gvk("apps", "v1", "Deployment", "deployments"),
        );
        // Half the samples scale the Deployment, half patch the ConfigMap, both with kubectl; each is
        // timed from kubectl's start (so its own start-up counts) until Capstan has put Git back.
        let (mut scaled, mut patched, mut kubectl_own) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..samples {
            let scale = i % 2 == 0;
            let replicas = format!("--replicas={}", 3 + i % 3);
            let patch = json!({"data": {"value": format!("drift-{i}")}}).to_string();
            let drift: &[&str] = if scale {
                &["scale", "deployment/target", &replicas]
            } else {
                &["patch", "configmap/target", "--type=merge", "-p", &patch]
            };
            let args = [&["--kubeconfig", kubeconfig.as_str(), "-n", "heal-bench"], drift].concat();
            let started = Instant::now();
            run(&kubectl, &args)?;
            kubectl_own.push(started.elapsed());
            loop {
                let reverted = if scale {
                    deploys.get("target").await?.data.pointer("/spec/replicas") == Some(&json!(2))
                } else {
                    cms.get("target").await?.data.pointer("/data/value") == Some(&json!("desired"))
                };
                if reverted {
                    break;
                }
                if started.elapsed() > Duration::from_secs(30) {
                    bail!("drift {i} was not reverted within 30 s");
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            if scale { &mut scaled } else { &mut patched }.push(started.elapsed());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let mut all: Vec<Duration> = scaled.iter().chain(&patched).copied().collect();
        println!(
            "4. self-heal after `kubectl scale` of a Deployment / `kubectl patch` of a ConfigMap, {samples} samples from kubectl's start: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms (scale p50 {:.0} ms, patch p50 {:.0} ms; kubectl's own run p50 {:.0} ms; targets p50 <= 1 s, p99 <= 3 s)",
            ms(percentile(&mut all, 0.5)),
            ms(percentile(&mut all, 0.99)),
            ms(percentile(&mut all, 1.0)),
            ms(percentile(&mut scaled, 0.5)),
            ms(percentile(&mut patched, 0.5)),
            ms(percentile(&mut kubectl_own, 0.5)),
        );
        Ok(())
    }

    /// Benchmark 5: controller memory does not grow with objects Capstan does not track.
    async fn untracked(&self, n: usize) -> anyhow::Result<()> {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (before, _) = self.rss();
        let kubectl = capstan_testkit_kubectl()?;
        run(
            &kubectl,
            &["--kubeconfig", &self.kubeconfig(), "create", "namespace", "untracked"],
        )?;
        let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "ConfigMap"), "configmaps");
        let cms: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), "untracked", &ar);
        let payload = "y".repeat(512);
        let created: Vec<anyhow::Result<()>> = stream::iter(0..n)
            .map(|i| {
                let cms = cms.clone();
                let payload = payload.clone();
                async move {
                    let cm: DynamicObject = serde_json::from_value(json!({
                        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("u-{i:05}")}, "data": {"p": payload}}))?;
                    cms.create(&PostParams::default(), &cm).await?;
                    Ok(())
                }
            })
            .buffer_unordered(32)
            .collect()
            .await;
        created.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
        tokio::time::sleep(Duration::from_secs(10)).await;
        let (after, _) = self.rss();
        println!(
            "5. controller RSS with {n} untracked ConfigMaps in the cluster: {:.1} MiB before, {:.1} MiB after (target: no growth)",
            before as f64 / 1024.0,
            after as f64 / 1024.0
        );
        Ok(())
    }

    /// Benchmark 3: N Applications of ~10 objects from one repository, created at once.
    async fn fleet(&self, n: usize) -> anyhow::Result<()> {
        self.git.create_repo("fleet")?;
        let mut manifests = String::from(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: web, image: nginx, ports: [{containerPort: 80}]}]}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {selector: {app: web}, ports: [{port: 80}]}\n",
        );
        for i in 0..8 {
            manifests.push_str(&format!(
                "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: config-{i}}}\ndata: {{key: value-{i}}}\n"
            ));
        }
        self.git
            .commit("fleet", "main", &[("app/all.yaml", Some(&manifests))], "fleet")?;
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "fleet-repo", "namespace": "capstan", "labels": {"capstan.dev/secret-type": "repository"}},
            "stringData": {"url": self.git.http_url("fleet"), "username": git::USER, "password": git::PASSWORD},
        });
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(self.client.clone(), "capstan");
        secrets
            .create(&PostParams::default(), &serde_json::from_value(secret)?)
            .await?;

        let (git_before, packs_before) = self.git.http_requests();
        let started = Instant::now();
        let names: Vec<String> = (0..n).map(|i| format!("fleet-{i:03}")).collect();
        let results: Vec<anyhow::Result<()>> = stream::iter(names.clone())
            .map(|name| async move {
                self.app(app_manifest(&name, &self.git.http_url("fleet"), "app", &name, true))
                    .await
            })
            .buffer_unordered(16)
            .collect()
            .await;
        results.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
        // Followed through a watch: listing 500 large Applications twice a second would itself load
        // the API server being measured.
        let mut peak = 0;
        let mut done: std::collections::HashSet<String> = std::collections::HashSet::new();
        {
            use kube::runtime::{WatchStreamExt, watcher};
            let events = watcher(self.apps(), watcher::Config::default()).applied_objects();
            let mut events = std::pin::pin!(events);
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            while done.len() < n {
                tokio::select! {
                    event = events.next() => {
                        let Some(Ok(a)) = event else { continue };
                        let name = a.metadata.name.clone().unwrap_or_default();
                        if !name.starts_with("fleet-") {
                            continue;
                        }
                        if a.data.pointer("/status/sync/status") == Some(&json!("Synced"))
                            && a.data.pointer("/status/health/status") == Some(&json!("Healthy"))
                        {
                            done.insert(name);
                        } else {
                            done.remove(&name);
                        }
                    }
                    _ = tick.tick() => {
                        peak = peak.max(self.rss().1);
                        if started.elapsed() > Duration::from_secs(1200) {
                            bail!("only {} of {n} Applications Synced and Healthy after 20 minutes", done.len());
                        }
                    }
                }
            }
        }
        let elapsed = started.elapsed();
        let (git_after, packs_after) = self.git.http_requests();
        println!(
            "3. {n} Applications x 10 objects from one repository: all Synced and Healthy {:.1} s after creation (target <= 90 s); controller peak RSS {:.1} MiB (target <= 150 MiB); git ref listings during the initial wave {}, upload-pack requests {}",
            elapsed.as_secs_f64(),
            peak as f64 / 1024.0,
            git_after - git_before,
            packs_after - packs_before
        );

        // One poll cycle after a new commit: every Application finds it by polling alone.
        let sha = self.git.commit(
            "fleet",
            "main",
            &[(
                "app/extra.yaml",
                Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: extra}\ndata: {a: b}\n"),
            )],
            "poll",
        )?;
        let (git_before, packs_before) = self.git.http_requests();
        let started = Instant::now();
        let deadline = Duration::from_secs(POLL_SECONDS * 3);
        let mut behind = n;
        while started.elapsed() < deadline {
            let list = self.apps().list(&ListParams::default()).await?;
            behind = list
                .items
                .iter()
                .filter(|a| a.metadata.name.as_deref().is_some_and(|n| n.starts_with("fleet-")))
                .filter(|a| a.data.pointer("/status/sync/revision") != Some(&json!(sha)))
                .count();
            if behind == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let (git_after, packs_after) = self.git.http_requests();
        println!(
            "   one poll cycle ({POLL_SECONDS} s interval) after a new commit: {} of {n} Applications at the new revision after {:.1} s; {} git ref listings and {} upload-pack requests for the repository (target: 1 fetch)",
            n - behind,
            started.elapsed().as_secs_f64(),
            git_after - git_before,
            packs_after - packs_before
        );
        Ok(())
    }
}

impl Bench {
    /// Benchmark 7: N Applications from one repository (one directory each, annotated with
    /// `capstan.dev/manifest-generate-paths: .`, automated sync); a signed GitHub push webhook for a
    /// change to one directory. Measures the webhook's answer, the time until the affected Application's
    /// sync starts and until it is Synced at the new revision, and how many Applications moved.
    async fn webhook(&self, n: usize) -> anyhow::Result<()> {
        const SECRET: &str = "bench-webhook-secret";
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(self.client.clone(), "capstan");
        secrets
            .patch(
                "capstan-secret",
                &PatchParams::default(),
                &Patch::Merge(json!({"stringData": {"webhook.github.secret": SECRET}})),
            )
            .await?;
        self.git.create_repo("hooks")?;
        let files: Vec<(String, String)> = (0..n)
            .map(|i| {
                (
                    format!("apps/hook-{i:03}/config.yaml"),
                    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: config}}\ndata: {{version: '1', app: '{i}'}}\n"),
                )
            })
            .collect();
        let refs: Vec<(&str, Option<&str>)> = files.iter().map(|(p, c)| (p.as_str(), Some(c.as_str()))).collect();
        self.git.commit("hooks", "main", &refs, "initial")?;
        let repo = self.git.git_url("hooks");
        let started = Instant::now();
        let names: Vec<String> = (0..n).map(|i| format!("hook-{i:03}")).collect();
        let results: Vec<anyhow::Result<()>> = stream::iter(names.clone())
            .map(|name| {
                let mut manifest = app_manifest(&name, &repo, &format!("apps/{name}"), &name, true);
                manifest["metadata"]["annotations"] = json!({"capstan.dev/manifest-generate-paths": "."});
                async move { self.app(manifest).await }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        results.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
        loop {
            let list = self.apps().list(&ListParams::default()).await?;
            let done = list
                .items
                .iter()
                .filter(|a| a.metadata.name.as_deref().is_some_and(|n| n.starts_with("hook-")))
                .filter(|a| a.data.pointer("/status/sync/status") == Some(&json!("Synced")))
                .count();
            if done == n {
                break;
            }
            if started.elapsed() > Duration::from_secs(1200) {
                bail!("only {done} of {n} webhook Applications Synced after 20 minutes");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        // Let the creation burst settle, so the measurement sees the webhook and not leftovers.
        tokio::time::sleep(Duration::from_secs(3)).await;

        let target = format!("hook-{:03}", n / 2);
        let sha = self.git.commit(
            "hooks",
            "main",
            &[(
                &format!("apps/{target}/config.yaml"),
                Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: config}\ndata: {version: '2'}\n"),
            )],
            "change one app",
        )?;
        let revisions_before = self.revisions("hook-").await?;
        let body = json!({
            "ref": "refs/heads/main",
            "after": sha,
            "repository": {"clone_url": repo, "default_branch": "main"},
            "commits": [{"id": sha, "modified": [format!("apps/{target}/config.yaml")]}],
        })
        .to_string();
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, SECRET.as_bytes());
        let signature: String = ring::hmac::sign(&key, body.as_bytes())
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let sent = Instant::now();
        let mut response = agent
            .post(format!("{}/api/webhook", self.server))
            .header("X-GitHub-Event", "push")
            .header("X-Hub-Signature-256", format!("sha256={signature}"))
            .header("Content-Type", "application/json")
            .send(body)?;
        let answered = sent.elapsed();
        let status = response.status().as_u16();
        let answer = response.body_mut().read_to_string()?;
        if status != 200 {
            bail!("the webhook was refused: {status} {answer}");
        }
        let mut sync_started = None;
        let synced = loop {
            let s = self.status(&target).await?;
            if sync_started.is_none() && s.pointer("/operationState/revision") == Some(&json!(sha)) {
                sync_started = Some(sent.elapsed());
            }
            if s.pointer("/sync/revision") == Some(&json!(sha))
                && s.pointer("/sync/status") == Some(&json!("Synced"))
                && s.pointer("/operationState/phase") == Some(&json!(OperationPhase::Succeeded))
            {
                break sent.elapsed();
            }
            if sent.elapsed() > Duration::from_secs(120) {
                bail!("{target} did not sync the pushed commit within 120 s: {s}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let revisions_after = self.revisions("hook-").await?;
        let moved = revisions_after
            .iter()
            .filter(|(name, rev)| revisions_before.get(*name) != Some(rev))
            .count();
        println!(
            "7. push webhook for a repository with {n} Applications: answered in {:.0} ms ({answer}); {target}'s sync started {:.0} ms after the webhook (target <= 1 s), Synced at the new revision after {:.0} ms; Applications whose status moved to the new revision: {moved}",
            answered.as_secs_f64() * 1000.0,
            sync_started.unwrap_or(synced).as_secs_f64() * 1000.0,
            synced.as_secs_f64() * 1000.0,
        );
        Ok(())
    }

    /// `name → status.sync.revision` of the Applications whose name starts with `prefix`.
    async fn revisions(&self, prefix: &str) -> anyhow::Result<std::collections::HashMap<String, Value>> {
        let list = self.apps().list(&ListParams::default()).await?;
        Ok(list
            .items
            .into_iter()
            .filter(|a| a.metadata.name.as_deref().is_some_and(|n| n.starts_with(prefix)))
            .map(|a| {
                let rev = a.data.pointer("/status/sync/revision").cloned().unwrap_or(Value::Null);
                (a.metadata.name.unwrap_or_default(), rev)
            })
            .collect())
    }

    /// Benchmark 6: one ApplicationSet (git files generator, one file per service, each naming one of
    /// two spoke clusters) producing N Applications; time until all are Synced and Healthy, then the
    /// time for one changed file to reach its Application, and how many Applications that touched.
    async fn appset(&self, n: usize) -> anyhow::Result<()> {
        let (spoke_a, spoke_b) = tokio::try_join!(TestCluster::start(), TestCluster::start())?;
        let hub = self.kubeconfig();
        for (name, spoke) in [("spoke-a", &spoke_a), ("spoke-b", &spoke_b)] {
            let kc = spoke.kubeconfig().to_string_lossy().to_string();
            run(
                &self.capstan,
                &[
                    "cluster",
                    "add",
                    name,
                    "--kubeconfig",
                    &kc,
                    "--use-kubeconfig-credentials",
                    "--hub-kubeconfig",
                    &hub,
                ],
            )?;
        }
        self.git.create_repo("services")?;
        let app = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {a: b}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: web, image: nginx}]}\n";
        let file = |i: usize, revision: &str| {
            let cluster = if i.is_multiple_of(2) { "spoke-a" } else { "spoke-b" };
            format!("service: svc-{i:03}\ncluster: {cluster}\ntargetRevision: {revision}\n")
        };
        let files: Vec<(String, String)> = (0..n)
            .map(|i| (format!("services/svc-{i:03}/config.yaml"), file(i, "main")))
            .collect();
        let mut entries: Vec<(&str, Option<&str>)> =
            files.iter().map(|(p, c)| (p.as_str(), Some(c.as_str()))).collect();
        entries.push(("app/all.yaml", Some(app)));
        let main = self.git.commit("services", "main", &entries, "services")?;
        let repo = self.git.git_url("services");
        let set = json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "ApplicationSet",
            "metadata": {"name": "services", "namespace": "capstan"},
            "spec": {
                "generators": [{"git": {"repoURL": repo, "revision": "main", "files": [{"path": "services/*/config.yaml"}]}}],
                "template": {
                    "metadata": {"name": "{{service}}"},
                    "spec": {
                        "source": {"repoURL": repo, "targetRevision": "{{targetRevision}}", "path": "app"},
                        "destination": {"name": "{{cluster}}", "namespace": "{{service}}"},
                        "syncPolicy": {"automated": {"prune": true}, "syncOptions": ["CreateNamespace=true"]},
                    },
                },
            },
        });
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("capstan.dev", "v1alpha1", "ApplicationSet"),
            "applicationsets",
        );
        let sets: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), "capstan", &ar);
        let started = Instant::now();
        sets.patch("services", &PatchParams::apply("bench").force(), &Patch::Apply(set))
            .await?;
        let is_generated = |a: &DynamicObject| a.metadata.name.as_deref().is_some_and(|n| n.starts_with("svc-"));
        loop {
            let list = self.apps().list(&ListParams::default()).await?;
            let done = list
                .items
                .iter()
                .filter(|a| is_generated(a))
                .filter(|a| {
                    a.data.pointer("/status/sync/status") == Some(&json!("Synced"))
                        && a.data.pointer("/status/health/status") == Some(&json!("Healthy"))
                })
                .count();
            if done == n {
                break;
            }
            if started.elapsed() > Duration::from_secs(900) {
                bail!("only {done} of {n} generated Applications Synced and Healthy after 15 minutes");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let all_healthy = started.elapsed();

        // One file changes: only its Application's spec may change.
        let before: std::collections::HashMap<String, i64> = self
            .apps()
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|a| is_generated(a))
            .map(|a| {
                (
                    a.metadata.name.clone().unwrap_or_default(),
                    a.metadata.generation.unwrap_or(0),
                )
            })
            .collect();
        let changed = format!("services/svc-{:03}/config.yaml", n / 2);
        self.git.commit(
            "services",
            "main",
            &[(&changed, Some(&file(n / 2, &main)))],
            "pin one service",
        )?;
        let started = Instant::now();
        let refresh = json!({"metadata": {"annotations": {"capstan.dev/refresh": "normal"}}});
        sets.patch("services", &PatchParams::default(), &Patch::Merge(refresh))
            .await?;
        let target = format!("svc-{:03}", n / 2);
        loop {
            let app = self.apps().get(&target).await?;
            if app.data.pointer("/spec/source/targetRevision") == Some(&json!(main)) {
                break;
            }
            if started.elapsed() > Duration::from_secs(120) {
                bail!("{target} did not get the changed file within 2 minutes");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let propagated = started.elapsed();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let touched: Vec<String> = self
            .apps()
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|a| is_generated(a))
            .filter(|a| {
                let name = a.metadata.name.clone().unwrap_or_default();
                before.get(&name) != Some(&a.metadata.generation.unwrap_or(0))
            })
            .map(|a| a.metadata.name.clone().unwrap_or_default())
            .collect();
        println!(
            "6. 1 ApplicationSet x {n} generated Applications across 2 spokes: all Synced and Healthy {:.1} s after creation; one changed file reached its Application {:.2} s after the refresh; Applications whose spec changed: {} ({}) (target: only the affected one)",
            all_healthy.as_secs_f64(),
            propagated.as_secs_f64(),
            touched.len(),
            touched.join(", ")
        );
        drop((spoke_a, spoke_b));
        Ok(())
    }
}

fn app_manifest(name: &str, repo: &str, path: &str, namespace: &str, automated: bool) -> Value {
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
fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let rank = ((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len().max(1));
    samples.get(rank - 1).copied().unwrap_or_default()
}

fn capstan_testkit_kubectl() -> anyhow::Result<PathBuf> {
    cached_bin("kubectl")
}

fn cached_bin(name: &str) -> anyhow::Result<PathBuf> {
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

fn run(program: &Path, args: &[&str]) -> anyhow::Result<()> {
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
fn rss_of(pid: u32) -> (u64, u64) {
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

//! Benchmark 13 (issue 31): scaling. N Applications of a few objects each (a Namespace, a
//! ConfigMap, a Service and a ServiceAccount, one directory per Application in one repository) on
//! 1 and on 3 controller replicas, and — when Flux is built (`scripts/setup.sh --with-bench-tools`)
//! — Flux's source-controller and kustomize-controller doing the same work with one GitRepository
//! and N Kustomizations ([`crate::flux`]). Every run has a control plane and a git server of its own.
//!
//! Per run: the time from creating the N objects until all are Synced and Healthy (Flux: Ready) at
//! the first commit; the time from a commit changing every Application's ConfigMap until all are
//! there (both notice it by polling the repository at the same interval); the peak RSS of each
//! process; the API server's requests per Application over the run (all clients, from its own
//! `apiserver_request_total`); and, for Capstan, the list API's first page. `scale_plot` draws
//! the rows.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use capstan_api::status::{HealthCode, SyncCode};
use capstan_testkit::{GitServer, TestCluster, git};
use futures::{StreamExt, stream};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::{Value, json};

/// The repository of every run.
const REPO: &str = "scale";

/// What the scaling benchmark runs.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) capstan: PathBuf,
    /// Numbers of Applications, one set of runs each.
    pub(crate) sizes: Vec<usize>,
    /// Controller replicas, one run each per size.
    pub(crate) replicas: Vec<usize>,
    /// The sizes at which Flux runs beside (it needs its controllers in the tool cache).
    pub(crate) flux: Vec<usize>,
    /// The repository poll interval of Capstan and of Flux's GitRepository.
    pub(crate) poll: Duration,
}

/// Which system a row measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum System {
    Capstan { replicas: usize },
    Flux,
}

impl std::fmt::Display for System {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            System::Capstan { replicas: 1 } => write!(f, "Capstan, 1 replica"),
            System::Capstan { replicas } => write!(f, "Capstan, {replicas} replicas"),
            System::Flux => write!(f, "Flux (source- and kustomize-controller)"),
        }
    }
}

/// One run's figures.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) n: usize,
    pub(crate) system: System,
    /// Creation until all Synced and Healthy (Ready) at the first commit.
    pub(crate) ready: Duration,
    /// The commit touching all until all are at it.
    pub(crate) commit: Duration,
    /// Peak RSS of each process, KiB.
    pub(crate) rss_kib: Vec<u64>,
    /// API server requests over the run, all clients.
    pub(crate) requests: u64,
    /// The list API's first page (Capstan).
    pub(crate) page: Option<String>,
}

impl Row {
    fn rate(&self) -> f64 {
        self.n as f64 / self.ready.as_secs_f64().max(0.001)
    }

    /// Peak RSS of all the run's processes, MiB.
    pub(crate) fn total_mib(&self) -> f64 {
        self.rss_kib.iter().sum::<u64>() as f64 / 1024.0
    }

    /// The largest process's peak RSS per 1,000 Applications, MiB (each replica caches every
    /// Application, so this is the figure that bounds one replica's memory).
    fn largest_per_thousand(&self) -> f64 {
        self.rss_kib.iter().max().copied().unwrap_or(0) as f64 / 1024.0 * 1000.0 / self.n.max(1) as f64
    }

    /// Each process's peak RSS in MiB, `a + b + c`.
    fn rss_text(&self) -> String {
        self.rss_kib
            .iter()
            .map(|k| format!("{:.1}", *k as f64 / 1024.0))
            .collect::<Vec<_>>()
            .join(" + ")
    }

    fn line(&self) -> String {
        format!(
            "13. {} Applications, {}: all Synced and Healthy {:.1} s after creation ({:.1} per s; goal > 4); a commit touching all reached all in {:.1} s (poll interval included); peak RSS {} MiB (largest process {:.1} MiB per 1,000 Applications; goal < 60); {:.1} API requests per Application{}",
            self.n,
            self.system,
            self.ready.as_secs_f64(),
            self.rate(),
            self.commit.as_secs_f64(),
            self.rss_text(),
            self.largest_per_thousand(),
            self.requests as f64 / self.n as f64,
            self.page.as_ref().map(|p| format!("; {p}")).unwrap_or_default(),
        )
    }
}

/// The files of application `i` at `generation`: its Namespace and three objects in it.
fn manifests(i: usize, generation: u32) -> String {
    let ns = namespace(i);
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: config, namespace: {ns}}}\ndata: {{generation: '{generation}', app: '{i}'}}\n---\napiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: {ns}}}\nspec: {{selector: {{app: web}}, ports: [{{port: 80}}]}}\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: app, namespace: {ns}}}\n"
    )
}

fn namespace(i: usize) -> String {
    format!("scale-{i:05}")
}

/// Directory of application `i` in the repository.
pub(crate) fn app_path(i: usize) -> String {
    format!("apps/{i:05}")
}

/// Commit every application's files at `generation`; the commit's SHA.
fn commit_all(git: &GitServer, n: usize, generation: u32) -> anyhow::Result<String> {
    let files: Vec<(String, String)> = (0..n)
        .map(|i| (format!("{}/all.yaml", app_path(i)), manifests(i, generation)))
        .collect();
    let refs: Vec<(&str, Option<&str>)> = files.iter().map(|(p, c)| (p.as_str(), Some(c.as_str()))).collect();
    git.commit(REPO, "main", &refs, &format!("generation {generation}"))
}

/// What the runs measured, and which failed.
pub(crate) struct Runs {
    pub(crate) rows: Vec<Row>,
    pub(crate) failed: Vec<String>,
}

/// Run every size on every replica count (and Flux), print a line per run and a table.
pub(crate) async fn scale(options: &Options) -> anyhow::Result<Runs> {
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    // A run that fails is reported and the others go on: the table holds what was measured.
    let mut report = |n: usize, system: System, row: anyhow::Result<Row>| match row {
        Ok(row) => {
            println!("{}", row.line());
            rows.push(row);
        }
        Err(e) => {
            println!("13. {n} Applications, {system}: FAILED: {e:#}");
            failed.push(format!("{n}, {system}"));
        }
    };
    for &n in &options.sizes {
        for &replicas in &options.replicas {
            let replicas = replicas.max(1);
            report(n, System::Capstan { replicas }, capstan_run(options, n, replicas).await);
        }
        if options.flux.contains(&n) {
            report(n, System::Flux, flux_run(options, n).await);
        }
    }
    println!("{}", table(&rows));
    Ok(Runs { rows, failed })
}

/// The controller replicas of one run (each with its log file and health port), stopped
/// (SIGKILL) when dropped.
struct Replicas(Vec<(Child, PathBuf, u16)>);

impl Replicas {
    /// An error naming a replica that has exited, with its log's end.
    fn check(&mut self) -> anyhow::Result<()> {
        for (child, log, _) in &mut self.0 {
            if let Some(status) = child.try_wait()? {
                bail!(
                    "a controller replica exited ({status}); the end of {}:\n{}",
                    log.display(),
                    crate::setup::log_tail(log)
                );
            }
        }
        Ok(())
    }

    /// Wait until every replica answers `/readyz` (its watches have listed).
    async fn ready(&mut self, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        let ports: Vec<u16> = self.0.iter().map(|(_, _, port)| *port).collect();
        for port in ports {
            loop {
                self.check()?;
                let ready = crate::setup::ready(port).await?;
                if ready {
                    break;
                }
                if Instant::now() > deadline {
                    bail!("a controller replica was not ready after {} s", limit.as_secs());
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        Ok(())
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        for (child, _, _) in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

async fn capstan_run(options: &Options, n: usize, replicas: usize) -> anyhow::Result<Row> {
    let cluster = TestCluster::start().await?;
    let git = GitServer::start().await?;
    let client = cluster.client().await?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    git.create_repo(REPO)?;
    let first = commit_all(&git, n, 1)?;
    crate::setup::run(&options.capstan, &["install", "--kubeconfig", &kc])?;
    let out = Command::new(&options.capstan)
        .args(["account", "set-password", "admin", "--password", crate::ui::PASSWORD])
        .env("KUBECONFIG", &kc)
        .output()?;
    if !out.status.success() {
        bail!("set-password failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "scale-repo", "namespace": "capstan", "labels": {"capstan.dev/secret-type": "repository"}},
        "stringData": {"url": git.http_url(REPO), "username": git::USER, "password": git::PASSWORD},
    });
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), "capstan");
    secrets
        .create(&PostParams::default(), &serde_json::from_value(secret)?)
        .await?;

    let caches = tempfile::tempdir()?;
    let port = crate::setup::free_port()?;
    let listen = format!("127.0.0.1:{port}");
    let mut children = Vec::new();
    for r in 0..replicas {
        let health = crate::setup::free_port()?;
        let log = caches.path().join(format!("replica-{r}.log"));
        let mut command = Command::new(&options.capstan);
        command
            .args([
                "controller",
                "--kubeconfig",
                &kc,
                "--poll-interval",
                &options.poll.as_secs().to_string(),
                "--replica-id",
                &format!("scale-{r}"),
                "--cache-dir",
            ])
            .arg(caches.path().join(format!("replica-{r}")))
            .args(["--health-listen", &format!("127.0.0.1:{health}")])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?);
        // One replica serves the API (its list is what the first-page figure measures).
        if r == 0 {
            command.args(["--listen", &listen]);
        }
        children.push((command.spawn().context("starting capstan controller")?, log, health));
    }
    let mut replicas_running = Replicas(children);
    // The clock starts once every replica is ready, as Flux's does once its controllers are.
    replicas_running.ready(Duration::from_secs(120)).await?;

    let apps = applications(&client);
    let requests_before = crate::setup::api_requests(&client).await?;
    let started = Instant::now();
    let repo = git.http_url(REPO);
    let created: Vec<anyhow::Result<()>> = stream::iter(0..n)
        .map(|i| {
            let apps = apps.clone();
            let manifest = application(i, &repo);
            async move {
                let name = format!("scale-{i:05}");
                apps.patch(&name, &PatchParams::apply("bench").force(), &Patch::Apply(manifest))
                    .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    created.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    all_at(&apps, n, &first, started, timeout(n), &mut replicas_running).await?;
    let ready = started.elapsed();
    let base = format!("http://{listen}");
    let page = tokio::task::spawn_blocking(move || crate::ui::first_pages(&base, n)).await??;
    let ui = tokio::task::spawn_blocking(move || ui_rows(port, n)).await?;
    let page = match ui {
        Ok(ui) => format!("{page}; {ui}"),
        Err(err) => format!("{page}; UI not measured: {err:#}"),
    };

    let second = commit_all(&git, n, 2)?;
    let committed = Instant::now();
    all_at(&apps, n, &second, committed, timeout(n), &mut replicas_running).await?;
    let commit = committed.elapsed();
    let requests = crate::setup::api_requests(&client).await? - requests_before;
    replicas_running.check()?;
    let rss_kib = replicas_running
        .0
        .iter()
        .map(|(c, _, _)| crate::setup::rss_of(c.id()).1)
        .collect();
    drop(replicas_running);
    Ok(Row {
        n,
        system: System::Capstan { replicas },
        ready,
        commit,
        rss_kib,
        requests,
        page: Some(page),
    })
}

async fn flux_run(options: &Options, n: usize) -> anyhow::Result<Row> {
    let cluster = TestCluster::start().await?;
    let git = GitServer::start().await?;
    git.create_repo(REPO)?;
    let first = commit_all(&git, n, 1)?;
    let figures = crate::flux::run(&cluster, &git, REPO, &first, n, options.poll, || commit_all(&git, n, 2)).await?;
    Ok(Row {
        n,
        system: System::Flux,
        ready: figures.ready,
        commit: figures.commit,
        rss_kib: vec![figures.peak_rss_kib.0, figures.peak_rss_kib.1],
        requests: figures.requests,
        page: None,
    })
}

/// The web UI served on `port` with `n` Synced Applications: login to first row, and to all `n`
/// counted (benchmark 8's measure, here with the controller running).
fn ui_rows(port: u16, n: usize) -> anyhow::Result<String> {
    let browser = capstan_testkit::webdriver::Browser::start()?;
    let load = crate::ui::login_until_all_rows(&browser, &format!("http://localhost:{port}"), n)?;
    let ms = |k: &str| load[k].as_f64().unwrap_or(f64::NAN);
    Ok(format!(
        "UI login → first row {:.0} ms, all {n} counted {:.0} ms",
        ms("first"),
        ms("all")
    ))
}

/// Generous: 20 minutes and half a second per Application.
fn timeout(n: usize) -> Duration {
    Duration::from_secs(1200) + Duration::from_millis(500 * n as u64)
}

fn applications(client: &kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("capstan.dev", "v1alpha1", "Application"),
        "applications",
    );
    Api::namespaced_with(client.clone(), "capstan", &ar)
}

/// Application `i`: its directory, its namespace (the Namespace is one of its objects, as in the
/// Flux run), automated sync with prune.
fn application(i: usize, repo: &str) -> Value {
    json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
        "metadata": {"name": format!("scale-{i:05}"), "namespace": "capstan"},
        "spec": {
            "source": {"repoURL": repo, "targetRevision": "main", "path": app_path(i)},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": namespace(i)},
            "syncPolicy": {"automated": {"prune": true, "selfHeal": true}},
        },
    })
}

/// Wait, through a watch, until all `n` Applications are Synced and Healthy at `revision`.
async fn all_at(
    apps: &Api<DynamicObject>,
    n: usize,
    revision: &str,
    started: Instant,
    limit: Duration,
    replicas: &mut Replicas,
) -> anyhow::Result<()> {
    use kube::runtime::{WatchStreamExt, watcher};
    let events = watcher(apps.clone(), watcher::Config::default()).applied_objects();
    let mut events = std::pin::pin!(events);
    let mut done = std::collections::HashSet::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    while done.len() < n {
        tokio::select! {
            event = events.next() => {
                let Some(Ok(a)) = event else { continue };
                let name = a.metadata.name.clone().unwrap_or_default();
                if a.data.pointer("/status/sync/status") == Some(&json!(SyncCode::Synced))
                    && a.data.pointer("/status/health/status") == Some(&json!(HealthCode::Healthy))
                    && a.data.pointer("/status/sync/revision") == Some(&json!(revision))
                {
                    done.insert(name);
                } else {
                    done.remove(&name);
                }
            }
            _ = tick.tick() => {
                replicas.check()?;
                if started.elapsed() > limit {
                    bail!("only {} of {n} Applications Synced and Healthy at {revision} after {} s", done.len(), limit.as_secs());
                }
            }
        }
    }
    Ok(())
}

/// The runs as a Markdown table for docs/benchmarks.md.
fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| N | system | all Synced and Healthy | per s | commit to all | peak RSS (MiB) | largest process, MiB per 1,000 | API requests per Application | list API first page; UI |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for row in rows {
        out.push_str(&format!(
            "| {} | {} | {:.1} s | {:.1} | {:.1} s | {} | {:.1} | {:.1} | {} |\n",
            row.n,
            row.system,
            row.ready.as_secs_f64(),
            row.rate(),
            row.commit.as_secs_f64(),
            row.rss_text(),
            row.largest_per_thousand(),
            row.requests as f64 / row.n as f64,
            row.page.as_deref().unwrap_or("—"),
        ));
    }
    // Flux beside Capstan on one replica, per N: how many times longer and larger Flux was.
    for flux in rows.iter().filter(|r| r.system == System::Flux) {
        if let Some(capstan) = rows
            .iter()
            .find(|r| r.n == flux.n && r.system == System::Capstan { replicas: 1 })
        {
            out.push_str(&format!(
                "\nN = {}: Flux took {:.2}× Capstan's time to all Ready ({:.2}× for the commit) with {:.2}× its memory (sum of processes' peak RSS).",
                flux.n,
                flux.ready.as_secs_f64() / capstan.ready.as_secs_f64().max(0.001),
                flux.commit.as_secs_f64() / capstan.commit.as_secs_f64().max(0.001),
                flux.total_mib() / capstan.total_mib().max(0.001),
            ));
        }
    }
    out
}

/// Parse a comma-separated list of numbers.
pub(crate) fn numbers(list: &str, what: &str) -> anyhow::Result<Vec<usize>> {
    list.split(',')
        .map(|s| {
            s.trim()
                .parse()
                .with_context(|| format!("{what} {s:?} is not a number"))
        })
        .collect()
}

/// The default place of the plot (`scale_plot`): beside docs/benchmarks.md.
pub(crate) const DEFAULT_PLOT: &str = "docs/benchmarks-scale.svg";

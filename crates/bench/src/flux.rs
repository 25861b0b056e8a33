//! Flux side by side with the scaling benchmark (issue 31, item 5): Flux's source-controller and
//! kustomize-controller, built from the Go module proxy by `scripts/setup.sh --with-bench-tools`,
//! run as their own processes against the benchmark's control plane and git server, with one
//! GitRepository and N Kustomizations doing the work of N Applications (docs/flux-side-by-side.md).
//!
//! Both controllers run with their default concurrency, API rate limits and intervals, except what a
//! process outside a cluster needs: loopback addresses for every listener, the artifact storage in a
//! scratch directory, and no leader election. A Kustomization counts once its `Ready` condition is
//! `True` for its current generation and its `status.lastAppliedRevision` names the commit.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use capstan_testkit::{GitServer, TestCluster, git};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::{Value, json};

use crate::setup;

/// The namespace of the controllers' objects (as `flux install` makes it).
const NAMESPACE: &str = "flux-system";
/// The GitRepository of every Kustomization, and the Secret with its credentials.
const SOURCE: &str = "scale";
const SECRET: &str = "scale-git-auth";
/// Server-side apply field manager of the objects this module creates.
const MANAGER: &str = "capstan-bench";

/// What one Flux run measured.
#[derive(Debug, Clone)]
pub(crate) struct FluxFigures {
    /// From creating the GitRepository and the Kustomizations until every one is Ready at the first
    /// revision.
    pub(crate) ready: Duration,
    /// From the commit touching every application until every Kustomization is Ready at it.
    pub(crate) commit: Duration,
    /// Peak RSS in KiB of source-controller and of kustomize-controller.
    pub(crate) peak_rss_kib: (u64, u64),
    /// Requests the API server served during the run (its `apiserver_request_total`), all clients.
    pub(crate) requests: u64,
}

/// Run Flux on `cluster` for the `n` applications of `repo` on `git` (directories `apps/NNNNN`,
/// branch `main`, already committed at `first`); `touch_all` commits the change to every
/// application and returns its SHA.
pub(crate) async fn run(
    cluster: &TestCluster,
    git: &GitServer,
    repo: &str,
    first: &str,
    n: usize,
    poll: Duration,
    touch_all: impl FnOnce() -> anyhow::Result<String>,
) -> anyhow::Result<FluxFigures> {
    let binaries = Binaries::find()?;
    let client = cluster.client().await?;
    install_crds(cluster.kubeconfig(), &binaries.crds)?;
    create_namespace(&client).await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": NAMESPACE},
        "stringData": {"username": git::USER, "password": git::PASSWORD},
    });
    secrets
        .patch(SECRET, &PatchParams::apply(MANAGER).force(), &Patch::Apply(secret))
        .await
        .context("creating the GitRepository's credentials")?;

    let controllers = Controllers::start(&binaries, cluster.kubeconfig())?;
    controllers.wait_ready(Duration::from_secs(120)).await?;
    let peak = Peak::default();
    let sampler = peak.sampler(&controllers);

    let kustomizations = api(&client, &KUSTOMIZATION);
    let mut watch = Watch::start(&kustomizations).await?;
    let limit = timeout(n);

    // Counted from here, as in Capstan's run: once installed and started, before the clock.
    let requests_before = setup::api_requests(&client).await?;
    let started = Instant::now();
    api(&client, &GIT_REPOSITORY)
        .patch(
            SOURCE,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(git_repository(&git.http_url(repo), poll)),
        )
        .await
        .context("creating the GitRepository")?;
    let created: Vec<anyhow::Result<()>> = stream::iter(0..n)
        .map(|i| {
            let kustomizations = kustomizations.clone();
            async move {
                let name = name(i);
                kustomizations
                    .patch(
                        &name,
                        &PatchParams::apply(MANAGER).force(),
                        &Patch::Apply(kustomization(i)),
                    )
                    .await
                    .with_context(|| format!("creating Kustomization {name}"))?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    created.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    watch.all_ready_at(n, first, started, limit, &controllers).await?;
    let ready = started.elapsed();

    let second = touch_all()?;
    let committed = Instant::now();
    watch.all_ready_at(n, &second, committed, limit, &controllers).await?;
    let commit = committed.elapsed();

    sampler.abort();
    peak.sample(&controllers);
    let requests = setup::api_requests(&client).await?.saturating_sub(requests_before);
    drop(controllers);
    Ok(FluxFigures {
        ready,
        commit,
        peak_rss_kib: peak.get(),
        requests,
    })
}

/// Generous: 20 minutes and half a second per application, for each of the two waits.
fn timeout(n: usize) -> Duration {
    Duration::from_secs(1200) + Duration::from_millis(500 * n as u64)
}

/// The cached programs and CRDs of `scripts/setup.sh --with-bench-tools`.
struct Binaries {
    source: PathBuf,
    kustomize: PathBuf,
    crds: PathBuf,
}

impl Binaries {
    fn find() -> anyhow::Result<Binaries> {
        let hint = "run `bash scripts/setup.sh --with-bench-tools`";
        let source = setup::cached_bin("flux-source-controller").context(hint)?;
        let kustomize = setup::cached_bin("flux-kustomize-controller").context(hint)?;
        let crds = source
            .parent()
            .and_then(Path::parent)
            .map(|cache| cache.join("flux").join("crds"))
            .filter(|dir| dir.join("VERSIONS").is_file())
            .with_context(|| format!("Flux's CRDs are not in the tool cache: {hint}"))?;
        Ok(Binaries {
            source,
            kustomize,
            crds,
        })
    }
}

/// Flux's CRDs (every kind the two controllers watch: a controller whose kind has no CRD does not
/// start), applied server-side and waited for until established.
fn install_crds(kubeconfig: &Path, dir: &Path) -> anyhow::Result<()> {
    let kubectl = setup::capstan_testkit_kubectl()?;
    let kc = kubeconfig.to_string_lossy();
    let dir = dir.to_string_lossy();
    setup::run(
        &kubectl,
        &[
            "--kubeconfig",
            &kc,
            "apply",
            "--server-side",
            "--field-manager",
            MANAGER,
            "-f",
            &dir,
        ],
    )
    .context("installing Flux's CRDs")?;
    setup::run(
        &kubectl,
        &[
            "--kubeconfig",
            &kc,
            "wait",
            "--for",
            "condition=Established",
            "--timeout",
            "60s",
            "-f",
            &dir,
        ],
    )
    .context("waiting for Flux's CRDs")
}

async fn create_namespace(client: &kube::Client) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}))?;
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e).context("creating namespace flux-system"),
    }
}

struct Kind {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
}

const GIT_REPOSITORY: Kind = Kind {
    group: "source.toolkit.fluxcd.io",
    version: "v1",
    kind: "GitRepository",
    plural: "gitrepositories",
};

const KUSTOMIZATION: Kind = Kind {
    group: "kustomize.toolkit.fluxcd.io",
    version: "v1",
    kind: "Kustomization",
    plural: "kustomizations",
};

fn api(client: &kube::Client, kind: &Kind) -> Api<DynamicObject> {
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(kind.group, kind.version, kind.kind), kind.plural);
    Api::namespaced_with(client.clone(), NAMESPACE, &ar)
}

fn git_repository(url: &str, poll: Duration) -> Value {
    json!({
        "apiVersion": format!("{}/{}", GIT_REPOSITORY.group, GIT_REPOSITORY.version),
        "kind": GIT_REPOSITORY.kind,
        "metadata": {"name": SOURCE, "namespace": NAMESPACE},
        "spec": {
            "url": url,
            "ref": {"branch": "main"},
            "interval": format!("{}s", poll.as_secs().max(1)),
            "secretRef": {"name": SECRET},
        },
    })
}

fn name(i: usize) -> String {
    format!("scale-{i:05}")
}

/// Kustomization `i`: the directory of application `i`, pruned, the commit noticed through the
/// GitRepository (its own interval is Flux's usual 10 minutes); the manifests carry their Namespace.
fn kustomization(i: usize) -> Value {
    json!({
        "apiVersion": format!("{}/{}", KUSTOMIZATION.group, KUSTOMIZATION.version),
        "kind": KUSTOMIZATION.kind,
        "metadata": {"name": name(i), "namespace": NAMESPACE},
        "spec": {
            "interval": "10m",
            "path": format!("./apps/{i:05}"),
            "prune": true,
            "sourceRef": {"kind": GIT_REPOSITORY.kind, "name": SOURCE},
        },
    })
}

/// One controller process, killed (and reaped) on drop.
struct Process {
    name: &'static str,
    child: Child,
    log: PathBuf,
    health: u16,
}

/// Both controllers and their scratch directory (artifact storage, temporary files, logs).
struct Controllers {
    processes: Vec<Process>,
    _dir: tempfile::TempDir,
}

impl Drop for Controllers {
    fn drop(&mut self) {
        for p in &mut self.processes {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }
}

impl Controllers {
    fn start(binaries: &Binaries, kubeconfig: &Path) -> anyhow::Result<Controllers> {
        let dir = tempfile::Builder::new().prefix("capstan-flux-").tempdir()?;
        let storage = dir.path().join("storage");
        let tmp = dir.path().join("tmp");
        std::fs::create_dir_all(&storage)?;
        std::fs::create_dir_all(&tmp)?;
        let storage_addr = format!("127.0.0.1:{}", setup::free_port()?);
        let scratch = dir.path().to_path_buf();
        let mut controllers = Controllers {
            processes: Vec::new(),
            _dir: dir,
        };
        let common = |health: u16| -> anyhow::Result<Vec<String>> {
            Ok(vec![
                format!("--metrics-addr=127.0.0.1:{}", setup::free_port()?),
                format!("--health-addr=127.0.0.1:{health}"),
                "--enable-leader-election=false".into(),
                "--watch-all-namespaces=true".into(),
                "--log-level=info".into(),
            ])
        };
        let health = setup::free_port()?;
        let mut args = common(health)?;
        args.extend([
            format!("--storage-path={}", storage.display()),
            format!("--storage-addr={storage_addr}"),
            format!("--storage-adv-addr={storage_addr}"),
        ]);
        controllers.spawn(
            "source-controller",
            &binaries.source,
            &args,
            health,
            kubeconfig,
            &scratch,
            &tmp,
        )?;
        let health = setup::free_port()?;
        let args = common(health)?;
        controllers.spawn(
            "kustomize-controller",
            &binaries.kustomize,
            &args,
            health,
            kubeconfig,
            &scratch,
            &tmp,
        )?;
        Ok(controllers)
    }

    #[allow(clippy::too_many_arguments)]
    fn spawn(
        &mut self,
        name: &'static str,
        program: &Path,
        args: &[String],
        health: u16,
        kubeconfig: &Path,
        dir: &Path,
        tmp: &Path,
    ) -> anyhow::Result<()> {
        let log = dir.join(format!("{name}.log"));
        let out = File::create(&log)?;
        let err = out.try_clone()?;
        let child = Command::new(program)
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            // The namespace the controllers believe they run in (Flux's manifests set it from the Pod).
            .env("RUNTIME_NAMESPACE", NAMESPACE)
            .env("TMPDIR", tmp)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        self.processes.push(Process {
            name,
            child,
            log,
            health,
        });
        Ok(())
    }

    /// Wait until both answer their readiness probe (`/readyz` on the health address).
    async fn wait_ready(&self, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        for p in &self.processes {
            loop {
                self.check_running()?;
                let ok = setup::ready(p.health).await?;
                if ok {
                    break;
                }
                if Instant::now() > deadline {
                    bail!("{} was not ready after {limit:?}:\n{}", p.name, setup::log_tail(&p.log));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        Ok(())
    }

    /// An error, with the end of its log, if a controller has exited.
    fn check_running(&self) -> anyhow::Result<()> {
        for p in &self.processes {
            if !Path::new(&format!("/proc/{}", p.child.id())).exists() || is_zombie(p.child.id()) {
                bail!("{} exited:\n{}", p.name, setup::log_tail(&p.log));
            }
        }
        Ok(())
    }

    fn pids(&self) -> Vec<u32> {
        self.processes.iter().map(|p| p.child.id()).collect()
    }
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('Z')))
        .unwrap_or(true)
}

/// The peak RSS (VmHWM) of each controller, sampled every second (a process that is gone keeps its
/// last sample).
#[derive(Default, Clone)]
struct Peak(std::sync::Arc<std::sync::Mutex<(u64, u64)>>);

impl Peak {
    fn sampler(&self, controllers: &Controllers) -> tokio::task::JoinHandle<()> {
        let pids = controllers.pids();
        let peak = self.clone();
        tokio::spawn(async move {
            loop {
                peak.sample_pids(&pids);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    }

    fn sample(&self, controllers: &Controllers) {
        self.sample_pids(&controllers.pids());
    }

    fn sample_pids(&self, pids: &[u32]) {
        let hwm: Vec<u64> = pids.iter().map(|&pid| setup::rss_of(pid).1).collect();
        if let Ok(mut peak) = self.0.lock() {
            peak.0 = peak.0.max(hwm.first().copied().unwrap_or(0));
            peak.1 = peak.1.max(hwm.get(1).copied().unwrap_or(0));
        }
    }

    fn get(&self) -> (u64, u64) {
        self.0.lock().map(|p| *p).unwrap_or_default()
    }
}

/// What the watch last saw of one Kustomization.
#[derive(Debug, Clone, Default)]
struct Seen {
    ready: bool,
    revision: String,
    message: String,
}

impl Seen {
    fn of(k: &DynamicObject) -> Seen {
        let generation = k.metadata.generation;
        let status = k.data.get("status");
        let observed = status.and_then(|s| s.get("observedGeneration")).and_then(Value::as_i64);
        let condition = status
            .and_then(|s| s.get("conditions"))
            .and_then(Value::as_array)
            .and_then(|c| c.iter().find(|c| c.get("type") == Some(&json!("Ready"))));
        let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_string();
        Seen {
            ready: condition.and_then(|c| c.get("status")) == Some(&json!("True"))
                && generation.is_some()
                && observed == generation,
            revision: text(status.and_then(|s| s.get("lastAppliedRevision"))),
            message: text(condition.and_then(|c| c.get("message"))),
        }
    }

    /// Flux's revisions read `BRANCH@sha1:SHA`.
    fn ready_at(&self, sha: &str) -> bool {
        self.ready && self.revision.ends_with(sha)
    }
}

/// A watch on the Kustomizations of the namespace, its latest view of each kept across waits.
struct Watch {
    rx: tokio::sync::mpsc::UnboundedReceiver<anyhow::Result<(String, Seen)>>,
    task: tokio::task::JoinHandle<()>,
    seen: HashMap<String, Seen>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Watch {
    /// Start watching; returns once the initial listing is done.
    async fn start(api: &Api<DynamicObject>) -> anyhow::Result<Watch> {
        use kube::runtime::watcher;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let (listed_tx, listed_rx) = tokio::sync::oneshot::channel();
        let stream = watcher(api.clone(), watcher::Config::default());
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            let mut listed = Some(listed_tx);
            while let Some(event) = stream.next().await {
                let sent = match event {
                    Ok(watcher::Event::Apply(k) | watcher::Event::InitApply(k)) => {
                        let name = k.metadata.name.clone().unwrap_or_default();
                        tx.send(Ok((name, Seen::of(&k))))
                    }
                    Ok(watcher::Event::InitDone) => {
                        if let Some(listed) = listed.take() {
                            let _ = listed.send(());
                        }
                        Ok(())
                    }
                    Ok(_) => Ok(()),
                    Err(e) => tx.send(Err(anyhow::Error::from(e))),
                };
                if sent.is_err() {
                    return;
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(60), listed_rx)
            .await
            .context("the watch on Kustomizations did not list them within a minute")?
            .context("the watch on Kustomizations ended")?;
        let mut seen = HashMap::new();
        while let Ok(event) = rx.try_recv() {
            if let Ok((name, s)) = event {
                seen.insert(name, s);
            }
        }
        Ok(Watch { rx, task, seen })
    }

    /// Wait until `n` Kustomizations are Ready at `sha`; an error naming how many were, and why one
    /// was not, after `limit` from `started`, or if a controller exits.
    async fn all_ready_at(
        &mut self,
        n: usize,
        sha: &str,
        started: Instant,
        limit: Duration,
        controllers: &Controllers,
    ) -> anyhow::Result<()> {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut errors = 0u32;
        loop {
            let done = self.seen.values().filter(|s| s.ready_at(sha)).count();
            if done >= n {
                return Ok(());
            }
            tokio::select! {
                event = self.rx.recv() => match event {
                    Some(Ok((name, seen))) => {
                        self.seen.insert(name, seen);
                    }
                    // The watcher retries by itself; say so only now and then.
                    Some(Err(e)) => {
                        errors += 1;
                        if errors.is_power_of_two() {
                            eprintln!("flux: watch on Kustomizations: {e:#} ({errors} errors)");
                        }
                    }
                    None => bail!("the watch on Kustomizations ended"),
                },
                _ = tick.tick() => {
                    controllers.check_running()?;
                    if started.elapsed() > limit {
                        let stuck = self
                            .seen
                            .iter()
                            .filter(|(_, s)| !s.ready_at(sha))
                            .min_by(|a, b| a.0.cmp(b.0))
                            .map(|(name, s)| format!("; {name}: ready={} revision={:?} message={:?}", s.ready, s.revision, s.message))
                            .unwrap_or_default();
                        bail!(
                            "Flux: only {done} of {n} Kustomizations Ready at {sha} after {} s ({} seen){stuck}",
                            limit.as_secs(),
                            self.seen.len(),
                        );
                    }
                }
            }
        }
    }
}

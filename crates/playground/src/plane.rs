//! Bringing a whole local control plane up and down: etcd → kube-apiserver → kube-controller-manager
//! → kube-scheduler → kwok (simulated nodes), on free loopback ports, with all state under one
//! directory. The Kubernetes release is the one [`KubeVersion::selected`] names.
//!
//! Layout of the directory: `pki/` (certificates), `etcd/` (data), `logs/NAME.log`, `run/NAME.pid`,
//! `state.json` (the ports in use), `kubeconfig` (admin access), `kube-scheduler.yaml` and
//! `kwok.yaml` (configuration).

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::Api;
use serde::{Deserialize, Serialize};

use crate::binaries::KubeVersion;
use crate::pki::{self, PkiPaths};
use crate::process;
use crate::{Error, Result, binaries, kubeconfig, kwok};

/// Component names, in start order.
pub const COMPONENTS: [&str; 5] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
];
/// Optional processes that other tools (`scripts/playground.sh`) start in the playground's directory
/// with a pid file in the same format; `down` stops them too, `status` shows them when present.
pub const EXTRAS: [&str; 5] = ["git-daemon", "helm-repository", "openbao", "registry", "capstan-server"];

/// Options for [`Playground::up`].
#[derive(Debug, Clone)]
pub struct UpOptions {
    /// State directory.
    pub dir: PathBuf,
    /// Number of simulated nodes.
    pub nodes: usize,
    /// How long to wait for the control plane to become ready.
    pub timeout: Duration,
    /// A throwaway control plane (tests): etcd does not fsync (where its release can be told so),
    /// trading durability across a machine crash for speed.
    pub throwaway: bool,
    /// Write the API server's audit log of every write to `audit.log` in the state directory
    /// ([`AUDIT_LOG`]), with the request bodies of Leases (tests of replicas read who held what).
    pub audit: bool,
}

/// The audit log's file name in a playground's directory (see [`UpOptions::audit`]).
pub const AUDIT_LOG: &str = "audit.log";

/// The audit policy of [`UpOptions::audit`]: writes only (no reads, no Events), Leases with their
/// bodies.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    verbs: [get, list, watch]
  - level: None
    resources: [{group: \"\", resources: [events]}, {group: events.k8s.io, resources: [events]}]
  - level: Request
    resources: [{group: coordination.k8s.io, resources: [leases]}]
  - level: Metadata
";

impl UpOptions {
    /// Defaults: 3 nodes, 120 s timeout.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            nodes: 3,
            timeout: Duration::from_secs(120),
            throwaway: false,
            audit: false,
        }
    }
}

/// The ports a playground listens on, kept in `state.json` so a restart can reuse them.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct Ports {
    /// etcd client port.
    pub etcd_client: u16,
    /// etcd peer port.
    pub etcd_peer: u16,
    /// kube-apiserver secure port.
    pub apiserver: u16,
    /// The simulated kubelets' port (kwok's server: container logs); 0 in a state file written
    /// before it existed, which makes the playground pick new ports.
    #[serde(default)]
    pub kubelet: u16,
}

impl Ports {
    fn free() -> Result<Ports> {
        // Hold all four listeners at once so the ports differ.
        let bind = || TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(Error::io("finding a free loopback port"));
        let (a, b, c, d) = (bind()?, bind()?, bind()?, bind()?);
        let port = |l: &TcpListener| {
            l.local_addr()
                .map(|a| a.port())
                .map_err(Error::io("reading a local address"))
        };
        Ok(Ports {
            etcd_client: port(&a)?,
            etcd_peer: port(&b)?,
            apiserver: port(&c)?,
            kubelet: port(&d)?,
        })
    }

    fn all_free(&self) -> bool {
        self.kubelet != 0
            && [self.etcd_client, self.etcd_peer, self.apiserver, self.kubelet]
                .iter()
                .all(|p| TcpListener::bind((Ipv4Addr::LOCALHOST, *p)).is_ok())
    }

    /// The API server URL.
    pub fn server(&self) -> String {
        format!("https://127.0.0.1:{}", self.apiserver)
    }
}

/// One component's state, for `capstan local status`.
#[derive(Debug, Clone, Serialize)]
pub struct ComponentStatus {
    /// Component name.
    pub name: String,
    /// Its pid, if a pid file exists.
    pub pid: Option<i32>,
    /// Whether that process is running.
    pub running: bool,
}

/// Environment variable naming a file to which every control plane booted (not one found already
/// running) appends a line: Unix time, seconds the boot took, state directory, and the command line of
/// the process that booted it. Used to count the planes a test run starts (docs/benchmarks.md).
pub const BOOT_LOG_ENV: &str = "CAPSTAN_PLANE_BOOT_LOG";

/// Append this boot to the file [`BOOT_LOG_ENV`] names, if any. One `write` per line, in append
/// mode, so concurrent test processes do not interleave within a line.
fn record_boot(dir: &Path, took: Duration) {
    let Some(log) = std::env::var_os(BOOT_LOG_ENV) else {
        return;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let args: Vec<String> = std::env::args().collect();
    let line = format!(
        "{}\t{:.1}\t{}\t{}\n",
        now.as_secs(),
        took.as_secs_f64(),
        dir.display(),
        args.join(" ")
    );
    use std::io::Write;
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(err) = written {
        tracing::warn!(log = %Path::new(&log).display(), %err, "recording a control plane boot");
    }
}

/// A running local control plane.
#[derive(Debug)]
pub struct Playground {
    /// The state directory.
    pub dir: PathBuf,
    /// Path of the admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// API server URL.
    pub server: String,
    /// The Kubernetes release running.
    pub version: KubeVersion,
}

impl Playground {
    /// Start a control plane in `opts.dir`, or return the one already running there.
    /// Returns once the API server is ready, the simulated nodes are Ready and the controller
    /// manager has created the `default` service account.
    pub async fn up(opts: UpOptions) -> Result<Playground> {
        let version = KubeVersion::selected()?;
        let bins = Binaries::find(&version)?;
        let dir = absolute(&opts.dir)?;
        for sub in ["run", "logs", "etcd"] {
            let d = dir.join(sub);
            std::fs::create_dir_all(&d).map_err(Error::io(format!("creating {}", d.display())))?;
        }
        let kubeconfig = dir.join("kubeconfig");
        if let Some(ports) = read_state(&dir) {
            let all_up = Self::status(&dir)
                .iter()
                .filter(|c| COMPONENTS.contains(&c.name.as_str()))
                .all(|c| c.running);
            if all_up && kubeconfig.exists() {
                tracing::info!(dir = %dir.display(), "playground already running");
                return Ok(Playground {
                    dir,
                    kubeconfig,
                    server: ports.server(),
                    version,
                });
            }
        }
        // Whatever is left from an earlier, partial run is stopped first.
        Self::down(&dir)?;
        let pki = pki::ensure(&dir.join("pki"))?;

        let booting = Instant::now();
        let mut last_err = None;
        for attempt in 0..PORT_ATTEMPTS {
            let ports = match read_state(&dir) {
                Some(p) if attempt == 0 && p.all_free() => p,
                _ => Ports::free()?,
            };
            write_state(&dir, &ports)?;
            kubeconfig::write(&kubeconfig, &ports.server(), "capstan-playground", &pki)?;
            let started = Started {
                bins: &bins,
                version: &version,
                dir: &dir,
                ports: &ports,
                pki: &pki,
                kubeconfig: &kubeconfig,
                deadline: Instant::now() + opts.timeout,
                timeout: opts.timeout,
                throwaway: opts.throwaway,
                audit: opts.audit,
            };
            match started.start_core().await {
                Ok(()) => {
                    let pg = Playground {
                        dir,
                        kubeconfig,
                        server: ports.server(),
                        version,
                    };
                    let client = pg.client().await?;
                    kwok::register_nodes(&client, opts.nodes).await?;
                    pg.wait_settled(&client, opts.timeout).await?;
                    record_boot(&pg.dir, booting.elapsed());
                    return Ok(pg);
                }
                Err(err) if is_port_race(&err) => {
                    tracing::warn!(attempt, "a port was taken while starting; retrying with other ports");
                    Self::down(&dir)?;
                    last_err = Some(err);
                    // Another process took a port between our check and the component's bind;
                    // starting again at once on a busy machine can meet the same crowd.
                    tokio::time::sleep(Duration::from_millis(100 * (attempt as u64 + 1))).await;
                }
                Err(err) => {
                    Self::down(&dir)?;
                    return Err(err);
                }
            }
        }
        tracing::warn!(
            attempts = PORT_ATTEMPTS,
            "every attempt met a port taken by another process"
        );
        Err(last_err.unwrap_or_else(|| Error::Format {
            context: "starting".into(),
            message: "no attempt made".into(),
        }))
    }

    async fn wait_settled(&self, client: &kube::Client, timeout: Duration) -> Result<()> {
        let nodes: Api<Node> = Api::all(client.clone());
        let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
        let deadline = Instant::now() + timeout;
        loop {
            let nodes_ready = nodes
                .list(&Default::default())
                .await
                .map(|l| !l.items.is_empty() && l.items.iter().all(node_is_ready))
                .unwrap_or(false);
            // Before 1.24 a Pod can only be created once the token controller has given the
            // service account its token Secret.
            let legacy_tokens = self.version.has_insecure_ports();
            let sa_ready = sas
                .get_opt("default")
                .await
                .ok()
                .flatten()
                .is_some_and(|sa| !legacy_tokens || sa.secrets.is_some_and(|s| !s.is_empty()));
            if nodes_ready && sa_ready {
                return Ok(());
            }
            self.check_alive()?;
            if Instant::now() > deadline {
                let what = if nodes_ready {
                    "kube-controller-manager to create the default service account"
                } else {
                    "kwok to make the nodes Ready"
                };
                return Err(Error::Timeout {
                    what: what.into(),
                    seconds: timeout.as_secs(),
                    logs: self.dir.join("logs"),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn check_alive(&self) -> Result<()> {
        for name in COMPONENTS {
            let (pid_file, log) = process::files(&self.dir, name);
            if let Some(started) = process::read_pid_file(&pid_file)
                && !process::is_running(&started)
            {
                return Err(Error::ComponentExited {
                    name: name.into(),
                    status: "exited".into(),
                    tail: process::tail(&log, 15),
                    log,
                });
            }
        }
        Ok(())
    }

    /// Stop every component started in `dir` (kwok first, etcd last). Safe to call twice.
    /// Returns the names of the components that were running.
    pub fn down(dir: &Path) -> Result<Vec<String>> {
        Self::down_within(dir, Duration::from_secs(10))
    }

    /// [`Playground::down`], giving each component `grace` to exit after SIGTERM before SIGKILL
    /// (zero for a throwaway control plane: nothing of its state is kept).
    pub fn down_within(dir: &Path, grace: Duration) -> Result<Vec<String>> {
        let mut stopped = Vec::new();
        for name in EXTRAS.iter().chain(COMPONENTS.iter().rev()) {
            let (pid_file, _) = process::files(dir, name);
            if process::stop(&pid_file, grace)? {
                stopped.push((*name).to_string());
            }
        }
        Ok(stopped)
    }

    /// Whether each component of the playground in `dir` is running (optional extras only when
    /// their pid file exists).
    pub fn status(dir: &Path) -> Vec<ComponentStatus> {
        let extras = EXTRAS.iter().filter(|name| process::files(dir, name).0.exists());
        COMPONENTS
            .iter()
            .chain(extras)
            .map(|name| {
                let (pid_file, _) = process::files(dir, name);
                let started = process::read_pid_file(&pid_file);
                ComponentStatus {
                    name: (*name).to_string(),
                    pid: started.as_ref().map(|s| s.pid),
                    running: started.as_ref().is_some_and(process::is_running),
                }
            })
            .collect()
    }

    /// The API server URL recorded in `dir`, if a playground was started there.
    pub fn server_of(dir: &Path) -> Option<String> {
        read_state(dir).map(|p| p.server())
    }

    /// A client for this playground.
    pub async fn client(&self) -> Result<kube::Client> {
        kubeconfig::client(&self.kubeconfig).await
    }

    /// Stop this playground's processes.
    pub fn stop(&mut self) -> Result<()> {
        Self::down(&self.dir).map(|_| ())
    }
}

fn node_is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

struct Binaries {
    etcd: PathBuf,
    apiserver: PathBuf,
    controller_manager: PathBuf,
    scheduler: PathBuf,
    kwok: PathBuf,
}

impl Binaries {
    fn find(version: &KubeVersion) -> Result<Self> {
        Ok(Self {
            etcd: binaries::find_kube(version, "etcd")?,
            apiserver: binaries::find_kube(version, "kube-apiserver")?,
            controller_manager: binaries::find_kube(version, "kube-controller-manager")?,
            scheduler: binaries::find_kube(version, "kube-scheduler")?,
            kwok: binaries::find("kwok")?,
        })
    }
}

/// Everything one start attempt needs.
struct Started<'a> {
    bins: &'a Binaries,
    version: &'a KubeVersion,
    dir: &'a Path,
    ports: &'a Ports,
    pki: &'a PkiPaths,
    kubeconfig: &'a Path,
    deadline: Instant,
    timeout: Duration,
    throwaway: bool,
    audit: bool,
}

impl Started<'_> {
    async fn start_core(&self) -> Result<()> {
        let (dir, ports, pki) = (self.dir, self.ports, self.pki);
        let legacy = self.version.has_insecure_ports();
        let etcd_url = format!("http://127.0.0.1:{}", ports.etcd_client);
        let peer_url = format!("http://127.0.0.1:{}", ports.etcd_peer);
        let mut etcd = Command::new(&self.bins.etcd);
        etcd.arg("--name=playground")
            .arg(format!("--data-dir={}", dir.join("etcd").display()))
            .arg(format!("--listen-client-urls={etcd_url}"))
            .arg(format!("--advertise-client-urls={etcd_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=playground={peer_url}"))
            .arg("--quota-backend-bytes=4294967296")
            .arg("--snapshot-count=50000");
        // etcd 3.4 (the older release's) has no such flag.
        if self.throwaway && !legacy {
            etcd.arg("--unsafe-no-fsync");
        }
        let etcd_proc = spawn_component(dir, "etcd", etcd)?;
        self.wait_tcp("etcd", &etcd_proc, ports.etcd_client).await?;

        let mut api = Command::new(&self.bins.apiserver);
        api.arg(format!("--etcd-servers={etcd_url}"))
            .arg("--bind-address=127.0.0.1")
            .arg("--advertise-address=127.0.0.1")
            .arg(format!("--secure-port={}", ports.apiserver))
            .arg(format!("--tls-cert-file={}", pki.server_cert.display()))
            .arg(format!("--tls-private-key-file={}", pki.server_key.display()))
            .arg(format!("--client-ca-file={}", pki.ca_cert.display()))
            .arg(format!("--service-account-key-file={}", pki.sa_pub.display()))
            .arg(format!("--service-account-signing-key-file={}", pki.sa_key.display()))
            .arg("--service-account-issuer=https://kubernetes.default.svc")
            .arg("--authorization-mode=RBAC")
            .arg("--service-cluster-ip-range=10.96.0.0/16")
            .arg("--allow-privileged=true")
            // New Nodes would get the `not-ready` taint, which only the node lifecycle controller
            // lifts; that controller is off (kwok's nodes send no kubelet heartbeats).
            .arg("--disable-admission-plugins=TaintNodesByCondition")
            // The default reconciler would publish 127.0.0.1 in the `kubernetes` Endpoints, which
            // validation refuses; nothing in the playground needs those endpoints.
            .arg("--endpoint-reconciler-type=none")
            // The simulated kubelets (kwok's server, which serves container logs) are reached on
            // the nodes' InternalIP, 127.0.0.1: their host names resolve nowhere.
            .arg("--kubelet-preferred-address-types=InternalIP")
            .arg("--profiling=false")
            .arg(format!("--cert-dir={}", dir.join("pki").display()));
        if legacy {
            api.arg("--insecure-port=0");
        }
        if self.audit {
            let policy = dir.join("audit-policy.yaml");
            std::fs::write(&policy, AUDIT_POLICY).map_err(Error::io(format!("writing {}", policy.display())))?;
            api.arg(format!("--audit-policy-file={}", policy.display()))
                .arg(format!("--audit-log-path={}", dir.join(AUDIT_LOG).display()))
                .arg("--audit-log-format=json")
                .arg("--audit-log-mode=blocking");
        }
        let api_proc = spawn_component(dir, "kube-apiserver", api)?;
        self.wait_tcp("kube-apiserver", &api_proc, ports.apiserver).await?;
        self.wait_api_ready(&api_proc).await?;

        let mut kcm = Command::new(&self.bins.controller_manager);
        kcm.arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg("--leader-elect=false")
            .arg("--secure-port=0")
            // No cloud, no kubelets: the node lifecycle and IPAM controllers are off (and on 1.20,
            // the cloud ones, which later releases no longer carry).
            .arg(if legacy {
                "--controllers=*,-nodelifecycle,-nodeipam,-cloud-node-lifecycle,-route,-service"
            } else {
                "--controllers=*,-node-lifecycle-controller,-node-ipam-controller"
            })
            .arg(format!("--service-account-private-key-file={}", pki.sa_key.display()))
            .arg(format!("--root-ca-file={}", pki.ca_cert.display()))
            .arg(format!("--cluster-signing-cert-file={}", pki.ca_cert.display()))
            .arg(format!("--cluster-signing-key-file={}", pki.ca_key.display()))
            .arg("--concurrent-deployment-syncs=10")
            .arg("--concurrent-replicaset-syncs=10")
            // Its client is limited to 20 requests/s by default (a shared production API server's
            // protection): with hundreds of Deployments created at once that limit, not the API
            // server or Capstan, decides when they become available. This API server is its alone.
            .arg("--kube-api-qps=200")
            .arg("--kube-api-burst=400")
            .arg("--profiling=false");
        if legacy {
            kcm.arg("--port=0");
        }
        spawn_component(dir, "kube-controller-manager", kcm)?;

        let mut scheduler = Command::new(&self.bins.scheduler);
        if legacy {
            scheduler
                .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
                .arg("--leader-elect=false")
                .arg("--port=0")
                .arg("--kube-api-qps=200")
                .arg("--kube-api-burst=400");
        } else {
            // Client rate limits are only settable in the configuration file on current releases.
            let config = dir.join("kube-scheduler.yaml");
            let text = format!(
                "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
                 clientConnection:\n  kubeconfig: {}\n  qps: 200\n  burst: 400\n\
                 leaderElection:\n  leaderElect: false\n",
                serde_json::to_string(&self.kubeconfig.display().to_string()).unwrap_or_default()
            );
            std::fs::write(&config, text).map_err(Error::io(format!("writing {}", config.display())))?;
            scheduler.arg(format!("--config={}", config.display()));
        }
        scheduler.arg("--secure-port=0").arg("--profiling=false");
        spawn_component(dir, "kube-scheduler", scheduler)?;

        let stages = dir.join("kwok.yaml");
        let logs = kwok::PodLogs::under(dir);
        logs.create()?;
        std::fs::write(&stages, kwok::stages_config(&logs))
            .map_err(Error::io(format!("writing {}", stages.display())))?;
        let mut sim = Command::new(&self.bins.kwok);
        sim.arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg(format!("--config={}", stages.display()))
            .arg(format!(
                "--manage-nodes-with-annotation-selector={}={}",
                kwok::MANAGED_ANNOTATION,
                kwok::MANAGED_VALUE
            ))
            .arg("--cidr=10.244.0.0/16")
            .arg("--node-ip=127.0.0.1")
            // kwok's server plays the kubelets' API (container logs through the API server), with
            // the API server's certificate (the API server does not verify kubelets here).
            .arg(format!("--node-port={}", ports.kubelet))
            .arg(format!("--server-address=127.0.0.1:{}", ports.kubelet))
            .arg(format!("--tls-cert-file={}", pki.server_cert.display()))
            .arg(format!("--tls-private-key-file={}", pki.server_key.display()))
            // Every status patch is logged at INFO; warnings and errors are what a reader needs.
            .arg("--v=WARN")
            // kwok reads ~/.kwok/kwok.yaml unless told otherwise: its home is the playground's.
            .env("HOME", dir);
        spawn_component(dir, "kwok", sim)?;
        Ok(())
    }

    async fn wait_tcp(&self, name: &str, proc_: &process::Started, port: u16) -> Result<()> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        loop {
            if !process::is_running(proc_) {
                return Err(exited(self.dir, name));
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if Instant::now() > self.deadline {
                return Err(Error::Timeout {
                    what: format!("{name} to listen on {addr}"),
                    seconds: self.timeout.as_secs(),
                    logs: self.dir.join("logs"),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn wait_api_ready(&self, api: &process::Started) -> Result<()> {
        let client = kubeconfig::client(self.kubeconfig).await?;
        loop {
            if !process::is_running(api) {
                return Err(exited(self.dir, "kube-apiserver"));
            }
            let req = http::Request::get("/readyz")
                .body(Vec::new())
                .map_err(|e| Error::Format {
                    context: "building a readiness request".into(),
                    message: e.to_string(),
                })?;
            if let Ok(text) = client.request_text(req).await
                && text.trim() == "ok"
            {
                return Ok(());
            }
            if Instant::now() > self.deadline {
                return Err(Error::Timeout {
                    what: "kube-apiserver /readyz".into(),
                    seconds: self.timeout.as_secs(),
                    logs: self.dir.join("logs"),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn spawn_component(dir: &Path, name: &str, cmd: Command) -> Result<process::Started> {
    let (pid_file, log) = process::files(dir, name);
    // A fresh log per start keeps error tails relevant.
    let _ = std::fs::remove_file(&log);
    tracing::debug!(component = name, "starting");
    process::spawn(name, cmd, &log, &pid_file)
}

fn exited(dir: &Path, name: &str) -> Error {
    let (_, log) = process::files(dir, name);
    Error::ComponentExited {
        name: name.into(),
        status: "exited".into(),
        tail: process::tail(&log, 15),
        log,
    }
}

/// How many times a start is tried with fresh ports when a component finds its port taken: the
/// ports are chosen free, but another process (tests start many planes at once) can bind one before
/// the component does.
const PORT_ATTEMPTS: u32 = 6;

fn is_port_race(err: &Error) -> bool {
    matches!(err, Error::ComponentExited { tail, .. } if tail.contains("address already in use"))
}

fn read_state(dir: &Path) -> Option<Ports> {
    let text = std::fs::read_to_string(dir.join("state.json")).ok()?;
    serde_json::from_str(&text).ok()
}

fn write_state(dir: &Path, ports: &Ports) -> Result<()> {
    let path = dir.join("state.json");
    let text = serde_json::to_string_pretty(ports).map_err(|e| Error::Format {
        context: format!("writing {}", path.display()),
        message: e.to_string(),
    })?;
    std::fs::write(&path, text).map_err(Error::io(format!("writing {}", path.display())))
}

fn absolute(dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(Error::io(format!("creating {}", dir.display())))?;
    std::fs::canonicalize(dir).map_err(Error::io(format!("resolving {}", dir.display())))
}

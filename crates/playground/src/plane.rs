//! Bringing a whole local control plane up and down: etcd → kube-apiserver → kube-controller-manager
//! → node simulator, on free loopback ports, with all state under one directory.
//!
//! Layout of the directory: `pki/` (certificates), `etcd/` (data), `logs/NAME.log`, `run/NAME.pid`,
//! `state.json` (the ports in use) and `kubeconfig` (admin access).

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::Api;
use serde::{Deserialize, Serialize};

use crate::pki::{self, PkiPaths};
use crate::process::{self, Started};
use crate::{Error, Result, binaries, kubeconfig, nodesim};

/// Component names, in start order.
pub const COMPONENTS: [&str; 4] = ["etcd", "kube-apiserver", "kube-controller-manager", "nodesim"];
/// Optional processes that other tools (`scripts/playground.sh`) start in the playground's directory
/// with a pid file in the same format; `down` stops them too, `status` shows them when present.
pub const EXTRAS: [&str; 1] = ["git-daemon"];

/// How the node simulator runs.
#[derive(Debug, Clone)]
pub enum Simulator {
    /// As a background process: `EXE local nodesim --kubeconfig DIR/kubeconfig` (the `capstan` binary).
    Process(PathBuf),
    /// As a task on the caller's tokio runtime (tests); it stops with the returned [`Playground`].
    InProcess,
}

/// Options for [`Playground::up`].
#[derive(Debug, Clone)]
pub struct UpOptions {
    /// State directory.
    pub dir: PathBuf,
    /// How to run the node simulator.
    pub simulator: Simulator,
    /// Number of simulated nodes.
    pub nodes: usize,
    /// How long to wait for the control plane to become ready.
    pub timeout: Duration,
}

impl UpOptions {
    /// Defaults: 3 nodes, 120 s timeout.
    pub fn new(dir: impl Into<PathBuf>, simulator: Simulator) -> Self {
        Self {
            dir: dir.into(),
            simulator,
            nodes: 3,
            timeout: Duration::from_secs(120),
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
}

impl Ports {
    fn free() -> Result<Ports> {
        // Hold all three listeners at once so the three ports differ.
        let bind = || TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(Error::io("finding a free loopback port"));
        let (a, b, c) = (bind()?, bind()?, bind()?);
        let port = |l: &TcpListener| {
            l.local_addr()
                .map(|a| a.port())
                .map_err(Error::io("reading a local address"))
        };
        Ok(Ports {
            etcd_client: port(&a)?,
            etcd_peer: port(&b)?,
            apiserver: port(&c)?,
        })
    }

    fn all_free(&self) -> bool {
        [self.etcd_client, self.etcd_peer, self.apiserver]
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

/// A running local control plane.
#[derive(Debug)]
pub struct Playground {
    /// The state directory.
    pub dir: PathBuf,
    /// Path of the admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// API server URL.
    pub server: String,
    simulator: Option<tokio::task::JoinHandle<()>>,
}

impl Playground {
    /// Start a control plane in `opts.dir`, or return the one already running there.
    /// Returns once the API server is ready, the simulated nodes are registered and the controller
    /// manager has created the `default` service account.
    pub async fn up(opts: UpOptions) -> Result<Playground> {
        let bins = Binaries::find()?;
        let dir = absolute(&opts.dir)?;
        for sub in ["run", "logs", "etcd"] {
            let d = dir.join(sub);
            std::fs::create_dir_all(&d).map_err(Error::io(format!("creating {}", d.display())))?;
        }
        let kubeconfig = dir.join("kubeconfig");
        let in_process = matches!(opts.simulator, Simulator::InProcess);
        if let Some(ports) = read_state(&dir) {
            let wanted = if in_process { &COMPONENTS[..3] } else { &COMPONENTS[..] };
            let running = Self::status(&dir);
            let all_up = running
                .iter()
                .filter(|c| wanted.contains(&c.name.as_str()))
                .all(|c| c.running);
            if all_up && kubeconfig.exists() {
                tracing::info!(dir = %dir.display(), "playground already running");
                let mut pg = Playground {
                    dir,
                    kubeconfig,
                    server: ports.server(),
                    simulator: None,
                };
                pg.start_simulator(&opts)?;
                return Ok(pg);
            }
        }
        // Whatever is left from an earlier, partial run is stopped first.
        Self::down(&dir)?;
        let pki = pki::ensure(&dir.join("pki"))?;

        let mut last_err = None;
        for attempt in 0..3 {
            let ports = match read_state(&dir) {
                Some(p) if attempt == 0 && p.all_free() => p,
                _ => Ports::free()?,
            };
            write_state(&dir, &ports)?;
            kubeconfig::write(&kubeconfig, &ports.server(), "capstan-playground", &pki)?;
            match start_core(&bins, &dir, &ports, &pki, &kubeconfig, opts.timeout).await {
                Ok(()) => {
                    let mut pg = Playground {
                        dir,
                        kubeconfig,
                        server: ports.server(),
                        simulator: None,
                    };
                    pg.start_simulator(&opts)?;
                    pg.wait_settled(opts.timeout).await?;
                    return Ok(pg);
                }
                Err(err) if is_port_race(&err) => {
                    tracing::warn!(attempt, "a port was taken while starting; retrying with other ports");
                    Self::down(&dir)?;
                    last_err = Some(err);
                }
                Err(err) => {
                    Self::down(&dir)?;
                    return Err(err);
                }
            }
        }
        Err(last_err.unwrap_or_else(|| Error::Format {
            context: "starting".into(),
            message: "no attempt made".into(),
        }))
    }

    fn start_simulator(&mut self, opts: &UpOptions) -> Result<()> {
        match &opts.simulator {
            Simulator::Process(exe) => {
                let (pid_file, log) = process::files(&self.dir, "nodesim");
                if process::read_pid_file(&pid_file).is_some_and(|s| process::is_running(&s)) {
                    return Ok(());
                }
                let mut cmd = Command::new(exe);
                cmd.args(["local", "nodesim", "--kubeconfig"])
                    .arg(&self.kubeconfig)
                    .args(["--nodes", &opts.nodes.to_string()]);
                process::spawn("nodesim", cmd, &log, &pid_file)?;
            }
            Simulator::InProcess => {
                let kubeconfig = self.kubeconfig.clone();
                let nodes = opts.nodes;
                self.simulator = Some(tokio::spawn(async move {
                    match kubeconfig::client(&kubeconfig).await {
                        Ok(client) => {
                            if let Err(err) = nodesim::run(client, nodesim::Options { nodes }).await {
                                tracing::error!(%err, "node simulator stopped");
                            }
                        }
                        Err(err) => tracing::error!(%err, "node simulator could not connect"),
                    }
                }));
            }
        }
        Ok(())
    }

    async fn wait_settled(&self, timeout: Duration) -> Result<()> {
        let client = kubeconfig::client(&self.kubeconfig).await?;
        let nodes: Api<Node> = Api::all(client.clone());
        let sas: Api<ServiceAccount> = Api::namespaced(client, "default");
        let deadline = Instant::now() + timeout;
        loop {
            let nodes_ready = nodes
                .list(&Default::default())
                .await
                .map(|l| !l.items.is_empty())
                .unwrap_or(false);
            let sa_ready = sas.get_opt("default").await.map(|s| s.is_some()).unwrap_or(false);
            if nodes_ready && sa_ready {
                return Ok(());
            }
            self.check_alive()?;
            if Instant::now() > deadline {
                let what = if nodes_ready {
                    "kube-controller-manager to create the default service account"
                } else {
                    "the node simulator to register nodes"
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

    /// Stop every component started in `dir` (simulator first, etcd last). Safe to call twice.
    /// Returns the names of the components that were running.
    pub fn down(dir: &Path) -> Result<Vec<String>> {
        let mut stopped = Vec::new();
        for name in EXTRAS.iter().chain(COMPONENTS.iter().rev()) {
            let (pid_file, _) = process::files(dir, name);
            if process::stop(&pid_file, Duration::from_secs(10))? {
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

    /// Stop this playground's processes (and its in-process simulator).
    pub fn stop(&mut self) -> Result<()> {
        if let Some(task) = self.simulator.take() {
            task.abort();
        }
        Self::down(&self.dir).map(|_| ())
    }
}

impl Drop for Playground {
    fn drop(&mut self) {
        // Only the in-process simulator dies with this value; processes are stopped by `down`.
        if let Some(task) = self.simulator.take() {
            task.abort();
        }
    }
}

struct Binaries {
    etcd: PathBuf,
    apiserver: PathBuf,
    controller_manager: PathBuf,
}

impl Binaries {
    fn find() -> Result<Self> {
        Ok(Self {
            etcd: binaries::find("etcd")?,
            apiserver: binaries::find("kube-apiserver")?,
            controller_manager: binaries::find("kube-controller-manager")?,
        })
    }
}

async fn start_core(
    bins: &Binaries,
    dir: &Path,
    ports: &Ports,
    pki: &PkiPaths,
    kubeconfig: &Path,
    timeout: Duration,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let etcd_url = format!("http://127.0.0.1:{}", ports.etcd_client);
    let peer_url = format!("http://127.0.0.1:{}", ports.etcd_peer);
    let mut etcd = Command::new(&bins.etcd);
    etcd.arg("--name=playground")
        .arg(format!("--data-dir={}", dir.join("etcd").display()))
        .arg(format!("--listen-client-urls={etcd_url}"))
        .arg(format!("--advertise-client-urls={etcd_url}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--initial-cluster=playground={peer_url}"))
        .arg("--quota-backend-bytes=4294967296")
        .arg("--snapshot-count=50000");
    let etcd_proc = spawn_component(dir, "etcd", etcd)?;
    wait_tcp(dir, "etcd", &etcd_proc, ports.etcd_client, deadline, timeout).await?;

    let mut api = Command::new(&bins.apiserver);
    api.arg(format!("--etcd-servers={etcd_url}"))
        .arg("--bind-address=127.0.0.1")
        .arg("--advertise-address=127.0.0.1")
        .arg(format!("--secure-port={}", ports.apiserver))
        .arg("--insecure-port=0")
        .arg(format!("--tls-cert-file={}", pki.server_cert.display()))
        .arg(format!("--tls-private-key-file={}", pki.server_key.display()))
        .arg(format!("--client-ca-file={}", pki.ca_cert.display()))
        .arg(format!("--service-account-key-file={}", pki.sa_pub.display()))
        .arg(format!("--service-account-signing-key-file={}", pki.sa_key.display()))
        .arg("--service-account-issuer=https://kubernetes.default.svc")
        .arg("--authorization-mode=RBAC")
        .arg("--service-cluster-ip-range=10.96.0.0/16")
        .arg("--allow-privileged=true")
        // The default reconciler would publish 127.0.0.1 in the `kubernetes` Endpoints, which
        // validation refuses; nothing in the playground needs those endpoints.
        .arg("--endpoint-reconciler-type=none")
        .arg("--profiling=false")
        .arg(format!("--cert-dir={}", dir.join("pki").display()));
    let api_proc = spawn_component(dir, "kube-apiserver", api)?;
    wait_tcp(dir, "kube-apiserver", &api_proc, ports.apiserver, deadline, timeout).await?;
    wait_api_ready(dir, &api_proc, kubeconfig, deadline, timeout).await?;

    let mut kcm = Command::new(&bins.controller_manager);
    kcm.arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg("--leader-elect=false")
        .arg("--port=0")
        .arg("--secure-port=0")
        .arg("--controllers=*,-nodelifecycle,-nodeipam,-cloud-node-lifecycle,-route,-service")
        .arg(format!("--service-account-private-key-file={}", pki.sa_key.display()))
        .arg(format!("--root-ca-file={}", pki.ca_cert.display()))
        .arg(format!("--cluster-signing-cert-file={}", pki.ca_cert.display()))
        .arg(format!("--cluster-signing-key-file={}", pki.ca_key.display()))
        .arg("--concurrent-deployment-syncs=10")
        .arg("--concurrent-replicaset-syncs=10")
        // Its client is limited to 20 requests/s by default (a shared production API server's
        // protection): with hundreds of Deployments created at once that limit, not the API server
        // or Capstan, decides when they become available. This API server is its alone.
        .arg("--kube-api-qps=200")
        .arg("--kube-api-burst=400")
        .arg("--profiling=false");
    spawn_component(dir, "kube-controller-manager", kcm)?;
    Ok(())
}

fn spawn_component(dir: &Path, name: &str, cmd: Command) -> Result<Started> {
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

async fn wait_tcp(
    dir: &Path,
    name: &str,
    proc_: &Started,
    port: u16,
    deadline: Instant,
    timeout: Duration,
) -> Result<()> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    loop {
        if !process::is_running(proc_) {
            return Err(exited(dir, name));
        }
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::Timeout {
                what: format!("{name} to listen on {addr}"),
                seconds: timeout.as_secs(),
                logs: dir.join("logs"),
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_api_ready(
    dir: &Path,
    api: &Started,
    kubeconfig: &Path,
    deadline: Instant,
    timeout: Duration,
) -> Result<()> {
    let client = kubeconfig::client(kubeconfig).await?;
    loop {
        if !process::is_running(api) {
            return Err(exited(dir, "kube-apiserver"));
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
        if Instant::now() > deadline {
            return Err(Error::Timeout {
                what: "kube-apiserver /readyz".into(),
                seconds: timeout.as_secs(),
                logs: dir.join("logs"),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

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

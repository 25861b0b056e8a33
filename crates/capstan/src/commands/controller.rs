//! `capstan controller`: run the Application, ApplicationSet and image update controllers (and with
//! `--listen` the HTTP server) in the foreground until SIGTERM or Ctrl-C (all stop on the same
//! signal; if one cannot start, all stop), within the grace period of `--shutdown-grace`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::kube_client::KubeArgs;

/// `capstan controller`: run, or `capstan controller status`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ControllerCommand {
    #[command(subcommand)]
    action: Option<ControllerAction>,
    #[command(flatten)]
    run: ControllerArgs,
}

#[derive(Debug, clap::Subcommand)]
enum ControllerAction {
    /// Which replica owns how many Applications, which leads, and when each last renewed its
    /// Lease (read from the Leases in Capstan's namespace).
    Status(super::controller_status::StatusArgs),
}

impl ControllerCommand {
    /// Whether this runs the controller until stopped (not `status`).
    pub fn runs(&self) -> bool {
        self.action.is_none()
    }

    /// The controller's arguments, or those of `status`.
    pub fn into_run(self) -> Result<ControllerArgs, super::controller_status::StatusArgs> {
        match self.action {
            None => Ok(self.run),
            Some(ControllerAction::Status(status)) => Err(status),
        }
    }
}

/// Arguments of `capstan controller`.
#[derive(Debug, clap::Args)]
pub struct ControllerArgs {
    #[command(flatten)]
    kube: KubeArgs,
    /// Namespace whose Applications (and repository Secrets) are served.
    #[arg(long, short = 'n', default_value = capstan_api::NAMESPACE)]
    namespace: String,
    /// Directory for Git caches (default: $CAPSTAN_CACHE/controller or ~/.cache/capstan/controller).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Time between Git polls per Application (and per ApplicationSet with Git generators): seconds, or 90s, 5m, 1h.
    #[arg(long, default_value = "180", value_parser = super::seconds)]
    poll_interval: u64,
    /// How long a sync wave may take to become healthy (and a hook to complete): seconds, or 90s, 5m, 1h.
    #[arg(long, default_value = "600", value_parser = super::seconds)]
    wave_timeout: u64,
    /// Allow `file://` repository URLs and local paths (off: on a shared controller they would read
    /// any repository on its disk).
    #[arg(long)]
    allow_local_repositories: bool,
    /// Without an AppProject named `default`, the `default` project denies everything (instead of
    /// allowing everything): every Application, ApplicationSet, ImageUpdater and PromotionPipeline
    /// must name a project an operator created. Pass it (or set
    /// CAPSTAN_DENY_IMPLICIT_DEFAULT_PROJECT=true) to `capstan server`, `capstan app` and
    /// `capstan promote` too; with `--listen` the server here follows this flag.
    #[arg(long, env = "CAPSTAN_DENY_IMPLICIT_DEFAULT_PROJECT")]
    deny_implicit_default_project: bool,
    /// Applications reconciled at once.
    #[arg(long, default_value_t = 32)]
    concurrency: u16,
    /// Also serve the HTTP API, web UI, webhooks and metrics on this address (e.g. 127.0.0.1:8080).
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// Serve `/healthz`, `/readyz` (ready once the Application watch has listed) and `/metrics` on
    /// this address, for a Pod's probes (e.g. 0.0.0.0:8081).
    #[arg(long)]
    health_listen: Option<std::net::SocketAddr>,
    /// This replica's identity among the controllers sharing the Applications (its member Lease is
    /// `capstan-replica-ID`; a DNS-1123 label). Default: the Pod's name (POD_NAME), else the host
    /// name and the process id.
    #[arg(long, env = "CAPSTAN_REPLICA_ID")]
    replica_id: Option<String>,
    /// How long a replica's Lease lasts without renewal before the others take over its
    /// Applications: seconds, or 15s, 1m. Every replica should use the same.
    #[arg(long, default_value = "15", value_parser = super::seconds)]
    lease_duration: u64,
    /// Author name of the commits image updates and automatic reverts make.
    #[arg(long, default_value = "Capstan")]
    git_author_name: String,
    /// Author email of the commits image updates and automatic reverts make.
    #[arg(long, default_value = "capstan@localhost")]
    git_author_email: String,
    #[command(flatten)]
    serve: crate::commands::server::ServeArgs,
    #[command(flatten)]
    shutdown: crate::shutdown::ShutdownArgs,
}

/// Run the controller until SIGTERM or Ctrl-C (see [`crate::shutdown`]): then no new reconcile or
/// sync starts, those in flight finish within the grace period, and the process exits.
pub async fn run(args: ControllerArgs, signals: crate::shutdown::Signals) -> anyhow::Result<ExitCode> {
    let grace = args.shutdown.grace();
    // One stop for every component: the signal, or one of them failing (if one cannot start, all stop).
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stop_tx = Arc::new(stop_tx);
    let work = serve(args, stop_tx.clone(), stop_rx);
    let stop = move || {
        let _ = stop_tx.send(true);
    };
    crate::shutdown::until_stopped("controller", work, signals, stop, grace).await
}

/// Resolves once `rx` says stop.
async fn stopped(mut rx: tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

async fn serve(
    args: ControllerArgs,
    stop_tx: Arc<tokio::sync::watch::Sender<bool>>,
    stop_rx: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<ExitCode> {
    let replica = match &args.replica_id {
        Some(id) => capstan_replicas::ReplicaId::new(id)?,
        None => capstan_replicas::ReplicaId::infer(),
    };
    anyhow::ensure!(
        args.lease_duration >= 3,
        "--lease-duration is {} s: it must be at least 3 s (renewed every third of it)",
        args.lease_duration
    );
    let Some(client) = capstan_kube::shutdown::before(stopped(stop_rx.clone()), args.kube.client_waiting()).await
    else {
        return Ok(ExitCode::SUCCESS);
    };
    let client = client?;
    // Replicas share the Applications through Leases (capstan_replicas); one process alone holds
    // every shard. Its clients refuse writes once its Lease lapses.
    let coordinator = capstan_replicas::Coordinator::spawn(
        client.clone(),
        capstan_replicas::Settings {
            id: replica.clone(),
            namespace: args.namespace.clone(),
            lease_duration: Duration::from_secs(args.lease_duration),
        },
    );
    let ownership = coordinator.ownership();
    let fenced = capstan_replicas::fence::fenced(&client, ownership.clone());
    let cache_dir = args
        .cache_dir
        .unwrap_or_else(|| super::default_cache().join("controller"));
    std::fs::create_dir_all(&cache_dir).with_context(|| format!("creating {}", cache_dir.display()))?;
    let namespace = args.namespace.clone();
    let deny_implicit_default_project = args.deny_implicit_default_project;
    let server_cache = cache_dir.clone();
    // A server in this process reads the controller's Application cache (one copy, one watch).
    let shared_apps = args.listen.map(|_| capstan_controller::shared_apps::SharedApps::new());
    let config = capstan_controller::Config {
        namespace: args.namespace,
        cache_dir,
        poll_interval: Duration::from_secs(args.poll_interval.max(1)),
        wave_timeout: Duration::from_secs(args.wave_timeout.max(1)),
        render_timeout: Duration::from_secs(60),
        concurrency: args.concurrency.max(1),
        allow_local_repositories: args.allow_local_repositories,
        deny_implicit_default_project: args.deny_implicit_default_project,
        clock: Default::default(),
        ready: Default::default(),
        ownership: Some(ownership.clone()),
        shared_apps: shared_apps.clone(),
        git_author_name: args.git_author_name.clone(),
        git_author_email: args.git_author_email.clone(),
    };
    let ready = config.ready.clone();
    let appsets = capstan_appset::controller::AppSetConfig {
        namespace: config.namespace.clone(),
        // The ApplicationSet controller keeps its own subdirectory of the same root.
        cache_dir: config.cache_dir.clone(),
        poll_interval: config.poll_interval,
        allow_local_repositories: config.allow_local_repositories,
        deny_implicit_default_project: config.deny_implicit_default_project,
        ..Default::default()
    };
    let images = capstan_imageupdate::Config {
        namespace: config.namespace.clone(),
        cache_dir: config.cache_dir.clone(),
        author_name: args.git_author_name.clone(),
        author_email: args.git_author_email.clone(),
        default_interval: config.poll_interval.min(Duration::from_secs(60)),
        allow_local_repositories: config.allow_local_repositories,
        deny_implicit_default_project: config.deny_implicit_default_project,
        ..Default::default()
    };
    eprintln!(
        "capstan controller serving namespace {} as replica {replica} (Ctrl-C to stop)",
        config.namespace
    );
    let applications = async {
        let result = capstan_controller::run(client.clone(), config, stopped(stop_rx.clone())).await;
        let _ = stop_tx.send(true);
        result.context("Application controller")
    };
    // The ApplicationSet and image update controllers run on the leader only.
    let applicationsets = async {
        let result = while_leading(&ownership, stop_rx.clone(), |until| {
            capstan_appset::controller::run(fenced.clone(), appsets.clone(), until)
        })
        .await;
        if result.is_err() {
            let _ = stop_tx.send(true);
        }
        result.context("ApplicationSet controller")
    };
    let image_updates = async {
        let result = while_leading(&ownership, stop_rx.clone(), |until| {
            capstan_imageupdate::run(fenced.clone(), images.clone(), until)
        })
        .await;
        if result.is_err() {
            let _ = stop_tx.send(true);
        }
        result.context("image update controller")
    };
    let server = async {
        let Some(listen) = args.listen else {
            return Ok(());
        };
        let config =
            crate::commands::server::config(&namespace, server_cache, &args.serve, deny_implicit_default_project);
        let bound = capstan_kube::shutdown::before(
            stopped(stop_rx.clone()),
            crate::commands::server::bind(client.clone(), config, listen, shared_apps.clone()),
        );
        let Some(bound) = bound.await else {
            return Ok(());
        };
        let result = match bound {
            Ok(server) => server
                .serve(stopped(stop_rx.clone()))
                .await
                .map_err(anyhow::Error::from),
            Err(e) => Err(e),
        };
        let _ = stop_tx.send(true);
        result.context("HTTP server")
    };
    let health = async {
        let Some(listen) = args.health_listen else {
            return Ok(());
        };
        let ready: capstan_server::health::Ready = Arc::new(move || ready.is_ready());
        let result = match capstan_server::health::Health::bind(listen, ready).await {
            Ok(health) => health.serve(stopped(stop_rx.clone())).await,
            Err(e) => Err(e),
        };
        let _ = stop_tx.send(true);
        result.context("health listener")
    };
    let (applications, applicationsets, image_updates, server, health) =
        tokio::join!(applications, applicationsets, image_updates, server, health);
    // Give the shards and the leadership back at once (instead of after the lease duration).
    coordinator.leave().await;
    applications?;
    applicationsets?;
    image_updates?;
    server?;
    health?;
    Ok(ExitCode::SUCCESS)
}

/// Run `work` while this replica leads — again each time it becomes leader — until `stop_rx` says
/// stop. `work` gets the future that resolves when it must stop (the stop, or leadership lost).
async fn while_leading<F, Fut, E>(
    ownership: &capstan_replicas::Ownership,
    stop_rx: tokio::sync::watch::Receiver<bool>,
    mut work: F,
) -> Result<(), E>
where
    F: FnMut(futures::future::BoxFuture<'static, ()>) -> Fut,
    Fut: std::future::Future<Output = Result<(), E>>,
{
    use futures::FutureExt;
    let mut leader = ownership.leader();
    loop {
        tokio::select! {
            led = leader.wait_for(|l| *l) => if led.is_err() { return Ok(()) },
            () = stopped(stop_rx.clone()) => return Ok(()),
        }
        let mut lost = ownership.leader();
        let stop = stopped(stop_rx.clone());
        let until = async move {
            tokio::select! {
                () = stop => {}
                _ = lost.wait_for(|l| !*l) => tracing::warn!("no longer leading: stopping the ApplicationSet and image update controllers"),
            }
        };
        // After a lapse, ownership is valid again only once this run has stopped.
        let running = ownership.leading_run();
        let result = work(until.boxed()).await;
        drop(running);
        result?;
        if *stop_rx.borrow() {
            return Ok(());
        }
    }
}

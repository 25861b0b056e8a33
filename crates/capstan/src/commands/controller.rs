//! `capstan controller`: run the Application, ApplicationSet and image update controllers (and with
//! `--listen` the HTTP server) in the foreground until SIGTERM or Ctrl-C (all stop on the same
//! signal; if one cannot start, all stop), within the grace period of `--shutdown-grace`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::kube_client::KubeArgs;

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
    /// Author name of the commits image updates make.
    #[arg(long, default_value = "Capstan")]
    git_author_name: String,
    /// Author email of the commits image updates make.
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
    let Some(client) = capstan_kube::shutdown::before(stopped(stop_rx.clone()), args.kube.client_waiting()).await
    else {
        return Ok(ExitCode::SUCCESS);
    };
    let client = client?;
    let cache_dir = args
        .cache_dir
        .unwrap_or_else(|| super::default_cache().join("controller"));
    std::fs::create_dir_all(&cache_dir).with_context(|| format!("creating {}", cache_dir.display()))?;
    let namespace = args.namespace.clone();
    let deny_implicit_default_project = args.deny_implicit_default_project;
    let server_cache = cache_dir.clone();
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
        "capstan controller serving namespace {} (Ctrl-C to stop)",
        config.namespace
    );
    let applications = async {
        let result = capstan_controller::run(client.clone(), config, stopped(stop_rx.clone())).await;
        let _ = stop_tx.send(true);
        result.context("Application controller")
    };
    let applicationsets = async {
        let result = capstan_appset::controller::run(client.clone(), appsets, stopped(stop_rx.clone())).await;
        let _ = stop_tx.send(true);
        result.context("ApplicationSet controller")
    };
    let image_updates = async {
        let result = capstan_imageupdate::run(client.clone(), images, stopped(stop_rx.clone())).await;
        let _ = stop_tx.send(true);
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
            crate::commands::server::bind(client.clone(), config, listen),
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
    applications?;
    applicationsets?;
    image_updates?;
    server?;
    health?;
    Ok(ExitCode::SUCCESS)
}

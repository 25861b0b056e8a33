//! `capstan server`: the HTTP server alone (API, web UI, webhooks, metrics) until SIGTERM or Ctrl-C.
//! `capstan controller --listen ADDR` runs the same server inside the controller process.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use crate::kube_client::KubeArgs;

/// Flags of the HTTP server, shared by `capstan server` and `capstan controller`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Don't mark the session cookie `Secure` (for plain-HTTP set-ups other than localhost).
    #[arg(long)]
    pub insecure_cookies: bool,
    /// Also serve `/metrics` without authentication on this address (for Prometheus); on the main
    /// address `/metrics` needs a session or an API token.
    #[arg(long)]
    pub metrics_listen: Option<SocketAddr>,
    /// Accept Git webhook events of providers that have no secret (`webhook.PROVIDER.secret` in
    /// capstan-secret) without any signature; by default such events are refused.
    #[arg(long)]
    pub webhook_allow_unsigned: bool,
}

/// Arguments of `capstan server`.
#[derive(Debug, clap::Args)]
pub struct ServerArgs {
    #[command(flatten)]
    kube: KubeArgs,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Namespace of the Applications and of the server's Secret and RBAC ConfigMap.
    #[arg(long, short = 'n', default_value = capstan_api::NAMESPACE)]
    namespace: String,
    /// Directory for Capstan's Git caches; diffs use its `server` subdirectory, and no Application may
    /// read a repository from anywhere in it (default: $CAPSTAN_CACHE or ~/.cache/capstan).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    #[command(flatten)]
    serve: ServeArgs,
    /// Without an AppProject named `default`, the `default` project denies everything (instead of
    /// allowing everything), as the controller started with the same flag does. Set
    /// CAPSTAN_DENY_IMPLICIT_DEFAULT_PROJECT=true once for every component.
    #[arg(long, env = "CAPSTAN_DENY_IMPLICIT_DEFAULT_PROJECT")]
    deny_implicit_default_project: bool,
    #[command(flatten)]
    shutdown: crate::shutdown::ShutdownArgs,
}

/// The server's settings.
pub fn config(
    namespace: &str,
    cache_root: PathBuf,
    serve: &ServeArgs,
    deny_implicit_default_project: bool,
) -> capstan_server::ServerConfig {
    capstan_server::ServerConfig {
        deny_implicit_default_project,
        namespace: namespace.to_string(),
        secure_cookies: !serve.insecure_cookies,
        cache_dir: cache_root.join("server"),
        cache_root,
        metrics_addr: serve.metrics_listen,
        webhook_allow_unsigned: serve.webhook_allow_unsigned,
    }
}

/// Bind and announce the server (the address goes to stderr, so that tests and people see the port
/// actually picked for `:0`).
pub async fn bind(
    client: kube::Client,
    config: capstan_server::ServerConfig,
    listen: SocketAddr,
    shared: Option<std::sync::Arc<capstan_controller::shared_apps::SharedApps>>,
) -> anyhow::Result<capstan_server::Server> {
    std::fs::create_dir_all(&config.cache_dir).with_context(|| format!("creating {}", config.cache_dir.display()))?;
    let server = capstan_server::Server::bind_with(client, config, listen, shared).await?;
    let addr = server.local_addr().unwrap_or(listen);
    eprintln!("capstan server listening on http://{addr}");
    if let Some(m) = server.metrics_addr() {
        eprintln!("capstan metrics on http://{m}/metrics");
    }
    Ok(server)
}

/// Run `capstan server` until SIGTERM or Ctrl-C (see [`crate::shutdown`]): then it stops taking
/// connections and the requests in flight get the grace period to finish.
pub async fn run(args: ServerArgs, signals: crate::shutdown::Signals) -> anyhow::Result<ExitCode> {
    let grace = args.shutdown.grace();
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let work = async move {
        let waiting = args.kube.client_waiting();
        let stopping = async {
            let _ = stop_rx.wait_for(|stop| *stop).await;
        };
        let Some(client) = capstan_kube::shutdown::before(stopping, waiting).await else {
            return Ok(ExitCode::SUCCESS);
        };
        let client = client?;
        let cache_root = args.cache_dir.unwrap_or_else(crate::commands::default_cache);
        let config = config(
            &args.namespace,
            cache_root,
            &args.serve,
            args.deny_implicit_default_project,
        );
        let server = bind(client, config, args.listen, None).await?;
        server
            .serve(async move {
                let _ = stop_rx.wait_for(|stop| *stop).await;
            })
            .await?;
        Ok(ExitCode::SUCCESS)
    };
    let stop = move || {
        let _ = stop_tx.send(true);
    };
    crate::shutdown::until_stopped("server", work, signals, stop, grace).await
}

//! The `capstan` binary: the command-line edge of Capstan.
//!
//! It parses arguments, sets up logging and turns every error into one readable message and a non-zero
//! exit code (never a panic or a backtrace). The work is done by the library crates; each subcommand
//! lives in its own module under [`commands`].

mod commands;
mod kube_client;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// GitOps continuous delivery for Kubernetes.
#[derive(Debug, Parser)]
#[command(name = "capstan", version, about, propagate_version = true)]
struct Cli {
    /// Log filter (also RUST_LOG), e.g. `info` or `capstan=debug`.
    #[arg(
        long,
        global = true,
        env = "CAPSTAN_LOG",
        default_value = "warn,kube_client::client::builder=off"
    )]
    log: String,
    /// Run helm, kustomize, git and the Jsonnet worker even where the kernel cannot confine them
    /// (no Landlock, or one too old to restrict network access). Off: such renders are refused.
    #[arg(long, global = true, env = "CAPSTAN_ALLOW_UNCONFINED_TOOLS")]
    allow_unconfined_tools: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// A local playground control plane (etcd, kube-apiserver, kube-controller-manager, simulated nodes).
    #[command(subcommand)]
    Local(commands::local::LocalCommand),
    /// Install Capstan's CRDs, namespace and RBAC into a cluster.
    Install(commands::install::InstallArgs),
    /// Run the Application and ApplicationSet controllers (with --listen, also the HTTP server).
    Controller(commands::controller::ControllerArgs),
    /// Serve the HTTP API, web UI, Git webhooks and metrics.
    Server(commands::server::ServerArgs),
    /// Local accounts and API tokens of the HTTP server.
    Account(commands::account::AccountArgs),
    /// Inspect and operate Applications.
    App(commands::app::AppArgs),
    /// Inspect ApplicationSets and preview what they generate.
    Appset(commands::appset::AppsetArgs),
    /// Register destination clusters and inspect them.
    Cluster(commands::cluster::ClusterArgs),
    /// Promote a service from one environment to a later one (one Git commit), or show the history.
    Promote(commands::promote::PromoteArgs),
    /// Write the CustomResourceDefinitions generated from the Rust types.
    #[command(hide = true)]
    Crds(commands::crds::CrdsArgs),
}

fn main() -> ExitCode {
    // The Jsonnet worker (see capstan_render::jsonnet): a child process the renderer starts, before any
    // argument parsing, logging or runtime.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == capstan_render::jsonnet::WORKER_ARG)
    {
        return capstan_render::jsonnet::worker_main(std::env::args_os().skip(2));
    }
    let cli = Cli::parse();
    init_tracing(&cli.log);
    if cli.allow_unconfined_tools {
        capstan_sandbox::Enforcement::AllowUnconfined.set();
    }
    if matches!(cli.command, Command::Controller(_) | Command::Server(_)) {
        let support = capstan_sandbox::KernelSupport::current();
        match support.missing() {
            None => eprintln!("capstan: {}", support.describe()),
            Some(missing) if cli.allow_unconfined_tools => {
                eprintln!("capstan: warning: {missing}; tools run unconfined (--allow-unconfined-tools)")
            }
            Some(missing) => eprintln!(
                "capstan: warning: {missing}; repositories will not be rendered (start with --allow-unconfined-tools to render them unconfined)"
            ),
        }
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Local(cmd) => commands::local::run(cmd).await,
            Command::Install(args) => commands::install::run(args).await,
            Command::Controller(args) => commands::controller::run(args).await,
            Command::Server(args) => commands::server::run(args).await,
            Command::Account(args) => commands::account::run(args).await,
            Command::App(args) => commands::app::run(args).await,
            Command::Appset(args) => commands::appset::run(args).await,
            Command::Cluster(args) => commands::cluster::run(args).await,
            Command::Promote(args) => commands::promote::run(args).await,
            Command::Crds(args) => commands::crds::run(args),
        }
    });
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(default))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

//! The `capstan` binary: the command-line edge of Capstan.
//!
//! It parses arguments, sets up logging and turns every error into one readable message and a non-zero
//! exit code (never a panic or a backtrace). The work is done by the library crates; each subcommand
//! lives in its own module under [`commands`]; what they print to stdout goes through [`output`].

#![deny(clippy::print_stdout)]

mod commands;
mod kube_client;
mod logging;
mod output;
mod remote;
mod shutdown;

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
    /// When to colour output (diffs, the log): `auto` colours a terminal unless NO_COLOR is set,
    /// `always`, or `never`.
    #[arg(long, global = true, value_enum, default_value = "auto", env = "CAPSTAN_COLOR")]
    color: output::ColorChoice,
    /// Format of the log on stderr: `text`, or `json` (one object per line).
    #[arg(long, global = true, value_enum, default_value = "text", env = "CAPSTAN_LOG_FORMAT")]
    log_format: logging::LogFormat,
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
    /// Install Capstan into a cluster that manages itself from Git: commit its installation and the
    /// hub's Applications to a repository, install, and create the Applications `capstan` and `root`.
    Bootstrap(commands::bootstrap::BootstrapArgs),
    /// Run the Application and ApplicationSet controllers (with --listen, also the HTTP server).
    Controller(commands::controller::ControllerCommand),
    /// Serve the HTTP API, web UI, Git webhooks and metrics.
    Server(commands::server::ServerArgs),
    /// Local accounts and API tokens of the HTTP server.
    Account(commands::account::AccountArgs),
    /// Log in to Capstan's HTTP server (password or API token); `app` commands then go through it.
    Login(commands::login::LoginArgs),
    /// Log out of a server (the current one by default).
    Logout(commands::login::LogoutArgs),
    /// List the servers logged in to, or choose the one commands go to.
    Context(commands::login::ContextArgs),
    /// Inspect and operate Applications.
    App(commands::app::AppArgs),
    /// Inspect ApplicationSets and preview what they generate.
    Appset(commands::appset::AppsetArgs),
    /// Register destination clusters and inspect them.
    Cluster(commands::cluster::ClusterArgs),
    /// Inspect AppProjects (their sync windows).
    Project(commands::project::ProjectArgs),
    /// Promote a service from one environment to a later one (one Git commit), or show the history.
    Promote(commands::promote::PromoteArgs),
    /// What a revision of a repository would change (diffs, prunes, policy verdicts, deletion
    /// budgets), without applying anything; or, offline, the policies' verdicts on manifests.
    Plan(commands::plan::PlanArgs),
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
    // SIGTERM and Ctrl-C wait from here until the command's handlers are installed (see `shutdown`).
    let held = shutdown::Held::hold();
    let cli = Cli::parse();
    let runs_until_stopped = match &cli.command {
        Command::Controller(cmd) => cmd.runs(),
        Command::Server(_) => true,
        _ => false,
    };
    let held = if runs_until_stopped {
        Some(held)
    } else {
        held.release();
        None
    };
    output::set_color(cli.color);
    logging::init(&cli.log, cli.log_format);
    if cli.allow_unconfined_tools {
        capstan_sandbox::Enforcement::AllowUnconfined.set();
    }
    if runs_until_stopped {
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
        // The handlers are installed before the first await of the command.
        let signals = held.map(shutdown::Signals::listen);
        let caught = |signals: Option<std::io::Result<shutdown::Signals>>| match signals {
            Some(Ok(signals)) => Ok(signals),
            Some(Err(err)) => Err(anyhow::anyhow!("cannot catch SIGTERM and SIGINT: {err}")),
            None => Err(anyhow::anyhow!("SIGTERM and SIGINT were not held for this command")),
        };
        match cli.command {
            Command::Local(cmd) => commands::local::run(cmd).await,
            Command::Install(args) => commands::install::run(args).await,
            Command::Bootstrap(args) => commands::bootstrap::run(args).await,
            Command::Controller(cmd) => match cmd.into_run() {
                Ok(args) => commands::controller::run(args, caught(signals)?).await,
                Err(status) => commands::controller_status::run(status).await,
            },
            Command::Server(args) => commands::server::run(args, caught(signals)?).await,
            Command::Account(args) => commands::account::run(args).await,
            Command::App(args) => commands::app::run(args).await,
            Command::Appset(args) => commands::appset::run(args).await,
            Command::Cluster(args) => commands::cluster::run(args).await,
            Command::Project(args) => commands::project::run(args).await,
            Command::Promote(args) => commands::promote::run(args).await,
            Command::Plan(args) => commands::plan::run(args).await,
            Command::Login(args) => commands::login::login(args).await,
            Command::Logout(args) => commands::login::logout(args).await,
            Command::Context(args) => commands::login::context(args).await,
            Command::Crds(args) => commands::crds::run(args),
        }
    });
    // What still runs (a watch, a poll, a render cut short by the grace period) is dropped, its
    // child processes killed with it; blocking work gets a moment, then the process exits anyway.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            // A login that is no longer good is the caller's to renew, as other usage errors.
            if err
                .downcast_ref::<remote::RemoteError>()
                .is_some_and(|e| matches!(e, remote::RemoteError::Expired { .. }))
            {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    /// Every subcommand, flag and positional argument of `capstan` says what it is in `--help`.
    #[test]
    fn every_command_and_argument_is_documented() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let builtin = matches!(arg.get_id().as_str(), "help" | "version");
                if !builtin && !arg.is_hide_set() && arg.get_help().is_none() {
                    missing.push(format!("{path} <{}>", arg.get_id()));
                }
            }
            for sub in cmd
                .get_subcommands()
                .filter(|s| !s.is_hide_set() && s.get_name() != "help")
            {
                let sub_path = format!("{path} {}", sub.get_name());
                if sub.get_about().is_none() {
                    missing.push(sub_path.clone());
                }
                walk(sub, &sub_path, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&super::Cli::command(), "capstan", &mut missing);
        assert!(missing.is_empty(), "undocumented in --help: {missing:#?}");
    }

    /// One spelling per flag: the namespace of Capstan's objects is kubectl's `-n/--namespace` in
    /// every command's `--help` (the older `-N/--app-namespace`, `--appset-namespace`,
    /// `--capstan-namespace` are hidden aliases that still parse).
    #[test]
    fn every_command_names_the_namespace_as_kubectl_does() {
        fn walk(cmd: &clap::Command, path: &str, leaves: &mut Vec<(String, String)>) {
            let subs: Vec<&clap::Command> = cmd
                .get_subcommands()
                .filter(|s| !s.is_hide_set() && s.get_name() != "help")
                .collect();
            if subs.is_empty() {
                leaves.push((path.to_string(), cmd.clone().render_help().to_string()));
            }
            for sub in subs {
                walk(sub, &format!("{path} {}", sub.get_name()), leaves);
            }
        }
        let mut cli = super::Cli::command();
        cli.build();
        let mut leaves = Vec::new();
        walk(&cli, "capstan", &mut leaves);
        let with_namespace = [
            "app",
            "appset",
            "promote",
            "cluster",
            "account",
            "server",
            "controller",
            "install",
            "bootstrap",
        ];
        let mut checked = 0;
        for (path, help) in &leaves {
            for old in ["--app-namespace", "--appset-namespace", "--capstan-namespace", "-N,"] {
                assert!(!help.contains(old), "{path} --help still shows {old}:\n{help}");
            }
            // Those that read a cluster (`appset generate` works offline).
            let top = path.split(' ').nth(1).unwrap_or_default();
            if with_namespace.contains(&top) && help.contains("--kubeconfig") {
                assert!(
                    help.contains("-n, --namespace <"),
                    "{path} --help has no -n/--namespace:\n{help}"
                );
                checked += 1;
            }
        }
        assert!(checked >= 15, "only {checked} commands checked");
        for old in [
            vec!["capstan", "app", "-N", "x", "list"],
            vec!["capstan", "app", "--app-namespace", "x", "list"],
            vec!["capstan", "appset", "list", "--appset-namespace", "x"],
            vec!["capstan", "cluster", "--capstan-namespace", "x", "list"],
            vec!["capstan", "promote", "-N", "x", "--from", "a", "--to", "b", "history"],
        ] {
            if let Err(e) = super::Cli::try_parse_from(&old) {
                panic!("{old:?} no longer parses: {e}");
            }
        }
    }
}

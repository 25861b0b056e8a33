//! `capstan local up | down | status`: the playground control plane.

use crate::output::outln;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use capstan_playground::{Playground, UpOptions};

/// Playground subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum LocalCommand {
    /// Start a local control plane; prints the admin kubeconfig's path as the last line.
    Up {
        /// State directory (certificates, etcd data, logs, kubeconfig).
        #[arg(long, default_value = ".capstan/local")]
        dir: PathBuf,
        /// Number of simulated nodes.
        #[arg(long, default_value_t = 3)]
        nodes: usize,
        /// How long to wait for the control plane to become ready: seconds, or 90s, 5m, 1h.
        #[arg(long, default_value = "120", value_parser = super::seconds)]
        timeout: u64,
    },
    /// Stop the processes `up` started in DIR (safe to call twice).
    Down {
        /// State directory.
        #[arg(long, default_value = ".capstan/local")]
        dir: PathBuf,
    },
    /// Show whether each component runs; exits 1 when any does not.
    Status {
        /// State directory.
        #[arg(long, default_value = ".capstan/local")]
        dir: PathBuf,
    },
}

/// Run a playground subcommand.
pub async fn run(cmd: LocalCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        LocalCommand::Up { dir, nodes, timeout } => up(dir, nodes, timeout).await,
        LocalCommand::Down { dir } => {
            let stopped =
                Playground::down(&dir).with_context(|| format!("stopping the playground in {}", dir.display()))?;
            if stopped.is_empty() {
                outln!("nothing running in {}", dir.display());
            } else {
                outln!("stopped {}", stopped.join(", "));
            }
            Ok(ExitCode::SUCCESS)
        }
        LocalCommand::Status { dir } => Ok(status(&dir)),
    }
}

async fn up(dir: PathBuf, nodes: usize, timeout: u64) -> anyhow::Result<ExitCode> {
    let mut opts = UpOptions::new(&dir);
    opts.nodes = nodes;
    opts.timeout = Duration::from_secs(timeout);
    eprintln!("starting local control plane in {}", dir.display());
    let started = std::time::Instant::now();
    let pg = Playground::up(opts)
        .await
        .with_context(|| format!("starting the playground in {}", dir.display()))?;
    eprintln!(
        "API server {} (Kubernetes {}) ready in {:.1} s",
        pg.server,
        pg.version.tag,
        started.elapsed().as_secs_f64()
    );
    eprintln!("stop it with: capstan local down --dir {}", dir.display());
    outln!("{}", pg.kubeconfig.display());
    Ok(ExitCode::SUCCESS)
}

fn status(dir: &std::path::Path) -> ExitCode {
    let components = Playground::status(dir);
    outln!("{:<26} {:<8} STATE", "COMPONENT", "PID");
    for c in &components {
        let pid = c.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into());
        outln!(
            "{:<26} {:<8} {}",
            c.name,
            pid,
            if c.running { "running" } else { "stopped" }
        );
    }
    if let Some(server) = Playground::server_of(dir) {
        outln!("server: {server}");
        outln!("kubeconfig: {}", dir.join("kubeconfig").display());
    }
    if components.iter().all(|c| c.running) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

//! `capstan-bench`: the benchmarks of docs/benchmarks.md, against a real local control plane, a real
//! git server and the release `capstan` binary running as its own process (so its memory is its own).
//!
//! Each benchmark prints one result line; `--only` selects some. Figures depend on the machine: the
//! reference machine has 2 cores and 24 GiB.
//!
//! [`setup`] holds what the controller benchmarks share; each benchmark is a module of its own
//! ([`first_sync`] 1–2, [`fleet`] 3, [`self_heal`] 4, [`untracked`] 5, [`appset`] 6, [`webhook`] 7,
//! [`ui`] 8, [`charts`] 9, [`secrets`] 10, [`images`] 11, [`sandbox`] 12, [`scale`] 13 with
//! [`flux`] beside it and [`scale_plot`] drawing it; 13 runs only when named, it takes hours;
//! [`guardrails`] 14–15: `policy` and `plan`; [`notifications`] 16: `notify`).

use std::path::PathBuf;

use anyhow::Context;

mod appset;
mod charts;
mod first_sync;
mod fleet;
mod flux;
mod guardrails;
mod images;
mod notifications;
mod sandbox;
mod scale;
mod scale_plot;
mod secrets;
mod self_heal;
mod setup;
mod ui;
mod untracked;
mod webhook;

use setup::Bench;

#[derive(Debug, clap::Parser)]
struct Args {
    /// The capstan binary to benchmark.
    #[arg(long, default_value = "target/release/capstan")]
    capstan: PathBuf,
    /// Comma-separated subset: sync,resync,fleet,selfheal,untracked,appset,webhook,ui,charts,secrets,images,sandbox,
    /// policy,plan,notify (the default), and scale (only when named).
    #[arg(
        long,
        default_value = "sync,resync,selfheal,untracked,fleet,appset,webhook,ui,charts,secrets,images,sandbox,policy,plan,notify"
    )]
    only: String,
    /// ConfigMaps in the first-sync benchmark.
    #[arg(long, default_value_t = 2000)]
    configmaps: usize,
    /// Applications in the fleet benchmark.
    #[arg(long, default_value_t = 500)]
    apps: usize,
    /// Applications a revision changes in the plan benchmark.
    #[arg(long, default_value_t = 200)]
    plan_apps: usize,
    /// Applications synced in turn in the notifications benchmark (each round).
    #[arg(long, default_value_t = 20)]
    notified_apps: usize,
    /// Untracked ConfigMaps in the memory benchmark.
    #[arg(long, default_value_t = 10_000)]
    untracked: usize,
    /// Applications generated in the ApplicationSet benchmark (half per spoke).
    #[arg(long, default_value_t = 200)]
    generated: usize,
    /// Drift samples in the self-heal benchmark.
    #[arg(long, default_value_t = 50)]
    samples: usize,
    /// Applications in the Helm repository benchmark.
    #[arg(long, default_value_t = 200)]
    chart_apps: usize,
    /// Services in the image update benchmark.
    #[arg(long, default_value_t = 100)]
    image_services: usize,
    /// Applications in the web UI list benchmark: one run per comma-separated number.
    #[arg(long, default_value = "1000,10000")]
    ui_apps: String,
    /// Runs of each tool, confined and not, in the sandbox benchmark.
    #[arg(long, default_value_t = 40)]
    sandbox_runs: usize,
    /// Applications in the scaling benchmark (`--only scale`): one set of runs per number.
    #[arg(long, default_value = "500,2000,5000,10000")]
    scale_apps: String,
    /// Controller replicas in the scaling benchmark: one run per number and size.
    #[arg(long, default_value = "1,3")]
    scale_replicas: String,
    /// Leave Flux out of the scaling benchmark (it needs `scripts/setup.sh --with-bench-tools`).
    #[arg(long)]
    no_flux: bool,
    /// The sizes at which Flux runs beside Capstan (default: every size of --scale-apps).
    #[arg(long)]
    scale_flux_apps: Option<String>,
    /// Repository poll interval of Capstan and Flux in the scaling benchmark, seconds.
    #[arg(long, default_value_t = 30)]
    scale_poll: u64,
    /// Where the scaling benchmark draws its plot (SVG).
    #[arg(long, default_value = scale::DEFAULT_PLOT)]
    plot: std::path::PathBuf,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Args = clap::Parser::parse();
    let only: Vec<&str> = args.only.split(',').map(str::trim).collect();
    // The sandbox benchmark runs the tools alone; every other one needs the release binary.
    let capstan = || {
        std::fs::canonicalize(&args.capstan).with_context(|| {
            format!(
                "{} not found: build it with `cargo build --release`",
                args.capstan.display()
            )
        })
    };
    println!(
        "# capstan benchmarks ({} cores)",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)
    );
    if only.contains(&"sandbox") {
        // No control plane: the real tools, confined and not.
        sandbox::sandbox_cost(args.sandbox_runs.max(1)).await?;
    }
    if only.contains(&"scale") {
        // Every run on a control plane of its own.
        let runs = scale::scale(&scale::Options {
            capstan: capstan()?,
            sizes: scale::numbers(&args.scale_apps, "--scale-apps")?,
            replicas: scale::numbers(&args.scale_replicas, "--scale-replicas")?,
            flux: match (&args.scale_flux_apps, args.no_flux) {
                (_, true) => Vec::new(),
                (Some(list), false) => scale::numbers(list, "--scale-flux-apps")?,
                (None, false) => scale::numbers(&args.scale_apps, "--scale-apps")?,
            },
            poll: std::time::Duration::from_secs(args.scale_poll.max(1)),
        })
        .await?;
        scale_plot::plot(&runs.rows, &args.plot)?;
        println!("   plot: {}", args.plot.display());
        anyhow::ensure!(runs.failed.is_empty(), "runs failed: {}", runs.failed.join("; "));
    }
    if only.iter().any(|b| !["ui", "sandbox", "scale"].contains(b)) {
        controller_benchmarks(&args, &only, capstan()?).await?;
    }
    if only.contains(&"ui") {
        // On its own control plane, without a controller: nothing but the benchmark changes the
        // Applications while the page is measured.
        for n in args.ui_apps.split(',') {
            let n: usize = n
                .trim()
                .parse()
                .with_context(|| format!("--ui-apps {n:?} is not a number"))?;
            ui::ui_list(&capstan()?, n).await?;
        }
    }
    Ok(())
}

/// Benchmarks 1–7 and 9–11, against one control plane and one controller.
async fn controller_benchmarks(args: &Args, only: &[&str], capstan: PathBuf) -> anyhow::Result<()> {
    let bench = Bench::start(capstan).await?;
    if only.contains(&"sync") || only.contains(&"resync") {
        bench.first_sync_and_resync(args.configmaps).await?;
    }
    if only.contains(&"selfheal") {
        bench.self_heal(args.samples).await?;
    }
    if only.contains(&"untracked") {
        bench.untracked(args.untracked).await?;
    }
    if only.contains(&"fleet") {
        bench.fleet(args.apps).await?;
    }
    if only.contains(&"appset") {
        bench.appset(args.generated).await?;
    }
    if only.contains(&"webhook") {
        bench.webhook(args.apps).await?;
    }
    if only.contains(&"charts") {
        bench.charts(args.chart_apps).await?;
    }
    if only.contains(&"secrets") {
        bench.secrets().await?;
    }
    if only.contains(&"images") {
        bench.images(args.image_services.max(2)).await?;
    }
    if only.contains(&"policy") {
        bench.policy_cost(args.configmaps).await?;
    }
    if only.contains(&"plan") {
        bench.plan_time(args.plan_apps).await?;
    }
    if only.contains(&"notify") {
        bench.notifications(args.notified_apps).await?;
    }
    Ok(())
}

//! SIGTERM and Ctrl-C for the commands that run until stopped (`controller`, `server`).
//!
//! The signals are theirs from the first instruction of `main`: [`Held::hold`] blocks SIGTERM and
//! SIGINT before anything else runs (threads started later inherit the mask), so one that arrives
//! while arguments are parsed or the runtime starts waits, pending, instead of taking its default
//! action (or, for a PID 1 in a container, being dropped). [`Signals::listen`] installs the
//! handlers and only then lets them through; every other command lets them through at once, with
//! their default action.
//!
//! [`until_stopped`] runs a command's work until the first signal, tells it to stop, and gives it
//! the grace period to finish — in-flight syncs complete and record their result — before the
//! process exits anyway (an interrupted sync is recorded `Running` and resumes at the next start).
//! A second signal exits at once.

use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
use tokio::signal::unix::{SignalKind, signal};

/// Flags of the commands that run until stopped.
#[derive(Debug, Clone, clap::Args)]
pub struct ShutdownArgs {
    /// After SIGTERM or Ctrl-C, how long in-flight work (a sync, an HTTP request) may take to finish
    /// before the process exits anyway: seconds, or 90s, 5m. Keep it below the pod's
    /// terminationGracePeriodSeconds (30 by default).
    #[arg(long, default_value = "25", value_parser = crate::commands::seconds)]
    pub shutdown_grace: u64,
}

impl ShutdownArgs {
    /// The grace period.
    pub fn grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace)
    }
}

/// SIGTERM and SIGINT, blocked on this thread (and every thread started from it) until released.
#[must_use = "release the signals, or they stay blocked"]
pub struct Held {
    set: SigSet,
    blocked: bool,
}

impl Held {
    /// Block SIGTERM and SIGINT: the first thing `main` does.
    pub fn hold() -> Held {
        let mut set = SigSet::empty();
        set.add(Signal::SIGTERM);
        set.add(Signal::SIGINT);
        let blocked = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), None).is_ok();
        Held { set, blocked }
    }

    /// Let the signals through: one that arrived meanwhile is delivered now (to its handler, or
    /// with its default action when none is installed).
    pub fn release(mut self) {
        self.unblock();
    }

    fn unblock(&mut self) {
        if std::mem::take(&mut self.blocked) {
            let _ = pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&self.set), None);
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.unblock();
    }
}

/// SIGTERM and SIGINT, caught.
pub struct Signals {
    term: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    /// Install the handlers (inside the runtime), then release `held`: a signal that arrived while
    /// they were held is received here.
    pub fn listen(held: Held) -> std::io::Result<Signals> {
        let signals = Signals {
            term: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        };
        held.release();
        Ok(signals)
    }

    /// The next signal's name.
    pub async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.interrupt.recv() => "SIGINT",
        }
    }
}

/// Run `work` until it ends. At the first signal, `stop` is called (the work should then wind down:
/// no new syncs, in-flight ones finish) and `work` gets `grace` more to end; after that, or at a
/// second signal, this returns and the process exits with whatever still runs cut short. `what`
/// names the command in the log lines.
pub async fn until_stopped(
    what: &str,
    work: impl Future<Output = anyhow::Result<ExitCode>>,
    mut signals: Signals,
    stop: impl FnOnce(),
    grace: Duration,
) -> anyhow::Result<ExitCode> {
    tokio::pin!(work);
    let received = tokio::select! {
        result = &mut work => return result,
        name = signals.recv() => name,
    };
    stop();
    eprintln!(
        "capstan {what}: {received} received, stopping: no new syncs start; work in flight gets up to {} s to finish",
        grace.as_secs()
    );
    let started = std::time::Instant::now();
    tokio::select! {
        result = &mut work => {
            eprintln!("capstan {what}: stopped in {:.1} s", started.elapsed().as_secs_f64());
            result
        }
        () = tokio::time::sleep(grace) => {
            eprintln!(
                "capstan {what}: still busy after the grace period ({} s, --shutdown-grace): exiting anyway; a sync cut short stays recorded as Running and resumes at the next start",
                grace.as_secs()
            );
            Ok(ExitCode::SUCCESS)
        }
        name = signals.recv() => {
            eprintln!("capstan {what}: {name} received again: exiting now; a sync cut short stays recorded as Running and resumes at the next start");
            Ok(ExitCode::SUCCESS)
        }
    }
}

//! Local control planes for tests: a private one per test ([`TestCluster::start`]), or one shared by
//! every test of a test run that needs no plane of its own ([`TestCluster::shared`]).
//!
//! nextest runs every test in its own process, so a shared plane outlives the test that started it.
//! It lives in a directory named after the run and the Kubernetes release; a file lock serialises
//! starting it. Each test holding it records a lease (`leases/PID-N`); a keeper process
//! (`keeper.sh`) stops the plane and removes its directory once the test runner has exited or no
//! test has held a lease for [`SHARED_IDLE`]. Outside nextest (`cargo test`), the tests of a binary
//! share its process, which owns the plane instead of the runner: there a plane is shared by one
//! binary's tests.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use capstan_playground::{KubeVersion, Playground, UpOptions, process};

/// Prefix of every test cluster's temporary directory.
const PREFIX: &str = "capstan-cluster-";
/// Prefix of every shared test cluster's temporary directory.
const SHARED_PREFIX: &str = "capstan-shared-cluster-";
/// File in that directory naming the test process that owns the cluster ("PID STARTTICKS"); for a
/// shared cluster the test runner.
const OWNER: &str = "owner.pid";
/// How long a shared plane stays up with no test holding it: long enough to bridge the stretches of
/// a run whose tests start no plane (nextest goes through the packages in turn), so that one plane
/// serves the whole run. An idle plane costs little; the runner's exit stops it at once.
pub const SHARED_IDLE: Duration = Duration::from_secs(180);
/// The keeper of a shared plane.
const KEEPER: &str = include_str!("keeper.sh");

/// A running control plane; a private one's processes are all stopped on drop, a shared one is left
/// to its keeper.
pub struct TestCluster {
    playground: Playground,
    kind: Kind,
}

enum Kind {
    Private(#[allow(dead_code)] tempfile::TempDir),
    /// The lease file this process holds on a shared plane.
    Shared(PathBuf),
}

impl TestCluster {
    /// Start a control plane with three kwok nodes, of the release `CAPSTAN_KUBE_VERSION` selects.
    ///
    /// Control planes left behind by test processes that were killed (a signal skips `Drop`) are
    /// stopped first.
    pub async fn start() -> anyhow::Result<TestCluster> {
        reap_orphans();
        let dir = tempfile::Builder::new().prefix(PREFIX).tempdir()?;
        if let Some(me) = process::current() {
            process::write_pid_file(&dir.path().join(OWNER), &me)?;
        }
        let playground = Playground::up(throwaway(dir.path())).await?;
        Ok(TestCluster {
            playground,
            kind: Kind::Private(dir),
        })
    }

    /// [`TestCluster::start`] with the API server's audit log of every write
    /// ([`TestCluster::audit_log`]): who wrote what, for tests that must prove which process wrote.
    pub async fn start_audited() -> anyhow::Result<TestCluster> {
        reap_orphans();
        let dir = tempfile::Builder::new().prefix(PREFIX).tempdir()?;
        if let Some(me) = process::current() {
            process::write_pid_file(&dir.path().join(OWNER), &me)?;
        }
        let mut opts = throwaway(dir.path());
        opts.audit = true;
        let playground = Playground::up(opts).await?;
        Ok(TestCluster {
            playground,
            kind: Kind::Private(dir),
        })
    }

    /// The API server's audit log (JSON lines) of a plane started with
    /// [`TestCluster::start_audited`].
    pub fn audit_log(&self) -> PathBuf {
        self.playground.dir.join(capstan_playground::AUDIT_LOG)
    }

    /// The control plane shared by the tests of this test run (of the release `CAPSTAN_KUBE_VERSION`
    /// selects), started if no test has started it yet.
    ///
    /// Tests sharing a plane must keep to names of their own: their own namespaces (Capstan's, from
    /// [`crate::capstan::unique_namespace`], and destination namespaces no other test uses), and
    /// cluster-scoped objects (CRDs, cluster roles) named for the test. Everything else (the API
    /// server itself, cluster-wide lists) is seen by every test of the run. A test that needs the
    /// cluster to itself starts a private one ([`TestCluster::start`]) and says why.
    pub async fn shared() -> anyhow::Result<TestCluster> {
        reap_orphans();
        let version = KubeVersion::selected()?;
        let (owner, run) = shared_owner();
        let key: String = format!("{run}-{}", version.tag)
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '-' })
            .collect();
        let dir = std::env::temp_dir().join(format!("{SHARED_PREFIX}{key}"));
        let (lock, lease) = tokio::task::spawn_blocking({
            let (dir, owner) = (dir.clone(), owner.clone());
            move || lock_shared(&dir, &owner)
        })
        .await??;
        let playground = Playground::up(throwaway(&dir)).await?;
        let me = process::current().ok_or_else(|| anyhow::anyhow!("reading this process's start time"))?;
        process::write_pid_file(&lease, &me)?;
        let (keeper_pid, keeper_log) = process::files(&dir, "keeper");
        if !process::read_pid_file(&keeper_pid).is_some_and(|k| process::is_running(&k)) {
            let mut cmd = std::process::Command::new("sh");
            cmd.arg("-c")
                .arg(KEEPER)
                .arg("keeper")
                .arg(&dir)
                .arg(owner.pid.to_string())
                .arg(owner.start_ticks.to_string())
                .arg(SHARED_IDLE.as_secs().to_string());
            process::spawn("keeper", cmd, &keeper_log, &keeper_pid)?;
        }
        drop(lock);
        Ok(TestCluster {
            playground,
            kind: Kind::Shared(lease),
        })
    }

    /// A client authenticated as the cluster's admin.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        Ok(self.playground.client().await?)
    }

    /// Path of the admin kubeconfig.
    pub fn kubeconfig(&self) -> &Path {
        &self.playground.kubeconfig
    }

    /// The API server URL.
    pub fn server(&self) -> &str {
        &self.playground.server
    }

    /// The PEM of the cluster's CA (it signed the API server's serving certificate).
    pub fn ca_pem(&self) -> anyhow::Result<String> {
        let path = self.playground.dir.join("pki").join("ca.crt");
        std::fs::read_to_string(&path).map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))
    }

    /// The state directory (logs are under `logs/`).
    pub fn dir(&self) -> PathBuf {
        self.playground.dir.clone()
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if let Kind::Shared(lease) = &self.kind {
            let _ = std::fs::remove_file(lease);
            return;
        }
        // A test's plane keeps nothing: no graceful shutdown (the API server's takes seconds).
        if let Err(err) = Playground::down_within(&self.playground.dir, Duration::ZERO) {
            eprintln!(
                "warning: stopping test cluster in {}: {err}",
                self.playground.dir.display()
            );
        }
    }
}

/// Options for a test's control plane in `dir`.
fn throwaway(dir: &Path) -> UpOptions {
    let mut opts = UpOptions::new(dir);
    opts.throwaway = true;
    opts
}

/// Who owns a shared plane, and the run it belongs to: under nextest (one process per test) the test
/// runner, the parent of this process; otherwise this process.
fn shared_owner() -> (process::Started, String) {
    let me = process::current();
    if let Ok(run) = std::env::var("NEXTEST_RUN_ID") {
        let parent = std::os::unix::process::parent_id() as i32;
        if let Some(runner) = process::of_pid(parent) {
            return (runner, run);
        }
    }
    let me = me.unwrap_or(process::Started {
        pid: std::process::id() as i32,
        start_ticks: 0,
    });
    let run = format!("pid{}-{}", me.pid, me.start_ticks);
    (me, run)
}

/// Lock the shared plane's directory (creating it) and reserve a lease file for this process.
/// Returns the held lock and the lease's path.
fn lock_shared(dir: &Path, owner: &process::Started) -> anyhow::Result<(File, PathBuf)> {
    loop {
        std::fs::create_dir_all(dir.join("leases"))?;
        let path = dir.join("lock");
        let lock = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
        lock.lock()?;
        // The keeper removes the directory while holding the lock: a lock on a removed file is no
        // lock on the directory's new life.
        use std::os::unix::fs::MetadataExt;
        let same = std::fs::metadata(&path).is_ok_and(|m| lock.metadata().is_ok_and(|l| l.ino() == m.ino()));
        if !same {
            continue;
        }
        std::fs::create_dir_all(dir.join("leases"))?;
        let owner_file = dir.join(OWNER);
        if !owner_file.exists() {
            process::write_pid_file(&owner_file, owner)?;
        }
        // One lease per cluster handle: the tests of a binary share one process under `cargo test`.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let lease = dir.join("leases").join(format!("{}-{n}", std::process::id()));
        return Ok((lock, lease));
    }
}

/// Stop the control planes of test clusters whose owning process is gone, and remove their
/// directories. Only directories with an owner file are touched, and only processes recorded in
/// their own pid files are signalled.
pub fn reap_orphans() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_cluster = name.starts_with(PREFIX) || name.starts_with(SHARED_PREFIX);
        let Some(owner) = process::read_pid_file(&dir.join(OWNER)) else {
            continue;
        };
        if !is_cluster || process::is_running(&owner) {
            continue;
        }
        match Playground::down(&dir) {
            Ok(stopped) if !stopped.is_empty() => {
                eprintln!(
                    "stopped {} left behind by a killed test in {}",
                    stopped.join(", "),
                    dir.display()
                );
            }
            Ok(_) => {}
            Err(err) => {
                eprintln!(
                    "warning: stopping the orphaned test cluster in {}: {err}",
                    dir.display()
                );
                continue;
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clusters_of_killed_test_processes_are_stopped_and_removed() -> anyhow::Result<()> {
        // A "test cluster" whose owner is dead: a process that has exited.
        let dir = tempfile::Builder::new().prefix(PREFIX).tempdir()?.keep();
        let mut gone = std::process::Command::new("true").spawn()?;
        let dead = process::Started {
            pid: gone.id() as i32,
            start_ticks: 1,
        };
        gone.wait()?;
        process::write_pid_file(&dir.join(OWNER), &dead)?;
        // ... with one of its components still running.
        std::fs::create_dir_all(dir.join("run"))?;
        std::fs::create_dir_all(dir.join("logs"))?;
        let (pid_file, log) = process::files(&dir, "etcd");
        let mut sleep = std::process::Command::new("sleep");
        sleep.arg("300");
        let orphan = process::spawn("etcd", sleep, &log, &pid_file)?;
        assert!(process::is_running(&orphan));

        // A cluster whose owner is alive (this process) is left alone.
        let mine = tempfile::Builder::new().prefix(PREFIX).tempdir()?;
        if let Some(me) = process::current() {
            process::write_pid_file(&mine.path().join(OWNER), &me)?;
        }

        reap_orphans();
        assert!(!process::is_running(&orphan), "the orphaned component is stopped");
        assert!(!dir.exists(), "the orphan's directory is removed");
        assert!(mine.path().exists(), "a live test's cluster is untouched");
        Ok(())
    }
}

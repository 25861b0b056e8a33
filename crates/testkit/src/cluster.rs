//! A throwaway local control plane for one test.

use std::path::{Path, PathBuf};

use capstan_playground::{Playground, UpOptions, process};

/// Prefix of every test cluster's temporary directory.
const PREFIX: &str = "capstan-cluster-";
/// File in that directory naming the test process that owns the cluster ("PID STARTTICKS").
const OWNER: &str = "owner.pid";

/// A running control plane in a temporary directory; every process it started is stopped on drop.
pub struct TestCluster {
    playground: Playground,
    _dir: tempfile::TempDir,
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
        let playground = Playground::up(UpOptions::new(dir.path())).await?;
        Ok(TestCluster { playground, _dir: dir })
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

    /// The state directory (logs are under `logs/`).
    pub fn dir(&self) -> PathBuf {
        self.playground.dir.clone()
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if let Err(err) = self.playground.stop() {
            eprintln!(
                "warning: stopping test cluster in {}: {err}",
                self.playground.dir.display()
            );
        }
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
        let is_cluster = entry.file_name().to_string_lossy().starts_with(PREFIX);
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

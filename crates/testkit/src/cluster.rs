//! A throwaway local control plane for one test.

use std::path::{Path, PathBuf};

use capstan_playground::{Playground, Simulator, UpOptions};

/// A running control plane in a temporary directory; every process it started is stopped on drop.
pub struct TestCluster {
    playground: Playground,
    _dir: tempfile::TempDir,
}

impl TestCluster {
    /// Start a control plane with three simulated nodes (the simulator runs on the test's runtime).
    pub async fn start() -> anyhow::Result<TestCluster> {
        let dir = tempfile::Builder::new().prefix("capstan-cluster-").tempdir()?;
        let playground = Playground::up(UpOptions::new(dir.path(), Simulator::InProcess)).await?;
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

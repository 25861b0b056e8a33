//! Building a Kubernetes client from `--kubeconfig`/`--context` (or the usual inference: `$KUBECONFIG`,
//! `~/.kube/config`, in-cluster), and turning connection failures into messages a person can act on.

use std::path::PathBuf;

use anyhow::Context;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Connection flags shared by every command that talks to a cluster.
#[derive(Debug, Clone, clap::Args)]
pub struct KubeArgs {
    /// Path of the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Context in the kubeconfig.
    #[arg(long)]
    pub context: Option<String>,
}

impl KubeArgs {
    /// A client for the selected cluster, checked to be reachable.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        let options = KubeConfigOptions {
            context: self.context.clone(),
            ..Default::default()
        };
        let config = match &self.kubeconfig {
            Some(path) => {
                let kubeconfig = Kubeconfig::read_from(path)
                    .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .with_context(|| format!("invalid kubeconfig {}", path.display()))?
            }
            None => kube::Config::infer().await.context(
                "no Kubernetes configuration found: pass --kubeconfig, set KUBECONFIG or create ~/.kube/config",
            )?,
        };
        let server = config.cluster_url.to_string();
        let client = capstan_metrics::counted_client(config).context("cannot create a Kubernetes client")?;
        client
            .apiserver_version()
            .await
            .map_err(|e| anyhow::anyhow!("{}", describe(&e)))
            .with_context(|| format!("cannot reach the Kubernetes API server at {server}"))?;
        Ok(client)
    }
}

/// A one-line description of a kube error (the API server's message for API errors).
pub use capstan_kube::describe_kube_error as describe;

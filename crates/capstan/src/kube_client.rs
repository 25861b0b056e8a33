//! Building a Kubernetes client from `--kubeconfig`/`--context` (or the usual inference: `$KUBECONFIG`,
//! `~/.kube/config`, then the Pod's service account), and turning connection failures into messages a
//! person can act on.
//!
//! In a Pod (no kubeconfig, `KUBERNETES_SERVICE_HOST` set) the client authenticates with the service
//! account token the kubelet mounts at [`SERVICE_ACCOUNT_DIR`], trusts its `ca.crt` and reaches
//! `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`. The token file is read again at least
//! once a minute (kube-rs), so a token the kubelet rotates is picked up while the process runs. The
//! long-running commands ([`KubeArgs::client_waiting`]) wait for a usable token at start-up — one
//! that is missing, unreadable, or refused by the API server (expired, revoked) is reported and
//! tried again every few seconds — instead of exiting.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Where the kubelet mounts a Pod's service account: `token`, `ca.crt` and `namespace`.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// How often [`KubeArgs::client_waiting`] tries again while the service account token is unusable.
const TOKEN_RETRY: Duration = Duration::from_secs(2);

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

/// Why no client could be made.
#[derive(Debug)]
enum ClientError {
    /// In a Pod, with a service account token that is missing, unreadable or refused: the kubelet
    /// may yet write (or rotate) it, so a long-running command tries again.
    Token(anyhow::Error),
    /// Anything else.
    Other(anyhow::Error),
}

impl KubeArgs {
    /// A client for the selected cluster, checked to be reachable.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        match self.try_client().await {
            Ok(client) => Ok(client),
            Err(ClientError::Token(e) | ClientError::Other(e)) => Err(e),
        }
    }

    /// [`KubeArgs::client`] for `capstan controller` and `capstan server`: in a Pod, a service account
    /// token that is missing or refused is reported on standard error and tried again every
    /// [`TOKEN_RETRY`] until it works (the kubelet writes and rotates it); the caller stops the wait
    /// by dropping the future. Any other failure is returned at once.
    pub async fn client_waiting(&self) -> anyhow::Result<kube::Client> {
        let mut reported = String::new();
        loop {
            match self.try_client().await {
                Ok(client) => {
                    if !reported.is_empty() {
                        eprintln!("capstan: the service account token works now");
                    }
                    return Ok(client);
                }
                Err(ClientError::Other(e)) => return Err(e),
                Err(ClientError::Token(e)) => {
                    let message = format!("{e:#}");
                    // Said once per distinct reason, not every few seconds.
                    if message != reported {
                        eprintln!(
                            "error: {message}; trying again every {} s until the kubelet writes a valid token",
                            TOKEN_RETRY.as_secs()
                        );
                        reported = message;
                    }
                    tokio::time::sleep(TOKEN_RETRY).await;
                }
            }
        }
    }

    async fn try_client(&self) -> Result<kube::Client, ClientError> {
        let options = KubeConfigOptions {
            context: self.context.clone(),
            ..Default::default()
        };
        let (config, in_cluster) = match &self.kubeconfig {
            Some(path) => {
                let kubeconfig = Kubeconfig::read_from(path)
                    .with_context(|| format!("cannot read kubeconfig {}", path.display()))
                    .map_err(ClientError::Other)?;
                let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .with_context(|| format!("invalid kubeconfig {}", path.display()))
                    .map_err(ClientError::Other)?;
                (config, false)
            }
            None => match kube::Config::from_kubeconfig(&options).await {
                Ok(config) => (config, false),
                Err(kubeconfig_error) if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() => {
                    tracing::debug!(%kubeconfig_error, "no kubeconfig: using the Pod's service account");
                    (in_cluster_config()?, true)
                }
                Err(kubeconfig_error) => {
                    return Err(ClientError::Other(anyhow::anyhow!(
                        "no Kubernetes configuration found: pass --kubeconfig, set KUBECONFIG or create ~/.kube/config, or run in a Pod (KUBERNETES_SERVICE_HOST and a service account token in {SERVICE_ACCOUNT_DIR}) ({kubeconfig_error})"
                    )));
                }
            },
        };
        let server = config.cluster_url.to_string();
        let client = capstan_metrics::counted_client(config).map_err(|e| {
            let e = anyhow::anyhow!("{}", describe(&e)).context("cannot create a Kubernetes client");
            if in_cluster {
                ClientError::Token(e)
            } else {
                ClientError::Other(e)
            }
        })?;
        match client.apiserver_version().await {
            Ok(_) => Ok(client),
            Err(kube::Error::Api(status)) if in_cluster && status.code == 401 => {
                Err(ClientError::Token(anyhow::anyhow!(
                    "the API server at {server} refused the service account token in {}/token ({}: expired, revoked, or of another cluster)",
                    SERVICE_ACCOUNT_DIR,
                    status.message.trim()
                )))
            }
            Err(e) => Err(ClientError::Other(
                anyhow::anyhow!("{}", describe(&e))
                    .context(format!("cannot reach the Kubernetes API server at {server}")),
            )),
        }
    }
}

/// The Pod's in-cluster configuration, after checking that the files the kubelet mounts are there.
fn in_cluster_config() -> Result<kube::Config, ClientError> {
    let dir = Path::new(SERVICE_ACCOUNT_DIR);
    for (file, what) in [
        ("token", "service account token"),
        ("ca.crt", "cluster CA certificate"),
        ("namespace", "namespace"),
    ] {
        let path = dir.join(file);
        let problem = match std::fs::read(&path) {
            Ok(content) if content.iter().all(u8::is_ascii_whitespace) => "it is empty".to_string(),
            Ok(_) => continue,
            Err(e) => e.to_string(),
        };
        return Err(ClientError::Token(anyhow::anyhow!(
            "running in a Pod (KUBERNETES_SERVICE_HOST is set, no kubeconfig), but the {what} {} cannot be used: {problem} (is automountServiceAccountToken false?)",
            path.display()
        )));
    }
    kube::Config::incluster()
        .context("cannot read the in-cluster configuration (KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT)")
        .map_err(ClientError::Other)
}

/// A one-line description of a kube error (the API server's message for API errors).
pub use capstan_kube::describe_kube_error as describe;

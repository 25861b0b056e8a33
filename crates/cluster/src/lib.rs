//! The Secrets Capstan reads: destination clusters, repositories and secret stores.
//!
//! - [`secret`]: the cluster Secret (`capstan.dev/secret-type: cluster`, Argo CD's layout) read into a
//!   [`ClusterSecret`] and written back.
//! - [`connect`]: a Kubernetes client for a registered cluster, from its Secret.
//! - [`register`]: preparing a cluster to be managed (a service account with the rights Capstan
//!   needs) from an admin kubeconfig, as `capstan cluster add` does.
//! - [`status`]: the connection state the controller records per cluster and the CLI shows.
//! - [`repository`]: repository credentials from repository Secrets (`capstan.dev/secret-type:
//!   repository`), chosen by the longest URL prefix.
//! - [`decryption`]: age identities for SOPS files from decryption Secrets (`capstan.dev/secret-type:
//!   decryption`).
//! - [`secret_store`]: OpenBao/Vault stores from store Secrets (`capstan.dev/secret-type:
//!   secret-store`), for Secrets whose values come from a store.
//!
//! It knows nothing about Applications; the controllers and the CLI build on it.

pub mod connect;
pub mod decryption;
pub mod register;
pub mod repository;
pub mod secret;
pub mod secret_store;
pub mod status;

pub use secret::ClusterSecret;

/// Why a cluster cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The cluster Secret is malformed.
    #[error("cluster Secret {secret:?}: {message}")]
    InvalidSecret {
        /// The Secret's name.
        secret: String,
        /// What is wrong.
        message: String,
    },
    /// A kubeconfig cannot be used.
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    /// The cluster refused or failed a request.
    #[error("{0}")]
    Api(String),
}

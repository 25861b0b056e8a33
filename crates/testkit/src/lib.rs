//! Test support for Capstan's integration tests: real, throwaway infrastructure on loopback.
//!
//! - [`TestCluster`]: a local control plane (etcd, kube-apiserver, kube-controller-manager and the
//!   node simulator) in a temporary directory: a test's own, stopped when dropped
//!   ([`TestCluster::start`]), or the one all tests of a test run share, stopped by its keeper after
//!   the run ([`TestCluster::shared`]).
//! - [`GitServer`]: bare repositories served by `git daemon` (`git://`) and by `git http-backend`
//!   behind basic auth (`http://`), on free loopback ports, stopped when dropped; plus helpers to
//!   commit files into them.
//! - [`SshGitServer`]: OpenSSH's `sshd` on a free loopback port serving bare repositories to one
//!   client key, with its own host key, stopped when dropped.
//!
//! - [`ChartServer`]: a static HTTP(S) file server that is a Helm chart repository (basic auth,
//!   TLS, `ETag`/`304`, request counters), and helpers running the real `helm package`,
//!   `helm repo index` and `helm push` ([`charts`]).
//! - [`Registry`]: Debian's `docker-registry` (an OCI registry) on a free loopback port, with
//!   optional htpasswd basic auth and TLS.
//!
//! - [`OpenBao`]: OpenBao's `bao server -dev` on a free loopback port (KV v2 at `secret/`, a random
//!   root token), with helpers for KV secrets, policies, tokens, sealing and Kubernetes auth against
//!   a [`TestCluster`] ([`openbao`]).
//!
//! - [`forge::Forge`]: a real Gitea (SQLite, an admin and a token) whose repositories are pushed
//!   to over HTTP and whose commit statuses are read back.
//! - [`receiver`]: a webhook receiver answering as told (200, an error, a redirect, or never) and
//!   keeping what it got.
//! - [`sops`]: age keys and files encrypted by the real `sops`.
//! - [`capstan`]: installing Capstan's CRDs on such a cluster and reading Application status.
//!
//! Everything here starts real programs; nothing is mocked.

pub mod capstan;
pub mod charts;
pub mod cluster;
pub mod forge;
pub mod git;
pub mod openbao;
pub mod receiver;
pub mod registry;
pub mod sops;
pub mod ssh;
pub mod webdriver;

pub use charts::{ChartServer, ChartServerOptions};
pub use cluster::TestCluster;
pub use git::{GitServer, commit_files, files_under, run_git};
pub use openbao::OpenBao;
pub use registry::{Registry, RegistryOptions};
pub use ssh::SshGitServer;

/// Initialise test logging once (honours `RUST_LOG`; silent by default).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,kube_client::client::builder=off"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

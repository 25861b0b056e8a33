//! The controller's settings.

use std::path::PathBuf;
use std::time::Duration;

/// Controller settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Namespace whose Applications (and repository Secrets) are served.
    pub namespace: String,
    /// Where Git caches live.
    pub cache_dir: PathBuf,
    /// How often Git is polled per Application (jittered by up to 10 %).
    pub poll_interval: Duration,
    /// How long a wave may take to become healthy, or a hook to complete.
    pub wave_timeout: Duration,
    /// Limit of one `helm`/`kustomize` run.
    pub render_timeout: Duration,
    /// Applications reconciled at once.
    pub concurrency: u16,
    /// Whether `file://` repository URLs and local paths are allowed.
    pub allow_local_repositories: bool,
    /// Whether a missing `default` AppProject denies everything (instead of allowing everything).
    pub deny_implicit_default_project: bool,
    /// The clock sync windows are judged by (the system's unless a test sets one).
    pub clock: crate::clock::Clock,
    /// Set once the Application watch has listed.
    pub ready: crate::readiness::Readiness,
    /// What this replica owns when several share the Applications (`capstan controller` always
    /// coordinates through Leases); `None` reconciles every Application (one process alone).
    pub ownership: Option<capstan_replicas::Ownership>,
    /// Fill this Application cache and feed (shared with an HTTP server in the same process)
    /// instead of a cache of the controller's own.
    pub shared_apps: Option<std::sync::Arc<crate::shared_apps::SharedApps>>,
    /// Author name of the commits automatic reverts make (`spec.syncPolicy.autoRevert`).
    pub git_author_name: String,
    /// Author email of those commits.
    pub git_author_email: String,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            namespace: capstan_api::NAMESPACE.into(),
            cache_dir: std::env::temp_dir().join("capstan-cache"),
            poll_interval: Duration::from_secs(180),
            wave_timeout: Duration::from_secs(600),
            render_timeout: Duration::from_secs(60),
            concurrency: 32,
            allow_local_repositories: false,
            deny_implicit_default_project: false,
            clock: Default::default(),
            ready: Default::default(),
            ownership: None,
            shared_apps: None,
            git_author_name: "Capstan".into(),
            git_author_email: "capstan@localhost".into(),
        }
    }
}

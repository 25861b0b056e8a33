//! Capstan's Prometheus metrics: one process-wide set of metric families that the pipeline stages
//! (Git, rendering), the controllers (reconciles, syncs), the Kubernetes clients and the HTTP server
//! (webhooks) record into, and [`encode`] which the server's `/metrics` endpoint answers with.
//!
//! It is a leaf crate: it knows nothing of Applications. Per-Application gauges (sync and health
//! status) are produced by whoever has the Applications at hand, through [`Metrics::registry`] plus
//! an extra text block passed to [`encode`].

use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of a Git request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GitLabels {
    /// `ls-remote` or `fetch`.
    pub request: String,
    /// `ok` or `error`.
    pub result: String,
}

/// Labels of a render.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RenderLabels {
    /// `directory`, `kustomize` or `helm`.
    pub tool: String,
}

/// Labels of a render-cache lookup.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabels {
    /// `hit` or `miss`.
    pub result: String,
}

/// Labels of a reconcile or sync of one Application.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AppLabels {
    /// The Application's namespace.
    pub namespace: String,
    /// The Application's name.
    pub name: String,
}

/// Labels of a finished sync.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SyncLabels {
    /// The Application's namespace.
    pub namespace: String,
    /// The Application's name.
    pub name: String,
    /// `Succeeded` or `Failed`.
    pub phase: String,
}

/// Labels of a Kubernetes API request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KubeLabels {
    /// The HTTP method (`GET`, `PATCH`, ...).
    pub method: String,
}

/// Labels of a webhook delivery.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    /// `github`, `gitlab`, `gitea`, `bitbucket` or `unknown`.
    pub provider: String,
    /// `accepted`, `unauthorized`, `malformed`, `ignored` or `error`.
    pub result: String,
}

/// Labels of a watch event on an object Capstan manages.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChangeLabels {
    /// `capstan` (the echo of one of its own writes: no reconcile) or `other` (a reconcile follows).
    pub origin: String,
}

/// Every metric family Capstan records.
pub struct Metrics {
    registry: Registry,
    /// Git requests by kind and result.
    pub git_requests: Family<GitLabels, Counter>,
    /// Git request durations.
    pub git_request_duration: Family<GitLabels, Histogram>,
    /// Render durations (cache misses only).
    pub render_duration: Family<RenderLabels, Histogram>,
    /// Render cache lookups.
    pub render_cache: Family<CacheLabels, Counter>,
    /// Reconcile durations.
    pub reconcile_duration: Histogram,
    /// Sync (operation) durations per Application.
    pub sync_duration: Family<AppLabels, Histogram>,
    /// Finished syncs per Application and phase.
    pub syncs: Family<SyncLabels, Counter>,
    /// Kubernetes API requests by method.
    pub kube_requests: Family<KubeLabels, Counter>,
    /// Webhook deliveries by provider and result.
    pub webhooks: Family<WebhookLabels, Counter>,
    /// Changes to managed objects seen by the watches, by who made them.
    pub managed_object_changes: Family<ChangeLabels, Counter>,
    /// Durations of the policies' evaluations before syncs (and of live-object audits).
    pub policy_evaluation_duration: Histogram,
    /// Objects judged by a policy (one per policy and object in its scope and match).
    pub policy_evaluations: Counter,
}

fn seconds_histogram() -> Histogram {
    // 5 ms … ~80 s.
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("capstan");
        let git_requests = Family::<GitLabels, Counter>::default();
        let git_request_duration =
            Family::<GitLabels, Histogram>::new_with_constructor(seconds_histogram as fn() -> Histogram);
        let render_duration =
            Family::<RenderLabels, Histogram>::new_with_constructor(seconds_histogram as fn() -> Histogram);
        let render_cache = Family::<CacheLabels, Counter>::default();
        let reconcile_duration = seconds_histogram();
        let sync_duration =
            Family::<AppLabels, Histogram>::new_with_constructor(seconds_histogram as fn() -> Histogram);
        let syncs = Family::<SyncLabels, Counter>::default();
        let kube_requests = Family::<KubeLabels, Counter>::default();
        let webhooks = Family::<WebhookLabels, Counter>::default();
        let managed_object_changes = Family::<ChangeLabels, Counter>::default();
        // 0.1 ms … ~1.6 s: most evaluations are far below a sync's duration.
        let policy_evaluation_duration = Histogram::new(exponential_buckets(0.0001, 2.0, 15));
        let policy_evaluations = Counter::default();
        registry.register(
            "policy_evaluation_duration_seconds",
            "Duration of the policies' evaluation of one sync's (or one audit's) objects",
            policy_evaluation_duration.clone(),
        );
        registry.register(
            "policy_evaluations",
            "Objects judged by a policy (one per policy and object it matched)",
            policy_evaluations.clone(),
        );
        registry.register("git_requests", "Git requests (ls-remote, fetch)", git_requests.clone());
        registry.register(
            "git_request_duration_seconds",
            "Duration of Git requests",
            git_request_duration.clone(),
        );
        registry.register(
            "render_duration_seconds",
            "Duration of renders that missed the cache",
            render_duration.clone(),
        );
        registry.register(
            "render_cache_lookups",
            "Render cache lookups by result",
            render_cache.clone(),
        );
        registry.register(
            "app_reconcile_duration_seconds",
            "Duration of Application reconciles",
            reconcile_duration.clone(),
        );
        registry.register(
            "app_sync_duration_seconds",
            "Duration of Application sync operations",
            sync_duration.clone(),
        );
        registry.register("app_syncs", "Finished Application sync operations", syncs.clone());
        registry.register(
            "kube_requests",
            "Kubernetes API requests by method",
            kube_requests.clone(),
        );
        registry.register(
            "webhook_requests",
            "Git webhook deliveries by provider and result",
            webhooks.clone(),
        );
        registry.register(
            "managed_object_changes",
            "Changes to managed objects seen by the watches: origin capstan (its own writes, no reconcile) or other",
            managed_object_changes.clone(),
        );
        Self {
            registry,
            git_requests,
            git_request_duration,
            render_duration,
            render_cache,
            reconcile_duration,
            sync_duration,
            syncs,
            kube_requests,
            webhooks,
            managed_object_changes,
            policy_evaluation_duration,
            policy_evaluations,
        }
    }

    /// Record one evaluation of the policies: `judged` (policy, object) pairs in `elapsed`.
    pub fn policy_evaluation(&self, judged: usize, elapsed: Duration) {
        self.policy_evaluation_duration.observe(elapsed.as_secs_f64());
        self.policy_evaluations.inc_by(judged as u64);
    }

    /// Record one Git request.
    pub fn git_request(&self, request: &str, ok: bool, elapsed: Duration) {
        let labels = GitLabels {
            request: request.into(),
            result: if ok { "ok" } else { "error" }.into(),
        };
        self.git_requests.get_or_create(&labels).inc();
        self.git_request_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    /// Record a render-cache lookup.
    pub fn render_cache_lookup(&self, hit: bool) {
        let result = if hit { "hit" } else { "miss" };
        self.render_cache
            .get_or_create(&CacheLabels { result: result.into() })
            .inc();
    }

    /// Record a render that ran a tool (or read a directory).
    pub fn render(&self, tool: &str, elapsed: Duration) {
        self.render_duration
            .get_or_create(&RenderLabels { tool: tool.into() })
            .observe(elapsed.as_secs_f64());
    }

    /// Record a finished sync.
    pub fn sync(&self, namespace: &str, name: &str, succeeded: bool, elapsed: Duration) {
        let app = AppLabels {
            namespace: namespace.into(),
            name: name.into(),
        };
        self.sync_duration.get_or_create(&app).observe(elapsed.as_secs_f64());
        let phase = if succeeded { "Succeeded" } else { "Failed" };
        self.syncs
            .get_or_create(&SyncLabels {
                namespace: namespace.into(),
                name: name.into(),
                phase: phase.into(),
            })
            .inc();
    }

    /// Record a change to a managed object, made by Capstan itself (`own`) or by someone else.
    pub fn managed_object_change(&self, own: bool) {
        let origin = if own { "capstan" } else { "other" };
        self.managed_object_changes
            .get_or_create(&ChangeLabels { origin: origin.into() })
            .inc();
    }

    /// Record a webhook delivery.
    pub fn webhook(&self, provider: &str, result: &str) {
        self.webhooks
            .get_or_create(&WebhookLabels {
                provider: provider.into(),
                result: result.into(),
            })
            .inc();
    }

    /// The registry, for families registered elsewhere.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);
// Encoding reads every family; one at a time keeps the output consistent.
static ENCODE: Mutex<()> = Mutex::new(());

/// The process-wide metrics.
pub fn global() -> &'static Metrics {
    &METRICS
}

/// Every metric in the Prometheus text format, with `extra` (already encoded samples, e.g. per
/// Application gauges) inserted before the final `# EOF`.
pub fn encode(extra: &str) -> String {
    let _guard = ENCODE.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = String::new();
    if prometheus_client::encoding::text::encode_registry(&mut out, global().registry()).is_err() {
        out.clear();
    }
    out.push_str(extra);
    out.push_str("# EOF\n");
    out
}

/// A Kubernetes client whose requests are counted in `capstan_kube_requests_total`.
pub fn counted_client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    let counter = tower::util::MapRequestLayer::new(|req: http::Request<kube::client::Body>| {
        global()
            .kube_requests
            .get_or_create(&KubeLabels {
                method: req.method().as_str().into(),
            })
            .inc();
        req
    });
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&counter)
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_samples_appear_in_the_text_format() {
        global().git_request("fetch", true, Duration::from_millis(20));
        global().render_cache_lookup(true);
        global().webhook("github", "accepted");
        let text = encode("capstan_app_info{name=\"x\"} 1\n");
        assert!(
            text.contains("capstan_git_requests_total{request=\"fetch\",result=\"ok\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("capstan_render_cache_lookups_total{result=\"hit\"} 1"),
            "{text}"
        );
        assert!(text.contains("capstan_webhook_requests_total{provider=\"github\",result=\"accepted\"} 1"));
        assert!(text.contains("capstan_git_request_duration_seconds_bucket"));
        assert!(text.ends_with("capstan_app_info{name=\"x\"} 1\n# EOF\n"), "{text}");
    }
}

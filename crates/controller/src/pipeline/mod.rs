//! One pass of the pipeline for one Application: resolve the revision, render it, prepare the objects
//! for the destination, read the live state and compare. Used by the controller and by
//! `capstan app diff`; it changes nothing in any cluster. Reading the objects is in [`live`], the
//! project's rules for them in [`rules`].

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use capstan_api::Application;
use capstan_api::application::{HealthStatus, ResourceStatus};
use capstan_api::project::AppProjectSpec;
use capstan_compare::Comparison;
use capstan_compare::diff::Desired;
use capstan_compare::normalize::Tracking;
use capstan_health::HealthCode;
use capstan_health_rules::HealthRules;
use capstan_kube::{KindInfo, ObjectKey};
use capstan_project::SyncAccount;
use capstan_render::{ChartDependency, RefSource, RenderRequest, Renderer};
use capstan_source::{ChartCache, RepoCache};
use kube::{Client, ResourceExt};
use serde_json::Value;

use crate::clusters::{Clusters, Destination};
use crate::error::PipelineError;
use crate::health_config::HealthConfig;
use crate::policies::Policies;
use crate::projects::{Project, Projects};

mod live;
mod polled;
mod revision;
mod rules;
mod secrets;
mod sources;

pub use revision::{Resolved, SourceRevision, short};
use sources::source_field;

use live::{live_objects, prepare};
use rules::{ObjectRules, check_namespaces, project_violations};

pub use capstan_api::cluster::{IN_CLUSTER_NAME, IN_CLUSTER_SERVER};

/// Shared machinery for pipeline passes.
pub struct Pipeline {
    /// Client of the cluster Capstan runs in (Applications, Secrets, and the `in-cluster` destination).
    pub client: Client,
    /// The Git cache.
    pub repos: RepoCache,
    /// Charts from Helm repositories and OCI registries: indexes shared per repository for the
    /// refs TTL, archives cached by digest.
    pub charts: ChartCache,
    /// The render cache.
    pub renderer: Renderer,
    /// Destination clusters.
    pub clusters: Arc<Clusters>,
    /// AppProjects.
    pub projects: Projects,
    /// Policies.
    pub policies: Arc<Policies>,
    /// The operators' custom health rules (`capstan-cm`).
    pub health: Arc<HealthConfig>,
    /// Namespace holding repository Secrets.
    pub namespace: String,
    /// Where the Git caches live (no Application may read from there directly).
    pub cache_dir: PathBuf,
    /// Clients of secret stores (see [`secrets`]).
    secret_stores: secrets::StoreClients,
}

/// The result of one pass.
pub struct AppState {
    /// The resolved revision.
    pub revision: Resolved,
    /// Desired vs live.
    pub comparison: Comparison,
    /// Per-object status for `status.resources`.
    pub resources: Vec<ResourceStatus>,
    /// Aggregated health.
    pub health: HealthStatus,
    /// Custom health rules that cannot be used although objects of the Application are of their kind
    /// (the objects are Unknown meanwhile), each naming the rule's key and the error.
    pub health_rule_errors: Vec<String>,
    /// Desired objects the Application's project does not permit, each message naming the object
    /// and the rule; a sync is refused while there is any.
    pub project_violations: Vec<String>,
    /// Tracked objects a pruning sync would delete although the project does not permit their kind.
    pub prune_violations: Vec<String>,
    /// Why creating the destination namespace (`CreateNamespace=true`, in the spec or in a sync
    /// request) is not permitted, if it is not.
    pub create_namespace_violation: Option<String>,
    /// The destination the comparison was made against; a sync of this state goes there.
    pub destination: Arc<Destination>,
    /// The ServiceAccount a sync of this state acts as there (the project's
    /// `destinationServiceAccounts`); `None`: Capstan's own account.
    pub sync_account: Option<SyncAccount>,
}

impl AppState {
    /// The client a sync of this state writes with: the destination's, acting as
    /// [`AppState::sync_account`] when the project names one.
    pub fn sync_client(&self) -> Result<Client, capstan_kube::impersonate::ImpersonationError> {
        match &self.sync_account {
            Some(account) => capstan_kube::impersonating(&self.destination.client, &account.username()),
            None => Ok(self.destination.client.clone()),
        }
    }
}

impl Pipeline {
    /// A pipeline with its caches under `cache_dir`. One answer from a remote is shared for
    /// `refs_ttl` by every Application of the repository that polls meanwhile (forced resolutions —
    /// refreshes, operations — always ask the remote).
    pub fn new(
        client: Client,
        cache_dir: PathBuf,
        namespace: &str,
        render_timeout: Duration,
        refs_ttl: Duration,
    ) -> Arc<Self> {
        Self::with_local_repositories(client, cache_dir, namespace, render_timeout, refs_ttl, false)
    }

    /// [`Pipeline::new`], with `file://` repository URLs and local paths allowed or not (the
    /// operator's `--allow-local-repositories`).
    pub fn with_local_repositories(
        client: Client,
        cache_dir: PathBuf,
        namespace: &str,
        render_timeout: Duration,
        refs_ttl: Duration,
        allow_local: bool,
    ) -> Arc<Self> {
        let guard = cache_dir.clone();
        let mut pipeline = Self::build(client, cache_dir, guard, namespace, render_timeout, refs_ttl);
        pipeline.repos = pipeline.repos.with_local_repositories(allow_local);
        Arc::new(pipeline)
    }

    /// Like [`Pipeline::new`], refusing repositories anywhere under `guard` (a directory holding
    /// `cache_dir` and other Git caches, e.g. the controller's when a server runs beside it).
    pub fn guarding(
        client: Client,
        cache_dir: PathBuf,
        guard: PathBuf,
        namespace: &str,
        render_timeout: Duration,
        refs_ttl: Duration,
    ) -> Arc<Self> {
        Arc::new(Self::build(
            client,
            cache_dir,
            guard,
            namespace,
            render_timeout,
            refs_ttl,
        ))
    }

    fn build(
        client: Client,
        cache_dir: PathBuf,
        guard: PathBuf,
        namespace: &str,
        render_timeout: Duration,
        refs_ttl: Duration,
    ) -> Self {
        Self {
            charts: ChartCache::new(cache_dir.join("charts"), Duration::from_secs(120), refs_ttl),
            repos: RepoCache::new(cache_dir, Duration::from_secs(120), refs_ttl),
            renderer: Renderer::new(render_timeout),
            cache_dir: guard,
            clusters: Clusters::new(client.clone(), namespace),
            projects: Projects::new(client.clone(), namespace),
            policies: Arc::new(Policies::new(client.clone(), namespace)),
            health: Arc::new(HealthConfig::new(client.clone(), namespace)),
            client,
            namespace: namespace.to_string(),
            secret_stores: Default::default(),
        }
    }

    /// The destination of `app`.
    pub async fn destination(&self, app: &Application) -> Result<Arc<Destination>, PipelineError> {
        let d = &app.spec.destination;
        let (server, name) = (d.server.trim().trim_end_matches('/'), d.name.trim());
        let local = server == IN_CLUSTER_SERVER || (server.is_empty() && (name.is_empty() || name == IN_CLUSTER_NAME));
        if !local {
            // A registered cluster may just not have been read yet (right after a restart).
            self.clusters.wait_ready().await;
        }
        self.clusters.lookup(app)
    }

    /// Render `app` at `resolved` and compare it with its destination, reading the live state from
    /// the controller's watch cache where it has one.
    pub async fn compare(
        &self,
        app: &Application,
        project: &Project,
        resolved: Resolved,
    ) -> Result<AppState, PipelineError> {
        self.compare_with(app, project, resolved, true).await
    }

    /// [`Pipeline::compare`] reading the live state from the API server: for an operation's own
    /// comparisons, which must see what it has just applied.
    pub async fn compare_fresh(
        &self,
        app: &Application,
        project: &Project,
        resolved: Resolved,
    ) -> Result<AppState, PipelineError> {
        self.compare_with(app, project, resolved, false).await
    }

    /// The project of `app`, read once per pass and handed to each step of it.
    pub async fn project(&self, app: &Application) -> Result<Project, PipelineError> {
        self.projects.get(&app.spec.project).await
    }

    /// The state after a sync of `before`: the objects the sync `observed` (the API server's
    /// answers to its applies and reads; `None`: deleted) replace their live state in `before`, and
    /// the comparison is made again against the same desired objects. A large sync is not followed
    /// by reading all its objects again; changes made by others meanwhile arrive through the watches.
    pub async fn after_sync(
        &self,
        app: &Application,
        project: &Project,
        before: &AppState,
        observed: HashMap<ObjectKey, Option<Value>>,
    ) -> Result<AppState, PipelineError> {
        let dest = before.destination.clone();
        let (project, rules) = (&project.name, &project.spec);
        let tracking = Tracking::new(&app.namespace().unwrap_or_default(), &app.name_any());
        let mut desired = Vec::new();
        let mut live = Vec::new();
        for r in &before.comparison.resources {
            if let Some(object) = &r.desired {
                desired.push(Desired {
                    object: object.clone(),
                    info: r.info.clone(),
                });
            }
            let now = match observed.get(&r.key) {
                Some(seen) => seen.as_ref(),
                None => r.live.as_ref(),
            };
            if let Some(obj) = now {
                live.push((obj.clone(), r.info.clone()));
            }
        }
        conclude(
            app,
            dest,
            (project, rules),
            before.revision.clone(),
            (desired, live),
            &tracking,
            &self.health.current(),
        )
        .await
    }

    async fn compare_with(
        &self,
        app: &Application,
        project_of_app: &Project,
        resolved: Resolved,
        cached: bool,
    ) -> Result<AppState, PipelineError> {
        let dest = self.destination(app).await?;
        let (client, discovery) = (&dest.client, &dest.discovery);
        let (project, rules) = (&project_of_app.name, &project_of_app.spec);
        let namespace = app.spec.destination.namespace.clone();
        capstan_project::check_destination(project, rules, &dest.server, &dest.name, &namespace)?;
        let sources = app.spec.sources();
        let trees = self.trees(app, sources, &resolved).await?;
        let kube_version = discovery.server_version().await;
        if kube_version.is_none() {
            // Reachability is checked here so an unreachable destination is reported as such.
            client
                .apiserver_version()
                .await
                .map_err(|source| PipelineError::NoAnswer {
                    destination: dest.describe(),
                    source,
                })?;
        }
        // Helm charts may ask which APIs the destination serves (`.Capabilities.APIVersions`).
        let helm = sources.iter().zip(&trees).any(|(source, tree)| {
            source.is_rendered() && Renderer::tool_for(tree, source) == Some(capstan_render::Tool::Helm)
        });
        let api_versions = if helm {
            match discovery.api_versions().await {
                Ok(list) => list.as_ref().clone(),
                Err(source) => {
                    return Err(PipelineError::ApiVersions {
                        destination: dest.describe(),
                        source,
                    });
                }
            }
        } else {
            Vec::new()
        };
        let refs: Vec<RefSource> = sources
            .iter()
            .zip(&trees)
            .zip(&resolved.sources)
            .filter(|((source, _), _)| !source.ref_name.is_empty())
            .map(|((source, tree), revision)| RefSource {
                name: &source.ref_name,
                root: tree,
                revision: revision.id(),
            })
            .collect();
        let decryption = self.decryption(app, project, rules).await?;
        let mut objects = Vec::new();
        for (i, ((source, tree), revision)) in sources.iter().zip(&trees).zip(&resolved.sources).enumerate() {
            if !source.is_rendered() {
                continue;
            }
            let render_error = |e| {
                let which = if app.spec.is_multi_source() {
                    format!("{} ({}) ", source_field(app, i), source.repo_url)
                } else {
                    String::new()
                };
                PipelineError::Render {
                    which,
                    path: display_source(source),
                    revision: short(revision.id()),
                    source: Box::new(e),
                }
            };
            let declared = capstan_render::remote_dependencies(tree, source).map_err(render_error)?;
            let fetched = self.dependencies(app, project_of_app, i, declared).await?;
            let dependencies: Vec<ChartDependency> = fetched
                .iter()
                .map(|(declared, dir, identity)| ChartDependency {
                    name: &declared.name,
                    repository: &declared.repository,
                    version: &declared.version,
                    dir,
                    revision: identity,
                })
                .collect();
            let request = RenderRequest {
                repo_root: tree,
                source,
                app_name: &app.name_any(),
                namespace: &namespace,
                kube_version: kube_version.clone(),
                api_versions: api_versions.clone(),
                refs: &refs,
                allow_empty: app.spec.allows_empty(),
                dependencies: &dependencies,
                decryption: decryption.as_ref(),
            };
            let rendered = self
                .renderer
                .render(&request, &revision.cache_key())
                .await
                .map_err(render_error)?;
            objects.extend(rendered.objects);
        }

        secrets::resolve(self, app, project, rules, &mut objects).await?;
        let tracking = Tracking::new(&app.namespace().unwrap_or_default(), &app.name_any());
        let desired = prepare(discovery, objects, &namespace, &tracking).await?;
        check_namespaces(&dest, &desired)?;
        // Objects the project denies are never read from the cluster: their live state (an existing
        // kube-system ConfigMap named in a team's repository, say) must not reach the status, the
        // tree or a diff. The sync is refused for them anyway.
        let rules_for = ObjectRules::new(project, rules, &dest, app);
        let denied: HashSet<ObjectKey> = desired
            .iter()
            .filter(|d| rules_for.desired_violation(d).is_some())
            .filter_map(|d| ObjectKey::of(&d.object).ok())
            .collect();
        let previous = app.status.as_ref().map(|s| s.resources.clone()).unwrap_or_default();
        let cache = cached.then_some(&dest.watches);
        let live = live_objects(client, discovery, &desired, &previous, &tracking, cache, &denied).await?;
        conclude(
            app,
            dest.clone(),
            (project, rules),
            resolved,
            (desired, live),
            &tracking,
            &self.health.current(),
        )
        .await
    }
}

/// Compare `desired` with `live` on `dest` and sum up the state of `app` at `revision`.
async fn conclude(
    app: &Application,
    dest: Arc<Destination>,
    (project, rules): (&str, &AppProjectSpec),
    revision: Resolved,
    (desired, live): (Vec<Desired>, Vec<(Value, KindInfo)>),
    tracking: &Tracking,
    health_rules: &HealthRules,
) -> Result<AppState, PipelineError> {
    let comparison =
        capstan_compare::compare(&dest.client, desired, live, tracking, &app.spec.ignore_differences).await?;
    let itself = ObjectKey {
        group: capstan_api::GROUP.into(),
        kind: "Application".into(),
        namespace: app.namespace().unwrap_or_default(),
        name: app.name_any(),
    };
    let uid = app.metadata.uid.clone().unwrap_or_default();
    let (resources, health, health_rule_errors) = summarize(&comparison, health_rules, (&itself, &uid));
    let (mut project_violations, prune_violations, create_namespace_violation) =
        project_violations(project, rules, &dest, app, &comparison);
    let app_namespace = app.namespace().unwrap_or_default();
    let destination_namespace = &app.spec.destination.namespace;
    let sync_account =
        match capstan_project::sync_account(project, rules, &dest.server, destination_namespace, &app_namespace) {
            Ok(account) => account,
            Err(violation) => {
                project_violations.push(violation.to_string());
                None
            }
        };
    Ok(AppState {
        revision,
        comparison,
        resources,
        health,
        health_rule_errors,
        project_violations,
        prune_violations,
        create_namespace_violation,
        destination: dest,
        sync_account,
    })
}

/// Whether the repository URL `url` is a local repository (`file://…` or an absolute path) inside
/// `dir` — Capstan's own cache, which may hold other Applications' repositories.
pub(crate) fn points_into(url: &str, dir: &std::path::Path) -> bool {
    // `file://localhost/p` is `/p` too (`RepoUrl::parse` refuses any other host).
    let local = url
        .strip_prefix("file://localhost")
        .filter(|p| p.starts_with('/'))
        .or_else(|| url.strip_prefix("file://"))
        .or(if url.starts_with('/') { Some(url) } else { None });
    local.is_some_and(|p| is_within(std::path::Path::new(p), dir))
}

/// Whether `path` lies inside `dir`, comparing canonical paths (so `..` and symlinks cannot hide it),
/// or lexically normalised ones for paths that do not exist.
pub fn is_within(path: &std::path::Path, dir: &std::path::Path) -> bool {
    fn normal(p: &std::path::Path) -> PathBuf {
        std::fs::canonicalize(p).unwrap_or_else(|_| {
            let mut out = PathBuf::new();
            for c in p.components() {
                match c {
                    std::path::Component::ParentDir => {
                        out.pop();
                    }
                    std::path::Component::CurDir => {}
                    other => out.push(other),
                }
            }
            out
        })
    }
    normal(path).starts_with(normal(dir))
}

/// The source a render error names: its chart, or its path.
fn display_source(source: &capstan_api::application::ApplicationSource) -> String {
    if source.is_chart() {
        format!("chart {:?}", source.chart)
    } else {
        display_path(&source.path)
    }
}

fn display_path(path: &str) -> String {
    if path.is_empty() {
        "the repository root".into()
    } else {
        format!("path {path:?}")
    }
}

/// `status.resources`, the aggregated health of a comparison, and the custom health rules that cannot
/// be used for its objects (see [`AppState::health_rule_errors`]).
pub fn summarize(
    comparison: &Comparison,
    rules: &HealthRules,
    itself: (&ObjectKey, &str),
) -> (Vec<ResourceStatus>, HealthStatus, Vec<String>) {
    let (itself, uid) = itself;
    let is_itself =
        |live: &Value| !uid.is_empty() && live.pointer("/metadata/uid").and_then(Value::as_str) == Some(uid);
    let mut codes = Vec::new();
    let mut rule_errors: Vec<String> = Vec::new();
    let mut worst_message = String::new();
    let mut worst = HealthCode::Healthy;
    let resources = comparison
        .resources
        .iter()
        .filter(|r| !r.hook)
        .map(|r| {
            let health = match (&r.live, &r.error) {
                // An Application that manages itself (a bootstrapped hub's `capstan`): its own
                // object (same key and uid, so on this cluster) is counted Healthy, as its health
                // cannot be made of itself.
                (Some(live), None) if r.key == *itself && is_itself(live) => capstan_health::Health {
                    code: HealthCode::Healthy,
                    message: "this Application itself".into(),
                },
                (_, Some(error)) => capstan_health::Health {
                    code: HealthCode::Degraded,
                    message: format!("refused by the API server: {error}"),
                },
                (Some(live), None) => {
                    if let Some(err) = rules.broken_rule_for(live)
                        && !rule_errors.contains(&err.to_string())
                    {
                        rule_errors.push(err.to_string());
                    }
                    let ctx = capstan_health::Context::for_kind(&r.info.resource.group, r.info.status_subresource);
                    rules.assess(live, &ctx)
                }
                // "Missing" says it all (and a message per missing object would make a large
                // Application's first status, and every write of it until the first sync, larger).
                (None, None) => capstan_health::Health {
                    code: HealthCode::Missing,
                    message: String::new(),
                },
            };
            if !r.requires_pruning {
                codes.push(health.code);
                if capstan_health::worst([worst, health.code]) != worst {
                    worst = health.code;
                    worst_message = if health.code == HealthCode::Missing && health.message.is_empty() {
                        format!("{} {}: not found in the cluster", r.key.kind, r.key.name)
                    } else if health.message.is_empty() {
                        format!("{} {}", r.key.kind, r.key.name)
                    } else {
                        format!("{} {}: {}", r.key.kind, r.key.name, health.message)
                    };
                }
            }
            ResourceStatus {
                group: r.key.group.clone(),
                version: r.info.resource.version.clone(),
                kind: r.key.kind.clone(),
                namespace: r.key.namespace.clone(),
                name: r.key.name.clone(),
                status: r.sync,
                health: Some(HealthStatus {
                    status: health.code,
                    message: health.message,
                }),
                sync_wave: (r.wave != 0).then_some(r.wave),
                hook: false,
                requires_pruning: r.requires_pruning,
            }
        })
        .collect();
    let code = capstan_health::worst(codes);
    let message = if code == HealthCode::Healthy {
        String::new()
    } else {
        worst_message
    };
    (resources, HealthStatus { status: code, message }, rule_errors)
}

#[cfg(test)]
mod tests {
    use super::points_into;

    #[test]
    fn every_spelling_of_a_local_path_into_the_cache_is_seen() {
        let cache = tempfile::tempdir().expect("a directory");
        let inside = cache.path().join("repos/team-b");
        let d = inside.display();
        for url in [
            format!("file://{d}"),
            format!("file://localhost{d}"),
            format!("{d}"),
            format!(
                "file://{}/../{}/repos/team-b",
                cache.path().display(),
                cache
                    .path()
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            ),
        ] {
            assert!(points_into(&url, cache.path()), "{url}");
        }
        assert!(!points_into("file:///srv/git/r", cache.path()));
        assert!(!points_into("https://git.example/r", cache.path()));
    }
}

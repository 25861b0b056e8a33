//! One pass of the pipeline for one Application: resolve the revision, render it, prepare the objects
//! for the destination, read the live state and compare. Used by the controller and by
//! `capstan app diff`; it changes nothing in any cluster.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use capstan_api::Application;
use capstan_api::application::{HealthStatus, ResourceStatus};
use capstan_api::labels::TRACKING_LABEL;
use capstan_compare::diff::Desired;
use capstan_compare::normalize::{self, Tracking};
use capstan_compare::{Comparison, Discovery, KindInfo, ObjectKey, describe_kube_error};
use capstan_health::HealthCode;
use capstan_render::{RenderRequest, Renderer};
use capstan_source::{Credentials, RepoCache, Resolved};
use futures::{StreamExt, stream};
use kube::api::{Api, DynamicObject, ListParams};
use kube::{Client, ResourceExt};
use serde_json::Value;

use crate::clusters::{Clusters, Destination};
use crate::credentials;
use crate::projects::Projects;
use capstan_api::project::AppProjectSpec;

/// From this many untracked desired objects of one kind in one namespace on, they are looked up with
/// one LIST instead of one GET each.
const LIST_THRESHOLD: usize = 8;

pub use capstan_api::cluster::{IN_CLUSTER_NAME, IN_CLUSTER_SERVER};

/// Why a pass failed; each maps to an Application condition type.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// Repository, revision or rendering problem (`ComparisonError`).
    #[error("{0}")]
    Comparison(String),
    /// The Application's spec is wrong (`InvalidSpecError`).
    #[error("{0}")]
    InvalidSpec(String),
    /// The destination cluster cannot be reached (`ComparisonError`, health Unknown).
    #[error("{0}")]
    Destination(String),
}

impl PipelineError {
    /// The condition type this error is reported as.
    pub fn condition_type(&self) -> &'static str {
        match self {
            PipelineError::Comparison(_) | PipelineError::Destination(_) => "ComparisonError",
            PipelineError::InvalidSpec(_) => "InvalidSpecError",
        }
    }
}

/// Shared machinery for pipeline passes.
pub struct Pipeline {
    /// Client of the cluster Capstan runs in (Applications, Secrets, and the `in-cluster` destination).
    pub client: Client,
    /// The Git cache.
    pub repos: RepoCache,
    /// The render cache.
    pub renderer: Renderer,
    /// Destination clusters.
    pub clusters: Arc<Clusters>,
    /// AppProjects.
    pub projects: Projects,
    /// Namespace holding repository Secrets.
    pub namespace: String,
    /// Where the Git caches live (no Application may read from there directly).
    pub cache_dir: PathBuf,
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
            repos: RepoCache::new(cache_dir, Duration::from_secs(120), refs_ttl),
            renderer: Renderer::new(render_timeout),
            cache_dir: guard,
            clusters: Clusters::new(client.clone(), namespace),
            projects: Projects::new(client.clone(), namespace),
            client,
            namespace: namespace.to_string(),
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

    /// Resolve `revision` (default: the Application's targetRevision).
    pub async fn resolve(
        &self,
        app: &Application,
        revision: Option<&str>,
        force: bool,
    ) -> Result<Resolved, PipelineError> {
        let source = &app.spec.source;
        if source.repo_url.trim().is_empty() {
            return Err(PipelineError::InvalidSpec("spec.source.repoURL is empty".into()));
        }
        let url = source.repo_url.as_str();
        let local_path = url
            .strip_prefix("file://")
            .or(if url.starts_with('/') { Some(url) } else { None });
        if local_path.is_some_and(|p| is_within(std::path::Path::new(p), &self.cache_dir)) {
            return Err(PipelineError::InvalidSpec(format!(
                "repoURL {url:?} points into Capstan's own cache, which may hold other Applications' repositories"
            )));
        }
        let (project, rules) = self.projects.get(&app.spec.project).await?;
        capstan_project::check_source(&project, &rules, url).map_err(|v| PipelineError::InvalidSpec(v.to_string()))?;
        let creds = self.credentials(&source.repo_url).await;
        let revision = revision.unwrap_or(&source.target_revision);
        self.repos
            .resolve(&source.repo_url, revision, &creds, force)
            .await
            .map_err(|e| PipelineError::Comparison(e.to_string()))
    }

    async fn credentials(&self, url: &str) -> Credentials {
        credentials::for_repo(&self.client, &self.namespace, url)
            .await
            .unwrap_or_default()
    }

    /// Render `app` at `resolved` and compare it with its destination, reading the live state from
    /// the controller's watch cache where it has one.
    pub async fn compare(&self, app: &Application, resolved: Resolved) -> Result<AppState, PipelineError> {
        self.compare_with(app, resolved, true).await
    }

    /// [`Pipeline::compare`] reading the live state from the API server: for an operation's own
    /// comparisons, which must see what it has just applied.
    pub async fn compare_fresh(&self, app: &Application, resolved: Resolved) -> Result<AppState, PipelineError> {
        self.compare_with(app, resolved, false).await
    }

    /// The state after a sync of `before`: the objects the sync `observed` (the API server's
    /// answers to its applies and reads; `None`: deleted) replace their live state in `before`, and
    /// the comparison is made again against the same desired objects. A large sync is not followed
    /// by reading all its objects again; changes made by others meanwhile arrive through the watches.
    pub async fn after_sync(
        &self,
        app: &Application,
        before: &AppState,
        observed: HashMap<ObjectKey, Option<Value>>,
    ) -> Result<AppState, PipelineError> {
        let dest = before.destination.clone();
        let (project, rules) = self.projects.get(&app.spec.project).await?;
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
            (&project, &rules),
            before.revision.clone(),
            desired,
            live,
            &tracking,
        )
        .await
    }

    async fn compare_with(
        &self,
        app: &Application,
        resolved: Resolved,
        cached: bool,
    ) -> Result<AppState, PipelineError> {
        let dest = self.destination(app).await?;
        let (client, discovery) = (&dest.client, &dest.discovery);
        let (project, rules) = self.projects.get(&app.spec.project).await?;
        let namespace = app.spec.destination.namespace.clone();
        capstan_project::check_destination(&project, &rules, &dest.server, &dest.name, &namespace)
            .map_err(|v| PipelineError::InvalidSpec(v.to_string()))?;
        let source = &app.spec.source;
        let tree = self
            .repos
            .checkout(&source.repo_url, &resolved.sha)
            .await
            .map_err(|e| PipelineError::Comparison(e.to_string()))?;
        let kube_version = discovery.server_version().await;
        if kube_version.is_none() {
            // Reachability is checked here so an unreachable destination is reported as such.
            client.apiserver_version().await.map_err(|e| {
                PipelineError::Destination(format!(
                    "{} is unreachable: {}",
                    dest.describe(),
                    describe_kube_error(&e)
                ))
            })?;
        }
        // Helm charts may ask which APIs the destination serves (`.Capabilities.APIVersions`).
        let api_versions = if Renderer::tool_for(&tree, source) == Some(capstan_render::Tool::Helm) {
            match discovery.api_versions().await {
                Ok(list) => list.as_ref().clone(),
                Err(err) => return Err(PipelineError::Destination(format!("{}: {err}", dest.describe()))),
            }
        } else {
            Vec::new()
        };
        let request = RenderRequest {
            repo_root: &tree,
            source,
            app_name: &app.name_any(),
            namespace: &namespace,
            kube_version,
            api_versions,
        };
        let rendered = self.renderer.render(&request, &resolved.sha).await.map_err(|e| {
            PipelineError::Comparison(format!(
                "rendering {} at {}: {e}",
                display_path(&source.path),
                short(&resolved.sha)
            ))
        })?;

        let tracking = Tracking::new(&app.namespace().unwrap_or_default(), &app.name_any());
        let desired = prepare(discovery, rendered.objects, &namespace, &tracking).await?;
        check_namespaces(&dest, &desired)?;
        // Objects the project denies are never read from the cluster: their live state (an existing
        // kube-system ConfigMap named in a team's repository, say) must not reach the status, the
        // tree or a diff. The sync is refused for them anyway.
        let rules_for = ObjectRules::new(&project, &rules, &dest, app);
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
            (&project, &rules),
            resolved,
            desired,
            live,
            &tracking,
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
    desired: Vec<Desired>,
    live: Vec<(Value, KindInfo)>,
    tracking: &Tracking,
) -> Result<AppState, PipelineError> {
    let comparison = capstan_compare::compare(&dest.client, desired, live, tracking, &app.spec.ignore_differences)
        .await
        .map_err(|e| PipelineError::Comparison(e.to_string()))?;
    let (resources, health) = summarize(&comparison);
    let (project_violations, prune_violations, create_namespace_violation) =
        project_violations(project, rules, &dest, app, &comparison);
    Ok(AppState {
        revision,
        comparison,
        resources,
        health,
        project_violations,
        prune_violations,
        create_namespace_violation,
        destination: dest,
    })
}

/// Namespaces no Application may manage, create, adopt or prune, whatever its project allows: the
/// cluster's own and Capstan's (where its Applications, projects and credentials live).
const PROTECTED_NAMESPACES: [&str; 4] = ["kube-system", "kube-public", "kube-node-lease", "default"];

/// Why the Namespace `name` may not be managed by any Application, if it may not.
fn protected_namespace(name: &str, capstan_namespace: &str) -> Option<String> {
    (PROTECTED_NAMESPACES.contains(&name) || name == capstan_namespace).then(|| {
        format!(
            "Namespace/{name} is protected: no Application may create, adopt or delete the cluster's own \
             namespaces or Capstan's ({capstan_namespace})"
        )
    })
}

/// The project's rules for the objects of one Application.
struct ObjectRules<'a> {
    project: &'a str,
    rules: &'a AppProjectSpec,
    dest: &'a Destination,
    app_namespace: &'a str,
    capstan_namespace: String,
    /// The implicit `default` project: everything is permitted but rendered Applications naming
    /// another project.
    implicit_default: bool,
}

impl<'a> ObjectRules<'a> {
    fn new(project: &'a str, rules: &'a AppProjectSpec, dest: &'a Destination, app: &'a Application) -> Self {
        ObjectRules {
            project,
            rules,
            dest,
            app_namespace: app.spec.destination.namespace.as_str(),
            capstan_namespace: app.namespace().unwrap_or_else(|| capstan_api::NAMESPACE.to_string()),
            implicit_default: capstan_project::is_implicit_default(project, rules),
        }
    }

    /// Why a rendered object is not permitted, if it is not.
    fn desired_violation(&self, d: &Desired) -> Option<String> {
        let key = ObjectKey::of(&d.object).ok()?;
        self.check(&key.group, &key.kind, d.info.namespaced, &key.namespace, &key.name)
            .or_else(|| self.child_application_violation(&d.object))
    }

    /// Applications and ApplicationSets rendered by this one (app-of-apps) may only be in this
    /// Application's own project, and AppProjects are never rendered by an Application: otherwise a
    /// team could hand itself a more permissive project. The implicit `default` project, which
    /// permits everything anyway, may create Applications of any project (the usual bootstrap).
    fn child_application_violation(&self, object: &Value) -> Option<String> {
        let kind = object.get("kind").and_then(Value::as_str)?;
        let api_version = object.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let capstan_kind = api_version.starts_with("capstan.dev/") || api_version.starts_with("argoproj.io/");
        if !capstan_kind || self.implicit_default {
            return None;
        }
        let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("?");
        let pointer = match kind {
            "Application" => "/spec/project",
            "ApplicationSet" => "/spec/template/spec/project",
            "AppProject" => {
                return Some(format!(
                    "project \"{}\": AppProject/{name}: projects are created by operators, never rendered by an \
                     Application",
                    self.project
                ));
            }
            _ => return None,
        };
        let child = object
            .pointer(pointer)
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
            .unwrap_or(capstan_api::project::DEFAULT_PROJECT);
        (child != self.project).then(|| {
            format!(
                "project \"{}\": {kind}/{name} names project \"{child}\"; an Application may only create \
                 Applications of its own project",
                self.project
            )
        })
    }

    /// Why an object of this group, kind, namespace and name is not permitted, if it is not.
    fn check(&self, group: &str, kind: &str, namespaced: bool, namespace: &str, name: &str) -> Option<String> {
        if group.is_empty()
            && kind == "Namespace"
            && !namespaced
            && let Some(message) = protected_namespace(name, &self.capstan_namespace)
        {
            return Some(message);
        }
        self.check_rules(group, kind, namespaced, namespace, name)
    }

    /// [`ObjectRules::check`] without the protected namespaces: for `CreateNamespace=true`, which
    /// creates a missing namespace and never touches an existing one.
    fn check_rules(&self, group: &str, kind: &str, namespaced: bool, namespace: &str, name: &str) -> Option<String> {
        let (project, rules, dest, app_namespace) = (self.project, self.rules, self.dest, self.app_namespace);
        let object = format!("{kind}/{name}");
        if let Err(v) = capstan_project::check_resource(project, rules, group, kind, namespaced, &object) {
            return Some(v.to_string());
        }
        if !self.implicit_default {
            let subject = capstan_project::Subject {
                group,
                kind,
                namespaced,
                namespace: if namespace.is_empty() { app_namespace } else { namespace },
                object: &object,
            };
            if let Err(v) = capstan_project::check_capstan_grant(project, rules, &self.capstan_namespace, &subject) {
                return Some(v.to_string());
            }
        }
        // Objects that name their own namespace must stay within the project's destinations too.
        if namespaced && !namespace.is_empty() && namespace != app_namespace {
            return capstan_project::check_destination(project, rules, &dest.server, &dest.name, namespace)
                .err()
                .map(|v| format!("{object}: {v}"));
        }
        None
    }
}

/// What `rules` and the destination's registration do not permit: `(for any sync, for a sync that
/// prunes, for creating the destination namespace)`, one message each naming the object and the rule.
fn project_violations(
    project: &str,
    rules: &AppProjectSpec,
    dest: &Destination,
    app: &Application,
    comparison: &Comparison,
) -> (Vec<String>, Vec<String>, Option<String>) {
    let object_rules = ObjectRules::new(project, rules, dest, app);
    let app_namespace = object_rules.app_namespace;
    let check = |group: &str, kind: &str, namespaced: bool, namespace: &str, name: &str| {
        object_rules.check(group, kind, namespaced, namespace, name)
    };
    let mut always = Vec::new();
    let mut pruning = Vec::new();
    for r in comparison.resources.iter().filter(|r| r.owned_by_other.is_none()) {
        let k = &r.key;
        let found = check(&k.group, &k.kind, r.info.namespaced, &k.namespace, &k.name).or_else(|| {
            r.desired
                .as_ref()
                .and_then(|d| object_rules.child_application_violation(d))
        });
        match (found, r.desired.is_some()) {
            (Some(message), true) => always.push(message),
            (Some(message), false) if r.requires_pruning => pruning.push(format!("{message} (it would be pruned)")),
            _ => {}
        }
    }
    // Parsed as the sync parses it (any case, comma-separated lists).
    let create_namespace = app
        .spec
        .sync_policy
        .as_ref()
        .is_some_and(|p| capstan_sync::SyncOptions::parse(&p.sync_options).create_namespace);
    // Checked whether or not the spec asks for it: a sync request may ask too.
    let namespace_violation = if app_namespace.is_empty() {
        None
    } else if let Some(message) = object_rules.check_rules("", "Namespace", false, "", app_namespace) {
        Some(format!("{message} (CreateNamespace=true)"))
    } else if !dest.permits(None) {
        Some(format!(
            "Namespace/{app_namespace}: {} is registered for some namespaces only and may not create namespaces (CreateNamespace=true)",
            dest.describe()
        ))
    } else {
        None
    };
    if create_namespace && let Some(message) = &namespace_violation {
        always.push(message.clone());
    }
    (always, pruning, namespace_violation)
}

/// A cluster registered for some namespaces only may not receive objects outside them.
fn check_namespaces(dest: &Destination, desired: &[Desired]) -> Result<(), PipelineError> {
    let refused: Vec<String> = desired
        .iter()
        .filter_map(|d| {
            let ns = d.info.namespaced.then(|| namespace_of(&d.object));
            (!dest.permits(ns.as_deref())).then(|| {
                let name = d
                    .object
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("?");
                match ns {
                    Some(ns) => format!("{}/{name} in namespace {ns:?}", d.info.resource.kind),
                    None => format!("{}/{name} (cluster-scoped)", d.info.resource.kind),
                }
            })
        })
        .collect();
    if refused.is_empty() {
        return Ok(());
    }
    let allowed = dest
        .secret
        .as_ref()
        .map(|s| s.namespaces.join(", "))
        .unwrap_or_default();
    Err(PipelineError::InvalidSpec(format!(
        "{} is registered for namespaces [{allowed}] only; refusing {}",
        dest.describe(),
        refused.join(", ")
    )))
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

fn display_path(path: &str) -> String {
    if path.is_empty() {
        "the repository root".into()
    } else {
        format!("path {path:?}")
    }
}

/// The first 7 characters of a SHA.
pub fn short(sha: &str) -> &str {
    &sha[..sha.len().min(7)]
}

/// Resolve kinds and prepare rendered objects; unknown kinds are reported all at once.
async fn prepare(
    discovery: &Discovery,
    objects: Vec<Value>,
    namespace: &str,
    tracking: &Tracking,
) -> Result<Vec<Desired>, PipelineError> {
    let crds: Vec<&Value> = objects
        .iter()
        .filter(|o| o.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition"))
        .collect();
    let mut out = Vec::with_capacity(objects.len());
    let mut unknown = BTreeSet::new();
    let mut infos: HashMap<(String, String), Option<KindInfo>> = HashMap::new();
    for obj in &objects {
        let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("").to_string();
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
        let key = (api_version.clone(), kind.clone());
        if infos.contains_key(&key) {
            continue;
        }
        let info = match discovery.resolve(&api_version, &kind).await {
            Ok(Some(info)) => Some(info),
            Ok(None) => crds
                .iter()
                .find_map(|crd| Discovery::from_crd(crd, &api_version, &kind)),
            Err(e) => return Err(PipelineError::Destination(e.to_string())),
        };
        infos.insert(key, info);
    }
    for mut obj in objects {
        let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("").to_string();
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
        match infos.get(&(api_version.clone(), kind.clone())).cloned().flatten() {
            Some(info) => {
                normalize::prepare(&mut obj, &info, namespace, tracking);
                out.push(Desired { object: obj, info });
            }
            None => {
                let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("?");
                match capstan_compare::removed_apis::removal_hint(&api_version, &kind) {
                    Some(hint) => unknown.insert(format!("{kind} {name:?} ({api_version}: {hint})")),
                    None => unknown.insert(format!("{kind} {name:?} ({api_version})")),
                };
            }
        }
    }
    if !unknown.is_empty() {
        return Err(PipelineError::Comparison(format!(
            "the destination does not know these kinds: {}",
            unknown.into_iter().collect::<Vec<_>>().join(", ")
        )));
    }
    Ok(out)
}

/// Live objects: everything carrying this Application's tracking label, in every kind it renders or
/// managed before (from `cache` where it has the kind, else listed), plus the live state of desired
/// objects that are not tracked (yet).
async fn live_objects(
    client: &Client,
    discovery: &Discovery,
    desired: &[Desired],
    previous: &[ResourceStatus],
    tracking: &Tracking,
    cache: Option<&crate::watches::Watches>,
    denied: &HashSet<ObjectKey>,
) -> Result<Vec<(Value, KindInfo)>, PipelineError> {
    // Kinds and the namespaces they are used in (desired now, or managed before): listing per
    // namespace keeps each request proportional to the Application, not to the cluster.
    let mut kinds: HashMap<(String, String), (KindInfo, BTreeSet<String>)> = HashMap::new();
    for d in desired {
        let ns = namespace_of(&d.object);
        let entry = kinds
            .entry((d.info.resource.api_version.clone(), d.info.resource.kind.clone()))
            .or_insert_with(|| (d.info.clone(), BTreeSet::new()));
        entry.1.insert(ns);
    }
    for r in previous {
        let api_version = if r.group.is_empty() {
            r.version.clone()
        } else {
            format!("{}/{}", r.group, r.version)
        };
        if r.version.is_empty() {
            continue;
        }
        let key = (api_version.clone(), r.kind.clone());
        if !kinds.contains_key(&key) {
            match discovery.resolve(&api_version, &r.kind).await {
                Ok(Some(info)) => {
                    kinds.insert(key.clone(), (info, BTreeSet::new()));
                }
                _ => continue,
            }
        }
        if let Some(entry) = kinds.get_mut(&key) {
            entry.1.insert(r.namespace.clone());
        }
    }
    let selector = tracking.selector();
    let label = tracking.label_value();
    let mut live = Vec::new();
    let requests: Vec<(KindInfo, Option<String>)> = kinds
        .into_values()
        .flat_map(|(info, namespaces)| {
            if info.namespaced {
                namespaces
                    .into_iter()
                    .filter(|n| !n.is_empty())
                    .map(|n| (info.clone(), Some(n)))
                    .collect::<Vec<_>>()
            } else {
                vec![(info, None)]
            }
        })
        .collect();
    // Kinds the watch cache holds are read from it; the others are listed.
    let mut to_list = Vec::new();
    for (info, namespace) in requests {
        match cache.and_then(|c| c.cached(&info)) {
            Some(store) => live.extend(
                store
                    .state()
                    .iter()
                    .filter(|o| {
                        o.metadata.labels.as_ref().and_then(|l| l.get(TRACKING_LABEL)) == Some(&label)
                            && (namespace.is_none() || o.metadata.namespace == namespace)
                    })
                    .filter_map(|o| serde_json::to_value(with_type(o.as_ref().clone(), &info)).ok())
                    .map(|v| (v, info.clone())),
            ),
            None => to_list.push((info, namespace)),
        }
    }
    let lists: Vec<Result<Vec<(Value, KindInfo)>, PipelineError>> = stream::iter(to_list)
        .map(|(info, namespace)| {
            let selector = selector.clone();
            async move {
                let api: Api<DynamicObject> = match &namespace {
                    Some(ns) => Api::namespaced_with(client.clone(), ns, &info.resource),
                    None => Api::all_with(client.clone(), &info.resource),
                };
                match api.list(&ListParams::default().labels(&selector)).await {
                    Ok(list) => Ok(list
                        .items
                        .into_iter()
                        .filter_map(|o| serde_json::to_value(with_type(o, &info)).ok())
                        .map(|v| (v, info.clone()))
                        .collect()),
                    // A CRD not established yet: nothing of the kind exists.
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(Vec::new()),
                    Err(e) => Err(listing_failed(&info, &e)),
                }
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    for l in lists {
        live.extend(l?);
    }
    let found: std::collections::HashSet<ObjectKey> = live.iter().filter_map(|(v, _)| ObjectKey::of(v).ok()).collect();
    let missing: Vec<&Desired> = desired
        .iter()
        .filter(|d| ObjectKey::of(&d.object).is_ok_and(|k| !found.contains(&k) && !denied.contains(&k)))
        .filter(|d| d.object.pointer("/metadata/name").is_some())
        .collect();
    // Untracked objects that may already exist: one LIST per kind and namespace when many are
    // missing (a first sync), one GET each otherwise.
    let mut groups: HashMap<(String, String, String), Vec<&Desired>> = HashMap::new();
    for d in missing {
        let ns = namespace_of(&d.object);
        groups
            .entry((d.info.resource.api_version.clone(), d.info.resource.kind.clone(), ns))
            .or_default()
            .push(d);
    }
    let mut singles: Vec<&Desired> = Vec::new();
    for ((_, _, ns), group) in groups {
        if group.len() < LIST_THRESHOLD {
            singles.extend(group);
            continue;
        }
        let info = group[0].info.clone();
        let api: Api<DynamicObject> = if info.namespaced {
            Api::namespaced_with(client.clone(), &ns, &info.resource)
        } else {
            Api::all_with(client.clone(), &info.resource)
        };
        let wanted: std::collections::HashSet<&str> = group
            .iter()
            .filter_map(|d| d.object.pointer("/metadata/name").and_then(Value::as_str))
            .collect();
        match api.list(&ListParams::default()).await {
            Ok(list) => live.extend(
                list.items
                    .into_iter()
                    .filter(|o| o.metadata.name.as_deref().is_some_and(|n| wanted.contains(n)))
                    .filter_map(|o| serde_json::to_value(with_type(o, &info)).ok())
                    .map(|v| (v, info.clone())),
            ),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(listing_failed(&info, &e)),
        }
    }
    // Indices, not references, as stream items: closures over borrowed items are not `Send` for
    // every lifetime, which the controller's futures must be.
    let fetched: Vec<Result<Option<(Value, KindInfo)>, PipelineError>> = stream::iter(0..singles.len())
        .map(|i| {
            let d = singles[i];
            async move {
                let Ok(key) = ObjectKey::of(&d.object) else {
                    return Ok(None);
                };
                let api: Api<DynamicObject> = if d.info.namespaced {
                    Api::namespaced_with(client.clone(), &key.namespace, &d.info.resource)
                } else {
                    Api::all_with(client.clone(), &d.info.resource)
                };
                // Only "not found" means missing: any other failure must not look like a free name,
                // or another Application's object could be taken over.
                match api.get_opt(&key.name).await {
                    Ok(Some(obj)) => Ok(serde_json::to_value(with_type(obj, &d.info))
                        .ok()
                        .map(|v| (v, d.info.clone()))),
                    Ok(None) => Ok(None),
                    // Also a 404 for the kind itself (a CRD applied in this same sync).
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
                    Err(e) => Err(PipelineError::Destination(format!(
                        "reading {key}: {}",
                        describe_kube_error(&e)
                    ))),
                }
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let fetched: Vec<Option<(Value, KindInfo)>> = fetched.into_iter().collect::<Result<_, _>>()?;
    live.extend(fetched.into_iter().flatten());
    Ok(live)
}

/// The namespace a prepared object names (empty for cluster-scoped objects).
fn namespace_of(obj: &Value) -> String {
    obj.pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

fn listing_failed(info: &KindInfo, err: &kube::Error) -> PipelineError {
    PipelineError::Destination(format!("listing {}: {}", info.resource.kind, describe_kube_error(err)))
}

/// List items come without apiVersion/kind; put them back.
fn with_type(mut obj: DynamicObject, info: &KindInfo) -> DynamicObject {
    obj.types = Some(kube::core::TypeMeta {
        api_version: info.resource.api_version.clone(),
        kind: info.resource.kind.clone(),
    });
    obj
}

/// `status.resources` and the aggregated health of a comparison.
pub fn summarize(comparison: &Comparison) -> (Vec<ResourceStatus>, HealthStatus) {
    let mut codes = Vec::new();
    let mut worst_message = String::new();
    let mut worst = HealthCode::Healthy;
    let resources = comparison
        .resources
        .iter()
        .filter(|r| !r.hook)
        .map(|r| {
            let health = match (&r.live, &r.error) {
                (_, Some(error)) => capstan_health::Health {
                    code: HealthCode::Degraded,
                    message: format!("refused by the API server: {error}"),
                },
                (Some(live), None) => capstan_health::assess(live),
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
                status: r.sync.as_str().to_string(),
                health: Some(HealthStatus {
                    status: health.code.as_str().into(),
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
    (
        resources,
        HealthStatus {
            status: code.as_str().into(),
            message,
        },
    )
}

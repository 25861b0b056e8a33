//! [`Renderer`]: one render from request to objects — the tool a path calls for, the cache key
//! (revision, path, every parameter, the tool's identity), the cached or shared result, and otherwise
//! the tool's run (at most [`MAX_CONCURRENT_RENDERS`] at once), Helm hooks mapped and duplicate
//! objects refused.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use capstan_api::application::ApplicationSource;
use serde::Serialize;
use serde_json::Value;

use crate::cache::{self, Cache};
use crate::error::RenderError;
use crate::kind::Tool;
use crate::paths::{normalise_app_path, resolve_in_repo};
use crate::rendered::Rendered;
use crate::request::RenderRequest;
use crate::task::blocking;
use crate::{decrypt, directory, empty, helm, hooks, jsonnet, kustomize, tools};

/// The default timeout of one tool invocation.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// The default number of rendered results kept.
pub const DEFAULT_CACHE_CAPACITY: usize = 256;

/// Renders sources, with a timeout per tool invocation and a bounded cache of results.
pub struct Renderer {
    timeout: Duration,
    cache: cache::Cache,
    /// Renders that run a tool or read a repository at once: a burst of commits (or a hostile
    /// repository made to be slow) queues instead of starting a process per Application.
    permits: std::sync::Arc<tokio::sync::Semaphore>,
    activity: Activity,
}

/// Counts of renders that ran a tool or read a repository (cache hits do not count).
#[derive(Debug, Default)]
struct Activity {
    runs: std::sync::atomic::AtomicU64,
    running: std::sync::atomic::AtomicUsize,
    peak: std::sync::atomic::AtomicUsize,
}

/// A render in progress, counted in [`Activity`] until dropped.
struct Running<'a>(&'a Activity);

impl<'a> Running<'a> {
    fn start(activity: &'a Activity) -> Self {
        use std::sync::atomic::Ordering::Relaxed;
        activity.runs.fetch_add(1, Relaxed);
        let now = activity.running.fetch_add(1, Relaxed) + 1;
        activity.peak.fetch_max(now, Relaxed);
        Running(activity)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// What a [`Renderer`] has done so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenderActivity {
    /// Renders that ran (cache misses that did the work).
    pub runs: u64,
    /// The most renders that ran at once.
    pub peak_concurrent: usize,
}

/// Renders running at once (cache hits do not count).
pub const MAX_CONCURRENT_RENDERS: usize = 8;

impl Default for Renderer {
    fn default() -> Self {
        Renderer::new(DEFAULT_TIMEOUT)
    }
}

impl std::fmt::Debug for Renderer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Renderer")
            .field("timeout", &self.timeout)
            .field("cached", &self.cache.len())
            .finish()
    }
}

/// Everything a rendered result depends on, serialised as the cache key.
#[derive(Serialize)]
struct CacheKey<'a> {
    revision: &'a str,
    repo_url: &'a str,
    path: &'a str,
    directory: &'a Option<capstan_api::application::ApplicationSourceDirectory>,
    helm: &'a Option<capstan_api::application::ApplicationSourceHelm>,
    kustomize: &'a Option<capstan_api::application::ApplicationSourceKustomize>,
    app_name: &'a str,
    namespace: &'a str,
    kube_version: &'a Option<String>,
    api_versions: &'a [String],
    tool: Tool,
    tool_identity: &'a str,
    /// `(ref, revision)` of the sources whose files `$ref/…` value files read.
    refs: Vec<(&'a str, &'a str)>,
    /// `(name, repository, version, revision)` of the repository charts vendored for the render.
    dependencies: Vec<(&'a str, &'a str, &'a str, &'a str)>,
    /// The decryption key set's identifier, if files are decrypted.
    decryption: Option<&'a str>,
}

impl Renderer {
    /// A renderer whose tool invocations are killed after `timeout`, caching up to
    /// [`DEFAULT_CACHE_CAPACITY`] results.
    pub fn new(timeout: Duration) -> Self {
        Renderer {
            timeout,
            cache: Cache::new(DEFAULT_CACHE_CAPACITY as u64),
            permits: std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_RENDERS)),
            activity: Activity::default(),
        }
    }

    /// The timeout of one tool invocation.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Render `req`. `cache_key_revision` is the resolved commit SHA of the checkout: results are cached
    /// by it, the path, every render parameter (including namespace, application name and cluster
    /// capabilities) and the tool and its version, and returned as clones.
    pub async fn render(&self, req: &RenderRequest<'_>, cache_key_revision: &str) -> Result<Rendered, RenderError> {
        let rendered = self.render_any(req, cache_key_revision).await?;
        if rendered.objects.is_empty() && !req.allow_empty {
            return Err(empty::empty_render(req, rendered.tool).await);
        }
        Ok(rendered)
    }

    /// [`Renderer::render`], an empty result included.
    async fn render_any(&self, req: &RenderRequest<'_>, cache_key_revision: &str) -> Result<Rendered, RenderError> {
        let root = std::fs::canonicalize(req.repo_root).map_err(|e| {
            RenderError::io(
                format!("cannot open repository checkout {}", req.repo_root.display()),
                e,
            )
        })?;
        let source = req.source;
        let app_rel = normalise_app_path(&source.path);
        let app_dir = match resolve_in_repo(&root, &root, &app_rel) {
            Ok(dir) => dir,
            Err(RenderError::NotFound { .. }) => {
                return Err(RenderError::MissingAppPath {
                    path: app_rel,
                    revision: cache_key_revision.to_string(),
                });
            }
            Err(e) => return Err(e),
        };
        if !app_dir.is_dir() {
            return Err(RenderError::AppPathNotDirectory {
                path: app_rel,
                revision: cache_key_revision.to_string(),
            });
        }
        let tool = Tool::detect(&app_dir);
        let (binary, tool_identity) = match tool {
            Tool::Directory => (None, String::new()),
            Tool::Helm => {
                let binary = tools::find("helm")?;
                let id = tools::identity(&binary, &["version", "--short"], self.timeout).await?;
                (Some(binary), id)
            }
            Tool::Kustomize => {
                let binary = tools::find("kustomize")?;
                let id = tools::identity(&binary, &["version"], self.timeout).await?;
                (Some(binary), id)
            }
        };
        let key = CacheKey {
            revision: cache_key_revision,
            repo_url: &source.repo_url,
            path: &app_rel,
            directory: &source.directory,
            helm: &source.helm,
            kustomize: &source.kustomize,
            app_name: req.app_name,
            namespace: req.namespace,
            kube_version: &req.kube_version,
            // Only Helm reads them: other renders stay cached when the cluster's APIs change.
            api_versions: if tool == Tool::Helm { &req.api_versions } else { &[] },
            tool,
            tool_identity: &tool_identity,
            refs: req.refs.iter().map(|r| (r.name, r.revision)).collect(),
            dependencies: req
                .dependencies
                .iter()
                .map(|d| (d.name, d.repository, d.version, d.revision))
                .collect(),
            decryption: req.decryption.map(|d| d.id.as_str()),
        };
        let key = serde_json::to_string(&key).map_err(|e| RenderError::Task(format!("cache key: {e}")))?;
        // Callers asking for one result at once (an Application's reconcile and a burst of `/diff`
        // requests) wait for one render and share its result or its error (see [`cache`]).
        let scope = cache_scope(&source.repo_url, &app_rel, req.app_name, req.namespace);
        let render = self.run(req, &root, &app_rel, tool, binary, cache_key_revision);
        let (hit, result) = self.cache.get_or_render(&key, &scope, render).await;
        capstan_metrics::global().render_cache_lookup(hit);
        if hit {
            tracing::debug!(path = %app_rel, revision = cache_key_revision, %tool, "render cache hit");
        }
        result
    }

    /// Run the tool (or read the directory) for a result that is not cached.
    async fn run(
        &self,
        req: &RenderRequest<'_>,
        root: &Path,
        app_rel: &str,
        tool: Tool,
        binary: Option<std::path::PathBuf>,
        cache_key_revision: &str,
    ) -> Result<Rendered, RenderError> {
        let source = req.source;
        let (root, app_rel) = (root.to_path_buf(), app_rel.to_string());
        // The semaphore is never closed, so acquiring only waits.
        let _permit = self.permits.acquire().await.ok();
        let _running = Running::start(&self.activity);
        let started = std::time::Instant::now();
        let mut refs: Vec<(String, std::path::PathBuf)> = req
            .refs
            .iter()
            .map(|r| (r.name.to_string(), r.root.to_path_buf()))
            .collect();
        // SOPS files are decrypted in a scratch copy that lives until the render ends.
        let decrypted = match req.decryption {
            Some(decryption) => {
                let (root2, refs2, identities) = (root.clone(), refs.clone(), decryption.identities.clone());
                let copies = blocking(move || decrypt::decrypt_roots(&root2, &refs2, &identities)).await?;
                refs = copies.refs.clone();
                Some(copies)
            }
            None => None,
        };
        let root = decrypted.as_ref().map_or(root, |c| c.root.clone());
        let mut objects = match (tool, binary) {
            (Tool::Helm, Some(binary)) => {
                let options = source.helm.clone().unwrap_or_default();
                let release = if options.release_name.is_empty() {
                    req.app_name.to_string()
                } else {
                    options.release_name.clone()
                };
                helm::render(helm::HelmJob {
                    binary,
                    root: root.clone(),
                    app_rel: app_rel.clone(),
                    options,
                    release,
                    namespace: req.namespace.to_string(),
                    kube_version: req.kube_version.clone(),
                    api_versions: req.api_versions.clone(),
                    timeout: self.timeout,
                    refs,
                    dependencies: req
                        .dependencies
                        .iter()
                        .map(|d| (d.name.to_string(), d.dir.to_path_buf()))
                        .collect(),
                })
                .await?
            }
            (Tool::Kustomize, Some(binary)) => {
                let job = kustomize::KustomizeJob {
                    binary,
                    helm: tools::find("helm").ok(),
                    options: source.kustomize.clone(),
                    charts: req
                        .dependencies
                        .iter()
                        .map(|d| {
                            let key = (d.name.to_string(), d.repository.to_string(), d.version.to_string());
                            (key, d.dir.to_path_buf())
                        })
                        .collect(),
                    timeout: self.timeout,
                };
                kustomize::render(job, &root, &app_rel).await?
            }
            _ => {
                let (root2, app_rel2, options) = (root.clone(), app_rel.clone(), source.directory.clone());
                let plan = blocking(move || directory::plan(&root2, &app_rel2, options.as_ref())).await?;
                self.directory_objects(&root, &app_rel, plan, source).await?
            }
        };
        objects.retain_mut(hooks::map_helm_hooks);
        check_duplicates(&objects, req.namespace)?;
        capstan_metrics::global().render(tool.as_str(), started.elapsed());
        tracing::debug!(
            path = %app_rel,
            revision = cache_key_revision,
            %tool,
            objects = objects.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "rendered"
        );
        Ok(Rendered { objects, tool })
    }

    /// The objects of a directory: its manifests and, evaluated in one Jsonnet worker, its Jsonnet
    /// files, in path order.
    async fn directory_objects(
        &self,
        root: &Path,
        app_rel: &str,
        plan: directory::Plan,
        source: &ApplicationSource,
    ) -> Result<Vec<Value>, RenderError> {
        let jsonnet_files: Vec<String> = plan
            .entries
            .iter()
            .filter_map(|e| match e {
                directory::Entry::Jsonnet(file) => Some(file.clone()),
                directory::Entry::Objects(_) => None,
            })
            .collect();
        let mut evaluated = if jsonnet_files.is_empty() {
            Vec::new()
        } else {
            let options = source.directory.as_ref().and_then(|d| d.jsonnet.as_ref());
            jsonnet::render(root, app_rel, jsonnet_files, options, self.timeout).await?
        }
        .into_iter();
        let mut objects = Vec::new();
        for entry in plan.entries {
            match entry {
                directory::Entry::Objects(list) => objects.extend(list),
                directory::Entry::Jsonnet(_) => objects.extend(evaluated.next().unwrap_or_default()),
            }
        }
        Ok(objects)
    }

    /// Drop every cached result of `source`'s repository and path for the Application `app_name`
    /// deploying to `namespace` (at any revision, with any parameters), so that its next render runs
    /// the tool again and replaces the cache entry: a hard refresh. A render already under way when
    /// this is called still answers the callers that asked before, but no caller after the call
    /// gets its result (it is stored under the scope's previous generation, which later callers do
    /// not read, until evicted). Returns how many results were dropped.
    pub fn invalidate(&self, source: &ApplicationSource, app_name: &str, namespace: &str) -> usize {
        let path = normalise_app_path(&source.path);
        let dropped = self
            .cache
            .invalidate(&cache_scope(&source.repo_url, &path, app_name, namespace));
        tracing::debug!(path = %path, app = app_name, namespace, dropped, "render cache invalidated");
        dropped
    }

    /// The tool `source`'s path calls for in the checkout at `repo_root` (the path confined to the
    /// checkout as for a render); `None` when the path cannot be used (the render says why).
    pub fn tool_for(repo_root: &Path, source: &ApplicationSource) -> Option<Tool> {
        let root = std::fs::canonicalize(repo_root).ok()?;
        let dir = resolve_in_repo(&root, &root, &normalise_app_path(&source.path)).ok()?;
        dir.is_dir().then(|| Tool::detect(&dir))
    }

    /// Cache hits and misses so far.
    pub fn cache_stats(&self) -> (u64, u64) {
        self.cache.stats()
    }

    /// Cache keys whose render is under way (none once every caller has its answer or gave up).
    pub fn keys_in_flight(&self) -> usize {
        self.cache.rendering()
    }

    /// Renders run so far, and the most that ran at once.
    pub fn activity(&self) -> RenderActivity {
        use std::sync::atomic::Ordering::Relaxed;
        RenderActivity {
            runs: self.activity.runs.load(Relaxed),
            peak_concurrent: self.activity.peak.load(Relaxed),
        }
    }
}

/// What [`Renderer::invalidate`] drops: one Application's renders of one repository path.
fn cache_scope(repo_url: &str, path: &str, app_name: &str, namespace: &str) -> String {
    serde_json::json!([repo_url, path, app_name, namespace]).to_string()
}

/// Refuse a render that defines one object twice (same group, kind, namespace and name): applying
/// it would silently keep whichever came last. Hooks are exempt (a hook may be recreated per phase).
fn check_duplicates(objects: &[Value], default_namespace: &str) -> Result<(), RenderError> {
    let mut seen: HashMap<(String, String, String, String), usize> = HashMap::new();
    for object in objects {
        let meta = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or_default();
        let annotations = object.pointer("/metadata/annotations");
        let is_hook = ["capstan.dev/hook", "argocd.argoproj.io/hook", hooks::HELM_HOOK]
            .iter()
            .any(|k| annotations.and_then(|a| a.get(*k)).is_some());
        if is_hook {
            continue;
        }
        let group = meta("/apiVersion")
            .rsplit_once('/')
            .map(|(g, _)| g)
            .unwrap_or("")
            .to_string();
        let namespace = match meta("/metadata/namespace") {
            "" => default_namespace,
            ns => ns,
        };
        let key = (
            group,
            meta("/kind").to_string(),
            namespace.to_string(),
            meta("/metadata/name").to_string(),
        );
        *seen.entry(key).or_default() += 1;
    }
    let mut duplicates: Vec<_> = seen.into_iter().filter(|(_, n)| *n > 1).collect();
    duplicates.sort();
    match duplicates.first() {
        None => Ok(()),
        Some(((group, kind, namespace, name), count)) => Err(RenderError::DuplicateObject {
            key: format!(
                "{}{kind} {}{name}",
                if group.is_empty() {
                    String::new()
                } else {
                    format!("{group}/")
                },
                if namespace.is_empty() {
                    String::new()
                } else {
                    format!("{namespace}/")
                }
            ),
            count: *count,
        }),
    }
}

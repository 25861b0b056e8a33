//! The `render` stage of Capstan's pipeline (`source → render → compare → sync → health`): turning a
//! checked-out Git tree plus an Application's `spec.source` into the Kubernetes objects it declares,
//! as `serde_json::Value`s.
//!
//! The tool is chosen by what `spec.source.path` contains, as Argo CD does: a `Chart.yaml` means Helm
//! (`helm template`), a `kustomization.yaml`, `kustomization.yml` or `Kustomization` means Kustomize
//! (`kustomize build`), anything else is a plain directory of YAML/JSON manifests and Jsonnet files
//! (see [`jsonnet`]). The real `helm` and `kustomize` binaries are used (see [`tools`]), each invocation
//! bounded by the renderer's timeout; Jsonnet is evaluated in a child process of Capstan's own binary,
//! bounded the same way. Helm hook annotations are mapped onto Capstan's sync phases (see [`hooks`]).
//! No default namespace is applied here: a later stage does that with API discovery.
//!
//! Rendering never lets a path escape the repository: `spec.source.path`, Helm value files, chart
//! dependencies, kustomization references and every manifest read are resolved with
//! [`resolve_in_repo`], checkouts containing symlinks that point outside are refused before a tool runs
//! on them, and tools that must write (`kustomize edit`, `helm dependency build`) work in a scratch
//! copy, never in the shared checkout.
//!
//! A render with no object at all is an error ([`RenderError::EmptyRender`], naming the files the
//! source skipped) unless the request allows it ([`RenderRequest::allow_empty`]): a source that
//! silently renders nothing would otherwise report success, or prune everything.
//!
//! Results are cached by revision, path, render parameters and tool version. A hard refresh drops an
//! Application's cached results with [`Renderer::invalidate`], so its next render runs the tool again.

mod decrypt;
pub mod directory;
mod empty;
mod error;
pub mod helm;
pub mod hooks;
pub mod jsonnet;
mod kustomization;
pub mod kustomize;
mod kustomize_charts;
mod manifests;
mod paths;
pub mod tools;

mod cache;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use capstan_api::application::ApplicationSource;
use serde::Serialize;
use serde_json::Value;

pub use decrypt::Decryption;
pub use error::RenderError;
pub use paths::resolve_in_repo;

/// Read a kustomization file's text as the renderer does before Kustomize runs: it is refused unless
/// Capstan understands all of it (one document, Kustomize's fields spelled exactly, see
/// [`kustomize`]). For the fuzzer and tools; `file` names it in the error.
pub fn check_kustomization(text: &str, file: &str) -> Result<(), RenderError> {
    kustomization::read(text, file).map(|_| ())
}

/// Parse a repository file's manifests as the directory renderer does: a multi-document YAML stream,
/// or, when `json` is set, one JSON object or `List`. `origin` names the file in errors. (Public for
/// the fuzz targets in `fuzz/`.)
pub fn parse_manifests(text: &str, origin: &str, json: bool) -> Result<Vec<Value>, RenderError> {
    if json {
        manifests::parse_json(text, origin)
    } else {
        manifests::parse_yaml_stream(text, origin)
    }
}

/// The default timeout of one tool invocation.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// The default number of rendered results kept.
pub const DEFAULT_CACHE_CAPACITY: usize = 256;

/// What to render.
#[derive(Debug, Clone)]
pub struct RenderRequest<'a> {
    /// Root of the checkout: a directory holding the whole repository tree at one commit.
    pub repo_root: &'a Path,
    /// The Application's `spec.source`.
    pub source: &'a ApplicationSource,
    /// The Application's name: the default Helm release name.
    pub app_name: &'a str,
    /// The destination namespace, passed to `helm template --namespace`. Kustomize uses only
    /// `source.kustomize.namespace`.
    pub namespace: &'a str,
    /// The cluster's Kubernetes version (e.g. `1.20.2`), for `helm --kube-version`.
    pub kube_version: Option<String>,
    /// The cluster's API versions (`apps/v1`, `networking.k8s.io/v1/Ingress`), for
    /// `helm --api-versions`.
    pub api_versions: Vec<String>,
    /// The other sources of a multi-source Application that carry a `ref`, whose files Helm
    /// `valueFiles` entries name as `$NAME/path`.
    pub refs: &'a [RefSource<'a>],
    /// Whether a render with no object at all is accepted (`spec.syncPolicy.automated.allowEmpty`).
    /// Without it, such a render is [`RenderError::EmptyRender`], naming the files the source skipped.
    pub allow_empty: bool,
    /// Charts that a Helm chart's repository dependencies resolved to, fetched by the caller from
    /// registered repositories only (see [`remote_dependencies`]); put under `charts/` of a scratch
    /// copy before `helm template`.
    pub dependencies: &'a [ChartDependency<'a>],
    /// `spec.decryption`: SOPS files of the checkout (and of `refs`) are decrypted in a scratch copy
    /// before the tool runs.
    pub decryption: Option<&'a Decryption>,
}

/// A chart dependency on a Helm repository or OCI registry, as the chart declares it (or as a
/// kustomization's `helmCharts` entry names it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteDependency {
    /// The dependency's name (the chart's name in the repository).
    pub name: String,
    /// Its `repository`: `http(s)://…` or `oci://…`.
    pub repository: String,
    /// Its `version`: an exact version or a constraint.
    pub version: String,
}

/// A remote dependency fetched: the extracted chart to vendor as `charts/NAME/` of a Helm chart, or
/// where Kustomize looks for a `helmCharts` entry.
#[derive(Debug, Clone, Copy)]
pub struct ChartDependency<'a> {
    /// The dependency's name.
    pub name: &'a str,
    /// Its repository, as declared.
    pub repository: &'a str,
    /// Its version or constraint, as declared.
    pub version: &'a str,
    /// The extracted chart (`Chart.yaml` at its root).
    pub dir: &'a Path,
    /// What identifies its content (version and digest), for the render cache key.
    pub revision: &'a str,
}

/// The dependencies of the Helm chart at `source.path` in `repo_root` that name a Helm repository or
/// an OCI registry and are not vendored under `charts/`, or the `helmCharts` entries of a Kustomize
/// overlay that name one and are not in the repository where Kustomize looks for them: what a caller
/// must fetch (from registered repositories only) and pass as [`RenderRequest::dependencies`]. Empty
/// for other sources.
pub fn remote_dependencies(repo_root: &Path, source: &ApplicationSource) -> Result<Vec<RemoteDependency>, RenderError> {
    let root = std::fs::canonicalize(repo_root)
        .map_err(|e| RenderError::io(format!("cannot open repository checkout {}", repo_root.display()), e))?;
    let app_rel = normalise_app_path(&source.path);
    let dir = resolve_in_repo(&root, &root, &app_rel)?;
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    match Tool::detect(&dir) {
        Tool::Helm => Ok(helm::remote_dependencies(&dir)),
        Tool::Kustomize => {
            let mut out: Vec<RemoteDependency> = Vec::new();
            for chart in kustomize::helm_charts(&root, &app_rel)? {
                if chart.repo.is_empty() || chart.is_vendored() {
                    continue;
                }
                let dependency = RemoteDependency {
                    name: chart.name,
                    repository: chart.repo,
                    version: chart.version,
                };
                if !out.contains(&dependency) {
                    out.push(dependency);
                }
            }
            Ok(out)
        }
        Tool::Directory => Ok(Vec::new()),
    }
}

/// A source named by `ref` in a multi-source Application: its checkout and revision.
#[derive(Debug, Clone, Copy)]
pub struct RefSource<'a> {
    /// The source's `ref`.
    pub name: &'a str,
    /// Root of its checkout.
    pub root: &'a Path,
    /// Its resolved revision (part of the render cache key: a new values commit renders again).
    pub revision: &'a str,
}

/// How a source was rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Tool {
    /// A plain directory of YAML/JSON manifests.
    Directory,
    /// `kustomize build`.
    Kustomize,
    /// `helm template`.
    Helm,
}

impl Tool {
    /// `Directory`, `Kustomize` or `Helm`, as Argo CD names source types.
    pub fn as_str(self) -> &'static str {
        match self {
            Tool::Directory => "Directory",
            Tool::Kustomize => "Kustomize",
            Tool::Helm => "Helm",
        }
    }

    /// The tool a directory calls for: `Chart.yaml` → Helm, a kustomization file → Kustomize, otherwise
    /// a plain directory.
    pub fn detect(dir: &Path) -> Tool {
        if dir.join("Chart.yaml").is_file() {
            Tool::Helm
        } else if kustomize::kustomization_file(dir).is_some() {
            Tool::Kustomize
        } else {
            Tool::Directory
        }
    }
}

impl std::fmt::Display for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The objects a source renders to, in the order the files or the tool produced them.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// The Kubernetes objects, `List`s flattened, Helm hooks mapped (see [`hooks`]).
    pub objects: Vec<Value>,
    /// The tool used.
    pub tool: Tool,
}

/// Renders sources, with a timeout per tool invocation and a bounded cache of results.
pub struct Renderer {
    timeout: Duration,
    cache: cache::Cache,
    /// Renders that run a tool or read a repository at once: a burst of commits (or a hostile
    /// repository made to be slow) queues instead of starting a process per Application.
    permits: std::sync::Arc<tokio::sync::Semaphore>,
    /// One lock per cache key being rendered: callers asking for the same result at once (an
    /// Application's reconcile and a burst of `/diff` requests) wait for one render instead of
    /// starting their own.
    in_flight: std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<Flight>>>,
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

/// The renders of one cache key while callers want it: the lock that lets one of them render at a
/// time, and how the last render ended, so that the callers who waited for a failed render get its
/// error instead of running the tool again. It lives only while callers hold it (see [`KeyLease`]),
/// so a failure is never remembered beyond the callers that waited for it.
#[derive(Default)]
struct Flight {
    /// Held while rendering; the error of the last render under it when that render failed with
    /// callers waiting.
    lock: tokio::sync::Mutex<Option<std::sync::Arc<RenderError>>>,
    /// Renders finished under this flight.
    finished: std::sync::atomic::AtomicU64,
}

/// A caller's hold on the flight of one cache key; the map forgets the flight when its last holder
/// goes.
struct KeyLease<'a> {
    renderer: &'a Renderer,
    flight: std::sync::Arc<Flight>,
    key: String,
    /// Renders finished under the flight when this caller joined it.
    joined: u64,
}

impl KeyLease<'_> {
    /// Whether a render ended while this caller waited.
    fn rendered_meanwhile(&self) -> bool {
        self.flight.finished.load(std::sync::atomic::Ordering::SeqCst) != self.joined
    }

    /// Whether other callers hold the flight (the map holds one reference, this caller another).
    fn others_wait(&self) -> bool {
        std::sync::Arc::strong_count(&self.flight) > 2
    }
}

impl Drop for KeyLease<'_> {
    fn drop(&mut self) {
        self.renderer.release_key(&self.key, &self.flight);
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
            cache: cache::Cache::new(DEFAULT_CACHE_CAPACITY),
            permits: std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_RENDERS)),
            in_flight: std::sync::Mutex::default(),
            activity: Activity::default(),
        }
    }

    /// Keep up to `capacity` results (0 disables caching); the oldest are evicted first.
    pub fn with_cache_capacity(mut self, capacity: usize) -> Self {
        self.cache = cache::Cache::new(capacity);
        self
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
        let hit = self.cache.get(&key);
        capstan_metrics::global().render_cache_lookup(hit.is_some());
        if let Some(hit) = hit {
            tracing::debug!(path = %app_rel, revision = cache_key_revision, %tool, "render cache hit");
            return Ok(hit);
        }

        // One render per key at a time: whoever waited finds the result in the cache, or the
        // error of the render it waited for. Released on every way out, a caller that stops
        // waiting included.
        let lease = self.join_flight(&key);
        let mut last_error = lease.flight.lock.lock().await;
        // Read before the second lookup: a result rendered across an invalidation is not stored.
        let epoch = self.cache.epoch();
        if let Some(hit) = self.cache.peek(&key) {
            tracing::debug!(path = %app_rel, revision = cache_key_revision, %tool, "rendered meanwhile by another caller");
            return Ok(hit);
        }
        if lease.rendered_meanwhile()
            && let Some(err) = last_error.as_ref()
        {
            tracing::debug!(path = %app_rel, revision = cache_key_revision, %tool, "failed meanwhile for another caller");
            return Err(RenderError::Shared(err.clone()));
        }
        let result = match self.run(req, &root, &app_rel, tool, binary, cache_key_revision).await {
            Ok(rendered) => {
                let scope = cache_scope(&source.repo_url, &app_rel, req.app_name, req.namespace);
                if !self.cache.insert(key.clone(), scope, rendered.clone(), epoch) {
                    tracing::debug!(path = %app_rel, revision = cache_key_revision, "render result not cached");
                }
                *last_error = None;
                Ok(rendered)
            }
            // Callers wait for this render: they get the same error rather than running the tool
            // again (a broken chart asked for by many Applications at once fails once).
            Err(err) if lease.others_wait() => {
                let shared = std::sync::Arc::new(err);
                *last_error = Some(shared.clone());
                Err(RenderError::Shared(shared))
            }
            Err(err) => {
                *last_error = None;
                Err(err)
            }
        };
        lease.flight.finished.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        result
    }

    /// Join the flight of one cache key, created on first use.
    fn join_flight(&self, key: &str) -> KeyLease<'_> {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let flight = in_flight.entry(key.to_string()).or_default().clone();
        let joined = flight.finished.load(std::sync::atomic::Ordering::SeqCst);
        KeyLease {
            renderer: self,
            flight,
            key: key.to_string(),
            joined,
        }
    }

    /// Forget the flight of `key` once nobody else holds it.
    fn release_key(&self, key: &str, flight: &std::sync::Arc<Flight>) {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // Two references: the map's and the caller's.
        if std::sync::Arc::strong_count(flight) <= 2 {
            in_flight.remove(key);
        }
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
    /// this is called does not store its result. Returns how many results were dropped.
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

    /// Cache keys with a render under way or waited for (their flights).
    pub fn keys_in_flight(&self) -> usize {
        self.in_flight
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .len()
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

/// `spec.source.path` as used in messages and keys: `.` for the root, no leading `./` or trailing `/`.
fn normalise_app_path(path: &str) -> String {
    let mut p = path.trim();
    while let Some(rest) = p.strip_prefix("./") {
        p = rest;
    }
    let p = p.trim_end_matches('/');
    if p.is_empty() { ".".to_string() } else { p.to_string() }
}

/// Run blocking filesystem work off the async executor.
pub(crate) async fn blocking<T, F>(f: F) -> Result<T, RenderError>
where
    F: FnOnce() -> Result<T, RenderError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| RenderError::Task(e.to_string()))?
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_paths_are_normalised() {
        assert_eq!(normalise_app_path(""), ".");
        assert_eq!(normalise_app_path("./"), ".");
        assert_eq!(normalise_app_path("./apps/web/"), "apps/web");
        assert_eq!(normalise_app_path("apps"), "apps");
    }

    #[test]
    fn tool_detection() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Tool::detect(dir.path()), Tool::Directory);
        std::fs::write(dir.path().join("Kustomization"), "resources: []\n").unwrap();
        assert_eq!(Tool::detect(dir.path()), Tool::Kustomize);
        std::fs::write(dir.path().join("Chart.yaml"), "name: x\n").unwrap();
        assert_eq!(Tool::detect(dir.path()), Tool::Helm);
    }
}

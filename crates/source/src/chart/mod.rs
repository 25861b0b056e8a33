//! Helm charts from Helm repositories (`http(s)://…`, an `index.yaml` and archives) and OCI
//! registries (`oci://host/path`): resolving a `targetRevision` (a version or a constraint) to one
//! version, downloading its archive, verifying it, caching it by digest and extracting it safely.
//!
//! [`ChartCache::resolve`] answers from a repository index fetched at most once per repository per
//! TTL and shared by every caller (or from the registry's tags and manifest, also kept for the TTL);
//! [`ChartCache::fetch`] returns a [`ChartDir`] — a directory with `Chart.yaml` at its root — that is
//! downloaded, verified and extracted only the first time a digest is asked for. See
//! `docs/charts.md`.

pub(crate) mod archive;
mod error;
pub(crate) mod http;
mod index;
pub(crate) mod oci;
mod repository;
pub(crate) mod version;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use error::ChartError;

use self::archive::{ExtractLimits, sha256_hex};
use self::http::{Auth, Get, Http, Origin, check_url, status_error};
use self::oci::{AuthCache, OciRepo, Registry};
use self::repository::{Counters, HelmRepo};
use self::version::{Constraint, exact, parse_version};
use crate::Credentials;
use capstan_api::RepoUrl;

/// A chart to resolve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChartRequest {
    /// `http(s)://…` (a Helm repository) or `oci://host[:port]/path` (a registry namespace).
    pub repo_url: String,
    /// The chart's name.
    pub chart: String,
    /// An exact version or a constraint (`1.2.*`, `>=1.0.0 <2.0.0`, `^3.1`, `~1.2`, `a || b`);
    /// empty or `*` is the highest release.
    pub target_revision: String,
    /// OCI only: talk plain HTTP to the registry instead of HTTPS (Argo CD's
    /// `insecureOCIForceHttp`). Ignored for Helm repositories, whose URL says it.
    pub plain_http: bool,
}

/// A chart version chosen by [`ChartCache::resolve`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedChart {
    /// The repository URL as requested.
    pub repo_url: String,
    /// The chart's name.
    pub chart: String,
    /// The version chosen, as the repository writes it.
    pub version: String,
    /// Lower-case hex SHA-256 of the archive (from the index or the OCI manifest); `None` for an
    /// index entry without a digest (then every fetch downloads and nothing is verified).
    pub digest: Option<String>,
    /// Where the archive is downloaded from (an index URL made absolute, or the OCI blob URL).
    pub url: String,
    oci: Option<OciRepo>,
}

/// A chart extracted on disk, with `Chart.yaml` at its root. Its directory is not removed while this
/// value (or a clone) is alive; it dereferences to the directory's path.
#[derive(Debug, Clone)]
pub struct ChartDir {
    path: PathBuf,
    _lease: Arc<()>,
}

impl ChartDir {
    /// The chart's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl std::ops::Deref for ChartDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for ChartDir {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

/// What one repository or chart may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChartLimits {
    /// Largest `index.yaml`, in bytes (the download stops there).
    pub max_index_bytes: u64,
    /// Most chart versions in one index.
    pub max_index_entries: usize,
    /// Largest chart archive (compressed), in bytes.
    pub max_archive_bytes: u64,
    /// Largest extracted chart (sum of file sizes), in bytes.
    pub max_chart_bytes: u64,
    /// Most entries (files and directories) in one chart archive.
    pub max_chart_files: usize,
}

impl Default for ChartLimits {
    fn default() -> Self {
        ChartLimits {
            max_index_bytes: 32 << 20,
            max_index_entries: 200_000,
            max_archive_bytes: 20 << 20,
            max_chart_bytes: 100 << 20,
            max_chart_files: 10_000,
        }
    }
}

/// Counters of one repository (Helm repository URL, or `oci://` URL), for tests and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChartStats {
    /// `index.yaml` requests sent (conditional or not).
    pub index_requests: u64,
    /// Of those, answered `304 Not Modified`.
    pub index_not_modified: u64,
    /// Chart archives (or OCI chart layers) downloaded.
    pub archive_downloads: u64,
    /// OCI tag lists requested.
    pub tag_lists: u64,
    /// OCI manifests requested.
    pub manifest_requests: u64,
}

/// Charts resolved and fetched for every Application, with one index per repository and one
/// extracted directory per archive digest under `root`.
pub struct ChartCache {
    root: PathBuf,
    ttl: Duration,
    limits: ChartLimits,
    http: Http,
    helm: Mutex<HashMap<String, Arc<HelmRepo>>>,
    oci: Mutex<HashMap<String, Arc<OciState>>>,
    counters: Mutex<HashMap<String, Arc<Counters>>>,
    oci_auth: AuthCache,
    /// One lock per digest, so concurrent fetches of one chart download it once.
    fetching: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    leases: Mutex<HashMap<String, Arc<()>>>,
}

/// OCI answers kept for the TTL: per `targetRevision`, the resolution.
#[derive(Default)]
struct OciState {
    resolved: tokio::sync::Mutex<HashMap<String, (Instant, ResolvedChart)>>,
}

impl ChartCache {
    /// A cache under `root`. Each HTTP exchange (connect, answer and body) is limited to `timeout`;
    /// an index (or an OCI resolution) is reused for `ttl` unless a caller forces a refresh.
    pub fn new(root: impl Into<PathBuf>, timeout: Duration, ttl: Duration) -> Self {
        ChartCache {
            root: root.into(),
            ttl,
            limits: ChartLimits::default(),
            http: Http::new(timeout),
            helm: Mutex::new(HashMap::new()),
            oci: Mutex::new(HashMap::new()),
            counters: Mutex::new(HashMap::new()),
            oci_auth: AuthCache::default(),
            fetching: Mutex::new(HashMap::new()),
            leases: Mutex::new(HashMap::new()),
        }
    }

    /// Bound index, archive and chart sizes (see [`ChartLimits`]).
    pub fn with_limits(mut self, limits: ChartLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Counters for a repository URL (as given in [`ChartRequest::repo_url`]).
    pub fn stats(&self, repo_url: &str) -> ChartStats {
        let c = self.counters(repo_url);
        let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        ChartStats {
            index_requests: get(&c.index_requests),
            index_not_modified: get(&c.index_not_modified),
            archive_downloads: get(&c.archive_downloads),
            tag_lists: get(&c.tag_lists),
            manifest_requests: get(&c.manifest_requests),
        }
    }

    fn counters(&self, repo_url: &str) -> Arc<Counters> {
        lock(&self.counters).entry(repo_key(repo_url)).or_default().clone()
    }

    /// Choose the version of `req.chart` that `req.target_revision` names. With `force`, the index
    /// (or the registry's tags and manifest) is asked again even if recent.
    pub async fn resolve(
        &self,
        req: &ChartRequest,
        creds: &Credentials,
        force: bool,
    ) -> Result<ResolvedChart, ChartError> {
        RepoUrl::parse(&req.repo_url).map_err(|e| ChartError::UnsupportedUrl {
            url: crate::redact(&req.repo_url, &[]),
            reason: e.to_string().into(),
        })?;
        if req.repo_url.starts_with("oci://") {
            return self.resolve_oci(req, creds, force).await;
        }
        let key = repo_key(&req.repo_url);
        check_url(&key)?;
        let repo = lock(&self.helm)
            .entry(key.clone())
            .or_insert_with(|| Arc::new(HelmRepo::new(key.clone(), self.counters(&req.repo_url))))
            .clone();
        let index = repo
            .index(
                &self.http,
                creds,
                self.ttl,
                force,
                (self.limits.max_index_bytes, self.limits.max_index_entries),
            )
            .await?;
        let versions = index.entries.get(&req.chart).ok_or_else(|| ChartError::ChartNotFound {
            chart: req.chart.clone(),
            repo: key.clone(),
        })?;
        let constraint = self.constraint(req)?;
        let Some((_, entry)) = constraint.best(versions.iter().map(|e| (&e.version, e))) else {
            return Err(self.no_match(req, versions.iter().map(|e| (&e.version, e.raw_version.as_str()))));
        };
        let url = entry.urls.first().ok_or_else(|| ChartError::Index {
            repo: key.clone(),
            detail: format!("chart {:?} version {} has no URL", req.chart, entry.raw_version),
        })?;
        let url = http::join(&repo.index_url(), url);
        check_url(&url)?;
        Ok(ResolvedChart {
            repo_url: req.repo_url.clone(),
            chart: req.chart.clone(),
            version: entry.raw_version.clone(),
            digest: entry.digest.clone(),
            url,
            oci: None,
        })
    }

    fn constraint(&self, req: &ChartRequest) -> Result<Constraint, ChartError> {
        Constraint::parse(&req.target_revision).map_err(|detail| ChartError::InvalidConstraint {
            chart: req.chart.clone(),
            constraint: req.target_revision.clone(),
            detail,
        })
    }

    fn no_match<'a>(
        &self,
        req: &ChartRequest,
        versions: impl Iterator<Item = (&'a semver::Version, &'a str)>,
    ) -> ChartError {
        let mut all: Vec<_> = versions.collect();
        all.sort_by(|a, b| b.0.cmp(a.0));
        ChartError::NoMatchingVersion {
            chart: req.chart.clone(),
            repo: repo_key(&req.repo_url),
            constraint: req.target_revision.clone(),
            nearest: all.iter().take(5).map(|(_, raw)| raw.to_string()).collect(),
        }
    }

    async fn resolve_oci(
        &self,
        req: &ChartRequest,
        creds: &Credentials,
        force: bool,
    ) -> Result<ResolvedChart, ChartError> {
        let repo = oci::parse(&req.repo_url, &req.chart, req.plain_http)?;
        let counters = self.counters(&req.repo_url);
        let state = lock(&self.oci)
            .entry(format!("{}/{}", repo.base, repo.repository))
            .or_default()
            .clone();
        let asked = Instant::now();
        let mut resolved = state.resolved.lock().await;
        if let Some((at, r)) = resolved.get(&req.target_revision) {
            let fresh = if force { *at >= asked } else { at.elapsed() < self.ttl };
            if fresh {
                return Ok(r.clone());
            }
        }
        let registry = Registry {
            http: &self.http,
            creds,
            repo: &repo,
            auth: &self.oci_auth,
        };
        let (tag, version) = match exact(&req.target_revision) {
            Some(_) => {
                let v = req.target_revision.trim().to_string();
                (v.replace('+', "_"), v)
            }
            None => {
                let constraint = self.constraint(req)?;
                Counters::bump(&counters.tag_lists);
                let tags = registry.tags().await?;
                // (version, tag, the version as written: `+` where the tag has `_`).
                let versions: Vec<(semver::Version, String, String)> = tags
                    .into_iter()
                    .filter_map(|t| {
                        let shown = t.replace('_', "+");
                        parse_version(&shown).map(|v| (v, t, shown))
                    })
                    .collect();
                match constraint.best(versions.iter().map(|(v, t, shown)| (v, (t, shown)))) {
                    Some((_, (tag, shown))) => (tag.clone(), shown.clone()),
                    None => return Err(self.no_match(req, versions.iter().map(|(v, _, s)| (v, s.as_str())))),
                }
            }
        };
        Counters::bump(&counters.manifest_requests);
        let layer = registry.chart_layer(&tag).await?;
        if layer.size > self.limits.max_archive_bytes {
            return Err(ChartError::TooLarge {
                what: "chart layer",
                url: registry.blob_url(&layer.digest),
                limit: self.limits.max_archive_bytes,
            });
        }
        let result = ResolvedChart {
            repo_url: req.repo_url.clone(),
            chart: req.chart.clone(),
            version,
            url: registry.blob_url(&layer.digest),
            digest: Some(layer.digest),
            oci: Some(repo),
        };
        resolved.insert(req.target_revision.clone(), (Instant::now(), result.clone()));
        Ok(result)
    }

    /// The chart of `resolved`, extracted: from the cache when its digest was fetched before, else
    /// downloaded (credentials go only to the repository's own scheme, host and port), verified
    /// against the digest and extracted with the limits.
    pub async fn fetch(&self, resolved: &ResolvedChart, creds: &Credentials) -> Result<ChartDir, ChartError> {
        if let Some(digest) = &resolved.digest
            && let Some(dir) = self.cached(digest)
        {
            return Ok(dir);
        }
        let gate = resolved
            .digest
            .as_ref()
            .map(|d| lock(&self.fetching).entry(d.clone()).or_default().clone());
        let _held = match &gate {
            Some(g) => Some(g.lock().await),
            None => None,
        };
        if let Some(digest) = &resolved.digest
            && let Some(dir) = self.cached(digest)
        {
            return Ok(dir);
        }
        let bytes = self.download(resolved, creds).await?;
        Counters::bump(&self.counters(&resolved.repo_url).archive_downloads);
        let actual = sha256_hex(&bytes);
        if let Some(expected) = &resolved.digest
            && *expected != actual
        {
            return Err(ChartError::DigestMismatch {
                chart: resolved.chart.clone(),
                version: resolved.version.clone(),
                repo: repo_key(&resolved.repo_url),
                expected: expected.clone(),
                actual,
            });
        }
        let dest = self.chart_path(&actual);
        if !dest.join("Chart.yaml").is_file() {
            let limits = ExtractLimits {
                max_bytes: self.limits.max_chart_bytes,
                max_files: self.limits.max_chart_files,
            };
            let target = dest.clone();
            tokio::task::spawn_blocking(move || archive::extract(&bytes, &target, limits))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r)
                .map_err(|detail| ChartError::Archive {
                    chart: resolved.chart.clone(),
                    version: resolved.version.clone(),
                    repo: repo_key(&resolved.repo_url),
                    detail,
                })?;
        }
        Ok(self.lease(&actual, dest))
    }

    async fn download(&self, resolved: &ResolvedChart, creds: &Credentials) -> Result<Vec<u8>, ChartError> {
        let limit = self.limits.max_archive_bytes;
        if let Some(repo) = &resolved.oci {
            let registry = Registry {
                http: &self.http,
                creds,
                repo,
                auth: &self.oci_auth,
            };
            return Ok(registry.get(&resolved.url, None, limit, "chart archive").await?.body);
        }
        let repo_uri = check_url(&repo_key(&resolved.repo_url))?;
        let origin = Origin::of(&repo_uri);
        let auth = Auth::basic(creds);
        let answer = self
            .http
            .get(
                creds,
                &resolved.repo_url,
                Get {
                    url: &resolved.url,
                    headers: Vec::new(),
                    auth: auth.as_ref().zip(origin.as_ref()),
                    limit,
                    what: "chart archive",
                },
            )
            .await?;
        if !answer.status.is_success() {
            return Err(status_error(&resolved.url, answer.status));
        }
        Ok(answer.body)
    }

    fn chart_path(&self, digest: &str) -> PathBuf {
        self.root.join("charts").join(digest)
    }

    fn cached(&self, digest: &str) -> Option<ChartDir> {
        // The digest names a directory: only hex is ever used as a path component.
        if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let path = self.chart_path(digest);
        path.join("Chart.yaml").is_file().then(|| self.lease(digest, path))
    }

    fn lease(&self, digest: &str, path: PathBuf) -> ChartDir {
        let lease = lock(&self.leases).entry(digest.to_string()).or_default().clone();
        ChartDir { path, _lease: lease }
    }
}

/// A Helm repository URL without its trailing `/` (the key of its index). Deliberately the URL as
/// written, not its [`RepoUrl`] identity: the index is fetched from this spelling, and one entry
/// shared by two spellings (`…/stable` and `…/Stable.git`) would let the first Application to ask
/// decide what another's fetches. [`ChartCache::resolve`] has checked it with [`RepoUrl::parse`].
fn repo_key(url: &str) -> String {
    url.trim().trim_end_matches('/').to_string()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

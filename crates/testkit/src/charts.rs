//! A Helm chart repository for tests — a Helm repository *is* a static file server — plus helpers
//! running the real `helm` to make charts (`helm package`), indexes (`helm repo index --url`) and to
//! push charts to an OCI registry (`helm push`).
//!
//! [`ChartServer`] serves a directory on a free loopback port, over HTTP or HTTPS (a certificate from
//! a CA made at start), optionally behind basic auth, with `ETag`/`Last-Modified` and `304 Not
//! Modified`, counting requests per path, answers per status and requests carrying an
//! `Authorization` header. A path can be made to stream a generated body of any size (an
//! `index.yaml` of hundreds of megabytes that is never in memory).

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context, bail};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;

use crate::git::tls;

/// How a [`ChartServer`] serves.
#[derive(Debug, Clone, Default)]
pub struct ChartServerOptions {
    /// Require HTTP basic auth with this user name and password.
    pub basic_auth: Option<(String, String)>,
    /// Serve HTTPS with a certificate from a CA made at start ([`ChartServer::ca_pem`]).
    pub tls: bool,
}

#[derive(Default)]
struct Served {
    root: PathBuf,
    basic: Option<String>,
    requests: Mutex<HashMap<String, u64>>,
    not_modified: AtomicU64,
    with_authorization: AtomicU64,
    streamed: AtomicU64,
    generated: Mutex<HashMap<String, u64>>,
}

/// A static HTTP(S) file server on loopback, stopped when dropped.
pub struct ChartServer {
    dir: tempfile::TempDir,
    port: u16,
    ca_pem: Option<String>,
    state: Arc<Served>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ChartServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ChartServer {
    /// Start serving an empty directory ([`ChartServer::dir`]).
    pub async fn start(options: ChartServerOptions) -> anyhow::Result<ChartServer> {
        let dir = tempfile::Builder::new().prefix("capstan-charts-").tempdir()?;
        let state = Arc::new(Served {
            root: dir.path().to_path_buf(),
            basic: options
                .basic_auth
                .map(|(u, p)| base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))),
            ..Default::default()
        });
        let app = axum::Router::new().fallback(serve).with_state(state.clone());
        let (port, ca_pem, task) = if options.tls {
            let (config, ca) = tls::server_config()?;
            let listener = tls::TlsListener::bind(config).await?;
            let port = listener.port()?;
            let task = tokio::spawn(async move {
                if let Err(err) = axum::serve(listener, app).await {
                    eprintln!("chart server stopped: {err}");
                }
            });
            (port, Some(ca), task)
        } else {
            let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
            let port = listener.local_addr()?.port();
            let task = tokio::spawn(async move {
                if let Err(err) = axum::serve(listener, app).await {
                    eprintln!("chart server stopped: {err}");
                }
            });
            (port, None, task)
        };
        Ok(ChartServer {
            dir,
            port,
            ca_pem,
            state,
            task,
        })
    }

    /// The directory served (write charts and `index.yaml` here).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `http(s)://127.0.0.1:PORT` (no trailing slash).
    pub fn url(&self) -> String {
        let scheme = if self.ca_pem.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The PEM of the CA that signed the HTTPS certificate.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// GET requests for `path` (`/index.yaml`) so far, whatever their answer.
    pub fn requests(&self, path: &str) -> u64 {
        lock(&self.state.requests).get(path).copied().unwrap_or(0)
    }

    /// Every request so far.
    pub fn total_requests(&self) -> u64 {
        lock(&self.state.requests).values().sum()
    }

    /// Requests answered `304 Not Modified`.
    pub fn not_modified(&self) -> u64 {
        self.state.not_modified.load(Ordering::Relaxed)
    }

    /// Requests that carried an `Authorization` header.
    pub fn requests_with_authorization(&self) -> u64 {
        self.state.with_authorization.load(Ordering::Relaxed)
    }

    /// Bytes sent of generated bodies (see [`ChartServer::generate`]).
    pub fn generated_bytes_sent(&self) -> u64 {
        self.state.streamed.load(Ordering::Relaxed)
    }

    /// Answer `path` with `size` bytes of generated YAML (a comment line repeated), streamed without
    /// a `Content-Length` and never held in memory.
    pub fn generate(&self, path: &str, size: u64) {
        lock(&self.state.generated).insert(path.to_string(), size);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

async fn serve(State(state): State<Arc<Served>>, request: Request) -> Response {
    let path = request.uri().path().to_string();
    *lock(&state.requests).entry(path.clone()).or_default() += 1;
    let headers = request.headers();
    if headers.contains_key(header::AUTHORIZATION) {
        state.with_authorization.fetch_add(1, Ordering::Relaxed);
    }
    if let Some(expected) = &state.basic {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Basic "));
        if given != Some(expected.as_str()) {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Basic realm=\"charts\"")],
                "unauthorized",
            )
                .into_response();
        }
    }
    let generated = lock(&state.generated).get(&path).copied();
    if let Some(size) = generated {
        return stream_generated(state.clone(), size);
    }
    let relative: PathBuf = Path::new(path.trim_start_matches('/'))
        .components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(p),
            _ => None,
        })
        .collect();
    let file = state.root.join(relative);
    let Ok(meta) = std::fs::metadata(&file) else {
        return (StatusCode::NOT_FOUND, "not found").into_response();
    };
    let Ok(modified) = meta.modified() else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "no mtime").into_response();
    };
    let nanos = modified
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let etag = format!("\"{}-{nanos}\"", meta.len());
    let last_modified = httpdate::fmt_http_date(modified);
    let not_modified = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(|v| v == etag)
        .or_else(|| {
            let since = headers.get(header::IF_MODIFIED_SINCE)?.to_str().ok()?;
            let since = httpdate::parse_http_date(since).ok()?;
            // HTTP dates have whole seconds.
            let secs = |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).ok();
            Some(secs(modified)? <= secs(since)?)
        })
        .unwrap_or(false);
    let validators = [
        (
            header::ETAG,
            HeaderValue::from_str(&etag).unwrap_or(HeaderValue::from_static("\"x\"")),
        ),
        (
            header::LAST_MODIFIED,
            HeaderValue::from_str(&last_modified).unwrap_or(HeaderValue::from_static("")),
        ),
    ];
    if not_modified {
        state.not_modified.fetch_add(1, Ordering::Relaxed);
        return (StatusCode::NOT_MODIFIED, validators).into_response();
    }
    match tokio::fs::read(&file).await {
        Ok(bytes) => (StatusCode::OK, validators, bytes).into_response(),
        Err(_) => (StatusCode::NOT_FOUND, "not found").into_response(),
    }
}

fn stream_generated(state: Arc<Served>, size: u64) -> Response {
    const CHUNK: usize = 64 * 1024;
    let line = b"# filler line of a very large index.yaml, streamed by the test server\n";
    let mut chunk = Vec::with_capacity(CHUNK);
    chunk.extend_from_slice(b"apiVersion: v1\nentries: {}\n");
    while chunk.len() < CHUNK {
        chunk.extend_from_slice(line);
    }
    chunk.truncate(CHUNK);
    let chunk = axum::body::Bytes::from(chunk);
    let stream = futures::stream::unfold(0u64, move |sent| {
        let chunk = chunk.clone();
        let state = state.clone();
        async move {
            if sent >= size {
                return None;
            }
            let n = (size - sent).min(CHUNK as u64) as usize;
            state.streamed.fetch_add(n as u64, Ordering::Relaxed);
            Some((Ok::<_, std::io::Error>(chunk.slice(..n)), sent + n as u64))
        }
    });
    Response::new(Body::from_stream(stream))
}

/// The `helm` that `scripts/setup.sh` installed.
pub fn helm_binary() -> anyhow::Result<PathBuf> {
    Ok(capstan_playground::binaries::find("helm")?)
}

/// `helm ARGS` with its configuration, cache and data under `home` (nothing of the user's Helm
/// set-up is read or written); fails with helm's output if helm fails.
pub fn run_helm(home: &Path, args: &[&str]) -> anyhow::Result<String> {
    let output = Command::new(helm_binary()?)
        .args(args)
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env("HELM_REGISTRY_CONFIG", home.join("registry.json"))
        .env_remove("HELM_EXPERIMENTAL_OCI")
        .output()
        .with_context(|| format!("running helm {args:?}"))?;
    if !output.status.success() {
        bail!(
            "helm {args:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Make chart `name` at `version` (one ConfigMap template naming the version) with `helm package`
/// into `dest`; returns the archive's path.
pub fn package_chart(dest: &Path, name: &str, version: &str) -> anyhow::Result<PathBuf> {
    let work = tempfile::Builder::new().prefix("capstan-chart-src-").tempdir()?;
    let chart = work.path().join(name);
    std::fs::create_dir_all(chart.join("templates"))?;
    std::fs::write(
        chart.join("Chart.yaml"),
        format!("apiVersion: v2\nname: {name}\nversion: {version}\ndescription: a test chart\n"),
    )?;
    std::fs::write(chart.join("values.yaml"), "greeting: hello\n")?;
    std::fs::write(
        chart.join("templates/configmap.yaml"),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{{{ .Release.Name }}}}\ndata:\n  version: \"{version}\"\n  greeting: {{{{ .Values.greeting }}}}\n"
        ),
    )?;
    std::fs::create_dir_all(dest)?;
    let (chart_s, dest_s) = (chart.to_string_lossy(), dest.to_string_lossy());
    run_helm(work.path(), &["package", &chart_s, "--destination", &dest_s])?;
    Ok(dest.join(format!("{name}-{version}.tgz")))
}

/// `helm repo index DIR [--url URL]`: (re)write `DIR/index.yaml`.
pub fn index_repository(dir: &Path, url: Option<&str>) -> anyhow::Result<()> {
    let home = tempfile::Builder::new().prefix("capstan-helm-home-").tempdir()?;
    let dir_s = dir.to_string_lossy();
    let mut args = vec!["repo", "index", &*dir_s];
    if let Some(url) = url {
        args.extend(["--url", url]);
    }
    run_helm(home.path(), &args)?;
    Ok(())
}

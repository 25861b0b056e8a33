//! A throwaway git server: `git daemon` for `git://` and `git http-backend` behind HTTP basic auth for
//! `http://` and `https://` (a certificate for 127.0.0.1 from a CA made at start, see
//! [`GitServer::ca_pem`]), all on free loopback ports and serving the same bare repositories. Over
//! HTTP a repository's name is case-insensitive, as on GitHub and GitLab.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use tokio::io::AsyncWriteExt;

/// Username accepted by the HTTP server.
pub const USER: &str = "capstan";
/// Password accepted by the HTTP server.
pub const PASSWORD: &str = "s3cret-test-password";

/// Bare repositories served over `git://` and authenticated `http://`.
pub struct GitServer {
    root: tempfile::TempDir,
    daemon: Child,
    daemon_port: u16,
    http_port: u16,
    http_task: tokio::task::JoinHandle<()>,
    https_port: u16,
    https_task: tokio::task::JoinHandle<()>,
    ca_pem: String,
    counters: Arc<HttpState>,
}

impl GitServer {
    /// Start both servers on free loopback ports.
    pub async fn start() -> anyhow::Result<GitServer> {
        let root = tempfile::Builder::new().prefix("capstan-git-").tempdir()?;
        let daemon_port = free_port()?;
        let daemon = start_daemon(root.path(), daemon_port)?;
        wait_port(daemon_port)
            .await
            .context("git daemon did not start listening")?;

        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let http_port = listener.local_addr()?.port();
        let state = Arc::new(HttpState {
            root: root.path().to_path_buf(),
            ref_advertisements: Default::default(),
            upload_packs: Default::default(),
        });
        let counters = state.clone();
        let app = axum::Router::new().fallback(cgi).with_state(state);
        let https_app = app.clone();
        let http_task = tokio::spawn(async move {
            if let Err(err) = axum::serve(listener, app).await {
                eprintln!("git http server stopped: {err}");
            }
        });
        let (tls, ca_pem) = tls::server_config()?;
        let tls_listener = tls::TlsListener::bind(tls).await?;
        let https_port = tls_listener.port()?;
        let https_task = tokio::spawn(async move {
            if let Err(err) = axum::serve(tls_listener, https_app).await {
                eprintln!("git https server stopped: {err}");
            }
        });
        Ok(GitServer {
            root,
            daemon,
            daemon_port,
            http_port,
            http_task,
            https_port,
            https_task,
            ca_pem,
            counters,
        })
    }

    /// Authenticated HTTP requests served so far: (ref advertisements — one per `ls-remote` or
    /// `fetch` —, `git-upload-pack` POSTs).
    pub fn http_requests(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering;
        (
            self.counters.ref_advertisements.load(Ordering::Relaxed),
            self.counters.upload_packs.load(Ordering::Relaxed),
        )
    }

    /// Create an empty bare repository `NAME.git`.
    pub fn create_repo(&self, name: &str) -> anyhow::Result<PathBuf> {
        let path = self.repo_path(name);
        run_git(
            self.root.path(),
            &[
                "init",
                "--bare",
                "--quiet",
                "--initial-branch=main",
                &path.to_string_lossy(),
            ],
        )?;
        Ok(path)
    }

    /// Path of the bare repository `NAME.git`.
    pub fn repo_path(&self, name: &str) -> PathBuf {
        self.root.path().join(format!("{name}.git"))
    }

    /// `git://127.0.0.1:PORT/NAME.git`
    pub fn git_url(&self, name: &str) -> String {
        format!("git://127.0.0.1:{}/{name}.git", self.daemon_port)
    }

    /// `http://127.0.0.1:PORT/NAME.git` (requires [`USER`]/[`PASSWORD`]).
    pub fn http_url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/{name}.git", self.http_port)
    }

    /// `https://127.0.0.1:PORT/NAME.git` (requires [`USER`]/[`PASSWORD`]; its certificate is signed
    /// by [`GitServer::ca_pem`], which no system trusts).
    pub fn https_url(&self, name: &str) -> String {
        format!("https://127.0.0.1:{}/{name}.git", self.https_port)
    }

    /// The PEM certificate of the CA that signed the HTTPS server's certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The same URL with the credentials embedded, for the `git` command line.
    pub fn http_url_with_credentials(&self, name: &str) -> String {
        format!("http://{USER}:{PASSWORD}@127.0.0.1:{}/{name}.git", self.http_port)
    }

    /// `file://` URL of the bare repository.
    pub fn file_url(&self, name: &str) -> String {
        format!("file://{}", self.repo_path(name).display())
    }

    /// Commit `files` (path, contents) onto `branch` of repository `name` and return the commit SHA.
    /// Files whose contents are `None` are deleted.
    pub fn commit(
        &self,
        name: &str,
        branch: &str,
        files: &[(&str, Option<&str>)],
        message: &str,
    ) -> anyhow::Result<String> {
        commit_files(&self.repo_path(name), branch, files, message)
    }
}

impl Drop for GitServer {
    fn drop(&mut self) {
        self.http_task.abort();
        self.https_task.abort();
        // git daemon forks a process per connection into its process group: stop the whole group.
        let pgid = nix::unistd::Pid::from_raw(self.daemon.id() as i32);
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

/// Run `git ARGS` in `dir`, failing with its stderr.
pub fn run_git(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Capstan Test")
        .env("GIT_AUTHOR_EMAIL", "test@capstan.invalid")
        .env("GIT_COMMITTER_NAME", "Capstan Test")
        .env("GIT_COMMITTER_EMAIL", "test@capstan.invalid")
        .output()
        .context("running git")?;
    if !out.status.success() {
        bail!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Every file under `dir`, as (path relative to `dir` with `/`, contents), sorted: a directory of
/// this repository (e.g. `examples/`) to commit into a test repository.
pub fn files_under(dir: &Path) -> anyhow::Result<Vec<(String, String)>> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) -> anyhow::Result<()> {
        for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                walk(root, &path, out)?;
            } else {
                let rel = path.strip_prefix(root)?.to_string_lossy().replace('\\', "/");
                let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
                out.push((rel, text));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out)?;
    out.sort();
    Ok(out)
}

/// Push `files` (path, contents) as one commit to branch `main` of the bare repository `bare`,
/// replacing its history, with every `*.sh` file executable (as an attacker would commit a script).
pub fn push_with_executables(bare: &Path, files: &[(&str, &str)]) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let work = tempfile::tempdir()?;
    let w = work.path();
    run_git(w, &["init", "--quiet", "--initial-branch", "main"])?;
    for (path, text) in files {
        let file = w.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&file, text)?;
        if path.ends_with(".sh") {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    run_git(w, &["add", "--all"])?;
    run_git(w, &["commit", "--quiet", "-m", "files and a script"])?;
    run_git(
        w,
        &[
            "push",
            "--quiet",
            "--force",
            &bare.to_string_lossy(),
            "HEAD:refs/heads/main",
        ],
    )?;
    Ok(())
}

/// Commit `files` onto `branch` of the bare repository at `bare`, through a temporary clone.
pub fn commit_files(
    bare: &Path,
    branch: &str,
    files: &[(&str, Option<&str>)],
    message: &str,
) -> anyhow::Result<String> {
    let work = tempfile::Builder::new().prefix("capstan-work-").tempdir()?;
    let w = work.path();
    run_git(w, &["init", "--quiet", "--initial-branch", branch])?;
    run_git(w, &["remote", "add", "origin", &bare.to_string_lossy()])?;
    let has_branch = !run_git(w, &["ls-remote", "--heads", "origin", branch])?.is_empty();
    if has_branch {
        run_git(w, &["fetch", "--quiet", "origin", branch])?;
        run_git(w, &["checkout", "--quiet", "-B", branch, "FETCH_HEAD"])?;
    }
    for (path, contents) in files {
        let file = w.join(path);
        match contents {
            Some(text) => {
                if let Some(parent) = file.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::write(&file, text)?;
            }
            None => {
                let _ = std::fs::remove_file(&file);
            }
        }
    }
    run_git(w, &["add", "--all"])?;
    run_git(w, &["commit", "--quiet", "--allow-empty", "-m", message])?;
    run_git(w, &["push", "--quiet", "origin", &format!("HEAD:refs/heads/{branch}")])?;
    run_git(w, &["rev-parse", "HEAD"])
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port())
}

async fn wait_port(port: u16) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    while Instant::now() < deadline {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    bail!("nothing listens on {addr}")
}

fn start_daemon(root: &Path, port: u16) -> anyhow::Result<Child> {
    use std::os::unix::process::CommandExt;
    let child = Command::new("git")
        .arg("daemon")
        .arg("--reuseaddr")
        .arg("--export-all")
        .arg("--enable=receive-pack")
        .arg("--informative-errors")
        .arg("--listen=127.0.0.1")
        .arg(format!("--port={port}"))
        .arg(format!("--base-path={}", root.display()))
        .arg(root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .context("starting git daemon (is git installed? run scripts/setup.sh)")?;
    Ok(child)
}

struct HttpState {
    root: PathBuf,
    ref_advertisements: std::sync::atomic::AtomicU64,
    upload_packs: std::sync::atomic::AtomicU64,
}

/// Bridge one HTTP request to `git http-backend` (CGI).
///
/// Written by hand because no maintained crate serves CGI from axum; a test server needs only the
/// handful of CGI variables git reads, with whole bodies buffered.
async fn cgi(State(state): State<Arc<HttpState>>, req: Request) -> Response {
    if !authorised(req.headers()) {
        let mut resp = (StatusCode::UNAUTHORIZED, "authentication required\n").into_response();
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"capstan-test\""),
        );
        return resp;
    }
    {
        use std::sync::atomic::Ordering;
        let path = req.uri().path();
        if path.ends_with("/info/refs") {
            state.ref_advertisements.fetch_add(1, Ordering::Relaxed);
        } else if path.ends_with("/git-upload-pack") {
            state.upload_packs.fetch_add(1, Ordering::Relaxed);
        }
    }
    match run_backend(&state.root, req).await {
        Ok(resp) => resp,
        Err(err) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("git http-backend: {err:#}\n"),
        )
            .into_response(),
    }
}

fn authorised(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let Some(encoded) = value.strip_prefix("Basic ") else {
        return false;
    };
    let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else {
        return false;
    };
    decoded == format!("{USER}:{PASSWORD}").as_bytes()
}

/// As on the forges people use (GitHub, GitLab), a repository's path is case-insensitive over HTTP:
/// `/Services-Root.git/info/refs` is served from `services-root.git` when only that exists.
fn forge_path(root: &Path, path: &str) -> String {
    let rest = path.trim_start_matches('/');
    let (repo, tail) = rest.split_once('/').map_or((rest, None), |(r, t)| (r, Some(t)));
    if repo.is_empty() || root.join(repo).exists() {
        return path.to_string();
    }
    let found = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .find(|name| name.eq_ignore_ascii_case(repo));
    match (found, tail) {
        (Some(name), Some(tail)) => format!("/{name}/{tail}"),
        (Some(name), None) => format!("/{name}"),
        (None, _) => path.to_string(),
    }
}

async fn run_backend(root: &Path, req: Request) -> anyhow::Result<Response> {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, 512 * 1024 * 1024).await?;
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let mut cmd = tokio::process::Command::new("git");
    cmd.arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .env("REQUEST_METHOD", parts.method.as_str())
        .env("PATH_INFO", forge_path(root, parts.uri.path()))
        .env("QUERY_STRING", parts.uri.query().unwrap_or(""))
        .env("CONTENT_TYPE", header("content-type"))
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("HTTP_CONTENT_ENCODING", header("content-encoding"))
        .env("GIT_PROTOCOL", header("git-protocol"))
        .env("REMOTE_USER", USER)
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().context("starting git http-backend")?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(&body).await?;
    }
    let out = child.wait_with_output().await?;
    parse_cgi(&out.stdout)
}

fn parse_cgi(output: &[u8]) -> anyhow::Result<Response> {
    let split = output
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4))
        .or_else(|| output.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)));
    let Some((end, sep)) = split else {
        bail!("no CGI header in http-backend output")
    };
    let head = std::str::from_utf8(&output[..end])?;
    let mut builder = Response::builder().status(StatusCode::OK);
    for line in head.lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code: u16 = value.split_whitespace().next().unwrap_or("500").parse().unwrap_or(500);
            builder = builder.status(code);
        } else {
            builder = builder.header(name.trim(), value);
        }
    }
    Ok(builder.body(Body::from(output[end + sep..].to_vec()))?)
}

/// TLS for the HTTPS server: a CA and a certificate for `127.0.0.1`/`localhost` made at start, and an
/// axum listener that completes the handshake before handing a connection over.
pub(crate) mod tls {
    use std::net::{Ipv4Addr, SocketAddr};
    use std::sync::Arc;

    use tokio::net::{TcpListener, TcpStream};
    use tokio_rustls::TlsAcceptor;
    use tokio_rustls::rustls;
    use tokio_rustls::server::TlsStream;

    /// A server configuration with a fresh certificate, and the PEM of the CA that signed it.
    pub fn server_config() -> anyhow::Result<(rustls::ServerConfig, String)> {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(rcgen::DnType::CommonName, "Capstan test CA");
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = KeyPair::generate()?;
        let leaf =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?.signed_by(&key, &issuer)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )?;
        Ok((config, ca_cert.pem()))
    }

    /// A fresh CA and a certificate for `127.0.0.1`/`localhost` signed by it, as PEM:
    /// (certificate, private key, CA), for servers configured with files.
    pub fn pem_files() -> anyhow::Result<(String, String, String)> {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(rcgen::DnType::CommonName, "Capstan test CA");
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = KeyPair::generate()?;
        let leaf =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?.signed_by(&key, &issuer)?;
        Ok((leaf.pem(), key.serialize_pem(), ca_cert.pem()))
    }

    /// A loopback listener whose connections are TLS streams.
    pub struct TlsListener {
        tcp: TcpListener,
        acceptor: TlsAcceptor,
    }

    impl TlsListener {
        pub async fn bind(config: rustls::ServerConfig) -> anyhow::Result<TlsListener> {
            Ok(TlsListener {
                tcp: TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?,
                acceptor: TlsAcceptor::from(Arc::new(config)),
            })
        }

        pub fn port(&self) -> anyhow::Result<u16> {
            Ok(self.tcp.local_addr()?.port())
        }
    }

    impl axum::serve::Listener for TlsListener {
        type Io = TlsStream<TcpStream>;
        type Addr = SocketAddr;

        async fn accept(&mut self) -> (Self::Io, Self::Addr) {
            loop {
                let Ok((tcp, addr)) = self.tcp.accept().await else {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    continue;
                };
                // A client that refuses the certificate fails its handshake: wait for the next one.
                if let Ok(Ok(stream)) =
                    tokio::time::timeout(std::time::Duration::from_secs(10), self.acceptor.accept(tcp)).await
                {
                    return (stream, addr);
                }
            }
        }

        fn local_addr(&self) -> std::io::Result<Self::Addr> {
            self.tcp.local_addr()
        }
    }
}

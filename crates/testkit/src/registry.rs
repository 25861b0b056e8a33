//! A throwaway OCI registry: Debian's `docker-registry` (distribution 2.8, installed by
//! `scripts/setup.sh` into `~/.cache/capstan/bin`) serving a temporary directory on a free loopback
//! port, from a configuration file written here: optionally behind htpasswd basic auth (bcrypt
//! hashes made with the `bcrypt` crate) and optionally over TLS (a certificate from a CA made at
//! start). Stopped when dropped.
//!
//! [`Registry::sharing`] starts a second registry on the same storage: tests push with the plain,
//! open one (`helm push --plain-http`; helm 3.10 spoke plain HTTP to loopback registries unasked
//! and had no flag for a private CA) and read through the authenticated or TLS one.

use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::charts::run_helm;
use crate::git::tls;

/// How a [`Registry`] serves.
#[derive(Debug, Clone, Default)]
pub struct RegistryOptions {
    /// Require HTTP basic auth (htpasswd) with this user name and password.
    pub basic_auth: Option<(String, String)>,
    /// Serve HTTPS with a certificate from a CA made at start ([`Registry::ca_pem`]).
    pub tls: bool,
}

/// A running `docker-registry`.
pub struct Registry {
    dir: tempfile::TempDir,
    storage: Arc<tempfile::TempDir>,
    port: u16,
    ca_pem: Option<String>,
    child: Child,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    /// Start a registry with empty storage.
    pub async fn start(options: RegistryOptions) -> anyhow::Result<Registry> {
        let storage = Arc::new(tempfile::Builder::new().prefix("capstan-registry-data-").tempdir()?);
        Self::serve(storage, options).await
    }

    /// Start another registry serving the same storage as `self`.
    pub async fn sharing(&self, options: RegistryOptions) -> anyhow::Result<Registry> {
        Self::serve(self.storage.clone(), options).await
    }

    async fn serve(storage: Arc<tempfile::TempDir>, options: RegistryOptions) -> anyhow::Result<Registry> {
        let binary = capstan_playground::binaries::find("docker-registry")
            .context("docker-registry is installed by scripts/setup.sh")?;
        let dir = tempfile::Builder::new().prefix("capstan-registry-").tempdir()?;
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port();
        let mut http = format!("http:\n  addr: 127.0.0.1:{port}\n  secret: capstan-test-secret\n");
        let mut ca_pem = None;
        if options.tls {
            let (cert, key, ca) = tls::pem_files()?;
            std::fs::write(dir.path().join("cert.pem"), cert)?;
            std::fs::write(dir.path().join("key.pem"), key)?;
            http.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                dir.path().join("cert.pem").display(),
                dir.path().join("key.pem").display()
            ));
            ca_pem = Some(ca);
        }
        let mut auth = String::new();
        if let Some((user, password)) = &options.basic_auth {
            let hash = bcrypt::hash(password, 4)?;
            std::fs::write(dir.path().join("htpasswd"), format!("{user}:{hash}\n"))?;
            auth = format!(
                "auth:\n  htpasswd:\n    realm: capstan-test\n    path: {}\n",
                dir.path().join("htpasswd").display()
            );
        }
        let config = format!(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n{http}{auth}",
            storage.path().display()
        );
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config)?;
        let log = std::fs::File::create(dir.path().join("registry.log"))?;
        let child = Command::new(binary)
            .arg("serve")
            .arg(&config_path)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting docker-registry")?;
        let mut registry = Registry {
            dir,
            storage,
            port,
            ca_pem,
            child,
        };
        registry.wait_ready().await?;
        Ok(registry)
    }

    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(15);
        let addr = std::net::SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                bail!("docker-registry exited ({status}): {}", self.log());
            }
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        bail!("docker-registry did not listen on {addr}: {}", self.log())
    }

    /// The registry's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// `127.0.0.1:PORT`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `oci://127.0.0.1:PORT/PATH`.
    pub fn oci_url(&self, path: &str) -> String {
        format!("oci://{}/{}", self.host(), path.trim_matches('/'))
    }

    /// The PEM of the CA that signed the TLS certificate.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// The storage directory (shared with registries started by [`Registry::sharing`]).
    pub fn storage(&self) -> &Path {
        self.storage.path()
    }

    /// `helm push ARCHIVE oci://127.0.0.1:PORT/PATH` with the real helm (this registry must be plain
    /// HTTP and open).
    /// Helm 3.13 and newer ask for plain HTTP with `--plain-http`; older ones (3.10) speak it to
    /// loopback registries unasked and know no such flag.
    pub fn push_chart(&self, archive: &Path, path: &str) -> anyhow::Result<()> {
        let home = tempfile::Builder::new().prefix("capstan-helm-home-").tempdir()?;
        let archive = archive.to_string_lossy();
        let url = self.oci_url(path);
        let mut args = vec!["push", archive.as_ref(), url.as_str()];
        if run_helm(home.path(), &["push", "--help"])?.contains("--plain-http") {
            args.push("--plain-http");
        }
        run_helm(home.path(), &args)?;
        Ok(())
    }

    /// Upload `blobs` and a manifest (raw JSON) under `reference` in `repository`, with the
    /// registry API itself — for manifests `helm push` would never write (wrong media types).
    pub fn put_raw(
        &self,
        repository: &str,
        reference: &str,
        blobs: &[&[u8]],
        manifest: &[u8],
        media_type: &str,
    ) -> anyhow::Result<()> {
        let base = format!("http://{}", self.host());
        let agent = ureq::Agent::new_with_defaults();
        for blob in blobs {
            let digest = sha256_digest(blob);
            let start = agent
                .post(&format!("{base}/v2/{repository}/blobs/uploads/"))
                .send_empty()
                .context("starting a blob upload")?;
            let location = start
                .headers()
                .get("location")
                .and_then(|l| l.to_str().ok())
                .context("upload without a Location")?
                .to_string();
            let location = if location.starts_with("http") {
                location
            } else {
                format!("{base}{location}")
            };
            let sep = if location.contains('?') { '&' } else { '?' };
            agent
                .put(&format!("{location}{sep}digest={digest}"))
                .header("Content-Type", "application/octet-stream")
                .send(*blob)
                .context("uploading a blob")?;
        }
        agent
            .put(&format!("{base}/v2/{repository}/manifests/{reference}"))
            .header("Content-Type", media_type)
            .send(manifest)
            .context("putting the manifest")?;
        Ok(())
    }
}

/// `sha256:HEX` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    use sha2::Digest;
    let hex: String = sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// Push a small image to `repository:tag` of an open plain-HTTP `registry` with the registry API
/// itself (monolithic blob uploads, then an OCI image manifest) and return the manifest's digest.
/// Each push makes a new image (the config holds a fresh nonce), so re-pushing a tag moves it.
pub fn push_image(registry: &Registry, repository: &str, tag: &str) -> anyhow::Result<String> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static PUSHES: AtomicU64 = AtomicU64::new(0);
    let nonce = format!(
        "{}-{}-{:?}",
        std::process::id(),
        PUSHES.fetch_add(1, Ordering::Relaxed),
        std::time::SystemTime::now()
    );
    let layer = format!("capstan test layer of {repository}:{tag}\n").into_bytes();
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": { "Labels": { "dev.capstan.test.nonce": nonce } },
        "rootfs": { "type": "layers", "diff_ids": [sha256_digest(&layer)] },
    }))?;
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": sha256_digest(&config),
            "size": config.len(),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": sha256_digest(&layer),
            "size": layer.len(),
        }],
    }))?;
    registry.put_raw(
        repository,
        tag,
        &[&config, &layer],
        &manifest,
        "application/vnd.oci.image.manifest.v1+json",
    )?;
    Ok(sha256_digest(&manifest))
}

//! A throwaway SSH git server: OpenSSH's `sshd` on a free loopback port, serving the bare
//! repositories under a directory to one client key, with its own host key.
//!
//! `sshd` comes from Debian's openssh-server package (`scripts/setup.sh` puts the binary in
//! `~/.cache/capstan/bin`; a system `sshd` on `$PATH` or in `/usr/sbin` works too). It runs in the
//! foreground (`-D -e`) with a private configuration: host key, authorized keys, log and no pid file
//! in a temporary directory, no PAM, `StrictModes no` (the temporary directory lives under the
//! world-writable `/tmp`). Started as root it needs its privilege-separation user `sshd` and an empty
//! `/run/sshd` (created here when missing, as sshd's own service unit does); started as another user
//! it runs without privilege separation and can only log that user in.
//!
//! sshd logs clients in as local accounts, so the URLs name the user running the tests (`root` when
//! run as root), not `git`.
//!
//! Besides `ssh://USER@127.0.0.1:PORT/path`, the scp-like form `USER@HOST:path` is served when
//! possible: it cannot carry a port, so sshd also listens on port 22 of a random address of the
//! loopback network 127.0.0.0/8 (binding port 22 needs root; see [`SshGitServer::scp_url`]).

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// `sshd` serving git over SSH on loopback; stopped when dropped.
pub struct SshGitServer {
    dir: tempfile::TempDir,
    repo_root: PathBuf,
    child: Child,
    port: u16,
    scp_host: Option<Ipv4Addr>,
    user: String,
    host_public_key: String,
    client_private_key: String,
    client_public_key: String,
}

impl SshGitServer {
    /// Start sshd serving the repositories under `repo_root` (repositories are addressed by their
    /// path relative to it).
    pub async fn start(repo_root: impl AsRef<Path>) -> anyhow::Result<SshGitServer> {
        let repo_root = repo_root
            .as_ref()
            .canonicalize()
            .with_context(|| format!("repository root {}", repo_root.as_ref().display()))?;
        let sshd = find_sshd()?;
        let dir = tempfile::Builder::new().prefix("capstan-sshd-").tempdir()?;
        let host_key = dir.path().join("host_key");
        let (_, host_public_key) = generate_key_at(&host_key, "capstan-test-host")?;
        let (client_private_key, client_public_key) =
            generate_key_at(&dir.path().join("client_key"), "capstan-test-client")?;
        std::fs::write(dir.path().join("authorized_keys"), format!("{client_public_key}\n"))?;
        let user = current_user()?;
        prepare_privilege_separation()?;

        // A free port can be taken by someone else before sshd binds it: try a few.
        let mut last_error = None;
        for _ in 0..5 {
            let port = free_port()?;
            let scp_host = free_loopback_port_22();
            match spawn(&sshd, dir.path(), &host_key, port, scp_host).await {
                Ok((child, scp_listening)) => {
                    return Ok(SshGitServer {
                        dir,
                        repo_root,
                        child,
                        port,
                        scp_host: scp_host.filter(|_| scp_listening),
                        user,
                        host_public_key,
                        client_private_key,
                        client_public_key,
                    });
                }
                Err(err) => last_error = Some(err),
            }
        }
        Err(last_error.unwrap_or_else(|| anyhow::anyhow!("sshd did not start")))
    }

    /// `ssh://USER@127.0.0.1:PORT/ABSOLUTE/PATH/OF/repo`.
    pub fn url(&self, repo: &str) -> String {
        format!(
            "ssh://{}@127.0.0.1:{}{}",
            self.user,
            self.port,
            self.repo_root.join(repo).display()
        )
    }

    /// The scp-like `USER@127.X.Y.Z:/ABSOLUTE/PATH/OF/repo`, served on port 22 of a loopback address
    /// of its own. Fails when that port could not be bound (not root, or port 22 taken on every
    /// loopback address, e.g. by a system sshd listening on 0.0.0.0).
    pub fn scp_url(&self, repo: &str) -> anyhow::Result<String> {
        let Some(host) = self.scp_host else {
            bail!(
                "the scp-like form needs sshd on port 22 of a loopback address, which could not be bound \
                 (binding port 22 needs root, and nothing may listen on 0.0.0.0:22)"
            );
        };
        Ok(format!("{}@{host}:{}", self.user, self.repo_root.join(repo).display()))
    }

    /// The client's private key (OpenSSH format), the only key the server accepts.
    pub fn private_key(&self) -> String {
        self.client_private_key.clone()
    }

    /// The client's public key line.
    pub fn public_key(&self) -> &str {
        &self.client_public_key
    }

    /// `known_hosts` lines for the server: `[127.0.0.1]:PORT ssh-ed25519 …`, and
    /// `127.X.Y.Z ssh-ed25519 …` for the scp-like form's address when it is served.
    pub fn known_hosts(&self) -> String {
        let mut out = format!("[127.0.0.1]:{} {}\n", self.port, self.host_public_key);
        if let Some(host) = self.scp_host {
            out.push_str(&format!("{host} {}\n", self.host_public_key));
        }
        out
    }

    /// The server's public host key (`ssh-ed25519 AAAA…`).
    pub fn host_public_key(&self) -> &str {
        &self.host_public_key
    }

    /// The port of `ssh://` URLs.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The account clients log in as.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// sshd's log so far (connections, authentication results), for diagnosing a failing test.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sshd.log")).unwrap_or_default()
    }
}

impl Drop for SshGitServer {
    fn drop(&mut self) {
        // Only the listener this server started; sessions end with their clients.
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh ed25519 key pair: (private key in OpenSSH format, public key line).
pub fn generate_key(comment: &str) -> anyhow::Result<(String, String)> {
    let dir = tempfile::Builder::new().prefix("capstan-key-").tempdir()?;
    generate_key_at(&dir.path().join("key"), comment)
}

fn generate_key_at(path: &Path, comment: &str) -> anyhow::Result<(String, String)> {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .context("running ssh-keygen (is openssh-client installed? run scripts/setup.sh)")?;
    if !out.status.success() {
        bail!("ssh-keygen failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let private = std::fs::read_to_string(path)?;
    let public = std::fs::read_to_string(path.with_extension("pub"))?;
    // "ssh-ed25519 AAAA… comment" → without the comment.
    let public: Vec<&str> = public.split_whitespace().take(2).collect();
    Ok((private, public.join(" ")))
}

fn find_sshd() -> anyhow::Result<PathBuf> {
    let found = capstan_playground::binaries::find("sshd").or_else(|err| {
        let system = PathBuf::from("/usr/sbin/sshd");
        if system.is_file() { Ok(system) } else { Err(err) }
    })?;
    // sshd re-executes itself and insists on an absolute path.
    Ok(found.canonicalize()?)
}

fn current_user() -> anyhow::Result<String> {
    id("-un")
}

fn is_root() -> anyhow::Result<bool> {
    Ok(id("-u")? == "0")
}

/// `id FLAG` (the `nix` features for user lookups are not enabled in this workspace).
fn id(flag: &str) -> anyhow::Result<String> {
    let out = Command::new("id")
        .arg(flag)
        .output()
        .with_context(|| format!("running id {flag}"))?;
    let value = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || value.is_empty() {
        bail!("id {flag} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(value)
}

/// As root, sshd chroots its unprivileged child into an empty root-owned /run/sshd (a tmpfs
/// directory, gone after a reboot) running as user `sshd`.
fn prepare_privilege_separation() -> anyhow::Result<()> {
    if !is_root()? {
        return Ok(());
    }
    let known = Command::new("getent")
        .args(["passwd", "sshd"])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !known {
        bail!("sshd's privilege-separation user `sshd` does not exist: run scripts/setup.sh");
    }
    let run = Path::new("/run/sshd");
    if !run.is_dir() {
        use std::os::unix::fs::DirBuilderExt;
        match std::fs::DirBuilder::new().mode(0o755).create(run) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e).context("creating /run/sshd"),
        }
    }
    Ok(())
}

async fn spawn(
    sshd: &Path,
    dir: &Path,
    host_key: &Path,
    port: u16,
    scp_host: Option<Ipv4Addr>,
) -> anyhow::Result<(Child, bool)> {
    let mut config = format!(
        "ListenAddress 127.0.0.1:{port}\n\
         HostKey {host_key}\n\
         AuthorizedKeysFile {keys}\n\
         PidFile none\n\
         UsePAM no\n\
         StrictModes no\n\
         PubkeyAuthentication yes\n\
         AuthenticationMethods publickey\n\
         PasswordAuthentication no\n\
         KbdInteractiveAuthentication no\n\
         PermitRootLogin prohibit-password\n\
         PermitUserEnvironment no\n\
         AllowTcpForwarding no\n\
         AllowAgentForwarding no\n\
         X11Forwarding no\n\
         PermitTTY no\n\
         PrintMotd no\n\
         LogLevel VERBOSE\n",
        host_key = host_key.display(),
        keys = dir.join("authorized_keys").display(),
    );
    if let Some(host) = scp_host {
        config.push_str(&format!("ListenAddress {host}:22\n"));
    }
    let config_path = dir.join("sshd_config");
    std::fs::write(&config_path, config)?;
    let log = std::fs::File::create(dir.join("sshd.log"))?;
    let mut child = Command::new(sshd)
        .arg("-D")
        .arg("-e")
        .arg("-f")
        .arg(&config_path)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", sshd.display()))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    let main = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    loop {
        if let Some(status) = child.try_wait()? {
            let log = std::fs::read_to_string(dir.join("sshd.log")).unwrap_or_default();
            bail!("sshd exited ({status}) before listening on {main}:\n{log}");
        }
        if tokio::net::TcpStream::connect(main).await.is_ok() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("sshd did not listen on {main} within 10 s");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // Both addresses are bound before sshd accepts on either.
    let scp_listening = match scp_host {
        Some(host) => tokio::net::TcpStream::connect((host, 22)).await.is_ok(),
        None => false,
    };
    Ok((child, scp_listening))
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port())
}

/// A random loopback address (127.X.Y.Z, not 127.0.0.1) whose port 22 can be bound now.
fn free_loopback_port_22() -> Option<Ipv4Addr> {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0)
        ^ std::process::id().rotate_left(16);
    for i in 0..4u32 {
        let n = seed.wrapping_add(i.wrapping_mul(0x9e37_79b9));
        let addr = Ipv4Addr::new(
            127,
            1 + (n % 250) as u8,
            ((n >> 8) % 256) as u8,
            1 + ((n >> 16) % 250) as u8,
        );
        if TcpListener::bind((addr, 22)).is_ok() {
            return Some(addr);
        }
    }
    None
}

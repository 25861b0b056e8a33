//! The external rendering tools: finding the `helm` and `kustomize` binaries (in
//! `$CAPSTAN_CACHE/bin`, default `~/.cache/capstan/bin`, filled by `scripts/setup.sh`, then `$PATH`),
//! running them as a [`Tool`] — confined by the kernel ([`capstan_sandbox`]: it reads only the
//! repository and its scratch, writes only its scratch, executes only itself and the programs it was
//! given, opens no TCP connection, and dies with its whole process group), with a scrubbed
//! environment and `HOME` in a scratch directory, so no cloud credentials, `KUBECONFIG`, SSH agent or
//! proxy settings of the controller reach it — with a timeout and a cap on its output, and memoising
//! tool versions for render cache keys.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use capstan_sandbox::{Confinement, Limits, ProcessGroup};
use tokio::process::Command;

use crate::RenderError;

/// The directory `scripts/setup.sh` installs binaries into.
pub fn cache_bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CAPSTAN_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("bin");
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root"));
    home.join(".cache").join("capstan").join("bin")
}

/// Find the executable `name` in the Capstan cache, then on `$PATH`.
pub fn find(name: &str) -> Result<PathBuf, RenderError> {
    let cache = cache_bin_dir();
    let mut dirs = vec![cache.clone()];
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.iter()
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
        .ok_or_else(|| RenderError::ToolNotFound {
            binary: name.to_string(),
            searched: format!("{} and $PATH", cache.display()),
        })
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Most standard output read from one tool run (a rendered stream of manifests).
pub const MAX_OUTPUT_BYTES: u64 = 128 * 1024 * 1024;
/// Most standard error kept from one tool run (for the error message).
const MAX_STDERR_BYTES: u64 = 64 * 1024;

/// A tool run: the command and the confinement it starts in. There is no other way to run a tool
/// ([`run`] takes a `Tool`), so none runs unconfined. It dereferences to its [`Command`] for the
/// arguments and the working directory.
pub(crate) struct Tool {
    command: Command,
    confinement: Confinement,
}

impl Tool {
    /// The tool may also read `path` (the repository, a `$ref` source, a fetched chart).
    pub fn read(&mut self, path: &Path) -> &mut Self {
        self.confinement = self.confinement.clone().read(path);
        self
    }

    /// The tool may also write beneath `path` (a scratch copy it edits).
    pub fn write(&mut self, path: &Path) -> &mut Self {
        self.confinement = self.confinement.clone().write(path);
        self
    }

    /// The tool may also start `program` (Kustomize's helm).
    pub fn exec(&mut self, program: &Path) -> &mut Self {
        self.confinement = self.confinement.clone().exec(program);
        self
    }
}

impl std::ops::Deref for Tool {
    type Target = Command;
    fn deref(&self) -> &Command {
        &self.command
    }
}

impl std::ops::DerefMut for Tool {
    fn deref_mut(&mut self) -> &mut Command {
        &mut self.command
    }
}

/// A tool run of `binary` with nothing of the controller's environment but a fixed `PATH`, and
/// `HOME`, the XDG directories and `TMPDIR` under `home` (a scratch directory the caller owns, which
/// the tool may write). It may read nothing else until the caller grants it ([`Tool::read`]).
pub(crate) fn sandboxed(binary: &Path, home: &Path) -> Tool {
    let mut cmd = Command::new(binary);
    cmd.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("LC_ALL", "C")
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_CACHE_HOME", home.join("cache"))
        .env("XDG_DATA_HOME", home.join("data"))
        .env("TMPDIR", home)
        // Should a tool run git anyway (a remote reference that slipped through), no transport works.
        .env("GIT_ALLOW_PROTOCOL", "capstan-none")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        // Should a tool try to download anyway (Kustomize pulling a chart that was not vendored), its
        // HTTP client is sent to a closed loopback port instead of the network.
        .env("HTTP_PROXY", "http://127.0.0.1:9")
        .env("HTTPS_PROXY", "http://127.0.0.1:9")
        .env("http_proxy", "http://127.0.0.1:9")
        .env("https_proxy", "http://127.0.0.1:9");
    // The binary as found may be a link (the cache's `helm`); the kernel checks the file it runs.
    let program = std::fs::canonicalize(binary).unwrap_or_else(|_| binary.to_path_buf());
    Tool {
        command: cmd,
        confinement: Confinement::new(program).write(home),
    }
}

/// What identifies a tool for caching: its path, version output, size and modification time (the
/// packaged `kustomize` reports only `(devel)`), computed once per binary and process.
pub(crate) async fn identity(binary: &Path, version_args: &[&str], timeout: Duration) -> Result<String, RenderError> {
    static IDENTITIES: OnceLock<Mutex<HashMap<PathBuf, String>>> = OnceLock::new();
    let memo = IDENTITIES.get_or_init(Default::default);
    if let Some(id) = memo.lock().unwrap_or_else(|e| e.into_inner()).get(binary) {
        return Ok(id.clone());
    }
    let name = binary
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let home = tempfile::Builder::new()
        .prefix("capstan-tool-")
        .tempdir()
        .map_err(|e| RenderError::io("cannot create a scratch directory", e))?;
    let mut cmd = sandboxed(binary, home.path());
    cmd.args(version_args);
    let command = format!("{name} {}", version_args.join(" "));
    // Asking for a version must not be cut short by a tiny render timeout.
    let version = run(cmd, &command, ".", timeout.max(Duration::from_secs(30))).await?;
    let meta =
        std::fs::metadata(binary).map_err(|e| RenderError::io(format!("cannot inspect {}", binary.display()), e))?;
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let id = format!("{} {} {} {}", binary.display(), version.trim(), meta.len(), modified);
    memo.lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(binary.to_path_buf(), id.clone());
    Ok(id)
}

/// Run `cmd` to completion within `timeout` and return its standard output. On timeout the process is
/// killed; on failure the error carries its trimmed standard error. `command` (e.g. `helm template`)
/// and `path` (the Application's path) name it in errors.
pub(crate) async fn run(tool: Tool, command: &str, path: &str, timeout: Duration) -> Result<String, RenderError> {
    let Tool {
        command: mut cmd,
        confinement,
    } = tool;
    confinement
        .limits(Limits::for_tool(timeout.as_secs().max(1)))
        .apply(&mut cmd)?;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let program = PathBuf::from(cmd.as_std().get_program());
    let args: Vec<&OsStr> = cmd.as_std().get_args().collect();
    tracing::debug!(program = %program.display(), ?args, "running");
    let mut child = cmd.spawn().map_err(|source| RenderError::Spawn {
        program: program.clone(),
        source,
    })?;
    // Whatever happens next (output, failure, timeout, the caller giving up), nothing the tool
    // started outlives this run.
    let _group = ProcessGroup::of(child.id());
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(RenderError::Task(format!("{command}: no output pipes")));
    };
    // Standard error is drained to its end (a tool blocked on a full pipe would never finish), and
    // only its beginning kept.
    let stderr_task = tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut kept = Vec::new();
        let mut limited = stderr.take(MAX_STDERR_BYTES);
        limited.read_to_end(&mut kept).await?;
        tokio::io::copy(&mut limited.into_inner(), &mut tokio::io::sink()).await?;
        Ok::<_, std::io::Error>(kept)
    });
    let read = async {
        use tokio::io::AsyncReadExt;
        let mut out = Vec::new();
        stdout.take(MAX_OUTPUT_BYTES + 1).read_to_end(&mut out).await?;
        Ok::<_, std::io::Error>(out)
    };
    let output = match tokio::time::timeout(timeout, async {
        let out = read.await?;
        if out.len() as u64 > MAX_OUTPUT_BYTES {
            // Killed on drop: the rest of the output is never read.
            return Ok(None);
        }
        let status = child.wait().await?;
        let err = stderr_task.await.map_err(std::io::Error::other)??;
        Ok::<_, std::io::Error>(Some(std::process::Output {
            status,
            stdout: out,
            stderr: err,
        }))
    })
    .await
    {
        Ok(Ok(Some(output))) => output,
        Ok(Ok(None)) => {
            return Err(RenderError::OutputTooLarge {
                command: command.to_string(),
                path: path.to_string(),
                limit: format!("{} MiB", MAX_OUTPUT_BYTES / 1024 / 1024),
            });
        }
        Ok(Err(e)) => return Err(RenderError::io(format!("waiting for {command}"), e)),
        // Dropping the future drops the child, which kills it.
        Err(_) => {
            return Err(RenderError::Timeout {
                command: command.to_string(),
                path: path.to_string(),
                after: human_duration(timeout),
            });
        }
    };
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
    if !output.status.success() {
        let stderr = if stderr.is_empty() {
            let stdout = String::from_utf8_lossy(&output.stdout).trim().to_string();
            if stdout.is_empty() {
                format!("exited with {}", output.status)
            } else {
                stdout
            }
        } else {
            stderr
        };
        return Err(RenderError::ToolFailed {
            command: command.to_string(),
            path: path.to_string(),
            stderr,
        });
    }
    if !stderr.is_empty() {
        tracing::debug!(%command, %path, %stderr, "tool warnings");
    }
    String::from_utf8(output.stdout).map_err(|_| RenderError::ToolFailed {
        command: command.to_string(),
        path: path.to_string(),
        stderr: "output is not UTF-8".to_string(),
    })
}

/// `60 s`, `1.5 s`, `250 ms`.
pub(crate) fn human_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{} s", d.as_secs())
    } else if d.as_secs() == 0 {
        format!("{} ms", d.as_millis())
    } else {
        format!("{} s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human_duration(Duration::from_secs(60)), "60 s");
        assert_eq!(human_duration(Duration::from_millis(1)), "1 ms");
        assert_eq!(human_duration(Duration::from_millis(1500)), "1.5 s");
    }

    /// The walls hold even when an option reaches a tool (every check in front of them bypassed):
    /// the real helm told to post-render with the repository's script cannot start it, and the real
    /// kustomize can neither read another checkout nor fetch from a loopback service.
    #[tokio::test]
    async fn tools_told_to_escape_cannot() {
        use std::os::unix::fs::PermissionsExt;
        let (Ok(helm), Ok(kustomize)) = (find("helm"), find("kustomize")) else {
            panic!("helm and kustomize are installed by scripts/setup.sh");
        };
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        let other = dir.path().join("other-team");
        let home = dir.path().join("home");
        for d in [repo.join("chart/templates"), other.clone(), home.clone()] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(
            repo.join("chart/Chart.yaml"),
            "apiVersion: v2\nname: web\nversion: 0.1.0\n",
        )
        .unwrap();
        std::fs::write(
            repo.join("chart/templates/cm.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\n",
        )
        .unwrap();
        let marker = dir.path().join("pwned");
        let script = repo.join("evil.sh");
        std::fs::write(&script, format!("#!/bin/sh\ntouch {}\ncat\n", marker.display())).unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(other.join("kustomization.yaml"), "resources: [secret.yaml]\n").unwrap();
        std::fs::write(
            other.join("secret.yaml"),
            "apiVersion: v1\nkind: Secret\nmetadata: {name: theirs}\n",
        )
        .unwrap();
        let timeout = Duration::from_secs(30);

        let mut cmd = sandboxed(&helm, &home);
        cmd.read(&repo);
        cmd.arg("template")
            .arg(format!("--post-renderer={}", script.display()))
            .arg("web")
            .arg(repo.join("chart"));
        let err = run(cmd, "helm template", "chart", timeout)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.to_lowercase().contains("permission denied"), "{err}");
        assert!(!marker.exists(), "the post-renderer ran");

        let mut cmd = sandboxed(&kustomize, &home);
        cmd.read(&repo);
        cmd.arg("build").arg(&other);
        // Kustomize cannot even see the other checkout's kustomization (the kernel answers EACCES,
        // which Kustomize reports as not found); a control run allowed to read it succeeds.
        let err = run(cmd, "kustomize build", "app", timeout)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unable to find") || err.to_lowercase().contains("permission denied"),
            "{err}"
        );
        assert!(!err.contains("theirs"), "{err}");
        let mut cmd = sandboxed(&kustomize, &home);
        cmd.read(&other);
        cmd.arg("build").arg(&other);
        let out = run(cmd, "kustomize build", "app", timeout)
            .await
            .expect("allowed, it builds");
        assert!(out.contains("theirs"), "{out}");

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        std::fs::create_dir_all(repo.join("remote")).unwrap();
        std::fs::write(
            repo.join("remote/kustomization.yaml"),
            format!("resources: [http://127.0.0.1:{port}/cm.yaml]\n"),
        )
        .unwrap();
        let mut cmd = sandboxed(&kustomize, &home);
        cmd.read(&repo);
        // Without the closed proxy: the kernel alone must stop the connection.
        cmd.env_remove("HTTP_PROXY").env_remove("http_proxy");
        cmd.arg("build").arg(repo.join("remote"));
        let err = run(cmd, "kustomize build", "remote", timeout)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.to_lowercase().contains("permission denied"), "{err}");
        assert_eq!(
            listener.accept().map(|_| ()).map_err(|e| e.kind()),
            Err(std::io::ErrorKind::WouldBlock),
            "kustomize reached the loopback service"
        );
    }

    #[test]
    fn missing_binary_names_setup_script() {
        let err = find("capstan-no-such-tool").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("capstan-no-such-tool") && msg.contains("scripts/setup.sh"),
            "{msg}"
        );
    }
}

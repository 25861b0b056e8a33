//! The external rendering tools: finding the `helm` and `kustomize` binaries (in
//! `$CAPSTAN_CACHE/bin`, default `~/.cache/capstan/bin`, filled by `scripts/setup.sh`, then `$PATH`),
//! running them sandboxed — a scrubbed environment with `HOME` in a scratch directory, so no cloud
//! credentials, `KUBECONFIG`, SSH agent or proxy settings of the controller reach them — with a
//! timeout and a cap on their output, and memoising their versions for render cache keys.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

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

/// A command for `binary` with nothing of the controller's environment but a fixed `PATH`, and
/// `HOME`, the XDG directories and `TMPDIR` under `home` (a scratch directory the caller owns).
pub(crate) fn sandboxed(binary: &Path, home: &Path) -> Command {
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
    cmd
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
    let home = std::env::temp_dir();
    let mut cmd = sandboxed(binary, &home);
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
pub(crate) async fn run(mut cmd: Command, command: &str, path: &str, timeout: Duration) -> Result<String, RenderError> {
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

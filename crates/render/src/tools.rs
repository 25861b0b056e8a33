//! The external rendering tools: finding the `helm` and `kustomize` binaries (in
//! `$CAPSTAN_CACHE/bin`, default `~/.cache/capstan/bin`, filled by `scripts/setup.sh`, then `$PATH`),
//! running them with a timeout, and memoising their versions for render cache keys.

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
    let mut cmd = Command::new(binary);
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
    let child = cmd.spawn().map_err(|source| RenderError::Spawn {
        program: program.clone(),
        source,
    })?;
    let output = match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(output)) => output,
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

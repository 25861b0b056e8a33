//! Checkouts: the read-only tree of one commit per directory, extracted from a repository's bare cache
//! by streaming `git archive` into `tar` (stopped at the checkout size limit), handed out as leases
//! ([`Checkout`]) and evicted least recently used beyond the limit, never while a lease is held.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::git::{GitCommand, is_full_sha, redact};
use crate::limits::{Limits, SizeLimit};
use crate::{Credentials, Result, SourceError};

/// A checked-out commit. Its directory is not removed while this value (or a clone) is alive; it
/// dereferences to the directory's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkout {
    path: PathBuf,
    _lease: Arc<()>,
}

impl Checkout {
    /// The directory holding the commit's tree.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl std::ops::Deref for Checkout {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for Checkout {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

/// Where one repository's checkouts come from and go, and what they may cost.
pub(crate) struct Place<'a> {
    /// The repository's URL (redacted in messages and logs).
    pub url: &'a str,
    /// The repository's bare cache, which `git archive` reads.
    pub bare: &'a Path,
    /// The directory holding one directory per checked-out commit.
    pub dir: &'a Path,
    /// How long git and tar may take.
    pub timeout: Duration,
    /// Whether the `file` transport is allowed.
    pub allow_local: bool,
    /// Size of a tree and number of checkouts kept.
    pub limits: Limits,
}

/// The checkouts of one repository on disk, by commit.
#[derive(Default)]
pub(crate) struct Checkouts {
    /// Checkouts on disk by commit; `used` is `None` for those found on disk from an earlier run.
    kept: HashMap<String, Kept>,
    /// Whether checkouts left on disk by an earlier run have been listed.
    scanned: bool,
}

/// A checkout on disk: when it was last handed out, and its lease (held by every [`Checkout`]).
struct Kept {
    used: Option<Instant>,
    lease: Arc<()>,
}

impl Checkouts {
    /// The tree of commit `sha` (a full SHA present in the bare cache) in `place`, extracted once per
    /// commit; callers must not modify it. It stays on disk at least as long as the returned
    /// [`Checkout`] is held.
    pub(crate) async fn checkout(&mut self, place: &Place<'_>, sha: &str) -> Result<Checkout> {
        let target = place.dir.join(sha);
        if !target.is_dir() {
            std::fs::create_dir_all(place.dir).map_err(SourceError::io(format!("creating {}", place.dir.display())))?;
            // Removed on every way out but the rename, including a caller that stops waiting.
            let staging = Staging(place.dir.join(format!(".{sha}.tmp")));
            let _ = std::fs::remove_dir_all(&staging.0);
            std::fs::create_dir_all(&staging.0)
                .map_err(SourceError::io(format!("creating {}", staging.0.display())))?;
            export(place, sha, &staging.0).await?;
            std::fs::rename(&staging.0, &target)
                .map_err(SourceError::io(format!("moving checkout to {}", target.display())))?;
        }
        let kept = self.kept.entry(sha.to_string()).or_insert_with(|| Kept {
            used: None,
            lease: Arc::new(()),
        });
        kept.used = Some(Instant::now());
        let checkout = Checkout {
            path: target,
            _lease: kept.lease.clone(),
        };
        self.evict(place);
        Ok(checkout)
    }

    /// Remove the least recently used checkouts of `repo` that nobody holds, beyond the limit.
    fn evict(&mut self, place: &Place<'_>) {
        if !self.scanned {
            self.scanned = true;
            // Checkouts left by an earlier run are the first to go; half-written ones go now.
            for entry in std::fs::read_dir(place.dir).into_iter().flatten().flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if is_full_sha(&name) {
                    self.kept.entry(name).or_insert_with(|| Kept {
                        used: None,
                        lease: Arc::new(()),
                    });
                } else if name.starts_with('.') && name.ends_with(".tmp") {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
        while self.kept.len() > place.limits.max_checkouts {
            let Some(oldest) = self
                .kept
                .iter()
                .filter(|(_, kept)| Arc::strong_count(&kept.lease) == 1)
                .min_by_key(|(_, kept)| kept.used)
                .map(|(sha, _)| sha.clone())
            else {
                break;
            };
            self.kept.remove(&oldest);
            let dir = place.dir.join(&oldest);
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => tracing::debug!(url = %redact(place.url, &[]), sha = %oldest, "checkout evicted"),
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => tracing::warn!(dir = %dir.display(), "removing an evicted checkout: {err}"),
            }
        }
    }
}

/// Stream `git archive SHA` into `tar -x` in `dest`, stopping at the checkout size limit.
async fn export(place: &Place<'_>, sha: &str, dest: &Path) -> Result<()> {
    use tokio::io::AsyncReadExt;
    let none = Credentials::none();
    let git = GitCommand {
        url: place.url,
        credentials: &none,
        timeout: place.timeout,
        allow_local: place.allow_local,
        operation: "exporting",
    };
    let (mut archive, _archive_guard) =
        git.spawn(Some(place.bare), &["archive", "--format=tar", "--end-of-options", sha])?;
    // tar unpacks content a tenant wrote: it may write only beneath the new checkout (no entry, link
    // or `..` can land elsewhere), read nothing else, start nothing, and connect nowhere.
    let tar_program = crate::git::find_program("tar");
    let mut tar_cmd = tokio::process::Command::new(&tar_program);
    capstan_sandbox::Confinement::new(&tar_program)
        .write(dest)
        .limits(capstan_sandbox::Limits::for_tool(place.timeout.as_secs().max(1)))
        .apply(&mut tar_cmd)?;
    let mut tar = tar_cmd
        .args(["-x", "--no-same-owner", "--no-same-permissions", "-C"])
        .arg(dest)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(SourceError::io("running tar"))?;
    let _tar_group = capstan_sandbox::ProcessGroup::of(tar.id());
    let (Some(stdout), Some(mut stdin)) = (archive.stdout.take(), tar.stdin.take()) else {
        return Err(SourceError::io("exporting a checkout")(std::io::Error::other(
            "no pipe",
        )));
    };
    let limit = place.limits.max_checkout_bytes;
    let copy = async {
        // One byte more than the limit tells a tree at the limit from a larger one.
        let mut bounded = stdout.take(limit.saturating_add(1));
        let copied = tokio::io::copy(&mut bounded, &mut stdin).await;
        drop(stdin);
        copied
    };
    // Both error streams are read while the tree streams: a tool blocked writing its complaints
    // would stop reading its input and stall the copy.
    let work = async { tokio::join!(copy, drain(archive.stderr.take()), drain(tar.stderr.take())) };
    let (copied, git_stderr, tar_stderr) = match tokio::time::timeout(place.timeout, work).await {
        Ok(done) => done,
        Err(_) => return Err(git.timed_out()),
    };
    let tar_failed = |stderr: &[u8]| SourceError::Io {
        context: format!("extracting a checkout into {}", dest.display()),
        source: std::io::Error::other(String::from_utf8_lossy(stderr).trim().to_string()),
    };
    let copied = match copied {
        Ok(copied) => copied,
        // tar stopped reading: what it said is the reason.
        Err(err) if !tar_stderr.is_empty() => {
            tracing::debug!("copying into tar: {err}");
            return Err(tar_failed(&tar_stderr));
        }
        Err(err) => return Err(SourceError::io("extracting a checkout")(err)),
    };
    if copied > limit {
        return Err(SourceError::TooLarge {
            what: SizeLimit::Checkout,
            url: redact(place.url, &[]),
            limit_mib: limit >> 20,
        });
    }
    let waited = tokio::time::timeout(place.timeout, async { tokio::join!(archive.wait(), tar.wait()) }).await;
    let Ok((archived, extracted)) = waited else {
        return Err(git.timed_out());
    };
    let archived = archived.map_err(SourceError::io("waiting for git archive"))?;
    git.check(&archived, &git_stderr)?;
    let extracted = extracted.map_err(SourceError::io("waiting for tar"))?;
    if !extracted.success() {
        return Err(tar_failed(&tar_stderr));
    }
    Ok(())
}

/// Checkouts on disk in `dir` (one repository's checkouts directory).
pub(crate) fn on_disk(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| is_full_sha(&e.file_name().to_string_lossy()))
        .count()
}

/// A staging directory, removed when dropped unless it was renamed into place.
struct Staging(PathBuf);

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Read `stream` to its end, keeping its first 64 KiB (a tool's complaints, for the error message).
async fn drain(stream: Option<impl tokio::io::AsyncRead + Unpin>) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    const KEPT: usize = 64 * 1024;
    let mut kept = Vec::new();
    let Some(mut stream) = stream else { return kept };
    let mut chunk = [0u8; 8192];
    while let Ok(n) = stream.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        let room = KEPT.saturating_sub(kept.len());
        kept.extend_from_slice(&chunk[..n.min(room)]);
    }
    kept
}

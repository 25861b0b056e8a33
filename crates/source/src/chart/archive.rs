//! Chart archives: SHA-256 verification and safe extraction.
//!
//! An archive (`.tgz`, as `helm package` writes it: one top directory holding `Chart.yaml`) is
//! extracted into a fresh directory next to its final place, with its first path component dropped
//! as Helm's loader does, and renamed into place only when complete: nothing half-extracted is ever
//! visible. Only regular files and directories are written (with fixed permissions); `..`, absolute
//! paths, symlinks, hard links, devices and FIFOs are refused, and the uncompressed bytes and the
//! number of entries are bounded (a gzip bomb stops at the limit).
//!
//! The `tar` and `flate2` crates are used rather than `helm pull`: no process per chart, the digest
//! is verified on the bytes actually extracted, one cache is shared by every Application, and no
//! ambient Helm configuration (repositories file, registry logins) is read.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

/// Bounds on one archive's content.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExtractLimits {
    pub max_bytes: u64,
    pub max_files: usize,
}

/// Lower-case hex SHA-256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Extract `archive` into `dest` (which must not exist), through a temporary directory in `dest`'s
/// parent. The error says what is wrong with the archive.
pub(crate) fn extract(archive: &[u8], dest: &Path, limits: ExtractLimits) -> Result<(), String> {
    let parent = dest.parent().ok_or("no parent directory")?;
    std::fs::create_dir_all(parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
    let staging = tempfile::Builder::new()
        .prefix(".extract-")
        .tempdir_in(parent)
        .map_err(|e| format!("creating a directory in {}: {e}", parent.display()))?;
    unpack(archive, staging.path(), limits)?;
    if !staging.path().join("Chart.yaml").is_file() {
        return Err("no Chart.yaml at the top of the archive".into());
    }
    let staged = staging.keep();
    if let Err(e) = std::fs::rename(&staged, dest) {
        let _ = std::fs::remove_dir_all(&staged);
        // Another caller may have put the same digest in place first.
        if dest.join("Chart.yaml").is_file() {
            return Ok(());
        }
        return Err(format!("moving the chart into {}: {e}", dest.display()));
    }
    Ok(())
}

/// A reader that fails once more than `left` bytes have been read through it.
struct Bounded<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n as u64 > self.left {
            return Err(std::io::Error::other("uncompressed archive over the size limit"));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

fn unpack(archive: &[u8], root: &Path, limits: ExtractLimits) -> Result<(), String> {
    let gz = flate2::read::GzDecoder::new(archive);
    // Headers and padding count too: allow the tar framing on top of the content limit.
    let bounded = Bounded {
        inner: gz,
        left: limits
            .max_bytes
            .saturating_add(limits.max_files as u64 * 1024 + 1024 * 1024),
    };
    let mut tar = tar::Archive::new(bounded);
    let entries = tar.entries().map_err(|e| format!("not a tar.gz archive: {e}"))?;
    let mut files = 0usize;
    let mut bytes = 0u64;
    for entry in entries {
        let mut entry = entry.map_err(|e| format!("corrupt archive: {e}"))?;
        let kind = entry.header().entry_type();
        let raw_path = entry.path().map_err(|e| format!("corrupt archive: {e}"))?.into_owned();
        let shown = raw_path.display().to_string();
        use tar::EntryType as T;
        match kind {
            T::Regular | T::Continuous | T::Directory => {}
            // Metadata records that carry no file.
            T::XGlobalHeader | T::XHeader | T::GNULongName | T::GNULongLink => continue,
            T::Symlink => return Err(format!("refusing symlink {shown:?}")),
            T::Link => return Err(format!("refusing hard link {shown:?}")),
            other => return Err(format!("refusing {shown:?} of type {other:?}")),
        }
        files += 1;
        if files > limits.max_files {
            return Err(format!("more than {} entries", limits.max_files));
        }
        let Some(relative) = inside(&raw_path)? else {
            continue; // the top directory itself
        };
        let target = root.join(&relative);
        if kind == T::Directory {
            std::fs::create_dir_all(&target).map_err(|e| format!("writing {shown:?}: {e}"))?;
            continue;
        }
        let size = entry.header().size().map_err(|e| format!("corrupt archive: {e}"))?;
        bytes = bytes.saturating_add(size);
        if bytes > limits.max_bytes {
            return Err(format!("content larger than the limit of {} bytes", limits.max_bytes));
        }
        if let Some(dir) = target.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("writing {shown:?}: {e}"))?;
        }
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&target)
            .map_err(|e| format!("writing {shown:?}: {e}"))?;
        let copied =
            std::io::copy(&mut (&mut entry).take(size), &mut out).map_err(|e| format!("corrupt archive: {e}"))?;
        if copied != size {
            return Err(format!("corrupt archive: {shown:?} is truncated"));
        }
    }
    Ok(())
}

/// The path of an entry below the archive's top directory; `None` for the top directory itself.
fn inside(path: &Path) -> Result<Option<PathBuf>, String> {
    let shown = path.display();
    let mut parts = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(p) => parts.push(p),
            Component::CurDir => {}
            Component::ParentDir => return Err(format!("refusing path with '..': {shown:?}")),
            Component::RootDir | Component::Prefix(_) => return Err(format!("refusing absolute path {shown:?}")),
        }
    }
    if parts.len() <= 1 {
        return Ok(None);
    }
    Ok(Some(parts[1..].iter().collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_below_the_top_directory() {
        assert_eq!(
            inside(Path::new("demo/Chart.yaml")),
            Ok(Some(PathBuf::from("Chart.yaml")))
        );
        assert_eq!(
            inside(Path::new("./demo/templates/a.yaml")),
            Ok(Some(PathBuf::from("templates/a.yaml")))
        );
        assert_eq!(inside(Path::new("demo/")), Ok(None));
        assert!(inside(Path::new("demo/../../etc/passwd")).is_err());
        assert!(inside(Path::new("/etc/passwd")).is_err());
    }

    #[test]
    fn digest_is_hex_sha256() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}

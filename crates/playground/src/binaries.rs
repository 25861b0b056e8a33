//! Where the control-plane binaries are found, and which Kubernetes release they are.
//!
//! `scripts/setup.sh` builds one directory per Kubernetes release, `$CAPSTAN_CACHE/kube/VERSION/bin`
//! (default `~/.cache/capstan/kube/VERSION/bin`), holding `etcd`, `kube-apiserver`,
//! `kube-controller-manager`, `kube-scheduler` and `kubectl`; other tools (kwok, helm, kustomize,
//! sshd) are in `$CAPSTAN_CACHE/bin`. The release is the one pinned in `scripts/versions.env`
//! (`KUBE_VERSION`) unless `CAPSTAN_KUBE_VERSION` selects the older route (`1.20.2`).

use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// The pinned versions, read at compile time from the repository's one place for them.
const VERSIONS_ENV: &str = include_str!("../../../scripts/versions.env");

/// The environment variable that selects the Kubernetes release.
pub const KUBE_VERSION_ENV: &str = "CAPSTAN_KUBE_VERSION";

/// A Kubernetes release the playground can run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeVersion {
    /// The tag, e.g. `v1.37.2`.
    pub tag: String,
    /// The minor version, e.g. 37.
    pub minor: u32,
}

impl KubeVersion {
    /// The current release pinned in `scripts/versions.env` (`KUBE_VERSION`).
    pub fn current() -> KubeVersion {
        Self::pinned("KUBE_VERSION")
    }

    /// The older release kept for compatibility checks (`KUBE_LEGACY_VERSION`).
    pub fn legacy() -> KubeVersion {
        Self::pinned("KUBE_LEGACY_VERSION")
    }

    fn pinned(key: &str) -> KubeVersion {
        let tag = pinned_value(key).unwrap_or_default();
        // versions.env is part of the build: a malformed entry is caught by this crate's unit tests.
        Self::parse(&tag).unwrap_or(KubeVersion { tag, minor: 0 })
    }

    /// The release selected by `CAPSTAN_KUBE_VERSION` (`1.37.2`, `v1.20.2`…), or the current one.
    /// Only the two pinned releases exist in the cache; anything else is an error naming both.
    pub fn selected() -> Result<KubeVersion> {
        let wanted = std::env::var(KUBE_VERSION_ENV).unwrap_or_default();
        let wanted = wanted.trim();
        if wanted.is_empty() {
            return Ok(Self::current());
        }
        let tag = format!("v{}", wanted.trim_start_matches('v'));
        [Self::current(), Self::legacy()]
            .into_iter()
            .find(|v| v.tag == tag)
            .ok_or_else(|| Error::UnknownKubeVersion {
                wanted: wanted.to_string(),
                known: format!("{} and {}", Self::current().tag, Self::legacy().tag),
            })
    }

    /// Parse `v1.MINOR.PATCH`.
    pub fn parse(tag: &str) -> Option<KubeVersion> {
        let rest = tag.strip_prefix("v1.")?;
        let (minor, patch) = rest.split_once('.')?;
        patch.parse::<u32>().ok()?;
        Some(KubeVersion {
            tag: tag.to_string(),
            minor: minor.parse().ok()?,
        })
    }

    /// Whether this release still has the flags removed in 1.24 (`--insecure-port`, `--port`).
    pub fn has_insecure_ports(&self) -> bool {
        self.minor < 24
    }

    /// The directory holding this release's binaries.
    pub fn bin_dir(&self) -> PathBuf {
        cache_dir().join("kube").join(&self.tag).join("bin")
    }
}

/// A value of `scripts/versions.env`.
pub fn pinned_value(key: &str) -> Option<String> {
    VERSIONS_ENV
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| k.trim() == key)
        .map(|(_, v)| v.trim().to_string())
}

/// The cache directory shared by the setup script and the playground.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CAPSTAN_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root"));
    home.join(".cache").join("capstan")
}

/// Directories searched for a binary, in order: the selected Kubernetes release's directory (so
/// `kubectl` matches the API server), `$CAPSTAN_CACHE/bin`, then `$PATH`.
pub fn search_path() -> Vec<PathBuf> {
    let kube = KubeVersion::selected().unwrap_or_else(|_| KubeVersion::current());
    let mut dirs = vec![kube.bin_dir(), cache_dir().join("bin")];
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs
}

/// Find an executable named `name`, or explain how to install it.
pub fn find(name: &str) -> Result<PathBuf> {
    let dirs = search_path();
    dirs.iter()
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
        .ok_or_else(|| Error::MissingBinary {
            name: name.to_string(),
            searched: format!("{}, {} and $PATH", dirs[0].display(), dirs[1].display()),
        })
}

/// Find a binary of Kubernetes release `version`: only its own directory is searched, so a
/// different release on `$PATH` is never picked up by accident.
pub fn find_kube(version: &KubeVersion, name: &str) -> Result<PathBuf> {
    let path = version.bin_dir().join(name);
    if is_executable(&path) {
        return Ok(path);
    }
    Err(Error::MissingBinary {
        name: format!("{name} {}", version.tag),
        searched: format!(
            "{}; `scripts/setup.sh{}` builds it",
            version.bin_dir().display(),
            if *version == KubeVersion::current() {
                ""
            } else {
                " --with-legacy-kube"
            }
        ),
    })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binary_names_the_setup_script() {
        let err = find("capstan-no-such-binary").expect_err("must be missing");
        let msg = err.to_string();
        assert!(msg.contains("capstan-no-such-binary"), "{msg}");
        assert!(msg.contains("scripts/setup.sh"), "{msg}");
    }

    #[test]
    fn finds_executables_on_path() {
        assert!(find("sh").is_ok());
    }

    #[test]
    fn pinned_versions_parse_and_the_current_one_is_modern() {
        let current = KubeVersion::current();
        assert!(KubeVersion::parse(&current.tag).is_some(), "{current:?}");
        assert!(
            current.minor >= 33,
            "the current release must be 1.33 or newer: {current:?}"
        );
        assert!(!current.has_insecure_ports());
        let legacy = KubeVersion::legacy();
        assert_eq!(legacy.tag, "v1.20.2");
        assert!(legacy.has_insecure_ports());
    }

    #[test]
    fn parse_rejects_what_is_not_a_release_tag() {
        for bad in ["", "1.37.2", "v1.x.2", "v1.37", "v2.0.0", "v1.37.x"] {
            assert!(KubeVersion::parse(bad).is_none(), "{bad}");
        }
        assert_eq!(KubeVersion::parse("v1.33.13").map(|v| v.minor), Some(33));
    }
}

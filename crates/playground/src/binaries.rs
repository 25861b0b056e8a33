//! Where the control-plane binaries are found: `$CAPSTAN_CACHE/bin` (default `~/.cache/capstan/bin`,
//! filled by `scripts/setup.sh`), then `$PATH`.

use std::path::{Path, PathBuf};

use crate::{Error, Result};

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

/// Directories searched for a binary, in order.
pub fn search_path() -> Vec<PathBuf> {
    let mut dirs = vec![cache_dir().join("bin")];
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
            searched: dirs
                .first()
                .map(|d| format!("{} and $PATH", d.display()))
                .unwrap_or_else(|| "$PATH".into()),
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
}

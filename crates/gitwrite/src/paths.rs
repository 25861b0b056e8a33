//! Keeping edits inside the repository: a requested path is checked as text (relative, no `..`, no
//! `.git`) and again after resolving symlinks on disk.

use std::path::{Component, Path, PathBuf};

use crate::WriteError;

/// The file `path` names inside the checkout at `root`, resolved (symlinks followed), if it stays
/// inside `root` and is a regular file. Also used by readers of the files Capstan writes
/// (`capstan-imageupdate`), so reading and writing confine paths alike.
pub fn resolve(root: &Path, path: &str) -> Result<PathBuf, WriteError> {
    let unsafe_path = |reason: &str| WriteError::UnsafePath {
        path: path.to_string(),
        reason: reason.to_string(),
    };
    if path.is_empty() || path.contains('\0') || path.contains('\\') {
        return Err(unsafe_path("not a repository-relative path"));
    }
    let rel = Path::new(path);
    for component in rel.components() {
        match component {
            Component::Normal(name) if name == ".git" => {
                return Err(unsafe_path("files under .git cannot be edited"));
            }
            Component::Normal(_) | Component::CurDir => {}
            Component::ParentDir => return Err(unsafe_path("`..` is not allowed")),
            Component::RootDir | Component::Prefix(_) => return Err(unsafe_path("absolute paths are not allowed")),
        }
    }
    let root = std::fs::canonicalize(root).map_err(WriteError::io("resolving the checkout directory"))?;
    let joined = root.join(rel);
    let resolved = match std::fs::canonicalize(&joined) {
        Ok(resolved) => resolved,
        // A dangling symlink names a file somewhere; it is not one of the repository's files.
        Err(_) if std::fs::symlink_metadata(&joined).is_ok() => {
            return Err(unsafe_path("a symlink to nothing inside the repository"));
        }
        Err(_) => return Err(WriteError::MissingFile { path: path.to_string() }),
    };
    if !resolved.starts_with(&root) {
        return Err(unsafe_path("it resolves to a file outside the repository"));
    }
    if resolved.strip_prefix(&root).is_ok_and(|r| r.starts_with(".git")) {
        return Err(unsafe_path("files under .git cannot be edited"));
    }
    if !resolved.is_file() {
        return Err(WriteError::MissingFile { path: path.to_string() });
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_repository() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/.git")).unwrap();
        std::fs::write(dir.path().join("a/values.yaml"), "x: 1\n").unwrap();
        std::fs::write(outside.path().join("secret"), "x: 1\n").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("escape.yaml")).unwrap();
        std::os::unix::fs::symlink("a/values.yaml", dir.path().join("inside.yaml")).unwrap();
        std::os::unix::fs::symlink("/nonexistent/x", dir.path().join("dangling.yaml")).unwrap();
        std::fs::create_dir_all(dir.path().join(".git")).unwrap();
        std::fs::write(dir.path().join(".git/config"), "[core]\n").unwrap();
        std::os::unix::fs::symlink(".git/config", dir.path().join("gitconfig.yaml")).unwrap();
        assert!(resolve(dir.path(), "a/values.yaml").is_ok());
        assert!(resolve(dir.path(), "./a/values.yaml").is_ok());
        assert!(resolve(dir.path(), "inside.yaml").is_ok());
        for bad in [
            "../x",
            "/etc/passwd",
            "a/../../x",
            "escape.yaml",
            "dangling.yaml",
            ".git/config",
            "a/.git/x",
            "",
        ] {
            assert!(
                matches!(resolve(dir.path(), bad), Err(WriteError::UnsafePath { .. })),
                "{bad}"
            );
        }
        assert!(matches!(
            resolve(dir.path(), "a/missing.yaml"),
            Err(WriteError::MissingFile { .. })
        ));
        assert!(matches!(resolve(dir.path(), "a"), Err(WriteError::MissingFile { .. })));
    }
}

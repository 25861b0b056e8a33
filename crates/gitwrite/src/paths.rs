//! Keeping edits inside the repository: a requested path is checked as text (relative, no `..`, no
//! `.git`) and again after resolving symlinks on disk, for the files edited ([`resolve`]); the files
//! created ([`create`]) have their directories made one by one and never through a symbolic link.

use std::path::{Component, Path, PathBuf};

use crate::WriteError;

/// The largest file an edit reads and [`create`] writes.
pub(crate) const MAX_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// Check `path` as text: repository-relative, no `..`, nothing under `.git`.
fn check_text(path: &str) -> Result<(), WriteError> {
    let unsafe_path = |reason: &str| WriteError::UnsafePath {
        path: path.to_string(),
        reason: reason.to_string(),
    };
    if path.is_empty() || path.contains('\0') || path.contains('\\') {
        return Err(unsafe_path("not a repository-relative path"));
    }
    for component in Path::new(path).components() {
        match component {
            Component::Normal(name) if name == ".git" => {
                return Err(unsafe_path("files under .git cannot be edited"));
            }
            Component::Normal(_) | Component::CurDir => {}
            Component::ParentDir => return Err(unsafe_path("`..` is not allowed")),
            Component::RootDir | Component::Prefix(_) => return Err(unsafe_path("absolute paths are not allowed")),
        }
    }
    Ok(())
}

/// Create the file `path` inside the checkout at `root` with `content`, unless something exists
/// there already (a file, a directory or a symlink, even a dangling one: it is left as it is).
/// Missing directories are created one at a time; an existing one must resolve inside `root`.
/// Whether the file was created.
pub fn create(root: &Path, path: &str, content: &str) -> Result<bool, WriteError> {
    check_text(path)?;
    let unsafe_path = |reason: &str| WriteError::UnsafePath {
        path: path.to_string(),
        reason: reason.to_string(),
    };
    let root = std::fs::canonicalize(root).map_err(WriteError::io("resolving the checkout directory"))?;
    let rel = Path::new(path);
    let Some(name) = rel.file_name() else {
        return Err(unsafe_path("not a file name"));
    };
    let mut dir = root.clone();
    for component in rel.parent().into_iter().flat_map(Path::components) {
        let Component::Normal(part) = component else {
            continue; // `.`: the checks above allow nothing else
        };
        let next = dir.join(part);
        match std::fs::symlink_metadata(&next) {
            // Git adds nothing beyond a symbolic link, and one may lead anywhere (`.git` included).
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(unsafe_path("a directory of it is a symbolic link"));
            }
            Ok(meta) if !meta.is_dir() => {
                return Err(unsafe_path("a directory of it is a file in the repository"));
            }
            Ok(_) => dir = next,
            Err(_) => {
                std::fs::create_dir(&next).map_err(WriteError::io(format!("creating the directory of {path}")))?;
                dir = next;
            }
        }
    }
    let file = dir.join(name);
    if std::fs::symlink_metadata(&file).is_ok() {
        return Ok(false);
    }
    if content.len() as u64 > MAX_FILE_BYTES {
        return Err(unsafe_path("the new file would be larger than 8 MiB"));
    }
    // `create_new` refuses what appeared meanwhile, a symlink included.
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&file)
        .map_err(WriteError::io(format!("creating {path}")))?;
    std::io::Write::write_all(&mut out, content.as_bytes()).map_err(WriteError::io(format!("writing {path}")))?;
    Ok(true)
}

/// The file `path` names inside the checkout at `root`, resolved (symlinks followed), if it stays
/// inside `root` and is a regular file. Also used by readers of the files Capstan writes
/// (`capstan-imageupdate`), so reading and writing confine paths alike.
pub fn resolve(root: &Path, path: &str) -> Result<PathBuf, WriteError> {
    let unsafe_path = |reason: &str| WriteError::UnsafePath {
        path: path.to_string(),
        reason: reason.to_string(),
    };
    check_text(path)?;
    let rel = Path::new(path);
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
    fn created_files_stay_inside_the_repository_and_existing_ones_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
        std::fs::create_dir_all(dir.path().join("real")).unwrap();
        std::os::unix::fs::symlink("real", dir.path().join("inside")).unwrap();
        assert!(create(dir.path(), "clusters/hub/capstan/install.yaml", "a: 1\n").unwrap());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("clusters/hub/capstan/install.yaml")).unwrap(),
            "a: 1\n"
        );
        // An existing file is left as it is.
        assert!(!create(dir.path(), "clusters/hub/capstan/install.yaml", "b: 2\n").unwrap());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("clusters/hub/capstan/install.yaml")).unwrap(),
            "a: 1\n"
        );
        std::fs::create_dir_all(dir.path().join(".git/info")).unwrap();
        std::os::unix::fs::symlink(".git/info", dir.path().join("to-git")).unwrap();
        std::fs::write(dir.path().join("plain"), "x").unwrap();
        for bad in [
            "out/x.yaml",
            "out/deeper/x.yaml",
            "inside/x.yaml",
            "to-git/x.yaml",
            "plain/x.yaml",
            "../x.yaml",
            "/tmp/x.yaml",
            ".git/hooks/x",
            "a/../../x",
        ] {
            assert!(create(dir.path(), bad, "x").is_err(), "{bad}");
        }
        assert_eq!(
            std::fs::read_dir(outside.path()).unwrap().count(),
            0,
            "nothing written outside"
        );
        assert!(
            !dir.path().join(".git/info/x.yaml").exists(),
            "nothing written under .git"
        );
        assert!(
            !dir.path().join("real/x.yaml").exists(),
            "nothing written through a symlink"
        );
        let large = "x".repeat(8 * 1024 * 1024 + 1);
        assert!(create(dir.path(), "large.yaml", &large).is_err());
    }

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

//! Keeping every path inside the repository: resolving user-supplied relative paths the way the
//! operating system would (symlinks first, then `..`), refusing absolute paths, `..` escapes and
//! symlinks that lead out; scanning a checkout for out-of-bounds symlinks before tools run on it; and
//! copying a checkout to a scratch directory for tools that must write (`kustomize edit`,
//! `helm dependency build`).

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

use crate::RenderError;

/// Resolve `relative` against `base` (a directory inside `repo_root`, absolute or relative to it) and
/// return its canonical path, refusing anything that is not inside the repository.
///
/// - absolute `relative` paths are refused ([`RenderError::AbsolutePath`]);
/// - `..` that climbs above `repo_root` is refused ([`RenderError::EscapesRepository`]);
/// - a symlink anywhere along the path whose target is outside `repo_root` is refused
///   ([`RenderError::SymlinkEscape`]), even when it dangles;
/// - a path that does not exist is [`RenderError::NotFound`].
///
/// Components are resolved in order, as the kernel does: a symlink is replaced by its canonical
/// target before a following `..` is applied, so `link/..` is the parent of the link's target.
pub fn resolve_in_repo(repo_root: &Path, base: &Path, relative: &str) -> Result<PathBuf, RenderError> {
    let rel = Path::new(relative);
    if rel.has_root() {
        return Err(RenderError::AbsolutePath {
            path: relative.to_string(),
        });
    }
    let root = std::fs::canonicalize(repo_root)
        .map_err(|e| RenderError::io(format!("cannot open repository checkout {}", repo_root.display()), e))?;
    let base = if base.is_absolute() {
        base.to_path_buf()
    } else {
        root.join(base)
    };
    let base = std::fs::canonicalize(&base).map_err(|e| {
        if e.kind() == ErrorKind::NotFound {
            RenderError::NotFound {
                path: display_rel(&root, &base),
            }
        } else {
            RenderError::io(format!("cannot resolve {}", base.display()), e)
        }
    })?;
    if !base.starts_with(&root) {
        return Err(RenderError::EscapesRepository {
            path: base.display().to_string(),
        });
    }
    resolve_components(&root, base, rel, relative)
}

fn resolve_components(root: &Path, mut cur: PathBuf, rel: &Path, original: &str) -> Result<PathBuf, RenderError> {
    let mut components = rel.components();
    while let Some(component) = components.next() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if cur == root || !cur.pop() || !cur.starts_with(root) {
                    return Err(RenderError::EscapesRepository {
                        path: original.to_string(),
                    });
                }
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(RenderError::AbsolutePath {
                    path: original.to_string(),
                });
            }
            Component::Normal(name) => {
                cur.push(name);
                match std::fs::symlink_metadata(&cur) {
                    Ok(meta) if meta.file_type().is_symlink() => {
                        cur = follow_symlink(root, &cur, original, components.as_path())?;
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::NotFound || e.kind() == ErrorKind::NotADirectory => {
                        return Err(missing_or_escaping(root, cur, components.as_path(), original));
                    }
                    Err(e) => return Err(RenderError::io(format!("cannot inspect {}", cur.display()), e)),
                }
            }
        }
    }
    Ok(cur)
}

/// Replace the symlink `link` by its canonical target, refusing targets outside the repository.
fn follow_symlink(root: &Path, link: &Path, original: &str, rest: &Path) -> Result<PathBuf, RenderError> {
    let escape = |target: PathBuf| RenderError::SymlinkEscape {
        path: original.to_string(),
        link: display_rel(root, link),
        target,
    };
    match std::fs::canonicalize(link) {
        Ok(target) if target.starts_with(root) => Ok(target),
        Ok(target) => Err(escape(target)),
        Err(e) if e.kind() == ErrorKind::NotFound || e.kind() == ErrorKind::NotADirectory => {
            // A dangling link: judge it by where it points on paper.
            let raw = std::fs::read_link(link)
                .map_err(|e| RenderError::io(format!("cannot read symlink {}", link.display()), e))?;
            let lexical = link.parent().map(|p| p.join(&raw)).map(|p| normalize_lexically(&p));
            match lexical {
                Some(Some(t)) if t.starts_with(root) => Err(missing_or_escaping(root, t, rest, original)),
                _ => Err(escape(raw)),
            }
        }
        Err(e) => Err(RenderError::io(format!("cannot resolve symlink {}", link.display()), e)),
    }
}

/// The path does not exist from `missing` on; report an escape if the rest climbs out anyway.
fn missing_or_escaping(root: &Path, missing: PathBuf, rest: &Path, original: &str) -> RenderError {
    match normalize_lexically(&missing.join(rest)) {
        Some(p) if p.starts_with(root) => RenderError::NotFound {
            path: original.to_string(),
        },
        _ => RenderError::EscapesRepository {
            path: original.to_string(),
        },
    }
}

/// Apply `.` and `..` without touching the filesystem; `None` if `..` climbs above `/`.
pub(crate) fn normalize_lexically(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    Some(out)
}

/// `path` relative to `root` with `/` separators (`.` for the root itself); absolute if outside.
pub(crate) fn display_rel(root: &Path, path: &Path) -> String {
    match path.strip_prefix(root) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
        Ok(rel) => rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/"),
        Err(_) => path.display().to_string(),
    }
}

/// Directories never looked into: Git's own metadata.
fn is_skipped_dir(name: &OsStr) -> bool {
    name == ".git"
}

/// Refuse a checkout (canonical `root`) that contains a symlink pointing outside it, as Argo CD does
/// before running Kustomize or Helm on it: the tools follow symlinks on their own.
pub(crate) fn scan_symlinks(root: &Path) -> Result<(), RenderError> {
    let mut queue = VecDeque::from([root.to_path_buf()]);
    while let Some(dir) = queue.pop_front() {
        let entries =
            std::fs::read_dir(&dir).map_err(|e| RenderError::io(format!("cannot list {}", dir.display()), e))?;
        for entry in entries {
            let entry = entry.map_err(|e| RenderError::io(format!("cannot list {}", dir.display()), e))?;
            let path = entry.path();
            let file_type = entry
                .file_type()
                .map_err(|e| RenderError::io(format!("cannot inspect {}", path.display()), e))?;
            if file_type.is_dir() {
                if !is_skipped_dir(&entry.file_name()) {
                    queue.push_back(path);
                }
            } else if file_type.is_symlink() {
                check_symlink(root, &path)?;
            }
        }
    }
    Ok(())
}

/// The canonical target of an in-repository symlink, `None` if it dangles inside the repository.
fn check_symlink(root: &Path, link: &Path) -> Result<Option<PathBuf>, RenderError> {
    let out_of_bounds = |target: PathBuf| RenderError::OutOfBoundsSymlink {
        link: display_rel(root, link),
        target,
    };
    match std::fs::canonicalize(link) {
        Ok(target) if target.starts_with(root) => Ok(Some(target)),
        Ok(target) => Err(out_of_bounds(target)),
        Err(_) => {
            let raw = std::fs::read_link(link)
                .map_err(|e| RenderError::io(format!("cannot read symlink {}", link.display()), e))?;
            match link.parent().and_then(|p| normalize_lexically(&p.join(&raw))) {
                Some(t) if t.starts_with(root) => Ok(None),
                _ => Err(out_of_bounds(raw)),
            }
        }
    }
}

/// Most bytes that symlinks to files may add to one copy of a repository.
pub(crate) const MAX_LINKED_COPY_BYTES: u64 = 64 * 1024 * 1024;

/// Copy the checkout at canonical `src` (without `.git`) to `dst`, which must not exist. Symlinks to
/// files become copies (at most [`MAX_LINKED_COPY_BYTES`] in all); symlinks to directories are
/// recreated pointing at the same place in the copy, so nothing in the copy leads back into the
/// shared checkout. Dangling symlinks are left out.
pub(crate) fn copy_tree(src: &Path, dst: &Path) -> Result<(), RenderError> {
    std::fs::create_dir_all(dst).map_err(|e| RenderError::io(format!("cannot create {}", dst.display()), e))?;
    // Each symlink to a file becomes a copy of the file, so a few bytes of links could write
    // gigabytes (a 532 KiB repository once wrote 2.44 GiB per render); what links add is bounded.
    let mut linked_left = MAX_LINKED_COPY_BYTES;
    let mut queue = VecDeque::from([PathBuf::new()]);
    while let Some(rel) = queue.pop_front() {
        let dir = src.join(&rel);
        let entries =
            std::fs::read_dir(&dir).map_err(|e| RenderError::io(format!("cannot list {}", dir.display()), e))?;
        for entry in entries {
            let entry = entry.map_err(|e| RenderError::io(format!("cannot list {}", dir.display()), e))?;
            let from = entry.path();
            let rel_child = rel.join(entry.file_name());
            let to = dst.join(&rel_child);
            let file_type = entry
                .file_type()
                .map_err(|e| RenderError::io(format!("cannot inspect {}", from.display()), e))?;
            if file_type.is_dir() {
                if is_skipped_dir(&entry.file_name()) {
                    continue;
                }
                std::fs::create_dir(&to).map_err(|e| RenderError::io(format!("cannot create {}", to.display()), e))?;
                queue.push_back(rel_child);
            } else if file_type.is_symlink() {
                let Some(target) = check_symlink(src, &from)? else {
                    continue;
                };
                if target.is_dir() {
                    let inside = target.strip_prefix(src).unwrap_or(Path::new(""));
                    std::os::unix::fs::symlink(dst.join(inside), &to)
                        .map_err(|e| RenderError::io(format!("cannot create symlink {}", to.display()), e))?;
                } else {
                    let size = std::fs::metadata(&target).map(|m| m.len()).unwrap_or(0);
                    linked_left = linked_left
                        .checked_sub(size)
                        .ok_or_else(|| RenderError::LinkedCopyTooLarge {
                            link: rel_child.display().to_string(),
                            limit_mib: MAX_LINKED_COPY_BYTES >> 20,
                        })?;
                    copy_file(&target, &to)?;
                }
            } else if file_type.is_file() {
                copy_file(&from, &to)?;
            }
        }
    }
    Ok(())
}

fn copy_file(from: &Path, to: &Path) -> Result<(), RenderError> {
    std::fs::copy(from, to)
        .map(|_| ())
        .map_err(|e| RenderError::io(format!("cannot copy {} to {}", from.display(), to.display()), e))
}

/// `spec.source.path` as used in messages and keys: `.` for the root, no leading `./` or trailing `/`.
pub(crate) fn normalise_app_path(path: &str) -> String {
    let mut p = path.trim();
    while let Some(rest) = p.strip_prefix("./") {
        p = rest;
    }
    let p = p.trim_end_matches('/');
    if p.is_empty() { ".".to_string() } else { p.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_paths_are_normalised() {
        assert_eq!(normalise_app_path(""), ".");
        assert_eq!(normalise_app_path("./"), ".");
        assert_eq!(normalise_app_path("./apps/web/"), "apps/web");
        assert_eq!(normalise_app_path("apps"), "apps");
    }
    use std::os::unix::fs::symlink;

    fn repo() -> (tempfile::TempDir, PathBuf) {
        let outer = tempfile::tempdir().unwrap();
        let root = outer.path().join("repo");
        std::fs::create_dir_all(root.join("apps/web/values")).unwrap();
        std::fs::write(root.join("apps/web/values/prod.yaml"), "a: 1\n").unwrap();
        std::fs::write(outer.path().join("secret.txt"), "secret\n").unwrap();
        let root = std::fs::canonicalize(&root).unwrap();
        (outer, root)
    }

    #[test]
    fn resolves_plain_relative_paths() {
        let (_t, root) = repo();
        let got = resolve_in_repo(&root, &root.join("apps/web"), "values/prod.yaml").unwrap();
        assert_eq!(got, root.join("apps/web/values/prod.yaml"));
        let got = resolve_in_repo(&root, Path::new("apps/web"), "./values/../values/prod.yaml").unwrap();
        assert_eq!(got, root.join("apps/web/values/prod.yaml"));
        assert_eq!(resolve_in_repo(&root, &root, "").unwrap(), root);
        assert_eq!(resolve_in_repo(&root, &root, ".").unwrap(), root);
        assert_eq!(resolve_in_repo(&root, &root.join("apps/web"), "../..").unwrap(), root);
    }

    #[test]
    fn refuses_absolute_and_dotdot_escapes() {
        let (_t, root) = repo();
        let err = resolve_in_repo(&root, &root, "/etc/passwd").unwrap_err();
        assert!(matches!(err, RenderError::AbsolutePath { .. }), "{err}");
        let err = resolve_in_repo(&root, &root.join("apps/web"), "../../../etc").unwrap_err();
        assert_eq!(err.to_string(), r#"path "../../../etc" escapes the repository"#);
        let err = resolve_in_repo(&root, &root, "../secret.txt").unwrap_err();
        assert!(matches!(err, RenderError::EscapesRepository { .. }), "{err}");
        // Escaping even through directories that do not exist.
        let err = resolve_in_repo(&root, &root, "nope/../../secret.txt").unwrap_err();
        assert!(matches!(err, RenderError::EscapesRepository { .. }), "{err}");
    }

    #[test]
    fn missing_paths_are_not_found() {
        let (_t, root) = repo();
        let err = resolve_in_repo(&root, &root, "apps/nope").unwrap_err();
        assert_eq!(err.to_string(), r#"path "apps/nope" does not exist in the repository"#);
        let err = resolve_in_repo(&root, &root, "apps/web/values/prod.yaml/x").unwrap_err();
        assert!(matches!(err, RenderError::NotFound { .. }), "{err}");
    }

    #[test]
    fn refuses_symlinks_leading_out() {
        let (t, root) = repo();
        symlink(t.path().join("secret.txt"), root.join("apps/web/leak.yaml")).unwrap();
        symlink("/etc", root.join("etc")).unwrap();
        symlink("../../nowhere", root.join("dangling")).unwrap();
        let err = resolve_in_repo(&root, &root, "apps/web/leak.yaml").unwrap_err();
        assert!(matches!(err, RenderError::SymlinkEscape { .. }), "{err}");
        assert!(err.to_string().contains("apps/web/leak.yaml"), "{err}");
        let err = resolve_in_repo(&root, &root, "etc/passwd").unwrap_err();
        assert!(matches!(err, RenderError::SymlinkEscape { .. }), "{err}");
        let err = resolve_in_repo(&root, &root, "dangling").unwrap_err();
        assert!(matches!(err, RenderError::SymlinkEscape { .. }), "{err}");
        assert!(scan_symlinks(&root).is_err());
    }

    #[test]
    fn follows_symlinks_inside_like_the_kernel() {
        let (_t, root) = repo();
        // deep/link -> the repository root: `deep/link/..` is the root's parent, outside.
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        symlink(&root, root.join("a/b/up")).unwrap();
        let err = resolve_in_repo(&root, &root.join("a/b"), "up/../secret.txt").unwrap_err();
        assert!(matches!(err, RenderError::EscapesRepository { .. }), "{err}");
        // An in-repository link resolves to its canonical target.
        symlink("../apps/web/values", root.join("a/vals")).unwrap();
        let got = resolve_in_repo(&root, &root, "a/vals/prod.yaml").unwrap();
        assert_eq!(got, root.join("apps/web/values/prod.yaml"));
        scan_symlinks(&root).unwrap();
    }

    #[test]
    fn copies_without_links_back_into_the_checkout() {
        let (t, root) = repo();
        symlink("web/values", root.join("apps/vals")).unwrap();
        symlink("web/values/prod.yaml", root.join("apps/prod.yaml")).unwrap();
        std::fs::create_dir_all(root.join(".git/objects")).unwrap();
        let dst = t.path().join("copy");
        copy_tree(&root, &dst).unwrap();
        assert_eq!(
            std::fs::read_to_string(dst.join("apps/vals/prod.yaml")).unwrap(),
            "a: 1\n"
        );
        assert!(
            !std::fs::symlink_metadata(dst.join("apps/prod.yaml"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(
            std::fs::read_link(dst.join("apps/vals")).unwrap(),
            dst.join("apps/web/values")
        );
        assert!(!dst.join(".git").exists());
    }

    #[test]
    fn display_rel_uses_slashes() {
        assert_eq!(display_rel(Path::new("/r"), Path::new("/r")), ".");
        assert_eq!(display_rel(Path::new("/r"), Path::new("/r/a/b")), "a/b");
        assert_eq!(display_rel(Path::new("/r"), Path::new("/x")), "/x");
    }
}

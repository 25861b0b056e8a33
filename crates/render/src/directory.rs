//! Plain directories of manifests: `.yaml`, `.yml` and `.json` files under `spec.source.path` (with
//! subdirectories when `directory.recurse` is set, hidden ones skipped), filtered by the
//! `directory.include` / `directory.exclude` globs, read in path order; `.jsonnet` files, chosen the
//! same way, are listed for [`crate::jsonnet`] to evaluate. Every file is resolved with
//! [`crate::resolve_in_repo`] before it is read, so a symlink leading out of the repository is an
//! error and is never followed.

use std::collections::VecDeque;
use std::path::Path;

use capstan_api::application::ApplicationSourceDirectory;
use globset::{GlobBuilder, GlobMatcher};
use serde_json::Value;

use crate::paths::resolve_in_repo;
use crate::{RenderError, manifests};

/// The include/exclude filter of a directory source. A pattern matches a file when it matches its path
/// relative to the application's directory or its file name; `*` crosses `/`, and `{a,b}`
/// alternatives are supported.
#[derive(Debug, Default)]
pub struct FileFilter {
    include: Option<GlobMatcher>,
    exclude: Option<GlobMatcher>,
}

impl FileFilter {
    /// Compile `include` and `exclude` (empty means "not set").
    pub fn new(include: &str, exclude: &str) -> Result<Self, RenderError> {
        Ok(FileFilter {
            include: compile("include", include)?,
            exclude: compile("exclude", exclude)?,
        })
    }

    /// Whether the file at `rel_path` (relative to the application's directory, `/`-separated) is read.
    pub fn accepts(&self, rel_path: &str) -> bool {
        let name = rel_path.rsplit('/').next().unwrap_or(rel_path);
        let matches = |m: &GlobMatcher| m.is_match(rel_path) || m.is_match(name);
        if self.exclude.as_ref().is_some_and(matches) {
            return false;
        }
        self.include.as_ref().is_none_or(matches)
    }
}

fn compile(field: &'static str, pattern: &str) -> Result<Option<GlobMatcher>, RenderError> {
    let pattern = pattern.trim();
    if pattern.is_empty() {
        return Ok(None);
    }
    GlobBuilder::new(pattern)
        .literal_separator(false)
        .build()
        .map(|g| Some(g.compile_matcher()))
        .map_err(|e| RenderError::InvalidGlob {
            field,
            pattern: pattern.to_string(),
            message: e.kind().to_string(),
        })
}

/// Largest manifest file read (a whole chart's CRDs fit many times over); bigger ones are refused
/// before they are read.
pub const MAX_MANIFEST_FILE_BYTES: u64 = 32 * 1024 * 1024;

fn is_manifest_name(name: &str) -> bool {
    name.ends_with(".yaml") || name.ends_with(".yml") || name.ends_with(".json")
}

/// One readable file of a directory, in path order.
#[derive(Debug)]
pub(crate) enum Entry {
    /// The objects of a YAML or JSON file.
    Objects(Vec<Value>),
    /// A `.jsonnet` file (relative to the repository root), evaluated afterwards (see
    /// [`crate::jsonnet`]).
    Jsonnet(String),
}

/// What a directory renders from: its readable files in path order.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    pub entries: Vec<Entry>,
}

/// Read the directory `app_rel` (relative to the canonical `root`; `.` for the root): the objects of
/// its YAML/JSON files and the list of its Jsonnet files.
pub(crate) fn plan(
    root: &Path,
    app_rel: &str,
    options: Option<&ApplicationSourceDirectory>,
) -> Result<Plan, RenderError> {
    let default = ApplicationSourceDirectory::default();
    let options = options.unwrap_or(&default);
    let filter = FileFilter::new(&options.include, &options.exclude)?;
    let app_dir = resolve_in_repo(root, root, app_rel)?;
    let mut files = list_files(&app_dir, options.recurse)?;
    files.sort();
    let mut plan = Plan::default();
    for rel in files {
        let name = rel.rsplit('/').next().unwrap_or(&rel);
        let jsonnet = crate::jsonnet::is_jsonnet_name(name);
        if !(is_manifest_name(name) || jsonnet) || !filter.accepts(&rel) {
            continue;
        }
        let repo_rel = if app_rel == "." || app_rel.is_empty() {
            rel.clone()
        } else {
            format!("{}/{rel}", app_rel.trim_end_matches('/'))
        };
        let path = resolve_in_repo(root, root, &repo_rel)?;
        if path.is_dir() {
            continue;
        }
        if jsonnet {
            plan.entries.push(Entry::Jsonnet(repo_rel));
            continue;
        }
        let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        if size > MAX_MANIFEST_FILE_BYTES {
            return Err(RenderError::FileTooLarge {
                file: repo_rel,
                size,
                limit: MAX_MANIFEST_FILE_BYTES,
            });
        }
        let bytes = std::fs::read(&path).map_err(|e| RenderError::io(format!("cannot read {repo_rel}"), e))?;
        let text = String::from_utf8(bytes).map_err(|_| RenderError::InvalidManifest {
            origin: repo_rel.clone(),
            message: "file is not UTF-8 text".to_string(),
        })?;
        let parsed = if rel.ends_with(".json") {
            manifests::parse_json(&text, &repo_rel)?
        } else {
            manifests::parse_yaml_stream(&text, &repo_rel)?
        };
        tracing::trace!(file = %repo_rel, objects = parsed.len(), "read manifests");
        plan.entries.push(Entry::Objects(parsed));
    }
    Ok(plan)
}

/// The files of the directory `app_dir` a render does not read — names Capstan does not render
/// (`.libsonnet` included) and files the include/exclude globs leave out — and how many files it
/// holds in all.
pub(crate) fn skipped_files(
    app_dir: &Path,
    options: Option<&ApplicationSourceDirectory>,
) -> Result<(Vec<String>, usize), RenderError> {
    let default = ApplicationSourceDirectory::default();
    let options = options.unwrap_or(&default);
    let filter = FileFilter::new(&options.include, &options.exclude)?;
    let mut files = list_files(app_dir, options.recurse)?;
    let total = files.len();
    files.sort();
    files.retain(|rel| {
        let name = rel.rsplit('/').next().unwrap_or(rel);
        !(is_manifest_name(name) || crate::jsonnet::is_jsonnet_name(name)) || !filter.accepts(rel)
    });
    Ok((files, total))
}

/// Files under `dir` (not in hidden directories), as `/`-separated paths relative to it. Symlinked
/// directories are not descended into; symlinked files are listed (and checked when resolved).
fn list_files(dir: &Path, recurse: bool) -> Result<Vec<String>, RenderError> {
    let mut files = Vec::new();
    let mut queue = VecDeque::from([String::new()]);
    while let Some(prefix) = queue.pop_front() {
        let current = if prefix.is_empty() {
            dir.to_path_buf()
        } else {
            dir.join(&prefix)
        };
        let entries = std::fs::read_dir(&current)
            .map_err(|e| RenderError::io(format!("cannot list {}", current.display()), e))?;
        for entry in entries {
            let entry = entry.map_err(|e| RenderError::io(format!("cannot list {}", current.display()), e))?;
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            let rel = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}/{name}")
            };
            let file_type = entry
                .file_type()
                .map_err(|e| RenderError::io(format!("cannot inspect {}", entry.path().display()), e))?;
            if file_type.is_dir() {
                if recurse && !name.starts_with('.') {
                    queue.push_back(rel);
                }
            } else {
                files.push(rel);
            }
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_patterns_accept_everything() {
        let f = FileFilter::new("", "").unwrap();
        assert!(f.accepts("a.yaml"));
        assert!(f.accepts("sub/b.json"));
    }

    #[test]
    fn include_with_braces_matches_names_and_paths() {
        let f = FileFilter::new("{a.yaml,b.yaml}", "").unwrap();
        assert!(f.accepts("a.yaml"));
        assert!(f.accepts("sub/b.yaml"));
        assert!(!f.accepts("c.yaml"));
        let f = FileFilter::new("sub/*.yaml", "").unwrap();
        assert!(f.accepts("sub/c.yaml"));
        assert!(!f.accepts("c.yaml"));
        let f = FileFilter::new("*.yaml", "").unwrap();
        assert!(f.accepts("deep/er/c.yaml"));
        assert!(!f.accepts("c.json"));
    }

    #[test]
    fn exclude_wins() {
        let f = FileFilter::new("*.yaml", "{secret*,tmp/*}").unwrap();
        assert!(f.accepts("app.yaml"));
        assert!(!f.accepts("secret-db.yaml"));
        assert!(!f.accepts("tmp/x.yaml"));
        assert!(!f.accepts("sub/secret.yaml"));
    }

    #[test]
    fn bad_glob_is_an_error() {
        let err = FileFilter::new("{a", "").unwrap_err().to_string();
        assert!(err.contains("directory.include"), "{err}");
    }
}

//! `git`: directories or JSON/YAML files of a checkout, selected by globs (`*` does not cross `/`,
//! `**` does), with `exclude` globs removing matches. Patterns must stay inside the repository and
//! symbolic links are never followed out of it.

use std::collections::BTreeSet;
use std::path::Path;

use capstan_api::applicationset::GitGenerator;
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use serde_json::Value;

use super::{Context, ParamSet};
use crate::error::GenerateError;
use crate::inputs::GitSource;
use crate::params::{Params, basename, dirname, flatten, insert_path_params, normalize_name, prefixed};
use crate::template::parse_yaml;

/// The directories and files of a checkout (relative, `/`-separated, sorted), without `.git`.
#[derive(Debug, Default)]
pub(crate) struct Tree {
    dirs: Vec<String>,
    files: Vec<String>,
    /// Symbolic links that leave the checkout or point nowhere (listed among `files` too).
    escaping: BTreeSet<String>,
}

impl Tree {
    /// List everything under `root` without following symbolic links to directories.
    pub(crate) fn list(root: &Path) -> std::io::Result<Tree> {
        let canonical_root = root.canonicalize()?;
        let mut tree = Tree::default();
        visit(&canonical_root, &canonical_root, "", &mut tree)?;
        tree.dirs.sort();
        tree.files.sort();
        Ok(tree)
    }
}

fn visit(root: &Path, dir: &Path, prefix: &str, tree: &mut Tree) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == ".git" {
            continue;
        }
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let file_type = entry.file_type()?;
        if file_type.is_dir() {
            visit(root, &entry.path(), &rel, tree)?;
            tree.dirs.push(rel);
        } else if file_type.is_symlink() {
            match std::fs::canonicalize(entry.path()) {
                Ok(target) if target.starts_with(root) => {
                    // Links to files inside the checkout are files; links to directories are not
                    // listed (git does not list them as directories either).
                    if target.is_file() {
                        tree.files.push(rel);
                    }
                }
                _ => {
                    tree.escaping.insert(rel.clone());
                    tree.files.push(rel);
                }
            }
        } else if file_type.is_file() {
            tree.files.push(rel);
        }
    }
    Ok(())
}

/// A glob pattern of the generator, checked to stay inside the repository.
fn compile(pattern: &str, place: &str) -> Result<globset::Glob, GenerateError> {
    let invalid = |message: String| GenerateError::InvalidGenerator {
        place: place.to_string(),
        message,
    };
    let mut trimmed = pattern.trim();
    while let Some(rest) = trimmed.strip_prefix("./") {
        trimmed = rest;
    }
    if trimmed.is_empty() {
        return Err(invalid("empty path pattern".into()));
    }
    if trimmed.starts_with('/') || trimmed.starts_with('\\') {
        return Err(invalid(format!(
            "path {pattern:?} is absolute: patterns are relative to the repository root"
        )));
    }
    if trimmed.split(['/', '\\']).any(|segment| segment == "..") {
        return Err(invalid(format!(
            "path {pattern:?} leaves the repository ('..' is not allowed)"
        )));
    }
    GlobBuilder::new(trimmed)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map_err(|e| invalid(format!("invalid glob {pattern:?}: {}", e.kind())))
}

/// Include and exclude sets from `(path, exclude)` items.
fn globs<'a>(
    items: impl Iterator<Item = (&'a str, bool)>,
    place: &str,
    field: &str,
) -> Result<(GlobSet, GlobSet), GenerateError> {
    let mut include = GlobSetBuilder::new();
    let mut exclude = GlobSetBuilder::new();
    for (i, (path, is_exclude)) in items.enumerate() {
        let glob = compile(path, &format!("{place}.{field}[{i}].path"))?;
        if is_exclude {
            exclude.add(glob);
        } else {
            include.add(glob);
        }
    }
    let build = |b: GlobSetBuilder| {
        b.build().map_err(|e| GenerateError::InvalidGenerator {
            place: format!("{place}.{field}"),
            message: e.to_string(),
        })
    };
    Ok((build(include)?, build(exclude)?))
}

/// The parameter sets of a git generator at `place` (`generators[0].git`).
pub(crate) fn generate(g: &GitGenerator, place: &str, ctx: &Context<'_>) -> Result<Vec<ParamSet>, GenerateError> {
    if g.repo_url.trim().is_empty() {
        return Err(GenerateError::InvalidGenerator {
            place: place.to_string(),
            message: "repoURL is empty".into(),
        });
    }
    let (dirs, files) = (!g.directories.is_empty(), !g.files.is_empty());
    if dirs == files {
        return Err(GenerateError::InvalidGenerator {
            place: place.to_string(),
            message: if dirs {
                "set either directories or files, not both".into()
            } else {
                "one of directories or files must be set".into()
            },
        });
    }
    // Patterns are checked before the repository is looked at.
    let (include, exclude) = if dirs {
        globs(
            g.directories.iter().map(|d| (d.path.as_str(), d.exclude)),
            place,
            "directories",
        )?
    } else {
        globs(g.files.iter().map(|f| (f.path.as_str(), f.exclude)), place, "files")?
    };
    let source = GitSource::new(&g.repo_url, &g.revision);
    let unavailable = |message: String| GenerateError::GitSourceUnavailable {
        place: place.to_string(),
        git: source.clone(),
        message,
    };
    let root = ctx
        .inputs
        .checkouts
        .get(&source)
        .ok_or_else(|| unavailable("not checked out".into()))?;
    let tree = ctx
        .tree(root)
        .map_err(|e| unavailable(format!("cannot read the checkout {}: {e}", root.display())))?;
    let selected = |path: &&String| include.is_match(path.as_str()) && !exclude.is_match(path.as_str());

    let mut sets = Vec::new();
    if dirs {
        for dir in tree.dirs.iter().filter(selected) {
            let mut params = Params::new();
            insert_path_params(&g.path_param_prefix, dir, &mut params);
            let origin = format!("directory {dir}");
            super::add_values(&g.values, &mut params, place, &origin)?;
            sets.push(ParamSet { params, origin });
        }
    } else {
        for file in tree.files.iter().filter(selected) {
            let invalid = |message: String| GenerateError::InvalidGitFile {
                place: place.to_string(),
                file: file.clone(),
                message,
            };
            if tree.escaping.contains(file) {
                return Err(invalid(
                    "symbolic link pointing outside the repository (or nowhere)".into(),
                ));
            }
            let bytes = std::fs::read(root.join(file)).map_err(|e| invalid(format!("cannot read: {e}")))?;
            let text = String::from_utf8(bytes).map_err(|_| invalid("not valid UTF-8 text".into()))?;
            for (element, object) in parse_file(&text, file).map_err(|e| invalid(e.to_string()))? {
                let mut params = flatten(&object);
                insert_file_params(&g.path_param_prefix, file, &mut params);
                let origin = match element {
                    Some(i) => format!("file {file}, element {i}"),
                    None => format!("file {file}"),
                };
                super::add_values(&g.values, &mut params, place, &origin)?;
                sets.push(ParamSet { params, origin });
            }
        }
    }
    Ok(sets)
}

/// Why a parameter file cannot be used.
#[derive(Debug, thiserror::Error)]
enum ParamFileError {
    /// Not YAML or JSON.
    #[error("not valid YAML or JSON: {0}")]
    Syntax(String),
    /// A list element that is not an object.
    #[error("element {index} must be an object of parameters, found {found}")]
    NotAnObject {
        /// Its index.
        index: usize,
        /// Its JSON type.
        found: &'static str,
    },
    /// Neither an object nor a list.
    #[error("must hold an object of parameters or a list of them, found {0}")]
    Neither(&'static str),
}

/// The objects of a parameter file: one for an object (or an empty file), one per element for a list.
fn parse_file(text: &str, file: &str) -> Result<Vec<(Option<usize>, Value)>, ParamFileError> {
    let value = if file.to_ascii_lowercase().ends_with(".json") {
        serde_json::from_str(text).map_err(|e| ParamFileError::Syntax(e.to_string()))?
    } else {
        parse_yaml(text).map_err(|e| ParamFileError::Syntax(e.to_string()))?
    };
    match value {
        Value::Null => Ok(vec![(None, Value::Object(Default::default()))]),
        Value::Object(_) => Ok(vec![(None, value)]),
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::Object(_) => Ok((Some(i), item)),
                other => Err(ParamFileError::NotAnObject {
                    index: i,
                    found: super::list::json_type(&other),
                }),
            })
            .collect(),
        other => Err(ParamFileError::Neither(super::list::json_type(&other))),
    }
}

/// `path` (the file's directory) and its derived parameters, plus `path.filename` and
/// `path.filenameNormalized`; they override keys of the file with the same names.
fn insert_file_params(prefix: &str, file: &str, params: &mut Params) {
    insert_path_params(prefix, dirname(file), params);
    let path = prefixed(prefix, "path");
    let filename = basename(file);
    params.insert(format!("{path}.filename"), filename.to_string());
    params.insert(format!("{path}.filenameNormalized"), normalize_name(filename));
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use capstan_api::applicationset::{GitDirectoryItem, GitFileItem};

    use super::*;
    use crate::generate::Inputs;

    const URL: &str = "https://git.example/services.git";

    fn checkout(files: &[(&str, &str)]) -> (tempfile::TempDir, Inputs) {
        let dir = tempfile::tempdir().unwrap();
        for (path, contents) in files {
            let p = dir.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, contents).unwrap();
        }
        let mut inputs = Inputs::default();
        inputs
            .checkouts
            .insert(GitSource::new(URL, ""), dir.path().to_path_buf());
        (dir, inputs)
    }

    fn dirs(items: &[(&str, bool)]) -> GitGenerator {
        GitGenerator {
            repo_url: URL.into(),
            directories: items
                .iter()
                .map(|(p, e)| GitDirectoryItem {
                    path: p.to_string(),
                    exclude: *e,
                })
                .collect(),
            ..Default::default()
        }
    }

    fn files(items: &[(&str, bool)]) -> GitGenerator {
        GitGenerator {
            repo_url: URL.into(),
            revision: "HEAD".into(),
            files: items
                .iter()
                .map(|(p, e)| GitFileItem {
                    path: p.to_string(),
                    exclude: *e,
                })
                .collect(),
            ..Default::default()
        }
    }

    fn run(g: &GitGenerator, inputs: &Inputs) -> Result<Vec<ParamSet>, GenerateError> {
        generate(g, "generators[0].git", &Context::new(inputs))
    }

    fn paths(sets: &[ParamSet]) -> Vec<&str> {
        sets.iter().map(|s| s.params["path"].as_str()).collect()
    }

    const LAYOUT: &[(&str, &str)] = &[
        ("apps/web/kustomization.yaml", ""),
        ("apps/api/kustomization.yaml", ""),
        ("apps/api/base/x.yaml", ""),
        ("apps/legacy/x.yaml", ""),
        ("platform/dns/x.yaml", ""),
        (".git/config", ""),
    ];

    #[test]
    fn directories_match_one_level_and_exclude() {
        let (_dir, inputs) = checkout(LAYOUT);
        let sets = run(&dirs(&[("apps/*", false), ("apps/legacy", true)]), &inputs).unwrap();
        assert_eq!(paths(&sets), ["apps/api", "apps/web"], "* does not cross '/'");
        let p = &sets[0].params;
        assert_eq!(p["path.basename"], "api");
        assert_eq!(p["path[0]"], "apps");
        assert_eq!(p["path[1]"], "api");
        assert_eq!(sets[0].origin, "directory apps/api");

        let sets = run(&dirs(&[("apps/**", false)]), &inputs).unwrap();
        assert_eq!(paths(&sets), ["apps/api", "apps/api/base", "apps/legacy", "apps/web"]);
        let sets = run(&dirs(&[("*", false)]), &inputs).unwrap();
        assert_eq!(paths(&sets), ["apps", "platform"], ".git is never listed");
    }

    #[test]
    fn directories_with_prefix_and_values() {
        let (_dir, inputs) = checkout(LAYOUT);
        let mut g = dirs(&[("./platform/*", false)]);
        g.path_param_prefix = "infra".into();
        g.values = BTreeMap::from([("ns".to_string(), "ns-{{infra.path.basename}}".to_string())]);
        let sets = run(&g, &inputs).unwrap();
        assert_eq!(sets.len(), 1);
        let p = &sets[0].params;
        assert_eq!(p["infra.path"], "platform/dns");
        assert_eq!(p["infra.path.basenameNormalized"], "dns");
        assert_eq!(p["values.ns"], "ns-dns");
        assert!(!p.contains_key("path"));
    }

    #[test]
    fn files_are_flattened_with_path_params() {
        let (_dir, inputs) = checkout(&[
            (
                "services/web/prod.yaml",
                "cluster: prod\nservice: web\nimageTag: \"1.2\"\nresources: {cpu: 2}\n",
            ),
            (
                "services/web/staging.json",
                r#"{"cluster": "staging", "service": "web", "replicas": 1}"#,
            ),
            (
                "services/api/all.yaml",
                "- {cluster: a, service: api}\n- {cluster: b, service: api}\n",
            ),
            ("services/api/README.md", "not yaml: [\n"),
            ("services/api/skip.yaml", "cluster: skip\n"),
        ]);
        let g = files(&[
            ("services/*/*.yaml", false),
            ("services/*/*.json", false),
            ("**/skip.yaml", true),
        ]);
        let sets = run(&g, &inputs).unwrap();
        let origins: Vec<&str> = sets.iter().map(|s| s.origin.as_str()).collect();
        assert_eq!(
            origins,
            [
                "file services/api/all.yaml, element 0",
                "file services/api/all.yaml, element 1",
                "file services/web/prod.yaml",
                "file services/web/staging.json"
            ]
        );
        let prod = &sets[2].params;
        assert_eq!(prod["cluster"], "prod");
        assert_eq!(prod["imageTag"], "1.2");
        assert_eq!(prod["resources.cpu"], "2");
        assert_eq!(prod["path"], "services/web");
        assert_eq!(prod["path.basename"], "web");
        assert_eq!(prod["path.filename"], "prod.yaml");
        assert_eq!(prod["path.filenameNormalized"], "prod.yaml");
        assert_eq!(prod["path[1]"], "web");
        assert_eq!(sets[1].params["cluster"], "b");
        assert_eq!(sets[3].params["replicas"], "1");
    }

    #[test]
    fn invalid_yaml_file_is_an_error_naming_the_file() {
        let (_dir, inputs) = checkout(&[
            ("services/a/prod.yaml", "cluster: prod\n"),
            ("services/b/prod.yaml", "cluster: [prod\nservice: b\n"),
        ]);
        let err = run(&files(&[("services/*/prod.yaml", false)]), &inputs).unwrap_err();
        assert_eq!(err.reason(), "InvalidGitFile");
        let msg = err.to_string();
        assert!(
            msg.starts_with("generators[0].git: services/b/prod.yaml: not valid YAML or JSON: "),
            "{msg}"
        );
        assert!(!msg.contains('\n'), "one line: {msg}");

        let (_dir, inputs) = checkout(&[("c.json", "{\"a\": }")]);
        let err = run(&files(&[("*.json", false)]), &inputs).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("generators[0].git: c.json: not valid YAML or JSON: "),
            "{err}"
        );

        let (_dir, inputs) = checkout(&[("s.yaml", "just a string\n")]);
        let err = run(&files(&[("*.yaml", false)]), &inputs).unwrap_err();
        assert!(err.to_string().contains("found a string"), "{err}");
    }

    #[test]
    fn patterns_may_not_leave_the_repository() {
        let (_dir, inputs) = checkout(LAYOUT);
        for pattern in ["../*", "apps/../../x/*", "/etc/*"] {
            let err = run(&files(&[(pattern, false)]), &inputs).unwrap_err();
            assert_eq!(err.reason(), "InvalidGenerator", "{pattern}");
            assert!(
                err.to_string().starts_with("generators[0].git.files[0].path: path "),
                "{err}"
            );
        }
        let err = run(&dirs(&[("apps/*", false), ("../x", true)]), &inputs).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("generators[0].git.directories[1].path: path \"../x\" leaves"),
            "{err}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_leaving_the_checkout_are_not_followed() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.yaml"), "password: hunter2\n").unwrap();
        std::fs::create_dir(outside.path().join("dir")).unwrap();
        let (dir, inputs) = checkout(&[("config/a.yaml", "name: a\n")]);
        std::os::unix::fs::symlink(outside.path().join("secret.yaml"), dir.path().join("config/b.yaml")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("dir"), dir.path().join("linked")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("config/a.yaml"), dir.path().join("config/c.yaml")).unwrap();

        let err = run(&files(&[("config/*.yaml", false)]), &inputs).unwrap_err();
        assert_eq!(err.reason(), "InvalidGitFile");
        assert!(
            err.to_string()
                .contains("config/b.yaml: symbolic link pointing outside"),
            "{err}"
        );
        // Excluding it, the link inside the checkout is read like a file.
        let sets = run(&files(&[("config/*.yaml", false), ("config/b.yaml", true)]), &inputs).unwrap();
        let names: Vec<_> = sets.iter().map(|s| s.params["path.filename"].as_str()).collect();
        assert_eq!(names, ["a.yaml", "c.yaml"]);
        // A linked directory is not a directory of the repository.
        let sets = run(&dirs(&[("*", false)]), &inputs).unwrap();
        assert_eq!(paths(&sets), ["config"]);
    }

    #[test]
    fn missing_checkout_and_bad_definitions() {
        let inputs = Inputs::default();
        let err = run(&dirs(&[("apps/*", false)]), &inputs).unwrap_err();
        assert_eq!(err.reason(), "GitSourceUnavailable");
        assert_eq!(
            err.missing_git_source(),
            Some(&GitSource {
                repo_url: URL.into(),
                revision: "HEAD".into()
            })
        );
        assert_eq!(
            err.to_string(),
            format!("generators[0].git: repository {URL} at revision HEAD: not checked out")
        );
        let mut both = dirs(&[("a", false)]);
        both.files = vec![GitFileItem {
            path: "x.yaml".into(),
            exclude: false,
        }];
        assert!(run(&both, &inputs).unwrap_err().to_string().contains("not both"));
        let err = run(&dirs(&[("apps/[", false)]), &inputs).unwrap_err();
        assert!(err.to_string().contains("invalid glob"), "{err}");
    }
}

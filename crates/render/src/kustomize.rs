//! Kustomize overlays: `kustomize build` on `spec.source.path`. The checkout is first checked for
//! symlinks and kustomization references (resources, patches, generator files, ...) that lead out of
//! the repository; references by URL (remote bases, Git URLs, `file://`) are refused, so Kustomize
//! never fetches anything or reads another team's files. Charts of `helmCharts:` run with
//! `--enable-helm` and Capstan's helm; those from a chart repository are fetched by the caller from
//! registered repositories and vendored where Kustomize looks for them ([`crate::kustomize_charts`]).
//! `spec.source.kustomize` options are applied with `kustomize edit` in a scratch copy of the
//! repository, never in the shared checkout. Kustomize runs confined by the kernel ([`tools::sandboxed`]), every
//! value from the Application follows `--`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use capstan_api::application::ApplicationSourceKustomize;
use serde_json::Value;

pub use crate::kind::{KUSTOMIZATION_FILES, kustomization_file};
use crate::kustomize_charts::{self, HelmChart};
use crate::paths::{copy_tree, display_rel, resolve_in_repo, scan_symlinks};
use crate::task::blocking;
use crate::{RenderError, kustomization, manifests, tools};

fn has_options(k: &ApplicationSourceKustomize) -> bool {
    !k.name_prefix.is_empty()
        || !k.name_suffix.is_empty()
        || !k.images.is_empty()
        || !k.common_labels.is_empty()
        || !k.common_annotations.is_empty()
        || !k.namespace.is_empty()
}

/// The `helmCharts` entries of the overlay at `app_rel` of the canonical checkout `root` and of every
/// kustomization it includes, after checking the checkout as [`render`] does.
pub(crate) fn helm_charts(root: &Path, app_rel: &str) -> Result<Vec<HelmChart>, RenderError> {
    scan_symlinks(root)?;
    let app_dir = resolve_in_repo(root, root, app_rel)?;
    let mut charts = Vec::new();
    check_references(root, &app_dir, &mut HashSet::new(), &mut charts)?;
    Ok(charts)
}

/// What one `kustomize build` needs besides the overlay.
pub(crate) struct KustomizeJob {
    /// The kustomize binary.
    pub binary: PathBuf,
    /// Helm, for kustomizations with `helmCharts` (`None` if it is not installed).
    pub helm: Option<PathBuf>,
    /// `spec.source.kustomize`.
    pub options: Option<ApplicationSourceKustomize>,
    /// Charts of `helmCharts` fetched by the caller: `((name, repo, version), extracted chart)`.
    pub charts: Vec<((String, String, String), PathBuf)>,
    /// The timeout of each tool invocation.
    pub timeout: Duration,
}

/// Render the overlay at `app_rel` of the canonical checkout `root`.
pub(crate) async fn render(job: KustomizeJob, root: &Path, app_rel: &str) -> Result<Vec<Value>, RenderError> {
    let KustomizeJob {
        binary,
        helm,
        options,
        charts: fetched,
        timeout,
    } = job;
    let options = options.filter(has_options);
    let (root_owned, app_owned) = (root.to_path_buf(), app_rel.to_string());
    let has_options = options.is_some();
    // Check the checkout, and copy it if `kustomize edit` must write or charts must be vendored.
    let (scratch, copied, uses_helm) = blocking(move || -> Result<(tempfile::TempDir, bool, bool), RenderError> {
        let charts = helm_charts(&root_owned, &app_owned)?;
        let needs_copy = has_options || charts.iter().any(|c| !c.is_vendored() && !c.repo.is_empty());
        let scratch = scratch_dir()?;
        if needs_copy {
            let copy = scratch.path().join("repo");
            copy_tree(&root_owned, &copy)?;
            kustomize_charts::vendor(&charts, &root_owned, &copy, &fetched)?;
        }
        Ok((scratch, needs_copy, !charts.is_empty()))
    })
    .await?;
    let home = scratch.path().join("home");
    std::fs::create_dir_all(&home).map_err(|e| RenderError::io("cannot create a scratch directory", e))?;
    let work_root = if copied {
        scratch.path().join("repo")
    } else {
        root.to_path_buf()
    };
    let app_dir = if app_rel == "." {
        work_root.clone()
    } else {
        work_root.join(app_rel)
    };
    if let Some(k) = &options {
        for args in edit_commands(k) {
            let mut cmd = tools::sandboxed(&binary, &home);
            cmd.write(scratch.path());
            cmd.arg("edit").args(&args).current_dir(&app_dir);
            let command = format!(
                "kustomize edit {}",
                args.iter().take(2).cloned().collect::<Vec<_>>().join(" ")
            );
            tools::run(cmd, &command, app_rel, timeout).await?;
        }
    }
    let mut cmd = tools::sandboxed(&binary, &home);
    // Kustomize reads the overlay (the checkout, or the scratch copy it was edited in) and writes
    // only its scratch; it may start Capstan's helm and nothing else.
    cmd.write(scratch.path()).read(&work_root);
    if uses_helm {
        let helm = match helm {
            Some(helm) => helm,
            None => tools::find("helm")?,
        };
        cmd.exec(&std::fs::canonicalize(&helm).unwrap_or_else(|_| helm.clone()));
        cmd.args(["build", "--load-restrictor=LoadRestrictionsRootOnly"]);
        cmd.arg("--enable-helm").arg("--helm-command").arg(helm);
    } else {
        cmd.args(["build", "--load-restrictor=LoadRestrictionsRootOnly"]);
    }
    cmd.arg("--").arg(&app_dir).current_dir(&work_root);
    let output = tools::run(cmd, "kustomize build", app_rel, timeout).await?;
    drop(scratch);
    manifests::parse_yaml_stream(&output, &format!("output of kustomize build for path '{app_rel}'"))
}

fn scratch_dir() -> Result<tempfile::TempDir, RenderError> {
    tempfile::Builder::new()
        .prefix("capstan-render-")
        .tempdir()
        .map_err(|e| RenderError::io("cannot create a scratch directory", e))
}

/// The `kustomize edit` argument lists applying `spec.source.kustomize`, in Argo CD's order.
pub fn edit_commands(k: &ApplicationSourceKustomize) -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    let set = |what: &str, value: &str| vec!["set".to_string(), what.to_string(), "--".to_string(), value.to_string()];
    if !k.name_prefix.is_empty() {
        commands.push(set("nameprefix", &k.name_prefix));
    }
    if !k.name_suffix.is_empty() {
        commands.push(set("namesuffix", &k.name_suffix));
    }
    if !k.images.is_empty() {
        let mut args = vec!["set".to_string(), "image".to_string(), "--".to_string()];
        args.extend(k.images.iter().cloned());
        commands.push(args);
    }
    for (what, map) in [("label", &k.common_labels), ("annotation", &k.common_annotations)] {
        if !map.is_empty() {
            let mut args = vec![
                "add".to_string(),
                what.to_string(),
                "--force".to_string(),
                "--".to_string(),
            ];
            args.extend(map.iter().map(|(key, value)| format!("{key}:{value}")));
            commands.push(args);
        }
    }
    if !k.namespace.is_empty() {
        commands.push(set("namespace", &k.namespace));
    }
    commands
}

/// Check every local path a kustomization (and the kustomizations it includes) refers to: it must not
/// be absolute or lead out of the repository. Missing paths and URLs are left for Kustomize to report.
fn check_references(
    root: &Path,
    dir: &Path,
    visited: &mut HashSet<PathBuf>,
    charts: &mut Vec<HelmChart>,
) -> Result<(), RenderError> {
    if !visited.insert(dir.to_path_buf()) {
        return Ok(());
    }
    let Some(file) = kustomization_file(dir) else {
        return Ok(());
    };
    let file_label = display_rel(root, &file);
    // Bounded like a manifest: the file is read whole.
    let size = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
    if size > crate::directory::MAX_MANIFEST_FILE_BYTES {
        return Err(RenderError::UnsupportedKustomization {
            file: file_label,
            message: format!(
                "it is larger than {} MiB",
                crate::directory::MAX_MANIFEST_FILE_BYTES >> 20
            ),
        });
    }
    let text = std::fs::read_to_string(&file).map_err(|e| RenderError::UnsupportedKustomization {
        file: file_label.clone(),
        message: format!("it cannot be read as UTF-8 text: {e}"),
    })?;
    // What Capstan cannot read completely is refused, never handed to Kustomize unchecked.
    let doc = kustomization::read(&text, &file_label)?;
    charts.extend(kustomize_charts::entries(root, dir, &file_label, &doc)?);
    for reference in references(&doc) {
        if is_remote(reference) {
            return Err(RenderError::RemoteReference {
                file: file_label,
                reference: reference.chars().take(200).collect(),
            });
        }
        match resolve_in_repo(root, dir, reference) {
            Ok(target) if target.is_dir() => check_references(root, &target, visited, charts)?,
            Ok(_) => {}
            // Kustomize tries a reference that is not a local file as a remote one (with spellings
            // no list can cover: any `user@host:path`, any case of a forge's name), so a reference
            // must exist in the repository.
            Err(e @ RenderError::NotFound { .. }) => return Err(RenderError::in_file(file_label, e)),
            Err(e) => return Err(RenderError::in_file(file_label, e)),
        }
    }
    Ok(())
}

/// Whether Kustomize would fetch `reference` instead of reading a file of the repository: any URL
/// (`https://`, `git::`, `file://`, `ssh://`…), scp-like Git addresses (`git@host:org/repo`), and
/// the host-first forms Kustomize accepts (`github.com/org/repo//path`).
fn is_remote(reference: &str) -> bool {
    let r = reference.trim().to_ascii_lowercase();
    let r = r.as_str();
    r.contains("://")
        || r.starts_with("git@")
        || r.starts_with("git::")
        || r.contains("?ref=")
        || r.contains("?version=")
        || r.contains("//") && !r.starts_with("//")
        || ["github.com/", "gitlab.com/", "bitbucket.org/"]
            .iter()
            .any(|h| r.starts_with(h))
        || r.contains('\n')
        // scp-like `user@host:path` and `host:path`.
        || r.split_once(':').is_some_and(|(before, _)| !before.contains('/'))
}

/// The local paths named in a kustomization.
fn references(doc: &Value) -> Vec<&str> {
    let mut out = Vec::new();
    for field in [
        "resources",
        "bases",
        "components",
        "crds",
        "configurations",
        "generators",
        "transformers",
        "validators",
        "patchesStrategicMerge",
    ] {
        out.extend(strings(doc.get(field)));
    }
    for field in ["patches", "patchesJson6902", "replacements"] {
        if let Some(Value::Array(items)) = doc.get(field) {
            out.extend(items.iter().filter_map(|i| i.get("path")).filter_map(Value::as_str));
        }
    }
    for field in ["configMapGenerator", "secretGenerator"] {
        if let Some(Value::Array(items)) = doc.get(field) {
            for item in items {
                for file in strings(item.get("files")) {
                    // `key=path` or `path`.
                    out.push(file.split_once('=').map_or(file, |(_, path)| path));
                }
                out.extend(strings(item.get("envs")));
                out.extend(strings(item.get("env")));
            }
        }
    }
    out.extend(strings(doc.pointer("/openapi/path")));
    // The chart home may not exist yet (charts are vendored into it): `kustomize_charts` checks it.
    out.extend(strings(doc.pointer("/helmGlobals/configHome")));
    if let Some(Value::Array(charts)) = doc.get("helmCharts") {
        for chart in charts {
            out.extend(strings(chart.get("valuesFile")));
            out.extend(strings(chart.get("additionalValuesFiles")));
        }
    }
    out
}

/// A string or the strings of a sequence.
fn strings(v: Option<&Value>) -> Vec<&str> {
    match v {
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
        Some(Value::String(s)) => vec![s.as_str()],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    #[test]
    fn edit_commands_follow_argo() {
        let k = ApplicationSourceKustomize {
            name_prefix: "p-".into(),
            images: vec!["nginx=reg/nginx:1.2".into()],
            common_labels: BTreeMap::from([("app".into(), "web".into())]),
            namespace: "ns".into(),
            ..Default::default()
        };
        assert_eq!(
            edit_commands(&k),
            vec![
                vec!["set", "nameprefix", "--", "p-"],
                vec!["set", "image", "--", "nginx=reg/nginx:1.2"],
                vec!["add", "label", "--force", "--", "app:web"],
                vec!["set", "namespace", "--", "ns"],
            ]
        );
        assert!(edit_commands(&ApplicationSourceKustomize::default()).is_empty());
    }

    #[test]
    fn references_by_url_are_remote() {
        for remote in [
            "https://github.com/org/repo//base?ref=v1",
            "git@github.com:org/repo.git//base",
            "git::https://internal.example/base",
            "file:///etc/kubernetes",
            "ssh://git@host/org/repo",
            "github.com/org/repo/base?ref=main",
            "10.0.0.1//base",
        ] {
            assert!(is_remote(remote), "{remote}");
        }
        for local in ["../base", "base", "./overlays/prod", "cm.yaml"] {
            assert!(!is_remote(local), "{local}");
        }
    }

    #[test]
    fn references_cover_files_and_dirs() {
        let doc = json!({
            "resources": ["../base", "cm.yaml"],
            "patches": [{"path": "p.yaml"}, {"patch": "inline"}],
            "configMapGenerator": [{"files": ["k=f.txt", "g.txt"], "envs": ["e.env"]}],
            "openapi": {"path": "schema.json"},
        });
        let mut refs = references(&doc);
        refs.sort();
        assert_eq!(
            refs,
            ["../base", "cm.yaml", "e.env", "f.txt", "g.txt", "p.yaml", "schema.json"]
        );
    }
}

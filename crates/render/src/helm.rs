//! Helm charts: `helm template` on `spec.source.path` with the Application's release name, namespace,
//! cluster capabilities, value files, inline values and parameters. Helm runs with its cache, config
//! and data directories in a scratch directory, so it never reads or writes the user's Helm state and
//! never reaches a chart repository. Local `file://` dependencies that are not vendored under `charts/`
//! are built with `helm dependency build` in a scratch copy of the repository, never in the shared
//! checkout. Value files and dependency paths must stay inside the repository, and a lock file may
//! only pin the repositories `Chart.yaml` declares.
//!
//! Nothing from the Application or the repository reaches Helm's command line as an option: the
//! release name is checked as Helm checks it (DNS-1123, at most 53 characters), values are passed as
//! `--flag=value`, and positional arguments follow `--`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use capstan_api::application::{ApplicationSourceHelm, HelmParameter};
use serde_json::Value;

use crate::paths::{copy_tree, display_rel, resolve_in_repo, scan_symlinks};
use crate::task::blocking;
use crate::tools::Tool;
use crate::{RenderError, manifests, tools};

/// What to render.
pub(crate) struct HelmJob {
    pub binary: PathBuf,
    /// The canonical checkout.
    pub root: PathBuf,
    /// The chart's path in the repository (`.` for the root).
    pub app_rel: String,
    pub options: ApplicationSourceHelm,
    pub release: String,
    pub namespace: String,
    pub kube_version: Option<String>,
    pub api_versions: Vec<String>,
    pub timeout: Duration,
    /// `(ref, checkout root)` of the sources `$ref/…` value files read.
    pub refs: Vec<(String, PathBuf)>,
    /// `(name, extracted chart)` of the repository dependencies to vendor under `charts/`.
    pub dependencies: Vec<(String, PathBuf)>,
}

/// Files prepared before Helm runs.
struct Prepared {
    scratch: tempfile::TempDir,
    chart_dir: PathBuf,
    values_files: Vec<PathBuf>,
    build_dependencies: bool,
}

/// Longest release name Helm accepts.
const MAX_RELEASE_NAME: usize = 53;

/// Check a release name as Helm does: a DNS-1123 subdomain of at most 53 characters. Anything else
/// (notably a value starting with `-`, which Helm would read as a flag) is refused before Helm runs.
pub fn check_release_name(name: &str) -> Result<(), RenderError> {
    let invalid = |reason: &str| RenderError::InvalidReleaseName {
        name: name.chars().take(80).collect(),
        reason: reason.to_string(),
    };
    if name.is_empty() {
        return Err(invalid("it is empty"));
    }
    if name.len() > MAX_RELEASE_NAME {
        return Err(invalid("it is longer than 53 characters"));
    }
    if !capstan_api::names::is_dns1123_subdomain(name) {
        return Err(invalid(
            "it must consist of lower case letters, digits, '-' and '.', and start and end with a letter or digit",
        ));
    }
    Ok(())
}

pub(crate) async fn render(job: HelmJob) -> Result<Vec<Value>, RenderError> {
    check_release_name(&job.release)?;
    let prepared = {
        let root = job.root.clone();
        let app_rel = job.app_rel.clone();
        let options = job.options.clone();
        let refs = job.refs.clone();
        let dependencies = job.dependencies.clone();
        blocking(move || prepare(&root, &app_rel, &options, &refs, &dependencies)).await?
    };
    let homes = prepared.scratch.path().join("helm");
    if prepared.build_dependencies {
        let mut cmd = helm_command(&job, &prepared, &homes);
        cmd.args(["dependency", "build", "--skip-refresh", "--"])
            .arg(&prepared.chart_dir)
            .current_dir(&prepared.chart_dir);
        tools::run(cmd, "helm dependency build", &job.app_rel, job.timeout).await?;
    }
    let mut cmd = helm_command(&job, &prepared, &homes);
    cmd.current_dir(&prepared.chart_dir)
        .args(template_args(&job, &prepared.chart_dir, &prepared.values_files));
    let output = tools::run(cmd, "helm template", &job.app_rel, job.timeout).await?;
    drop(prepared);
    manifests::parse_yaml_stream(&output, &format!("output of helm template for path '{}'", job.app_rel))
}

/// A `helm` run isolated from the controller's environment and the user's Helm configuration: a
/// scrubbed environment ([`tools::sandboxed`]) with Helm's homes in the scratch directory, confined
/// to reading the chart's checkout and the `$ref` sources' and writing only its scratch (value files,
/// a copy whose dependencies it builds).
fn helm_command(job: &HelmJob, prepared: &Prepared, homes: &Path) -> Tool {
    let mut cmd = tools::sandboxed(&job.binary, homes);
    cmd.write(prepared.scratch.path()).read(&job.root);
    for (_, root) in &job.refs {
        cmd.read(root);
    }
    cmd.env("HELM_CACHE_HOME", homes.join("cache"))
        .env("HELM_CONFIG_HOME", homes.join("config"))
        .env("HELM_DATA_HOME", homes.join("data"));
    cmd
}

/// The arguments of `helm template`, in precedence order for values: value files, then `values` (or
/// `valuesObject`, which replaces it, as in Argo CD), then parameters.
fn template_args(job: &HelmJob, chart_dir: &Path, values_files: &[PathBuf]) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = vec!["template".into(), "--include-crds".into()];
    // `--flag=value`: a value starting with `-` stays a value.
    if !job.namespace.is_empty() {
        args.push(format!("--namespace={}", job.namespace).into());
    }
    if let Some(v) = job.kube_version.as_deref().filter(|v| !v.is_empty()) {
        args.push(format!("--kube-version={v}").into());
    }
    for api in job.api_versions.iter().filter(|a| !a.is_empty()) {
        args.push(format!("--api-versions={api}").into());
    }
    for file in values_files {
        let mut arg = std::ffi::OsString::from("--values=");
        arg.push(file.as_os_str());
        args.push(arg);
    }
    args.extend(parameter_args(&job.options.parameters).into_iter().map(Into::into));
    // Positional arguments after `--`: neither can be read as an option.
    args.extend([
        "--".into(),
        job.release.clone().into(),
        chart_dir.as_os_str().to_owned(),
    ]);
    args
}

/// `--set name=value` / `--set-string name=value` for each parameter. Commas in values are escaped
/// (Helm would split on them) unless the value is a `{a,b}` list, as Argo CD does.
pub fn parameter_args(parameters: &[HelmParameter]) -> Vec<String> {
    let mut args = Vec::new();
    for p in parameters {
        // One argument, `--set=NAME=VALUE`: a parameter can never become a flag of its own.
        let flag = if p.force_string { "--set-string" } else { "--set" };
        args.push(format!("{flag}={}={}", p.name, escape_set_value(&p.value)));
    }
    args
}

fn escape_set_value(value: &str) -> String {
    if value.starts_with('{') && value.ends_with('}') {
        return value.to_string();
    }
    let mut out = String::with_capacity(value.len());
    let mut previous = None;
    for c in value.chars() {
        if c == ',' && previous != Some('\\') {
            out.push('\\');
        }
        out.push(c);
        previous = Some(c);
    }
    out
}

fn prepare(
    root: &Path,
    app_rel: &str,
    options: &ApplicationSourceHelm,
    refs: &[(String, PathBuf)],
    fetched: &[(String, PathBuf)],
) -> Result<Prepared, RenderError> {
    let chart_dir = resolve_in_repo(root, root, app_rel)?;
    let chart_label = display_rel(root, &chart_dir);

    let mut values_files = Vec::new();
    for file in &options.value_files {
        if file.starts_with("http://") || file.starts_with("https://") {
            return Err(RenderError::RemoteValueFile {
                file: file.clone(),
                chart: chart_label.clone(),
            });
        }
        let (base_root, base_dir, rel) = match value_file_source(file, refs, &chart_label)? {
            Some((ref_root, rel)) => (ref_root, ref_root, rel),
            None => (root, chart_dir.as_path(), file.as_str()),
        };
        let path = match resolve_in_repo(base_root, base_dir, rel) {
            Ok(p) if p.is_file() => p,
            Ok(_) | Err(RenderError::NotFound { .. }) => {
                return Err(RenderError::MissingValueFile {
                    file: file.clone(),
                    chart: chart_label.clone(),
                });
            }
            Err(e) => return Err(e),
        };
        values_files.push(path);
    }

    scan_symlinks(root)?;
    check_lock_files(root, &chart_dir)?;
    let (build_dependencies, vendor) = dependencies_to_build(root, &chart_dir, &chart_label, fetched)?;
    if build_dependencies && !vendor.is_empty() {
        return Err(RenderError::MixedDependencies { chart: chart_label });
    }
    let scratch = tempfile::Builder::new()
        .prefix("capstan-render-")
        .tempdir()
        .map_err(|e| RenderError::io("cannot create a scratch directory", e))?;
    for dir in ["helm/cache", "helm/config", "helm/data"] {
        let dir = scratch.path().join(dir);
        std::fs::create_dir_all(&dir).map_err(|e| RenderError::io(format!("cannot create {}", dir.display()), e))?;
    }

    if let Some(inline) = inline_values(options, &chart_label)? {
        let file = scratch.path().join("values.yaml");
        std::fs::write(&file, inline).map_err(|e| RenderError::io(format!("cannot write {}", file.display()), e))?;
        values_files.push(file);
    }

    let chart_dir = if build_dependencies || !vendor.is_empty() {
        let copy = scratch.path().join("repo");
        copy_tree(root, &copy)?;
        let chart_copy = if chart_label == "." {
            copy
        } else {
            copy.join(&chart_label)
        };
        // Repository dependencies fetched (and verified) by the caller, vendored as Helm would.
        for (name, dir) in &vendor {
            copy_tree(dir, &chart_copy.join("charts").join(name))?;
        }
        chart_copy
    } else {
        chart_dir
    };
    Ok(Prepared {
        scratch,
        chart_dir,
        values_files,
        build_dependencies,
    })
}

/// Where a `valueFiles` entry lives: `$NAME/path` names the checkout of the source whose `ref` is `NAME`
/// (the path is relative to that repository's root, as in Argo CD); anything else is the chart's own
/// repository (`None`).
fn value_file_source<'a>(
    file: &'a str,
    refs: &'a [(String, PathBuf)],
    chart: &str,
) -> Result<Option<(&'a Path, &'a str)>, RenderError> {
    let Some(named) = file.strip_prefix('$') else {
        return Ok(None);
    };
    let (name, rel) = named.split_once('/').unwrap_or((named, ""));
    match refs.iter().find(|(r, _)| r == name) {
        Some((_, root)) if !rel.trim_matches('/').is_empty() => Ok(Some((root.as_path(), rel))),
        Some(_) => Err(RenderError::MissingValueFile {
            file: file.to_string(),
            chart: chart.to_string(),
        }),
        None => Err(RenderError::UnknownRef {
            file: file.to_string(),
            name: name.to_string(),
            chart: chart.to_string(),
        }),
    }
}

/// The inline values to pass as a file: `valuesObject` if set (it replaces `values`), else `values`.
fn inline_values(options: &ApplicationSourceHelm, chart: &str) -> Result<Option<String>, RenderError> {
    if let Some(object) = options.values_object.as_ref().filter(|v| !v.is_null()) {
        if !object.is_object() {
            return Err(RenderError::InvalidHelmValues {
                field: "valuesObject",
                chart: chart.to_string(),
                message: "expected a mapping".to_string(),
            });
        }
        return Ok(Some(object.to_string()));
    }
    if options.values.trim().is_empty() {
        return Ok(None);
    }
    let invalid = |message: String| RenderError::InvalidHelmValues {
        field: "values",
        chart: chart.to_string(),
        message,
    };
    match manifests::parse_yaml_value(&options.values).map_err(|e| invalid(e.to_string()))? {
        Value::Object(_) => Ok(Some(options.values.clone())),
        Value::Null => Ok(None),
        _ => Err(invalid("expected a mapping".to_string())),
    }
}

/// The repository dependencies (`http(s)://`, `oci://`) of the chart in `chart_dir` missing from
/// `charts/`.
pub(crate) fn remote_dependencies(chart_dir: &Path) -> Vec<crate::dependency::RemoteDependency> {
    let field = |d: &Value, k: &str| d.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
    chart_dependencies(chart_dir)
        .into_iter()
        .flat_map(|(_, deps)| deps)
        .map(|d| crate::dependency::RemoteDependency {
            name: field(&d, "name"),
            repository: field(&d, "repository"),
            version: field(&d, "version"),
        })
        .filter(|d| is_remote(&d.repository) && !d.name.is_empty() && !is_vendored(chart_dir, &d.name))
        .collect()
}

fn is_remote(repository: &str) -> bool {
    ["http://", "https://", "oci://"]
        .iter()
        .any(|p| repository.starts_with(p))
}

/// Whether the chart has local `file://` dependencies missing from `charts/` (they are then built),
/// and which of `fetched` (`(name, extracted chart)`) vendor its repository dependencies. Dependency
/// paths must stay in the repository; a repository dependency nobody fetched is an error.
fn dependencies_to_build(
    root: &Path,
    chart_dir: &Path,
    chart_label: &str,
    fetched: &[(String, PathBuf)],
) -> Result<(bool, Vec<(String, PathBuf)>), RenderError> {
    let mut build = false;
    let mut vendor = Vec::new();
    for (file, dependencies) in chart_dependencies(chart_dir) {
        let file_label = display_rel(root, &chart_dir.join(file));
        for dependency in dependencies {
            if let Some(message) = dependency.get("__ambiguous").and_then(Value::as_str) {
                return Err(RenderError::ForgedLock {
                    file: file_label,
                    message: message.to_string(),
                });
            }
            let name = dependency.get("name").and_then(Value::as_str).unwrap_or_default();
            let repository = dependency.get("repository").and_then(Value::as_str).unwrap_or_default();
            if let Some(local) = repository.strip_prefix("file://") {
                match resolve_in_repo(root, chart_dir, local) {
                    Ok(_) | Err(RenderError::NotFound { .. }) => {}
                    Err(e) => return Err(RenderError::in_file(file_label, e)),
                }
            }
            if name.is_empty() || is_vendored(chart_dir, name) {
                continue;
            }
            if repository.starts_with("file://") {
                build = true;
            } else if let Some((_, dir)) = fetched
                .iter()
                .find(|(n, _)| n == name)
                .filter(|_| is_remote(repository))
            {
                vendor.push((name.to_string(), dir.clone()));
            } else if !repository.is_empty() {
                return Err(RenderError::RemoteDependency {
                    chart: chart_label.to_string(),
                    name: name.to_string(),
                    repository: repository.to_string(),
                });
            }
        }
    }
    Ok((build, vendor))
}

/// A lock file (`Chart.lock`, `requirements.lock`) decides where `helm dependency build` fetches from:
/// each entry must name a dependency the chart declares, with the very repository it declares (whose
/// `file://` paths were checked to stay in the repository). A lock naming another repository — an
/// `oci://` registry, `file:///` anywhere on the controller's disk — is refused.
fn check_lock_files(root: &Path, chart_dir: &Path) -> Result<(), RenderError> {
    let declared: Vec<(String, String)> = chart_dependencies(chart_dir)
        .into_iter()
        .flat_map(|(_, deps)| deps)
        .map(|d| {
            let field = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
            (field("name"), field("repository"))
        })
        .collect();
    for lock in ["Chart.lock", "requirements.lock"] {
        let path = chart_dir.join(lock);
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let file = display_rel(root, &path);
        let doc = match manifests::parse_yaml_value(&text) {
            Ok(doc) => fold_keys(doc).map_err(|e| e.to_string()),
            Err(e) => Err(format!("cannot be read: {e}")),
        }
        .map_err(|message| RenderError::ForgedLock {
            file: file.clone(),
            message,
        })?;
        let entries = match doc.get("dependencies") {
            None | Some(Value::Null) => continue,
            Some(Value::Array(entries)) => entries,
            Some(_) => {
                return Err(RenderError::ForgedLock {
                    file,
                    message: "dependencies is not a list".into(),
                });
            }
        };
        for entry in entries {
            let name = entry.get("name").and_then(Value::as_str).unwrap_or_default();
            let repository = entry.get("repository").and_then(Value::as_str).unwrap_or_default();
            let known = declared.iter().any(|(n, r)| n == name && r == repository);
            if !known {
                return Err(RenderError::ForgedLock {
                    file,
                    message: format!(
                        "it pins dependency {name:?} to repository {repository:?}, which the chart's \
                         dependencies do not declare"
                    ),
                });
            }
        }
    }
    Ok(())
}

/// The `dependencies` of `Chart.yaml` (API v2) and `requirements.yaml` (API v1). Unreadable files are
/// Helm's to report.
fn chart_dependencies(chart_dir: &Path) -> Vec<(&'static str, Vec<Value>)> {
    let mut out = Vec::new();
    for file in ["Chart.yaml", "requirements.yaml"] {
        let Ok(text) = std::fs::read_to_string(chart_dir.join(file)) else {
            continue;
        };
        // Keys are read as Helm reads them (case-insensitively); an ambiguous file is refused.
        let doc = manifests::parse_yaml_value(&text).map(fold_keys);
        match doc {
            Ok(Ok(doc)) => {
                if let Some(Value::Array(deps)) = doc.get("dependencies") {
                    out.push((file, deps.clone()));
                }
            }
            Ok(Err(err)) => out.push((file, vec![serde_json::json!({"__ambiguous": err.to_string()})])),
            Err(_) => {}
        }
    }
    out
}

/// Lower-case the keys of a chart or lock document and of its `dependencies` entries: Helm decodes
/// these files with Go's `encoding/json`, which matches field names regardless of case, so
/// `Dependencies:` or `Repository:` mean to Helm what their lower-case spellings mean. Two keys that
/// differ only in case make the file ambiguous, which is refused.
fn fold_keys(doc: Value) -> Result<Value, manifests::ValueError> {
    fn fold(map: serde_json::Map<String, Value>) -> Result<serde_json::Map<String, Value>, manifests::ValueError> {
        let mut out = serde_json::Map::new();
        for (key, value) in map {
            let lower = key.to_ascii_lowercase();
            if out.insert(lower.clone(), value).is_some() {
                return Err(manifests::ValueError::AmbiguousKey(lower));
            }
        }
        Ok(out)
    }
    let Value::Object(map) = doc else { return Ok(doc) };
    let mut map = fold(map)?;
    if let Some(Value::Array(deps)) = map.remove("dependencies") {
        let deps = deps
            .into_iter()
            .map(|d| match d {
                Value::Object(m) => fold(m).map(Value::Object),
                other => Ok(other),
            })
            .collect::<Result<Vec<_>, _>>()?;
        map.insert("dependencies".into(), Value::Array(deps));
    }
    Ok(Value::Object(map))
}

/// Whether `charts/` holds the dependency `name`, as a directory or a `<name>-<version>.tgz` archive.
fn is_vendored(chart_dir: &Path, name: &str) -> bool {
    let charts = chart_dir.join("charts");
    if charts.join(name).join("Chart.yaml").is_file() {
        return true;
    }
    let Ok(entries) = std::fs::read_dir(&charts) else {
        return false;
    };
    let prefix = format!("{name}-");
    entries.flatten().any(|e| {
        e.file_name()
            .to_str()
            .is_some_and(|f| f.starts_with(&prefix) && f.ends_with(".tgz"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(name: &str, value: &str, force_string: bool) -> HelmParameter {
        HelmParameter {
            name: name.into(),
            value: value.into(),
            force_string,
        }
    }

    #[test]
    fn capabilities_are_glued_to_their_flags() {
        let job = HelmJob {
            binary: PathBuf::from("helm"),
            root: PathBuf::from("/r"),
            app_rel: ".".into(),
            options: ApplicationSourceHelm::default(),
            release: "web".into(),
            namespace: "-n".into(),
            kube_version: Some("--post-renderer=x".into()),
            api_versions: vec!["--post-renderer=y".into()],
            timeout: Duration::from_secs(1),
            refs: Vec::new(),
            dependencies: Vec::new(),
        };
        let args: Vec<String> = template_args(&job, Path::new("/r/chart"), &[])
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert!(args.contains(&"--namespace=-n".to_string()), "{args:?}");
        assert!(
            args.contains(&"--kube-version=--post-renderer=x".to_string()),
            "{args:?}"
        );
        assert!(
            args.contains(&"--api-versions=--post-renderer=y".to_string()),
            "{args:?}"
        );
        assert!(!args.iter().any(|a| a.starts_with("--post-renderer")), "{args:?}");
        assert_eq!(args[args.len() - 3..], ["--", "web", "/r/chart"]);
    }

    #[test]
    fn parameters_become_set_flags() {
        let args = parameter_args(&[
            param("image.tag", "1.2", false),
            param("port", "80", true),
            param("hosts", "a,b", false),
            param("list", "{a,b}", false),
            param("escaped", r"a\,b", false),
        ]);
        assert_eq!(
            args,
            [
                "--set=image.tag=1.2",
                "--set-string=port=80",
                r"--set=hosts=a\,b",
                "--set=list={a,b}",
                r"--set=escaped=a\,b",
            ]
        );
    }

    #[test]
    fn release_names_are_checked_as_helm_does() {
        for ok in ["web", "my-app", "a.b-c", "a1", &"a".repeat(53)] {
            assert!(check_release_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "--post-renderer=./evil.sh",
            "-x",
            "Web",
            "web-",
            "a..b",
            "a b",
            "a/b",
            &"a".repeat(54),
        ] {
            let err = check_release_name(bad).expect_err(bad).to_string();
            assert!(err.contains("release name"), "{err}");
        }
    }

    #[test]
    fn values_object_replaces_values() {
        let options = ApplicationSourceHelm {
            values: "a: 1\n".into(),
            values_object: Some(serde_json::json!({"b": 2})),
            ..Default::default()
        };
        assert_eq!(inline_values(&options, "c").unwrap().as_deref(), Some(r#"{"b":2}"#));
        let options = ApplicationSourceHelm {
            values: "- not a map\n".into(),
            ..Default::default()
        };
        assert!(
            inline_values(&options, "c")
                .unwrap_err()
                .to_string()
                .contains("helm.values")
        );
    }
}

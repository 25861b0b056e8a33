//! Kustomize's `helmCharts:` (the Helm chart inflation generator, `kustomize build --enable-helm`):
//! where each chart of a kustomization must sit for Kustomize to use it instead of pulling it, which
//! entries name a chart repository, and vendoring the charts the caller fetched from registered
//! repositories there. Kustomize itself never pulls: a chart that is neither in the repository nor
//! fetched is refused before it runs.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::RenderError;
use crate::paths::{copy_tree, display_rel, normalize_lexically};

/// Kustomize's default chart home, relative to the kustomization.
const DEFAULT_CHART_HOME: &str = "charts";

/// One `helmCharts` entry of a kustomization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HelmChart {
    /// The kustomization file, relative to the repository root (for messages).
    pub file: String,
    /// The chart's name.
    pub name: String,
    /// Its `repo`: `http(s)://…`, `oci://…`, or empty for a chart kept in the chart home.
    pub repo: String,
    /// Its `version` as written: an exact version, a constraint, or empty for the newest.
    pub version: String,
    /// Where Kustomize looks for the extracted chart: `CHART_HOME/NAME-VERSION/NAME` with a version,
    /// `CHART_HOME/NAME` without (Kustomize 5's layout), absolute.
    pub target: PathBuf,
}

impl HelmChart {
    /// Whether the chart is already in the repository where Kustomize looks for it.
    pub fn is_vendored(&self) -> bool {
        self.target.join("Chart.yaml").is_file()
    }
}

/// The `helmCharts` entries of the kustomization `doc` in `dir` (`file` is its label), with their
/// chart home checked to stay in the repository and their names and versions checked to be plain
/// path components (they become directory names).
pub(crate) fn entries(root: &Path, dir: &Path, file: &str, doc: &Value) -> Result<Vec<HelmChart>, RenderError> {
    let Some(charts) = doc.get("helmCharts") else {
        return Ok(Vec::new());
    };
    let invalid = |message: String| RenderError::KustomizeHelmChart {
        file: file.to_string(),
        message,
    };
    let Value::Array(charts) = charts else {
        return Err(invalid("helmCharts is not a list".into()));
    };
    let home = match doc.pointer("/helmGlobals/chartHome") {
        None | Some(Value::Null) => DEFAULT_CHART_HOME,
        Some(Value::String(home)) => home.as_str(),
        Some(_) => return Err(invalid("helmGlobals.chartHome is not a string".into())),
    };
    let home = chart_home(root, dir, home).ok_or_else(|| {
        invalid(format!(
            "helmGlobals.chartHome {:?} must be a relative path inside the repository",
            truncate(home)
        ))
    })?;
    let mut out = Vec::with_capacity(charts.len());
    for (i, chart) in charts.iter().enumerate() {
        let field = |key: &str| -> Result<String, RenderError> {
            match chart.get(key) {
                None | Some(Value::Null) => Ok(String::new()),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(_) => Err(invalid(format!("helmCharts[{i}].{key} is not a string"))),
            }
        };
        let (name, repo, version) = (field("name")?, field("repo")?, field("version")?);
        if !is_plain_component(&name) {
            return Err(invalid(format!(
                "helmCharts[{i}].name {:?} is not a chart name",
                truncate(&name)
            )));
        }
        if !version.is_empty() && !is_plain_component(&version) {
            return Err(invalid(format!(
                "helmCharts[{i}].version {:?} cannot name a directory (no '/', no '..')",
                truncate(&version)
            )));
        }
        if !repo.is_empty() && !is_chart_repository(&repo) {
            return Err(invalid(format!(
                "helmCharts[{i}].repo {:?} is not an http(s):// or oci:// chart repository",
                truncate(&repo)
            )));
        }
        check_arguments(chart, i).map_err(invalid)?;
        let target = if version.is_empty() {
            home.join(&name)
        } else {
            home.join(format!("{name}-{version}")).join(&name)
        };
        out.push(HelmChart {
            file: file.to_string(),
            name,
            repo,
            version,
            target,
        });
    }
    Ok(out)
}

/// Check the fields of a `helmCharts` entry that Kustomize puts on helm's command line against their
/// grammar (Kustomize passes the release name as a positional argument, where `--post-renderer=…`
/// would be an option): the release name as Helm checks it, the namespace as a DNS-1123 label, the
/// Kubernetes version and API versions as versions, `valuesMerge` as one of its three words.
/// `nameTemplate` (a Go template Helm runs) is not supported. The kernel confines helm whatever it
/// is told; this makes the refusal clear and early.
fn check_arguments(chart: &Value, i: usize) -> Result<(), String> {
    let text = |key: &str| chart.get(key).and_then(Value::as_str).unwrap_or_default();
    let release = text("releaseName");
    if !release.is_empty() {
        crate::helm::check_release_name(release).map_err(|e| format!("helmCharts[{i}].releaseName: {e}"))?;
    }
    let namespace = text("namespace");
    if !namespace.is_empty() && !capstan_api::names::is_dns1123_label(namespace) {
        return Err(format!(
            "helmCharts[{i}].namespace {:?} is not a namespace name (a DNS-1123 label)",
            truncate(namespace)
        ));
    }
    let kube = text("kubeVersion");
    if !kube.is_empty() && !is_version(kube) {
        return Err(format!(
            "helmCharts[{i}].kubeVersion {:?} is not a Kubernetes version",
            truncate(kube)
        ));
    }
    if let Some(Value::Array(apis)) = chart.get("apiVersions") {
        for (j, api) in apis.iter().enumerate() {
            let api = api.as_str().unwrap_or_default();
            if !is_api_version(api) {
                return Err(format!(
                    "helmCharts[{i}].apiVersions[{j}] {:?} is not an API version (group/version[/Kind])",
                    truncate(api)
                ));
            }
        }
    }
    let merge = text("valuesMerge");
    if !merge.is_empty() && !["merge", "override", "replace"].contains(&merge) {
        return Err(format!(
            "helmCharts[{i}].valuesMerge {:?} must be merge, override or replace",
            truncate(merge)
        ));
    }
    if !text("nameTemplate").is_empty() {
        return Err(format!(
            "helmCharts[{i}].nameTemplate is not supported (it is a template Helm runs); set releaseName"
        ));
    }
    Ok(())
}

/// `v1.30`, `1.30.2`, `v1.30.0-rc.1+k3s1`.
fn is_version(s: &str) -> bool {
    let core = s.strip_prefix('v').unwrap_or(s);
    let (core, extra) = match core.find(['-', '+']) {
        Some(at) => core.split_at(at),
        None => (core, ""),
    };
    let parts: Vec<&str> = core.split('.').collect();
    (1..=3).contains(&parts.len())
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        && extra
            .bytes()
            .skip(1)
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'+')
}

/// `v1`, `apps/v1`, `monitoring.coreos.com/v1/ServiceMonitor`.
fn is_api_version(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'/')
}

/// Put each chart that is not in the repository where Kustomize looks for it: `fetched` holds
/// `((name, repository, version), extracted chart)` as the caller fetched them. A chart from a
/// repository that nobody fetched is refused (Kustomize would pull it). `root` is the canonical
/// checkout the charts' targets were computed in, `copy` the scratch copy to write into.
pub(crate) fn vendor(
    charts: &[HelmChart],
    root: &Path,
    copy: &Path,
    fetched: &[((String, String, String), PathBuf)],
) -> Result<(), RenderError> {
    for chart in charts.iter().filter(|c| !c.is_vendored()) {
        if chart.repo.is_empty() {
            // Kustomize reports the missing local chart itself, without fetching anything.
            continue;
        }
        let Some((_, dir)) = fetched
            .iter()
            .find(|((n, r, v), _)| *n == chart.name && *r == chart.repo && *v == chart.version)
        else {
            return Err(RenderError::RemoteDependency {
                chart: chart.file.clone(),
                name: chart.name.clone(),
                repository: chart.repo.clone(),
            });
        };
        let relative = chart
            .target
            .strip_prefix(root)
            .map_err(|_| RenderError::EscapesRepository {
                path: display_rel(root, &chart.target),
            })?;
        copy_tree(dir, &copy.join(relative))?;
    }
    Ok(())
}

/// The chart home `home` of the kustomization in `dir`, absolute, if it stays inside `root`.
/// It may not exist yet: charts are vendored into it.
fn chart_home(root: &Path, dir: &Path, home: &str) -> Option<PathBuf> {
    if home.is_empty() || Path::new(home).has_root() || home.contains('\0') {
        return None;
    }
    let joined = normalize_lexically(&dir.join(home))?;
    joined.starts_with(root).then_some(joined)
}

/// A name usable as one directory name: no separator, not `.` or `..`, no control characters.
fn is_plain_component(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 250
        && s != "."
        && s != ".."
        && !s.contains(['/', '\\'])
        && !s.chars().any(char::is_control)
}

fn is_chart_repository(repo: &str) -> bool {
    ["http://", "https://", "oci://"].iter().any(|p| repo.starts_with(p)) && !repo.chars().any(char::is_control)
}

fn truncate(s: &str) -> String {
    s.chars().take(200).collect()
}

#[cfg(test)]
mod argument_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_on_helms_command_line_follow_their_grammar() {
        let ok = json!({"name": "a", "releaseName": "web", "namespace": "prod", "kubeVersion": "v1.30.2",
                        "apiVersions": ["monitoring.coreos.com/v1/ServiceMonitor"], "valuesMerge": "merge"});
        assert_eq!(check_arguments(&ok, 0), Ok(()));
        for (key, value) in [
            ("releaseName", json!("--post-renderer=./evil.sh")),
            ("releaseName", json!("-f")),
            ("namespace", json!("--kubeconfig=/x")),
            ("kubeVersion", json!("--post-renderer=x")),
            ("valuesMerge", json!("--x")),
            ("nameTemplate", json!("{{ env \"HOME\" }}")),
        ] {
            let mut bad = ok.clone();
            bad[key] = value;
            let err = check_arguments(&bad, 0).unwrap_err();
            assert!(err.contains(key), "{err}");
        }
        let bad = json!({"name": "a", "apiVersions": ["--post-renderer=x"]});
        assert!(check_arguments(&bad, 0).unwrap_err().contains("apiVersions[0]"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn targets_follow_kustomize_layout() {
        let root = Path::new("/repo");
        let doc = json!({"helmCharts": [
            {"name": "redis", "repo": "https://charts.test/", "version": "1.2.3"},
            {"name": "local"},
        ]});
        let charts = entries(root, Path::new("/repo/app"), "app/kustomization.yaml", &doc).unwrap();
        assert_eq!(charts[0].target, Path::new("/repo/app/charts/redis-1.2.3/redis"));
        assert_eq!(charts[1].target, Path::new("/repo/app/charts/local"));
        let doc =
            json!({"helmGlobals": {"chartHome": "../vendor"}, "helmCharts": [{"name": "x", "repo": "oci://r/x"}]});
        let charts = entries(root, Path::new("/repo/app"), "k", &doc).unwrap();
        assert_eq!(charts[0].target, Path::new("/repo/vendor/x"));
    }

    #[test]
    fn hostile_entries_are_refused() {
        let root = Path::new("/repo");
        let dir = Path::new("/repo/app");
        for doc in [
            json!({"helmGlobals": {"chartHome": "../../etc"}, "helmCharts": []}),
            json!({"helmGlobals": {"chartHome": "/var/lib"}, "helmCharts": []}),
            json!({"helmCharts": [{"name": "../x", "repo": "https://r/"}]}),
            json!({"helmCharts": [{"name": "x", "version": "../../../../tmp", "repo": "https://r/"}]}),
            json!({"helmCharts": [{"name": "x", "version": "1/2"}]}),
            json!({"helmCharts": [{"name": ""}]}),
            json!({"helmCharts": [{"name": "x", "repo": "file:///etc"}]}),
            json!({"helmCharts": [{"name": "x", "repo": "--registry-config=/x"}]}),
            json!({"helmCharts": [{"name": ["x"]}]}),
            json!({"helmCharts": {"name": "x"}}),
        ] {
            let err = entries(root, dir, "app/kustomization.yaml", &doc).unwrap_err();
            assert!(matches!(err, RenderError::KustomizeHelmChart { .. }), "{doc}: {err}");
            assert!(err.to_string().contains("app/kustomization.yaml"), "{err}");
        }
    }
}

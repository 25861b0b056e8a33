//! Which of an Application's repositories a poller may list: its Git sources that the AppProject's
//! `sourceRepos` permits and that are not inside Capstan's own cache.
//!
//! A poller lists a repository's refs with the repository Secret's credentials, so it must pass the
//! same checks as resolving a source does: an Application naming a repository its project does not
//! permit (in any of `spec.sources`, a `ref` source included) is refused, and no poller may use
//! another team's credentials for it in the meantime.

use std::path::Path;

use capstan_api::Application;
use capstan_api::project::AppProjectSpec;

use super::points_into;

/// The repository URLs of `app`'s Git sources that `project` (named `name`) permits and that do not
/// point into `cache_dir`, each once, in `spec.sources` order.
pub fn permitted_git_urls(app: &Application, name: &str, project: &AppProjectSpec, cache_dir: &Path) -> Vec<String> {
    let mut urls: Vec<String> = Vec::new();
    for source in app.spec.sources() {
        let url = source.repo_url.as_str();
        if url.trim().is_empty() || source.is_chart() || urls.iter().any(|u| u == url) {
            continue;
        }
        if points_into(url, cache_dir) {
            continue;
        }
        if capstan_project::check_source(name, project, url).is_ok() {
            urls.push(url.to_string());
        }
    }
    urls
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app(sources: serde_json::Value) -> Application {
        serde_json::from_value(json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
            "metadata": {"name": "a", "namespace": "capstan"},
            "spec": {"sources": sources, "project": "team-a",
                     "destination": {"server": "https://kubernetes.default.svc", "namespace": "a"}}
        }))
        .expect("valid Application")
    }

    #[test]
    fn a_ref_source_the_project_does_not_permit_is_never_polled() {
        let project: AppProjectSpec =
            serde_json::from_value(json!({"sourceRepos": ["https://git.example/team-a/*"]})).expect("project");
        let app = app(json!([
            {"repoURL": "https://git.example/team-a/chart.git", "path": "chart"},
            {"repoURL": "https://git.example/team-b/secrets.git", "ref": "values"},
            {"repoURL": "/var/cache/capstan/repos/x", "ref": "cache"},
            {"repoURL": "https://git.example/team-a/chart.git", "ref": "again"},
        ]));
        let urls = permitted_git_urls(&app, "team-a", &project, Path::new("/var/cache/capstan"));
        assert_eq!(urls, vec!["https://git.example/team-a/chart.git".to_string()]);
    }
}

//! Asking what reads a Git repository to look at it now: after Capstan itself commits (an image
//! update, a promotion), every Application with a source in that repository and every
//! ApplicationSet with a generator reading it gets the `capstan.dev/refresh` annotation, so the
//! commit is deployed without waiting for the next Git poll. The ApplicationSets matter as much as
//! the Applications: in seed 004's layout the changed value (`imageTag`) reaches the Application
//! only through its ApplicationSet's git-files generator.

use capstan_api::RepoUrl;
use capstan_api::labels::REFRESH_ANNOTATION;
use capstan_api::{Application, ApplicationSet};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use tracing::warn;

/// What [`refresh_readers`] asked to refresh.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Refreshed {
    /// The Applications annotated.
    pub applications: Vec<String>,
    /// The ApplicationSets annotated.
    pub application_sets: Vec<String>,
}

/// Annotate the Applications and ApplicationSets of `namespace` that read `repo` (the same
/// repository by [`RepoUrl::same_repository`], as a webhook decides: case, `.git`, default ports and
/// the transport do not matter). Best effort: a failure is logged, the next poll still finds the
/// commit.
pub async fn refresh_readers(client: &Client, namespace: &str, repo: &RepoUrl) -> Refreshed {
    let patch = Patch::Merge(json!({"metadata": {"annotations": {REFRESH_ANNOTATION: "normal"}}}));
    let mut refreshed = Refreshed::default();

    let sets: Api<ApplicationSet> = Api::namespaced(client.clone(), namespace);
    match sets.list(&ListParams::default()).await {
        Ok(list) => {
            for set in list.items.iter().filter(|s| generators_read(s, repo)) {
                match sets.patch(&set.name_any(), &PatchParams::default(), &patch).await {
                    Ok(_) => refreshed.application_sets.push(set.name_any()),
                    Err(e) => warn!(set = %set.name_any(), error = %e, "refreshing an ApplicationSet after a commit"),
                }
            }
        }
        Err(e) => warn!(error = %e, "listing ApplicationSets to refresh after a commit"),
    }

    let apps: Api<Application> = Api::namespaced(client.clone(), namespace);
    match apps.list(&ListParams::default()).await {
        Ok(list) => {
            for app in list
                .items
                .iter()
                .filter(|a| a.spec.sources().iter().any(|s| reads(&s.repo_url, repo)))
            {
                match apps.patch(&app.name_any(), &PatchParams::default(), &patch).await {
                    Ok(_) => refreshed.applications.push(app.name_any()),
                    Err(e) => warn!(app = %app.name_any(), error = %e, "refreshing an Application after a commit"),
                }
            }
        }
        Err(e) => warn!(error = %e, "listing Applications to refresh after a commit"),
    }
    refreshed
}

/// Whether the URL `url` (as an object spells it; one that does not parse reads nothing) is `repo`.
fn reads(url: &str, repo: &RepoUrl) -> bool {
    RepoUrl::parse(url).is_ok_and(|url| url.same_repository(repo))
}

/// Whether any generator of `set` (nested matrix and merge generators included) names `repo` as
/// its `repoURL`.
fn generators_read(set: &ApplicationSet, repo: &RepoUrl) -> bool {
    serde_json::to_value(&set.spec.generators).is_ok_and(|v| names_repo(&v, repo))
}

fn names_repo(value: &Value, repo: &RepoUrl) -> bool {
    match value {
        Value::Object(map) => map.iter().any(|(key, v)| match v {
            Value::String(url) if key == "repoURL" => reads(url, repo),
            v => names_repo(v, repo),
        }),
        Value::Array(items) => items.iter().any(|v| names_repo(v, repo)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_generators_are_found_at_any_depth() {
        let generators = json!([
            {"list": {"elements": [{"repoURL": "https://other.example/x.git"}]}},
            {"matrix": {"generators": [
                {"clusters": {}},
                {"git": {"repoURL": "git://127.0.0.1:9/examples.git", "revision": "main"}}
            ]}}
        ]);
        let url = |s: &str| RepoUrl::parse(s).expect("a repository URL");
        assert!(names_repo(&generators, &url("git://127.0.0.1:9/examples")));
        assert!(names_repo(&generators, &url("git://127.0.0.1:9/examples.git/")));
        assert!(names_repo(&generators, &url("GIT://127.0.0.1:9/Examples")));
        assert!(!names_repo(&generators, &url("git://127.0.0.1:9/other.git")));
        assert!(!names_repo(&generators, &url("git://127.0.0.1:10/examples")));
        assert!(!names_repo(
            &json!([{"clusters": {}}]),
            &url("git://127.0.0.1:9/examples")
        ));
    }
}

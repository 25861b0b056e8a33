//! The value a file in Git holds now, read from the controller's Git cache at the branch head: the
//! key of a YAML/JSON file, or the `newTag` of a kustomization's `images:` entry. An updater whose
//! chosen value is already there writes nothing (and clones nothing).

use capstan_gitwrite::{KeyPath, Segment};
use capstan_source::{Credentials, RepoCache};
use serde_json::Value;

use crate::UpdateError;

/// What is read: a key path, or a Kustomize image name.
#[derive(Debug, Clone)]
pub enum Target {
    /// A key of a YAML or JSON file.
    Key(KeyPath),
    /// `newTag` of the `images:` entry with this `name`.
    KustomizeImage(String),
}

/// The head commit of `branch` of `repo_url`, asked once per round for every updater writing there.
pub async fn head(repos: &RepoCache, repo_url: &str, branch: &str, creds: &Credentials) -> Result<String, UpdateError> {
    repos
        .resolve(repo_url, branch, creds, true)
        .await
        .map(|r| r.sha)
        .map_err(|e| UpdateError::Read {
            repo: repo_url.to_string(),
            path: String::new(),
            source: Box::new(e),
        })
}

/// The scalar at `target` in `path` of `repo_url` at commit `sha`, as a string (`None` when a
/// Kustomize image entry has no `newTag` yet). A key that does not exist is an error; the path is
/// confined to the checkout as the Git writer confines it.
pub async fn value(
    repos: &RepoCache,
    repo_url: &str,
    sha: &str,
    path: &str,
    target: &Target,
) -> Result<Option<String>, UpdateError> {
    let read = |source: Box<dyn std::error::Error + Send + Sync>| UpdateError::Read {
        repo: repo_url.to_string(),
        path: path.to_string(),
        source,
    };
    let checkout = repos.checkout(repo_url, sha).await.map_err(|e| read(Box::new(e)))?;
    let canonical = capstan_gitwrite::resolve_in_checkout(checkout.path(), path).map_err(|e| read(Box::new(e)))?;
    let text = std::fs::read_to_string(&canonical).map_err(|e| read(Box::new(e)))?;
    let doc: Value = serde_saphyr::from_str(&text).map_err(|e| read(Box::new(e)))?;
    match target {
        Target::Key(key) => {
            let mut cur = &doc;
            for segment in key.segments() {
                let next = match segment {
                    Segment::Key(k) => cur.get(k.as_str()),
                    Segment::Index(i) => cur.get(*i),
                };
                cur = next.ok_or_else(|| UpdateError::MissingKey {
                    path: path.to_string(),
                    key: key.to_string(),
                })?;
            }
            Ok(Some(scalar(cur)))
        }
        Target::KustomizeImage(name) => {
            let entry = doc
                .get("images")
                .and_then(Value::as_array)
                .and_then(|images| {
                    images
                        .iter()
                        .find(|i| i.get("name").and_then(Value::as_str) == Some(name))
                })
                .ok_or_else(|| UpdateError::MissingKey {
                    path: path.to_string(),
                    key: format!("images[name={name}]"),
                })?;
            Ok(entry.get("newTag").map(scalar))
        }
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

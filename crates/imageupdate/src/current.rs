//! The value a file in Git holds now, read from the controller's Git cache at the branch head: the
//! key of a YAML/JSON file, or the `newTag` of a kustomization's `images:` entry. An updater whose
//! chosen value is already there writes nothing (and clones nothing).

use capstan_gitwrite::{KeyPath, ReadError};
use capstan_source::{Credentials, RepoCache};

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

/// The scalar at `target` in `path` of `repo_url` at commit `sha`, as a string, read by the Git
/// writer's reader (`None` when the value is null or a Kustomize image entry has no `newTag` yet).
/// A key that does not exist, or holds a mapping or a sequence, is an error; the path is confined to
/// the checkout as the Git writer confines it.
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
    let found = match target {
        Target::Key(key) => capstan_gitwrite::scalar_at(&text, key),
        Target::KustomizeImage(name) => capstan_gitwrite::kustomize_image_tag(&text, name),
    };
    match found {
        Ok(value) => Ok(value),
        Err(ReadError::MissingKey { key }) => Err(UpdateError::MissingKey {
            path: path.to_string(),
            key,
        }),
        Err(e) => Err(read(Box::new(e))),
    }
}

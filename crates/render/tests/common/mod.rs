//! Shared helpers for the render integration tests: throwaway repository trees written to temporary
//! directories (no git needed) and small accessors on rendered objects.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use capstan_api::application::ApplicationSource;
use capstan_render::{RenderError, RenderRequest, Rendered, Renderer};
use serde_json::Value;

pub const REVISION: &str = "0123456789abcdef0123456789abcdef01234567";

/// A repository checkout in a temporary directory. `outside` is a sibling directory, outside the
/// repository, for escape tests.
pub struct Repo {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub outside: PathBuf,
}

impl Repo {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("the test fixture");
        let root = dir.path().join("repo");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&root).expect("the test fixture");
        std::fs::create_dir_all(&outside).expect("the test fixture");
        Repo {
            _dir: dir,
            root,
            outside,
        }
    }

    /// Write `content` to `rel` (creating directories); returns `self` for chaining.
    pub fn file(&self, rel: &str, content: &str) -> &Self {
        let path = self.root.join(rel);
        std::fs::create_dir_all(path.parent().expect("the test fixture")).expect("the test fixture");
        std::fs::write(path, content).expect("the test fixture");
        self
    }

    pub fn symlink(&self, target: impl AsRef<Path>, rel: &str) -> &Self {
        let path = self.root.join(rel);
        std::fs::create_dir_all(path.parent().expect("the test fixture")).expect("the test fixture");
        std::os::unix::fs::symlink(target, path).expect("the test fixture");
        self
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.root.join(rel)).expect("the test fixture")
    }
}

pub fn source(path: &str) -> ApplicationSource {
    ApplicationSource {
        repo_url: "https://git.example.com/repo.git".into(),
        path: path.into(),
        ..Default::default()
    }
}

pub fn request<'a>(repo: &'a Repo, source: &'a ApplicationSource) -> RenderRequest<'a> {
    RenderRequest {
        repo_root: &repo.root,
        source,
        app_name: "myapp",
        namespace: "team-a",
        kube_version: None,
        api_versions: Vec::new(),
        refs: &[],
        allow_empty: false,
        dependencies: &[],
        decryption: None,
    }
}

pub fn renderer() -> Renderer {
    Renderer::new(Duration::from_secs(60))
}

pub async fn render(repo: &Repo, source: &ApplicationSource) -> Result<Rendered, RenderError> {
    renderer().render(&request(repo, source), REVISION).await
}

/// `Kind/name` of each object, in order.
pub fn ids(rendered: &Rendered) -> Vec<String> {
    rendered
        .objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap_or("?"),
                o["metadata"]["name"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

/// The object of that kind and name.
pub fn find<'a>(rendered: &'a Rendered, kind: &str, name: &str) -> &'a Value {
    rendered
        .objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind}/{name} in {:?}", ids(rendered)))
}

pub fn configmap(name: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n")
}

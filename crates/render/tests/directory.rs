//! Plain directories of manifests rendered from throwaway repositories.

mod common;

use capstan_api::application::ApplicationSourceDirectory;
use capstan_render::{RenderError, Tool};
use common::*;

fn with_directory(
    path: &str,
    recurse: bool,
    include: &str,
    exclude: &str,
) -> capstan_api::application::ApplicationSource {
    let mut s = source(path);
    s.directory = Some(ApplicationSourceDirectory {
        recurse,
        include: include.into(),
        exclude: exclude.into(),
        jsonnet: None,
    });
    s
}

#[tokio::test]
async fn multi_document_lists_and_json_in_path_order() {
    let repo = Repo::new();
    repo.file(
        "apps/web/b.yaml",
        "---\n# leading comment\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b1\n---\n---\nnull\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b2\n",
    )
    .file(
        "apps/web/a.yml",
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata: {name: s1}\n- apiVersion: v1\n  kind: Service\n  metadata: {name: s2}\n",
    )
    .file(
        "apps/web/c.json",
        r#"{"apiVersion": "v1", "kind": "SecretList", "items": [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sec"}}]}"#,
    )
    .file("apps/web/d.json", r#"{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "dep"}}"#)
    .file("apps/web/README.md", "not a manifest\n")
    .file("apps/web/values.txt", "x: y\n");
    let rendered = render(&repo, &source("apps/web")).await.unwrap();
    assert_eq!(rendered.tool, Tool::Directory);
    assert_eq!(
        ids(&rendered),
        [
            "Service/s1",
            "Service/s2",
            "ConfigMap/b1",
            "ConfigMap/b2",
            "Secret/sec",
            "Deployment/dep"
        ]
    );
    // No default namespace is applied here.
    assert!(
        rendered
            .objects
            .iter()
            .all(|o| o["metadata"].get("namespace").is_none())
    );
}

#[tokio::test]
async fn root_path_and_recursion() {
    let repo = Repo::new();
    repo.file("top.yaml", &configmap("top"))
        .file("sub/inner.yaml", &configmap("inner"))
        .file("sub/deeper/deep.yaml", &configmap("deep"))
        .file(".hidden/secret.yaml", &configmap("hidden"))
        .file(".git/config.yaml", &configmap("git"));
    let flat = render(&repo, &source("")).await.unwrap();
    assert_eq!(ids(&flat), ["ConfigMap/top"]);
    let deep = render(&repo, &with_directory("", true, "", "")).await.unwrap();
    assert_eq!(ids(&deep), ["ConfigMap/deep", "ConfigMap/inner", "ConfigMap/top"]);
}

#[tokio::test]
async fn include_and_exclude_globs_with_braces() {
    let repo = Repo::new();
    for name in ["a", "b", "c"] {
        repo.file(&format!("app/{name}.yaml"), &configmap(name));
    }
    repo.file("app/sub/a.yaml", &configmap("sub-a"))
        .file("app/sub/z.yaml", &configmap("sub-z"));
    let only = render(&repo, &with_directory("app", true, "{a.yaml,b.yaml}", ""))
        .await
        .unwrap();
    assert_eq!(ids(&only), ["ConfigMap/a", "ConfigMap/b", "ConfigMap/sub-a"]);
    let by_path = render(&repo, &with_directory("app", true, "sub/*", "")).await.unwrap();
    assert_eq!(ids(&by_path), ["ConfigMap/sub-a", "ConfigMap/sub-z"]);
    let excluded = render(&repo, &with_directory("app", true, "*.yaml", "{c.yaml,sub/z.yaml}"))
        .await
        .unwrap();
    assert_eq!(ids(&excluded), ["ConfigMap/a", "ConfigMap/b", "ConfigMap/sub-a"]);
}

#[tokio::test]
async fn invalid_yaml_names_file_and_line() {
    let repo = Repo::new();
    repo.file("app/good.yaml", &configmap("good")).file(
        "app/bad.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [unclosed\n  labels: {}\n",
    );
    let err = render(&repo, &source("app")).await.unwrap_err();
    assert!(matches!(err.root(), RenderError::InvalidYaml { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.starts_with("app/bad.yaml: invalid YAML"), "{msg}");
    assert!(msg.contains("line 5"), "{msg}");
}

#[tokio::test]
async fn invalid_json_names_file() {
    let repo = Repo::new();
    repo.file("app/x.json", "{\"apiVersion\": \"v1\",\n \"kind\": }\n");
    let msg = render(&repo, &source("app")).await.unwrap_err().to_string();
    assert!(
        msg.contains("app/x.json: invalid JSON") && msg.contains("line 2"),
        "{msg}"
    );
}

#[tokio::test]
async fn missing_api_version_names_file_and_document() {
    let repo = Repo::new();
    repo.file(
        "app/x.yaml",
        &format!("{}---\nkind: ConfigMap\nmetadata:\n  name: nope\n", configmap("ok")),
    );
    let err = render(&repo, &source("app")).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err.root(), RenderError::InvalidManifest { .. }), "{msg}");
    assert!(
        msg.contains("app/x.yaml (document 2, line 6)") && msg.contains("no apiVersion"),
        "{msg}"
    );

    let repo = Repo::new();
    repo.file("app/x.yaml", "- just\n- a list\n");
    let msg = render(&repo, &source("app")).await.unwrap_err().to_string();
    assert!(
        msg.contains("app/x.yaml") && msg.contains("not a Kubernetes object"),
        "{msg}"
    );

    let repo = Repo::new();
    repo.file("app/x.yaml", "apiVersion: v1\nkind: List\nitems:\n- kind: ConfigMap\n");
    let msg = render(&repo, &source("app")).await.unwrap_err().to_string();
    assert!(msg.contains("item 1") && msg.contains("no apiVersion"), "{msg}");
}

#[tokio::test]
async fn missing_and_escaping_paths() {
    let repo = Repo::new();
    repo.file("apps/a.yaml", &configmap("a"));
    let err = render(&repo, &source("apps/x")).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("path 'apps/x' does not exist in the repository at {REVISION}")
    );
    let err = render(&repo, &source("../../etc")).await.unwrap_err();
    assert_eq!(err.to_string(), r#"path "../../etc" escapes the repository"#);
    let err = render(&repo, &source("/etc")).await.unwrap_err();
    assert!(matches!(err.root(), RenderError::AbsolutePath { .. }), "{err}");
    let err = render(&repo, &source("apps/a.yaml")).await.unwrap_err();
    assert!(matches!(err.root(), RenderError::AppPathNotDirectory { .. }), "{err}");
}

#[tokio::test]
async fn symlinked_manifest_outside_the_repository_is_never_read() {
    let repo = Repo::new();
    std::fs::write(repo.outside.join("stolen.yaml"), configmap("stolen")).unwrap();
    repo.file("app/ok.yaml", &configmap("ok"))
        .symlink(repo.outside.join("stolen.yaml"), "app/leak.yaml");
    let err = render(&repo, &source("app")).await.unwrap_err();
    assert!(matches!(err.root(), RenderError::SymlinkEscape { .. }), "{err:?}");
    assert!(err.to_string().contains("app/leak.yaml"), "{err}");

    let repo = Repo::new();
    repo.symlink("/etc/passwd", "app/passwd.yaml");
    let err = render(&repo, &source("app")).await.unwrap_err();
    assert!(
        err.to_string().contains("app/passwd.yaml") && err.to_string().contains("escapes"),
        "{err}"
    );

    // A symlinked source.path leading out is refused too.
    let repo = Repo::new();
    repo.symlink(&repo.outside, "app");
    let err = render(&repo, &source("app")).await.unwrap_err();
    assert!(matches!(err.root(), RenderError::SymlinkEscape { .. }), "{err:?}");
}

#[tokio::test]
async fn symlinks_inside_the_repository_are_followed() {
    let repo = Repo::new();
    repo.file("shared/cm.yaml", &configmap("shared"))
        .symlink("../shared/cm.yaml", "app/cm.yaml");
    let rendered = render(&repo, &source("app")).await.unwrap();
    assert_eq!(ids(&rendered), ["ConfigMap/shared"]);
}

#[tokio::test]
async fn helm_hook_annotations_in_plain_manifests_are_mapped() {
    let repo = Repo::new();
    repo.file(
        "app/job.yaml",
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: migrate\n  annotations:\n    helm.sh/hook: pre-upgrade\n",
    );
    let rendered = render(&repo, &source("app")).await.unwrap();
    assert_eq!(
        rendered.objects[0]["metadata"]["annotations"]["capstan.dev/hook"],
        "PreSync"
    );
}

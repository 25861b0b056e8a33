//! No silent empty renders: a source that renders no object is [`RenderError::EmptyRender`], naming
//! the path and the files it skipped, for plain directories (Jsonnet-only ones included), Kustomize and
//! Helm — unless the request allows it (`spec.syncPolicy.automated.allowEmpty`).

mod common;

use capstan_api::application::ApplicationSource;
use capstan_render::{RenderError, Tool};
use common::*;

async fn render_with(repo: &Repo, source: &ApplicationSource, allow_empty: bool) -> Result<usize, RenderError> {
    let mut req = request(repo, source);
    req.allow_empty = allow_empty;
    renderer().render(&req, REVISION).await.map(|r| r.objects.len())
}

async fn empty_error(repo: &Repo, path: &str) -> (Tool, String, String) {
    match render_with(repo, &source(path), false).await {
        Err(err @ RenderError::EmptyRender { .. }) => {
            let message = err.to_string();
            let RenderError::EmptyRender { tool, detail, .. } = err else {
                unreachable!()
            };
            (tool, detail, message)
        }
        other => panic!("{path}: {other:?}"),
    }
}

#[tokio::test]
async fn a_directory_of_files_capstan_does_not_read_is_an_error_naming_them() {
    let repo = Repo::new();
    repo.file("docs/README.md", "# nothing to deploy\n")
        .file("docs/notes.txt", "x");
    let (tool, detail, message) = empty_error(&repo, "docs").await;
    assert_eq!(tool, Tool::Directory);
    assert_eq!(
        detail,
        "2 skipped files (not YAML, JSON or .jsonnet, or left out by include/exclude): README.md, notes.txt"
    );
    assert!(
        message.starts_with("path 'docs' rendered no objects (Directory)"),
        "{message}"
    );
    assert!(message.contains("allowEmpty"), "{message}");
    // Empty on purpose: allowed.
    assert_eq!(render_with(&repo, &source("docs"), true).await.unwrap(), 0);
    // A cached empty result (rendered with allowEmpty) does not slip through without it.
    let renderer = renderer();
    let docs = source("docs");
    let mut req = request(&repo, &docs);
    req.allow_empty = true;
    assert_eq!(renderer.render(&req, REVISION).await.unwrap().objects.len(), 0);
    req.allow_empty = false;
    let err = renderer.render(&req, REVISION).await.unwrap_err();
    assert!(matches!(err.root(), RenderError::EmptyRender { .. }), "{err}");
}

#[tokio::test]
async fn many_skipped_files_are_named_ten_at_a_time_with_a_count() {
    let repo = Repo::new();
    for i in 0..15 {
        repo.file(&format!("app/file-{i:02}.txt"), "x");
    }
    let (_, detail, _) = empty_error(&repo, "app").await;
    let names: Vec<String> = (0..10).map(|i| format!("file-{i:02}.txt")).collect();
    assert_eq!(
        detail,
        format!(
            "15 skipped files (not YAML, JSON or .jsonnet, or left out by include/exclude): {} and 5 more",
            names.join(", ")
        )
    );
}

#[tokio::test]
async fn an_empty_directory_and_files_that_declare_nothing() {
    let repo = Repo::new();
    std::fs::create_dir_all(repo.root.join("nothing")).unwrap();
    let (_, detail, _) = empty_error(&repo, "nothing").await;
    assert_eq!(detail, "the directory contains no files");

    repo.file("blank/empty.yaml", "# only a comment\n")
        .file("blank/none.jsonnet", "[]\n");
    let (_, detail, _) = empty_error(&repo, "blank").await;
    assert_eq!(detail, "its manifest and Jsonnet files declare no objects");

    // Files left out by the globs count as skipped.
    repo.file("filtered/a.yaml", &configmap("a"));
    let mut s = source("filtered");
    s.directory = Some(capstan_api::application::ApplicationSourceDirectory {
        exclude: "a.yaml".into(),
        ..Default::default()
    });
    let err = render_with(&repo, &s, false).await.unwrap_err().to_string();
    assert!(err.contains("1 skipped file ") && err.contains("a.yaml"), "{err}");
}

#[tokio::test]
async fn kustomize_and_helm_renders_of_nothing_are_errors() {
    let repo = Repo::new();
    repo.file("kust/kustomization.yaml", "resources: []\n")
        .file("chart/Chart.yaml", "apiVersion: v2\nname: empty\nversion: 0.1.0\n")
        .file("chart/values.yaml", "{}\n");
    let (tool, detail, message) = empty_error(&repo, "kust").await;
    assert_eq!(
        (tool, detail.as_str()),
        (Tool::Kustomize, "kustomize build printed no objects")
    );
    assert!(message.contains("path 'kust'"), "{message}");
    let (tool, detail, _) = empty_error(&repo, "chart").await;
    assert_eq!(
        (tool, detail.as_str()),
        (Tool::Helm, "helm template printed no objects")
    );
    assert_eq!(render_with(&repo, &source("kust"), true).await.unwrap(), 0);
    assert_eq!(render_with(&repo, &source("chart"), true).await.unwrap(), 0);
}

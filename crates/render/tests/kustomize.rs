//! Kustomize overlays rendered with the real `kustomize` binary.

mod common;

use std::collections::BTreeMap;

use capstan_api::application::ApplicationSourceKustomize;
use capstan_render::{RenderError, Tool};
use common::*;

const DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.19
      - name: sidecar
        image: busybox:1.30
";

fn base_and_overlay() -> Repo {
    let repo = Repo::new();
    repo.file("base/kustomization.yaml", "resources:\n- deployment.yaml\n- cm.yaml\n")
        .file("base/deployment.yaml", DEPLOYMENT)
        .file("base/cm.yaml", &configmap("settings"))
        .file(
            "overlays/prod/kustomization.yaml",
            "resources:\n- ../../base\nnamePrefix: prod-\ncommonLabels:\n  env: prod\n",
        );
    repo
}

fn image(rendered: &capstan_render::Rendered, deployment: &str, container: usize) -> String {
    find(rendered, "Deployment", deployment)["spec"]["template"]["spec"]["containers"][container]["image"]
        .as_str()
        .expect("the test fixture")
        .to_string()
}

#[tokio::test]
async fn overlay_on_a_base() {
    let repo = base_and_overlay();
    let rendered = render(&repo, &source("overlays/prod")).await.unwrap();
    assert_eq!(rendered.tool, Tool::Kustomize);
    let cm = find(&rendered, "ConfigMap", "prod-settings");
    assert_eq!(cm["metadata"]["labels"]["env"], "prod");
    assert_eq!(image(&rendered, "prod-web", 0), "nginx:1.19");
}

#[tokio::test]
async fn source_options_apply_without_touching_the_checkout() {
    let repo = base_and_overlay();
    let before = repo.read("overlays/prod/kustomization.yaml");
    let mut s = source("overlays/prod");
    s.kustomize = Some(ApplicationSourceKustomize {
        name_prefix: "capstan-".into(),
        name_suffix: "-v2".into(),
        images: vec!["nginx=registry.example.com/nginx:1.25".into(), "busybox:1.36".into()],
        common_labels: BTreeMap::from([("team".into(), "a".into())]),
        common_annotations: BTreeMap::from([("example.com/url".into(), "http://x:8080/a,b".into())]),
        namespace: "kz-ns".into(),
    });
    let rendered = render(&repo, &s).await.unwrap();
    // The source's prefix replaces the overlay's, as `kustomize edit set nameprefix` does.
    let dep = find(&rendered, "Deployment", "capstan-web-v2");
    assert_eq!(image(&rendered, "capstan-web-v2", 0), "registry.example.com/nginx:1.25");
    assert_eq!(image(&rendered, "capstan-web-v2", 1), "busybox:1.36");
    assert_eq!(dep["metadata"]["labels"]["team"], "a");
    assert_eq!(dep["metadata"]["labels"]["env"], "prod");
    assert_eq!(dep["metadata"]["namespace"], "kz-ns");
    assert_eq!(dep["metadata"]["annotations"]["example.com/url"], "http://x:8080/a,b");
    assert_eq!(
        find(&rendered, "ConfigMap", "capstan-settings-v2")["metadata"]["namespace"],
        "kz-ns"
    );
    assert_eq!(
        repo.read("overlays/prod/kustomization.yaml"),
        before,
        "the checkout was modified"
    );
}

#[tokio::test]
async fn other_kustomization_file_names() {
    for name in ["kustomization.yml", "Kustomization"] {
        let repo = Repo::new();
        repo.file(&format!("app/{name}"), "resources:\n- cm.yaml\n")
            .file("app/cm.yaml", &configmap("cm"));
        let rendered = render(&repo, &source("app")).await.unwrap();
        assert_eq!(rendered.tool, Tool::Kustomize);
        assert_eq!(ids(&rendered), ["ConfigMap/cm"]);
    }
}

#[tokio::test]
async fn kustomize_failure_carries_its_message() {
    let repo = Repo::new();
    repo.file("app/kustomization.yaml", "resources:\n- missing.yaml\n");
    let err = render(&repo, &source("app")).await.unwrap_err();
    let msg = err.to_string();
    // Refused before Kustomize runs: Kustomize would try a reference it cannot find locally as a
    // remote one.
    assert_eq!(
        msg,
        "app/kustomization.yaml: path \"missing.yaml\" does not exist in the repository"
    );
}

#[tokio::test]
async fn references_leaving_the_repository_are_refused() {
    let repo = Repo::new();
    std::fs::write(repo.outside.join("kustomization.yaml"), "resources:\n- cm.yaml\n").unwrap();
    std::fs::write(repo.outside.join("cm.yaml"), configmap("outside")).unwrap();
    repo.file("app/kustomization.yaml", "resources:\n- ../../outside\n");
    let err = render(&repo, &source("app")).await.unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("app/kustomization.yaml") && msg.contains("escapes the repository"),
        "{msg}"
    );

    // Through an included base, and in a generator's files.
    let repo = Repo::new();
    repo.file(
        "base/kustomization.yaml",
        "configMapGenerator:\n- name: x\n  files:\n  - key=../../etc/passwd\n",
    )
    .file("app/kustomization.yaml", "resources:\n- ../base\n");
    let msg = render(&repo, &source("app")).await.unwrap_err().to_string();
    assert!(
        msg.contains("base/kustomization.yaml") && msg.contains("escapes"),
        "{msg}"
    );

    // A symlink anywhere in the checkout that points outside.
    let repo = Repo::new();
    repo.file("app/kustomization.yaml", "resources:\n- cm.yaml\n")
        .symlink("/etc/passwd", "app/cm.yaml");
    let err = render(&repo, &source("app")).await.unwrap_err();
    assert!(matches!(err.root(), RenderError::OutOfBoundsSymlink { .. }), "{err:?}");
}

/// A chart whose ConfigMap carries its release name, namespace and one value.
fn write_chart(dir: &std::path::Path, name: &str, version: &str) {
    std::fs::create_dir_all(dir.join("templates")).expect("the test fixture");
    std::fs::write(
        dir.join("Chart.yaml"),
        format!("apiVersion: v2\nname: {name}\nversion: {version}\n"),
    )
    .expect("the test fixture");
    std::fs::write(dir.join("values.yaml"), "greeting: hello\n").expect("the test fixture");
    std::fs::write(
        dir.join("templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-cm\ndata:\n  greeting: {{ .Values.greeting | quote }}\n  chart: {{ .Chart.Version | quote }}\n",
    )
    .expect("the test fixture");
}

#[tokio::test]
async fn helm_charts_kept_in_the_repository_render_with_enable_helm() {
    let repo = Repo::new();
    repo.file(
        "app/kustomization.yaml",
        "helmCharts:\n- name: local\n  releaseName: rel\n  valuesInline:\n    greeting: hi\nnamePrefix: k-\n",
    );
    write_chart(&repo.root.join("app/charts/local"), "local", "0.3.0");
    assert!(
        capstan_render::remote_dependencies(&repo.root, &source("app"))
            .unwrap()
            .is_empty(),
        "nothing to fetch"
    );
    let rendered = render(&repo, &source("app")).await.unwrap();
    let cm = find(&rendered, "ConfigMap", "k-rel-cm");
    assert_eq!(cm["data"]["greeting"], "hi");
    assert_eq!(cm["data"]["chart"], "0.3.0");
}

#[tokio::test]
async fn helm_charts_from_a_repository_are_vendored_where_kustomize_looks() {
    let repo = Repo::new();
    repo.file(
        "base/kustomization.yaml",
        "helmCharts:\n- name: web\n  repo: https://charts.invalid/stable\n  version: 1.x\n  releaseName: site\n  valuesInline:\n    greeting: from-base\n",
    )
    .file("overlays/prod/kustomization.yaml", "resources:\n- ../../base\nnameSuffix: -prod\n");
    // What the caller must fetch: the base's chart, found through the overlay.
    let listed = capstan_render::remote_dependencies(&repo.root, &source("overlays/prod")).unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(
        (
            listed[0].name.as_str(),
            listed[0].repository.as_str(),
            listed[0].version.as_str()
        ),
        ("web", "https://charts.invalid/stable", "1.x")
    );
    let fetched = tempfile::tempdir().unwrap();
    write_chart(fetched.path(), "web", "1.4.2");
    let dependencies = [capstan_render::ChartDependency {
        name: "web",
        repository: "https://charts.invalid/stable",
        version: "1.x",
        dir: fetched.path(),
        revision: "1.4.2@sha256:0",
    }];
    let src = source("overlays/prod");
    let mut req = request(&repo, &src);
    req.dependencies = &dependencies;
    let rendered = renderer().render(&req, REVISION).await.unwrap();
    let cm = find(&rendered, "ConfigMap", "site-cm-prod");
    assert_eq!(cm["data"]["greeting"], "from-base");
    assert_eq!(cm["data"]["chart"], "1.4.2");
    assert!(
        !repo.root.join("base/charts").exists(),
        "the chart is vendored into a scratch copy, never into the checkout"
    );

    // A fetched chart of another repository with the same name does not stand in for it.
    let other = [capstan_render::ChartDependency {
        repository: "https://elsewhere.invalid/",
        ..dependencies[0]
    }];
    let mut req = request(&repo, &src);
    req.dependencies = &other;
    let err = renderer().render(&req, REVISION).await.unwrap_err();
    assert!(matches!(err.root(), RenderError::RemoteDependency { .. }), "{err}");
    assert!(err.to_string().contains("base/kustomization.yaml"), "{err}");
}

//! The render attacks of issue 27 through the read-only edges, against a real control plane, a real
//! git server and a real `capstan controller`: the server's `GET /api/applications/{name}/diff` and
//! `capstan app diff` render the repository on request (in the server process and in the CLI's own
//! process), so repository content that tries to make a tool run the repository's own script must be
//! refused there too. Each variant is a kustomization committed beside an executable `evil.sh` that
//! would touch a marker file outside the repository:
//!
//! - `helmCharts[].releaseName`, `namespace`, `kubeVersion` and `apiVersions[]` set to
//!   `--post-renderer=./evil.sh` (fields Kustomize puts on helm's command line);
//! - a `valuesFile` climbing out of the repository;
//! - a KRM exec function (`config.kubernetes.io/function: {exec: {path: ./evil.sh}}`) as a
//!   transformer: a class no field check names, refused because Kustomize's plugins stay disabled and
//!   the kernel lets Kustomize execute nothing but Capstan's helm.
//!
//! The API answers 422 with the reason naming the field or path, the CLI exits 2 with it, nothing is
//! applied, and the marker never appears.

mod common;

use std::time::Duration;

use capstan_testkit::capstan::unique_namespace;
use capstan_testkit::git::push_with_executables;
use capstan_testkit::{GitServer, TestCluster};

use common::http::Http;
use common::{capstan, kubectl, text, until};

const CHART: &str = "apiVersion: v2\nname: web\nversion: 0.1.0\n";
const TEMPLATE: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {a: b}\n";

/// One hostile variant: its directory, the kustomization, and what the refusal must name.
struct Variant {
    path: &'static str,
    kustomization: String,
    names: &'static str,
}

fn variants() -> Vec<Variant> {
    let helm = |extra: &str| format!("helmCharts:\n- name: web\n{extra}");
    vec![
        Variant {
            path: "release",
            kustomization: helm("  releaseName: --post-renderer=./evil.sh\n"),
            names: "helmCharts[0].releaseName",
        },
        Variant {
            path: "namespace",
            kustomization: helm("  releaseName: web\n  namespace: --post-renderer=./evil.sh\n"),
            names: "helmCharts[0].namespace",
        },
        Variant {
            path: "kubeversion",
            kustomization: helm("  releaseName: web\n  kubeVersion: --post-renderer=./evil.sh\n"),
            names: "helmCharts[0].kubeVersion",
        },
        Variant {
            path: "apiversions",
            kustomization: helm("  releaseName: web\n  apiVersions: [--post-renderer=./evil.sh]\n"),
            names: "helmCharts[0].apiVersions[0]",
        },
        Variant {
            path: "values",
            kustomization: helm("  releaseName: web\n  valuesFile: ../../../../etc/passwd\n"),
            names: "escapes the repository",
        },
        Variant {
            path: "krm",
            kustomization: "resources: [cm.yaml]\ntransformers: [fn.yaml]\n".into(),
            // Kustomize refuses the exec function itself: Capstan never enables its plugins.
            names: "external plugins disabled",
        },
    ]
}

fn application(ns: &str, name: &str, repo: &str, path: &str) -> String {
    format!(
        "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  source: {{repoURL: '{repo}', targetRevision: main, path: {path}}}\n  destination: {{server: 'https://kubernetes.default.svc', namespace: {name}}}\n  syncPolicy: {{syncOptions: [CreateNamespace=true]}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_diff_endpoint_and_the_cli_refuse_hostile_renders() -> anyhow::Result<()> {
    // The run's shared plane, Capstan in a namespace of this test's own.
    let (cluster, git) = tokio::try_join!(TestCluster::shared(), GitServer::start())?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let capstan_ns = unique_namespace();
    let out = capstan(&kc, &["install", "-n", &capstan_ns]);
    assert!(out.status.success(), "{}", text(&out));
    let password = common::admin_password(&out);

    let outside = tempfile::tempdir()?;
    let marker = outside.path().join("pwned");
    let script = format!("#!/bin/sh\ntouch '{}'\ncat\n", marker.display());
    let krm = "apiVersion: example.com/v1\nkind: Evil\nmetadata:\n  name: evil\n  annotations:\n    config.kubernetes.io/function: |\n      exec:\n        path: ./evil.sh\n";
    let mut files = Vec::new();
    for v in variants() {
        let p = v.path;
        files.push((format!("{p}/kustomization.yaml"), v.kustomization.clone()));
        files.push((format!("{p}/charts/web/Chart.yaml"), CHART.into()));
        files.push((format!("{p}/charts/web/templates/cm.yaml"), TEMPLATE.into()));
        files.push((format!("{p}/charts/web/evil.sh"), script.clone()));
        files.push((format!("{p}/evil.sh"), script.clone()));
    }
    files.push(("krm/cm.yaml".into(), TEMPLATE.into()));
    files.push(("krm/fn.yaml".into(), krm.into()));
    let bare = git.create_repo("hostile")?;
    let files: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    push_with_executables(&bare, &files)?;

    let cache = tempfile::tempdir()?;
    let manifests = cache.path().join("apps.yaml");
    let apps: Vec<String> = variants()
        .iter()
        .map(|v| {
            application(
                &capstan_ns,
                &format!("hostile-diff-{}", v.path),
                &git.git_url("hostile"),
                v.path,
            )
        })
        .collect();
    std::fs::write(&manifests, apps.join("---\n"))?;
    let applied = kubectl(&kc, &["apply", "-f", &manifests.to_string_lossy()]);
    assert!(applied.status.success(), "{}", text(&applied));

    let (_controller, base, _) = common::controller_with_server(&kc, cache.path(), &["-n", &capstan_ns])?;
    let mut http = Http::new(&base);
    until("the server to be ready", Duration::from_secs(30), || {
        http.get("/readyz").status == 200
    });
    assert_eq!(http.login("admin", &password).status, 200);

    for v in variants() {
        let name = format!("hostile-diff-{}", v.path);
        // The server renders on request: refused with the reason, as a 422.
        let diff = http.get(&format!("/api/applications/{name}/diff"));
        assert_eq!(diff.status, 422, "{name}: {}", diff.body);
        let reason = diff.json()["error"].as_str().unwrap_or_default().to_string();
        assert!(
            reason.contains(v.names),
            "{name}: the API names {:?}: {reason}",
            v.names
        );
        let manifests = http.get(&format!("/api/applications/{name}/manifests"));
        assert_eq!(manifests.status, 422, "{name}: {}", manifests.body);

        // The CLI renders in its own process: exit 2 with the same reason.
        let cli = capstan(&kc, &["app", "diff", &name, "-n", &capstan_ns]);
        let said = text(&cli);
        assert_eq!(cli.status.code(), Some(2), "{name}: {said}");
        assert!(said.contains(v.names), "{name}: the CLI names {:?}: {said}", v.names);

        // Nothing was applied: the destination namespace was never created.
        let ns = kubectl(&kc, &["get", "namespace", &name]);
        assert!(text(&ns).contains("NotFound"), "{name}: {}", text(&ns));
    }
    assert!(!marker.exists(), "a tool ran the repository's script");
    Ok(())
}

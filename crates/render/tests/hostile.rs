//! Hostile repositories and Application specs against the render stage, with the real `helm` and
//! `kustomize`: one test per attack, each asserting the safe outcome — nothing executed, nothing
//! outside the repository read, nothing fetched, and an error naming what was wrong.

mod common;

use capstan_api::application::{ApplicationSource, ApplicationSourceHelm, ApplicationSourceKustomize, HelmParameter};
use capstan_render::RenderError;
use common::*;

/// A chart, plus `evil.sh` at the repository root: if Helm ever ran it (as a post-renderer) it
/// would create `pwned` beside the repository.
fn chart_with_payload(repo: &Repo) -> std::path::PathBuf {
    repo.file("chart/Chart.yaml", "apiVersion: v2\nname: web\nversion: 0.1.0\n")
        .file(
            "chart/templates/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {a: b}\n",
        );
    let marker = repo.outside.join("pwned");
    let script = format!("#!/bin/sh\ntouch '{}'\ncat\n", marker.display());
    repo.file("evil.sh", &script).file("chart/evil.sh", &script);
    for f in ["evil.sh", "chart/evil.sh"] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(repo.root.join(f), std::fs::Permissions::from_mode(0o755)).expect("the test fixture");
    }
    marker
}

fn helm(path: &str, helm: ApplicationSourceHelm) -> ApplicationSource {
    let mut s = source(path);
    s.helm = Some(helm);
    s
}

#[tokio::test]
async fn a_release_name_that_is_a_helm_flag_runs_nothing() {
    let repo = Repo::new();
    let marker = chart_with_payload(&repo);
    for name in ["--post-renderer=./evil.sh", "--post-renderer=../evil.sh", "-x"] {
        let s = helm(
            "chart",
            ApplicationSourceHelm {
                release_name: name.into(),
                ..Default::default()
            },
        );
        let err = render(&repo, &s).await.unwrap_err();
        assert!(matches!(err.root(), RenderError::InvalidReleaseName { .. }), "{err}");
        assert!(err.to_string().contains("invalid Helm release name"), "{err}");
    }
    assert!(!marker.exists(), "the post-renderer ran");
}

#[tokio::test]
async fn a_release_name_longer_than_helm_allows_is_refused() {
    let repo = Repo::new();
    chart_with_payload(&repo);
    let s = helm(
        "chart",
        ApplicationSourceHelm {
            release_name: "a".repeat(54),
            ..Default::default()
        },
    );
    let err = render(&repo, &s).await.unwrap_err();
    assert!(err.to_string().contains("longer than 53"), "{err}");
}

#[tokio::test]
async fn a_parameter_named_like_a_flag_stays_a_value() {
    let repo = Repo::new();
    let marker = chart_with_payload(&repo);
    let s = helm(
        "chart",
        ApplicationSourceHelm {
            parameters: vec![HelmParameter {
                name: "--post-renderer".into(),
                value: "./evil.sh".into(),
                force_string: false,
            }],
            ..Default::default()
        },
    );
    // Helm may accept or refuse the odd key; it must never read it as its flag.
    let _ = render(&repo, &s).await;
    assert!(!marker.exists(), "the post-renderer ran");
}

#[tokio::test]
async fn a_destination_namespace_named_like_a_flag_stays_a_value() {
    let repo = Repo::new();
    let marker = chart_with_payload(&repo);
    let s = source("chart");
    let mut req = request(&repo, &s);
    req.namespace = "--post-renderer=./evil.sh";
    let _ = renderer().render(&req, REVISION).await;
    assert!(!marker.exists(), "the post-renderer ran");
}

#[tokio::test]
async fn a_value_file_outside_the_repository_is_refused() {
    let repo = Repo::new();
    chart_with_payload(&repo);
    std::fs::write(repo.outside.join("secrets.yaml"), "password: hunter2\n").unwrap();
    for (file, expected) in [
        ("../../outside/secrets.yaml", "escapes the repository"),
        ("/etc/passwd", "absolute"),
    ] {
        let s = helm(
            "chart",
            ApplicationSourceHelm {
                value_files: vec![file.into()],
                ..Default::default()
            },
        );
        let err = render(&repo, &s).await.unwrap_err().to_string();
        assert!(err.contains(expected), "{file}: {err}");
        assert!(!err.contains("hunter2"), "{err}");
    }
}

#[tokio::test]
async fn a_symlinked_value_file_pointing_out_of_the_repository_is_refused() {
    let repo = Repo::new();
    chart_with_payload(&repo);
    std::fs::write(repo.outside.join("secrets.yaml"), "password: hunter2\n").unwrap();
    repo.symlink(repo.outside.join("secrets.yaml"), "chart/values-prod.yaml");
    let s = helm(
        "chart",
        ApplicationSourceHelm {
            value_files: vec!["values-prod.yaml".into()],
            ..Default::default()
        },
    );
    let err = render(&repo, &s).await.unwrap_err().to_string();
    assert!(err.contains("symlink"), "{err}");
}

#[tokio::test]
async fn a_forged_lock_file_pointing_at_the_controllers_disk_is_refused() {
    let repo = Repo::new();
    repo.file(
        "chart/Chart.yaml",
        "apiVersion: v2\nname: web\nversion: 0.1.0\ndependencies:\n- name: lib\n  version: 0.1.0\n  repository: file://../lib\n",
    )
    .file("lib/Chart.yaml", "apiVersion: v2\nname: lib\nversion: 0.1.0\n")
    .file(
        "chart/Chart.lock",
        "dependencies:\n- name: lib\n  repository: file:///var/lib/capstan/other-team/charts/lib\n  version: 0.1.0\ndigest: sha256:0\ngenerated: \"2026-01-01T00:00:00Z\"\n",
    );
    let err = render(&repo, &source("chart")).await.unwrap_err();
    assert!(matches!(err.root(), RenderError::ForgedLock { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("chart/Chart.lock") && msg.contains("lib"), "{msg}");
}

#[tokio::test]
async fn a_forged_requirements_lock_naming_a_registry_is_refused() {
    let repo = Repo::new();
    repo.file("chart/Chart.yaml", "apiVersion: v1\nname: web\nversion: 0.1.0\n")
        .file(
            "chart/requirements.yaml",
            "dependencies:\n- name: lib\n  version: 0.1.0\n  repository: file://../lib\n",
        )
        .file("lib/Chart.yaml", "apiVersion: v1\nname: lib\nversion: 0.1.0\n")
        .file(
            "chart/requirements.lock",
            "dependencies:\n- name: lib\n  repository: oci://127.0.0.1:5000/internal/lib\n  version: 0.1.0\n",
        );
    let err = render(&repo, &source("chart")).await.unwrap_err();
    assert!(matches!(err.root(), RenderError::ForgedLock { .. }), "{err}");
}

fn kustomization(repo: &Repo, text: &str) {
    repo.file("app/kustomization.yaml", text)
        .file("app/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n");
}

#[tokio::test]
async fn kustomize_remote_bases_are_refused_before_kustomize_runs() {
    for reference in [
        "https://127.0.0.1:9/org/repo//base?ref=main",
        "git@127.0.0.1:org/repo.git//base",
        "ssh://git@127.0.0.1/org/repo//base",
        "git::https://127.0.0.1:9/base",
        "file:///etc/kubernetes",
        "github.com/org/repo/base?ref=v1",
        "http://169.254.169.254/latest/meta-data",
    ] {
        let repo = Repo::new();
        kustomization(&repo, &format!("resources:\n- cm.yaml\n- {reference}\n"));
        let err = render(&repo, &source("app")).await.unwrap_err();
        assert!(
            matches!(err.root(), RenderError::RemoteReference { .. }),
            "{reference}: {err}"
        );
        assert!(err.to_string().contains("app/kustomization.yaml"), "{err}");
    }
}

#[tokio::test]
async fn a_kustomize_helm_chart_nobody_fetched_is_refused_before_kustomize_runs() {
    let repo = Repo::new();
    kustomization(
        &repo,
        "helmCharts:\n- name: internal\n  repo: http://127.0.0.1:9/charts\n  version: 1.0.0\n",
    );
    // The caller fetches what `remote_dependencies` lists; a render without it must not let
    // Kustomize pull the chart itself.
    let listed = capstan_render::remote_dependencies(&repo.root, &source("app")).unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].repository, "http://127.0.0.1:9/charts");
    let err = render(&repo, &source("app")).await.unwrap_err();
    assert!(matches!(err.root(), RenderError::RemoteDependency { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("app/kustomization.yaml") && message.contains("internal") && message.contains("not fetched"),
        "{message}"
    );
}

#[tokio::test]
async fn kustomize_helm_charts_cannot_name_paths_outside_the_chart_home() {
    for entry in [
        "helmGlobals:\n  chartHome: ../../outside\nhelmCharts:\n- name: x\n",
        "helmGlobals:\n  chartHome: /etc\nhelmCharts:\n- name: x\n",
        "helmCharts:\n- name: ../../outside/x\n  repo: https://127.0.0.1:9/\n",
        "helmCharts:\n- name: x\n  version: ../../../outside\n  repo: https://127.0.0.1:9/\n",
        "helmCharts:\n- name: x\n  repo: file:///etc\n",
    ] {
        let repo = Repo::new();
        kustomization(&repo, entry);
        let err = render(&repo, &source("app")).await.unwrap_err();
        assert!(
            matches!(err.root(), RenderError::KustomizeHelmChart { .. }),
            "{entry}: {err}"
        );
        assert!(err.to_string().contains("app/kustomization.yaml"), "{err}");
        assert!(
            std::fs::read_dir(&repo.outside).unwrap().next().is_none(),
            "nothing written outside"
        );
    }
}

#[tokio::test]
async fn a_kustomize_base_outside_the_repository_is_refused() {
    let repo = Repo::new();
    std::fs::write(repo.outside.join("kustomization.yaml"), "resources: []\n").unwrap();
    kustomization(&repo, "resources:\n- ../../outside\n");
    let err = render(&repo, &source("app")).await.unwrap_err().to_string();
    assert!(err.contains("escapes the repository"), "{err}");
}

#[tokio::test]
async fn kustomize_options_starting_with_a_dash_stay_values() {
    let repo = Repo::new();
    kustomization(&repo, "resources:\n- cm.yaml\n");
    let mut s = source("app");
    s.kustomize = Some(ApplicationSourceKustomize {
        images: vec!["--help".into()],
        name_prefix: "--load-restrictor=LoadRestrictionsNone".into(),
        ..Default::default()
    });
    // Whatever Kustomize makes of these values, it reads them as values: the build must not be
    // replaced by help text or run with a relaxed load restrictor.
    match render(&repo, &s).await {
        Ok(rendered) => {
            let names: Vec<String> = rendered
                .objects
                .iter()
                .filter_map(|o| o.pointer("/metadata/name").and_then(|n| n.as_str()).map(String::from))
                .collect();
            assert_eq!(names, ["--load-restrictor=LoadRestrictionsNonecm"]);
        }
        Err(err) => assert!(matches!(err.root(), RenderError::ToolFailed { .. }), "{err}"),
    }
}

#[tokio::test]
async fn a_yaml_alias_bomb_is_refused_by_the_parser_budget() {
    let repo = Repo::new();
    let mut bomb = String::from(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb}\ndata:\n  a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    let mut prev = 'a';
    for name in ['b', 'c', 'd', 'e', 'f', 'g', 'h', 'i'] {
        bomb.push_str(&format!(
            "  {name}: &{name} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"
        ));
        prev = name;
    }
    repo.file("app/bomb.yaml", &bomb);
    let started = std::time::Instant::now();
    let err = render(&repo, &source("app")).await.unwrap_err();
    assert!(matches!(err.root(), RenderError::InvalidYaml { .. }), "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "the bomb was expanded"
    );
}

#[tokio::test]
async fn a_200_mb_manifest_is_refused_before_it_is_read() {
    let repo = Repo::new();
    repo.file("app/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n");
    let big = std::fs::File::create(repo.root.join("app/huge.yaml")).unwrap();
    big.set_len(200 * 1024 * 1024).unwrap();
    let err = render(&repo, &source("app")).await.unwrap_err();
    assert!(matches!(err.root(), RenderError::FileTooLarge { .. }), "{err}");
    assert!(err.to_string().contains("app/huge.yaml"), "{err}");
}

#[tokio::test]
async fn json_nested_10000_deep_is_refused() {
    let repo = Repo::new();
    let deep = format!(
        "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"deep\"}},\"data\":{}{}}}",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    repo.file("app/deep.json", &deep);
    let err = render(&repo, &source("app")).await.unwrap_err();
    assert!(matches!(err.root(), RenderError::InvalidJson { .. }), "{err}");
}

#[tokio::test]
async fn yaml_nested_10000_deep_is_refused() {
    let repo = Repo::new();
    let deep = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: deep}}\ndata: {}{}\n",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    repo.file("app/deep.yaml", &deep);
    let err = render(&repo, &source("app")).await.unwrap_err();
    assert!(matches!(err.root(), RenderError::InvalidYaml { .. }), "{err}");
}

#[tokio::test]
async fn a_symlink_to_the_controllers_files_is_refused() {
    let repo = Repo::new();
    repo.file("app/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n");
    repo.symlink("/etc/passwd", "app/passwd.yaml");
    let err = render(&repo, &source("app")).await.unwrap_err().to_string();
    assert!(err.contains("symlink") && err.contains("passwd"), "{err}");
}

#[tokio::test]
async fn an_object_defined_twice_is_refused_instead_of_last_one_wins() {
    let repo = Repo::new();
    repo.file(
        "app/a.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {owner: team-a}\n",
    )
    .file(
        "app/b.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: team-a}\ndata: {owner: attacker}\n",
    );
    let err = render(&repo, &source("app")).await.unwrap_err();
    assert!(matches!(err.root(), RenderError::DuplicateObject { .. }), "{err}");
    assert!(err.to_string().contains("ConfigMap team-a/settings"), "{err}");
}

#[tokio::test]
async fn an_app_path_escaping_the_repository_is_refused() {
    let repo = Repo::new();
    std::fs::write(
        repo.outside.join("cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: stolen}\n",
    )
    .unwrap();
    let err = render(&repo, &source("../outside")).await.unwrap_err().to_string();
    assert!(err.contains("escapes the repository"), "{err}");
}

#[tokio::test]
async fn a_lock_file_spelled_in_another_case_is_read_as_helm_reads_it() {
    // Helm matches `Dependencies:` and `Repository:` regardless of case.
    let repo = Repo::new();
    repo.file(
        "chart/Chart.yaml",
        "apiVersion: v2\nname: web\nversion: 0.1.0\ndependencies:\n- name: lib\n  version: 0.1.0\n  repository: file://../lib\n",
    )
    .file("lib/Chart.yaml", "apiVersion: v2\nname: lib\nversion: 0.1.0\n")
    .file(
        "chart/Chart.lock",
        "Dependencies:\n- Name: lib\n  Repository: file:///var/lib/capstan/other-team/charts/lib\n  version: 0.1.0\n",
    );
    let err = render(&repo, &source("chart")).await.unwrap_err();
    assert!(matches!(err.root(), RenderError::ForgedLock { .. }), "{err}");
    // A chart whose dependency names its repository twice, in two cases, is ambiguous.
    let repo = Repo::new();
    repo.file(
        "chart/Chart.yaml",
        "apiVersion: v2\nname: web\nversion: 0.1.0\ndependencies:\n- name: lib\n  version: 0.1.0\n  repository: file://../lib\n  Repository: oci://127.0.0.1:5000/x\n",
    )
    .file("lib/Chart.yaml", "apiVersion: v2\nname: lib\nversion: 0.1.0\n");
    let err = render(&repo, &source("chart")).await.unwrap_err();
    assert!(err.to_string().contains("more than once"), "{err}");
}

#[tokio::test]
async fn kustomize_remote_spellings_outside_any_list_are_refused() {
    for reference in [
        "GitHub.com/attacker/payload/base",
        "github.com:org/repo",
        "deploy@10.0.0.5:org/repo.git",
        "GIT::https://127.0.0.1:9/base",
    ] {
        let repo = Repo::new();
        kustomization(&repo, &format!("resources:\n- cm.yaml\n- {reference}\n"));
        let err = render(&repo, &source("app")).await.unwrap_err();
        assert!(
            matches!(
                err.root(),
                RenderError::RemoteReference { .. } | RenderError::InFile { .. }
            ),
            "{reference}: {err}"
        );
        assert!(err.to_string().contains("app/kustomization.yaml"), "{err}");
    }
}

/// A chart that takes Helm a moment to render, so that renders started together overlap.
fn slow_chart(repo: &Repo) {
    repo.file("chart/Chart.yaml", "apiVersion: v2\nname: slow\nversion: 0.1.0\n")
        .file(
            "chart/templates/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: slow}\ndata:\n  n: {{ len (until 200000) | quote }}\n",
        );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_identical_requests_renders_once() {
    let repo = Repo::new();
    slow_chart(&repo);
    let s = source("chart");
    let renderer = renderer();
    let request = request(&repo, &s);
    let results = futures::future::join_all((0..24).map(|_| renderer.render(&request, REVISION))).await;
    let first = results[0].as_ref().expect("renders").objects.clone();
    assert_eq!(first.len(), 1);
    assert!(results.iter().all(|r| r.as_ref().is_ok_and(|r| r.objects == first)));
    assert_eq!(renderer.activity().runs, 1, "one render served all 24 callers");
}

/// A chart that takes Helm a moment to render and then fails.
fn slow_broken_chart(repo: &Repo) {
    repo.file("chart/Chart.yaml", "apiVersion: v2\nname: broken\nversion: 0.1.0\n")
        .file(
            "chart/templates/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: broken}\ndata:\n  n: {{ len (until 200000) | quote }}\n  f: {{ fail \"deliberately broken chart\" }}\n",
        );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_identical_requests_for_a_failing_render_runs_the_tool_once() {
    let repo = Repo::new();
    slow_broken_chart(&repo);
    repo.file("fine/Chart.yaml", "apiVersion: v2\nname: fine\nversion: 0.1.0\n");
    let renderer = renderer();
    // Helm's version is asked once per process: after this render, the 20 callers below all reach
    // the render itself at once (a failure is shared only with callers that waited for it).
    let fine = source("fine");
    let mut warm_up = request(&repo, &fine);
    warm_up.allow_empty = true;
    renderer
        .render(&warm_up, REVISION)
        .await
        .expect("an empty chart renders when allowed");
    let s = source("chart");
    let request = request(&repo, &s);
    let results = futures::future::join_all((0..20).map(|_| renderer.render(&request, REVISION))).await;
    let errors: Vec<String> = results
        .iter()
        .map(|r| r.as_ref().expect_err("the chart fails").to_string())
        .collect();
    assert!(errors[0].contains("deliberately broken chart"), "{}", errors[0]);
    assert!(
        errors.iter().all(|e| *e == errors[0]),
        "every caller gets the same error: {errors:?}"
    );
    assert!(
        results.iter().all(|r| matches!(
            r.as_ref().map_err(RenderError::root),
            Err(RenderError::ToolFailed { .. })
        )),
        "the error is the tool's"
    );
    assert_eq!(renderer.activity().runs, 2, "one render failed for all 20 callers");
    assert_eq!(renderer.keys_in_flight(), 0, "nothing of the flight is kept");
    // The failure is not remembered beyond the callers that waited for it.
    let again = renderer.render(&request, REVISION).await.expect_err("still broken");
    assert_eq!(again.to_string(), errors[0]);
    assert_eq!(renderer.activity().runs, 3, "a later request runs the tool again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renders_are_limited_to_a_few_at_once() {
    let repo = Repo::new();
    slow_chart(&repo);
    let s = source("chart");
    let renderer = renderer();
    let names: Vec<String> = (0..20).map(|i| format!("app-{i}")).collect();
    let requests: Vec<_> = names
        .iter()
        .map(|name| {
            let mut r = request(&repo, &s);
            r.app_name = name;
            r
        })
        .collect();
    let results = futures::future::join_all(requests.iter().map(|r| renderer.render(r, REVISION))).await;
    assert!(results.iter().all(Result::is_ok));
    let activity = renderer.activity();
    assert_eq!(activity.runs, 20, "every Application's render is its own");
    assert!(
        (2..=capstan_render::MAX_CONCURRENT_RENDERS).contains(&activity.peak_concurrent),
        "renders overlapped but no more than the limit ran at once: {activity:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_render_its_callers_stop_waiting_for_leaves_nothing_behind() {
    let repo = Repo::new();
    // Slower than `slow_chart` (which a quiet machine renders in about 50 ms): the callers must
    // really give up mid-render.
    repo.file("chart/Chart.yaml", "apiVersion: v2\nname: slower\nversion: 0.1.0\n")
        .file(
            "chart/templates/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: slower}\ndata:\n  n: {{ len (until 3000000) | quote }}\n",
        );
    let s = source("chart");
    let renderer = renderer();
    let request = request(&repo, &s);
    // A client that goes away mid-render (a `/diff` request dropped on disconnect).
    let abandoned = tokio::time::timeout(
        std::time::Duration::from_millis(50),
        futures::future::join_all((0..4).map(|_| renderer.render(&request, REVISION))),
    )
    .await;
    assert!(
        abandoned.is_err(),
        "the render was not cut short: {:?}",
        abandoned.map(|r| r
            .into_iter()
            .map(|x| x.map(|_| ()).map_err(|e| e.to_string()))
            .collect::<Vec<_>>())
    );
    assert_eq!(renderer.keys_in_flight(), 0, "no lock of an abandoned render is kept");
    renderer.render(&request, REVISION).await.expect("renders afterwards");
    assert_eq!(renderer.keys_in_flight(), 0);
}

/// A local chart where Kustomize looks for it (`charts/web` beside the kustomization), plus the
/// post-renderer payload of [`chart_with_payload`].
fn kustomize_chart_with_payload(repo: &Repo) -> std::path::PathBuf {
    let marker = chart_with_payload(repo);
    for f in ["Chart.yaml", "templates/cm.yaml"] {
        repo.file(&format!("app/charts/web/{f}"), &repo.read(&format!("chart/{f}")));
    }
    // Kustomize reads the chart's default values file.
    repo.file("app/charts/web/values.yaml", "{}\n");
    marker
}

#[tokio::test]
async fn kustomize_helm_chart_fields_that_are_helm_flags_run_nothing() {
    // Kustomize passes releaseName to helm as a positional argument; the other fields follow a flag.
    for entry in [
        "releaseName: --post-renderer=./evil.sh",
        "releaseName: --post-renderer=../../evil.sh",
        "namespace: --post-renderer=./evil.sh",
        "kubeVersion: --post-renderer=./evil.sh",
        "apiVersions: [--post-renderer=./evil.sh]",
        "valuesMerge: --post-renderer=./evil.sh",
        "nameTemplate: --post-renderer=./evil.sh",
    ] {
        let repo = Repo::new();
        let marker = kustomize_chart_with_payload(&repo);
        repo.file(
            "app/kustomization.yaml",
            &format!("helmCharts:\n- name: web\n  {entry}\n"),
        );
        let err = render(&repo, &source("app")).await.unwrap_err();
        assert!(
            matches!(err.root(), RenderError::KustomizeHelmChart { .. }),
            "{entry}: {err}"
        );
        assert!(err.to_string().contains("app/kustomization.yaml"), "{err}");
        assert!(!marker.exists(), "{entry}: the post-renderer ran");
    }
}

#[tokio::test]
async fn a_kustomize_helm_chart_renders_confined() {
    // The same chart with a plain release name renders: the sandbox lets Kustomize start helm.
    let repo = Repo::new();
    let marker = kustomize_chart_with_payload(&repo);
    repo.file(
        "app/kustomization.yaml",
        "helmCharts:\n- name: web\n  releaseName: web\n",
    );
    let rendered = render(&repo, &source("app")).await.expect("renders");
    assert_eq!(ids(&rendered), ["ConfigMap/web"]);
    assert!(!marker.exists());
}

#[tokio::test]
async fn a_kustomization_capstan_cannot_read_completely_is_refused() {
    for (text, expected) in [
        // A second document: Kustomize reads only the first; Capstan's checks used to be skipped.
        (
            "resources:\n- cm.yaml\n---\nresources:\n- ../../outside\n",
            "more than one YAML document",
        ),
        // Go's decoder matches keys in any case: `Resources` is `resources` to Kustomize.
        ("Resources:\n- ../../outside\n", "must be spelled \"resources\""),
        ("RESOURCES:\n- cm.yaml\n", "must be spelled \"resources\""),
        ("patches:\n- Path: ../../outside/p.yaml\n", "patches[0].Path"),
        (
            "configMapGenerator:\n- name: x\n  Files: [../../outside/secret]\n",
            "configMapGenerator[0].Files",
        ),
        ("helmGlobals:\n  ChartHome: ../../outside\n", "helmGlobals.ChartHome"),
        (
            "helmChartInflationGenerator:\n- chartName: web\n  helmBin: ./evil.sh\n",
            "helmChartInflationGenerator",
        ),
        (
            "helmCharts:\n- name: web\n  extraArgs: [--post-renderer=./evil.sh]\n",
            "unknown key \"helmCharts[0].extraArgs\"",
        ),
        ("resources: ../../outside\n", "resources must be a list of strings"),
        ("resources: [cm.yaml\n", "not valid YAML"),
    ] {
        let repo = Repo::new();
        kustomization(&repo, text);
        std::fs::write(repo.outside.join("kustomization.yaml"), "resources: []\n").unwrap();
        let err = render(&repo, &source("app")).await.unwrap_err();
        assert!(
            matches!(err.root(), RenderError::UnsupportedKustomization { .. }),
            "{text}: {err}"
        );
        let message = err.to_string();
        assert!(
            message.contains("app/kustomization.yaml") && message.contains(expected),
            "{text}: {message}"
        );
    }
}

#[tokio::test]
async fn symlinks_cannot_multiply_what_a_render_writes() {
    // 1 MiB of content and 100 links to it: a copy of the repository (needed for Kustomize options)
    // would write 100 MiB; the copy stops at the budget instead.
    let repo = Repo::new();
    kustomization(&repo, "resources:\n- cm.yaml\n");
    repo.file("big.bin", &"x".repeat(1 << 20));
    for i in 0..100 {
        repo.symlink("../big.bin", &format!("links/l{i}"));
    }
    let mut s = source("app");
    s.kustomize = Some(ApplicationSourceKustomize {
        name_prefix: "p-".into(),
        ..Default::default()
    });
    let err = render(&repo, &s).await.unwrap_err();
    assert!(matches!(err.root(), RenderError::LinkedCopyTooLarge { .. }), "{err}");
    assert!(err.to_string().contains("64 MiB"), "{err}");
    // A handful of links is fine.
    let repo = Repo::new();
    kustomization(&repo, "resources:\n- cm.yaml\n");
    repo.file("small.txt", "x").symlink("../small.txt", "links/one");
    let rendered = render(&repo, &s).await.expect("renders");
    assert_eq!(ids(&rendered), ["ConfigMap/p-cm"]);
}

/// The live processes whose command line mentions `needle` (zombies are not running).
fn live_processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("the test fixture").flatten() {
        let dir = entry.path();
        let Ok(cmdline) = std::fs::read(dir.join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let state = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        let zombie = state.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z'));
        if cmdline.contains(needle) && !zombie {
            found.push(cmdline);
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_render_timeout_kills_kustomizes_helm_too() {
    let repo = Repo::new();
    repo.file(
        "app/charts/slow/Chart.yaml",
        "apiVersion: v2\nname: slow\nversion: 0.1.0\n",
    )
    .file(
        "app/charts/slow/templates/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: slow}\ndata:\n  n: \"{{ range until 400 }}{{ len (until 1000000) }}{{ end }}\"\n",
    )
    .file("app/charts/slow/values.yaml", "{}\n")
    .file(
        "app/kustomization.yaml",
        "helmCharts:\n- name: slow\n  releaseName: slow\n",
    );
    let chart = repo.root.join("app/charts/slow").display().to_string();
    let renderer = capstan_render::Renderer::new(std::time::Duration::from_secs(4));
    let s = source("app");
    let request = request(&repo, &s);
    let render = renderer.render(&request, REVISION);
    tokio::pin!(render);
    // Kustomize started helm (the positive signal), then the render times out.
    let mut saw_helm = false;
    let result = loop {
        tokio::select! {
            result = &mut render => break result,
            _ = tokio::time::sleep(std::time::Duration::from_millis(50)) => {
                saw_helm |= live_processes_mentioning(&chart).iter().any(|c| c.contains("template"));
            }
        }
    };
    assert!(saw_helm, "helm never ran");
    let err = result.unwrap_err();
    assert!(matches!(err.root(), RenderError::Timeout { .. }), "{err}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !live_processes_mentioning(&chart).is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        live_processes_mentioning(&chart),
        Vec::<String>::new(),
        "helm outlived the render"
    );
}

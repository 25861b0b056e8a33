//! Jsonnet directories: Argo CD's `jsonnet-guestbook` layouts (from `examples/`), top-level arguments,
//! external variables, library paths, the directory options, and hostile programs — imports leaving
//! the repository, programs that never end, syntax errors. Evaluation runs in the `capstan` binary's
//! Jsonnet worker (built with the workspace).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use capstan_api::application::{ApplicationSource, ApplicationSourceDirectory, ApplicationSourceJsonnet, JsonnetVar};
use capstan_render::{RenderError, Renderer};
use common::*;

/// Copy `examples/<name>` into `repo` at `name`.
fn copy_example(repo: &Repo, name: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name);
    for entry in std::fs::read_dir(&dir).expect("the test fixture") {
        let entry = entry.expect("the test fixture");
        let text = std::fs::read_to_string(entry.path()).expect("the test fixture");
        repo.file(&format!("{name}/{}", entry.file_name().to_string_lossy()), &text);
    }
}

fn var(name: &str, value: &str, code: bool) -> JsonnetVar {
    JsonnetVar {
        name: name.into(),
        value: value.into(),
        code,
    }
}

fn jsonnet_source(path: &str, jsonnet: ApplicationSourceJsonnet) -> ApplicationSource {
    let mut s = source(path);
    s.directory = Some(ApplicationSourceDirectory {
        jsonnet: Some(jsonnet),
        ..Default::default()
    });
    s
}

async fn render_err(repo: &Repo, source: &ApplicationSource) -> String {
    match render(repo, source).await {
        Ok(r) => panic!("rendered {:?}", ids(&r)),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn argo_cds_jsonnet_guestbook_renders_a_service_and_a_deployment() {
    let repo = Repo::new();
    copy_example(&repo, "jsonnet-guestbook");
    let rendered = render(&repo, &source("jsonnet-guestbook")).await.unwrap();
    assert_eq!(
        ids(&rendered),
        ["Service/jsonnet-guestbook-ui", "Deployment/jsonnet-guestbook-ui"]
    );
    let svc = find(&rendered, "Service", "jsonnet-guestbook-ui");
    assert_eq!(svc["spec"]["type"], "LoadBalancer");
    assert_eq!(svc["spec"]["ports"][0]["port"], 80);
    assert_eq!(svc["spec"]["selector"]["app"], "jsonnet-guestbook-ui");
    let deploy = find(&rendered, "Deployment", "jsonnet-guestbook-ui");
    assert_eq!(deploy["spec"]["replicas"], 1);
    assert_eq!(
        deploy["spec"]["template"]["spec"]["containers"][0]["image"],
        "quay.io/argoprojlabs/argocd-e2e-container:0.2"
    );
}

#[tokio::test]
async fn argo_cds_jsonnet_guestbook_tla_takes_its_parameters_from_the_spec() {
    let repo = Repo::new();
    copy_example(&repo, "jsonnet-guestbook-tla");
    let s = jsonnet_source(
        "jsonnet-guestbook-tla",
        ApplicationSourceJsonnet {
            tlas: vec![
                var("name", "tla-ui", false),
                var("replicas", "1 + 2", true),
                var("containerPort", "8080", true),
                var("type", "ClusterIP", false),
            ],
            ..Default::default()
        },
    );
    let rendered = render(&repo, &s).await.unwrap();
    assert_eq!(ids(&rendered), ["Service/tla-ui", "Deployment/tla-ui"]);
    let svc = find(&rendered, "Service", "tla-ui");
    assert_eq!(svc["spec"]["type"], "ClusterIP");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], 8080);
    assert_eq!(svc["spec"]["ports"][0]["port"], 80, "a default the TLAs leave alone");
    let deploy = find(&rendered, "Deployment", "tla-ui");
    assert_eq!(deploy["spec"]["replicas"], 3);
    assert_eq!(
        deploy["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"],
        8080
    );

    // Without TLAs, the defaults apply.
    let rendered = render(&repo, &source("jsonnet-guestbook-tla")).await.unwrap();
    assert_eq!(
        find(&rendered, "Deployment", "jsonnet-guestbook-ui")["spec"]["replicas"],
        1
    );
}

#[tokio::test]
async fn ext_vars_as_strings_and_as_code() {
    let repo = Repo::new();
    repo.file(
        "app/cm.jsonnet",
        "{ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: std.extVar('name') },\n  data: { replicas: std.toString(std.extVar('replicas') * 2), env: std.extVar('env') } }\n",
    );
    let s = jsonnet_source(
        "app",
        ApplicationSourceJsonnet {
            ext_vars: vec![
                var("name", "settings", false),
                var("replicas", "{ n: 21 }.n", true),
                var("env", "1 + 1", false),
            ],
            ..Default::default()
        },
    );
    let rendered = render(&repo, &s).await.unwrap();
    let cm = find(&rendered, "ConfigMap", "settings");
    assert_eq!(cm["data"]["replicas"], "42");
    assert_eq!(cm["data"]["env"], "1 + 1", "a string ext var is not evaluated");

    // An ext var the spec does not give is an error naming it and the file.
    let err = render_err(&repo, &source("app")).await;
    assert!(
        err.contains("app/cm.jsonnet:") && err.contains("undefined external variable"),
        "{err}"
    );
}

#[tokio::test]
async fn libs_are_search_paths_inside_the_repository() {
    let repo = Repo::new();
    repo.file(
        "vendor/k8s/k.libsonnet",
        "{ configMap(name):: { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: name } } }\n",
    )
    .file(
        "app/main.jsonnet",
        "local k = import 'k.libsonnet';\n[k.configMap('from-lib')]\n",
    );
    let with_libs = jsonnet_source(
        "app",
        ApplicationSourceJsonnet {
            libs: vec!["vendor/k8s".into()],
            ..Default::default()
        },
    );
    let rendered = render(&repo, &with_libs).await.unwrap();
    assert_eq!(ids(&rendered), ["ConfigMap/from-lib"]);

    let err = render_err(&repo, &source("app")).await;
    assert!(
        err.contains("app/main.jsonnet:1:") && err.contains("k.libsonnet"),
        "{err}"
    );

    for lib in ["../outside", "/etc"] {
        let s = jsonnet_source(
            "app",
            ApplicationSourceJsonnet {
                libs: vec![lib.into()],
                ..Default::default()
            },
        );
        let err = render_err(&repo, &s).await;
        assert!(err.contains("libs") && err.contains(lib), "{lib}: {err}");
    }
}

#[tokio::test]
async fn imports_leaving_the_repository_are_refused_naming_the_file() {
    let repo = Repo::new();
    std::fs::write(
        repo.outside.join("secret.libsonnet"),
        "{ apiVersion: 'v1', kind: 'Secret', metadata: { name: 'stolen' } }",
    )
    .unwrap();
    repo.symlink(repo.outside.join("secret.libsonnet"), "app/link.libsonnet");
    let cases = [
        ("import '../../outside/secret.libsonnet'", "escapes the repository"),
        ("importstr '/etc/passwd'", "absolute"),
        ("importbin '/etc/passwd'", "absolute"),
        ("import 'link.libsonnet'", "symlink"),
    ];
    for (program, why) in cases {
        repo.file("app/main.jsonnet", &format!("local x = {program};\nx\n"));
        let err = render_err(&repo, &source("app")).await;
        assert!(
            err.contains("app/main.jsonnet:1:") && err.contains(why),
            "{program}: {err}"
        );
        assert!(!err.contains("stolen") && !err.contains("root:"), "{program}: {err}");
    }
}

#[tokio::test]
async fn recurse_include_and_exclude_apply_to_jsonnet_files() {
    let repo = Repo::new();
    let cm = |name: &str| format!("{{ apiVersion: 'v1', kind: 'ConfigMap', metadata: {{ name: '{name}' }} }}");
    repo.file("app/a.jsonnet", &cm("a"))
        .file("app/b.yaml", &configmap("b"))
        .file(
            "app/c.jsonnet",
            &format!(
                "[[{}], {{ apiVersion: 'v1', kind: 'List', items: [{}] }}]",
                cm("c1"),
                cm("c2")
            ),
        )
        .file(
            "app/helpers.libsonnet",
            "error 'a library is never evaluated on its own'",
        )
        .file("app/sub/d.jsonnet", &cm("d"))
        .file("app/sub/skip.jsonnet", "error 'excluded'");
    let rendered = render(&repo, &source("app")).await.unwrap();
    assert_eq!(
        ids(&rendered),
        ["ConfigMap/a", "ConfigMap/b", "ConfigMap/c1", "ConfigMap/c2"],
        "path order, arrays and Lists flattened, .libsonnet not evaluated, no recursion"
    );
    let mut s = source("app");
    s.directory = Some(ApplicationSourceDirectory {
        recurse: true,
        include: "*.jsonnet".into(),
        exclude: "{skip.jsonnet,a.*}".into(),
        jsonnet: None,
    });
    let rendered = render(&repo, &s).await.unwrap();
    assert_eq!(ids(&rendered), ["ConfigMap/c1", "ConfigMap/c2", "ConfigMap/d"]);
}

#[tokio::test]
async fn a_syntax_error_names_the_file_and_line() {
    let repo = Repo::new();
    repo.file("app/ok.yaml", &configmap("ok"))
        .file("app/bad.jsonnet", "{\n  apiVersion: 'v1',\n  kind: ,\n}\n");
    let err = render_err(&repo, &source("app")).await;
    assert!(err.contains("app/bad.jsonnet:3:"), "{err}");
    assert!(err.contains("syntax error"), "{err}");
}

#[tokio::test]
async fn output_that_is_not_objects_is_refused() {
    let repo = Repo::new();
    repo.file(
        "app/x.jsonnet",
        "[{ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'a' } }, 'text']",
    );
    let err = render_err(&repo, &source("app")).await;
    assert!(err.contains("app/x.jsonnet") && err.contains("a string"), "{err}");
}

/// Live (not zombie) child processes of this test process running the Jsonnet worker.
fn running_workers() -> Vec<String> {
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("the test fixture").flatten() {
        let dir = entry.path();
        let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let Some(after) = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect::<Vec<_>>())
        else {
            continue;
        };
        if after.len() < 2 || after[1] != me || after[0] == "Z" {
            continue;
        }
        let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(capstan_render::jsonnet::WORKER_ARG) {
            found.push(format!("{} {}", dir.display(), after[0]));
        }
    }
    found
}

#[tokio::test]
async fn a_program_that_never_ends_is_stopped_at_the_budget_and_leaves_nothing_running() {
    let repo = Repo::new();
    let programs = [
        // Ten billion additions: ends long after any budget, in little memory.
        "local sum(n) = std.foldl(function(a, b) a + b, std.range(1, n), 0);\n[{ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'n' }, data: { v: std.toString(std.foldl(function(a, b) a + sum(100000), std.range(1, 100000), 0)) } }]\n",
        // Tail recursion with tailstrict: never ends (the evaluator does not grow its stack for it).
        "local f(x) = f(x + 1) tailstrict;\nf(0)\n",
    ];
    for program in programs {
        repo.file("app/loop.jsonnet", program);
        let renderer = Renderer::new(Duration::from_secs(2));
        let started = Instant::now();
        let err = renderer
            .render(&request(&repo, &source("app")), REVISION)
            .await
            .unwrap_err();
        let elapsed = started.elapsed();
        assert_eq!(err.to_string(), "jsonnet timed out after 2 s (path 'app')", "{program}");
        assert!(elapsed < Duration::from_secs(10), "{program}: took {elapsed:?}: {err}");
        // The worker is gone: nothing keeps burning a core once the render returned.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !running_workers().is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(running_workers(), Vec::<String>::new(), "{program}");
    }
}

#[tokio::test]
async fn a_memory_bomb_is_stopped_by_the_workers_memory_limit() {
    let repo = Repo::new();
    // A string doubled 40 times: a terabyte, reached in seconds.
    repo.file(
        "app/big.jsonnet",
        "local s(n) = if n == 0 then 'x' else (local t = s(n - 1); t + t);\n[{ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'x' }, data: { n: std.toString(std.length(s(40))) } }]\n",
    );
    let renderer = Renderer::new(Duration::from_secs(30));
    let started = Instant::now();
    let err = renderer
        .render(&request(&repo, &source("app")), REVISION)
        .await
        .unwrap_err();
    assert!(
        matches!(err.root(), RenderError::ToolFailed { command, stderr, .. } if command == "jsonnet" && stderr.contains("memory allocation")),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(30), "{err}");
}

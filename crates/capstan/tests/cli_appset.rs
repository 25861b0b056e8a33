//! `capstan controller` (which runs the ApplicationSet controller too) and `capstan appset list|get`
//! driven through the binary, against a real control plane and a real git server; through the
//! kubeconfig and, the same, logged in to the server.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use capstan_testkit::capstan::unique_namespace;
use capstan_testkit::{GitServer, TestCluster};

use common::modes::{Cli, Mode};
use common::{capstan, controller_with_server, text, until};

fn appset(ns: &str, name: &str, repo: &str, label: &str) -> String {
    format!(
        r#"apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata: {{name: {name}, namespace: {ns}}}
spec:
  generators:
  - list: {{elements: [{{svc: a}}, {{svc: b}}]}}
  template:
    metadata: {{name: "{name}-{{{{svc}}}}", labels: {{team: "{label}"}}}}
    spec:
      source: {{repoURL: "{repo}", targetRevision: main, path: "{{{{svc}}}}"}}
      destination: {{server: "https://kubernetes.default.svc", namespace: "cli-appset-{name}-{{{{svc}}}}"}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn capstan_controller_runs_applicationsets_and_appset_commands_show_them() -> anyhow::Result<()> {
    appsets(Mode::Kubeconfig).await
}

/// The same commands, logged in to the server: the same outputs and exit codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn appset_commands_show_the_same_through_the_server() -> anyhow::Result<()> {
    appsets(Mode::Server).await
}

async fn appsets(mode: Mode) -> anyhow::Result<()> {
    // The run's shared plane, Capstan in a namespace of this test's own.
    let cluster = TestCluster::shared().await?;
    let git = GitServer::start().await?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let ns = unique_namespace();
    let out = capstan(&kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out));
    let cache = tempfile::tempdir()?;
    let (mut controller, base, _) = controller_with_server(&kc, cache.path(), &["-n", &ns])?;
    let cli = Cli::new(&kc, &ns, mode, &base);
    git.create_repo("svc")?;
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: blue}\n";
    git.commit("svc", "main", &[("a/cm.yaml", Some(cm)), ("b/cm.yaml", Some(cm))], "v1")?;
    let repo = git.git_url("svc");
    let file = cache.path().join("sets.yaml");
    // `good` generates two Applications; `broken` names a parameter its elements do not have.
    std::fs::write(
        &file,
        format!(
            "{}---\n{}",
            appset(&ns, "good", &repo, "web"),
            appset(&ns, "broken", &repo, "{{owner}}")
        ),
    )?;
    let kubectl = capstan_playground::binaries::find("kubectl")?;
    let out = Command::new(&kubectl)
        .args(["--kubeconfig", &kc, "apply", "-f"])
        .arg(&file)
        .output()?;
    assert!(out.status.success(), "{}", text(&out));

    until("both sets reconciled", Duration::from_secs(60), || {
        let list = text(&cli.run(&["appset", "list"]));
        list.contains("UpToDate") && list.contains("Error (MissingParameter)")
    });
    let list = text(&cli.run(&["appset", "list"]));
    let good = list.lines().find(|l| l.starts_with("good")).unwrap_or_default();
    let cols: Vec<&str> = good.split_whitespace().collect();
    assert_eq!(
        cols.get(1..3),
        Some(&["list", "2"][..]),
        "generator kinds and Application count: {list}"
    );
    let broken = list.lines().find(|l| l.starts_with("broken")).unwrap_or_default();
    assert!(
        broken.contains("owner"),
        "the error message names the parameter: {list}"
    );

    // The Applications exist and the Application controller compares them.
    until("generated Applications compared", Duration::from_secs(60), || {
        let apps = text(&cli.run(&["app", "list"]));
        apps.contains("good-a") && apps.contains("good-b") && apps.matches("OutOfSync").count() == 2
    });
    until(
        "the set reports its Applications' sync status",
        Duration::from_secs(30),
        || text(&cli.run(&["appset", "get", "good"])).matches("OutOfSync").count() == 2,
    );
    let get = text(&cli.run(&["appset", "get", "good"]));
    assert!(get.contains(&format!("Name:        {ns}/good")), "{get}");
    assert!(get.contains("Generators:  list"), "{get}");
    assert!(get.contains("Status:      UpToDate"), "{get}");
    assert!(
        get.contains("APPLICATION") && get.contains("good-a") && get.contains("good-b"),
        "{get}"
    );

    let json = cli.run(&["appset", "get", "good", "-o", "json"]);
    assert!(json.status.success(), "{}", text(&json));
    let parsed: serde_json::Value = serde_json::from_slice(&json.stdout)?;
    assert_eq!(parsed["status"]["resources"][0]["name"], "good-a");
    let yaml = text(&cli.run(&["appset", "get", "broken", "-o", "yaml"]));
    assert!(
        yaml.contains("type: ErrorOccurred") && yaml.contains("MissingParameter"),
        "{yaml}"
    );

    let missing = cli.run(&["appset", "get", "nope"]);
    assert!(!missing.status.success());
    assert!(
        text(&missing).contains("ApplicationSet \"nope\" not found"),
        "{}",
        text(&missing)
    );

    // SIGTERM stops both controllers cleanly.
    let pid = controller.0.id().to_string();
    let out = Command::new("kill").args(["-TERM", &pid]).output()?;
    assert!(out.status.success(), "{}", text(&out));
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = controller.0.try_wait()? {
            break status;
        }
        assert!(Instant::now() < deadline, "capstan controller did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(status.success(), "exit status {status}");
    Ok(())
}

//! `capstan controller` (which runs the ApplicationSet controller too) and `capstan appset list|get`
//! driven through the binary, against a real control plane and a real git server.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use capstan_testkit::capstan::unique_namespace;
use capstan_testkit::{GitServer, TestCluster};

use common::{Controller, capstan, capstan_in, text, until};

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
    // The run's shared plane, Capstan in a namespace of this test's own.
    let cluster = TestCluster::shared().await?;
    let git = GitServer::start().await?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let ns = unique_namespace();
    let out = capstan(&kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out));
    let cache = tempfile::tempdir()?;
    let mut controller = Controller(
        Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args(["controller", "--kubeconfig", &kc, "-n", &ns, "--cache-dir"])
            .arg(cache.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
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
        let list = text(&capstan_in(&kc, &ns, &["appset", "list"]));
        list.contains("UpToDate") && list.contains("Error (MissingParameter)")
    });
    let list = text(&capstan_in(&kc, &ns, &["appset", "list"]));
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
        let apps = text(&capstan_in(&kc, &ns, &["app", "list"]));
        apps.contains("good-a") && apps.contains("good-b") && apps.matches("OutOfSync").count() == 2
    });
    until(
        "the set reports its Applications' sync status",
        Duration::from_secs(30),
        || {
            text(&capstan_in(&kc, &ns, &["appset", "get", "good"]))
                .matches("OutOfSync")
                .count()
                == 2
        },
    );
    let get = text(&capstan_in(&kc, &ns, &["appset", "get", "good"]));
    assert!(get.contains(&format!("Name:        {ns}/good")), "{get}");
    assert!(get.contains("Generators:  list"), "{get}");
    assert!(get.contains("Status:      UpToDate"), "{get}");
    assert!(
        get.contains("APPLICATION") && get.contains("good-a") && get.contains("good-b"),
        "{get}"
    );

    let json = capstan_in(&kc, &ns, &["appset", "get", "good", "-o", "json"]);
    assert!(json.status.success(), "{}", text(&json));
    let parsed: serde_json::Value = serde_json::from_slice(&json.stdout)?;
    assert_eq!(parsed["status"]["resources"][0]["name"], "good-a");
    let yaml = text(&capstan_in(&kc, &ns, &["appset", "get", "broken", "-o", "yaml"]));
    assert!(
        yaml.contains("type: ErrorOccurred") && yaml.contains("MissingParameter"),
        "{yaml}"
    );

    let missing = capstan_in(&kc, &ns, &["appset", "get", "nope"]);
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

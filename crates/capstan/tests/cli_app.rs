//! `capstan controller` and `capstan app …` driven through the binary, as a user would: list, get,
//! diff (exit codes), sync --wait, history, rollback, wait and delete, against a real control plane
//! and a real git server; through the kubeconfig and, the same, logged in to the server.

mod common;

use std::process::Command;
use std::time::Duration;

use capstan_testkit::capstan::unique_namespace;
use capstan_testkit::{GitServer, TestCluster};

use common::modes::{Cli, Mode};
use common::{capstan, controller_with_server, text, until};

const V1: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: blue}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: web, image: nginx}]}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_app_commands_drive_a_real_controller() -> anyhow::Result<()> {
    drive(Mode::Kubeconfig).await
}

/// The same commands, logged in to the server: the same outputs and exit codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_app_commands_drive_a_real_controller_through_the_server() -> anyhow::Result<()> {
    drive(Mode::Server).await
}

async fn drive(mode: Mode) -> anyhow::Result<()> {
    // The run's shared plane, Capstan in a namespace of this test's own.
    let cluster = TestCluster::shared().await?;
    let git = GitServer::start().await?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let ns = unique_namespace();
    let out = capstan(&kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out));
    let cache = tempfile::tempdir()?;
    let (_controller, base, _) = controller_with_server(&kc, cache.path(), &["-n", &ns])?;
    let cli = Cli::new(&kc, &ns, mode, &base);
    // The two modes' runs share the plane: each deploys to a namespace of its own.
    let dest = format!("cli-app-{}", mode.tag());
    git.create_repo("cli")?;
    let v1 = git.commit("cli", "main", &[("app/all.yaml", Some(V1))], "v1")?;
    let app = format!(
        "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata: {{name: cli, namespace: {ns}}}\nspec:\n  source: {{repoURL: '{}', targetRevision: main, path: app}}\n  destination: {{server: 'https://kubernetes.default.svc', namespace: {dest}}}\n  syncPolicy: {{syncOptions: [CreateNamespace=true]}}\n",
        git.git_url("cli"),
    );
    let file = cache.path().join("app.yaml");
    std::fs::write(&file, app)?;
    let kubectl = capstan_playground::binaries::find("kubectl")?;
    let out = Command::new(&kubectl)
        .args(["--kubeconfig", &kc, "apply", "-f"])
        .arg(&file)
        .output()?;
    assert!(out.status.success(), "{}", text(&out));

    until("the app to be compared", Duration::from_secs(60), || {
        text(&cli.run(&["app", "list"])).contains("OutOfSync")
    });
    let list = text(&cli.run(&["app", "list"]));
    assert!(
        list.contains("NAME") && list.contains("cli") && list.contains(&v1[..7]),
        "{list}"
    );

    // diff: exit 1 with a unified diff while the objects are missing.
    let diff = cli.run(&["app", "diff", "cli"]);
    assert_eq!(diff.status.code(), Some(1), "{}", text(&diff));
    assert!(
        text(&diff).contains(&format!("+++ desired /ConfigMap/{dest}/settings"))
            && text(&diff).contains("+  color: blue"),
        "{}",
        text(&diff)
    );

    // sync --wait: succeeds, prints the per-object results and the final state.
    let sync = cli.run(&["app", "sync", "cli", "--wait", "--timeout", "120"]);
    assert!(sync.status.success(), "sync failed: {}", text(&sync));
    assert!(
        text(&sync).contains("sync Succeeded") && text(&sync).contains("sync=Synced health=Healthy"),
        "{}",
        text(&sync)
    );
    let diff = cli.run(&["app", "diff", "cli"]);
    assert_eq!(diff.status.code(), Some(0), "no diff after a sync: {}", text(&diff));

    let get = text(&cli.run(&["app", "get", "cli"]));
    assert!(
        get.contains("Sync Status:   Synced") && get.contains("Deployment") && get.contains("Healthy"),
        "{get}"
    );
    let json = cli.run(&["app", "get", "cli", "-o", "json"]);
    let parsed: serde_json::Value = serde_json::from_slice(&json.stdout)?;
    assert_eq!(parsed["status"]["sync"]["revision"], v1.as_str());

    // A second revision, then rollback to the first.
    let v2 = git.commit(
        "cli",
        "main",
        &[("app/all.yaml", Some(&V1.replace("blue", "green")))],
        "v2",
    )?;
    let get = cli.run(&["app", "get", "cli", "--refresh"]);
    assert!(
        text(&get).contains("OutOfSync"),
        "refresh sees the new commit: {}",
        text(&get)
    );
    let sync = cli.run(&["app", "sync", "cli", "--wait"]);
    assert!(sync.status.success(), "{}", text(&sync));
    let history = text(&cli.run(&["app", "history", "cli"]));
    assert!(history.contains(&v1) && history.contains(&v2), "{history}");
    let rollback = cli.run(&["app", "rollback", "cli", "0", "--wait"]);
    assert!(rollback.status.success(), "{}", text(&rollback));
    let color = Command::new(&kubectl)
        .args([
            "--kubeconfig",
            &kc,
            "-n",
            &dest,
            "get",
            "cm",
            "settings",
            "-o",
            "jsonpath={.data.color}",
        ])
        .output()?;
    assert_eq!(String::from_utf8_lossy(&color.stdout), "blue", "rolled back to v1");

    // A failing sync exits non-zero and names the object and the API server's message.
    git.commit(
        "cli",
        "main",
        &[(
            "app/all.yaml",
            Some(&V1.replace(
                "selector: {matchLabels: {app: web}}",
                "replicas: -3\n  selector: {matchLabels: {app: web}}",
            )),
        )],
        "bad",
    )?;
    cli.run(&["app", "get", "cli", "--refresh"]);
    let bad = cli.run(&["app", "sync", "cli", "--wait", "--timeout", "60"]);
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad));
    assert!(
        text(&bad).contains(&format!("apps/Deployment/{dest}/web")) && text(&bad).contains("replicas"),
        "{}",
        text(&bad)
    );
    assert!(!text(&bad).contains("panicked"));

    // wait, unknown apps, and cascading delete.
    // The refused Deployment makes the Application Degraded: waiting for health times out, saying so.
    let wait = cli.run(&["app", "wait", "cli", "--health", "--timeout", "5"]);
    assert_eq!(wait.status.code(), Some(1), "{}", text(&wait));
    assert!(
        text(&wait).contains("timed out") && text(&wait).contains("health=Degraded"),
        "{}",
        text(&wait)
    );
    let missing = cli.run(&["app", "get", "nope"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(text(&missing).contains("\"nope\" not found"), "{}", text(&missing));
    let delete = cli.run(&["app", "delete", "cli", "--wait", "--yes"]);
    assert!(delete.status.success(), "{}", text(&delete));
    let gone = Command::new(&kubectl)
        .args(["--kubeconfig", &kc, "-n", &dest, "get", "cm", "settings"])
        .output()?;
    assert!(!gone.status.success(), "cascade deleted the objects");
    Ok(())
}

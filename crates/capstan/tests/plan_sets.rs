//! `capstan plan` on an ApplicationSet whose git generator reads the planned repository: the
//! Applications a pull request's branch would create and remove, and the set's deletion budget's
//! verdict, against the Applications the running controller generated from the base branch.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use capstan_testkit::capstan::unique_namespace;
use capstan_testkit::{GitServer, TestCluster};
use serde_json::Value;

use common::{Controller, capstan_in, kubectl, text, until};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_branch_that_adds_and_removes_services_shows_what_the_set_would_create_and_delete() -> anyhow::Result<()> {
    let hub = TestCluster::shared().await?;
    let git = GitServer::start().await?;
    let kc = hub.kubeconfig().to_string_lossy().to_string();
    let ns = unique_namespace();
    let out = common::capstan(&kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out));
    git.create_repo("services")?;
    let config = |name: &str| format!("name: {name}\n");
    git.commit(
        "services",
        "main",
        &[
            ("services/orders/config.yaml", Some(&config("orders"))),
            ("services/billing/config.yaml", Some(&config("billing"))),
        ],
        "two services",
    )?;
    let repo = git.git_url("services");
    let set = format!(
        r#"apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata: {{name: svc, namespace: {ns}}}
spec:
  generators:
  - git: {{repoURL: "{repo}", revision: main, files: [{{path: "services/*/config.yaml"}}]}}
  syncPolicy: {{deletionBudget: {{maxApplications: 0}}}}
  template:
    metadata: {{name: "svc-{{{{name}}}}"}}
    spec:
      project: default
      source: {{repoURL: "file:///elsewhere", targetRevision: main, path: "."}}
      destination: {{server: "https://kubernetes.default.svc", namespace: plan-sets}}
"#
    );
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("set.yaml");
    std::fs::write(&file, set)?;
    let out = kubectl(&kc, &["apply", "-f", &file.to_string_lossy()]);
    assert!(out.status.success(), "{}", text(&out));
    let cache = tempfile::tempdir()?;
    let _controller = Controller(
        Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args(["controller", "--kubeconfig", &kc, "-n", &ns, "--cache-dir"])
            .arg(cache.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    until("two Applications generated", Duration::from_secs(60), || {
        let out = kubectl(&kc, &["-n", &ns, "get", "applications", "-o", "name"]);
        String::from_utf8_lossy(&out.stdout).lines().count() == 2
    });

    // The branch removes billing and adds search (a full tree: a new branch of the test's server).
    git.commit(
        "services",
        "pr-7",
        &[
            ("services/orders/config.yaml", Some(&config("orders"))),
            ("services/search/config.yaml", Some(&config("search"))),
        ],
        "search replaces billing",
    )?;
    let out = capstan_in(
        &kc,
        &ns,
        &[
            "plan",
            "--repo",
            &repo,
            "--revision",
            "pr-7",
            "--base",
            "main",
            "-o",
            "json",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let plan: Value = serde_json::from_slice(&out.stdout)?;
    let set = &plan["applicationSets"][0];
    assert_eq!(set["name"], "svc", "{plan}");
    assert_eq!(set["created"], serde_json::json!(["svc-search"]), "{plan}");
    assert_eq!(set["removed"], serde_json::json!(["svc-billing"]), "{plan}");
    assert!(
        set["deletionBudget"]
            .as_str()
            .is_some_and(|b| b.contains("would delete 1 Applications") && b.contains("maxApplications 0")),
        "{plan}"
    );
    let out = capstan_in(
        &kc,
        &ns,
        &["plan", "--repo", &repo, "--revision", "pr-7", "-o", "markdown"],
    );
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("| svc | svc-search | svc-billing | **exceeded** |"), "{md}");
    // Planning changed nothing: both Applications are still there.
    let out = kubectl(&kc, &["-n", &ns, "get", "applications", "-o", "name"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 2);
    Ok(())
}

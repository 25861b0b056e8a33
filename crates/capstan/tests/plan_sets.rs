//! `capstan plan` on an ApplicationSet whose git generator reads the planned repository: the
//! Applications a pull request's branch would create and remove, and the set's deletion budget's
//! verdict, against the Applications the running controller generated from the base branch; the
//! same plan through the kubeconfig and logged in to the server.

mod common;

use std::time::Duration;

use capstan_testkit::capstan::unique_namespace;
use capstan_testkit::{GitServer, TestCluster};
use serde_json::Value;

use common::modes::{Cli, Mode, same_in_both};
use common::{capstan_in, kubectl, text, until};

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
    let (_controller, base, _) = common::controller_with_server(&kc, cache.path(), &["-n", &ns])?;
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
    // Logged in to the server, the plan is the server's and prints the same.
    let (kube_cli, server_cli) = (
        Cli::new(&kc, &ns, Mode::Kubeconfig, &base),
        Cli::new(&kc, &ns, Mode::Server, &base),
    );
    for output in ["json", "markdown", "text"] {
        same_in_both(
            &kube_cli,
            &server_cli,
            &[
                "plan",
                "--repo",
                &repo,
                "--revision",
                "pr-7",
                "--base",
                "main",
                "-o",
                output,
            ],
        );
    }
    // Planning changed nothing: both Applications are still there.
    let out = kubectl(&kc, &["-n", &ns, "get", "applications", "-o", "name"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 2);
    Ok(())
}

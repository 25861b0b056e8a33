//! Rollback by Git revert from the web UI, in real headless Chromium against `capstan controller
//! --listen` on the shared control plane and a real git server (http, basic auth): an Application
//! with automated sync deploys a bad ConfigMap value; in the History tab the admin rolls back to the
//! good entry with "Revert in Git" and a reason. One revert commit lands on the branch, authored by
//! the user, with the reason in its message; automated sync stays on and the live ConfigMap returns
//! to the good value. Without the checkbox the same dialog's rollback is refused at request time
//! (automated sync is on), the dialog naming the revert.

mod common;

use std::time::{Duration, Instant};

use capstan_api::Application;
use capstan_testkit::capstan::unique_namespace;
use capstan_testkit::webdriver::Browser;
use capstan_testkit::{GitServer, TestCluster, run_git};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

use common::revert::{config_map, head, wait_deployed};
use common::services::{apply, repository_secret};
use common::{capstan, text};

const WAIT: Duration = Duration::from_secs(120);

fn testid(id: &str) -> String {
    format!("[data-testid={id:?}]")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_history_tab_rolls_back_by_a_revert_commit_with_the_reason() -> anyhow::Result<()> {
    let (cluster, git) = tokio::try_join!(TestCluster::shared(), GitServer::start())?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let client = cluster.client().await?;
    let ns = unique_namespace();
    let dest = format!("{ns}-web");
    let out = capstan(&kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "capstan install: {}", text(&out));
    let password = common::admin_password(&out);

    let bare = git.create_repo("app")?;
    let good = git.commit(
        "app",
        "main",
        &[("web/cm.yaml", Some(&config_map("blue")))],
        "web: blue",
    )?;
    let repo = git.http_url("app");
    let work = tempfile::tempdir()?;
    apply(
        &kc,
        work.path(),
        "repo.yaml",
        &repository_secret(&ns, "app-repo", &repo),
    );
    apply(
        &kc,
        work.path(),
        "app.yaml",
        &format!(
            "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata: {{name: web, namespace: {ns}}}\nspec:\n  source: {{repoURL: '{repo}', targetRevision: main, path: web}}\n  destination: {{server: 'https://kubernetes.default.svc', namespace: {dest}}}\n  syncPolicy: {{automated: {{prune: true}}, syncOptions: [CreateNamespace=true]}}\n"
        ),
    );
    let cache = work.path().join("cache");
    let (_controller, server, _) = common::controller_with_server(&kc, &cache, &["-n", &ns, "--poll-interval", "3"])?;
    let port = server.rsplit(':').next().unwrap_or_default().to_string();
    // localhost, not 127.0.0.1: the browser treats it as a secure context for the Secure cookie.
    let base = format!("http://localhost:{port}");
    let apps: Api<Application> = Api::namespaced(client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &dest);
    wait_deployed(&apps, &cms, &bare, "blue").await;
    let good_id = apps
        .get("web")
        .await?
        .status
        .map(|s| s.history)
        .unwrap_or_default()
        .iter()
        .find(|h| h.revision == good)
        .map(|h| h.id)
        .ok_or_else(|| anyhow::anyhow!("no history entry for {good}"))?;
    let bad = git.commit("app", "main", &[("web/cm.yaml", Some(&config_map("red")))], "web: red")?;
    wait_deployed(&apps, &cms, &bare, "red").await;

    let browser = Browser::start()?;
    browser.goto(&format!("{base}/login"))?;
    browser.wait_for(&testid("login-username"), WAIT)?.send_keys("admin")?;
    browser
        .wait_for(&testid("login-password"), WAIT)?
        .send_keys(&password)?;
    browser.click(&testid("login-submit"), WAIT)?;
    browser.wait_for(&testid("app-row"), WAIT)?;
    browser.goto(&format!("{base}/applications/web"))?;
    browser.click(&testid("tab-history"), WAIT)?;
    let row = format!("{}[data-id=\"{good_id}\"]", testid("history-row"));
    browser.wait_text(&row, WAIT, |t| t.contains(&good[..7]))?;

    // Without "Revert in Git": refused at request time, the dialog saying how instead.
    browser.click(&format!("{row} {}", testid("rollback-button")), WAIT)?;
    browser.click(&testid("rollback-confirm"), WAIT)?;
    browser.wait_text(&testid("dialog-error"), WAIT, |t| {
        t.contains("automated sync") && t.contains("Revert in Git")
    })?;
    assert_eq!(head(&bare), bad, "nothing pushed by the refused rollback");

    // With it, and a reason: one revert commit, by the user.
    browser.click(&testid("rollback-revert"), WAIT)?;
    browser
        .wait_for(&testid("rollback-reason"), WAIT)?
        .send_keys("red breaks checkout")?;
    browser.click(&testid("rollback-confirm"), WAIT)?;
    let deadline = Instant::now() + WAIT;
    while head(&bare) == bad {
        assert!(Instant::now() < deadline, "no revert commit pushed");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let log = run_git(&bare, &["log", "-1", "--format=%an|%P%n%B", "main"])?;
    let (who, body) = log.split_once('\n').unwrap_or((&log, ""));
    assert_eq!(who, format!("admin|{bad}"), "{log}");
    assert!(
        body.starts_with(&format!(
            "Revert web to {} (history {good_id})\n\nred breaks checkout\n",
            &good[..12]
        )),
        "{log}"
    );
    assert_eq!(
        run_git(&bare, &["show", "main:web/cm.yaml"])?,
        config_map("blue").trim_end()
    );
    wait_deployed(&apps, &cms, &bare, "blue").await;
    assert!(apps.get("web").await?.is_automated(), "automated sync stays on");
    // The dialog closed and the History tab shows the new deployment.
    browser.wait_text(
        &format!("{}[data-id=\"{}\"]", testid("history-row"), good_id + 2),
        WAIT,
        |t| t.contains(&head(&bare)[..7]),
    )?;
    Ok(())
}

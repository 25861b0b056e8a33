//! Promotion in the web UI, end to end in real headless Chromium against `capstan controller
//! --listen` on a real control plane and a real git http server: the staging Application of seed
//! 004's services-root layout (`common::services`: the shared chart, the `services` ApplicationSet,
//! a PromotionPipeline staging → production) shows "Promote to production"; the dialog shows the
//! preview (the file, each field old → new, the diff) with nothing committed yet; confirming commits
//! production's file in Git, and the History tab lists the promotion. A value from Git holding
//! markup is shown as text and never runs; a read-only user is offered no promotion.

mod common;

use std::time::Duration;

use capstan_api::Application;
use capstan_testkit::capstan::synced_healthy;
use capstan_testkit::webdriver::Browser;
use capstan_testkit::{GitServer, TestCluster, run_git};
use kube::api::Api;
use serde_json::json;

use common::services::{SERVICES_PATH, apply, apply_services_appset, chart_files, pipeline, repository_secret};
use common::{capstan, text, until};

const WAIT: Duration = Duration::from_secs(120);
const STAGING: &str = "services-root/services/payments/staging.yaml";
const PRODUCTION: &str = "services-root/services/payments/production.yaml";
/// Markup in a promoted value: the UI must show it as text (it would set `window.__xss` if it ran).
const XSS: &str = "<img src=x onerror=window.__xss=1>";

fn testid(id: &str) -> String {
    format!("[data-testid={id:?}]")
}

fn head(repo: &std::path::Path) -> String {
    run_git(repo, &["rev-parse", "refs/heads/main"])
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_person_previews_and_confirms_a_promotion_in_the_browser() -> anyhow::Result<()> {
    // A plane of its own: the `services` ApplicationSet of examples/appsets deploys each service to
    // the namespace named after it, with objects named after its Applications, and promotion.rs
    // deploys the same service (`payments/payments-staging`) on the run's shared plane.
    let (cluster, git) = tokio::try_join!(TestCluster::start(), GitServer::start())?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let client = cluster.client().await?;
    let out = capstan(&kc, &["install"]);
    assert!(out.status.success(), "{}", text(&out));
    let password = common::admin_password(&out);
    let out = capstan(
        &kc,
        &["account", "set-password", "viewer", "--password", "viewer-password"],
    );
    assert!(out.status.success(), "{}", text(&out));
    common::create_policy(
        &kc,
        "capstan",
        "grants:\n  - {role: read-only, projects: ['*'], users: [viewer]}\n",
    );

    // Staging runs 1.5.0 and has an owner holding markup; production runs 1.4.2.
    let mut files = chart_files()?;
    files.push((
        STAGING.into(),
        format!("cluster: in-cluster\nservice: payments\nimageTag: \"1.5.0\"\ntargetRevision: main\nowner: '{XSS}'\n"),
    ));
    files.push((
        PRODUCTION.into(),
        "# Production is promoted on purpose.\ncluster: in-cluster\nservice: payments\nimageTag: \"1.4.2\" # promoted\ntargetRevision: main\nowner: team-a\n".into(),
    ));
    let bare = git.create_repo("examples")?;
    let commit: Vec<(&str, Option<&str>)> = files.iter().map(|(p, t)| (p.as_str(), Some(t.as_str()))).collect();
    git.commit("examples", "main", &commit, "services-root")?;
    let repo = git.http_url("examples");
    let work = tempfile::tempdir()?;
    apply(
        &kc,
        work.path(),
        "repository.yaml",
        &repository_secret("capstan", "services-root", &repo),
    );
    apply_services_appset(&kc, "capstan", work.path(), &repo)?;
    apply(
        &kc,
        work.path(),
        "pipeline.yaml",
        &pipeline(
            "capstan",
            "services",
            "services",
            &repo,
            SERVICES_PATH,
            "  fields: [imageTag, owner]\n",
        ),
    );

    let cache = work.path().join("cache");
    let (_controller, server, _) = common::controller_with_server(&kc, &cache, &["--poll-interval", "3"])?;
    let apps: Api<Application> = Api::namespaced(client.clone(), "capstan");
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let staging = apps.get_opt("payments-staging").await?;
        if staging.as_ref().is_some_and(synced_healthy) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "payments-staging not Synced and Healthy"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // localhost, not 127.0.0.1: the browser treats it as a secure context for the Secure cookie.
    let port = server.rsplit(':').next().unwrap_or_default().to_string();
    let base = format!("http://localhost:{port}");

    let browser = Browser::start()?;
    browser.goto(&format!("{base}/login"))?;
    browser.wait_for(&testid("login-username"), WAIT)?.send_keys("admin")?;
    browser
        .wait_for(&testid("login-password"), WAIT)?
        .send_keys(&password)?;
    browser.click(&testid("login-submit"), WAIT)?;
    browser.wait_for(&testid("app-row"), WAIT)?;
    browser.goto(&format!("{base}/applications/payments-staging"))?;
    browser.wait_text(&testid("app-title"), WAIT, |t| t.contains("payments-staging"))?;
    let button = format!("{}[data-to=\"production\"]", testid("promote-button"));
    browser.wait_text(&button, WAIT, |t| t.contains("Promote to production"))?;
    let before = head(&bare);
    browser.click(&button, WAIT)?;

    // The preview: the file, each field old → new, the diff; nothing committed yet.
    browser.wait_text(&testid("promote-path"), WAIT, |t| t.contains(PRODUCTION))?;
    let tag = browser.wait_text(
        &format!("{}[data-field=\"imageTag\"]", testid("promote-change")),
        WAIT,
        |t| t.contains("1.4.2") && t.contains("1.5.0"),
    )?;
    assert!(tag.find("1.4.2") < tag.find("1.5.0"), "old before new: {tag}");
    browser.wait_text(
        &format!("{}[data-field=\"owner\"]", testid("promote-change")),
        WAIT,
        |t| t.contains("team-a") && t.contains(XSS),
    )?;
    browser.wait_text(&testid("promote-diff"), WAIT, |t| {
        t.contains("-imageTag: \"1.4.2\" # promoted") && t.contains("+imageTag: \"1.5.0\" # promoted")
    })?;
    let injected = browser.execute(
        "return [document.querySelectorAll('main img, main [onerror]').length, window.__xss === undefined]",
        vec![],
    )?;
    assert_eq!(injected, json!([0, true]), "markup from Git became an element");
    assert!(
        browser.find_all(&testid("promote-force"))?.is_empty(),
        "no force offered when the checks pass"
    );
    assert_eq!(head(&bare), before, "the preview commits nothing");

    // Confirm: one commit changing production's file.
    browser.click(&testid("promote-confirm"), WAIT)?;
    let result = browser.wait_text(&testid("promote-result"), WAIT, |t| t.contains("Promoted"))?;
    let promoted = head(&bare);
    assert_ne!(promoted, before);
    assert!(result.contains(&promoted[..7]), "{result}");
    let production = run_git(&bare, &["show", &format!("main:{PRODUCTION}")])?;
    assert!(
        production.contains("imageTag: \"1.5.0\" # promoted") && production.contains(XSS),
        "{production}"
    );
    browser.click(&testid("promote-cancel"), WAIT)?;

    // The History tab lists it.
    browser.click(&testid("tab-history"), WAIT)?;
    let row = format!("{}[data-commit=\"{promoted}\"]", testid("promotion-row"));
    browser.wait_text(&row, WAIT, |t| {
        t.contains("staging → production") && t.contains("imageTag 1.4.2 → 1.5.0") && t.contains("admin")
    })?;
    let injected = browser.execute("return window.__xss === undefined", vec![])?;
    assert_eq!(injected, json!(true), "markup from Git ran");

    // A read-only user is offered no promotion.
    browser.click(&testid("logout"), WAIT)?;
    browser.wait_for(&testid("login-username"), WAIT)?.send_keys("viewer")?;
    browser
        .wait_for(&testid("login-password"), WAIT)?
        .send_keys("viewer-password")?;
    browser.click(&testid("login-submit"), WAIT)?;
    browser.wait_for(&testid("app-row"), WAIT)?;
    browser.goto(&format!("{base}/applications/payments-staging"))?;
    browser.wait_text(&testid("app-title"), WAIT, |t| t.contains("payments-staging"))?;
    let targets = browser.execute_async(
        "const done = arguments[arguments.length - 1];
         fetch('/api/applications/payments-staging/promotions', {credentials: 'same-origin'})
           .then(r => r.json()).then(a => done(a.promoteTargets), e => done(String(e)));",
        vec![],
    )?;
    assert_eq!(targets, json!([]), "a read-only user may promote nowhere");
    // The history (with the promotion) is shown, and no button.
    browser.click(&testid("tab-history"), WAIT)?;
    browser.wait_for(&row, WAIT)?;
    assert!(
        browser.find_all(&testid("promote-button"))?.is_empty(),
        "a read-only user sees no Promote button"
    );
    until("nothing else committed", Duration::from_secs(1), || {
        head(&bare) == promoted
    });
    Ok(())
}

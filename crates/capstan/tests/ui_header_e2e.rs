//! The Application page's header and tree, in real headless Chromium against `capstan controller
//! --listen` on a real control plane: the sync policy, the last sync (how it ended, how long ago, to
//! which revision), the commit the header's revision names (message and author), the images its
//! live Pods run, why the header's revision differs from the last history entry's when it does, and
//! a PreSync hook Job in the tree while the operation waits on it.

mod common;

use std::time::Duration;

use capstan_testkit::capstan::unique_namespace;
use capstan_testkit::webdriver::Browser;
use capstan_testkit::{GitServer, TestCluster};

use common::{capstan, capstan_in, kubectl, text, until};

const WAIT: Duration = Duration::from_secs(90);

const SETTINGS: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: blue}\n";
const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers:\n  - {name: web, image: 'registry.test/web:1.27'}\n  - {name: sidecar, image: 'registry.test/proxy:2.1'}\n";
/// A PreSync hook that never completes: its Pods are refused (no such service account).
const HOOK: &str = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: migrate, annotations: {capstan.dev/hook: PreSync}}\nspec:\n  backoffLimit: 0\n  template:\n    spec: {serviceAccountName: nobody, restartPolicy: Never, containers: [{name: c, image: x}]}\n";

fn testid(id: &str) -> String {
    format!("[data-testid={id:?}]")
}

fn application(ns: &str, name: &str, repo: &str, path: &str, automated: &str) -> String {
    format!(
        "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  source: {{repoURL: \"{repo}\", targetRevision: main, path: {path}}}\n  destination: {{server: \"https://kubernetes.default.svc\", namespace: header-{name}}}\n  syncPolicy: {{syncOptions: [CreateNamespace=true]{automated}}}\n"
    )
}

fn jsonpath(kc: &str, ns: &str, app: &str, path: &str) -> String {
    let out = kubectl(
        kc,
        &["-n", ns, "get", "application", app, "-o", &format!("jsonpath={path}")],
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_application_header_and_tree_say_what_is_deployed_and_what_runs() -> anyhow::Result<()> {
    // The run's shared plane, Capstan in a namespace of this test's own.
    let (cluster, git) = tokio::try_join!(TestCluster::shared(), GitServer::start())?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let ns = unique_namespace();
    let out = capstan(&kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out));
    let password = common::admin_password(&out);
    let scratch = tempfile::tempdir()?;

    git.create_repo("hdr")?;
    let v1 = git.commit(
        "hdr",
        "main",
        &[
            ("web/settings.yaml", Some(SETTINGS)),
            ("web/pod.yaml", Some(POD)),
            ("hooked/settings.yaml", Some(SETTINGS)),
            ("hooked/migrate.yaml", Some(HOOK)),
        ],
        "Run the web Pod\n\nWith its proxy beside it.",
    )?;
    let repo = git.git_url("hdr");
    let file = scratch.path().join("apps.yaml");
    std::fs::write(
        &file,
        [
            application(&ns, "web", &repo, "web", ""),
            application(&ns, "auto", &repo, "web", ", automated: {prune: true, selfHeal: true}"),
            application(&ns, "hooked", &repo, "hooked", ""),
        ]
        .join("---\n"),
    )?;
    let out = kubectl(&kc, &["apply", "-f", &file.to_string_lossy()]);
    assert!(out.status.success(), "{}", text(&out));
    let (_controller, server, _) = common::controller_with_server(&kc, &scratch.path().join("cache"), &["-n", &ns])?;
    let port = server.rsplit(':').next().unwrap_or_default().to_string();
    // localhost, not 127.0.0.1: the browser treats it as a secure context for the Secure cookie.
    let base = format!("http://localhost:{port}");

    until("web compared", WAIT, || {
        jsonpath(&kc, &ns, "web", "{.status.sync.revision}") == v1
    });
    let out = capstan_in(&kc, &ns, &["app", "sync", "web"]);
    assert!(out.status.success(), "{}", text(&out));
    until("web synced once", WAIT, || {
        jsonpath(&kc, &ns, "web", "{.status.history[*].id}") == "0"
    });

    let browser = Browser::start()?;
    browser.goto(&format!("{base}/login"))?;
    browser.wait_for(&testid("login-username"), WAIT)?.send_keys("admin")?;
    browser
        .wait_for(&testid("login-password"), WAIT)?
        .send_keys(&password)?;
    browser.click(&testid("login-submit"), WAIT)?;
    browser.wait_for(&testid("app-row"), WAIT)?;

    browser.goto(&format!("{base}/applications/web"))?;
    browser.wait_text(&testid("app-sync-policy"), WAIT, |t| t == "Manual")?;
    let last = browser.wait_text(&testid("app-last-sync"), WAIT, |t| t.contains("Succeeded"))?;
    assert!(last.contains("ago") && last.contains(&v1[..7]), "{last}");
    let commit = browser.wait_text(&testid("app-commit"), WAIT, |t| t.contains("Run the web Pod"))?;
    assert!(commit.contains("Capstan Test"), "names the author: {commit}");
    assert!(!commit.contains("proxy beside"), "only the first line: {commit}");
    let whole = browser
        .wait_for(&format!("{} [title]", testid("app-commit")), WAIT)?
        .attr("title")?
        .unwrap_or_default();
    assert!(whole.contains("With its proxy beside it."), "{whole}");
    let images = browser.wait_text(&testid("app-images"), WAIT, |t| t.contains("registry.test/web:1.27"))?;
    assert!(images.contains("registry.test/proxy:2.1"), "{images}");
    assert!(
        browser.find_all(&testid("app-revision-note"))?.is_empty(),
        "the header's revision is the one deployed: no note"
    );

    // Git moves on; the manual Application is compared with the new commit but still runs the old.
    let v2 = git.commit(
        "hdr",
        "main",
        &[("web/settings.yaml", Some(&SETTINGS.replace("blue", "green")))],
        "Paint it green",
    )?;
    let out = capstan_in(&kc, &ns, &["app", "get", "web", "--refresh"]);
    assert!(out.status.success(), "{}", text(&out));
    let note = browser.wait_text(&testid("app-revision-note"), WAIT, |t| t.contains(&v2[..7]))?;
    assert!(note.contains(&v1[..7]) && note.contains("history #0"), "{note}");
    assert!(note.contains("manual"), "says why: {note}");
    browser.wait_text(&testid("app-commit"), WAIT, |t| t.contains("Paint it green"))?;

    browser.goto(&format!("{base}/applications/auto"))?;
    browser.wait_text(&testid("app-sync-policy"), WAIT, |t| {
        t == "Automated (prune, self-heal)"
    })?;

    // A sync waiting on its PreSync hook: the hook Job is in the tree meanwhile.
    until("hooked compared", WAIT, || {
        !jsonpath(&kc, &ns, "hooked", "{.status.sync.revision}").is_empty()
    });
    let out = capstan_in(&kc, &ns, &["app", "sync", "hooked"]);
    assert!(out.status.success(), "{}", text(&out));
    browser.goto(&format!("{base}/applications/hooked"))?;
    let job = format!("{}[data-kind=\"Job\"][data-name=\"migrate\"]", testid("tree-node"));
    let node = browser.wait_for(&job, WAIT)?;
    let label = node.attr("aria-label")?.unwrap_or_default();
    assert!(label.contains("PreSync hook"), "{label}");
    assert_eq!(
        jsonpath(&kc, &ns, "hooked", "{.status.operationState.phase}"),
        "Running"
    );
    Ok(())
}

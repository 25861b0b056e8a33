//! Sync windows and dependencies through the binary: `capstan project windows` lists a project's
//! windows; a manual sync a deny window blocks is refused at request time by the CLI (non-zero exit,
//! the reason) and by the HTTP API (409) until the window has `manualSync: true`; `capstan app get`
//! shows the active window; a sync of an Application whose dependency is missing is refused, and
//! `capstan app list` says why; through the kubeconfig and, the same, logged in to the server.

mod common;

use std::time::Duration;

use capstan_testkit::capstan::unique_namespace;
use capstan_testkit::{GitServer, TestCluster};
use serde_json::json;

use common::http::Http;
use common::modes::{Cli, Mode};
use common::{capstan, kubectl, text, until};

/// The project: a deny window always active, and an allow window that is never active when the test
/// runs (it opens on 29 February only: a weekday-hours window failed the test whenever it ran during
/// Berlin's working day).
fn project(ns: &str, repo: &str, manual_sync: bool) -> String {
    format!(
        "apiVersion: capstan.dev/v1alpha1\nkind: AppProject\nmetadata: {{name: frozen, namespace: {ns}}}\nspec:\n  sourceRepos: ['{repo}']\n  destinations: [{{server: '*', namespace: '*'}}]\n  clusterResourceWhitelist: [{{group: '', kind: Namespace}}]\n  syncWindows:\n  - {{kind: deny, schedule: '* * * * *', duration: 1h, applications: ['*'], manualSync: {manual_sync}}}\n  - {{kind: allow, schedule: '0 9 29 2 *', duration: 8h, namespaces: ['prod-*'], timeZone: Europe/Berlin}}\n"
    )
}

/// An Application deploying to `windows-NAME-TAG` (each mode's run a namespace of its own).
fn app(ns: &str, name: &str, tag: &str, repo: &str, project: &str, depends_on: &str) -> String {
    format!(
        "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  project: {project}\n  source: {{repoURL: '{repo}', targetRevision: main, path: app}}\n  destination: {{server: 'https://kubernetes.default.svc', namespace: windows-{name}-{tag}}}\n  syncPolicy: {{syncOptions: [CreateNamespace=true]}}\n{depends_on}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn manual_syncs_are_refused_at_request_time_by_windows_and_dependencies() -> anyhow::Result<()> {
    windows_and_dependencies(Mode::Kubeconfig).await
}

/// The same commands, logged in to the server: the same outputs and exit codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn windows_and_dependencies_show_the_same_through_the_server() -> anyhow::Result<()> {
    windows_and_dependencies(Mode::Server).await
}

async fn windows_and_dependencies(mode: Mode) -> anyhow::Result<()> {
    // The run's shared plane, Capstan in a namespace of this test's own.
    let cluster = TestCluster::shared().await?;
    let git = GitServer::start().await?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let ns = unique_namespace();
    let out = capstan(&kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out));
    let password = common::admin_password(&out);
    let cache = tempfile::tempdir()?;
    let (_controller, base, _) = common::controller_with_server(&kc, cache.path(), &["-n", &ns])?;
    let cli = Cli::new(&kc, &ns, mode, &base);
    let mut http = Http::new(&base);
    until("the server to be ready", Duration::from_secs(30), || {
        http.get("/readyz").status == 200
    });
    assert_eq!(http.login("admin", &password).status, 200);

    git.create_repo("site")?;
    git.commit(
        "site",
        "main",
        &[(
            "app/cm.yaml",
            Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {a: b}\n"),
        )],
        "v1",
    )?;
    let repo = git.git_url("site");
    let file = cache.path().join("objects.yaml");
    let write_apply = |yaml: String| {
        std::fs::write(&file, yaml).expect("write");
        let out = kubectl(&kc, &["apply", "-f", &file.to_string_lossy()]);
        assert!(out.status.success(), "{}", text(&out));
    };
    write_apply(format!(
        "{}---\n{}---\n{}",
        project(&ns, &repo, false),
        app(&ns, "frozen", mode.tag(), &repo, "frozen", ""),
        app(
            &ns,
            "late",
            mode.tag(),
            &repo,
            "default",
            "  dependsOn: [{name: missing}]\n"
        )
    ));

    // The windows, as the project lists them.
    let out = cli.run(&["project", "windows", "frozen"]);
    let listed = text(&out);
    assert!(out.status.success(), "{listed}");
    assert!(
        listed.contains("Active") && listed.contains("deny") && listed.contains("Disabled"),
        "{listed}"
    );
    assert!(
        listed.contains("Inactive") && listed.contains("Europe/Berlin"),
        "{listed}"
    );
    let missing = cli.run(&["project", "windows", "nope"]);
    assert!(!missing.status.success());

    // A manual sync inside the deny window: refused by the CLI and by the API, with the reason.
    until("frozen compared", Duration::from_secs(60), || {
        let out = cli.run(&["app", "get", "frozen"]);
        text(&out).contains("OutOfSync")
    });
    let out = cli.run(&["app", "sync", "frozen"]);
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("deny window syncWindows[0] active"), "{said}");
    let refused = http.post("/api/applications/frozen/sync", json!({}));
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert!(refused.body.contains("deny window syncWindows[0]"), "{}", refused.body);
    let shown = text(&cli.run(&["app", "get", "frozen"]));
    assert!(
        shown.contains("Active Window:") && shown.contains("deny syncWindows[0]"),
        "{shown}"
    );
    assert!(shown.contains("Manual Sync:") && shown.contains("refused"), "{shown}");

    // manualSync: true lets it through.
    write_apply(project(&ns, &repo, true));
    until("the window allows manual syncs", Duration::from_secs(30), || {
        http.post("/api/applications/frozen/sync", json!({})).status == 202
    });
    until("frozen synced", Duration::from_secs(120), || {
        text(&cli.run(&["app", "get", "frozen"])).contains("Synced")
    });

    // A missing dependency: a condition in the list, and a sync refused with it.
    until("the missing dependency reported", Duration::from_secs(60), || {
        text(&cli.run(&["app", "list"])).contains("dependency missing not found")
    });
    let out = cli.run(&["app", "sync", "late"]);
    assert!(
        !out.status.success() && text(&out).contains("dependency missing not found"),
        "{}",
        text(&out)
    );
    let refused = http.post("/api/applications/late/sync", json!({}));
    assert_eq!(refused.status, 409, "{}", refused.body);
    Ok(())
}

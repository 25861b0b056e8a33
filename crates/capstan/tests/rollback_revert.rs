//! Rollback by Git revert end to end: an Application with automated sync on a Git path of a real
//! git server (http, basic auth), the real controller with its HTTP server. A bad ConfigMap value
//! is committed and synced; `capstan app rollback NAME ID --revert --reason …` pushes one revert
//! commit authored by the user, automated sync stays on and the live ConfigMap returns to the old
//! value. Then the refusals push nothing: a commit in the range that also changed a file outside the
//! Application's path (exit 1, the file named), a merge commit in the range (`POST …/rollback` 422), and callers without the `sync` role
//! (403 for a reader, 404 for someone who cannot see the Application).

mod common;

use std::time::{Duration, Instant};

use capstan_api::Application;
use capstan_testkit::capstan::unique_namespace;
use capstan_testkit::{GitServer, TestCluster, run_git};
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{Api, ListParams};
use serde_json::json;

use common::http::Http;
use common::revert::{config_map, head, wait_deployed};
use common::services::{apply, repository_secret};
use common::{capstan, capstan_in, text};

/// The id of the history entry that deployed `revision`.
async fn history_id(apps: &Api<Application>, revision: &str) -> anyhow::Result<i64> {
    let app = apps.get("web").await?;
    let history = app.status.map(|s| s.history).unwrap_or_default();
    history
        .iter()
        .find(|h| h.revision == revision)
        .map(|h| h.id)
        .ok_or_else(|| anyhow::anyhow!("no history entry for {revision}: {history:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bad_commit_is_rolled_back_by_a_revert_commit_while_automated_sync_stays_on() -> anyhow::Result<()> {
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
        &[
            ("web/cm.yaml", Some(&config_map("blue"))),
            ("shared/common.yaml", Some("a: 1\nb: 1\nc: 1\n")),
        ],
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
    let (_controller, base, _) = common::controller_with_server(&kc, &cache, &["-n", &ns, "--poll-interval", "3"])?;
    let apps: Api<Application> = Api::namespaced(client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &dest);
    wait_deployed(&apps, &cms, &bare, "blue").await;
    let good_id = history_id(&apps, &good).await?;

    // A bad value, deployed by automated sync.
    let bad = git.commit("app", "main", &[("web/cm.yaml", Some(&config_map("red")))], "web: red")?;
    wait_deployed(&apps, &cms, &bare, "red").await;

    // The rollback by revert, from the CLI.
    let id = good_id.to_string();
    let out = capstan_in(
        &kc,
        &ns,
        &[
            "app",
            "rollback",
            "web",
            &id,
            "--revert",
            "--reason",
            "red breaks checkout",
        ],
    );
    assert!(out.status.success(), "capstan app rollback --revert: {}", text(&out));
    let commit = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(commit, head(&bare), "{}", text(&out));
    let log = run_git(&bare, &["log", "-1", "--format=%an <%ae>|%P%n%B", "main"])?;
    let (who, body) = log.split_once('\n').unwrap_or((&log, ""));
    assert!(who.starts_with("cli:") && who.contains("@capstan.invalid>"), "{log}");
    assert!(who.ends_with(&format!("|{bad}")), "{log}");
    assert_eq!(
        body,
        format!(
            "Revert web to {} (history {good_id})\n\nred breaks checkout\n\nReverts:\n- {} web: red",
            &good[..12],
            &bad[..12]
        )
    );
    assert_eq!(
        run_git(&bare, &["show", "main:web/cm.yaml"])?,
        config_map("blue").trim_end()
    );
    wait_deployed(&apps, &cms, &bare, "blue").await;
    let app = apps.get("web").await?;
    assert!(app.is_automated(), "automated sync stays on");
    // An Event on the Application names the user.
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let list = events
            .list(&ListParams::default().fields("involvedObject.kind=Application,involvedObject.name=web"))
            .await?;
        let found = list.items.iter().any(|e| {
            e.reason.as_deref() == Some("RollbackReverted")
                && e.message
                    .as_deref()
                    .is_some_and(|m| m.starts_with("cli:") && m.contains(&commit[..12]))
        });
        if found {
            break;
        }
        assert!(Instant::now() < deadline, "no RollbackReverted Event");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // A web commit also changed a shared file (a line a later commit changed again): reverting it
    // would undo what is not the Application's. Refused (exit 1) naming the file; nothing pushed.
    git.commit(
        "app",
        "main",
        &[
            ("web/cm.yaml", Some(&config_map("green"))),
            ("shared/common.yaml", Some("a: 1\nb: 2\nc: 1\n")),
        ],
        "web: green, b: 2",
    )?;
    git.commit(
        "app",
        "main",
        &[("shared/common.yaml", Some("a: 1\nb: 3\nc: 1\n"))],
        "b: 3",
    )?;
    wait_deployed(&apps, &cms, &bare, "green").await;
    let before = head(&bare);
    let out = capstan_in(&kc, &ns, &["app", "rollback", "web", &id, "--revert"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("outside the Application's paths") && stderr.contains("shared/common.yaml"),
        "{stderr}"
    );
    assert_eq!(head(&bare), before, "nothing pushed");

    // Through the API: callers without the `sync` role, then a merge commit in the range.
    for (user, pw) in [("viewer", "viewer-password-1"), ("nobody", "nobody-password-1")] {
        let out = capstan_in(&kc, &ns, &["account", "set-password", user, "--password", pw]);
        assert!(out.status.success(), "{}", text(&out));
    }
    common::create_policy(
        &kc,
        &ns,
        "default: none\ngrants:\n  - {role: read-only, projects: ['*'], users: [viewer]}\n",
    );
    let mut viewer = Http::new(&base);
    assert_eq!(viewer.login("viewer", "viewer-password-1").status, 200);
    let mut nobody = Http::new(&base);
    assert_eq!(nobody.login("nobody", "nobody-password-1").status, 200);
    let body = json!({"id": good_id, "revert": true, "reason": "r"});
    let deadline = Instant::now() + Duration::from_secs(15);
    let refused = loop {
        let answer = viewer.post("/api/applications/web/rollback", body.clone());
        if answer.status != 404 || Instant::now() > deadline {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(refused.status, 403, "{}", refused.body);
    let hidden = nobody.post("/api/applications/web/rollback", body.clone());
    assert_eq!(hidden.status, 404, "{}", hidden.body);
    assert_eq!(head(&bare), before, "nothing pushed");

    let side = tempfile::tempdir()?;
    let w = side.path();
    run_git(w, &["clone", "--quiet", &bare.to_string_lossy(), "."])?;
    run_git(w, &["checkout", "--quiet", "-b", "side"])?;
    std::fs::write(w.join("web/cm.yaml"), config_map("yellow"))?;
    run_git(w, &["commit", "--quiet", "-am", "web: yellow"])?;
    run_git(w, &["checkout", "--quiet", "main"])?;
    std::fs::write(w.join("shared/common.yaml"), "a: 2\nb: 3\nc: 1\n")?;
    run_git(w, &["commit", "--quiet", "-am", "a: 2"])?;
    run_git(w, &["merge", "--quiet", "--no-ff", "--no-edit", "side"])?;
    run_git(w, &["push", "--quiet", "origin", "main"])?;
    let merged = head(&bare);
    let mut admin = Http::new(&base);
    assert_eq!(admin.login("admin", &password).status, 200);
    let refused = admin.post("/api/applications/web/rollback", body.clone());
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert!(
        refused.body.contains("merge commit") && refused.body.contains(&merged[..12]),
        "{}",
        refused.body
    );
    // Without revert, a rollback is still refused while automated sync is on.
    let plain = admin.post("/api/applications/web/rollback", json!({"id": good_id}));
    assert_eq!(plain.status, 409, "{}", plain.body);
    assert_eq!(head(&bare), merged, "nothing pushed");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_answers_the_revert_commit() -> anyhow::Result<()> {
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
            "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata: {{name: web, namespace: {ns}}}\nspec:\n  source: {{repoURL: '{repo}', targetRevision: main, path: web}}\n  destination: {{server: 'https://kubernetes.default.svc', namespace: {dest}}}\n  syncPolicy: {{automated: {{}}, syncOptions: [CreateNamespace=true]}}\n"
        ),
    );
    let cache = work.path().join("cache");
    let (_controller, base, _) = common::controller_with_server(&kc, &cache, &["-n", &ns, "--poll-interval", "3"])?;
    let apps: Api<Application> = Api::namespaced(client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &dest);
    wait_deployed(&apps, &cms, &bare, "blue").await;
    let good_id = history_id(&apps, &good).await?;
    let bad = git.commit("app", "main", &[("web/cm.yaml", Some(&config_map("red")))], "web: red")?;
    wait_deployed(&apps, &cms, &bare, "red").await;

    let mut admin = Http::new(&base);
    assert_eq!(admin.login("admin", &password).status, 200);
    let too_long = admin.post(
        "/api/applications/web/rollback",
        json!({"id": good_id, "revert": true, "reason": "x".repeat(1001)}),
    );
    assert_eq!(too_long.status, 400, "{}", too_long.body);
    let answer = admin.post(
        "/api/applications/web/rollback",
        json!({"id": good_id, "revert": true, "reason": "red"}),
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    let reverted = answer.json();
    assert_eq!(reverted["commit"], json!(head(&bare)));
    assert_eq!(reverted["reverted"], json!([bad]));
    assert_eq!(reverted["branch"], json!("main"));
    let author = run_git(&bare, &["log", "-1", "--format=%an <%ae>", "main"])?;
    assert_eq!(author, "admin <admin@capstan.invalid>");
    wait_deployed(&apps, &cms, &bare, "blue").await;
    // Everything after the entry is reverted now: nothing left to revert.
    let again = admin.post("/api/applications/web/rollback", json!({"id": good_id, "revert": true}));
    assert_eq!(again.status, 422, "{}", again.body);
    assert!(again.body.contains("nothing to revert"), "{}", again.body);
    Ok(())
}

//! Automatic rollback by Git revert (`spec.syncPolicy.autoRevert`) end to end: an Application with
//! automated sync on a Git path of a real git server (http, basic auth) and the real controller. v1
//! is Healthy; v2's Deployment never becomes ready (kwok's failing Pods) and the Application turns
//! Degraded: after `degradedFor` the controller pushes exactly one revert commit, authored by
//! Capstan, restoring v1's files; the live objects return to v1, an `AutoReverted` Event is recorded,
//! and after a controller restart (and a reconcile seen after it) no second revert appears. Then the
//! refusals: a project whose `sourceRepoPaths` do not permit the write shows an `AutoRevertError`
//! condition and pushes nothing while the Application stays Degraded past `degradedFor`; an
//! unparsable or zero `degradedFor` is an `InvalidSpecError` naming the field.

mod common;

use std::time::{Duration, Instant};

use capstan_api::Application;
use capstan_api::labels::{AUTO_REVERTED_ANNOTATION, REFRESH_ANNOTATION};
use capstan_testkit::capstan::{health_of, sync_of, unique_namespace};
use capstan_testkit::{GitServer, TestCluster, run_git};
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use common::services::{apply, repository_secret};
use common::{capstan, text};

const WAIT: Duration = Duration::from_secs(180);

/// A ConfigMap and a Deployment; `simulate: fail` makes kwok's Pods fail, and the Deployment
/// Degraded after its progress deadline.
fn manifests(color: &str, simulate: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: web}}\ndata: {{color: {color}}}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\nspec:\n  replicas: 1\n  progressDeadlineSeconds: 5\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}, annotations: {{capstan.dev/simulate: '{simulate}', color: {color}}}}}\n    spec: {{containers: [{{name: web, image: nginx}}]}}\n"
    )
}

fn head(bare: &std::path::Path) -> String {
    run_git(bare, &["rev-parse", "refs/heads/main"]).expect("rev-parse")
}

fn application(ns: &str, name: &str, repo: &str, project: &str, degraded_for: &str) -> String {
    format!(
        "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  project: {project}\n  source: {{repoURL: '{repo}', targetRevision: main, path: web}}\n  destination: {{server: 'https://kubernetes.default.svc', namespace: {ns}-{name}}}\n  syncPolicy:\n    automated: {{prune: true}}\n    syncOptions: [CreateNamespace=true]\n    autoRevert: {{degradedFor: '{degraded_for}'}}\n"
    )
}

async fn wait_for<F>(apps: &Api<Application>, name: &str, what: &str, mut check: F) -> Application
where
    F: FnMut(&Application) -> bool,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(Some(app)) = apps.get_opt(name).await
            && check(&app)
        {
            return app;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn revision_of(app: &Application) -> String {
    app.status
        .as_ref()
        .and_then(|s| s.sync.as_ref())
        .map(|s| s.revision.clone())
        .unwrap_or_default()
}

fn condition(app: &Application, type_: &str) -> Option<String> {
    app.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_.to_string() == type_)
        .map(|c| c.message.clone())
}

fn reconciled_at(app: &Application) -> String {
    app.status
        .as_ref()
        .and_then(|s| s.reconciled_at.clone())
        .unwrap_or_default()
}

/// Ask for a refresh and wait until the controller has reconciled since: a positive sign it looked.
async fn refreshed(apps: &Api<Application>, name: &str) -> Application {
    let before = reconciled_at(&apps.get(name).await.expect("application"));
    let patch = json!({"metadata": {"annotations": {REFRESH_ANNOTATION: "normal"}}});
    apps.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("refresh");
    wait_for(apps, name, "a reconcile after the refresh", |a| {
        let at = reconciled_at(a);
        !at.is_empty()
            && at != before
            && !a
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|m| m.contains_key(REFRESH_ANNOTATION))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_revision_degraded_too_long_is_reverted_once_in_git() -> anyhow::Result<()> {
    let (cluster, git) = tokio::try_join!(TestCluster::shared(), GitServer::start())?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let client = cluster.client().await?;
    let ns = unique_namespace();
    let dest = format!("{ns}-web");
    let out = capstan(&kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "capstan install: {}", text(&out));

    let bare = git.create_repo("app")?;
    let v1 = git.commit(
        "app",
        "main",
        &[("web/all.yaml", Some(&manifests("blue", "")))],
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
        &application(&ns, "web", &repo, "default", "3s"),
    );
    let cache = work.path().join("cache");
    let (controller, _, _) = common::controller_with_server(&kc, &cache, &["-n", &ns, "--poll-interval", "3"])?;
    let apps: Api<Application> = Api::namespaced(client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &dest);
    let app = wait_for(&apps, "web", "v1 Synced and Healthy", |a| {
        sync_of(a) == "Synced" && health_of(a) == "Healthy" && revision_of(a) == v1
    })
    .await;
    assert_eq!(condition(&app, "AutoRevertError"), None, "it can act");
    let v1_id = app
        .status
        .as_ref()
        .and_then(|s| s.history.iter().find(|h| h.revision == v1))
        .map(|h| h.id)
        .expect("v1's history entry");

    // v2 never becomes ready: Degraded, then reverted.
    let v2 = git.commit(
        "app",
        "main",
        &[("web/all.yaml", Some(&manifests("red", "fail")))],
        "web: red",
    )?;
    wait_for(&apps, "web", "v2 deployed and Degraded", |a| {
        revision_of(a) == v2 && health_of(a) == "Degraded"
    })
    .await;
    let deadline = Instant::now() + WAIT;
    while head(&bare) == v2 {
        assert!(Instant::now() < deadline, "no revert commit was pushed");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let revert = head(&bare);
    let after = run_git(&bare, &["rev-list", &format!("{v2}..main")])?;
    assert_eq!(after, revert, "exactly one commit after v2");
    let log = run_git(&bare, &["log", "-1", "--format=%an <%ae>|%P%n%B", "main"])?;
    let (who, body) = log.split_once('\n').unwrap_or((&log, ""));
    assert_eq!(who, format!("Capstan <capstan@localhost>|{v2}"), "{log}");
    assert!(
        body.starts_with(&format!("Revert web to {} (history {v1_id})\n", &v1[..12])),
        "{body}"
    );
    assert!(
        body.contains("Automatic revert (spec.syncPolicy.autoRevert): Degraded for")
            && body.contains(&format!("after syncing {}", &v2[..12]))
            && body.contains(&format!("- {} web: red", &v2[..12])),
        "{body}"
    );
    assert_eq!(
        run_git(&bare, &["show", "main:web/all.yaml"])?,
        manifests("blue", "").trim_end()
    );

    // The revert is deployed: the live objects are v1's again.
    wait_for(&apps, "web", "the revert commit Synced and Healthy", |a| {
        sync_of(a) == "Synced" && health_of(a) == "Healthy" && revision_of(a) == revert
    })
    .await;
    let live = cms
        .get("web")
        .await?
        .data
        .and_then(|d| d.get("color").cloned())
        .unwrap_or_default();
    assert_eq!(live, "blue");
    let app = apps.get("web").await?;
    let record: serde_json::Value = serde_json::from_str(
        app.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(AUTO_REVERTED_ANNOTATION))
            .map(String::as_str)
            .unwrap_or("null"),
    )?;
    assert_eq!(record["revision"], json!(v2), "{record}");
    assert_eq!(record["commit"], json!(revert), "{record}");
    assert_eq!(record["historyId"], json!(v1_id), "{record}");

    // An Event on the Application names the revert commit.
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let list = events
            .list(&ListParams::default().fields("involvedObject.kind=Application,involvedObject.name=web"))
            .await?;
        let found = list.items.iter().any(|e| {
            e.reason.as_deref() == Some("AutoReverted")
                && e.message
                    .as_deref()
                    .is_some_and(|m| m.contains(&revert[..12]) && m.contains(&v2[..12]))
        });
        if found {
            break;
        }
        assert!(Instant::now() < deadline, "no AutoReverted Event");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // A restart reverts nothing again: once the restarted controller has reconciled (longer than
    // degradedFor after it started), the branch still ends with the one revert.
    drop(controller);
    let (_controller, _, _) = common::controller_with_server(&kc, &cache, &["-n", &ns, "--poll-interval", "3"])?;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let app = refreshed(&apps, "web").await;
    assert_eq!(revision_of(&app), revert);
    assert_eq!(head(&bare), revert, "no second revert");
    assert_eq!(run_git(&bare, &["rev-list", "--count", &format!("{v2}..main")])?, "1");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refusals_are_conditions_and_push_nothing() -> anyhow::Result<()> {
    let (cluster, git) = tokio::try_join!(TestCluster::shared(), GitServer::start())?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let client = cluster.client().await?;
    let ns = unique_namespace();
    let out = capstan(&kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "capstan install: {}", text(&out));

    let bare = git.create_repo("app")?;
    git.commit(
        "app",
        "main",
        &[("web/all.yaml", Some(&manifests("blue", "")))],
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
    // The project lets Capstan write only under other/: a revert of web/ is not permitted.
    apply(
        &kc,
        work.path(),
        "project.yaml",
        &format!(
            "apiVersion: capstan.dev/v1alpha1\nkind: AppProject\nmetadata: {{name: narrow, namespace: {ns}}}\nspec:\n  sourceRepos: ['*']\n  destinations: [{{server: '*', namespace: '*'}}]\n  clusterResourceWhitelist: [{{group: '', kind: Namespace}}]\n  sourceRepoPaths: [{{repo: '*', paths: ['other/**'], branches: [main]}}]\n"
        ),
    );
    apply(
        &kc,
        work.path(),
        "apps.yaml",
        &[
            application(&ns, "web", &repo, "narrow", "2s"),
            application(&ns, "soon", &repo, "default", "soon"),
            application(&ns, "zero", &repo, "default", "0s"),
        ]
        .join("---\n"),
    );
    let cache = work.path().join("cache");
    let (_controller, _, _) = common::controller_with_server(&kc, &cache, &["-n", &ns, "--poll-interval", "3"])?;
    let apps: Api<Application> = Api::namespaced(client.clone(), &ns);

    for (name, value) in [("soon", "\"soon\" is not a duration"), ("zero", "\"0s\" is zero")] {
        let app = wait_for(&apps, name, "InvalidSpecError", |a| {
            condition(a, "InvalidSpecError").is_some()
        })
        .await;
        let message = condition(&app, "InvalidSpecError").unwrap_or_default();
        assert!(
            message.contains("spec.syncPolicy.autoRevert.degradedFor") && message.contains(value),
            "{name}: {message}"
        );
    }

    let app = wait_for(&apps, "web", "the AutoRevertError condition", |a| {
        sync_of(a) == "Synced" && health_of(a) == "Healthy" && condition(a, "AutoRevertError").is_some()
    })
    .await;
    let message = condition(&app, "AutoRevertError").unwrap_or_default();
    assert!(
        message.contains("spec.syncPolicy.autoRevert is refused")
            && message.contains("web")
            && message.contains("sourceRepoPaths"),
        "{message}"
    );

    // Degraded well past degradedFor: still refused, nothing pushed.
    let v2 = git.commit(
        "app",
        "main",
        &[("web/all.yaml", Some(&manifests("red", "fail")))],
        "web: red",
    )?;
    wait_for(&apps, "web", "v2 deployed and Degraded", |a| {
        revision_of(a) == v2 && health_of(a) == "Degraded"
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let app = refreshed(&apps, "web").await;
    assert_eq!(health_of(&app), "Degraded");
    assert!(condition(&app, "AutoRevertError").is_some());
    assert_eq!(head(&bare), v2, "nothing pushed");
    assert!(
        !app.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(AUTO_REVERTED_ANNOTATION)),
        "nothing recorded"
    );
    Ok(())
}

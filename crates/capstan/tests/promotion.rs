//! Seed 004's flow end to end: a new image in a real registry is written to the staging file of a
//! services-root repository on a real git server (the image update controller, one commit), the
//! `services` ApplicationSet's staging Application deploys it, and a promotion copies it to
//! production. The services-root repository holds one file per service per environment, the
//! `services` ApplicationSet turns each file into an Application, the real controller runs with its
//! HTTP server, and `POST
//! /api/promotions` / `capstan promote` copying a proven staging tag to production as one commit —
//! or refusing, with the reason: no `promote` role, a missing key, a source not Synced and Healthy,
//! `force` without a reason. Before the promotion, its preview (`POST /api/promotions/preview`: the
//! planned change and the file's diff, nothing committed); after it, the promotion in both
//! Applications' histories (`GET /api/applications/{name}/promotions`, `capstan app history`).
//! The services-root files, the `services` ApplicationSet and the pipelines are set up with
//! `common::services` (shared with the browser test ui_promotion_e2e.rs).

mod common;

use std::time::{Duration, Instant};

use capstan_api::Application;
use capstan_testkit::capstan::{health_of, sync_of, synced_healthy, unique_namespace};
use capstan_testkit::registry::{Registry, RegistryOptions, push_image};
use capstan_testkit::{GitServer, TestCluster, run_git};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use serde_json::json;

use common::http::Http;
use common::services::{SERVICES_PATH, apply, apply_services_appset, chart_files, pipeline, repository_secret};
use common::{capstan, capstan_in, text};

const STAGING: &str = "services-root/services/payments/staging.yaml";
const PRODUCTION: &str = "services-root/services/payments/production.yaml";

/// A Deployment that never becomes ready: its Application syncs but is never Healthy.
const NEVER_READY: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}, annotations: {capstan.dev/simulate: never-ready}}\n    spec: {containers: [{name: web, image: nginx}]}\n";

fn lab_app(ns: &str, name: &str, repo: &str) -> String {
    format!(
        "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  source: {{repoURL: '{repo}', targetRevision: main, path: lab-app}}\n  destination: {{server: 'https://kubernetes.default.svc', namespace: {name}}}\n  syncPolicy: {{automated: {{}}, syncOptions: [CreateNamespace=true]}}\n"
    )
}

async fn wait_for(apps: &Api<Application>, what: &str, check: impl Fn(&Application) -> bool, names: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(150);
    loop {
        let mut all = true;
        let mut states = Vec::new();
        for name in names {
            match apps.get_opt(name).await {
                Ok(Some(app)) => {
                    states.push(format!("{name}: {}/{}", sync_of(&app), health_of(&app)));
                    all &= check(&app);
                }
                _ => {
                    states.push(format!("{name}: missing"));
                    all = false;
                }
            }
        }
        if all {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}: {states:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn head(repo: &std::path::Path) -> String {
    run_git(repo, &["rev-parse", "refs/heads/main"])
        .expect("rev-parse")
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_image_reaches_staging_by_a_commit_and_is_promoted_to_production() -> anyhow::Result<()> {
    // The run's shared plane, Capstan in a namespace of this test's own; the services' namespaces
    // (`payments`, `lab-staging`, `lab-production`) are this test's alone there.
    let (cluster, git) = tokio::try_join!(TestCluster::shared(), GitServer::start())?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let client = cluster.client().await?;
    let ns = unique_namespace();
    let out = capstan(&kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "capstan install: {}", text(&out));
    let password = common::admin_password(&out);

    // The services-root layout of seed 004 and the shared chart; a `lab` service whose staging
    // Application never becomes Healthy.
    let mut files = chart_files()?;
    files.push((
        STAGING.into(),
        "# Staging follows CI.\ncluster: in-cluster\nservice: payments\nimageTag: \"1.4.2\"\ntargetRevision: main\nowner: team-a\n".into(),
    ));
    files.push((
        PRODUCTION.into(),
        "# Production is promoted on purpose.\ncluster: in-cluster\nservice: payments\n# The last promoted tag.\nimageTag: \"1.4.2\" # promoted from staging\ntargetRevision: main # the chart's revision\n".into(),
    ));
    files.push((
        "lab/lab/staging.yaml".into(),
        "imageTag: \"2.0.0\"\ntargetRevision: main\n".into(),
    ));
    files.push((
        "lab/lab/production.yaml".into(),
        "imageTag: \"1.0.0\"\ntargetRevision: main\n".into(),
    ));
    files.push(("lab-app/all.yaml".into(), NEVER_READY.into()));
    // `moved` has staging's file only.
    files.push(("moved/lab/staging.yaml".into(), "imageTag: \"3.0.0\"\n".into()));
    let bare = git.create_repo("examples")?;
    let commit: Vec<(&str, Option<&str>)> = files.iter().map(|(p, t)| (p.as_str(), Some(t.as_str()))).collect();
    git.commit("examples", "main", &commit, "services-root")?;
    // Over http with basic auth: the image updater pushes to it.
    let repo = git.http_url("examples");

    let work = tempfile::tempdir()?;
    // Seed 004's registry: payments 1.4.2 (what staging runs) and a newer 1.5.0.
    let registry = Registry::start(RegistryOptions::default()).await?;
    let host = registry.host();
    for tag in ["1.4.2", "1.5.0"] {
        push_image(&registry, "services/payments", tag)?;
    }
    apply(
        &kc,
        work.path(),
        "repositories.yaml",
        &format!(
            "{}---\napiVersion: v1\nkind: Secret\nmetadata: {{name: registry, namespace: {ns}, labels: {{capstan.dev/secret-type: repository}}}}\nstringData: {{url: 'oci://{host}', insecureOCIForceHttp: 'true'}}\n",
            repository_secret(&ns, "services-root", &repo)
        ),
    );
    // Staging follows the image updater.
    apply(
        &kc,
        work.path(),
        "updater.yaml",
        &format!(
            "apiVersion: capstan.dev/v1alpha1\nkind: ImageUpdater\nmetadata: {{name: payments-staging, namespace: {ns}}}\nspec:\n  image: {host}/services/payments\n  policy: {{semver: {{range: '^1'}}}}\n  intervalSeconds: 5\n  project: services\n  write: {{repoURL: '{repo}', branch: main, path: {STAGING}, key: imageTag}}\n"
        ),
    );
    apply_services_appset(&kc, &ns, work.path(), &repo)?;
    apply(
        &kc,
        work.path(),
        "lab-staging.yaml",
        &lab_app(&ns, "lab-staging", &repo),
    );
    apply(
        &kc,
        work.path(),
        "lab-production.yaml",
        &lab_app(&ns, "lab-production", &repo),
    );
    let services = SERVICES_PATH;
    apply(
        &kc,
        work.path(),
        "p1.yaml",
        &pipeline(&ns, "services", "services", &repo, services, ""),
    );
    apply(
        &kc,
        work.path(),
        "p2.yaml",
        &pipeline(
            &ns,
            "strict",
            "services",
            &repo,
            services,
            "  fields: [imageTag, owner]\n",
        ),
    );
    apply(
        &kc,
        work.path(),
        "p3.yaml",
        &pipeline(&ns, "lab", "default", &repo, "lab/{service}/{env}.yaml", ""),
    );
    apply(
        &kc,
        work.path(),
        "p4.yaml",
        &pipeline(
            &ns,
            "moved",
            "default",
            &repo,
            "moved/{service}/{env}.yaml",
            "  fields: [imageTag]\n",
        ),
    );

    let cache = work.path().join("cache");
    let (_controller, base, _) = common::controller_with_server(&kc, &cache, &["-n", &ns, "--poll-interval", "3"])?;
    let apps: Api<Application> = Api::namespaced(client.clone(), &ns);
    wait_for(
        &apps,
        "payments to be deployed",
        synced_healthy,
        &["payments-staging", "payments-production"],
    )
    .await;
    // The image updater moved staging to the newest image by a commit, and staging runs it.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let file = run_git(&bare, &["show", &format!("main:{STAGING}")]).unwrap_or_default();
        let deployed = Api::<Deployment>::namespaced(client.clone(), "payments")
            .get_opt("payments-staging")
            .await?
            .and_then(|d| d.spec.template.spec)
            .and_then(|s| s.containers.first().and_then(|c| c.image.clone()))
            .unwrap_or_default();
        let staging = apps.get("payments-staging").await?;
        if file.contains("imageTag: \"1.5.0\"") && deployed.ends_with(":1.5.0") && synced_healthy(&staging) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "staging did not follow the image updater: {file}, {deployed}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let log = run_git(&bare, &["log", "-1", "--format=%an%n%s", "main"])?;
    assert!(
        log.contains(&format!("Update image {host}/services/payments: 1.4.2 → 1.5.0")),
        "{log}"
    );
    wait_for(
        &apps,
        "lab-staging to sync",
        |a| sync_of(a) == "Synced",
        &["lab-staging", "lab-production"],
    )
    .await;

    let mut admin = Http::new(&base);
    assert_eq!(admin.login("admin", &password).status, 200);
    // Accounts: `dev` may sync but not promote, `ops` may promote.
    for (user, pw) in [("dev", "dev-password-1"), ("ops", "ops-password-1")] {
        let out = capstan_in(&kc, &ns, &["account", "set-password", user, "--password", pw]);
        assert!(out.status.success(), "{}", text(&out));
    }
    common::create_policy(
        &kc,
        &ns,
        "default: none\ngrants:\n  - {role: sync, projects: ['*'], users: [dev]}\n  - {role: promote, projects: ['*'], users: [ops]}\n",
    );
    let mut dev = Http::new(&base);
    assert_eq!(dev.login("dev", "dev-password-1").status, 200);
    let mut ops = Http::new(&base);
    assert_eq!(ops.login("ops", "ops-password-1").status, 200);
    let promote = json!({"pipeline": "services", "service": "payments", "from": "staging", "to": "production"});
    let before = head(&bare);

    // No `promote` role: 403.
    let deadline = Instant::now() + Duration::from_secs(15);
    let refused = loop {
        let answer = dev.post("/api/promotions", promote.clone());
        if answer.status != 404 || Instant::now() > deadline {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(refused.status, 403, "{}", refused.body);

    // A field missing from the target's file: refused naming the file and key, nothing committed.
    let missing = admin.post(
        "/api/promotions",
        json!({"pipeline": "strict", "service": "payments", "from": "staging", "to": "production"}),
    );
    assert_eq!(missing.status, 422, "{}", missing.body);
    assert!(
        missing.body.contains(&format!("{PRODUCTION}: key owner not found")),
        "{}",
        missing.body
    );
    // A missing target file: refused naming the file, nothing committed.
    let gone = admin.post(
        "/api/promotions",
        json!({"pipeline": "moved", "service": "lab", "from": "staging", "to": "production", "force": true, "reason": "r"}),
    );
    assert_eq!(gone.status, 422, "{}", gone.body);
    assert!(
        gone.body.contains("moved/lab/production.yaml: no such file"),
        "{}",
        gone.body
    );
    // Backwards needs force.
    let mut backwards = promote.clone();
    backwards["from"] = json!("production");
    backwards["to"] = json!("staging");
    let refused = ops.post("/api/promotions", backwards);
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert!(
        refused.body.contains("production comes after staging"),
        "{}",
        refused.body
    );
    assert_eq!(head(&bare), before, "nothing committed");

    // The preview: the planned change and the diff of production's file, nothing committed; the
    // same `promote` role needed.
    let refused = dev.post("/api/promotions/preview", promote.clone());
    assert_eq!(refused.status, 403, "{}", refused.body);
    let preview = ops.post("/api/promotions/preview", promote.clone());
    assert_eq!(preview.status, 200, "{}", preview.body);
    let plan = preview.json();
    let staging_revision = apps
        .get("payments-staging")
        .await?
        .status
        .and_then(|s| s.sync)
        .map(|s| s.revision)
        .unwrap_or_default();
    assert_eq!(
        (
            plan["changes"].clone(),
            plan["path"].clone(),
            plan["checksPassed"].clone(),
            plan["sourceRevision"].clone(),
            plan["targetRevision"].clone(),
            plan["targetApplication"].clone(),
        ),
        (
            json!([{"field": "imageTag", "old": "1.4.2", "new": "1.5.0"}]),
            json!(PRODUCTION),
            json!(true),
            json!(staging_revision),
            json!(before),
            json!("payments-production"),
        ),
        "{plan}"
    );
    let diff = plan["diff"].as_str().unwrap_or_default();
    assert!(
        diff.contains(&format!("--- a/{PRODUCTION}\n+++ b/{PRODUCTION}\n"))
            && diff.contains(
                "\n-imageTag: \"1.4.2\" # promoted from staging\n+imageTag: \"1.5.0\" # promoted from staging\n"
            ),
        "{diff}"
    );
    assert_eq!(head(&bare), before, "a preview commits nothing");
    // Where staging may be promoted to: for ops, production; for dev (no `promote` role), nowhere.
    let targets = ops.get("/api/applications/payments-staging/promotions").json()["promoteTargets"].clone();
    assert!(
        targets.as_array().is_some_and(|t| t.contains(&json!({"pipeline": "services", "service": "payments", "from": "staging", "to": "production", "application": "payments-production"}))),
        "{targets}"
    );
    let for_dev = dev.get("/api/applications/payments-staging/promotions");
    assert_eq!(for_dev.status, 200, "{}", for_dev.body);
    assert_eq!(for_dev.json()["promoteTargets"], json!([]), "{}", for_dev.body);

    // Confirming a preview whose source revision is no longer staging's: 409, nothing committed.
    let mut stale = promote.clone();
    stale["expectedSourceRevision"] = json!("0000000000000000000000000000000000000000");
    let moved = ops.post("/api/promotions", stale);
    assert_eq!(moved.status, 409, "{}", moved.body);
    assert!(moved.body.contains("preview the promotion again"), "{}", moved.body);
    assert_eq!(head(&bare), before, "a stale confirmation commits nothing");

    // The promotion (confirming the preview above): one commit changing production's imageTag
    // only, comments kept.
    let mut confirmed = promote.clone();
    confirmed["expectedSourceRevision"] = plan["sourceRevision"].clone();
    let done = ops.post("/api/promotions", confirmed);
    assert_eq!(done.status, 200, "{}", done.body);
    let answer = done.json();
    assert_eq!(answer["result"], "promoted");
    assert_eq!(
        answer["promotion"]["changes"],
        json!([{"field": "imageTag", "old": "1.4.2", "new": "1.5.0"}])
    );
    let promoted = head(&bare);
    assert_eq!(answer["promotion"]["commit"], promoted);
    assert_eq!(
        run_git(&bare, &["rev-parse", &format!("{promoted}~1")])?.trim(),
        before,
        "one commit"
    );
    let changed = run_git(&bare, &["diff", "--name-only", &before, &promoted])?;
    assert_eq!(changed.trim(), PRODUCTION);
    let production = run_git(&bare, &["show", &format!("{promoted}:{PRODUCTION}")])?;
    assert_eq!(
        production.trim_end(),
        "# Production is promoted on purpose.\ncluster: in-cluster\nservice: payments\n# The last promoted tag.\nimageTag: \"1.5.0\" # promoted from staging\ntargetRevision: main # the chart's revision"
    );
    let log = run_git(&bare, &["log", "-1", "--format=%an <%ae>%n%B", &promoted])?;
    assert!(
        log.starts_with("ops <ops@capstan.invalid>\nPromote payments staging → production: imageTag 1.4.2 → 1.5.0"),
        "{log}"
    );
    // Again: nothing to change.
    let again = ops.post("/api/promotions", promote.clone());
    assert_eq!(
        (again.status, again.json()["result"].clone()),
        (200, json!("unchanged")),
        "{}",
        again.body
    );
    assert_eq!(head(&bare), promoted);
    let out = capstan_in(
        &kc,
        &ns,
        &[
            "promote",
            "payments",
            "--from",
            "staging",
            "--to",
            "production",
            "--pipeline",
            "services",
        ],
    );
    assert!(
        out.status.success() && text(&out).contains("nothing to commit"),
        "{}",
        text(&out)
    );

    // The same through the server, logged in as ops (the `promote` role): the same output.
    let config = tempfile::tempdir()?;
    let cli = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args(args)
            .env("CAPSTAN_CONFIG_DIR", config.path())
            .env_remove("KUBECONFIG")
            .output()
            .expect("run capstan")
    };
    let out = cli(&["login", &base, "--username", "ops", "--password", "ops-password-1"]);
    assert!(out.status.success(), "{}", text(&out));
    for args in [
        &[
            "promote",
            "payments",
            "--from",
            "staging",
            "--to",
            "production",
            "--pipeline",
            "services",
        ][..],
        &[
            "promote",
            "payments",
            "--from",
            "staging",
            "--to",
            "production",
            "--pipeline",
            "services",
            "--dry-run",
        ],
        &["promote", "history", "payments", "--pipeline", "services"],
    ] {
        let by_kube = capstan_in(&kc, &ns, args);
        let by_server = cli(args);
        assert_eq!(
            (by_server.status.code(), String::from_utf8_lossy(&by_server.stdout)),
            (by_kube.status.code(), String::from_utf8_lossy(&by_kube.stdout)),
            "capstan {}: {}",
            args.join(" "),
            text(&by_server)
        );
    }

    // Production follows: Synced at the promotion's commit, running the promoted tag.
    wait_for(
        &apps,
        "production at the promoted commit",
        |a| {
            let tag =
                serde_json::to_value(&a.spec).is_ok_and(|s| s["source"]["helm"]["parameters"][0]["value"] == "1.5.0");
            let revision = a
                .status
                .as_ref()
                .and_then(|s| s.sync.as_ref())
                .is_some_and(|s| s.revision == promoted);
            tag && revision && synced_healthy(a)
        },
        &["payments-production"],
    )
    .await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "payments");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let image = deployments
            .get("payments-production")
            .await?
            .spec
            .template
            .spec
            .and_then(|p| p.containers.first().and_then(|c| c.image.clone()))
            .unwrap_or_default();
        if image.ends_with(":1.5.0") {
            break;
        }
        assert!(Instant::now() < deadline, "production runs {image}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // History: who and what.
    let history = ops.get("/api/promotions/services/history?service=payments");
    assert_eq!(history.status, 200, "{}", history.body);
    let items = history.json()["items"].clone();
    assert_eq!(items[0]["user"], "ops", "{items}");
    assert_eq!(items[0]["commit"], promoted);
    assert_eq!(items[0]["forced"], false);
    let table = text(&capstan_in(
        &kc,
        &ns,
        &["promote", "history", "payments", "--pipeline", "services"],
    ));
    assert!(
        table.contains("imageTag 1.4.2 → 1.5.0") && table.contains("ops"),
        "{table}"
    );
    // In the Applications' history: production's promotions (and staging's, the source), over HTTP
    // and in `capstan app history`.
    for app in ["payments-production", "payments-staging"] {
        let answer = dev.get(&format!("/api/applications/{app}/promotions"));
        assert_eq!(answer.status, 200, "{}", answer.body);
        let items = answer.json()["items"].clone();
        assert_eq!(
            (
                items[0]["commit"].clone(),
                items[0]["from"].clone(),
                items[0]["to"].clone(),
                items[0]["user"].clone()
            ),
            (json!(promoted), json!("staging"), json!("production"), json!("ops")),
            "{app}: {items}"
        );
    }
    let table = text(&capstan_in(&kc, &ns, &["app", "history", "payments-production"]));
    let promotions = table.split_once("PROMOTIONS").map(|(_, p)| p).unwrap_or_default();
    assert!(
        promotions.contains("staging")
            && promotions.contains("imageTag 1.4.2 → 1.5.0")
            && promotions.contains(&promoted[..12]),
        "{table}"
    );
    let lab_history = capstan_in(&kc, &ns, &["app", "history", "lab-staging"]);
    assert!(lab_history.status.success(), "{}", text(&lab_history));
    assert!(
        !text(&lab_history).contains("PROMOTIONS"),
        "no promotions of lab yet: {}",
        text(&lab_history)
    );

    // A source that is not Synced and Healthy: 409 naming its state; --force needs a reason.
    let lab = json!({"pipeline": "lab", "service": "lab", "from": "staging", "to": "production"});
    let conflict = admin.post("/api/promotions", lab.clone());
    assert_eq!(conflict.status, 409, "{}", conflict.body);
    assert!(conflict.body.contains("lab-staging is Synced/"), "{}", conflict.body);
    // Its preview says so (what the UI offers force and a reason for), and lists the change.
    let preview = admin.post("/api/promotions/preview", lab.clone());
    assert_eq!(preview.status, 200, "{}", preview.body);
    let plan = preview.json();
    assert_eq!(plan["checksPassed"], json!(false), "{plan}");
    assert!(
        plan["checkFailure"]
            .as_str()
            .is_some_and(|f| f.contains("lab-staging is Synced/")),
        "{plan}"
    );
    assert_eq!(
        plan["changes"],
        json!([{"field": "imageTag", "old": "1.0.0", "new": "2.0.0"}])
    );
    let mut forced = lab.clone();
    forced["force"] = json!(true);
    let no_reason = admin.post("/api/promotions", forced.clone());
    assert_eq!(no_reason.status, 400, "{}", no_reason.body);
    let out = capstan_in(
        &kc,
        &ns,
        &[
            "promote",
            "lab",
            "--pipeline",
            "lab",
            "--from",
            "staging",
            "--to",
            "production",
            "--force",
        ],
    );
    assert!(!out.status.success(), "the CLI refuses --force without --reason too");
    forced["reason"] = json!("hotfix for incident 42");
    let done = admin.post("/api/promotions", forced);
    assert_eq!(done.status, 200, "{}", done.body);
    let message = run_git(&bare, &["log", "-1", "--format=%B", "refs/heads/main"])?;
    assert!(
        message.starts_with("Promote lab staging → production: imageTag 1.0.0 → 2.0.0")
            && message.contains("\n\nForced by admin: hotfix for incident 42"),
        "{message}"
    );
    let items = admin.get("/api/promotions/lab/history").json()["items"].clone();
    assert_eq!(
        (items[0]["forced"].clone(), items[0]["reason"].clone()),
        (json!(true), json!("hotfix for incident 42"))
    );
    Ok(())
}

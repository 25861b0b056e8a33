//! `PromotionMade` end to end: a PromotionPipeline over two Applications synced from the test's git
//! server, the real controller with its HTTP server, and a NotificationChannel whose Secret points
//! at a webhook receiver in the test. A promotion through `POST /api/promotions` reaches the
//! webhook exactly once, with the pipeline, the stages, both Applications, what was promoted, the
//! commit and who; a channel of another project is not told (it is not even recorded on the
//! Application); after a controller restart the first promotion is not sent again, and a second
//! one is sent once.

mod common;

use std::time::Duration;

use capstan_testkit::capstan::unique_namespace;
use capstan_testkit::receiver::{Answer, Receiver};
use capstan_testkit::{GitServer, TestCluster};
use serde_json::{Value, json};

use common::http::Http;
use common::services::{apply, pipeline, repository_secret};
use common::{capstan, kubectl, text, until};

const WAIT: Duration = Duration::from_secs(150);

/// What both stages deploy: a ConfigMap, Healthy as soon as it exists.
const SETTINGS: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: blue}\n";

fn app(ns: &str, name: &str, repo: &str) -> String {
    format!(
        "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  source: {{repoURL: '{repo}', targetRevision: main, path: lab-app}}\n  destination: {{server: 'https://kubernetes.default.svc', namespace: {name}-{ns}}}\n  syncPolicy: {{automated: {{}}, syncOptions: [CreateNamespace=true]}}\n"
    )
}

fn channel(ns: &str, name: &str, projects: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}-secret, namespace: {ns}}}\nstringData: {{url: 'URL-{name}'}}\n---\napiVersion: capstan.dev/v1alpha1\nkind: NotificationChannel\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  type: webhook\n  secretRef: {{name: {name}-secret}}\n  triggers: [PromotionMade]\n  projects: {projects}\n"
    )
}

/// The `PromotionMade` events the receiver got, in order.
fn promotions(hook: &Receiver) -> Vec<Value> {
    hook.received()
        .iter()
        .flat_map(|r| r.json()["events"].as_array().cloned().unwrap_or_default())
        .filter(|e| e["trigger"] == "PromotionMade")
        .collect()
}

/// The notification record on Application `name`.
fn record(kc: &str, ns: &str, name: &str) -> Value {
    let out = kubectl(
        kc,
        &[
            "get",
            "application",
            name,
            "-n",
            ns,
            "-o",
            "jsonpath={.metadata.annotations.capstan\\.dev/notified}",
        ],
    );
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

fn synced_healthy(http: &mut Http, name: &str) -> bool {
    let app = http.get(&format!("/api/applications/{name}")).json();
    app["status"]["sync"]["status"] == "Synced" && app["status"]["health"]["status"] == "Healthy"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_promotion_is_notified_once_across_a_restart() -> anyhow::Result<()> {
    let (cluster, git) = tokio::try_join!(TestCluster::shared(), GitServer::start())?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let ns = unique_namespace();
    let out = capstan(&kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out));
    let password = common::admin_password(&out);
    let work = tempfile::tempdir()?;

    git.create_repo("lab")?;
    git.commit(
        "lab",
        "main",
        &[
            (
                "lab/web/staging.yaml",
                Some("imageTag: \"2.0.0\"\ntargetRevision: main\n"),
            ),
            (
                "lab/web/production.yaml",
                Some("imageTag: \"1.0.0\"\ntargetRevision: main\n"),
            ),
            ("lab-app/all.yaml", Some(SETTINGS)),
        ],
        "lab",
    )?;
    // Over http with basic auth: promotions push to it.
    let repo = git.http_url("lab");
    let hook = Receiver::start(Answer::Ok).await?;
    let other = Receiver::start(Answer::Ok).await?;
    let objects = [
        repository_secret(&ns, "lab-repo", &repo),
        app(&ns, "web-staging", &repo),
        app(&ns, "web-production", &repo),
        pipeline(&ns, "lab", "default", &repo, "lab/{service}/{env}.yaml", ""),
        channel(&ns, "hook", "[default]").replace("URL-hook", &format!("{}/hook", hook.url)),
        channel(&ns, "other", "[team-b]").replace("URL-other", &format!("{}/other", other.url)),
    ];
    apply(&kc, work.path(), "objects.yaml", &objects.join("---\n"));

    let cache = work.path().join("cache");
    let (controller, base, _) = common::controller_with_server(&kc, &cache, &["-n", &ns, "--poll-interval", "3"])?;
    let mut admin = Http::new(&base);
    until("the server to be ready", Duration::from_secs(30), || {
        admin.get("/readyz").status == 200
    });
    assert_eq!(admin.login("admin", &password).status, 200);
    until("both stages Synced and Healthy", WAIT, || {
        synced_healthy(&mut admin, "web-staging") && synced_healthy(&mut admin, "web-production")
    });
    // The notifier has looked at the target: its channel is recorded (the other project's is not).
    until("the target's notification record", WAIT, || {
        record(&kc, &ns, "web-production").get("hook").is_some()
    });
    assert!(record(&kc, &ns, "web-production").get("other").is_none());
    assert!(hook.received().is_empty(), "subscribing replays nothing");

    let promote = json!({"pipeline": "lab", "service": "web", "from": "staging", "to": "production"});
    let done = admin.post("/api/promotions", promote.clone());
    assert_eq!(done.status, 200, "{}", done.body);
    let first = done.json()["promotion"]["commit"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(first.len(), 40, "{}", done.body);
    until("PromotionMade at the webhook", WAIT, || !promotions(&hook).is_empty());
    let sent = promotions(&hook);
    assert_eq!(sent.len(), 1, "{sent:#?}");
    let event = &sent[0];
    assert_eq!(event["application"], "web-production");
    assert_eq!(event["namespace"], ns.as_str());
    assert_eq!(event["project"], "default");
    assert_eq!(event["revision"], first.as_str());
    assert_eq!(event["repoURL"], repo.as_str());
    let promotion = &event["promotion"];
    assert_eq!(promotion["pipeline"], "lab");
    assert_eq!(promotion["service"], "web");
    assert_eq!(
        (promotion["from"].as_str(), promotion["to"].as_str()),
        (Some("staging"), Some("production"))
    );
    assert_eq!(promotion["sourceApplication"], "web-staging");
    assert_eq!(promotion["targetApplication"], "web-production");
    assert_eq!(promotion["commit"], first.as_str());
    assert_eq!(promotion["user"], "admin");
    assert_eq!(promotion["forced"], false);
    assert_eq!(
        promotion["changes"],
        json!([{"field": "imageTag", "old": "1.0.0", "new": "2.0.0"}]),
        "{event}"
    );
    assert!(
        !promotion["sourceRevision"].as_str().unwrap_or_default().is_empty(),
        "{event}"
    );
    assert!(
        event["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("admin promoted web from staging to production: imageTag 1.0.0 → 2.0.0")),
        "{event}"
    );
    // Recorded on the target before it was sent; the other project's channel was not concerned.
    assert_eq!(
        record(&kc, &ns, "web-production")["hook"]["f"]["PromotionMade"],
        first.as_str()
    );
    assert!(record(&kc, &ns, "web-production").get("other").is_none());

    // A restart sends nothing again; the next promotion is sent once.
    drop(controller);
    let (_controller, base, _) = common::controller_with_server(&kc, &cache, &["-n", &ns, "--poll-interval", "3"])?;
    let mut admin = Http::new(&base);
    until("the restarted server to be ready", Duration::from_secs(30), || {
        admin.get("/readyz").status == 200
    });
    assert_eq!(admin.login("admin", &password).status, 200);
    git.commit(
        "lab",
        "main",
        &[(
            "lab/web/staging.yaml",
            Some("imageTag: \"2.1.0\"\ntargetRevision: main\n"),
        )],
        "staging moves on",
    )?;
    let mut second = String::new();
    until("a second promotion to be made", WAIT, || {
        // Refused (409) until staging has synced the new commit and is Healthy again.
        let answer = admin.post("/api/promotions", promote.clone());
        if answer.status == 200 && answer.json()["result"] == "promoted" {
            second = answer.json()["promotion"]["commit"]
                .as_str()
                .unwrap_or_default()
                .to_string();
        }
        !second.is_empty()
    });
    until("the second PromotionMade at the webhook", WAIT, || {
        promotions(&hook).iter().any(|e| e["revision"] == second.as_str())
    });
    let sent = promotions(&hook);
    let revisions: Vec<&str> = sent.iter().filter_map(|e| e["revision"].as_str()).collect();
    assert_eq!(
        revisions,
        [first.as_str(), second.as_str()],
        "each once, in order: {sent:#?}"
    );
    assert_eq!(
        sent[1]["promotion"]["changes"],
        json!([{"field": "imageTag", "old": "2.0.0", "new": "2.1.0"}])
    );
    assert!(other.received().is_empty(), "the other project's channel is never told");
    Ok(())
}

//! Notifications end to end: the controller on the shared plane, an Application synced from the
//! test's git server, and NotificationChannels whose Secrets point at receivers in the test — a
//! signed JSON webhook, Slack and Teams messages, and destinations that hang, answer 500 forever or
//! redirect elsewhere. Each state change reaches the webhook once (also across a controller
//! restart), the hanging channel does not hold the syncs back, the broken ones show their failures
//! on their status after bounded retries, the redirect is not followed, and no URL token appears in
//! a status, an Event or the controller's log.

mod common;

use std::time::{Duration, Instant};

use capstan_testkit::capstan::unique_namespace;
use capstan_testkit::receiver::{Answer, Receiver};
use capstan_testkit::{GitServer, TestCluster};
use serde_json::Value;

use common::{capstan_in, kubectl, text, until};

const WAIT: Duration = Duration::from_secs(120);
const SIGNING_KEY: &str = "sign-me-please";

fn manifests(color: &str, simulate: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings}}\ndata: {{color: {color}}}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\nspec:\n  replicas: 1\n  progressDeadlineSeconds: 10\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}, annotations: {{capstan.dev/simulate: '{simulate}', color: {color}}}}}\n    spec: {{containers: [{{name: web, image: nginx}}]}}\n"
    )
}

fn secret(ns: &str, name: &str, data: &[(&str, &str)]) -> String {
    let fields: Vec<String> = data.iter().map(|(k, v)| format!("{k}: '{v}'")).collect();
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {ns}}}\nstringData: {{{}}}\n",
        fields.join(", ")
    )
}

fn channel(ns: &str, name: &str, kind: &str, triggers: &[&str]) -> String {
    format!(
        "apiVersion: capstan.dev/v1alpha1\nkind: NotificationChannel\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  type: {kind}\n  secretRef: {{name: {name}-secret}}\n  triggers: [{}]\n",
        triggers.join(", ")
    )
}

/// Every event the webhook received, in order.
fn events(hook: &Receiver) -> Vec<Value> {
    hook.received()
        .iter()
        .flat_map(|r| r.json()["events"].as_array().cloned().unwrap_or_default())
        .collect()
}

fn has(events: &[Value], trigger: &str, revision: &str) -> bool {
    events
        .iter()
        .any(|e| e["trigger"] == trigger && e["revision"] == revision)
}

fn apply(kc: &str, dir: &std::path::Path, name: &str, yaml: &str) {
    let file = dir.join(format!("{name}.yaml"));
    std::fs::write(&file, yaml).expect("write");
    let out = kubectl(kc, &["apply", "-f", &file.to_string_lossy()]);
    assert!(out.status.success(), "{}", text(&out));
}

fn status_of(kc: &str, ns: &str, name: &str) -> Value {
    let out = kubectl(kc, &["get", "notificationchannel", name, "-n", ns, "-o", "json"]);
    serde_json::from_slice::<Value>(&out.stdout).unwrap_or(Value::Null)["status"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_change_is_notified_once_and_broken_channels_hold_nothing_back() -> anyhow::Result<()> {
    let cluster = TestCluster::shared().await?;
    let git = GitServer::start().await?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let ns = unique_namespace();
    let out = common::capstan(&kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out));
    let dir = tempfile::tempdir()?;

    let hook = Receiver::start(Answer::Ok).await?;
    let slack = Receiver::start(Answer::Ok).await?;
    let teams = Receiver::start(Answer::Ok).await?;
    let stuck = Receiver::start(Answer::Hang).await?;
    let broken = Receiver::start(Answer::Status(500)).await?;
    let elsewhere = Receiver::start(Answer::Ok).await?;
    let redirect = Receiver::start(Answer::Redirect(format!("{}/stolen", elsewhere.url))).await?;
    let hook_url = format!("{}/hook/tok-HOOK-SECRET", hook.url);
    let objects = [
        secret(&ns, "hook-secret", &[("url", &hook_url), ("signingKey", SIGNING_KEY)]),
        secret(
            &ns,
            "slack-secret",
            &[("url", &format!("{}/services/T0/B0/tok-SLACK", slack.url))],
        ),
        secret(
            &ns,
            "teams-secret",
            &[("url", &format!("{}/webhookb2/tok-TEAMS", teams.url))],
        ),
        secret(&ns, "stuck-secret", &[("url", &format!("{}/tok-STUCK", stuck.url))]),
        secret(&ns, "broken-secret", &[("url", &format!("{}/tok-BROKEN", broken.url))]),
        secret(
            &ns,
            "redirect-secret",
            &[("url", &format!("{}/tok-REDIRECT", redirect.url))],
        ),
        channel(
            &ns,
            "hook",
            "webhook",
            &[
                "SyncSucceeded",
                "SyncFailed",
                "HealthDegraded",
                "Deployed",
                "PolicyDenied",
            ],
        ),
        channel(&ns, "slack", "slack", &["Deployed", "HealthDegraded"]),
        channel(&ns, "teams", "teams", &["Deployed"]),
        channel(&ns, "stuck", "webhook", &["SyncSucceeded", "Deployed"]),
        channel(&ns, "broken", "webhook", &["Deployed"]),
        channel(&ns, "redirect", "webhook", &["Deployed"]),
    ];
    apply(&kc, dir.path(), "channels", &objects.join("---\n"));

    git.create_repo("shop")?;
    let v1 = git.commit("shop", "main", &[("app/all.yaml", Some(&manifests("blue", "")))], "v1")?;
    let app = format!(
        "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata: {{name: shop, namespace: {ns}}}\nspec:\n  source: {{repoURL: '{}', targetRevision: main, path: app}}\n  destination: {{server: 'https://kubernetes.default.svc', namespace: shop-{ns}}}\n  syncPolicy: {{syncOptions: [CreateNamespace=true]}}\n",
        git.git_url("shop")
    );
    apply(&kc, dir.path(), "app", &app);
    let cache = tempfile::tempdir()?;
    let (controller, _, _, log) = common::controller_with_server_log(&kc, cache.path(), &["-n", &ns])?;

    // The notifier has looked: the record of every channel is on the Application (nothing sent:
    // subscribing does not replay).
    until("the Application's notification record", WAIT, || {
        let out = kubectl(
            &kc,
            &[
                "get",
                "application",
                "shop",
                "-n",
                &ns,
                "-o",
                "jsonpath={.metadata.annotations.capstan\\.dev/notified}",
            ],
        );
        let record: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        ["hook", "slack", "teams", "stuck", "broken", "redirect"]
            .iter()
            .all(|c| record.get(c).is_some())
    });
    assert!(hook.received().is_empty(), "nothing is replayed on subscribing");

    let out = capstan_in(&kc, &ns, &["app", "sync", "shop", "--wait", "--timeout", "120"]);
    assert!(out.status.success(), "{}", text(&out));
    until("SyncSucceeded and Deployed of v1 at the webhook", WAIT, || {
        let e = events(&hook);
        has(&e, "SyncSucceeded", &v1) && has(&e, "Deployed", &v1)
    });
    // Signed: HMAC-SHA256 of the body with the Secret's key, as GitHub signs.
    let first = &hook.received()[0];
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, SIGNING_KEY.as_bytes());
    let hex: String = ring::hmac::sign(&key, &first.body)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(first.headers.get("x-capstan-signature"), Some(&format!("sha256={hex}")));
    assert!(first.headers.contains_key("x-capstan-delivery"));
    assert_eq!(first.path, "/hook/tok-HOOK-SECRET");
    let body = first.json();
    assert_eq!(body["version"], 1, "{body}");
    let event = &body["events"][0];
    assert_eq!(event["application"], "shop");
    assert_eq!(event["namespace"], ns.as_str());
    assert_eq!(event["project"], "default");
    assert_eq!(event["repoURL"], git.git_url("shop").as_str());
    until("Slack and Teams told of v1", WAIT, || {
        slack.received().iter().any(|r| {
            r.json()["text"]
                .as_str()
                .is_some_and(|t| t.contains("default/shop deployed at"))
        }) && teams
            .received()
            .iter()
            .any(|r| r.json()["attachments"][0]["content"]["type"] == "AdaptiveCard")
    });

    // A change that degrades the Application: sent once, as it happens.
    let v2 = git.commit(
        "shop",
        "main",
        &[("app/all.yaml", Some(&manifests("red", "fail")))],
        "v2 breaks",
    )?;
    let sync_started = Instant::now();
    let out = capstan_in(&kc, &ns, &["app", "sync", "shop"]);
    assert!(out.status.success(), "{}", text(&out));
    until("HealthDegraded of v2 at the webhook", WAIT, || {
        has(&events(&hook), "HealthDegraded", &v2)
    });
    until("SyncSucceeded of v2 at the webhook", WAIT, || {
        has(&events(&hook), "SyncSucceeded", &v2)
    });
    let degraded_after = sync_started.elapsed();

    // The hanging channel got its request (and never an answer), and it held nothing back: v2 was
    // synced and reported meanwhile.
    assert!(!stuck.received().is_empty(), "the hanging destination was asked");
    eprintln!(
        "v2 synced and reported Degraded {:.1} s after the sync request while a channel hung",
        degraded_after.as_secs_f64()
    );

    // A restart does not send anything twice; the next change still goes out.
    drop(controller);
    let (_controller, _, _, log2) = common::controller_with_server_log(&kc, cache.path(), &["-n", &ns])?;
    let v3 = git.commit(
        "shop",
        "main",
        &[("app/all.yaml", Some(&manifests("green", "")))],
        "v3 fixes",
    )?;
    let out = capstan_in(&kc, &ns, &["app", "sync", "shop", "--wait", "--timeout", "120"]);
    assert!(out.status.success(), "{}", text(&out));
    until("Deployed of v3 at the webhook", WAIT, || {
        has(&events(&hook), "Deployed", &v3)
    });
    let all = events(&hook);
    let mut ids: Vec<&str> = all.iter().filter_map(|e| e["id"].as_str()).collect();
    let count = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), count, "an event was sent twice: {all:#?}");
    for (trigger, revision) in [
        ("SyncSucceeded", &v1),
        ("Deployed", &v1),
        ("HealthDegraded", &v2),
        ("Deployed", &v3),
    ] {
        let n = all
            .iter()
            .filter(|e| e["trigger"] == trigger && e["revision"] == revision.as_str())
            .count();
        assert_eq!(n, 1, "{trigger} of {revision}: {all:#?}");
    }
    assert!(!has(&all, "Deployed", &v2), "v2 was never Healthy");

    // The broken channels: bounded retries, the failure on the status, the redirect not followed.
    until("the 500 channel's failure on its status", WAIT, || {
        status_of(&kc, &ns, "broken")["recentFailures"][0]["attempts"] == 4
    });
    let broken_status = status_of(&kc, &ns, "broken");
    assert!(
        broken_status["recentFailures"][0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("HTTP 500")),
        "{broken_status}"
    );
    let ready = broken_status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .cloned();
    assert_eq!(
        ready.as_ref().map(|c| c["status"].clone()),
        Some(Value::from("False")),
        "{broken_status}"
    );
    let attempts_to_broken = broken.received().len();
    assert!(attempts_to_broken >= 4, "{attempts_to_broken}");
    until("the redirect channel's failure", WAIT, || {
        status_of(&kc, &ns, "redirect")["recentFailures"][0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("redirect"))
    });
    assert!(elsewhere.received().is_empty(), "a redirect was followed");
    assert_eq!(
        status_of(&kc, &ns, "hook")["lastDelivery"]["attempts"],
        1,
        "the working channel's last delivery"
    );

    // No token of any URL in statuses, Events or the controller's log.
    let statuses = kubectl(&kc, &["get", "notificationchannels", "-n", &ns, "-o", "json"]);
    let events_out = kubectl(&kc, &["get", "events", "-n", &ns, "-o", "json"]);
    let logs = format!(
        "{}{}",
        log.lock().map(|l| l.clone()).unwrap_or_default(),
        log2.lock().map(|l| l.clone()).unwrap_or_default()
    );
    for (what, text) in [
        (
            "channel statuses",
            String::from_utf8_lossy(&statuses.stdout).to_string(),
        ),
        ("events", String::from_utf8_lossy(&events_out.stdout).to_string()),
        ("controller log", logs),
    ] {
        assert!(!text.contains("tok-"), "a destination's token in the {what}");
        assert!(!text.contains(SIGNING_KEY), "the signing key in the {what}");
    }
    Ok(())
}

/// Commit statuses on a real forge (Gitea, built from the Go module proxy): the Application
/// follows a Gitea repository, and the channel posts a status on each commit it deploys — pending
/// when synced, success once Healthy, failure when Degraded — once per change, also across a
/// controller restart; a repository on another host gets none (its token is not sent there).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commit_statuses_reach_a_real_forge_once_per_change() -> anyhow::Result<()> {
    let cluster = TestCluster::shared().await?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let forge = capstan_testkit::forge::Forge::start().await?;
    let ns = unique_namespace();
    let out = common::capstan(&kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out));
    let dir = tempfile::tempdir()?;
    let repo = forge.create_repo("shop")?;
    let v1 = forge.commit("shop", "main", &[("app/all.yaml", Some(&manifests("blue", "")))], "v1")?;
    let objects = [
        secret(&ns, "forge-secret", &[("token", &forge.token)]),
        format!(
            "apiVersion: capstan.dev/v1alpha1\nkind: NotificationChannel\nmetadata: {{name: forge, namespace: {ns}}}\nspec:\n  type: gitea\n  address: '{}'\n  secretRef: {{name: forge-secret}}\n  triggers: [SyncSucceeded, HealthDegraded, Deployed]\n",
            forge.url
        ),
        format!(
            "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata: {{name: shop, namespace: {ns}}}\nspec:\n  source: {{repoURL: '{repo}', targetRevision: main, path: app}}\n  destination: {{server: 'https://kubernetes.default.svc', namespace: forge-{ns}}}\n  syncPolicy: {{syncOptions: [CreateNamespace=true]}}\n"
        ),
    ];
    apply(&kc, dir.path(), "objects", &objects.join("---\n"));
    let cache = tempfile::tempdir()?;
    let (controller, _, _) = common::controller_with_server(&kc, cache.path(), &["-n", &ns])?;
    until("the Application's notification record", WAIT, || {
        let out = kubectl(
            &kc,
            &[
                "get",
                "application",
                "shop",
                "-n",
                &ns,
                "-o",
                "jsonpath={.metadata.annotations.capstan\\.dev/notified}",
            ],
        );
        String::from_utf8_lossy(&out.stdout).contains("forge")
    });
    let out = capstan_in(&kc, &ns, &["app", "sync", "shop", "--wait", "--timeout", "120"]);
    assert!(out.status.success(), "{}", text(&out));
    let states = |sha: &str| -> Vec<String> {
        forge
            .statuses("shop", sha)
            .unwrap_or_default()
            .iter()
            .filter(|s| s["context"] == "capstan/shop")
            .filter_map(|s| s["status"].as_str().or(s["state"].as_str()).map(String::from))
            .collect()
    };
    until("the success status on v1", WAIT, || {
        states(&v1).contains(&"success".to_string())
    });

    // A restart sends nothing twice; the next commit gets its own statuses.
    drop(controller);
    let (_controller, _, _) = common::controller_with_server(&kc, cache.path(), &["-n", &ns])?;
    let v2 = forge.commit(
        "shop",
        "main",
        &[("app/all.yaml", Some(&manifests("red", "fail")))],
        "v2 breaks",
    )?;
    let out = capstan_in(&kc, &ns, &["app", "sync", "shop"]);
    assert!(out.status.success(), "{}", text(&out));
    until("the failure status on v2", WAIT, || {
        states(&v2).contains(&"failure".to_string())
    });
    let mut on_v1 = states(&v1);
    on_v1.sort();
    assert_eq!(on_v1, ["pending", "success"], "one status per change on v1");
    assert!(!states(&v2).contains(&"success".to_string()), "v2 never became Healthy");
    let status = status_of(&kc, &ns, "forge");
    assert!(status["lastDelivery"].is_object(), "{status}");
    assert!(!status.to_string().contains(&forge.token), "the token is never written");
    Ok(())
}

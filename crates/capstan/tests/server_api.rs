//! The HTTP server end to end, through the binary: `capstan install` (admin password printed once),
//! `capstan controller --listen`, then the API as a browser or a script would use it — log in, list,
//! live updates, tree, diff, manifests, live objects, sync, rollback, terminate, webhooks, metrics —
//! and the security checks: 401 without credentials, 403 without the role or the CSRF token, forged
//! webhook signatures refused, Secret values never answered, names in URLs validated.

mod common;

use std::io::Read;
use std::time::{Duration, Instant};

use capstan_testkit::capstan::unique_namespace;
use capstan_testkit::{GitServer, TestCluster};
use serde_json::{Value, json};

use common::http::Http;
use common::{capstan, capstan_in, kubectl, text, until};

const SECRET_VALUE: &str = "hunter2-do-not-leak";

/// The Application's objects; not `ready`, the Deployment never becomes ready and a later wave
/// waits for it (so the sync keeps running).
fn manifests(color: &str, ready: bool) -> String {
    let simulate = if ready {
        ""
    } else {
        ", annotations: {capstan.dev/simulate: never-ready}"
    };
    let later = if ready {
        ""
    } else {
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: later, annotations: {capstan.dev/sync-wave: '1'}}\n"
    };
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings}}\ndata: {{color: {color}}}\n---\n\
         apiVersion: v1\nkind: Secret\nmetadata: {{name: creds}}\nstringData: {{password: {SECRET_VALUE}}}\n---\n\
         apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\nspec:\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}{simulate}}}\n    spec: {{containers: [{{name: web, image: nginx}}]}}\n{later}"
    )
}

fn hmac_hex(secret: &str, body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    ring::hmac::sign(&key, body)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn app_manifest(ns: &str, name: &str, repo: &str, revision: &str) -> String {
    format!(
        "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  source: {{repoURL: '{repo}', targetRevision: {revision}, path: app}}\n  destination: {{server: 'https://kubernetes.default.svc', namespace: api-{name}}}\n  syncPolicy: {{syncOptions: [CreateNamespace=true]}}\n"
    )
}

fn summary<'a>(list: &'a Value, name: &str) -> Option<&'a Value> {
    list["items"].as_array()?.iter().find(|i| i["name"] == name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_http_server_serves_the_api_securely() -> anyhow::Result<()> {
    // The run's shared plane, Capstan in a namespace of this test's own.
    let cluster = TestCluster::shared().await?;
    let git = GitServer::start().await?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let ns = unique_namespace();
    let out = capstan(&kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out));
    let password = common::admin_password(&out);
    // A second install keeps the password (and does not print one).
    let again = text(&capstan(&kc, &["install", "-n", &ns]));
    assert!(!again.contains("shown only now") && again.contains("kept"), "{again}");

    let cache = tempfile::tempdir()?;
    let (_controller, base, metrics_url) =
        common::controller_with_server(&kc, cache.path(), &["-n", &ns, "--metrics-listen", "127.0.0.1:0"])?;
    let metrics_url = metrics_url.expect("--metrics-listen prints its address");

    let mut http = Http::new(&base);
    assert_eq!(http.get("/healthz").status, 200);
    until("the server to be ready", Duration::from_secs(30), || {
        http.get("/readyz").status == 200
    });
    let doc = http.get("/api/openapi.json");
    assert_eq!(doc.status, 200);
    assert!(doc.json()["paths"]["/api/applications/{name}/sync"]["post"].is_object());
    let index = http.get("/applications/anything");
    assert!(
        index.status == 200 && index.body.contains("<html"),
        "the UI answers client-side routes"
    );

    // Without credentials: 401 everywhere in the API.
    for path in [
        "/api/applications",
        "/api/applications/web",
        "/api/userinfo",
        "/api/clusters",
        "/api/stream/applications",
    ] {
        assert_eq!(http.get(path).status, 401, "{path}");
    }
    assert_eq!(http.post("/api/applications/web/sync", json!({})).status, 401);
    http.bearer = Some("cst_forged.token".into());
    assert_eq!(http.get("/api/applications").status, 401, "a forged token");
    http.bearer = None;
    assert_eq!(http.login("admin", "wrong-password").status, 401);
    assert_eq!(http.login("nobody", &password).status, 401);
    // Bodies the API cannot parse get a JSON error like every other failure.
    let bad = http.request(
        "POST",
        "/api/session",
        None,
        &[("Content-Type", "application/json")],
        false,
    );
    assert!((400..500).contains(&bad.status), "{}", bad.body);
    assert!(!bad.json()["error"].as_str().unwrap_or("").is_empty(), "{}", bad.body);
    let me = http.login("admin", &password);
    assert_eq!(me.status, 200, "{}", me.body);
    assert_eq!(http.get("/api/userinfo").json()["username"], "admin");

    // Two Applications of one repository: `web` follows main, `other` a branch.
    git.create_repo("site")?;
    let v1 = git.commit(
        "site",
        "main",
        &[("app/all.yaml", Some(&manifests("blue", true)))],
        "v1",
    )?;
    git.commit(
        "site",
        "other",
        &[("app/all.yaml", Some(&manifests("red", true)))],
        "other",
    )?;
    let file = cache.path().join("apps.yaml");
    std::fs::write(
        &file,
        format!(
            "{}---\n{}",
            app_manifest(&ns, "web", &git.git_url("site"), "main"),
            app_manifest(&ns, "other", &git.git_url("site"), "other")
        ),
    )?;
    let out = kubectl(&kc, &["apply", "-f", &file.to_string_lossy()]);
    assert!(out.status.success(), "{}", text(&out));
    until("both Applications compared", Duration::from_secs(60), || {
        let list = http.get("/api/applications").json();
        summary(&list, "web").is_some_and(|s| s["sync"] == "OutOfSync")
            && summary(&list, "other").is_some_and(|s| s["sync"] == "OutOfSync")
    });
    let list = http.get("/api/applications?search=we").json();
    assert_eq!(list["items"].as_array().map(Vec::len), Some(1), "{list}");
    assert_eq!(list["items"][0]["revision"], v1);
    assert_eq!(list["items"][0]["permissions"]["sync"], true);
    assert_eq!(http.get("/api/applications?health=Healthy").json()["items"], json!([]));

    // The diff of a missing Secret never shows its value; neither do the manifests.
    let diff = http.get("/api/applications/web/diff");
    assert_eq!(diff.status, 200, "{}", diff.body);
    assert!(
        diff.body.contains("color: blue") && diff.body.contains("<redacted"),
        "{}",
        diff.body
    );
    let rendered = http.get("/api/applications/web/manifests");
    assert_eq!(rendered.status, 200);
    assert!(rendered.json()["objects"].as_array().is_some_and(|o| o.len() == 3));
    for body in [&diff.body, &rendered.body] {
        assert!(!body.contains(SECRET_VALUE), "a Secret value was answered: {body}");
    }

    // Live updates: the stream starts with every Application.
    let stream_url = format!("{base}/api/stream/applications");
    let cookie = http.cookie.clone().unwrap_or_default();
    let first_events = std::thread::spawn(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
        let mut r = agent.get(&stream_url).header("Cookie", &cookie).call().expect("stream");
        let mut reader = r.body_mut().as_reader();
        let mut buf = vec![0u8; 8192];
        let mut got = String::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline && !(got.contains("\"name\":\"web\"") && got.contains("\"name\":\"other\"")) {
            match reader.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.push_str(&String::from_utf8_lossy(&buf[..n])),
            }
        }
        got
    });

    // Sync: refused without the CSRF token, accepted with it; then Synced and Healthy.
    let no_csrf = http.request("POST", "/api/applications/web/sync", Some(&json!({})), &[], false);
    assert_eq!(no_csrf.status, 403, "{}", no_csrf.body);
    let sync = http.post("/api/applications/web/sync", json!({"prune": true}));
    assert_eq!(sync.status, 202, "{}", sync.body);
    let events = first_events.join().expect("stream thread");
    assert!(
        events.contains("event: application") && events.contains("\"name\":\"other\""),
        "{events}"
    );
    until("web Synced and Healthy", Duration::from_secs(120), || {
        let list = http.get("/api/applications").json();
        summary(&list, "web").is_some_and(|s| s["sync"] == "Synced" && s["health"] == "Healthy")
    });

    // The tree: the Deployment's ReplicaSet and Pod hang below it.
    let tree = http.get("/api/applications/web/tree").json();
    let nodes = tree["nodes"].as_array().cloned().unwrap_or_default();
    let find = |kind: &str| nodes.iter().find(|n| n["kind"] == kind).cloned().unwrap_or_default();
    let (deploy, rs, pod) = (find("Deployment"), find("ReplicaSet"), find("Pod"));
    assert_eq!(rs["parentId"], deploy["id"], "{tree}");
    assert_eq!(pod["parentId"], rs["id"], "{tree}");
    assert_eq!(pod["health"], "Healthy", "{tree}");

    // Live objects: in the tree only, Secrets redacted.
    let secret = http.get("/api/applications/web/resource?version=v1&kind=Secret&namespace=api-web&name=creds");
    assert_eq!(secret.status, 200, "{}", secret.body);
    assert_eq!(secret.json()["data"]["password"], "<redacted>");
    assert!(
        !secret.body.contains(SECRET_VALUE) && !secret.body.contains("aHVudGVy"),
        "{}",
        secret.body
    );
    let pod_path = format!(
        "/api/applications/web/resource?version=v1&kind=Pod&namespace=api-web&name={}",
        pod["name"].as_str().unwrap_or_default()
    );
    assert_eq!(http.get(&pod_path).json()["kind"], "Pod");
    let outside = http.get(&format!(
        "/api/applications/web/resource?version=v1&kind=Secret&namespace={ns}&name=capstan-secret"
    ));
    assert_eq!(
        outside.status, 404,
        "objects outside the tree are not served: {}",
        outside.body
    );
    for path in [
        "/api/applications/web",
        "/api/applications/web/events",
        "/api/applications/web/history",
    ] {
        let a = http.get(path);
        assert_eq!(a.status, 200, "{path}: {}", a.body);
        assert!(!a.body.contains(SECRET_VALUE), "{path}");
    }
    let events = http.get("/api/applications/web/events").json();
    assert!(
        events["items"]
            .as_array()
            .is_some_and(|e| e.iter().any(|e| e["reason"] == "OperationSucceeded")),
        "{events}"
    );
    // Names in URLs are validated.
    assert_eq!(http.get("/api/applications/Web").status, 400);
    assert_eq!(http.get("/api/applications/..%2Fsecrets").status, 400);
    assert_eq!(http.get("/api/applications/missing").status, 404);
    assert_eq!(http.get("/api/nothing-here").status, 404);

    // Webhooks: without a secret, refused (a secret is mandatory by default); with a secret
    // configured, a forged signature changes nothing; a signed push to main refreshes `web` only.
    let unsigned = Http::new(&base).request(
        "POST",
        "/api/webhook",
        Some(&json!({"ref": "refs/heads/main"})),
        &[("X-GitHub-Event", "push")],
        false,
    );
    assert_eq!(unsigned.status, 401, "{}", unsigned.body);
    assert!(unsigned.body.contains("webhook.github.secret"), "{}", unsigned.body);
    common::set_secret_value(&kc, &ns, "webhook.github.secret", "s3cr3t");
    let v2 = git.commit(
        "site",
        "main",
        &[("app/all.yaml", Some(&manifests("green", true)))],
        "v2",
    )?;
    let push = json!({
        "ref": "refs/heads/main",
        "repository": {"clone_url": git.git_url("site"), "html_url": "http://example.invalid/site", "default_branch": "main"},
        "commits": [{"modified": ["app/all.yaml"]}],
    })
    .to_string();
    let hook = |signature: &str| {
        let h = Http::new(&base);
        let headers = [("X-GitHub-Event", "push"), ("X-Hub-Signature-256", signature)];
        let body: Value = serde_json::from_str(&push).unwrap_or_default();
        h.request("POST", "/api/webhook", Some(&body), &headers, false)
    };
    // The body as sent is the re-serialised JSON: sign exactly that.
    let sent = serde_json::from_str::<Value>(&push)?.to_string();
    let malformed = || {
        Http::new(&base).request(
            "POST",
            "/api/webhook",
            None,
            &[
                ("X-GitHub-Event", "push"),
                ("X-Hub-Signature-256", &format!("sha256={}", hmac_hex("s3cr3t", b""))),
            ],
            false,
        )
    };
    // A signed empty body is malformed (400) once the secret is read, unsigned (401) before.
    until("the webhook secret to be read", Duration::from_secs(10), || {
        malformed().status == 400
    });
    let forged = hook(&format!("sha256={}", hmac_hex("not-the-secret", sent.as_bytes())));
    assert_eq!(forged.status, 401, "{}", forged.body);
    let started = Instant::now();
    let accepted = hook(&format!("sha256={}", hmac_hex("s3cr3t", sent.as_bytes())));
    assert_eq!(accepted.status, 200, "{}", accepted.body);
    // Neither names nor counts are disclosed to the unauthenticated sender.
    assert_eq!(accepted.json(), json!({"accepted": true}), "{}", accepted.body);
    // A provider without a secret of its own cannot be used to skip the check.
    let gitea = Http::new(&base).request(
        "POST",
        "/api/webhook",
        Some(&serde_json::from_str::<Value>(&push)?),
        &[("X-Gitea-Event", "push")],
        false,
    );
    assert_eq!(gitea.status, 401, "{}", gitea.body);
    until("web to see the pushed revision", Duration::from_secs(30), || {
        summary(&http.get("/api/applications").json(), "web").is_some_and(|s| s["revision"] == v2)
    });
    eprintln!("webhook → new revision in status: {:?}", started.elapsed());

    // History and rollback to the first sync.
    let sync = http.post("/api/applications/web/sync", json!({}));
    assert_eq!(sync.status, 202);
    until("the second sync recorded", Duration::from_secs(120), || {
        http.get("/api/applications/web/history").json()["items"]
            .as_array()
            .map(Vec::len)
            == Some(2)
    });
    let history = http.get("/api/applications/web/history").json();
    assert_eq!(history["items"][0]["revision"], v2, "newest first: {history}");
    let unknown = http.post("/api/applications/web/rollback", json!({"id": 42}));
    assert_eq!(unknown.status, 422, "{}", unknown.body);
    assert!(unknown.body.contains("history entry 42 not found"), "{}", unknown.body);
    let rollback = http.post(
        "/api/applications/web/rollback",
        json!({"id": history["items"][1]["id"]}),
    );
    assert_eq!(rollback.status, 202, "{}", rollback.body);
    until("the ConfigMap back at blue", Duration::from_secs(120), || {
        text(&kubectl(
            &kc,
            &[
                "-n",
                "api-web",
                "get",
                "configmap",
                "settings",
                "-o",
                "jsonpath={.data.color}",
            ],
        )) == "blue"
    });

    // Terminate: a sync whose wave never becomes healthy is stopped on request.
    git.commit(
        "site",
        "main",
        &[("app/all.yaml", Some(&manifests("yellow", false)))],
        "stuck",
    )?;
    assert_eq!(http.post("/api/applications/web/sync", json!({})).status, 202);
    until("the stuck sync running", Duration::from_secs(60), || {
        summary(&http.get("/api/applications").json(), "web").is_some_and(|s| s["operation"]["phase"] == "Running")
    });
    let busy = http.post("/api/applications/web/sync", json!({}));
    assert_eq!(busy.status, 409, "no second operation while one runs: {}", busy.body);
    let no_csrf = http.request("DELETE", "/api/applications/web/operation", None, &[], false);
    assert_eq!(no_csrf.status, 403);
    let terminate = http.request("DELETE", "/api/applications/web/operation", None, &[], true);
    assert_eq!(terminate.status, 202, "{}", terminate.body);
    until("the operation terminated", Duration::from_secs(30), || {
        summary(&http.get("/api/applications").json(), "web").is_some_and(|s| {
            s["operation"]["phase"] == "Failed"
                && s["operation"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("terminated by admin"))
        })
    });

    // Metrics: not for anonymous callers on the main address.
    assert_eq!(Http::new(&base).get("/metrics").status, 401);
    let metrics = http.get("/metrics");
    assert_eq!(metrics.status, 200);
    let app_info = format!("capstan_app_info{{namespace=\"{ns}\",name=\"web\"");
    let syncs = format!("capstan_app_syncs_total{{namespace=\"{ns}\",name=\"web\",phase=\"Succeeded\"}}");
    for needle in [
        app_info.as_str(),
        "capstan_webhook_requests_total{provider=\"github\",result=\"unauthorized\"}",
        "capstan_webhook_requests_total{provider=\"github\",result=\"accepted\"} 1",
        "capstan_app_reconcile_duration_seconds_count",
        syncs.as_str(),
        "capstan_git_requests_total{request=\"ls-remote\",result=\"ok\"}",
        "capstan_render_cache_lookups_total{result=\"hit\"}",
        "capstan_kube_requests_total{method=\"PATCH\"}",
    ] {
        assert!(
            metrics.body.contains(needle),
            "{needle} missing from /metrics:\n{}",
            metrics.body
        );
    }
    assert!(!metrics.body.contains(SECRET_VALUE));
    // The separate metrics address needs no credentials (it is for the scraper's network).
    let open = Http::new(&metrics_url.replace("/metrics", "")).get("/metrics");
    assert_eq!(open.status, 200);
    assert!(open.body.contains(&app_info), "{}", open.body);

    // Roles: a local account without a grant sees nothing; read-only may read but not sync; an API
    // token acts as its account.
    let out = capstan_in(
        &kc,
        &ns,
        &["account", "set-password", "dev", "--password", "dev-password-1"],
    );
    assert!(out.status.success(), "{}", text(&out));
    let out = capstan_in(&kc, &ns, &["account", "generate-token", "dev"]);
    assert!(out.status.success(), "{}", text(&out));
    let token = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(token.starts_with("cst_"), "{token}");
    let listed = text(&capstan_in(&kc, &ns, &["account", "list"]));
    assert!(listed.contains("dev\ttoken") && !listed.contains(&token), "{listed}");
    let mut dev = Http::new(&base);
    assert_eq!(dev.login("dev", "dev-password-1").status, 200);
    until("dev's empty list", Duration::from_secs(10), || {
        dev.get("/api/applications").json()["items"] == json!([])
    });
    assert_eq!(
        dev.get("/api/applications/web").status,
        404,
        "no role: not even the name"
    );
    assert_eq!(dev.post("/api/applications/web/sync", json!({})).status, 404);
    let policy = "default: none\ngrants:\n  - {role: read-only, projects: ['*'], users: [dev]}\n";
    common::create_policy(&kc, &ns, policy);
    until("dev may read", Duration::from_secs(10), || {
        dev.get("/api/applications/web").status == 200
    });
    let refused = dev.post("/api/applications/web/sync", json!({}));
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert_eq!(dev.post("/api/applications/web/refresh", json!({})).status, 403);
    assert_eq!(
        summary(&dev.get("/api/applications").json(), "web").map(|s| s["permissions"]["sync"].clone()),
        Some(json!(false))
    );
    let mut bot = Http::new(&base);
    bot.bearer = Some(token.clone());
    assert_eq!(bot.get("/api/userinfo").json()["username"], "dev");
    assert_eq!(bot.post("/api/applications/web/sync", json!({})).status, 403);
    let id = token
        .trim_start_matches("cst_")
        .split('.')
        .next()
        .unwrap_or_default()
        .to_string();
    assert!(capstan_in(&kc, &ns, &["account", "delete-token", &id]).status.success());
    until("the revoked token refused", Duration::from_secs(10), || {
        bot.get("/api/userinfo").status == 401
    });

    // Tokens may expire; an account's sessions may be revoked.
    let out = capstan_in(&kc, &ns, &["account", "generate-token", "dev", "--expires-in", "2s"]);
    assert!(out.status.success(), "{}", text(&out));
    let mut brief = Http::new(&base);
    brief.bearer = Some(String::from_utf8_lossy(&out.stdout).trim().to_string());
    until("the short-lived token expired", Duration::from_secs(20), || {
        let a = brief.get("/api/userinfo");
        a.status == 401 && a.body.contains("token expired")
    });
    assert_eq!(dev.get("/api/userinfo").status, 200);
    let out = capstan_in(&kc, &ns, &["account", "revoke-sessions", "dev"]);
    assert!(out.status.success(), "{}", text(&out));
    until("dev's session revoked", Duration::from_secs(10), || {
        dev.get("/api/userinfo").status == 401
    });
    assert_eq!(dev.login("dev", "dev-password-1").status, 200);
    assert_eq!(dev.get("/api/userinfo").status, 200);

    // Logging out clears the cookie.
    let out = http.request("DELETE", "/api/session", None, &[], true);
    assert_eq!(out.status, 204);
    assert!(out.set_cookie.is_some_and(|c| c.contains("Max-Age=0")));
    Ok(())
}

//! `GET /api/policies` on a real control plane over real TCP: two Policies, one that compiles (its
//! `Ready` condition written by the controller's own policy cache) and one whose status the test
//! writes through the status subresource (Ready False with its compile error, and verdicts about
//! Applications of two projects and one that no longer exists). The JSON is checked for the admin,
//! for a user with a role in one project only (who sees only that project's verdicts) and for a user
//! with no role (who sees the policies and no verdict); and no request through the API, by any of
//! them, creates, changes or deletes a policy.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use capstan_api::Policy;
use capstan_server::auth::{self, password};
use capstan_server::state::SECRET;
use capstan_server::{ServerConfig, State};
use capstan_testkit::TestCluster;
use capstan_testkit::capstan::eventually;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(60);
/// The compile error the test writes on the broken policy's status.
const COMPILE_ERROR: &str =
    "spec.validations[0].expression: does not compile: Syntax error: mismatched input '<EOF>' expecting an expression";

/// An answer: status and body.
#[derive(Debug)]
struct Answer {
    status: u16,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// `METHOD path` with the bearer `token` (none when empty) and a JSON `body`, read to the end.
async fn request(
    server: SocketAddr,
    token: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> anyhow::Result<Answer> {
    let mut conn = TcpStream::connect(server).await?;
    let mut text = format!("{method} {path} HTTP/1.1\r\nHost: capstan.test\r\nConnection: close\r\n");
    if !token.is_empty() {
        text.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    if let Some(b) = body {
        text.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    text.push_str("\r\n");
    text.push_str(body.unwrap_or(""));
    conn.write_all(text.as_bytes()).await?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), conn.read_to_end(&mut raw)).await??;
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok(Answer { status, body })
}

/// `GET /api/policies` as `token`: the items by name.
async fn policies(server: SocketAddr, token: &str) -> anyhow::Result<BTreeMap<String, Value>> {
    let a = request(server, token, "GET", "/api/policies", None).await?;
    anyhow::ensure!(a.status == 200, "GET /api/policies: {} {}", a.status, a.body);
    let items = a.json()["items"].as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = items.iter().filter_map(|p| p["name"].as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    anyhow::ensure!(names == sorted, "in name order: {names:?}");
    Ok(items
        .into_iter()
        .map(|p| (p["name"].as_str().unwrap_or_default().to_string(), p))
        .collect())
}

/// The Applications of a policy's verdicts, in their order.
fn verdict_apps(policy: &Value) -> Vec<String> {
    policy["recentVerdicts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["application"].as_str().map(String::from))
        .collect()
}

fn application(name: &str, project: &str) -> anyhow::Result<capstan_api::Application> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
        "metadata": {"name": name},
        "spec": {
            "project": project,
            "source": {"repoURL": "https://git.example.com/fleet.git", "targetRevision": "main", "path": name},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": name},
        },
    }))?)
}

fn verdict(application: &str, time: &str, actions: &[&str], message: &str) -> Value {
    json!({
        "time": time, "application": application, "cluster": "in-cluster",
        "object": "apps/Deployment/web/web", "actions": actions, "message": message,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn policies_are_listed_with_the_verdicts_each_caller_may_see_and_never_written() -> anyhow::Result<()> {
    capstan_testkit::init_logging();
    let cluster = TestCluster::shared().await?;
    let client = cluster.client().await?;
    capstan_testkit::capstan::install(&client).await?;
    let ns = capstan_testkit::capstan::unique_namespace();
    capstan_testkit::capstan::create_namespace(&client, &ns).await?;

    // Three API tokens: admin, dev (admin of project team-a only) and nobody (no role anywhere).
    let mut data = BTreeMap::new();
    data.insert(auth::SESSION_KEY.to_string(), password::random_secret(32));
    let mut tokens = BTreeMap::new();
    for account in ["admin", "dev", "nobody"] {
        let (id, token, stored) = auth::new_token(account, None);
        data.insert(auth::token_key(&id), stored);
        tokens.insert(account, token);
    }
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(SECRET.into()),
            ..Default::default()
        },
        data: Some(data.into_iter().map(|(k, v)| (k, ByteString(v.into_bytes()))).collect()),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await?;
    let rbac: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "capstan-rbac"},
        "data": {"policy.yaml": "grants:\n  - {role: admin, projects: [team-a], users: [dev]}\n"},
    }))?;
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &rbac)
        .await?;
    let apps: Api<capstan_api::Application> = Api::namespaced(client.clone(), &ns);
    for (name, project) in [("web-a", "team-a"), ("web-b", "team-b")] {
        apps.create(&PostParams::default(), &application(name, project)?)
            .await?;
    }

    // One policy that compiles, scoped by cluster labels; one that does not, scoped by projects.
    let api: Api<Policy> = Api::namespaced(client.clone(), &ns);
    let limits: Policy = serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Policy",
        "metadata": {"name": "replica-limit"},
        "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
            "validations": [{"expression": "object.spec.replicas <= 5", "message": "at most 5 replicas"}],
            "validationActions": ["Warn"],
            "clusterSelector": {"matchLabels": {"env": "prod"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["web", "api"]}]},
        },
    }))?;
    api.create(&PostParams::default(), &limits).await?;
    let broken: Policy = serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Policy",
        "metadata": {"name": "broken"},
        "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
            "validations": [{"expression": "object.spec.replicas <="}],
            "validationActions": ["Deny", "Audit"],
            "projects": ["team-a", "team-b"],
        },
    }))?;
    let broken = api.create(&PostParams::default(), &broken).await?;
    let status = json!({"status": {
        "observedGeneration": broken.metadata.generation,
        "conditions": [{
            "type": "Ready", "status": "False", "reason": "InvalidPolicy", "message": COMPILE_ERROR,
            "observedGeneration": broken.metadata.generation, "lastTransitionTime": "2026-12-01T10:00:00Z",
        }],
        "recentVerdicts": [
            verdict(&format!("{ns}/web-b"), "2026-12-01T10:03:00Z", &["Deny", "Audit"], "team-b's replicas"),
            verdict(&format!("{ns}/gone"), "2026-12-01T10:02:00Z", &["Deny", "Audit"], "a deleted Application's"),
            verdict(&format!("{ns}/web-a"), "2026-12-01T10:01:00Z", &["Deny", "Audit"], "team-a's replicas"),
        ],
    }});
    api.patch_status("broken", &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    // The controller's policy cache compiles each policy and writes its Ready condition (the broken
    // one's status already describes its generation: left as the test wrote it).
    let controller_policies = Arc::new(capstan_controller::policies::Policies::new(client.clone(), &ns));
    controller_policies.spawn();

    let cache = tempfile::tempdir()?;
    let state = State::start(
        client.clone(),
        ServerConfig {
            namespace: ns.clone(),
            secure_cookies: true,
            cache_dir: cache.path().join("server"),
            cache_root: cache.path().to_path_buf(),
            metrics_addr: None,
            webhook_allow_unsigned: false,
            deny_implicit_default_project: false,
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let server = listener.local_addr()?;
    let router = capstan_server::router(state.clone()).into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, router).await });
    eventually("the server ready", WAIT, || {
        let state = state.clone();
        async move { Ok(state.is_ready() && state.app("web-a").is_some() && state.app("web-b").is_some()) }
    })
    .await?;

    let (admin, dev, nobody) = (&tokens["admin"], &tokens["dev"], &tokens["nobody"]);
    let unauthenticated = request(server, "", "GET", "/api/policies", None).await?;
    assert_eq!(unauthenticated.status, 401, "{}", unauthenticated.body);

    // The admin: both policies, the one that compiles Ready once the controller has looked at it.
    eventually("replica-limit Ready", WAIT, || async move {
        Ok(policies(server, admin).await?["replica-limit"]["ready"] == json!(true))
    })
    .await?;
    let all = policies(server, admin).await?;
    assert_eq!(all.keys().collect::<Vec<_>>(), ["broken", "replica-limit"]);
    assert_eq!(
        all["replica-limit"],
        json!({
            "name": "replica-limit",
            "validationActions": ["Warn"],
            "clusterSelector": "env=prod,tier in (web,api)",
            "projects": [],
            "ready": true,
            "readyMessage": "every expression compiled",
            "recentVerdicts": [],
        })
    );
    let b = &all["broken"];
    assert_eq!(b["validationActions"], json!(["Deny", "Audit"]));
    assert_eq!(b["clusterSelector"], json!(""), "every cluster");
    assert_eq!(b["projects"], json!(["team-a", "team-b"]));
    assert_eq!(b["ready"], json!(false));
    assert_eq!(b["readyMessage"], json!(COMPILE_ERROR));
    assert_eq!(
        verdict_apps(b),
        [format!("{ns}/web-b"), format!("{ns}/gone"), format!("{ns}/web-a")],
        "the admin sees every verdict, newest first"
    );
    assert_eq!(
        b["recentVerdicts"][2],
        verdict(
            &format!("{ns}/web-a"),
            "2026-12-01T10:01:00Z",
            &["Deny", "Audit"],
            "team-a's replicas"
        )
    );

    // dev, admin of team-a only: the same policies, and only the verdicts about team-a's web-a (not
    // team-b's, nor those of an Application that no longer exists, whose project is unknown).
    let seen = policies(server, dev).await?;
    assert_eq!(seen.keys().collect::<Vec<_>>(), ["broken", "replica-limit"]);
    assert_eq!(verdict_apps(&seen["broken"]), [format!("{ns}/web-a")]);
    assert_eq!(seen["broken"]["readyMessage"], json!(COMPILE_ERROR));
    let body = serde_json::to_string(&seen)?;
    assert!(
        !body.contains("web-b") && !body.contains("team-b's") && !body.contains("gone"),
        "nothing of team-b's verdicts: {body}"
    );

    // nobody, without any role: the policies themselves, no verdict.
    let seen = policies(server, nobody).await?;
    assert_eq!(seen.keys().collect::<Vec<_>>(), ["broken", "replica-limit"]);
    assert!(verdict_apps(&seen["broken"]).is_empty(), "{:?}", seen["broken"]);

    no_request_writes_a_policy(server, &api, [dev.as_str(), nobody.as_str(), admin.as_str()]).await?;
    Ok(())
}

/// Every way a client might try to create, change or delete a policy through the API is refused
/// (405 or 404: the API has no endpoint writing one), and the policies in the cluster are as they
/// were.
async fn no_request_writes_a_policy(server: SocketAddr, api: &Api<Policy>, tokens: [&str; 3]) -> anyhow::Result<()> {
    let before: BTreeMap<String, Option<String>> = api
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .map(|p| (p.metadata.name.unwrap_or_default(), p.metadata.resource_version))
        .collect();
    let new_policy = json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Policy", "metadata": {"name": "sneaky"},
        "spec": {"validations": [{"expression": "true"}], "validationActions": ["Audit"]},
    })
    .to_string();
    let change = json!({"spec": {"validationActions": ["Audit"], "projects": ["nothing"]}}).to_string();
    // `/api/policies` answers GET only (405 otherwise); nothing is routed below it (the API's 404).
    let attempts: [(&str, &str, Option<&str>, u16); 9] = [
        ("POST", "/api/policies", Some(&new_policy), 405),
        ("PUT", "/api/policies", Some(&new_policy), 405),
        ("DELETE", "/api/policies", None, 405),
        ("PATCH", "/api/policies", Some(&change), 405),
        ("POST", "/api/policies/sneaky", Some(&new_policy), 404),
        ("PUT", "/api/policies/broken", Some(&change), 404),
        ("PATCH", "/api/policies/broken", Some(&change), 404),
        ("DELETE", "/api/policies/replica-limit", None, 404),
        ("PUT", "/api/policies/broken/status", Some(&change), 404),
    ];
    for token in tokens {
        for (method, path, body, refused) in attempts {
            let a = request(server, token, method, path, body).await?;
            assert_eq!(a.status, refused, "{method} {path}: {}", a.body);
        }
    }
    let after: BTreeMap<String, Option<String>> = api
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .map(|p| (p.metadata.name.unwrap_or_default(), p.metadata.resource_version))
        .collect();
    assert_eq!(before, after, "no policy created, changed or deleted");
    Ok(())
}

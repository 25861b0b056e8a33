//! The server's defences against abuse, on a real control plane and over real TCP connections from
//! several loopback addresses: failed-login limits (429 before more PBKDF2 runs, other addresses and
//! accounts unaffected), live-update stream caps, mandatory webhook secrets with replies that tell
//! nothing, security headers, expiring API tokens and revocable sessions.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use capstan_server::auth::{self, limit, password};
use capstan_server::state::SECRET;
use capstan_server::{ServerConfig, State};
use capstan_testkit::TestCluster;
use capstan_testkit::capstan::eventually;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const ADMIN_PASSWORD: &str = "admin-password-1";
const DEV_PASSWORD: &str = "dev-password-1";

/// An answer: status, headers (lower-case names) and body.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: BTreeMap<String, String>,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// A connection to `server` from the loopback address `from` (Linux routes all of 127/8 to lo).
async fn connect(from: &str, server: SocketAddr) -> anyhow::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from.parse::<IpAddr>()?, 0))?;
    Ok(socket.connect(server).await?)
}

fn request_text(method: &str, path: &str, headers: &[(&str, &str)], body: Option<&str>) -> String {
    let mut text = format!("{method} {path} HTTP/1.1\r\nHost: capstan.test\r\nConnection: close\r\n");
    for (k, v) in headers {
        text.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        text.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    text.push_str("\r\n");
    text.push_str(body.unwrap_or(""));
    text
}

fn parse_head(head: &str) -> (u16, BTreeMap<String, String>) {
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers)
}

/// One HTTP/1.1 request from `from`, read to the end.
async fn request(
    from: &str,
    server: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> anyhow::Result<Answer> {
    let mut conn = connect(from, server).await?;
    conn.write_all(request_text(method, path, headers, body).as_bytes())
        .await?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), conn.read_to_end(&mut raw)).await??;
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let (status, headers) = parse_head(head);
    let body = if headers.get("transfer-encoding").is_some_and(|t| t == "chunked") {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok(Answer { status, headers, body })
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

/// Open a live-update stream: its status and, while it is open, the connection (dropping it closes
/// the stream).
async fn open_stream(server: SocketAddr, token: &str) -> anyhow::Result<(Answer, Option<TcpStream>)> {
    let mut conn = connect("127.0.0.1", server).await?;
    let auth = format!("Bearer {token}");
    conn.write_all(request_text("GET", "/api/stream/applications", &[("Authorization", &auth)], None).as_bytes())
        .await?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&raw).contains("\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(30), conn.read(&mut buf)).await??;
        anyhow::ensure!(n > 0, "the stream closed before its headers");
        raw.extend_from_slice(&buf[..n]);
    }
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, _) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let (status, headers) = parse_head(head);
    if status == 200 {
        return Ok((
            Answer {
                status,
                headers,
                body: String::new(),
            },
            Some(conn),
        ));
    }
    // An error answer: read the rest of it.
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), conn.read_to_end(&mut rest)).await??;
    let mut full = raw.into_bytes();
    full.extend_from_slice(&rest);
    let full = String::from_utf8_lossy(&full).into_owned();
    let body = full.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    let body = if headers.get("transfer-encoding").is_some_and(|t| t == "chunked") {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok((Answer { status, headers, body }, None))
}

async fn set_secret_value(secrets: &Api<Secret>, key: &str, value: &str) -> anyhow::Result<()> {
    let patch = json!({"stringData": {key: value}});
    secrets
        .patch(SECRET, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(())
}

fn login_body(user: &str, password: &str) -> String {
    json!({"username": user, "password": password}).to_string()
}

fn session_cookie(a: &Answer) -> String {
    a.header("set-cookie")
        .and_then(|c| c.split(';').next())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_server_refuses_abuse() -> anyhow::Result<()> {
    capstan_testkit::init_logging();
    // The run's shared plane, the server in a Capstan namespace of this test's own.
    let cluster = TestCluster::shared().await?;
    let client = cluster.client().await?;
    capstan_testkit::capstan::install(&client).await?;
    let ns = capstan_testkit::capstan::unique_namespace();
    capstan_testkit::capstan::create_namespace(&client, &ns).await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let mut data = BTreeMap::new();
    for (k, v) in [
        (auth::SESSION_KEY.to_string(), password::random_secret(32)),
        (auth::ADMIN_PASSWORD.to_string(), password::hash(ADMIN_PASSWORD)),
        (auth::password_key("dev"), password::hash(DEV_PASSWORD)),
    ] {
        data.insert(k, ByteString(v.into_bytes()));
    }
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(SECRET.into()),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    };
    secrets.create(&PostParams::default(), &secret).await?;

    let cache = tempfile::tempdir()?;
    let config = ServerConfig {
        namespace: ns.clone(),
        secure_cookies: true,
        cache_dir: cache.path().join("server"),
        cache_root: cache.path().to_path_buf(),
        metrics_addr: None,
        webhook_allow_unsigned: false,
        deny_implicit_default_project: false,
    };
    let state = State::start(client.clone(), config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let server = listener.local_addr()?;
    let app = capstan_server::router(state.clone()).into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await });
    eventually("the server ready", Duration::from_secs(60), || {
        let state = state.clone();
        async move { Ok(state.is_ready()) }
    })
    .await?;

    headers_are_strict(server).await?;
    every_documented_route_is_routed(server).await?;
    failed_logins_are_limited(server, &state).await?;
    webhooks_need_a_secret_and_tell_nothing(server, &secrets).await?;
    streams_are_capped(server, &state, &secrets).await?;
    tokens_expire(server, &secrets).await?;
    sessions_are_revocable(server, &secrets).await?;
    Ok(())
}

/// Every answer (UI page, UI file, API error) carries the security headers.
async fn headers_are_strict(server: SocketAddr) -> anyhow::Result<()> {
    for path in ["/", "/applications/web", "/ui/app.js", "/api/applications", "/healthz"] {
        let a = request("127.0.0.1", server, "GET", path, &[], None).await?;
        assert_eq!(
            a.header("content-security-policy"),
            Some(capstan_server::CONTENT_SECURITY_POLICY),
            "{path}"
        );
        assert!(
            capstan_server::CONTENT_SECURITY_POLICY.contains("script-src 'self';")
                && !capstan_server::CONTENT_SECURITY_POLICY.contains("unsafe")
        );
        assert_eq!(a.header("x-content-type-options"), Some("nosniff"), "{path}");
        assert_eq!(a.header("referrer-policy"), Some("no-referrer"), "{path}");
        assert_eq!(a.header("x-frame-options"), Some("DENY"), "{path}");
    }
    // The UI works under that policy: no inline script, style or event handler in the page.
    let page = request("127.0.0.1", server, "GET", "/", &[], None).await?;
    assert!(
        page.body
            .contains("<script type=\"module\" src=\"/ui/app.js\"></script>")
    );
    let inline_scripts =
        page.body.matches("<script").count() - page.body.matches("<script type=\"module\" src=").count();
    assert_eq!(inline_scripts, 0, "{}", page.body);
    for needle in [" onclick=", " onload=", " style=", "<style", "javascript:"] {
        assert!(!page.body.contains(needle), "{needle} in index.html");
    }
    Ok(())
}

/// Wrong passwords get 429 (with Retry-After and a JSON error) before they cost more PBKDF2 runs;
/// another account from another address still logs in; a success resets the user's counter; many
/// user names from one address hit the address limit.
async fn failed_logins_are_limited(server: SocketAddr, state: &Arc<State>) -> anyhow::Result<()> {
    let login = |from: &'static str, user: &'static str, pw: &'static str| async move {
        request(from, server, "POST", "/api/session", &[], Some(&login_body(user, pw))).await
    };
    let before = state.logins.checks_started();
    for _ in 0..limit::USER_FAILURES {
        assert_eq!(login("127.0.0.1", "admin", "wrong").await?.status, 401);
    }
    let checked = state.logins.checks_started();
    assert_eq!(checked - before, u64::from(limit::USER_FAILURES));
    for _ in 0..3 {
        let refused = login("127.0.0.1", "admin", "wrong").await?;
        assert_eq!(refused.status, 429, "{}", refused.body);
        let retry: u64 = refused.header("retry-after").unwrap_or("").parse()?;
        assert!((1..=60).contains(&retry), "{retry}");
        assert!(
            refused.json()["error"]
                .as_str()
                .is_some_and(|e| e.contains("too many failed logins")),
            "{}",
            refused.body
        );
        assert!(!refused.body.contains("wrong"), "the password is never echoed");
    }
    // Even the right password waits: the user name is locked for the window, whatever the address.
    assert_eq!(login("127.0.0.9", "admin", ADMIN_PASSWORD).await?.status, 429);
    assert_eq!(
        state.logins.checks_started(),
        checked,
        "no PBKDF2 run for refused attempts"
    );

    // Another account from another address still works; a success resets dev's counter.
    for _ in 0..limit::USER_FAILURES - 1 {
        assert_eq!(login("127.0.0.2", "dev", "wrong").await?.status, 401);
    }
    let ok = login("127.0.0.2", "dev", DEV_PASSWORD).await?;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert!(!session_cookie(&ok).is_empty());
    for _ in 0..limit::USER_FAILURES - 1 {
        assert_eq!(login("127.0.0.2", "dev", "wrong").await?.status, 401, "counter reset");
    }

    // Per address: many user names from one address.
    let mut refused_at = None;
    for i in 0..limit::ADDRESS_FAILURES + 1 {
        let user = format!("nobody-{i}");
        let a = request(
            "127.0.0.3",
            server,
            "POST",
            "/api/session",
            &[],
            Some(&login_body(&user, "wrong")),
        )
        .await?;
        if a.status == 429 {
            refused_at = Some(i);
            break;
        }
        assert_eq!(a.status, 401);
    }
    assert_eq!(refused_at, Some(limit::ADDRESS_FAILURES));
    let other = login("127.0.0.4", "dev", DEV_PASSWORD).await?;
    assert_eq!(other.status, 200, "{}", other.body);
    Ok(())
}

/// Without a secret a webhook is refused with a message saying how to configure one; with one, a
/// signed push is accepted and the reply names and counts nothing.
async fn webhooks_need_a_secret_and_tell_nothing(server: SocketAddr, secrets: &Api<Secret>) -> anyhow::Result<()> {
    let push = json!({
        "ref": "refs/heads/main",
        "repository": {"clone_url": "https://git.example/site.git", "default_branch": "main"},
        "commits": [],
    })
    .to_string();
    let unsigned = request(
        "127.0.0.1",
        server,
        "POST",
        "/api/webhook",
        &[("X-GitHub-Event", "push")],
        Some(&push),
    )
    .await?;
    assert_eq!(unsigned.status, 401, "{}", unsigned.body);
    assert!(
        unsigned.json()["error"]
            .as_str()
            .is_some_and(|e| e.contains("webhook.github.secret")),
        "{}",
        unsigned.body
    );
    set_secret_value(secrets, "webhook.github.secret", "s3cr3t").await?;
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"s3cr3t");
    let signature = format!(
        "sha256={}",
        ring::hmac::sign(&key, push.as_bytes())
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    let signed = || {
        let (push, signature) = (push.clone(), signature.clone());
        async move {
            request(
                "127.0.0.1",
                server,
                "POST",
                "/api/webhook",
                &[("X-GitHub-Event", "push"), ("X-Hub-Signature-256", &signature)],
                Some(&push),
            )
            .await
        }
    };
    eventually("the webhook secret read", Duration::from_secs(20), || async {
        Ok(signed().await?.status == 200)
    })
    .await?;
    let accepted = signed().await?;
    assert_eq!(accepted.json(), json!({"accepted": true}), "{}", accepted.body);
    // Another provider without a secret of its own is refused too.
    let gitea = request(
        "127.0.0.1",
        server,
        "POST",
        "/api/webhook",
        &[("X-Gitea-Event", "push")],
        Some(&push),
    )
    .await?;
    assert_eq!(gitea.status, 401, "{}", gitea.body);
    Ok(())
}

/// A principal may hold at most PER_PRINCIPAL streams: the next gets 429; closing one frees its place.
async fn streams_are_capped(server: SocketAddr, state: &Arc<State>, secrets: &Api<Secret>) -> anyhow::Result<()> {
    let (id, token, stored) = auth::new_token("admin", None);
    set_secret_value(secrets, &auth::token_key(&id), &stored).await?;
    eventually("the token read", Duration::from_secs(20), || {
        let token = token.clone();
        async move {
            let auth = format!("Bearer {token}");
            let a = request(
                "127.0.0.1",
                server,
                "GET",
                "/api/userinfo",
                &[("Authorization", &auth)],
                None,
            )
            .await?;
            Ok(a.status == 200)
        }
    })
    .await?;
    let mut open = Vec::new();
    for i in 0..capstan_server::stream::PER_PRINCIPAL {
        let (a, conn) = open_stream(server, &token).await?;
        assert_eq!(a.status, 200, "stream {i}: {}", a.body);
        open.extend(conn);
    }
    let (over, conn) = open_stream(server, &token).await?;
    assert!(conn.is_none());
    assert_eq!(over.status, 429, "{}", over.body);
    assert!(over.header("retry-after").is_some());
    assert!(
        over.json()["error"]
            .as_str()
            .is_some_and(|e| e.contains("too many open live-update streams")),
        "{}",
        over.body
    );
    assert_eq!(state.streams.open(), capstan_server::stream::PER_PRINCIPAL);
    // A client going away frees its place (noticed at the latest on the next keep-alive).
    drop(open.pop());
    eventually("a closed stream released", Duration::from_secs(60), || {
        let state = state.clone();
        async move { Ok(state.streams.open() < capstan_server::stream::PER_PRINCIPAL) }
    })
    .await?;
    let (again, conn) = open_stream(server, &token).await?;
    assert_eq!(again.status, 200, "{}", again.body);
    drop(conn);
    drop(open);
    Ok(())
}

/// A token past its expiry is refused with 401 "token expired"; one before it works.
async fn tokens_expire(server: SocketAddr, secrets: &Api<Secret>) -> anyhow::Result<()> {
    let now = auth::session::now_secs();
    let (old_id, old, old_stored) = auth::new_token("dev", Some(now - 1));
    let (new_id, new, new_stored) = auth::new_token("dev", Some(now + 3600));
    set_secret_value(secrets, &auth::token_key(&old_id), &old_stored).await?;
    set_secret_value(secrets, &auth::token_key(&new_id), &new_stored).await?;
    let userinfo = |token: String| async move {
        let auth = format!("Bearer {token}");
        request(
            "127.0.0.1",
            server,
            "GET",
            "/api/userinfo",
            &[("Authorization", &auth)],
            None,
        )
        .await
    };
    eventually("the tokens read", Duration::from_secs(20), || {
        let new = new.clone();
        async move { Ok(userinfo(new).await?.status == 200) }
    })
    .await?;
    let expired = userinfo(old.clone()).await?;
    assert_eq!(expired.status, 401);
    assert_eq!(expired.json()["error"], "token expired", "{}", expired.body);
    assert!(!expired.body.contains(&old), "the token is never echoed");
    Ok(())
}

/// Bumping an account's session generation (what `capstan account revoke-sessions` and a password
/// change do) refuses the cookies issued before; a new login works.
async fn sessions_are_revocable(server: SocketAddr, secrets: &Api<Secret>) -> anyhow::Result<()> {
    let login = request(
        "127.0.0.5",
        server,
        "POST",
        "/api/session",
        &[],
        Some(&login_body("dev", DEV_PASSWORD)),
    )
    .await?;
    assert_eq!(login.status, 200, "{}", login.body);
    let cookie = session_cookie(&login);
    let me = |cookie: String| async move {
        request(
            "127.0.0.5",
            server,
            "GET",
            "/api/userinfo",
            &[("Cookie", &cookie)],
            None,
        )
        .await
    };
    assert_eq!(me(cookie.clone()).await?.status, 200);
    set_secret_value(secrets, &auth::generation_key("dev"), "1").await?;
    eventually("the old session refused", Duration::from_secs(20), || {
        let cookie = cookie.clone();
        async move { Ok(me(cookie).await?.status == 401) }
    })
    .await?;
    let refused = me(cookie.clone()).await?;
    assert!(
        refused.json()["error"].as_str().is_some_and(|e| e.contains("revoked")),
        "{}",
        refused.body
    );
    let again = request(
        "127.0.0.5",
        server,
        "POST",
        "/api/session",
        &[],
        Some(&login_body("dev", DEV_PASSWORD)),
    )
    .await?;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(me(session_cookie(&again)).await?.status, 200);
    Ok(())
}

/// Every operation of the served OpenAPI document reaches a handler (not the "no such endpoint"
/// fallback, not 405), and an undocumented API path reaches the fallback.
async fn every_documented_route_is_routed(server: SocketAddr) -> anyhow::Result<()> {
    let doc = request("127.0.0.1", server, "GET", "/api/openapi.json", &[], None).await?;
    assert_eq!(doc.status, 200);
    let doc = doc.json();
    let paths = doc["paths"].as_object().expect("paths");
    let fallback = request("127.0.0.1", server, "GET", "/api/no-such-endpoint", &[], None).await?;
    assert_eq!(fallback.status, 404);
    let mut checked = 0;
    for (path, item) in paths {
        let path = path.replace("{name}", "nothing-here");
        for method in item.as_object().into_iter().flatten().map(|(m, _)| m.to_uppercase()) {
            if path.starts_with("/api/stream/") {
                continue; // streams are answered by their own test below
            }
            let body = matches!(method.as_str(), "POST").then_some("{}");
            let a = request(
                "127.0.0.1",
                server,
                &method,
                &path,
                &[("content-type", "application/json")],
                body,
            )
            .await?;
            assert_ne!(a.status, 405, "{method} {path}: {}", a.body);
            assert!(
                !(a.status == 404 && a.body == fallback.body),
                "{method} {path} is documented but not routed"
            );
            checked += 1;
        }
    }
    assert!(checked >= 25, "{checked}");
    Ok(())
}

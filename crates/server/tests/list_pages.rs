//! The Application list at scale, on a real control plane over real TCP: 2,500 Applications paged
//! through with `limit` and `continue` (each exactly once, in name order), filters composed with
//! pages, the size of a page, the 400s of bad `limit`s and forged, altered or misused `continue`
//! tokens, and a list stream that sends only summaries that changed.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use capstan_server::auth::{self, password};
use capstan_server::state::SECRET;
use capstan_server::{ServerConfig, State};
use capstan_testkit::TestCluster;
use capstan_testkit::capstan::eventually;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Applications created.
const APPS: usize = 2500;

fn name(i: usize) -> String {
    format!("app-{i:04}")
}

/// An answer: status and body.
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

/// `GET path` with the bearer `token`, read to the end.
async fn get(server: SocketAddr, token: &str, path: &str) -> anyhow::Result<Answer> {
    let mut conn = TcpStream::connect(server).await?;
    let text = format!(
        "GET {path} HTTP/1.1\r\nHost: capstan.test\r\nConnection: close\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
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

/// Every page of `query` (without `limit`/`continue`) at `limit`: the names of each page, and the
/// pages' metadata.
async fn walk(server: SocketAddr, token: &str, query: &str, limit: usize) -> anyhow::Result<Vec<(Vec<String>, Value)>> {
    let mut pages = Vec::new();
    let mut next = String::new();
    loop {
        let mut path = format!("/api/applications?limit={limit}");
        if !query.is_empty() {
            path.push('&');
            path.push_str(query);
        }
        if !next.is_empty() {
            path.push_str(&format!("&continue={next}"));
        }
        let a = get(server, token, &path).await?;
        anyhow::ensure!(a.status == 200, "{path}: {} {}", a.status, a.body);
        let body = a.json();
        let names: Vec<String> = body["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["name"].as_str().map(String::from))
            .collect();
        next = body["metadata"]["continue"].as_str().unwrap_or_default().to_string();
        pages.push((names, body["metadata"].clone()));
        if next.is_empty() {
            return Ok(pages);
        }
        anyhow::ensure!(pages.len() <= APPS, "the pages never end");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_list_pages_through_thousands_of_applications() -> anyhow::Result<()> {
    capstan_testkit::init_logging();
    let cluster = TestCluster::shared().await?;
    let client = cluster.client().await?;
    capstan_testkit::capstan::install(&client).await?;
    let ns = capstan_testkit::capstan::unique_namespace();
    capstan_testkit::capstan::create_namespace(&client, &ns).await?;

    let (token_id, token, stored) = auth::new_token("admin", None);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let data: BTreeMap<String, ByteString> = [
        (auth::SESSION_KEY.to_string(), password::random_secret(32)),
        (auth::token_key(&token_id), stored),
    ]
    .into_iter()
    .map(|(k, v)| (k, ByteString(v.into_bytes())))
    .collect();
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(SECRET.into()),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    };
    secrets.create(&PostParams::default(), &secret).await?;

    // Cheap Applications (no controller runs): labels team t0..t4 and tier web (odd) / api (even),
    // ten destination namespaces, created in an order that is not their names'.
    let apps: Api<capstan_api::Application> = Api::namespaced(client.clone(), &ns);
    let started = Instant::now();
    stream::iter((0..APPS).map(|i| (i * 7919) % APPS))
        .map(|i| {
            let apps = apps.clone();
            async move {
                let app: capstan_api::Application = serde_json::from_value(json!({
                    "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
                    "metadata": {"name": name(i), "labels": {
                        "team": format!("t{}", i % 5), "tier": if i % 2 == 1 { "web" } else { "api" },
                    }},
                    "spec": {
                        "project": "default",
                        "source": {"repoURL": "https://git.example.com/fleet.git", "targetRevision": "main", "path": format!("apps/{}", name(i))},
                        "destination": {"server": "https://kubernetes.default.svc", "namespace": format!("ns-{}", i % 10)},
                    },
                }))?;
                apps.create(&PostParams::default(), &app).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    eprintln!(
        "{APPS} Applications created in {:.1} s",
        started.elapsed().as_secs_f64()
    );

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
    // Without `limit`, one answer holds every Application, as before pagination.
    eventually("every Application listed", Duration::from_secs(120), || {
        let token = token.clone();
        async move {
            let a = get(server, &token, "/api/applications").await?;
            let all = a.json();
            let n = all["items"].as_array().map_or(0, Vec::len);
            Ok(a.status == 200 && n == APPS && all["metadata"]["continue"] == json!(""))
        }
    })
    .await?;

    every_application_once_in_order(server, &token).await?;
    filters_compose_with_pages(server, &token).await?;
    a_page_is_small(server, &token).await?;
    bad_input_is_a_clear_400(server, &token).await?;
    the_stream_sends_only_changed_summaries(server, &token, &apps).await?;
    Ok(())
}

async fn every_application_once_in_order(server: SocketAddr, token: &str) -> anyhow::Result<()> {
    let pages = walk(server, token, "", 1000).await?;
    let sizes: Vec<usize> = pages.iter().map(|(n, _)| n.len()).collect();
    assert_eq!(sizes, [1000, 1000, 500]);
    let remaining: Vec<Value> = pages.iter().map(|(_, m)| m["remainingItemCount"].clone()).collect();
    assert_eq!(remaining, [json!(1500), json!(500), Value::Null]);
    let names: Vec<String> = pages.into_iter().flat_map(|(n, _)| n).collect();
    let want: Vec<String> = (0..APPS).map(name).collect();
    assert_eq!(names, want, "every Application exactly once, in name order");
    // A page of one, too.
    let first = walk(server, token, "search=app-000", 1).await?;
    let names: Vec<&str> = first.iter().flat_map(|(n, _)| n.iter().map(String::as_str)).collect();
    assert_eq!(names, (0..10).map(name).collect::<Vec<_>>());
    Ok(())
}

async fn filters_compose_with_pages(server: SocketAddr, token: &str) -> anyhow::Result<()> {
    // team t1 and tier web: i % 5 == 1 and i odd, so i % 10 == 1: 250 Applications, all in ns-1.
    let want: Vec<String> = (0..APPS).filter(|i| i % 10 == 1).map(name).collect();
    for query in [
        "label=team%3Dt1,tier%3Dweb",
        "label=team%3Dt1&label=tier%3Dweb",
        "label=tier+in+(web),team%3D%3Dt1&namespace=ns-1&project=default&cluster=in-cluster",
    ] {
        let pages = walk(server, token, query, 100).await?;
        let sizes: Vec<usize> = pages.iter().map(|(n, _)| n.len()).collect();
        assert_eq!(sizes, [100, 100, 50], "{query}");
        let names: Vec<String> = pages.into_iter().flat_map(|(n, _)| n).collect();
        assert_eq!(names, want, "{query}");
    }
    // Search, a negated label and a namespace together: names with "-1" (app-1000..1999 and
    // app-x1yz…), tier api (even), in ns-2 (i % 10 == 2).
    let want: Vec<String> = (0..APPS)
        .filter(|i| name(*i).contains("-1") && i % 10 == 2)
        .map(name)
        .collect();
    let pages = walk(server, token, "search=-1&label=tier!%3Dweb&namespace=ns-2", 30).await?;
    let names: Vec<String> = pages.into_iter().flat_map(|(n, _)| n).collect();
    assert_eq!(names, want);
    // Nothing matches: one empty last page.
    let pages = walk(server, token, "health=Degraded", 10).await?;
    assert_eq!(pages.len(), 1);
    assert!(pages[0].0.is_empty() && pages[0].1["continue"] == json!(""));
    Ok(())
}

async fn a_page_is_small(server: SocketAddr, token: &str) -> anyhow::Result<()> {
    for limit in [50, 100] {
        let started = Instant::now();
        let a = get(server, token, &format!("/api/applications?limit={limit}")).await?;
        let took = started.elapsed();
        assert_eq!(a.status, 200);
        assert_eq!(a.json()["items"].as_array().map(Vec::len), Some(limit));
        eprintln!(
            "first page of {limit} of {APPS}: {} bytes in {:.1} ms",
            a.body.len(),
            took.as_secs_f64() * 1000.0
        );
        assert!(a.body.len() < 50_000, "a page of {limit}: {} bytes", a.body.len());
        // Only what a row shows: no resources, history or the whole status.
        let first = &a.json()["items"][0];
        for absent in ["resources", "history", "status", "spec", "operationState"] {
            assert!(first.get(absent).is_none(), "{absent} in {first}");
        }
    }
    Ok(())
}

async fn bad_input_is_a_clear_400(server: SocketAddr, token: &str) -> anyhow::Result<()> {
    let first = get(server, token, "/api/applications?limit=10&label=team%3Dt1").await?;
    let next = first.json()["metadata"]["continue"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(!next.is_empty());
    // A token altered in its middle (a base64url character changed).
    let mut altered = next.clone().into_bytes();
    let mid = altered.len() / 2;
    altered[mid] = if altered[mid] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered)?;
    // A token made up by hand in the layout of a genuine one (version 1, a digest, a name, a tag).
    let forged = {
        use base64::Engine;
        let mut raw = vec![1u8];
        raw.extend_from_slice(&[0u8; 16]);
        raw.extend_from_slice(b"app-0000");
        raw.extend_from_slice(&[0u8; 16]);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    };
    for (query, says) in [
        ("limit=0", "limit must be a whole number from 1 to 1000, not \"0\""),
        ("limit=100000", "limit 100000 is over the maximum of 1000"),
        ("limit=ten", "limit must be a whole number from 1 to 1000, not \"ten\""),
        ("limit=1&limit=2", "limit is given more than once"),
        ("label=a%20b", "label selector \"a b\" cannot read"),
        (
            "limit=10&continue=not-a-token!",
            "continue token is not a continue token of this server",
        ),
        (
            &format!("limit=10&continue={forged}"),
            "continue token was altered or not made by this server",
        ),
        (
            &format!("limit=10&label=team%3Dt1&continue={altered}"),
            "continue token was altered or not made by this server",
        ),
        (
            &format!("limit=10&label=team%3Dt2&continue={next}"),
            "continue token was made for other filters",
        ),
        (
            &format!("limit=10&continue={next}"),
            "continue token was made for other filters",
        ),
    ] {
        let a = get(server, token, &format!("/api/applications?{query}")).await?;
        assert_eq!(a.status, 400, "{query}: {}", a.body);
        let error = a.json()["error"].as_str().unwrap_or_default().to_string();
        assert!(error.starts_with(says), "{query}: {error}");
    }
    // The genuine token with its own filters still works.
    let a = get(
        server,
        token,
        &format!("/api/applications?limit=10&label=team%3Dt1&continue={next}"),
    )
    .await?;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["items"][0]["name"], json!(name(51)));
    Ok(())
}

/// The list stream: after its first state, a change no summary shows sends nothing; the next change
/// that a summary shows is the next event.
async fn the_stream_sends_only_changed_summaries(
    server: SocketAddr,
    token: &str,
    apps: &Api<capstan_api::Application>,
) -> anyhow::Result<()> {
    let mut conn = TcpStream::connect(server).await?;
    let text =
        format!("GET /api/stream/applications HTTP/1.1\r\nHost: capstan.test\r\nAuthorization: Bearer {token}\r\n\r\n");
    conn.write_all(text.as_bytes()).await?;
    let mut raw = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let events = |raw: &[u8]| {
        let text = String::from_utf8_lossy(raw).into_owned();
        let (_, body) = text.split_once("\r\n\r\n").unwrap_or(("", ""));
        // Whole events only (the last may still be arriving), chunk framing removed.
        let body = dechunk(body);
        body.split("\n\n")
            .filter(|e| e.starts_with("event: application"))
            .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")).map(String::from))
            .filter_map(|d| serde_json::from_str::<Value>(&d).ok())
            .collect::<Vec<Value>>()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while events(&raw).len() < APPS {
        anyhow::ensure!(Instant::now() < deadline, "the stream's first state is not all there");
        let n = tokio::time::timeout(Duration::from_secs(30), conn.read(&mut buf)).await??;
        anyhow::ensure!(n > 0, "the stream closed");
        raw.extend_from_slice(&buf[..n]);
    }
    assert_eq!(events(&raw).len(), APPS);
    // An annotation is in no summary; a label is.
    apps.patch(
        &name(7),
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"example.com/note": "not in the list"}}})),
    )
    .await?;
    apps.patch(
        &name(8),
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"changed": "yes"}}})),
    )
    .await?;
    while events(&raw).len() < APPS + 1 {
        anyhow::ensure!(Instant::now() < deadline, "no event after the label change");
        let n = tokio::time::timeout(Duration::from_secs(30), conn.read(&mut buf)).await??;
        anyhow::ensure!(n > 0, "the stream closed");
        raw.extend_from_slice(&buf[..n]);
    }
    let after = events(&raw);
    assert_eq!(
        after[APPS]["name"],
        json!(name(8)),
        "the annotation change was sent: {}",
        after[APPS]
    );
    assert_eq!(after[APPS]["labels"]["changed"], json!("yes"));
    Ok(())
}

//! The web UI as the server serves it, over real TCP connections to the real router (on a real
//! control plane, as in production): every page and every embedded file carries the strict
//! Content-Security-Policy and the right content type, every module the UI imports is served, and
//! no served page or script of the UI's own writes HTML from strings (`innerHTML`, `outerHTML`,
//! `insertAdjacentHTML`, `document.write`), sets inline styles or has inline event handlers: pages
//! are lit-html templates, whose values never become markup.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use capstan_server::{ServerConfig, State};
use capstan_testkit::TestCluster;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The policy the UI is written for, spelled out here so that loosening the server's constant
/// fails this test.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// What writes HTML from strings (or replaces the document): none of it in the UI's own files.
const HTML_SINKS: &[&str] = &["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write"];

/// What the policy refuses anyway, and what would be a way around the templates.
const INLINE: &[&str] = &[
    " style=",
    "<style",
    "javascript:",
    " onclick=",
    " onload=",
    " onerror=",
    "unsafeHTML",
    "unsafeSVG",
];

/// The third-party files, copied unchanged from lit-html's npm release (`make lint-ui` compares
/// them byte for byte). lit-html parses its own templates' static strings through a `<template>`
/// element's `innerHTML`; the values bound into them never go there.
const VENDOR: &str = "vendor/lit-html/";

struct Answer {
    status: u16,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

async fn get(server: SocketAddr, path: &str) -> anyhow::Result<Answer> {
    let mut conn = TcpStream::connect(server).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: capstan.test\r\nConnection: close\r\n\r\n");
    conn.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), conn.read_to_end(&mut raw)).await??;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("{path}: no end of headers"))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers: BTreeMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    anyhow::ensure!(
        headers.get("transfer-encoding").is_none_or(|t| t != "chunked"),
        "{path}: chunked answer"
    );
    Ok(Answer {
        status,
        headers,
        body: raw[split + 4..].to_vec(),
    })
}

/// The content type a file of the UI must be served with.
fn expected_type(path: &str) -> &'static str {
    match path.rsplit('.').next().unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        _ if path.ends_with("/LICENSE") => "text/plain; charset=utf-8",
        _ => "unexpected file in the UI",
    }
}

/// The relative module specifiers a script imports (`from './x.js'`, `from"../y.js"`), resolved
/// against the script's own path below `ui/`.
fn imports(path: &str, script: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = script;
    while let Some(i) = rest.find("from") {
        rest = &rest[i + 4..];
        let trimmed = rest.trim_start();
        let Some(quote) = trimmed.chars().next().filter(|c| *c == '"' || *c == '\'') else {
            continue;
        };
        let Some(end) = trimmed[1..].find(quote) else { continue };
        let spec = &trimmed[1..1 + end];
        if !(spec.starts_with("./") || spec.starts_with("../")) {
            continue;
        }
        let mut parts: Vec<&str> = path.split('/').collect();
        parts.pop();
        for p in spec.split('/') {
            match p {
                "." => {}
                ".." => {
                    parts.pop();
                }
                p => parts.push(p),
            }
        }
        out.push(parts.join("/"));
    }
    out
}

fn assert_headers(a: &Answer, path: &str) {
    assert_eq!(a.header("content-security-policy"), Some(POLICY), "{path}");
    assert_eq!(capstan_server::CONTENT_SECURITY_POLICY, POLICY);
    assert_eq!(a.header("x-content-type-options"), Some("nosniff"), "{path}");
    assert_eq!(a.header("x-frame-options"), Some("DENY"), "{path}");
}

/// The checks on the UI's own files (everything but the vendored lit-html): no HTML from strings,
/// nothing the policy refuses.
fn assert_no_html_from_strings(path: &str, text: &str) {
    for sink in HTML_SINKS.iter().chain(INLINE) {
        assert!(!text.contains(sink), "ui/{path} contains {sink:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_and_file_of_the_ui_is_served_under_a_strict_policy_and_builds_no_html_from_strings()
-> anyhow::Result<()> {
    capstan_testkit::init_logging();
    // The run's shared plane, the server in a Capstan namespace of this test's own.
    let cluster = TestCluster::shared().await?;
    let client = cluster.client().await?;
    capstan_testkit::capstan::install(&client).await?;
    let ns = capstan_testkit::capstan::unique_namespace();
    capstan_testkit::capstan::create_namespace(&client, &ns).await?;
    let cache = tempfile::tempdir()?;
    let config = ServerConfig {
        namespace: ns,
        secure_cookies: true,
        cache_dir: cache.path().join("server"),
        cache_root: cache.path().to_path_buf(),
        metrics_addr: None,
        webhook_allow_unsigned: false,
        deny_implicit_default_project: false,
    };
    let state = State::start(client, config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let server = listener.local_addr()?;
    let app = capstan_server::router(state).into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await });

    // The page, at / and at the client-side routes.
    let index = capstan_server::ui::ASSETS
        .iter()
        .find(|(p, _)| *p == "index.html")
        .map(|(_, b)| *b)
        .expect("ui/index.html embedded");
    for path in ["/", "/login", "/applications", "/applications/web", "/clusters"] {
        let a = get(server, path).await?;
        assert_eq!(a.status, 200, "{path}");
        assert_headers(&a, path);
        assert_eq!(a.header("content-type"), Some("text/html; charset=utf-8"), "{path}");
        assert_eq!(a.body, index, "{path}");
        assert_no_html_from_strings("index.html", &a.text());
    }

    // Every embedded file, fetched as the browser does.
    let mut served = Vec::new();
    for (path, bytes) in capstan_server::ui::ASSETS {
        let url = format!("/ui/{path}");
        let a = get(server, &url).await?;
        assert_eq!(a.status, 200, "{url}");
        assert_headers(&a, &url);
        assert_eq!(a.header("content-type"), Some(expected_type(path)), "{url}");
        assert_eq!(&a.body, bytes, "{url}");
        served.push(path.to_string());
        if !(path.ends_with(".js") || path.ends_with(".html")) {
            continue;
        }
        let text = a.text();
        if path.starts_with(VENDOR) {
            // The header follows the imports in some of the files.
            let head: String = text.chars().take(600).collect();
            assert!(
                head.contains(" * @license\n") && head.contains("SPDX-License-Identifier: BSD-3-Clause"),
                "ui/{path}: lit-html's files keep their licence header"
            );
        } else {
            assert!(!path.starts_with("vendor/"), "ui/{path}: only lit-html is vendored");
            assert_no_html_from_strings(path, &text);
        }
        if path.ends_with(".js") {
            for module in imports(path, &text) {
                assert!(
                    capstan_server::ui::ASSETS.iter().any(|(p, _)| *p == module),
                    "ui/{path} imports {module}, which is not served"
                );
            }
        }
    }
    // The files index.html names, and the two modules app.js renders with.
    for needed in [
        "app.js",
        "style.css",
        "favicon.svg",
        "vendor/lit-html/lit-html.js",
        "vendor/lit-html/directives/repeat.js",
        "vendor/lit-html/LICENSE",
    ] {
        assert!(served.iter().any(|p| p == needed), "ui/{needed} is not served");
    }
    let app = String::from_utf8_lossy(
        capstan_server::ui::ASSETS
            .iter()
            .find(|(p, _)| *p == "app.js")
            .map(|(_, b)| *b)
            .unwrap_or_default(),
    )
    .into_owned();
    assert!(
        app.starts_with("// @ts-check\n"),
        "app.js is type-checked (make lint-ui)"
    );
    let mut imported = imports("app.js", &app);
    imported.sort();
    assert_eq!(
        imported,
        ["vendor/lit-html/directives/repeat.js", "vendor/lit-html/lit-html.js"]
    );
    // Only the type check reads the declarations and its settings; they are not in the binary.
    for path in ["/ui/api.d.ts", "/ui/tsconfig.json"] {
        assert_eq!(get(server, path).await?.status, 404, "{path}");
    }
    Ok(())
}

//! The controller's proxy environment never steers a request: with every proxy variable pointing at
//! a listener of the test's, requests go straight to their server and the "proxy" sees nothing.
//! A binary of its own: it sets the process environment.

use std::time::Duration;

use anyhow::Context;
use capstan_http::{Client, Options, Request, StatusCode};
use capstan_testkit::{ChartServer, ChartServerOptions};

#[test]
fn proxy_variables_are_ignored() -> anyhow::Result<()> {
    let proxy = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    proxy.set_nonblocking(true)?;
    let address = format!("http://127.0.0.1:{}", proxy.local_addr()?.port());
    // SAFETY: this binary has one test, and it sets the environment before any thread starts.
    unsafe {
        for key in [
            "HTTP_PROXY",
            "http_proxy",
            "HTTPS_PROXY",
            "https_proxy",
            "ALL_PROXY",
            "all_proxy",
        ] {
            std::env::set_var(key, &address);
        }
        std::env::remove_var("NO_PROXY");
        std::env::remove_var("no_proxy");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        for tls in [false, true] {
            let server = ChartServer::start(ChartServerOptions {
                tls,
                ..Default::default()
            })
            .await?;
            std::fs::write(server.dir().join("a.txt"), "direct")?;
            let client = Client::new(&Options {
                extra_ca: server.ca_pem().map(String::from),
                ..Default::default()
            })?;
            let url = format!("{}/a.txt", server.url()).parse().context("URI")?;
            let answer = client.fetch(Request::get(url), 1024, Duration::from_secs(10)).await?;
            assert_eq!(
                (answer.status, answer.body.as_slice()),
                (StatusCode::OK, &b"direct"[..])
            );
            assert_eq!(server.requests("/a.txt"), 1);
        }
        anyhow::Ok(())
    })?;
    assert!(proxy.accept().is_err(), "a request went to the proxy");
    Ok(())
}

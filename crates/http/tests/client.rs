//! The client against real servers on loopback: the test kit's HTTP(S) file server (a CA of its
//! own, streamed bodies of any size), and plain TCP listeners that read one request and write a
//! fixed answer, for what a file server does not do (echoing a `POST`, redirecting, never answering).

use std::time::Duration;

use anyhow::{Context, bail};
use capstan_http::{Client, Error, Method, Options, Request, StatusCode, Uri, chain, header};
use capstan_testkit::{ChartServer, ChartServerOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const WAIT: Duration = Duration::from_secs(10);

fn uri(text: &str) -> anyhow::Result<Uri> {
    text.parse().with_context(|| format!("URI {text}"))
}

fn plain() -> anyhow::Result<Client> {
    Ok(Client::new(&Options::default())?)
}

/// A listener that takes one connection, reads one request (head and `Content-Length` body) and
/// writes `answer`; what it read comes back from the task.
async fn answer_once(answer: String) -> anyhow::Result<(u16, tokio::task::JoinHandle<anyhow::Result<String>>)> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let port = listener.local_addr()?.port();
    let task = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await?;
        let mut read = Vec::new();
        let mut buf = [0u8; 4096];
        let wanted = loop {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                bail!("the client closed before a whole request");
            }
            read.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&read).into_owned();
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text[..end]
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().to_string())
                    })
                    .map(|v| v.parse::<usize>())
                    .transpose()?
                    .unwrap_or(0);
                break end + 4 + length;
            }
        };
        while read.len() < wanted {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                bail!("the client closed before the whole body");
            }
            read.extend_from_slice(&buf[..n]);
        }
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await?;
        Ok(String::from_utf8_lossy(&read).into_owned())
    });
    Ok((port, task))
}

#[tokio::test]
async fn status_headers_and_body_of_a_real_server() -> anyhow::Result<()> {
    let server = ChartServer::start(ChartServerOptions::default()).await?;
    std::fs::write(server.dir().join("index.yaml"), "apiVersion: v1\nentries: {}\n")?;
    let client = plain()?;

    let found = client
        .fetch(Request::get(uri(&format!("{}/index.yaml", server.url()))?), 1024, WAIT)
        .await?;
    assert_eq!(found.status, StatusCode::OK);
    assert_eq!(found.body, b"apiVersion: v1\nentries: {}\n");
    assert!(found.headers.contains_key(header::ETAG), "{:?}", found.headers);

    // An error status is an answer, not an error.
    let missing = client
        .fetch(Request::get(uri(&format!("{}/nothing", server.url()))?), 1024, WAIT)
        .await?;
    assert_eq!(
        (missing.status, missing.body.as_slice()),
        (StatusCode::NOT_FOUND, &b"not found"[..])
    );

    // Headers go as given: basic auth opens a protected server.
    let protected = ChartServer::start(ChartServerOptions {
        basic_auth: Some(("user".into(), "pw".into())),
        tls: false,
    })
    .await?;
    std::fs::write(protected.dir().join("a.txt"), "a")?;
    let url = uri(&format!("{}/a.txt", protected.url()))?;
    let refused = client.fetch(Request::get(url.clone()), 1024, WAIT).await?;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    let mut basic = capstan_http::HeaderValue::from_static("Basic dXNlcjpwdw==");
    basic.set_sensitive(true);
    let allowed = client
        .fetch(Request::get(url).header(header::AUTHORIZATION, basic), 1024, WAIT)
        .await?;
    assert_eq!((allowed.status, allowed.body.as_slice()), (StatusCode::OK, &b"a"[..]));
    Ok(())
}

#[tokio::test]
async fn https_trusts_the_system_roots_plus_the_callers_ca() -> anyhow::Result<()> {
    let server = ChartServer::start(ChartServerOptions {
        tls: true,
        ..Default::default()
    })
    .await?;
    std::fs::write(server.dir().join("a.txt"), "secure")?;
    let url = uri(&format!("{}/a.txt", server.url()))?;
    let ca = server.ca_pem().context("an HTTPS server has a CA")?.to_string();

    let err = match plain()?.fetch(Request::get(url.clone()), 1024, WAIT).await {
        Ok(answer) => bail!("a certificate of an unknown CA was accepted: {}", answer.status),
        Err(err) => err,
    };
    let text = chain(&err);
    assert!(
        matches!(err, Error::Unreachable(_)) && text.to_lowercase().contains("certificate"),
        "{text}"
    );

    let trusting = Client::new(&Options {
        extra_ca: Some(ca.clone()),
        ..Default::default()
    })?;
    let answer = trusting.fetch(Request::get(url.clone()), 1024, WAIT).await?;
    assert_eq!(
        (answer.status, answer.body.as_slice()),
        (StatusCode::OK, &b"secure"[..])
    );

    // Several certificates in one PEM text: another CA first, the server's second.
    let other = ChartServer::start(ChartServerOptions {
        tls: true,
        ..Default::default()
    })
    .await?;
    let both = format!("{}{ca}", other.ca_pem().context("a CA")?);
    let answer = Client::new(&Options {
        extra_ca: Some(both),
        ..Default::default()
    })?
    .fetch(Request::get(url.clone()), 1024, WAIT)
    .await?;
    assert_eq!(answer.status, StatusCode::OK);

    let insecure = Client::new(&Options {
        insecure: true,
        ..Default::default()
    })?;
    assert_eq!(
        insecure.fetch(Request::get(url), 1024, WAIT).await?.status,
        StatusCode::OK
    );
    Ok(())
}

#[tokio::test]
async fn bodies_are_read_up_to_the_limit() -> anyhow::Result<()> {
    let server = ChartServer::start(ChartServerOptions::default()).await?;
    std::fs::write(server.dir().join("hundred"), "x".repeat(100))?;
    let client = plain()?;
    let hundred = uri(&format!("{}/hundred", server.url()))?;

    assert_eq!(
        client.fetch(Request::get(hundred.clone()), 100, WAIT).await?.body.len(),
        100
    );
    let err = client.fetch(Request::get(hundred.clone()), 99, WAIT).await.err();
    assert!(matches!(err, Some(Error::TooLarge { limit: 99 })), "{err:?}");
    assert_eq!(
        err.map(|e| e.to_string()).unwrap_or_default(),
        "the answer is larger than the limit of 99 bytes"
    );

    // A declared length over the limit: nothing read, or nothing kept when cut.
    let cut = client.send(Request::get(hundred.clone())).await?.read_cut(10).await?;
    assert_eq!((cut.status, cut.body.len()), (StatusCode::OK, 0));

    // The answer to HEAD declares the length of a body it does not send.
    let head = client.send(Request::new(Method::HEAD, hundred)).await?.read(10).await?;
    assert_eq!((head.status, head.body.len()), (StatusCode::OK, 0));

    // A streamed body without a length is stopped at the limit, long before its end.
    let size = 64 << 20;
    server.generate("/huge", size);
    let huge = uri(&format!("{}/huge", server.url()))?;
    let err = client.fetch(Request::get(huge.clone()), 1 << 20, WAIT).await.err();
    assert!(matches!(err, Some(Error::TooLarge { limit: 1_048_576 })), "{err:?}");
    let cut = client.send(Request::get(huge)).await?.read_cut(100_000).await?;
    assert!(cut.body.len() <= 100_000 && cut.body.starts_with(b"apiVersion: v1\n"));
    assert!(
        server.generated_bytes_sent() < size,
        "the server stopped streaming: {} bytes sent",
        server.generated_bytes_sent()
    );
    Ok(())
}

#[tokio::test]
async fn a_post_sends_its_headers_and_body() -> anyhow::Result<()> {
    let (port, server) =
        answer_once("HTTP/1.1 201 Created\r\ncontent-type: text/plain\r\ncontent-length: 4\r\n\r\ndone".into()).await?;
    let request = Request::post(uri(&format!("http://127.0.0.1:{port}/hooks/a?x=1"))?, "{\"a\":1}")
        .header(
            header::CONTENT_TYPE,
            capstan_http::HeaderValue::from_static("application/json"),
        )
        .header(
            capstan_http::HeaderName::from_static("x-capstan"),
            capstan_http::HeaderValue::from_static("yes"),
        );
    let answer = plain()?.fetch(request, 1024, WAIT).await?;
    assert_eq!(answer.status, StatusCode::CREATED);
    assert_eq!(
        answer.headers.get(header::CONTENT_TYPE).map(|v| v.as_bytes()),
        Some(&b"text/plain"[..])
    );
    assert_eq!(answer.body, b"done");
    let seen = server.await??.to_ascii_lowercase();
    assert!(seen.starts_with("post /hooks/a?x=1 http/1.1\r\n"), "{seen}");
    for line in ["content-type: application/json", "x-capstan: yes", "content-length: 7"] {
        assert!(seen.contains(line), "{line} in {seen}");
    }
    assert!(seen.ends_with("\r\n\r\n{\"a\":1}"), "{seen}");
    Ok(())
}

#[tokio::test]
async fn a_redirect_is_an_answer_not_followed() -> anyhow::Result<()> {
    // The target is a second listener that would record a request if one came.
    let target = TcpListener::bind(("127.0.0.1", 0)).await?;
    let target_port = target.local_addr()?.port();
    let (port, server) = answer_once(format!(
        "HTTP/1.1 302 Found\r\nlocation: http://127.0.0.1:{target_port}/elsewhere\r\ncontent-length: 0\r\n\r\n"
    ))
    .await?;
    let answer = plain()?
        .fetch(Request::get(uri(&format!("http://127.0.0.1:{port}/here"))?), 1024, WAIT)
        .await?;
    assert_eq!(answer.status, StatusCode::FOUND);
    assert!(answer.headers.contains_key(header::LOCATION));
    server.await??;
    let followed = tokio::time::timeout(Duration::from_millis(300), target.accept()).await;
    assert!(followed.is_err(), "the redirect was followed");
    Ok(())
}

#[tokio::test]
async fn no_answer_in_time_and_no_server_are_errors() -> anyhow::Result<()> {
    // Accepts, reads and never answers.
    let silent = TcpListener::bind(("127.0.0.1", 0)).await?;
    let port = silent.local_addr()?.port();
    let _held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            open.push(stream);
        }
    });
    let url = uri(&format!("http://127.0.0.1:{port}/"))?;
    let err = plain()?
        .fetch(Request::get(url), 1024, Duration::from_millis(300))
        .await
        .err();
    assert!(matches!(err, Some(Error::Timeout { .. })), "{err:?}");
    assert_eq!(err.map(|e| e.to_string()).unwrap_or_default(), "no answer within 0.3 s");

    // A port nobody listens on.
    let closed = TcpListener::bind(("127.0.0.1", 0)).await?;
    let closed_port = closed.local_addr()?.port();
    drop(closed);
    let client = Client::new(&Options {
        connect_timeout: Some(Duration::from_secs(2)),
        ..Default::default()
    })?;
    let err = match client
        .fetch(
            Request::get(uri(&format!("http://127.0.0.1:{closed_port}/"))?),
            1024,
            WAIT,
        )
        .await
    {
        Ok(answer) => bail!("a closed port answered {}", answer.status),
        Err(err) => err,
    };
    let text = chain(&err);
    assert!(
        matches!(err, Error::Unreachable(_)) && text.contains("refused"),
        "{text}"
    );
    Ok(())
}

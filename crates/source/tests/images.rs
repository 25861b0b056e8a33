//! Image repositories in a real OCI registry (Debian's `docker-registry`), with images pushed
//! through the registry API: tags (paginated), digests, authentication over TLS, failures sorted
//! into what a user acts on, and policies choosing from real tag lists.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use capstan_source::image::{Order, Pick, Policy};
use capstan_source::{Credentials, ImageClient, ImageError, ImageRepository};
use capstan_testkit::registry::push_image;
use capstan_testkit::{Registry, RegistryOptions};

const USER: &str = "robot";
const PASSWORD: &str = "image-s3cret-pw";

fn client() -> ImageClient {
    ImageClient::new(Duration::from_secs(10))
}

fn repo(registry: &Registry, path: &str) -> anyhow::Result<ImageRepository> {
    Ok(ImageRepository::parse(&format!("{}/{path}", registry.host()))?.with_plain_http(true))
}

#[tokio::test]
async fn tags_are_listed_across_pages_and_digests_follow_pushes() -> anyhow::Result<()> {
    let registry = Registry::start(RegistryOptions::default()).await?;
    let none = Credentials::none();
    let mut pushed = Vec::new();
    for tag in ["1.0.0", "1.1.0", "1.2.0", "2.0.0", "latest", "main-9", "main-20"] {
        pushed.push((tag, push_image(&registry, "team/payments", tag)?));
    }
    let payments = repo(&registry, "team/payments")?;

    let mut expected: Vec<String> = pushed.iter().map(|(t, _)| t.to_string()).collect();
    expected.sort();
    let mut unpaged = client().tags(&payments, &none).await?;
    unpaged.sort();
    assert_eq!(unpaged, expected);

    // Debian's distribution 2.8 ignores `n=` and sends every tag at once, so pages come from a
    // front that slices the registry's real list as the spec says (`n`, `last`, a `Link` to the
    // next page). Pages of 2: four requests, every tag once.
    let (front, pages) = paging_front(registry.host()).await?;
    let fronted = ImageRepository::parse(&format!("{front}/team/payments"))?.with_plain_http(true);
    let paged = client().with_page_size(2).tags(&fronted, &none).await?;
    assert_eq!(paged, expected);
    assert_eq!(pages.load(Ordering::SeqCst), 4);
    let err = client()
        .with_page_size(2)
        .with_max_tags(5)
        .tags(&fronted, &none)
        .await
        .err();
    assert!(matches!(err, Some(ImageError::BadAnswer { .. })), "{err:?}");

    // More tags than allowed is refused, not truncated.
    let err = client()
        .with_page_size(2)
        .with_max_tags(3)
        .tags(&payments, &none)
        .await
        .err()
        .ok_or_else(|| anyhow::anyhow!("7 tags listed under a maximum of 3"))?;
    assert!(matches!(err, ImageError::BadAnswer { .. }), "{err}");

    let images = client();
    for (tag, digest) in &pushed {
        assert_eq!(&images.digest(&payments, tag, &none).await?, digest, "{tag}");
    }
    let before = images.digest(&payments, "latest", &none).await?;
    let repushed = push_image(&registry, "team/payments", "latest")?;
    let after = images.digest(&payments, "latest", &none).await?;
    assert_ne!(before, after, "a re-pushed tag has a new digest");
    assert_eq!(after, repushed);
    assert!(after.starts_with("sha256:") && after.len() == 71, "{after}");

    let err = images.digest(&payments, "9.9.9", &none).await.err();
    assert!(matches!(err, Some(ImageError::NotFound { .. })), "{err:?}");
    let err = images.tags(&repo(&registry, "team/nothing")?, &none).await.err();
    assert!(matches!(err, Some(ImageError::NotFound { .. })), "{err:?}");
    let err = images.digest(&payments, "../x", &none).await.err();
    assert!(matches!(err, Some(ImageError::InvalidReference { .. })), "{err:?}");
    Ok(())
}

#[tokio::test]
async fn basic_auth_over_tls_with_the_registry_ca() -> anyhow::Result<()> {
    let open = Registry::start(RegistryOptions::default()).await?;
    let digest = push_image(&open, "team/app", "1.0.0")?;
    let secured = open
        .sharing(RegistryOptions {
            basic_auth: Some((USER.into(), PASSWORD.into())),
            tls: true,
        })
        .await?;
    let app = ImageRepository::parse(&format!("{}/team/app", secured.host()))?;
    let creds = Credentials {
        username: Some(USER.into()),
        password: Some(PASSWORD.into()),
        tls_ca: secured.ca_pem().map(str::to_string),
        ..Credentials::default()
    };
    let images = client();
    assert_eq!(images.tags(&app, &creds).await?, ["1.0.0"]);
    assert_eq!(images.digest(&app, "1.0.0", &creds).await?, digest);

    let wrong = Credentials {
        password: Some("not-the-password".into()),
        ..creds.clone()
    };
    for attempt in [
        client().tags(&app, &wrong).await.err(),
        client().digest(&app, "1.0.0", &wrong).await.err(),
    ] {
        let err = attempt.ok_or_else(|| anyhow::anyhow!("a wrong password was accepted"))?;
        let text = format!("{err} {err:?}");
        assert!(matches!(err, ImageError::Unauthorized { .. }), "{text}");
        assert!(text.contains(&secured.host()), "names the registry: {text}");
        assert!(!text.contains("not-the-password") && !text.contains(PASSWORD), "{text}");
    }
    let anonymous = Credentials {
        tls_ca: creds.tls_ca.clone(),
        ..Credentials::default()
    };
    let err = client().tags(&app, &anonymous).await.err();
    assert!(matches!(err, Some(ImageError::Unauthorized { .. })), "{err:?}");

    // Without the CA the certificate is not trusted: the registry is unreachable, and says why.
    let untrusted = Credentials {
        tls_ca: None,
        ..creds.clone()
    };
    let err = client().tags(&app, &untrusted).await.err();
    let text = format!("{err:?}");
    assert!(matches!(err, Some(ImageError::Unreachable { .. })), "{text}");
    assert!(
        text.to_lowercase().contains("certificate") && !text.contains(PASSWORD),
        "{text}"
    );
    Ok(())
}

#[tokio::test]
async fn a_closed_port_is_unreachable() -> anyhow::Result<()> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let repo = ImageRepository::parse(&format!("127.0.0.1:{port}/team/app"))?.with_plain_http(true);
    let err = client().tags(&repo, &Credentials::none()).await.err();
    let text = err.as_ref().map(ToString::to_string).unwrap_or_default();
    assert!(matches!(err, Some(ImageError::Unreachable { .. })), "{err:?}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    Ok(())
}

/// The raw answer (head and body) to a GET of `path` on `host`.
async fn raw_get(host: &str, path: &str) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(host).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

/// A plain-HTTP front of the registry at `upstream` serving its tag lists in pages (`n`, `last`,
/// `Link: <…>; rel="next"`), counting the pages served.
async fn paging_front(upstream: String) -> anyhow::Result<(String, Arc<AtomicUsize>)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let host = listener.local_addr()?.to_string();
    let pages = Arc::new(AtomicUsize::new(0));
    let served = pages.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            let target = head.split(' ').nth(1).unwrap_or("/").to_string();
            let (path, query) = target.split_once('?').unwrap_or((&target, ""));
            let param = |key: &str| {
                query
                    .split('&')
                    .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
                    .map(str::to_string)
            };
            let answer = raw_get(&upstream, path).await.unwrap_or_default();
            let body = answer.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
            let mut list: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
            let mut tags: Vec<String> = list["tags"]
                .as_array()
                .map(|a| a.iter().filter_map(|t| t.as_str().map(str::to_string)).collect())
                .unwrap_or_default();
            tags.sort();
            let last = param("last");
            let n: usize = param("n").and_then(|n| n.parse().ok()).unwrap_or(usize::MAX);
            let rest: Vec<String> = tags
                .into_iter()
                .filter(|t| last.as_ref().is_none_or(|l| t > l))
                .collect();
            let page: Vec<String> = rest.iter().take(n).cloned().collect();
            let mut link = String::new();
            if rest.len() > page.len()
                && let Some(end) = page.last()
            {
                link = format!("Link: <{path}?n={n}&last={end}>; rel=\"next\"\r\n");
            }
            list["tags"] = serde_json::json!(page);
            let json = list.to_string();
            served.fetch_add(1, Ordering::SeqCst);
            let reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{link}Content-Length: {}\r\nConnection: close\r\n\r\n{json}",
                json.len()
            );
            let _ = stream.write_all(reply.as_bytes()).await;
            let _ = stream.shutdown().await;
        }
    });
    Ok((host, pages))
}

/// A loopback HTTP server answering every request with `status`, `content_type` and `body`.
async fn junk_server(content_type: &'static str, body: &'static str) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let host = listener.local_addr()?.to_string();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let _ = stream.read(&mut buf).await;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    Ok(host)
}

#[tokio::test]
async fn garbage_answers_are_bad_answers() -> anyhow::Result<()> {
    let host = junk_server("application/json", "<html>this is not a registry</html>").await?;
    let repo = ImageRepository::parse(&format!("{host}/team/app"))?.with_plain_http(true);
    let err = client().tags(&repo, &Credentials::none()).await.err();
    assert!(matches!(err, Some(ImageError::BadAnswer { .. })), "{err:?}");
    // A manifest of the wrong type, or not JSON, is not a digest.
    let err = client().digest(&repo, "latest", &Credentials::none()).await.err();
    assert!(matches!(err, Some(ImageError::BadAnswer { .. })), "{err:?}");
    let host = junk_server("text/html", "{\"tags\": 3}").await?;
    let repo = ImageRepository::parse(&format!("{host}/team/app"))?.with_plain_http(true);
    let err = client().digest(&repo, "latest", &Credentials::none()).await.err();
    let text = format!("{err:?}");
    assert!(
        matches!(err, Some(ImageError::BadAnswer { .. })) && text.contains("text/html"),
        "{text}"
    );
    let err = client().tags(&repo, &Credentials::none()).await.err();
    assert!(matches!(err, Some(ImageError::BadAnswer { .. })), "{err:?}");
    Ok(())
}

#[tokio::test]
async fn policies_choose_from_real_tag_lists() -> anyhow::Result<()> {
    let registry = Registry::start(RegistryOptions::default()).await?;
    for tag in [
        "1.0.0",
        "v1.2.0",
        "1.3.0-rc.1",
        "2.0.0",
        "latest",
        "main-9",
        "main-20",
        "main-x",
    ] {
        push_image(&registry, "team/web", tag)?;
    }
    let web = repo(&registry, "team/web")?;
    let none = Credentials::none();
    let images = client().with_page_size(3);
    let tags = images.tags(&web, &none).await?;

    let semver = Policy::Semver {
        constraint: "^1".into(),
        allow_prerelease: false,
    };
    let choice = semver.choose(&tags)?;
    assert_eq!(choice.tag, "v1.2.0");
    for tag in ["latest", "main-9", "main-20", "main-x"] {
        let skipped = choice.skipped.iter().find(|s| s.tag == tag);
        assert!(
            skipped.is_some_and(|s| s.reason.contains("not a semantic version")),
            "{tag}: {skipped:?}"
        );
    }
    let with_rc = Policy::Semver {
        constraint: "^1".into(),
        allow_prerelease: true,
    };
    assert_eq!(with_rc.choose(&tags)?.tag, "1.3.0-rc.1");

    let pattern = Policy::Pattern {
        regex: r"^main-(?P<ts>\d+)$".into(),
        extract: Some("$ts".into()),
        order: Order::Numerical,
        pick: Pick::Highest,
    };
    let choice = pattern.choose(&tags)?;
    assert_eq!(choice.tag, "main-20", "20 is newer than 9");
    assert!(choice.skipped.iter().any(|s| s.tag == "main-x"));

    let digest = Policy::Digest { tag: "latest".into() };
    let chosen = digest.choose(&tags)?.tag;
    let first = images.digest(&web, &chosen, &none).await?;
    let repushed = push_image(&registry, "team/web", "latest")?;
    let second = images
        .digest(&web, &digest.choose(&images.tags(&web, &none).await?)?.tag, &none)
        .await?;
    assert_ne!(first, second);
    assert_eq!(second, repushed);
    Ok(())
}

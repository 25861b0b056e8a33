//! Charts from a real Helm repository: charts made with `helm package`, indexes with
//! `helm repo index`, served by a static HTTP(S) server on loopback.

use std::path::Path;
use std::time::{Duration, Instant};

use capstan_source::{ChartCache, ChartError, ChartLimits, ChartRequest, Credentials};
use capstan_testkit::charts::{index_repository, package_chart};
use capstan_testkit::{ChartServer, ChartServerOptions};

const VERSIONS: &[&str] = &["1.0.0", "1.1.0", "1.2.0", "1.2.5", "2.0.0-rc.1", "2.0.0", "3.1.4"];
const PASSWORD: &str = "chart-s3cret";

/// A repository holding `demo` at every version of [`VERSIONS`], indexed with absolute URLs.
async fn repository(options: ChartServerOptions) -> anyhow::Result<ChartServer> {
    let server = ChartServer::start(options).await?;
    for v in VERSIONS {
        package_chart(server.dir(), "demo", v)?;
    }
    index_repository(server.dir(), Some(&server.url()))?;
    Ok(server)
}

fn request(url: &str, revision: &str) -> ChartRequest {
    ChartRequest {
        repo_url: url.to_string(),
        chart: "demo".into(),
        target_revision: revision.into(),
        plain_http: false,
    }
}

fn cache(root: &Path) -> ChartCache {
    ChartCache::new(root, Duration::from_secs(10), Duration::from_secs(300))
}

fn chart_version(dir: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(dir.join("Chart.yaml"))?;
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix("version: "))
        .unwrap_or_default()
        .to_string())
}

#[tokio::test]
async fn exact_versions_and_each_constraint_form_resolve_and_fetch() -> anyhow::Result<()> {
    let server = repository(ChartServerOptions::default()).await?;
    let root = tempfile::tempdir()?;
    let charts = cache(root.path());
    let none = Credentials::none();
    for (revision, expected) in [
        ("1.2.0", "1.2.0"),
        ("v1.1.0", "1.1.0"),
        ("1.2.*", "1.2.5"),
        ("1.2.x", "1.2.5"),
        (">=1.0.0 <2.0.0", "1.2.5"),
        ("^3.1", "3.1.4"),
        ("~1.2", "1.2.5"),
        ("^1.0 || ^2.0", "2.0.0"),
        (">=2.0.0-0 <2.0.0", "2.0.0-rc.1"),
        ("", "3.1.4"),
        ("*", "3.1.4"),
    ] {
        let resolved = charts.resolve(&request(&server.url(), revision), &none, false).await?;
        assert_eq!(resolved.version, expected, "{revision:?}");
        assert_eq!(resolved.url, format!("{}/demo-{expected}.tgz", server.url()));
        let dir = charts.fetch(&resolved, &none).await?;
        assert_eq!(chart_version(&dir)?, expected, "{revision:?}");
        assert!(dir.join("templates/configmap.yaml").is_file());
    }
    assert_eq!(
        server.requests("/index.yaml"),
        1,
        "one index for every resolution within the TTL"
    );
    Ok(())
}

#[tokio::test]
async fn a_version_matching_nothing_lists_the_highest_available() -> anyhow::Result<()> {
    let server = repository(ChartServerOptions::default()).await?;
    let root = tempfile::tempdir()?;
    let err = cache(root.path())
        .resolve(&request(&server.url(), ">=4.0.0"), &Credentials::none(), false)
        .await
        .expect_err("nothing matches");
    let text = err.to_string();
    assert!(matches!(err, ChartError::NoMatchingVersion { .. }), "{text}");
    for shown in [
        "demo",
        ">=4.0.0",
        "3.1.4, 2.0.0, 2.0.0-rc.1, 1.2.5, 1.2.0",
        &server.url(),
    ] {
        assert!(text.contains(shown), "{shown:?} missing from {text}");
    }
    let err = cache(root.path())
        .resolve(
            &ChartRequest {
                chart: "absent".into(),
                ..request(&server.url(), "1.0.0")
            },
            &Credentials::none(),
            false,
        )
        .await
        .expect_err("no such chart");
    assert!(matches!(err, ChartError::ChartNotFound { .. }), "{err}");
    Ok(())
}

#[tokio::test]
async fn one_index_request_for_concurrent_resolves_304_on_refresh_no_second_download() -> anyhow::Result<()> {
    let server = repository(ChartServerOptions::default()).await?;
    let root = tempfile::tempdir()?;
    let charts = cache(root.path());
    let none = Credentials::none();
    let req = request(&server.url(), "^1.0");
    let all = futures_join(&charts, &req, &none, 20).await?;
    assert!(all.iter().all(|r| r.version == "1.2.5"));
    assert_eq!(server.requests("/index.yaml"), 1);
    let stats = charts.stats(&server.url());
    assert_eq!((stats.index_requests, stats.index_not_modified), (1, 0));

    // A forced refresh is a conditional request: 304, and the parsed index is kept.
    let again = charts.resolve(&req, &none, true).await?;
    assert_eq!(again, all[0]);
    assert_eq!(server.requests("/index.yaml"), 2);
    assert_eq!(server.not_modified(), 1);
    assert_eq!(charts.stats(&server.url()).index_not_modified, 1);

    // One download whatever the number of fetches, and none for a new cache on the same directory.
    for _ in 0..3 {
        charts.fetch(&again, &none).await?;
    }
    assert_eq!(server.requests("/demo-1.2.5.tgz"), 1);
    assert_eq!(charts.stats(&server.url()).archive_downloads, 1);
    let restarted = cache(root.path());
    let resolved = restarted.resolve(&req, &none, false).await?;
    let dir = restarted.fetch(&resolved, &none).await?;
    assert_eq!(chart_version(&dir)?, "1.2.5");
    assert_eq!(server.requests("/demo-1.2.5.tgz"), 1, "cached on disk by digest");

    // A new version published: a forced refresh sees it.
    package_chart(server.dir(), "demo", "1.3.0")?;
    index_repository(server.dir(), Some(&server.url()))?;
    let newer = charts.resolve(&req, &none, true).await?;
    assert_eq!(newer.version, "1.3.0");
    Ok(())
}

async fn futures_join(
    charts: &ChartCache,
    req: &ChartRequest,
    creds: &Credentials,
    n: usize,
) -> anyhow::Result<Vec<capstan_source::ResolvedChart>> {
    let mut set = Vec::new();
    for _ in 0..n {
        set.push(charts.resolve(req, creds, false));
    }
    let results = futures::future::join_all(set).await;
    Ok(results.into_iter().collect::<Result<_, _>>()?)
}

#[tokio::test]
async fn basic_auth_is_sent_and_a_wrong_password_is_refused_without_showing_it() -> anyhow::Result<()> {
    let server = repository(ChartServerOptions {
        basic_auth: Some(("reader".into(), PASSWORD.into())),
        tls: false,
    })
    .await?;
    let root = tempfile::tempdir()?;
    let good = Credentials {
        username: Some("reader".into()),
        password: Some(PASSWORD.into()),
        ..Default::default()
    };
    let charts = cache(root.path());
    let resolved = charts.resolve(&request(&server.url(), "1.0.0"), &good, false).await?;
    assert_eq!(chart_version(&charts.fetch(&resolved, &good).await?)?, "1.0.0");

    let wrong = Credentials {
        password: Some("not-the-password".into()),
        ..good.clone()
    };
    for creds in [wrong, Credentials::none()] {
        let err = cache(root.path())
            .resolve(&request(&server.url(), "1.0.0"), &creds, false)
            .await
            .expect_err("refused");
        let text = err.to_string();
        assert!(text.contains("401") && text.contains("authentication failed"), "{text}");
        assert!(text.contains(&server.url()), "{text}");
        assert!(!text.contains("not-the-password") && !text.contains(PASSWORD), "{text}");
    }
    Ok(())
}

#[tokio::test]
async fn https_with_the_repository_ca_and_refused_without_it() -> anyhow::Result<()> {
    let server = repository(ChartServerOptions {
        basic_auth: None,
        tls: true,
    })
    .await?;
    let root = tempfile::tempdir()?;
    let with_ca = Credentials {
        tls_ca: server.ca_pem().map(str::to_string),
        ..Default::default()
    };
    let charts = cache(root.path());
    let resolved = charts.resolve(&request(&server.url(), "^1"), &with_ca, false).await?;
    assert!(resolved.url.starts_with("https://"));
    assert_eq!(chart_version(&charts.fetch(&resolved, &with_ca).await?)?, "1.2.5");

    let err = cache(root.path())
        .resolve(&request(&server.url(), "^1"), &Credentials::none(), false)
        .await
        .expect_err("unknown CA");
    assert!(
        matches!(err, ChartError::Unreachable { .. }) && err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );
    let insecure = Credentials {
        insecure: true,
        ..Default::default()
    };
    cache(root.path())
        .resolve(&request(&server.url(), "^1"), &insecure, false)
        .await?;
    Ok(())
}

#[tokio::test]
async fn relative_urls_and_credentials_only_for_the_repository_origin() -> anyhow::Result<()> {
    // Relative URLs (an index made without --url).
    let relative = ChartServer::start(ChartServerOptions::default()).await?;
    package_chart(relative.dir(), "demo", "1.0.0")?;
    index_repository(relative.dir(), None)?;
    let root = tempfile::tempdir()?;
    let charts = cache(root.path());
    let none = Credentials::none();
    let resolved = charts
        .resolve(&request(&format!("{}/", relative.url()), "1.0.0"), &none, false)
        .await?;
    assert_eq!(resolved.url, format!("{}/demo-1.0.0.tgz", relative.url()));
    charts.fetch(&resolved, &none).await?;

    // An index behind basic auth whose archives are on another host (another port): the
    // credentials go to the repository, never to the other origin.
    let archives = ChartServer::start(ChartServerOptions::default()).await?;
    package_chart(archives.dir(), "demo", "2.0.0")?;
    index_repository(archives.dir(), Some(&archives.url()))?;
    let private = ChartServer::start(ChartServerOptions {
        basic_auth: Some(("reader".into(), PASSWORD.into())),
        tls: false,
    })
    .await?;
    std::fs::copy(archives.dir().join("index.yaml"), private.dir().join("index.yaml"))?;
    let creds = Credentials {
        username: Some("reader".into()),
        password: Some(PASSWORD.into()),
        ..Default::default()
    };
    let resolved = charts.resolve(&request(&private.url(), "2.0.0"), &creds, false).await?;
    assert_eq!(resolved.url, format!("{}/demo-2.0.0.tgz", archives.url()));
    assert_eq!(chart_version(&charts.fetch(&resolved, &creds).await?)?, "2.0.0");
    assert_eq!(archives.requests("/demo-2.0.0.tgz"), 1);
    assert_eq!(
        archives.requests_with_authorization(),
        0,
        "credentials leaked to another origin"
    );
    assert_eq!(private.requests_with_authorization(), 1);
    Ok(())
}

#[tokio::test]
async fn urls_other_than_http_are_refused() -> anyhow::Result<()> {
    let root = tempfile::tempdir()?;
    let charts = cache(root.path());
    for url in ["file:///etc", "ftp://127.0.0.1/x", "http://user:pw@127.0.0.1:1/x"] {
        let err = charts
            .resolve(&request(url, "1.0.0"), &Credentials::none(), false)
            .await
            .expect_err("refused");
        assert!(
            matches!(err, ChartError::UnsupportedUrl { .. }) && !err.to_string().contains(":pw@"),
            "{err}"
        );
    }
    // An index pointing an archive at file://.
    let server = ChartServer::start(ChartServerOptions::default()).await?;
    write_index(server.dir(), "demo", "1.0.0", "file:///etc/passwd", &"0".repeat(64))?;
    let err = charts
        .resolve(&request(&server.url(), "1.0.0"), &Credentials::none(), false)
        .await
        .expect_err("refused");
    assert!(matches!(err, ChartError::UnsupportedUrl { .. }), "{err}");
    Ok(())
}

#[tokio::test]
async fn an_unreachable_repository_is_a_clear_error() -> anyhow::Result<()> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let url = format!("http://127.0.0.1:{port}");
    let root = tempfile::tempdir()?;
    let started = Instant::now();
    let err = cache(root.path())
        .resolve(&request(&url, "1.0.0"), &Credentials::none(), false)
        .await
        .expect_err("nothing listens");
    assert!(matches!(err, ChartError::Unreachable { .. }), "{err}");
    assert!(err.to_string().contains(&url), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
    Ok(())
}

/// An `index.yaml` with one entry, written by hand.
fn write_index(dir: &Path, chart: &str, version: &str, url: &str, digest: &str) -> anyhow::Result<()> {
    std::fs::write(
        dir.join("index.yaml"),
        format!(
            "apiVersion: v1\nentries:\n  {chart}:\n  - apiVersion: v2\n    name: {chart}\n    version: {version}\n    digest: {digest}\n    urls:\n    - {url}\n"
        ),
    )?;
    Ok(())
}

fn sha256(bytes: &[u8]) -> String {
    capstan_testkit::registry::sha256_digest(bytes)
        .trim_start_matches("sha256:")
        .to_string()
}

/// Serve `archive` as `demo` 1.0.0 (with its true digest) and fetch it.
async fn fetch_archive(archive: &[u8]) -> anyhow::Result<(ChartError, tempfile::TempDir)> {
    let server = ChartServer::start(ChartServerOptions::default()).await?;
    std::fs::write(server.dir().join("demo-1.0.0.tgz"), archive)?;
    write_index(server.dir(), "demo", "1.0.0", "demo-1.0.0.tgz", &sha256(archive))?;
    let root = tempfile::tempdir()?;
    let charts = cache(root.path());
    let resolved = charts
        .resolve(&request(&server.url(), "1.0.0"), &Credentials::none(), false)
        .await?;
    let err = charts
        .fetch(&resolved, &Credentials::none())
        .await
        .expect_err("archive refused");
    Ok((err, root))
}

/// Nothing is left under the cache's chart directory (no half-extracted chart).
fn assert_nothing_extracted(root: &Path) {
    let dir = root.join("charts");
    let left: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left behind in {}: {left:?}", dir.display());
}

#[tokio::test]
async fn truncated_and_corrupt_archives_are_refused() -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    let good = std::fs::read(package_chart(work.path(), "demo", "1.0.0")?)?;
    for (what, bytes) in [
        ("truncated", good[..good.len() / 2].to_vec()),
        ("not gzip", b"this is not a chart archive".to_vec()),
    ] {
        let (err, root) = fetch_archive(&bytes).await?;
        let text = err.to_string();
        assert!(matches!(err, ChartError::Archive { .. }), "{what}: {text}");
        assert!(
            text.contains("\"demo\"") && text.contains("1.0.0") && text.contains("127.0.0.1"),
            "{text}"
        );
        assert_nothing_extracted(root.path());
    }
    Ok(())
}

/// One crafted tar entry: raw path, type, link target, content.
type Crafted<'a> = (&'a str, tar::EntryType, &'a str, &'a [u8]);

/// A `.tgz` of `entries`: (raw path, type, link target, content). Paths are written into the header
/// bytes directly, bypassing the `tar` crate's own checks, as an attacker's tool would.
fn crafted(entries: &[Crafted<'_>]) -> anyhow::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast()));
    for (path, kind, link, content) in entries {
        let mut header = tar::Header::new_old();
        let name = &mut header.as_old_mut().name;
        name[..path.len()].copy_from_slice(path.as_bytes());
        let linkname = &mut header.as_old_mut().linkname;
        linkname[..link.len()].copy_from_slice(link.as_bytes());
        header.set_entry_type(*kind);
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder.append(&header, *content)?;
    }
    Ok(builder.into_inner()?.finish()?)
}

#[tokio::test]
async fn archives_escaping_their_directory_or_holding_links_are_refused() -> anyhow::Result<()> {
    use tar::EntryType::{Link, Regular, Symlink};
    let chart_yaml: &[u8] = b"apiVersion: v2\nname: demo\nversion: 1.0.0\n";
    let cases: Vec<(&str, Vec<Crafted<'_>>, &str)> = vec![
        (
            "dot-dot",
            vec![
                ("demo/Chart.yaml", Regular, "", chart_yaml),
                ("demo/../../escaped.txt", Regular, "", b"x"),
            ],
            "'..'",
        ),
        (
            "absolute",
            vec![
                ("demo/Chart.yaml", Regular, "", chart_yaml),
                ("/tmp/capstan-absolute-escape.txt", Regular, "", b"x"),
            ],
            "absolute",
        ),
        (
            "symlink",
            vec![
                ("demo/Chart.yaml", Regular, "", chart_yaml),
                ("demo/values.yaml", Symlink, "/etc/passwd", b""),
            ],
            "symlink",
        ),
        (
            "hard link",
            vec![
                ("demo/Chart.yaml", Regular, "", chart_yaml),
                ("demo/values.yaml", Link, "/etc/passwd", b""),
            ],
            "hard link",
        ),
    ];
    for (what, entries, expected) in cases {
        let (err, root) = fetch_archive(&crafted(&entries)?).await?;
        let text = err.to_string();
        assert!(
            matches!(err, ChartError::Archive { .. }) && text.contains(expected),
            "{what}: {text}"
        );
        assert_nothing_extracted(root.path());
        assert!(!root.path().join("escaped.txt").exists());
    }
    assert!(!Path::new("/tmp/capstan-absolute-escape.txt").exists());
    // The same crafting, harmless, is accepted: the refusals above are about the entries.
    let ok = crafted(&[("demo/Chart.yaml", Regular, "", chart_yaml)])?;
    let server = ChartServer::start(ChartServerOptions::default()).await?;
    std::fs::write(server.dir().join("demo-1.0.0.tgz"), &ok)?;
    write_index(server.dir(), "demo", "1.0.0", "demo-1.0.0.tgz", &sha256(&ok))?;
    let root = tempfile::tempdir()?;
    let charts = cache(root.path());
    let resolved = charts
        .resolve(&request(&server.url(), "1.0.0"), &Credentials::none(), false)
        .await?;
    assert_eq!(
        chart_version(&charts.fetch(&resolved, &Credentials::none()).await?)?,
        "1.0.0"
    );
    Ok(())
}

#[tokio::test]
async fn an_archive_over_the_limits_is_refused() -> anyhow::Result<()> {
    let big = vec![b'a'; 2 << 20];
    let archive = crafted(&[
        (
            "demo/Chart.yaml",
            tar::EntryType::Regular,
            "",
            b"apiVersion: v2\nname: demo\nversion: 1.0.0\n",
        ),
        ("demo/big.txt", tar::EntryType::Regular, "", &big),
    ])?;
    let server = ChartServer::start(ChartServerOptions::default()).await?;
    std::fs::write(server.dir().join("demo-1.0.0.tgz"), &archive)?;
    write_index(server.dir(), "demo", "1.0.0", "demo-1.0.0.tgz", &sha256(&archive))?;
    let root = tempfile::tempdir()?;
    let charts = cache(root.path()).with_limits(ChartLimits {
        max_chart_bytes: 1 << 20,
        ..ChartLimits::default()
    });
    let resolved = charts
        .resolve(&request(&server.url(), "1.0.0"), &Credentials::none(), false)
        .await?;
    let err = charts
        .fetch(&resolved, &Credentials::none())
        .await
        .expect_err("too large");
    assert!(err.to_string().contains("limit"), "{err}");
    assert_nothing_extracted(root.path());
    Ok(())
}

#[tokio::test]
async fn a_digest_different_from_the_index_is_refused() -> anyhow::Result<()> {
    let server = ChartServer::start(ChartServerOptions::default()).await?;
    package_chart(server.dir(), "demo", "1.0.0")?;
    let claimed = "ab".repeat(32);
    write_index(server.dir(), "demo", "1.0.0", "demo-1.0.0.tgz", &claimed)?;
    let root = tempfile::tempdir()?;
    let charts = cache(root.path());
    let resolved = charts
        .resolve(&request(&server.url(), "1.0.0"), &Credentials::none(), false)
        .await?;
    let err = charts
        .fetch(&resolved, &Credentials::none())
        .await
        .expect_err("mismatch");
    let text = err.to_string();
    assert!(matches!(err, ChartError::DigestMismatch { .. }), "{text}");
    for shown in ["\"demo\"", "1.0.0", &server.url(), &claimed] {
        assert!(text.contains(shown), "{shown} missing from {text}");
    }
    assert_nothing_extracted(root.path());
    Ok(())
}

#[tokio::test]
async fn a_huge_index_is_cut_at_the_limit_quickly() -> anyhow::Result<()> {
    let server = ChartServer::start(ChartServerOptions::default()).await?;
    server.generate("/index.yaml", 500 << 20);
    let root = tempfile::tempdir()?;
    let started = Instant::now();
    let err = cache(root.path())
        .resolve(&request(&server.url(), "1.0.0"), &Credentials::none(), false)
        .await
        .expect_err("too large");
    assert!(matches!(err, ChartError::TooLarge { .. }), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    let sent = server.generated_bytes_sent();
    assert!(
        sent < 64 << 20,
        "the server sent {sent} bytes: the client read past its limit"
    );
    Ok(())
}

#[tokio::test]
async fn an_index_with_absurd_nesting_or_aliases_is_refused() -> anyhow::Result<()> {
    let server = ChartServer::start(ChartServerOptions::default()).await?;
    let root = tempfile::tempdir()?;
    let mut laughs = String::from("apiVersion: v1\na0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..12 {
        let prev = format!("*a{}", i - 1);
        laughs.push_str(&format!("a{i}: &a{i} [{}]\n", vec![prev; 10].join(", ")));
    }
    laughs.push_str("entries:\n  demo: *a11\n");
    let deep = format!(
        "apiVersion: v1\nentries:\n  demo: {}{}\n",
        "[".repeat(5000),
        "]".repeat(5000)
    );
    for (what, text) in [("aliases", laughs), ("nesting", deep)] {
        std::fs::write(server.dir().join("index.yaml"), text)?;
        let started = Instant::now();
        let err = cache(root.path())
            .resolve(&request(&server.url(), "1.0.0"), &Credentials::none(), false)
            .await
            .expect_err("refused");
        assert!(matches!(err, ChartError::Index { .. }), "{what}: {err}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{what}: took {:?}",
            started.elapsed()
        );
    }
    Ok(())
}

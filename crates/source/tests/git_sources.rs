//! Revision resolution, the shared cache and checkouts, against real git servers.

use std::time::Duration;

use capstan_source::{Credentials, RepoCache, SourceError};
use capstan_testkit::{GitServer, git, run_git};

fn cache(dir: &std::path::Path) -> RepoCache {
    RepoCache::new(dir, Duration::from_secs(30), Duration::from_secs(10)).with_local_repositories(true)
}

fn http_creds() -> Credentials {
    Credentials {
        username: Some(git::USER.into()),
        password: Some(git::PASSWORD.into()),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolves_every_kind_of_revision_and_checks_out_the_tree() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    server.create_repo("apps")?;
    let first = server.commit("apps", "main", &[("app/cm.yaml", Some("v: 1\n"))], "one")?;
    let second = server.commit("apps", "main", &[("app/cm.yaml", Some("v: 2\n"))], "two")?;
    let dev = server.commit("apps", "dev", &[("app/cm.yaml", Some("v: dev\n"))], "dev")?;
    let bare = server.repo_path("apps");
    run_git(&bare, &["tag", "-a", "v1.0.0", "-m", "release", &first])?;
    run_git(&bare, &["tag", "light", &second])?;

    let dir = tempfile::tempdir()?;
    let cache = cache(dir.path());
    let url = server.git_url("apps");
    let none = Credentials::none();
    assert_eq!(cache.resolve(&url, "main", &none, false).await?.sha, second);
    assert_eq!(cache.resolve(&url, "HEAD", &none, false).await?.sha, second);
    assert_eq!(cache.resolve(&url, "", &none, false).await?.sha, second);
    assert_eq!(cache.resolve(&url, "dev", &none, false).await?.sha, dev);
    assert_eq!(
        cache.resolve(&url, "v1.0.0", &none, false).await?.sha,
        first,
        "annotated tag peels to its commit"
    );
    assert_eq!(cache.resolve(&url, "light", &none, false).await?.sha, second);
    assert_eq!(cache.resolve(&url, &first, &none, false).await?.sha, first);
    assert_eq!(
        cache.resolve(&url, &first[..8], &none, false).await?.sha,
        first,
        "short SHA"
    );

    let err = cache
        .resolve(&url, "no-such-branch", &none, false)
        .await
        .expect_err("unknown revision");
    assert!(matches!(err, SourceError::UnknownRevision { .. }), "{err}");
    assert!(err.to_string().contains("no-such-branch"), "{err}");

    let tree = cache.checkout(&url, &first).await?;
    assert_eq!(std::fs::read_to_string(tree.join("app/cm.yaml"))?, "v: 1\n");
    let tree2 = cache.checkout(&url, &second).await?;
    assert_eq!(std::fs::read_to_string(tree2.join("app/cm.yaml"))?, "v: 2\n");
    assert_eq!(
        cache.checkout(&url, &first).await?,
        tree,
        "a commit is checked out once"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_callers_share_one_ref_listing_and_nothing_is_fetched_when_nothing_moved() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    server.create_repo("shared")?;
    let sha = server.commit("shared", "main", &[("a.yaml", Some("a: 1\n"))], "one")?;
    let dir = tempfile::tempdir()?;
    let cache = std::sync::Arc::new(cache(dir.path()));
    let url = server.git_url("shared");

    let mut tasks = Vec::new();
    for _ in 0..50 {
        let (cache, url) = (cache.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            cache.resolve(&url, "main", &Credentials::none(), false).await
        }));
    }
    for t in tasks {
        assert_eq!(t.await??.sha, sha);
    }
    let stats = cache.stats(&url);
    assert_eq!(stats.ls_remotes, 1, "50 resolutions within the TTL share one ls-remote");
    assert_eq!(stats.fetches, 1, "the commit is fetched once");

    // A forced refresh lists refs again but fetches nothing when nothing moved.
    cache.resolve(&url, "main", &Credentials::none(), true).await?;
    let stats = cache.stats(&url);
    assert_eq!((stats.ls_remotes, stats.fetches), (2, 1));

    // A new commit is seen on the next forced refresh and fetched once.
    let newer = server.commit("shared", "main", &[("a.yaml", Some("a: 2\n"))], "two")?;
    assert_eq!(
        cache.resolve(&url, "main", &Credentials::none(), true).await?.sha,
        newer
    );
    assert_eq!(cache.stats(&url).fetches, 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_basic_auth_works_and_failures_never_show_the_password() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    server.create_repo("private")?;
    let sha = server.commit("private", "main", &[("x.yaml", Some("x: 1\n"))], "x")?;
    let dir = tempfile::tempdir()?;
    let cache = cache(dir.path());
    let url = server.http_url("private");

    assert_eq!(cache.resolve(&url, "main", &http_creds(), false).await?.sha, sha);
    assert!(cache.checkout(&url, &sha).await?.join("x.yaml").exists());

    let wrong = Credentials {
        password: Some("wrong-password-123".into()),
        ..http_creds()
    };
    let err = cache
        .resolve(&url, "main", &wrong, true)
        .await
        .expect_err("wrong password");
    let msg = err.to_string();
    assert!(!msg.contains("wrong-password-123"), "password leaked: {msg}");
    assert!(msg.contains(&url), "names the repository: {msg}");

    // Credentials embedded in the URL are redacted too.
    let embedded = server
        .http_url_with_credentials("private")
        .replace(git::PASSWORD, "embedded-secret-9");
    let err = cache
        .resolve(&embedded, "main", &Credentials::none(), true)
        .await
        .expect_err("bad embedded password");
    assert!(!err.to_string().contains("embedded-secret-9"), "{err}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_a_private_ca_works_once_the_ca_is_given() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    server.create_repo("tls")?;
    let sha = server.commit("tls", "main", &[("x.yaml", Some("x: 1\n"))], "x")?;
    let dir = tempfile::tempdir()?;
    let cache = cache(dir.path());
    let url = server.https_url("tls");

    // Nobody trusts the server's CA yet: a clear error, no password in it.
    let err = cache
        .resolve(&url, "main", &http_creds(), true)
        .await
        .expect_err("an untrusted certificate");
    let msg = err.to_string();
    assert!(msg.contains(&url) && msg.contains("certificate"), "{msg}");
    assert!(!msg.contains(git::PASSWORD), "password leaked: {msg}");

    // With the CA in the credentials: resolved, fetched, checked out.
    let trusted = Credentials {
        tls_ca: Some(server.ca_pem().to_string()),
        ..http_creds()
    };
    assert_eq!(cache.resolve(&url, "main", &trusted, true).await?.sha, sha);
    assert!(cache.checkout(&url, &sha).await?.join("x.yaml").exists());

    // Another CA is not enough.
    let other = GitServer::start().await?;
    let wrong = Credentials {
        tls_ca: Some(other.ca_pem().to_string()),
        ..http_creds()
    };
    let err = cache.resolve(&url, "main", &wrong, true).await.expect_err("another CA");
    assert!(err.to_string().contains("certificate"), "{err}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_repositories_and_bad_urls_fail_clearly() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let cache = cache(dir.path());
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let url = format!("git://127.0.0.1:{closed}/nothing.git");
    let err = cache
        .resolve(&url, "main", &Credentials::none(), false)
        .await
        .expect_err("unreachable");
    assert!(matches!(err, SourceError::Git { .. }), "{err}");
    assert!(err.to_string().contains(&url), "{err}");

    let err = cache
        .resolve("--upload-pack=touch /tmp/pwned", "main", &Credentials::none(), false)
        .await
        .expect_err("bad url");
    assert!(matches!(err, SourceError::UnsupportedUrl(_)), "{err}");

    let local = tempfile::tempdir()?;
    run_git(local.path(), &["init", "--quiet", "--initial-branch=main"])?;
    std::fs::write(local.path().join("f.yaml"), "f: 1\n")?;
    run_git(local.path(), &["add", "."])?;
    run_git(
        local.path(),
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t.invalid",
            "commit",
            "--quiet",
            "-m",
            "f",
        ],
    )?;
    let file_url = format!("file://{}", local.path().display());
    let resolved = cache.resolve(&file_url, "main", &Credentials::none(), false).await?;
    assert!(
        cache.checkout(&file_url, &resolved.sha).await?.join("f.yaml").exists(),
        "file:// works"
    );
    Ok(())
}

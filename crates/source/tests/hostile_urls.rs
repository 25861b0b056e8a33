//! Hostile repository URLs and revisions against the source stage, with real git servers: nothing
//! they name is run, no local file is read, no other repository is reached, and nothing is fetched
//! when the spelling itself is refused.

use std::time::Duration;

use capstan_source::{Credentials, RepoCache, SourceError};
use capstan_testkit::GitServer;

fn cache(dir: &std::path::Path) -> RepoCache {
    RepoCache::new(dir, Duration::from_secs(30), Duration::from_secs(10))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_repositories_are_refused_unless_the_operator_enables_them() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    server.create_repo("private")?;
    server.commit("private", "main", &[("secret.yaml", Some("k: v\n"))], "one")?;
    let dir = tempfile::tempdir()?;
    let path = server.repo_path("private");
    for url in [
        format!("file://{}", path.display()),
        format!("file://localhost{}", path.display()),
        path.display().to_string(),
    ] {
        let err = cache(dir.path())
            .resolve(&url, "main", &Credentials::none(), true)
            .await
            .expect_err("a local repository");
        assert!(matches!(err, SourceError::UnsupportedUrl(_)), "{url}: {err}");
        assert!(err.to_string().contains("--allow-local-repositories"), "{err}");
    }
    // Enabled by the operator, the same URL works.
    let allowed = cache(dir.path()).with_local_repositories(true);
    let url = format!("file://{}", path.display());
    assert!(allowed.resolve(&url, "main", &Credentials::none(), true).await.is_ok());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transport_and_option_urls_run_nothing() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let marker = dir.path().join("pwned");
    let m = marker.display();
    for url in [
        format!("ext::sh -c touch% {m}"),
        format!("--upload-pack=touch {m}"),
        format!("-u touch {m}"),
        format!("ssh://-oProxyCommand=touch%20{m}@127.0.0.1/r"),
        format!("-oProxyCommand=touch {m}@127.0.0.1:r"),
        "fd::17".to_string(),
    ] {
        let err = cache(dir.path())
            .resolve(&url, "main", &Credentials::none(), true)
            .await
            .expect_err("refused");
        assert!(matches!(err, SourceError::UnsupportedUrl(_)), "{url}: {err}");
    }
    assert!(!marker.exists(), "a command named in a URL ran");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_that_is_an_option_runs_nothing() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    server.create_repo("apps")?;
    server.commit("apps", "main", &[("a.yaml", Some("a: 1\n"))], "one")?;
    let dir = tempfile::tempdir()?;
    let marker = dir.path().join("pwned");
    let cache = cache(dir.path());
    let url = server.git_url("apps");
    for revision in [
        format!("--upload-pack=touch {}", marker.display()),
        "--output=/tmp/capstan-hostile-output".to_string(),
        "-h".to_string(),
    ] {
        let err = cache
            .resolve(&url, &revision, &Credentials::none(), true)
            .await
            .expect_err("not a revision");
        assert!(matches!(err, SourceError::UnknownRevision { .. }), "{revision}: {err}");
    }
    assert!(!marker.exists(), "a command named in a revision ran");
    assert!(!std::path::Path::new("/tmp/capstan-hostile-output").exists());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dot_dot_and_userinfo_spellings_never_reach_the_server() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    server.create_repo("team-a-private")?;
    server.commit("team-a-private", "main", &[("s.yaml", Some("k: v\n"))], "one")?;
    let dir = tempfile::tempdir()?;
    let cache = cache(dir.path());
    let good = server.git_url("team-a-private");
    let base = good.trim_end_matches("team-a-private.git");
    for url in [
        format!("{base}team-b/../team-a-private.git"),
        format!("{base}team-b/%2e%2e/team-a-private.git"),
        format!("{base}./team-a-private.git"),
        format!("{good}?ref=/../x"),
        good.replace("git://", "git://team-b@"),
    ] {
        let err = cache
            .resolve(&url, "main", &Credentials::none(), true)
            .await
            .expect_err("refused spelling");
        assert!(matches!(err, SourceError::UnsupportedUrl(_)), "{url}: {err}");
        assert_eq!(cache.stats(&url).ls_remotes, 0, "{url} reached the server");
    }
    Ok(())
}

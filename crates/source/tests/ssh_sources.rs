//! The SSH transport for real: OpenSSH's sshd on loopback (capstan-testkit's `SshGitServer`), a
//! private key and `known_hosts` as a repository Secret would give them.

use std::path::Path;
use std::time::Duration;

use capstan_source::{Credentials, RepoCache, SourceError};
use capstan_testkit::ssh::{SshGitServer, generate_key};
use capstan_testkit::{commit_files, run_git};

fn new_cache(dir: &Path) -> RepoCache {
    RepoCache::new(dir, Duration::from_secs(30), Duration::from_secs(10))
}

fn bare_repo(root: &Path, name: &str) -> anyhow::Result<std::path::PathBuf> {
    run_git(root, &["init", "--bare", "--quiet", "--initial-branch=main", name])?;
    Ok(root.join(name))
}

fn ssh_creds(server: &SshGitServer) -> Credentials {
    Credentials {
        ssh_private_key: Some(server.private_key()),
        known_hosts: Some(server.known_hosts()),
        ..Default::default()
    }
}

/// The base64 body lines of an OpenSSH private key: none of them may appear in an error.
fn key_lines(key: &str) -> Vec<&str> {
    key.lines().filter(|l| !l.starts_with("-----") && l.len() > 8).collect()
}

fn assert_no_key(message: &str, key: &str) {
    for line in key_lines(key) {
        assert!(!message.contains(line), "the private key leaked into: {message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolves_fetches_and_checks_out_over_ssh() -> anyhow::Result<()> {
    let repos = tempfile::tempdir()?;
    let bare = bare_repo(repos.path(), "apps.git")?;
    let first = commit_files(&bare, "main", &[("app/cm.yaml", Some("v: 1\n"))], "one")?;
    run_git(&bare, &["tag", "v1", &first])?;
    let server = SshGitServer::start(repos.path()).await?;
    let url = server.url("apps.git");
    assert!(url.starts_with(&format!("ssh://{}@127.0.0.1:", server.user())), "{url}");

    let dir = tempfile::tempdir()?;
    let cache = new_cache(dir.path());
    let creds = ssh_creds(&server);
    let resolved = cache.resolve(&url, "main", &creds, false).await;
    let resolved = resolved.map_err(|e| anyhow::anyhow!("{e}\nsshd log:\n{}", server.log()))?;
    assert_eq!(resolved.sha, first);
    assert_eq!(resolved.ref_name.as_deref(), Some("refs/heads/main"));
    assert_eq!(cache.resolve(&url, "v1", &creds, false).await?.sha, first);
    let tree = cache.checkout(&url, &first).await?;
    assert_eq!(std::fs::read_to_string(tree.join("app/cm.yaml"))?, "v: 1\n");

    // A new commit arrives over ssh too (ls-remote, then fetch).
    let second = commit_files(&bare, "main", &[("app/cm.yaml", Some("v: 2\n"))], "two")?;
    assert_eq!(cache.resolve(&url, "main", &creds, true).await?.sha, second);
    let tree = cache.checkout(&url, &second).await?;
    assert_eq!(std::fs::read_to_string(tree.join("app/cm.yaml"))?, "v: 2\n");
    let stats = cache.stats(&url);
    assert_eq!((stats.ls_remotes, stats.fetches), (2, 2), "{stats:?}");

    // A key pasted with Windows line endings (as Secrets edited on Windows have) works too.
    let crlf = Credentials {
        ssh_private_key: Some(server.private_key().replace('\n', "\r\n")),
        known_hosts: Some(server.known_hosts()),
        ..Default::default()
    };
    let dir = tempfile::tempdir()?;
    assert_eq!(
        new_cache(dir.path()).resolve(&url, "main", &crlf, false).await?.sha,
        second
    );
    assert!(
        server.log().contains("Accepted publickey"),
        "sshd authenticated the key: {}",
        server.log()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scp_like_form_works_too() -> anyhow::Result<()> {
    let repos = tempfile::tempdir()?;
    let bare = bare_repo(repos.path(), "scp.git")?;
    let sha = commit_files(&bare, "main", &[("a.yaml", Some("a: 1\n"))], "one")?;
    let server = SshGitServer::start(repos.path()).await?;
    let url = server.scp_url("scp.git")?;
    assert!(!url.contains("://"), "{url}");
    let dir = tempfile::tempdir()?;
    let cache = new_cache(dir.path());
    let resolved = cache.resolve(&url, "main", &ssh_creds(&server), false).await;
    let resolved = resolved.map_err(|e| anyhow::anyhow!("{e}\nsshd log:\n{}", server.log()))?;
    assert_eq!(resolved.sha, sha);
    let tree = cache.checkout(&url, &sha).await?;
    assert_eq!(std::fs::read_to_string(tree.join("a.yaml"))?, "a: 1\n");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_or_wrong_host_key_is_refused_and_the_error_hides_the_key() -> anyhow::Result<()> {
    let repos = tempfile::tempdir()?;
    let bare = bare_repo(repos.path(), "apps.git")?;
    let sha = commit_files(&bare, "main", &[("a.yaml", Some("a: 1\n"))], "one")?;
    let server = SshGitServer::start(repos.path()).await?;
    let url = server.url("apps.git");
    let (_, impostor) = generate_key("impostor")?;
    assert_ne!(impostor, server.host_public_key());

    let host = format!("[127.0.0.1]:{}", server.port());
    for (case, known_hosts, expected) in [
        (
            "another key for this host",
            Some(format!("{host} {impostor}\n")),
            format!("SSH host key verification failed: the host key of {host} does not match the known_hosts"),
        ),
        (
            "no known_hosts at all",
            None,
            format!("SSH host key verification failed: no host key for {host}"),
        ),
        (
            "a key for another port only",
            Some(format!("[127.0.0.1]:1 {}\n", server.host_public_key())),
            format!("SSH host key verification failed: no host key for {host}"),
        ),
    ] {
        let dir = tempfile::tempdir()?;
        let creds = Credentials {
            ssh_private_key: Some(server.private_key()),
            known_hosts,
            ..Default::default()
        };
        let err = new_cache(dir.path())
            .resolve(&url, "main", &creds, false)
            .await
            .expect_err(case);
        assert!(matches!(err, SourceError::Git { .. }), "{case}: {err:?}");
        let message = err.to_string();
        assert!(message.contains(&expected), "{case}: names the cause: {message}");
        assert!(
            !message.contains("capstan-ssh-") && !message.contains("ssh-keygen"),
            "{case}: no temporary paths or advice that does not apply: {message}"
        );
        assert!(message.contains(&url), "{case}: names the repository: {message}");
        assert_no_key(&message, &server.private_key());
        assert_no_key(&format!("{err:?}"), &server.private_key());
        assert!(!dir.path().join("checkouts").exists(), "{case}: nothing checked out");
    }
    assert!(
        !server.log().contains("Accepted publickey"),
        "the client never authenticated to a server it does not trust: {}",
        server.log()
    );

    // `insecure` skips host key checking (for labs), so the same server is then accepted.
    let dir = tempfile::tempdir()?;
    let creds = Credentials {
        ssh_private_key: Some(server.private_key()),
        insecure: true,
        ..Default::default()
    };
    assert_eq!(
        new_cache(dir.path()).resolve(&url, "main", &creds, false).await?.sha,
        sha
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_the_server_does_not_accept_is_refused() -> anyhow::Result<()> {
    let repos = tempfile::tempdir()?;
    let bare = bare_repo(repos.path(), "apps.git")?;
    commit_files(&bare, "main", &[("a.yaml", Some("a: 1\n"))], "one")?;
    let server = SshGitServer::start(repos.path()).await?;
    let url = server.url("apps.git");
    let (wrong_key, _) = generate_key("not-authorized")?;

    let dir = tempfile::tempdir()?;
    let creds = Credentials {
        ssh_private_key: Some(wrong_key.clone()),
        known_hosts: Some(server.known_hosts()),
        ..Default::default()
    };
    let err = new_cache(dir.path())
        .resolve(&url, "main", &creds, false)
        .await
        .expect_err("an unauthorised key");
    assert!(matches!(err, SourceError::Git { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("Permission denied (publickey)"), "{message}");
    assert!(message.contains("authentication"), "explains it: {message}");
    assert!(message.contains(&url), "{message}");
    assert_no_key(&message, &wrong_key);
    assert_no_key(&format!("{err:?}"), &wrong_key);
    assert!(
        !server.log().contains("Accepted publickey"),
        "sshd accepted no key: {}",
        server.log()
    );

    // No key at all: refused as well (the process's own ~/.ssh keys are not authorised here).
    let dir = tempfile::tempdir()?;
    let creds = Credentials {
        known_hosts: Some(server.known_hosts()),
        ..Default::default()
    };
    let err = new_cache(dir.path())
        .resolve(&url, "main", &creds, false)
        .await
        .expect_err("no key");
    assert!(err.to_string().contains("Permission denied"), "{err}");
    Ok(())
}

//! The throwaway git server serves real repositories over git:// and authenticated http://.

use capstan_testkit::{GitServer, run_git};

fn clone_and_read(url: &str, file: &str) -> anyhow::Result<String> {
    let dir = tempfile::tempdir()?;
    run_git(dir.path(), &["clone", "--quiet", url, "checkout"])?;
    Ok(std::fs::read_to_string(dir.path().join("checkout").join(file))?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_the_same_repository_over_git_and_http() -> anyhow::Result<()> {
    capstan_testkit::init_logging();
    let server = GitServer::start().await?;
    server.create_repo("apps")?;
    let first = server.commit(
        "apps",
        "main",
        &[("guestbook/cm.yaml", Some("kind: ConfigMap\n"))],
        "first",
    )?;
    assert_eq!(first.len(), 40, "commit returns a full SHA: {first}");

    // git:// through git daemon
    assert_eq!(
        clone_and_read(&server.git_url("apps"), "guestbook/cm.yaml")?,
        "kind: ConfigMap\n"
    );
    // http:// through git http-backend, with credentials
    assert_eq!(
        clone_and_read(&server.http_url_with_credentials("apps"), "guestbook/cm.yaml")?,
        "kind: ConfigMap\n"
    );
    // ls-remote sees the branch at the committed SHA on both transports.
    let dir = tempfile::tempdir()?;
    let heads = run_git(dir.path(), &["ls-remote", &server.git_url("apps"), "refs/heads/main"])?;
    assert!(heads.starts_with(&first), "{heads}");
    let heads = run_git(
        dir.path(),
        &[
            "ls-remote",
            &server.http_url_with_credentials("apps"),
            "refs/heads/main",
        ],
    )?;
    assert!(heads.starts_with(&first), "{heads}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_requires_basic_auth_and_accepts_pushes() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    server.create_repo("private")?;
    server.commit("private", "main", &[("a.txt", Some("one"))], "one")?;
    let dir = tempfile::tempdir()?;

    let err = run_git(dir.path(), &["ls-remote", &server.http_url("private")]).expect_err("no credentials must fail");
    assert!(
        err.to_string().contains("Authentication failed")
            || err.to_string().contains("401")
            || err.to_string().contains("could not read Username"),
        "{err}"
    );
    let wrong = server
        .http_url_with_credentials("private")
        .replace(capstan_testkit::git::PASSWORD, "wrong");
    assert!(
        run_git(dir.path(), &["ls-remote", &wrong]).is_err(),
        "a wrong password must fail"
    );

    // Push a new commit over authenticated HTTP and read it back over git://.
    run_git(
        dir.path(),
        &["clone", "--quiet", &server.http_url_with_credentials("private"), "w"],
    )?;
    let w = dir.path().join("w");
    std::fs::write(w.join("a.txt"), "two")?;
    run_git(
        &w,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t.invalid",
            "commit",
            "--quiet",
            "-am",
            "two",
        ],
    )?;
    run_git(&w, &["push", "--quiet", "origin", "HEAD:main"])?;
    let pushed = run_git(&w, &["rev-parse", "HEAD"])?;
    let heads = run_git(
        dir.path(),
        &["ls-remote", &server.git_url("private"), "refs/heads/main"],
    )?;
    assert!(heads.starts_with(&pushed), "git:// must see the pushed commit: {heads}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_server_frees_its_ports() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    server.create_repo("r")?;
    server.commit("r", "main", &[("f", Some("x"))], "x")?;
    let url = server.git_url("r");
    drop(server);
    let dir = tempfile::tempdir()?;
    assert!(
        run_git(dir.path(), &["ls-remote", &url]).is_err(),
        "git daemon must be gone after drop"
    );
    Ok(())
}

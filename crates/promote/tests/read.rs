//! Reading a file at a revision from a real git server: at a commit that is no longer the head, at
//! a branch, and the errors naming the file or the revision.

use std::time::Duration;

use capstan_promote::PromoteError;
use capstan_promote::read::Reader;
use capstan_testkit::GitServer;

#[tokio::test]
async fn files_are_read_at_the_revision_asked_for() -> anyhow::Result<()> {
    let git = GitServer::start().await?;
    git.create_repo("root")?;
    let first = git.commit(
        "root",
        "main",
        &[("s/p/staging.yaml", Some("imageTag: \"1.5.0\"\n"))],
        "one",
    )?;
    let second = git.commit(
        "root",
        "main",
        &[("s/p/staging.yaml", Some("imageTag: \"1.6.0\"\n"))],
        "two",
    )?;
    let reader = Reader {
        url: git.git_url("root"),
        credentials: Default::default(),
        timeout: Duration::from_secs(30),
        allow_local: false,
    };
    let old = reader.read("s/p/staging.yaml", &first, "main").await?;
    assert_eq!(
        (old.text.as_str(), old.commit.as_str()),
        ("imageTag: \"1.5.0\"\n", first.as_str())
    );
    let head = reader.read("s/p/staging.yaml", "main", "main").await?;
    assert_eq!(
        (head.text.as_str(), head.commit.as_str()),
        ("imageTag: \"1.6.0\"\n", second.as_str())
    );
    let missing = reader.read("s/p/production.yaml", "main", "main").await.unwrap_err();
    assert!(matches!(missing, PromoteError::MissingFile { .. }), "{missing}");
    assert_eq!(missing.to_string(), "s/p/production.yaml: no such file at main");
    let unknown = reader
        .read("s/p/staging.yaml", &"0".repeat(40), "main")
        .await
        .unwrap_err();
    assert!(matches!(unknown, PromoteError::NotFound(_)), "{unknown}");
    Ok(())
}

//! Rollback by revert against a real git server (`git http-backend` behind basic auth on loopback):
//! the Application's commits after a revision reverted as one commit by the requesting user, other
//! paths kept, a concurrent push redone on, and every refusal leaving the branch as it was.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use capstan_gitwrite::{GitWriter, RevertError, RevertErrorKind, RevertRequest, WriterConfig};
use capstan_source::Credentials;
use capstan_testkit::GitServer;
use capstan_testkit::git::{PASSWORD, USER, run_git};

fn config() -> WriterConfig {
    let mut config = WriterConfig::new("alice", "alice@capstan.invalid");
    config.initial_backoff = Duration::from_millis(50);
    config.timeout = Duration::from_secs(30);
    config
}

fn request(server: &GitServer, base: &str, paths: &[&str]) -> RevertRequest {
    RevertRequest {
        repo_url: server.http_url("app"),
        credentials: Credentials {
            username: Some(USER.into()),
            password: Some(PASSWORD.into()),
            ..Default::default()
        },
        branch: "main".into(),
        paths: paths.iter().map(|p| p.to_string()).collect(),
        base: base.into(),
        app: "web".into(),
        history_id: 4,
        reason: "checkout broke".into(),
        expected_head: None,
    }
}

fn git(bare: &Path, args: &[&str]) -> anyhow::Result<String> {
    run_git(bare, args)
}

fn head(server: &GitServer) -> anyhow::Result<String> {
    git(&server.repo_path("app"), &["rev-parse", "main"])
}

fn show(server: &GitServer, rev_path: &str) -> anyhow::Result<String> {
    git(&server.repo_path("app"), &["show", rev_path])
}

const WEB_V1: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  color: blue\n";

async fn seeded(server: &GitServer) -> anyhow::Result<String> {
    server.create_repo("app")?;
    server.commit(
        "app",
        "main",
        &[
            ("apps/web/cm.yaml", Some(WEB_V1)),
            ("apps/api/cm.yaml", Some("api: 1\n")),
            ("shared/common.yaml", Some("a: 1\nb: 1\nc: 1\n")),
        ],
        "seed",
    )
}

#[tokio::test]
async fn the_apps_commits_after_the_revision_are_reverted_as_one_commit_by_the_user() -> anyhow::Result<()> {
    capstan_testkit::init_logging();
    let server = GitServer::start().await?;
    let base = seeded(&server).await?;
    let bad = server.commit(
        "app",
        "main",
        &[("apps/web/cm.yaml", Some(&WEB_V1.replace("blue", "red")))],
        "web: red",
    )?;
    let api = server.commit("app", "main", &[("apps/api/cm.yaml", Some("api: 2\n"))], "api: 2")?;
    let extra = server.commit("app", "main", &[("apps/web/extra.yaml", Some("x: 1\n"))], "web: extra")?;

    let reverted = GitWriter::new(config())
        .revert(&request(&server, &base, &["apps/web/"]))
        .await?;
    assert_eq!(reverted.sha, head(&server)?);
    assert_eq!(reverted.reverted, vec![extra.clone(), bad.clone()]);
    assert_eq!((reverted.attempts, reverted.branch.as_str()), (1, "main"));
    assert_eq!(show(&server, "main:apps/web/cm.yaml")?.trim_end(), WEB_V1.trim_end());
    assert!(
        show(&server, "main:apps/web/extra.yaml").is_err(),
        "the added file is removed"
    );
    assert_eq!(
        show(&server, "main:apps/api/cm.yaml")?,
        "api: 2",
        "other paths are kept"
    );
    let log = git(
        &server.repo_path("app"),
        &["log", "-1", "--format=%an <%ae>|%cn|%P%n%B", "main"],
    )?;
    let short = |s: &str| s[..12].to_string();
    assert_eq!(
        log,
        format!(
            "alice <alice@capstan.invalid>|alice|{extra}\nRevert web to {} (history 4)\n\ncheckout broke\n\nReverts:\n- {} web: extra\n- {} web: red",
            short(&base),
            short(&extra),
            short(&bad)
        )
    );
    assert_ne!(api, reverted.sha);
    Ok(())
}

#[tokio::test]
async fn a_push_rejected_by_a_concurrent_commit_is_redone_on_the_new_head() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    let base = seeded(&server).await?;
    server.commit(
        "app",
        "main",
        &[("apps/web/cm.yaml", Some(&WEB_V1.replace("blue", "red")))],
        "web: red",
    )?;
    let bare = server.repo_path("app");
    let human = Arc::new(std::sync::Mutex::new(String::new()));
    let mut config = config();
    {
        let human = human.clone();
        config.before_push = Some(Arc::new(move |attempt| {
            if attempt == 1 {
                let sha =
                    capstan_testkit::commit_files(&bare, "main", &[("apps/api/cm.yaml", Some("api: 3\n"))], "api: 3")
                        .expect("human commit");
                *human.lock().expect("lock") = sha;
            }
        }));
    }
    let reverted = GitWriter::new(config)
        .revert(&request(&server, &base, &["apps/web"]))
        .await?;
    assert_eq!(reverted.attempts, 2);
    assert_eq!(reverted.sha, head(&server)?);
    assert_eq!(
        git(&server.repo_path("app"), &["rev-parse", "main^"])?,
        *human.lock().expect("lock")
    );
    assert_eq!(show(&server, "main:apps/api/cm.yaml")?, "api: 3");
    assert_eq!(show(&server, "main:apps/web/cm.yaml")?.trim_end(), WEB_V1.trim_end());
    Ok(())
}

#[tokio::test]
async fn a_commit_also_changing_other_files_is_refused_naming_them_and_pushes_nothing() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    let base = seeded(&server).await?;
    // The web commit also changed a shared file (which a later commit changed again on the same
    // line): reverting it whole would undo a change that is not the Application's, and conflict.
    server.commit(
        "app",
        "main",
        &[
            ("apps/web/cm.yaml", Some(&WEB_V1.replace("blue", "red"))),
            ("shared/common.yaml", Some("a: 1\nb: 2\nc: 1\n")),
        ],
        "web: red, b: 2",
    )?;
    let later = server.commit(
        "app",
        "main",
        &[("shared/common.yaml", Some("a: 1\nb: 3\nc: 1\n"))],
        "b: 3",
    )?;
    let err = GitWriter::new(config())
        .revert(&request(&server, &base, &["apps/web"]))
        .await
        .expect_err("refused");
    let RevertError::OutsidePaths { files, .. } = &err else {
        panic!("expected a refusal of a commit outside the paths, got {err:?}");
    };
    assert_eq!(files, &vec!["shared/common.yaml".to_string()]);
    assert_eq!(err.kind(), RevertErrorKind::Refused);
    assert!(err.to_string().contains("outside the Application's paths"), "{err}");
    assert_eq!(head(&server)?, later);
    Ok(())
}

#[tokio::test]
async fn a_merge_commit_in_the_range_is_refused() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    let base = seeded(&server).await?;
    let work = tempfile::tempdir()?;
    let w = work.path();
    let bare = server.repo_path("app");
    run_git(w, &["clone", "--quiet", &bare.to_string_lossy(), "."])?;
    run_git(w, &["checkout", "--quiet", "-b", "side"])?;
    std::fs::write(w.join("apps/web/cm.yaml"), WEB_V1.replace("blue", "green"))?;
    run_git(w, &["commit", "--quiet", "-am", "side: green"])?;
    run_git(w, &["checkout", "--quiet", "main"])?;
    std::fs::write(w.join("apps/api/cm.yaml"), "api: 9\n")?;
    run_git(w, &["commit", "--quiet", "-am", "api: 9"])?;
    run_git(w, &["merge", "--quiet", "--no-ff", "--no-edit", "side"])?;
    run_git(w, &["push", "--quiet", "origin", "main"])?;
    let merged = head(&server)?;
    let err = GitWriter::new(config())
        .revert(&request(&server, &base, &["apps/web"]))
        .await
        .expect_err("a merge");
    assert!(matches!(err, RevertError::MergeInRange { .. }), "{err:?}");
    assert_eq!(err.kind(), RevertErrorKind::Refused);
    assert!(err.to_string().contains(&merged[..12]), "{err}");
    assert_eq!(head(&server)?, merged);
    Ok(())
}

#[tokio::test]
async fn a_revision_off_the_branch_and_an_untouched_path_are_refused() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    let base = seeded(&server).await?;
    let off = server.commit("app", "other", &[("apps/web/cm.yaml", Some("x: 1\n"))], "elsewhere")?;
    let api = server.commit("app", "main", &[("apps/api/cm.yaml", Some("api: 2\n"))], "api: 2")?;
    let writer = GitWriter::new(config());
    let err = writer
        .revert(&request(&server, &off, &["apps/web"]))
        .await
        .expect_err("not an ancestor");
    assert!(matches!(err, RevertError::NotAncestor { .. }), "{err:?}");
    let unknown = "0".repeat(40);
    let err = writer
        .revert(&request(&server, &unknown, &["apps/web"]))
        .await
        .expect_err("unknown");
    assert!(matches!(err, RevertError::NotAncestor { .. }), "{err:?}");
    let err = writer
        .revert(&request(&server, &base, &["apps/web"]))
        .await
        .expect_err("nothing to revert");
    assert!(matches!(err, RevertError::NothingToRevert { .. }), "{err:?}");
    let mut tag = request(&server, &base, &["apps/api"]);
    tag.branch = "v1.0".into();
    let err = writer.revert(&tag).await.expect_err("not a branch");
    assert!(matches!(err, RevertError::NotABranch { .. }), "{err:?}");
    assert_eq!(head(&server)?, api);
    // HEAD: the default branch.
    let mut default = request(&server, &base, &["apps/api"]);
    default.branch = "HEAD".into();
    let reverted = writer.revert(&default).await?;
    assert_eq!(
        (reverted.branch.as_str(), reverted.reverted.clone()),
        ("main", vec![api])
    );
    Ok(())
}

/// An automatic revert names the commit it judged: when the branch has moved past it (a fix pushed
/// meanwhile), nothing is reverted nor pushed; at that commit, the revert is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revert_for_a_judged_head_refuses_a_branch_that_moved() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    let base = seeded(&server).await?;
    let bad = server.commit("app", "main", &[("apps/web/cm.yaml", Some("color: red\n"))], "red")?;
    let fix = server.commit("app", "main", &[("apps/web/cm.yaml", Some("color: green\n"))], "fix")?;
    let writer = GitWriter::new(config());
    let mut judged = request(&server, &base, &["apps/web"]);
    judged.expected_head = Some(bad.clone());
    let err = writer.revert(&judged).await.expect_err("the branch moved");
    assert!(matches!(err, RevertError::BranchMoved { .. }), "{err:?}");
    assert_eq!(err.kind(), RevertErrorKind::Refused);
    assert!(err.to_string().contains(&fix[..12]), "{err}");
    assert_eq!(head(&server)?, fix, "nothing pushed");
    judged.expected_head = Some(fix.clone());
    let reverted = writer.revert(&judged).await?;
    assert_eq!(reverted.reverted, vec![fix, bad]);
    Ok(())
}

//! The writer against a real git server (`git http-backend` behind basic auth on loopback): edits
//! pushed, concurrent human commits kept, rejections bounded, hostile paths refused.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_gitwrite::{Change, Edit, GitWriter, WriteError, WriteOutcome, WriteRequest, WriterConfig};
use capstan_source::Credentials;
use capstan_testkit::GitServer;
use capstan_testkit::git::{PASSWORD, USER};

const VALUES: &str = "# Default values for web\nreplicaCount: 2  # two for HA\n\nimage:\n  repository: nginx   # upstream\n  tag: \"1.25.3\"\n  pullPolicy: IfNotPresent\n\nservice:\n  port: 80\n";

fn credentials() -> Credentials {
    Credentials {
        username: Some(USER.into()),
        password: Some(PASSWORD.into()),
        ..Default::default()
    }
}

fn config() -> WriterConfig {
    let mut config = WriterConfig::new("Capstan Image Updater", "image-updater@capstan.invalid");
    config.initial_backoff = Duration::from_millis(50);
    config.timeout = Duration::from_secs(30);
    config
}

fn set(path: &str, key: &str, value: &str) -> Edit {
    Edit {
        path: path.into(),
        change: Change::SetKey {
            key: key.parse().expect("key path"),
            value: value.into(),
        },
    }
}

fn request(server: &GitServer, name: &str, message: &str, edits: Vec<Edit>) -> WriteRequest {
    WriteRequest {
        repo_url: server.http_url(name),
        credentials: credentials(),
        branch: "main".into(),
        push_branch: None,
        message: message.into(),
        edits,
    }
}

/// `git ARGS` in the bare repository, stdout exactly as git wrote it.
fn git(bare: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(bare)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

fn head(server: &GitServer, name: &str, branch: &str) -> anyhow::Result<String> {
    Ok(git(&server.repo_path(name), &["rev-parse", branch])?.trim().to_string())
}

fn show(server: &GitServer, name: &str, rev_path: &str) -> anyhow::Result<String> {
    git(&server.repo_path(name), &["show", rev_path])
}

async fn repo_with(server: &GitServer, name: &str, files: &[(&str, Option<&str>)]) -> anyhow::Result<String> {
    server.create_repo(name)?;
    server.commit(name, "main", files, "seed")
}

#[tokio::test]
async fn a_value_is_edited_and_pushed_with_the_configured_author() -> anyhow::Result<()> {
    capstan_testkit::init_logging();
    let server = GitServer::start().await?;
    let seed = repo_with(&server, "app", &[("charts/web/values.yaml", Some(VALUES))]).await?;
    let writer = GitWriter::new(config());
    let outcome = writer
        .commit(request(
            &server,
            "app",
            "web: image tag 1.26.0",
            vec![set("charts/web/values.yaml", "image.tag", "1.26.0")],
        ))
        .await?;
    let new_head = head(&server, "app", "main")?;
    assert_eq!(
        outcome,
        WriteOutcome::Committed {
            sha: new_head.clone(),
            attempts: 1,
            branch: "main".into()
        }
    );
    assert_eq!(
        show(&server, "app", "main:charts/web/values.yaml")?,
        VALUES.replace("\"1.25.3\"", "\"1.26.0\"")
    );
    let log = git(
        &server.repo_path("app"),
        &["log", "-1", "--format=%an <%ae>|%cn|%s|%P", "main"],
    )?;
    assert_eq!(
        log.trim(),
        format!(
            "Capstan Image Updater <image-updater@capstan.invalid>|Capstan Image Updater|web: image tag 1.26.0|{seed}"
        )
    );
    Ok(())
}

#[tokio::test]
async fn an_edit_that_changes_nothing_makes_no_commit() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    let seed = repo_with(&server, "app", &[("values.yaml", Some(VALUES))]).await?;
    let writer = GitWriter::new(config());
    let outcome = writer
        .commit(request(
            &server,
            "app",
            "noop",
            vec![set("values.yaml", "image.tag", "1.25.3")],
        ))
        .await?;
    assert_eq!(outcome, WriteOutcome::Unchanged);
    assert_eq!(head(&server, "app", "main")?, seed);
    Ok(())
}

#[tokio::test]
async fn a_concurrent_human_change_to_the_same_file_is_kept() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    repo_with(&server, "app", &[("values.yaml", Some(VALUES))]).await?;
    let bare = server.repo_path("app");
    let human = VALUES.replace("replicaCount: 2", "replicaCount: 5");
    let human_commit = Arc::new(std::sync::Mutex::new(None));
    let mut config = config();
    {
        let human_commit = human_commit.clone();
        let human = human.clone();
        config.before_push = Some(Arc::new(move |attempt| {
            if attempt == 1 {
                let sha = capstan_testkit::commit_files(&bare, "main", &[("values.yaml", Some(&human))], "scale to 5")
                    .expect("human commit");
                *human_commit.lock().expect("lock") = Some(sha);
            }
        }));
    }
    let writer = GitWriter::new(config);
    let outcome = writer
        .commit(request(
            &server,
            "app",
            "bump",
            vec![set("values.yaml", "image.tag", "1.26.0")],
        ))
        .await?;
    let WriteOutcome::Committed { attempts, sha, .. } = outcome else {
        panic!("expected a commit, got {outcome:?}");
    };
    assert_eq!(attempts, 2);
    assert_eq!(sha, head(&server, "app", "main")?);
    assert_eq!(
        show(&server, "app", "main:values.yaml")?,
        human.replace("\"1.25.3\"", "\"1.26.0\"")
    );
    let parent = git(&server.repo_path("app"), &["rev-parse", "main^"])?;
    assert_eq!(
        Some(parent.trim().to_string()),
        human_commit.lock().expect("lock").clone()
    );
    Ok(())
}

#[tokio::test]
async fn a_wrong_password_fails_at_once_without_leaking_it() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    let seed = repo_with(&server, "app", &[("values.yaml", Some(VALUES))]).await?;
    let writer = GitWriter::new(config());
    let mut req = request(&server, "app", "bump", vec![set("values.yaml", "image.tag", "1.26.0")]);
    req.credentials.password = Some("wrong-password-123".into());
    let started = Instant::now();
    let err = writer.commit(req).await.expect_err("wrong password");
    assert!(matches!(err, WriteError::Git(_)), "{err:?}");
    assert!(!err.to_string().contains("wrong-password-123"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(head(&server, "app", "main")?, seed);
    Ok(())
}

#[tokio::test]
async fn a_server_that_rejects_every_push_gets_a_bounded_number_of_attempts() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    let seed = repo_with(&server, "app", &[("values.yaml", Some(VALUES))]).await?;
    let hook = server.repo_path("app").join("hooks/pre-receive");
    std::fs::write(&hook, "#!/bin/sh\necho 'pushes are frozen' >&2\nexit 1\n")?;
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let mut config = config();
    config.max_attempts = 3;
    let writer = GitWriter::new(config);
    let started = Instant::now();
    let err = writer
        .commit(request(
            &server,
            "app",
            "bump",
            vec![set("values.yaml", "image.tag", "1.26.0")],
        ))
        .await
        .expect_err("rejected");
    let WriteError::PushRejected { attempts, last_reason } = &err else {
        panic!("expected PushRejected, got {err:?}");
    };
    assert_eq!(*attempts, 3);
    assert!(last_reason.contains("pre-receive hook declined"), "{last_reason}");
    assert!(!last_reason.contains(PASSWORD), "{last_reason}");
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
    assert_eq!(head(&server, "app", "main")?, seed);
    Ok(())
}

#[tokio::test]
async fn missing_files_and_keys_are_named_and_nothing_is_committed() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    let seed = repo_with(&server, "app", &[("values.yaml", Some(VALUES))]).await?;
    let writer = GitWriter::new(config());
    let err = writer
        .commit(request(
            &server,
            "app",
            "m",
            vec![set("nope/values.yaml", "image.tag", "1")],
        ))
        .await
        .expect_err("missing file");
    assert!(
        matches!(&err, WriteError::MissingFile { path } if path == "nope/values.yaml"),
        "{err:?}"
    );
    assert!(err.to_string().contains("nope/values.yaml"), "{err}");
    let err = writer
        .commit(request(
            &server,
            "app",
            "m",
            vec![
                set("values.yaml", "image.tag", "1.26.0"),
                set("values.yaml", "image.digest", "sha256:x"),
            ],
        ))
        .await
        .expect_err("missing key");
    assert!(
        matches!(&err, WriteError::MissingKey { path, key } if path == "values.yaml" && key == "image.digest"),
        "{err:?}"
    );
    assert!(err.to_string().contains("image.digest"), "{err}");
    assert_eq!(head(&server, "app", "main")?, seed);
    Ok(())
}

#[tokio::test]
async fn paths_outside_the_repository_are_refused() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    repo_with(&server, "app", &[("values.yaml", Some(VALUES))]).await?;
    // A symlink in the repository pointing outside it.
    let work = tempfile::tempdir()?;
    let w = work.path();
    capstan_testkit::run_git(
        w,
        &["clone", "--quiet", &server.repo_path("app").to_string_lossy(), "."],
    )?;
    std::os::unix::fs::symlink("/etc/passwd", w.join("escape.yaml"))?;
    std::os::unix::fs::symlink("../../../../../../../tmp/x.yaml", w.join("relative-escape.yaml"))?;
    capstan_testkit::run_git(w, &["add", "--all"])?;
    capstan_testkit::run_git(w, &["commit", "--quiet", "-m", "links"])?;
    capstan_testkit::run_git(w, &["push", "--quiet", "origin", "HEAD:refs/heads/main"])?;
    let seed = head(&server, "app", "main")?;
    let writer = GitWriter::new(config());
    for path in [
        "../x.yaml",
        "/etc/passwd",
        "escape.yaml",
        "relative-escape.yaml",
        ".git/config",
        "a/../../x",
    ] {
        let err = writer
            .commit(request(&server, "app", "m", vec![set(path, "root", "x")]))
            .await
            .expect_err(path);
        assert!(
            matches!(&err, WriteError::UnsafePath { path: p, .. } if p == path),
            "{path}: {err:?}"
        );
    }
    assert_eq!(head(&server, "app", "main")?, seed);
    Ok(())
}

#[tokio::test]
async fn a_push_branch_gets_the_commit_and_the_source_branch_stays() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    let seed = repo_with(&server, "app", &[("values.yaml", Some(VALUES))]).await?;
    let writer = GitWriter::new(config());
    let mut req = request(&server, "app", "bump", vec![set("values.yaml", "image.tag", "1.26.0")]);
    req.push_branch = Some("capstan/image-updates".into());
    let outcome = writer.commit(req.clone()).await?;
    assert!(
        matches!(&outcome, WriteOutcome::Committed { branch, attempts: 1, .. } if branch == "capstan/image-updates"),
        "{outcome:?}"
    );
    assert_eq!(head(&server, "app", "main")?, seed);
    assert_eq!(
        git(&server.repo_path("app"), &["rev-parse", "capstan/image-updates^"])?.trim(),
        seed
    );
    // A second write builds on the push branch, which exists now.
    req.edits = vec![set("values.yaml", "replicaCount", "3")];
    writer.commit(req).await?;
    assert_eq!(
        show(&server, "app", "capstan/image-updates:values.yaml")?,
        VALUES
            .replace("\"1.25.3\"", "\"1.26.0\"")
            .replace("replicaCount: 2", "replicaCount: \"3\"")
    );
    assert_eq!(show(&server, "app", "main:values.yaml")?, VALUES);
    Ok(())
}

#[tokio::test]
async fn a_batch_is_one_commit_listing_every_change() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    let seed = repo_with(
        &server,
        "app",
        &[("web/values.yaml", Some(VALUES)), ("api/values.yaml", Some(VALUES))],
    )
    .await?;
    let writer = GitWriter::new(config());
    let outcome = writer
        .commit_batch(vec![
            request(
                &server,
                "app",
                "web: tag 1.26.0",
                vec![set("web/values.yaml", "image.tag", "1.26.0")],
            ),
            request(
                &server,
                "app",
                "api: tag 2.0.1",
                vec![set("api/values.yaml", "image.tag", "2.0.1")],
            ),
            request(
                &server,
                "app",
                "api: nginx from the mirror",
                vec![set("api/values.yaml", "image.repository", "mirror.example/nginx")],
            ),
        ])
        .await?;
    assert!(
        matches!(outcome, WriteOutcome::Committed { attempts: 1, .. }),
        "{outcome:?}"
    );
    let bare = server.repo_path("app");
    assert_eq!(git(&bare, &["rev-parse", "main^"])?.trim(), seed);
    let message = git(&bare, &["log", "-1", "--format=%B", "main"])?;
    for line in [
        "web: tag 1.26.0",
        "api: tag 2.0.1",
        "api: nginx from the mirror",
        "api/values.yaml: image.repository = mirror.example/nginx",
    ] {
        assert!(message.contains(line), "{line} in {message}");
    }
    let api = show(&server, "app", "main:api/values.yaml")?;
    assert_eq!(
        api,
        VALUES
            .replace("\"1.25.3\"", "\"2.0.1\"")
            .replace("nginx   #", "mirror.example/nginx   #")
    );
    Ok(())
}

#[tokio::test]
async fn concurrent_requests_to_one_repository_are_serialized() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    let seed = repo_with(&server, "app", &[("values.yaml", Some(VALUES))]).await?;
    let writer = Arc::new(GitWriter::new(config()));
    let keys = ["image.tag", "image.repository", "image.pullPolicy", "replicaCount"];
    let mut tasks = tokio::task::JoinSet::new();
    for key in keys {
        let req = request(&server, "app", key, vec![set("values.yaml", key, &format!("v-{key}"))]);
        let writer = writer.clone();
        tasks.spawn(async move { writer.commit(req).await });
    }
    while let Some(outcome) = tasks.join_next().await {
        let outcome = outcome??;
        assert!(
            matches!(outcome, WriteOutcome::Committed { attempts: 1, .. }),
            "{outcome:?}"
        );
    }
    let count = git(
        &server.repo_path("app"),
        &["rev-list", "--count", &format!("{seed}..main")],
    )?;
    assert_eq!(count.trim(), "4");
    let text = show(&server, "app", "main:values.yaml")?;
    for key in keys {
        assert!(text.contains(&format!("v-{key}")), "{key}: {text}");
    }
    Ok(())
}

#[tokio::test]
async fn json_files_keep_their_formatting() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    let config_json = "{\n  \"imageTag\": \"1.4.2\",\n  \"targetRevision\": \"main\"\n}\n";
    repo_with(&server, "app", &[("services/web/prod.json", Some(config_json))]).await?;
    let writer = GitWriter::new(config());
    writer
        .commit(request(
            &server,
            "app",
            "web prod 1.5.0",
            vec![set("services/web/prod.json", "imageTag", "1.5.0")],
        ))
        .await?;
    assert_eq!(
        show(&server, "app", "main:services/web/prod.json")?,
        config_json.replace("1.4.2", "1.5.0")
    );
    Ok(())
}

#[tokio::test]
async fn kustomize_image_tags() -> anyhow::Result<()> {
    let server = GitServer::start().await?;
    let kustomization = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - deployment.yaml\nimages:\n  # the web server\n  - name: nginx\n    newTag: 1.25.3\n  - name: ghcr.io/example/api\n    newName: mirror.example/api\n";
    repo_with(
        &server,
        "app",
        &[("overlays/prod/kustomization.yaml", Some(kustomization))],
    )
    .await?;
    let writer = GitWriter::new(config());
    let image = |name: &str, tag: &str| Edit {
        path: "overlays/prod/kustomization.yaml".into(),
        change: Change::KustomizeImage {
            name: name.into(),
            new_tag: tag.into(),
        },
    };
    writer
        .commit(request(
            &server,
            "app",
            "images",
            vec![image("nginx", "1.26.0"), image("ghcr.io/example/api", "2.0")],
        ))
        .await?;
    assert_eq!(
        show(&server, "app", "main:overlays/prod/kustomization.yaml")?,
        kustomization.replace("1.25.3", "1.26.0").replace(
            "    newName: mirror.example/api\n",
            "    newTag: \"2.0\"\n    newName: mirror.example/api\n"
        )
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_over_ssh_with_the_repository_key_and_a_concurrent_change_is_kept() -> anyhow::Result<()> {
    use capstan_testkit::ssh::SshGitServer;
    let server = GitServer::start().await?;
    repo_with(&server, "ssh", &[("charts/web/values.yaml", Some(VALUES))]).await?;
    let repos = server
        .repo_path("ssh")
        .parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| anyhow::anyhow!("the repositories' directory"))?;
    let sshd = SshGitServer::start(&repos).await?;
    let credentials = Credentials {
        ssh_private_key: Some(sshd.private_key()),
        known_hosts: Some(sshd.known_hosts()),
        ..Default::default()
    };
    // A human pushes another line of the same file between the writer's clone and its push.
    let human = server.http_url_with_credentials("ssh");
    let mut config = config();
    let raced = Arc::new(std::sync::atomic::AtomicBool::new(false));
    config.before_push = Some(Arc::new({
        let (human, raced) = (human.clone(), raced.clone());
        move |attempt| {
            if attempt == 1 && !raced.swap(true, std::sync::atomic::Ordering::SeqCst) {
                let dir = tempfile::tempdir().expect("scratch");
                let run = |args: &[&str]| {
                    let out = std::process::Command::new("git")
                        .args(["-c", "user.name=Human", "-c", "user.email=human@capstan.invalid"])
                        .args(args)
                        .current_dir(dir.path())
                        .env("GIT_CONFIG_NOSYSTEM", "1")
                        .output()
                        .expect("git");
                    assert!(
                        out.status.success(),
                        "git {args:?}: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                };
                run(&["clone", "-q", "-b", "main", &human, "."]);
                let path = dir.path().join("charts/web/values.yaml");
                let text = std::fs::read_to_string(&path).expect("values");
                std::fs::write(&path, text.replace("port: 80", "port: 8080")).expect("write");
                run(&["commit", "-q", "-am", "human: port 8080"]);
                run(&["push", "-q", "origin", "main"]);
            }
        }
    }));
    let outcome = GitWriter::new(config)
        .commit(WriteRequest {
            repo_url: sshd.url("ssh.git"),
            credentials,
            branch: "main".into(),
            push_branch: None,
            message: "web: image tag 1.26.0".into(),
            edits: vec![set("charts/web/values.yaml", "image.tag", "1.26.0")],
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}\nsshd log:\n{}", sshd.log()))?;
    let WriteOutcome::Committed { attempts, .. } = outcome else {
        anyhow::bail!("expected a commit: {outcome:?}");
    };
    assert_eq!(
        attempts, 2,
        "the first push was rejected, the second made on the new head"
    );
    assert_eq!(
        show(&server, "ssh", "main:charts/web/values.yaml")?,
        VALUES
            .replace("\"1.25.3\"", "\"1.26.0\"")
            .replace("port: 80", "port: 8080"),
        "both the writer's and the human's change"
    );
    assert!(
        sshd.log().contains("Accepted publickey"),
        "pushed over ssh: {}",
        sshd.log()
    );
    Ok(())
}

use super::*;
use axum::http::{HeaderName, HeaderValue};
use serde_json::json;

/// Headers as a provider sends them (names in any case, as on the wire).
fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

fn hmac_hex(secret: &str, body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    ring::hmac::sign(&key, body)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn github_push() -> Vec<u8> {
    json!({
        "ref": "refs/heads/main",
        "before": "0000000000000000000000000000000000000000",
        "after": "1111111111111111111111111111111111111111",
        "repository": {
            "full_name": "org/site",
            "html_url": "https://github.example/org/site",
            "clone_url": "https://github.example/org/site.git",
            "ssh_url": "git@github.example:org/site.git",
            "default_branch": "main"
        },
        "commits": [
            {"id": "1111", "added": ["apps/a/new.yaml"], "modified": ["apps/b/x.yaml"], "removed": []},
            {"id": "2222", "added": [], "modified": [], "removed": ["docs/readme.md"]}
        ]
    })
    .to_string()
    .into_bytes()
}

fn app(name: &str, repo: &str, revision: &str, path: &str, paths_annotation: Option<&str>) -> Application {
    let mut meta = json!({"name": name, "namespace": "capstan"});
    if let Some(p) = paths_annotation {
        meta["annotations"] = json!({MANIFEST_GENERATE_PATHS: p});
    }
    serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Application", "metadata": meta,
        "spec": {"source": {"repoURL": repo, "targetRevision": revision, "path": path},
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": "x"}}
    }))
    .unwrap()
}

#[test]
fn urls_are_compared_without_scheme_credentials_and_suffix() {
    assert_eq!(
        normalize_url("https://user:pw@Example.com/Org/Repo.git/"),
        "example.com/org/repo"
    );
    assert_eq!(normalize_url("git@example.com:org/repo.git"), "example.com/org/repo");
    assert_eq!(
        normalize_url("ssh://git@example.com:2222/org/repo.git"),
        "example.com:2222/org/repo"
    );
    assert_eq!(normalize_url("git://127.0.0.1:9418/site"), "127.0.0.1/site");
    assert_eq!(normalize_url("git://127.0.0.1:9419/site"), "127.0.0.1:9419/site");
    assert_ne!(
        normalize_url("https://example.com/org/repo2"),
        normalize_url("https://example.com/org/repo")
    );
}

#[test]
fn providers_are_told_apart_by_their_headers() {
    assert_eq!(
        provider(&headers(&[("x-github-event", "push")])),
        Some((Provider::GitHub, "push".into()))
    );
    // Gitea also sends X-GitHub-Event.
    let gitea = headers(&[("x-github-event", "push"), ("x-gitea-event", "push")]);
    assert_eq!(provider(&gitea).map(|p| p.0), Some(Provider::Gitea));
    assert_eq!(
        provider(&headers(&[("x-forgejo-event", "push")])).map(|p| p.0),
        Some(Provider::Gitea)
    );
    assert_eq!(
        provider(&headers(&[("x-gitlab-event", "Push Hook")])).map(|p| p.0),
        Some(Provider::GitLab)
    );
    assert_eq!(
        provider(&headers(&[("x-event-key", "repo:push")])).map(|p| p.0),
        Some(Provider::Bitbucket)
    );
    assert_eq!(provider(&HeaderMap::new()), None);
}

#[test]
fn signatures_are_checked_when_a_secret_is_configured() {
    let body = github_push();
    let good = format!("sha256={}", hmac_hex("s3cret", &body));
    let h = headers(&[("x-hub-signature-256", &good)]);
    assert_eq!(verify(Provider::GitHub, &h, &body, b"s3cret"), Ok(()));
    // Wrong secret, other body, no signature, garbage.
    let wrong = headers(&[("x-hub-signature-256", &format!("sha256={}", hmac_hex("other", &body)))]);
    assert!(verify(Provider::GitHub, &wrong, &body, b"s3cret").is_err());
    assert!(verify(Provider::GitHub, &h, b"{}", b"s3cret").is_err());
    assert!(verify(Provider::GitHub, &HeaderMap::new(), &body, b"s3cret").is_err());
    let garbage = headers(&[("x-hub-signature-256", "sha256=zz")]);
    assert_eq!(
        verify(Provider::GitHub, &garbage, &body, b"s3cret"),
        Err(WebhookError::Unauthorized("github"))
    );
    // Gitea: bare hex; GitLab: the token itself.
    let gitea = headers(&[("x-gitea-signature", &hmac_hex("s3cret", &body))]);
    assert_eq!(verify(Provider::Gitea, &gitea, &body, b"s3cret"), Ok(()));
    let gitlab = headers(&[("x-gitlab-token", "s3cret")]);
    assert_eq!(verify(Provider::GitLab, &gitlab, &body, b"s3cret"), Ok(()));
    assert!(
        verify(
            Provider::GitLab,
            &headers(&[("x-gitlab-token", "s3cre")]),
            &body,
            b"s3cret"
        )
        .is_err()
    );
}

#[test]
fn github_and_gitea_pushes_are_parsed() {
    let push = parse(Provider::GitHub, "push", &github_push()).unwrap();
    assert_eq!(push.refs, vec!["refs/heads/main"]);
    assert_eq!(push.default_branch.as_deref(), Some("main"));
    assert!(push.repo_urls.contains(&"git@github.example:org/site.git".to_string()));
    assert_eq!(
        push.changed,
        Some(vec![
            "apps/a/new.yaml".into(),
            "apps/b/x.yaml".into(),
            "docs/readme.md".into()
        ])
    );
    assert_eq!(parse(Provider::Gitea, "push", &github_push()).unwrap().refs, push.refs);
    assert!(matches!(
        parse(Provider::GitHub, "ping", b"{}"),
        Err(WebhookError::Ignored(..))
    ));
    assert!(matches!(
        parse(Provider::GitHub, "push", b"not json"),
        Err(WebhookError::Malformed(..))
    ));
    assert!(matches!(
        parse(Provider::GitHub, "push", br#"{"ref": "refs/heads/main"}"#),
        Err(WebhookError::Malformed(..))
    ));
}

#[test]
fn gitlab_and_bitbucket_pushes_are_parsed() {
    let gitlab = json!({
        "object_kind": "tag_push", "ref": "refs/tags/v1.2.0",
        "project": {"git_http_url": "https://gitlab.example/org/site.git", "git_ssh_url": "git@gitlab.example:org/site.git",
                    "web_url": "https://gitlab.example/org/site", "default_branch": "main"},
        "commits": []
    })
    .to_string();
    let push = parse(Provider::GitLab, "Tag Push Hook", gitlab.as_bytes()).unwrap();
    assert_eq!(push.refs, vec!["refs/tags/v1.2.0"]);
    assert!(matches!(
        parse(Provider::GitLab, "Issue Hook", b"{}"),
        Err(WebhookError::Ignored(..))
    ));

    let cloud = json!({
        "push": {"changes": [{"new": {"type": "branch", "name": "main"}}, {"new": {"type": "tag", "name": "v2"}}, {"new": null}]},
        "repository": {"full_name": "org/site", "links": {"html": {"href": "https://bitbucket.example/org/site"}},
                       "mainbranch": {"name": "main"}}
    })
    .to_string();
    let push = parse(Provider::Bitbucket, "repo:push", cloud.as_bytes()).unwrap();
    assert_eq!(push.refs, vec!["refs/heads/main", "refs/tags/v2"]);
    assert_eq!(push.changed, None, "Bitbucket does not list files");
    let server = json!({
        "changes": [{"ref": {"id": "refs/heads/release", "type": "BRANCH"}}],
        "repository": {"links": {"clone": [{"href": "ssh://git@bitbucket.example:7999/org/site.git", "name": "ssh"},
                                           {"href": "https://bitbucket.example/scm/org/site.git", "name": "http"}]}}
    })
    .to_string();
    let push = parse(Provider::Bitbucket, "repo:refs_changed", server.as_bytes()).unwrap();
    assert_eq!(push.refs, vec!["refs/heads/release"]);
    assert_eq!(push.repo_urls.len(), 2);
}

#[test]
fn revisions_match_branches_tags_and_the_default_branch() {
    let push = Push {
        repo_urls: vec!["https://x/site".into()],
        refs: vec!["refs/heads/main".into()],
        default_branch: Some("main".into()),
        changed: None,
    };
    for target in ["main", "refs/heads/main", "HEAD", ""] {
        assert!(touches_revision(&push, target), "{target}");
    }
    for target in ["other", "v1", "1111111111111111111111111111111111111111"] {
        assert!(!touches_revision(&push, target), "{target}");
    }
    let other_branch = Push {
        refs: vec!["refs/heads/feature".into()],
        ..push.clone()
    };
    assert!(
        !touches_revision(&other_branch, "HEAD"),
        "HEAD follows the default branch only"
    );
    let unknown_default = Push {
        default_branch: None,
        ..other_branch
    };
    assert!(
        touches_revision(&unknown_default, "HEAD"),
        "refreshing is the safe answer"
    );
    let tag = Push {
        refs: vec!["refs/tags/v1".into()],
        ..push
    };
    assert!(touches_revision(&tag, "v1") && !touches_revision(&tag, "main") && !touches_revision(&tag, "HEAD"));
}

#[test]
fn manifest_generate_paths_limit_refreshes_to_changed_directories() {
    let push = parse(Provider::GitHub, "push", &github_push()).unwrap();
    assert!(touches_paths(&push, "apps/b", None), "no annotation: always");
    assert!(touches_paths(&push, "apps/b", Some(".")));
    assert!(!touches_paths(&push, "apps/c", Some(".")));
    assert!(touches_paths(&push, "apps/c", Some("../a")), "relative with ..");
    assert!(
        touches_paths(&push, "apps/c", Some("/docs")),
        "absolute from the repository root"
    );
    assert!(
        touches_paths(&push, "apps/c", Some("/nothing; /apps/b ")),
        "several entries"
    );
    assert!(
        !touches_paths(&push, "apps/bb", Some(".")),
        "a prefix is not a parent directory"
    );
    let unlisted = Push { changed: None, ..push };
    assert!(touches_paths(&unlisted, "apps/c", Some(".")), "unknown files: refresh");
}

#[test]
fn only_applications_of_the_pushed_repository_revision_and_paths_are_refreshed() {
    let push = parse(Provider::GitHub, "push", &github_push()).unwrap();
    let apps = [
        app("a", "https://github.example/org/site", "main", "apps/a", Some(".")),
        app("b", "git@github.example:org/site.git", "HEAD", "apps/b", None),
        app("c", "https://github.example/org/site.git", "main", "apps/c", Some(".")),
        app("d", "https://github.example/org/other", "main", "apps/a", None),
        app("e", "https://github.example/org/site", "release", "apps/a", None),
    ];
    assert_eq!(affected_apps(&push, apps.iter()), vec!["a", "b"]);
}

#[test]
fn appsets_with_a_nested_git_generator_for_the_push_are_refreshed() {
    let push = parse(Provider::GitHub, "push", &github_push()).unwrap();
    let set = |repo: &str| -> ApplicationSet {
        serde_json::from_value(json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "ApplicationSet",
            "metadata": {"name": "s", "namespace": "capstan"},
            "spec": {
                "generators": [{"matrix": {"generators": [
                    {"git": {"repoURL": repo, "revision": "HEAD", "directories": [{"path": "apps/*"}]}},
                    {"list": {"elements": [{"cluster": "a"}]}}
                ]}}],
                "template": {"metadata": {"name": "{{path.basename}}"}, "spec": {
                    "source": {"repoURL": repo, "targetRevision": "HEAD", "path": "{{path}}"},
                    "destination": {"server": "https://kubernetes.default.svc", "namespace": "x"}}}
            }
        }))
        .unwrap()
    };
    assert!(touches_appset(&push, &set("https://github.example/org/site.git")));
    assert!(!touches_appset(&push, &set("https://github.example/org/elsewhere")));
}

// ---------------------------------------------------------------------------------------------
// Realistic deliveries, trimmed from the providers' documented payloads but keeping their shape.
// ---------------------------------------------------------------------------------------------

const SECRET: &[u8] = b"It's a Secret to Everybody";
const AFTER: &str = "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c";

fn bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

fn sign(body: &[u8]) -> String {
    hmac_hex(std::str::from_utf8(SECRET).unwrap(), body)
}

fn github_commit(id: &str, added: &[&str], modified: &[&str], removed: &[&str]) -> Value {
    json!({
        "id": id,
        "tree_id": "f9d2a07e9488b91af2641b26b9407fe22a451433",
        "distinct": true,
        "message": "Update manifests",
        "timestamp": "2024-05-02T10:12:30+02:00",
        "url": format!("https://github.com/acme/deploy/commit/{id}"),
        "author": {"name": "Mona Lisa", "email": "mona@example.com", "username": "mona"},
        "committer": {"name": "GitHub", "email": "noreply@github.com", "username": "web-flow"},
        "added": added,
        "removed": removed,
        "modified": modified
    })
}

/// A GitHub `push` event (the shape of GitHub's documented example).
fn github_payload(git_ref: &str, commits: Value) -> Value {
    let head = commits
        .as_array()
        .and_then(|c| c.last())
        .cloned()
        .unwrap_or(Value::Null);
    json!({
        "ref": git_ref,
        "before": "6113728f27ae82c7b1a177c8d03f9e96e0adf246",
        "after": AFTER,
        "created": false,
        "deleted": false,
        "forced": false,
        "base_ref": null,
        "compare": "https://github.com/acme/deploy/compare/6113728f27ae...0d1a26e67d8f",
        "commits": commits,
        "head_commit": head,
        "repository": {
            "id": 1296269,
            "node_id": "MDEwOlJlcG9zaXRvcnkxMjk2MjY5",
            "name": "deploy",
            "full_name": "acme/deploy",
            "private": false,
            "owner": {"name": "acme", "login": "acme", "id": 1, "type": "Organization"},
            "html_url": "https://github.com/acme/deploy",
            "url": "https://github.com/acme/deploy",
            "git_url": "git://github.com/acme/deploy.git",
            "ssh_url": "git@github.com:acme/deploy.git",
            "clone_url": "https://github.com/acme/deploy.git",
            "svn_url": "https://github.com/acme/deploy",
            "default_branch": "main",
            "master_branch": "main"
        },
        "pusher": {"name": "mona", "email": "mona@example.com"},
        "sender": {"login": "mona", "id": 2, "type": "User"}
    })
}

/// Two commits to `main` of github.com/acme/deploy.
fn github_main_push() -> Value {
    github_payload(
        "refs/heads/main",
        json!([
            github_commit(
                "1f0e7a2c5f1b0fa6c1d61cd0c9e16d8ae5f0e0a1",
                &[],
                &["apps/guestbook/deployment.yaml"],
                &[]
            ),
            github_commit(
                AFTER,
                &["charts/common/values.yaml"],
                &["README.md"],
                &["apps/guestbook/old-service.yaml"]
            ),
        ]),
    )
}

fn parsed_github_main_push() -> Push {
    parse(Provider::GitHub, "push", &bytes(&github_main_push())).unwrap()
}

/// GitHub's `ping`, sent when a webhook is created.
fn github_ping() -> Value {
    json!({
        "zen": "Design for failure.",
        "hook_id": 30,
        "hook": {
            "type": "Repository",
            "id": 30,
            "name": "web",
            "active": true,
            "events": ["push"],
            "config": {"content_type": "json", "insecure_ssl": "0", "url": "https://capstan.example/api/webhook"}
        },
        "repository": github_main_push()["repository"].clone(),
        "sender": {"login": "mona", "id": 2, "type": "User"}
    })
}

/// A Gitea/Forgejo `push` event (`api.PushPayload`).
fn gitea_payload() -> Value {
    let commit = json!({
        "id": "7a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b",
        "message": "billing: bump image\n",
        "url": "https://gitea.example/acme/deploy/commit/7a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b",
        "author": {"name": "Ops", "email": "ops@example.com", "username": "ops"},
        "committer": {"name": "Ops", "email": "ops@example.com", "username": "ops"},
        "verification": null,
        "timestamp": "2024-05-02T10:12:30Z",
        "added": ["apps/billing/hpa.yaml"],
        "removed": [],
        "modified": ["apps/billing/kustomization.yaml"]
    });
    json!({
        "ref": "refs/heads/develop",
        "before": "28e1879d029cb852e4844d9c718537df08844e03",
        "after": "7a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b",
        "compare_url": "https://gitea.example/acme/deploy/compare/28e1879d029c...7a4b3c2d1e0f",
        "commits": [commit.clone()],
        "total_commits": 1,
        "head_commit": commit,
        "repository": {
            "id": 7,
            "owner": {"id": 3, "login": "acme", "username": "acme"},
            "name": "deploy",
            "full_name": "acme/deploy",
            "private": true,
            "fork": false,
            "html_url": "https://gitea.example/acme/deploy",
            "ssh_url": "ssh://git@gitea.example:2222/acme/deploy.git",
            "clone_url": "https://gitea.example/acme/deploy.git",
            "default_branch": "main"
        },
        "pusher": {"id": 4, "login": "ops", "username": "ops"},
        "sender": {"id": 4, "login": "ops", "username": "ops"}
    })
}

/// Every header Gitea sends with a delivery (it mimics GitHub and Gogs too).
fn gitea_headers(event: &str, body: &[u8]) -> HeaderMap {
    let sig = sign(body);
    let sig256 = format!("sha256={sig}");
    headers(&[
        ("X-GitHub-Delivery", "f6266f16-1bf3-46a5-9ea4-602e06ead473"),
        ("X-GitHub-Event", event),
        ("X-GitHub-Event-Type", event),
        ("X-Gitea-Delivery", "f6266f16-1bf3-46a5-9ea4-602e06ead473"),
        ("X-Gitea-Event", event),
        ("X-Gitea-Event-Type", event),
        ("X-Gitea-Signature", &sig),
        ("X-Gogs-Delivery", "f6266f16-1bf3-46a5-9ea4-602e06ead473"),
        ("X-Gogs-Event", event),
        ("X-Gogs-Event-Type", event),
        ("X-Gogs-Signature", &sig),
        ("X-Hub-Signature-256", &sig256),
    ])
}

fn gitlab_project() -> Value {
    json!({
        "id": 15,
        "name": "deploy",
        "description": "",
        "web_url": "https://gitlab.example/platform/deploy",
        "avatar_url": null,
        "git_ssh_url": "ssh://git@gitlab.example:2222/platform/deploy.git",
        "git_http_url": "https://gitlab.example/platform/deploy.git",
        "namespace": "platform",
        "visibility_level": 0,
        "path_with_namespace": "platform/deploy",
        "default_branch": "master",
        "homepage": "https://gitlab.example/platform/deploy",
        "url": "ssh://git@gitlab.example:2222/platform/deploy.git",
        "ssh_url": "ssh://git@gitlab.example:2222/platform/deploy.git",
        "http_url": "https://gitlab.example/platform/deploy.git"
    })
}

fn gitlab_repository() -> Value {
    json!({
        "name": "deploy",
        "url": "ssh://git@gitlab.example:2222/platform/deploy.git",
        "description": "",
        "homepage": "https://gitlab.example/platform/deploy",
        "git_http_url": "https://gitlab.example/platform/deploy.git",
        "git_ssh_url": "ssh://git@gitlab.example:2222/platform/deploy.git",
        "visibility_level": 0
    })
}

/// A GitLab `Push Hook`.
fn gitlab_push() -> Value {
    json!({
        "object_kind": "push",
        "event_name": "push",
        "before": "95790bf891e76fee5e1747ab589903a6a1f80f22",
        "after": "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
        "ref": "refs/heads/master",
        "ref_protected": true,
        "checkout_sha": "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
        "message": null,
        "user_id": 4,
        "user_name": "John Smith",
        "user_username": "jsmith",
        "user_email": "john@example.com",
        "user_avatar": "",
        "project_id": 15,
        "project": gitlab_project(),
        "commits": [
            {
                "id": "b6568db1bc1dcd7f8b4d5a946b0b91f9dacd7327",
                "message": "Update Catalan translation to e38cb41.\n",
                "title": "Update Catalan translation to e38cb41.",
                "timestamp": "2011-12-12T14:27:31+02:00",
                "url": "https://gitlab.example/platform/deploy/-/commit/b6568db1bc1dcd7f8b4d5a946b0b91f9dacd7327",
                "author": {"name": "Jordi Mallach", "email": "jordi@softcatala.org"},
                "added": ["envs/prod/ingress.yaml"],
                "modified": ["envs/prod/values.yaml"],
                "removed": []
            },
            {
                "id": "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
                "message": "fixed readme",
                "title": "fixed readme",
                "timestamp": "2012-01-03T23:36:29+02:00",
                "url": "https://gitlab.example/platform/deploy/-/commit/da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
                "author": {"name": "GitLab dev user", "email": "gitlabdev@dv6700.(none)"},
                "added": [],
                "modified": [],
                "removed": ["envs/staging/old.yaml"]
            }
        ],
        "total_commits_count": 2,
        "push_options": {},
        "repository": gitlab_repository()
    })
}

/// A GitLab `Tag Push Hook` (no commits listed).
fn gitlab_tag_push() -> Value {
    json!({
        "object_kind": "tag_push",
        "event_name": "tag_push",
        "before": "0000000000000000000000000000000000000000",
        "after": "82b3d5ae55f7080f1e6022629cdb57bfae7cccc7",
        "ref": "refs/tags/v1.0.0",
        "ref_protected": false,
        "checkout_sha": "82b3d5ae55f7080f1e6022629cdb57bfae7cccc7",
        "message": "Tag message",
        "user_id": 1,
        "user_name": "John Smith",
        "user_avatar": "",
        "project_id": 15,
        "project": gitlab_project(),
        "commits": [],
        "total_commits_count": 0,
        "push_options": {},
        "repository": gitlab_repository()
    })
}

fn bitbucket_cloud_ref(kind: &str, name: &str, hash: &str) -> Value {
    json!({
        "type": kind,
        "name": name,
        "target": {"type": "commit", "hash": hash, "message": "Update manifests\n", "date": "2024-05-02T08:12:30+00:00"},
        "links": {
            "commits": {"href": format!("https://api.bitbucket.org/2.0/repositories/acme/deploy/commits/{name}")},
            "self": {"href": format!("https://api.bitbucket.org/2.0/repositories/acme/deploy/refs/branches/{name}")},
            "html": {"href": format!("https://bitbucket.org/acme/deploy/branch/{name}")}
        }
    })
}

/// A Bitbucket Cloud `repo:push`: a branch update, a new tag and a deleted branch.
fn bitbucket_cloud_push() -> Value {
    json!({
        "actor": {"type": "user", "display_name": "Ops", "uuid": "{7e2c1a7e-9c5b-4a39-9f1e-6f0d6b0f9b11}"},
        "repository": {
            "type": "repository",
            "full_name": "acme/deploy",
            "name": "deploy",
            "uuid": "{1f2e3d4c-5b6a-4798-8a9b-0c1d2e3f4a5b}",
            "is_private": true,
            "scm": "git",
            "links": {
                "self": {"href": "https://api.bitbucket.org/2.0/repositories/acme/deploy"},
                "html": {"href": "https://bitbucket.org/acme/deploy"},
                "avatar": {"href": "https://bytebucket.org/ravatar/%7B1f2e3d4c%7D?ts=default"}
            },
            "project": {"type": "project", "key": "OPS", "name": "Ops"},
            "workspace": {"type": "workspace", "slug": "acme", "name": "Acme"}
        },
        "push": {
            "changes": [
                {
                    "old": bitbucket_cloud_ref("branch", "main", "10a1e3af0c2daf86d429c22f6a8c34d8a6ab9114"),
                    "new": bitbucket_cloud_ref("branch", "main", "4c1dde03e075d808b9241ec760087e114d6d0ccf"),
                    "created": false,
                    "closed": false,
                    "forced": false,
                    "truncated": false,
                    "commits": [{"type": "commit", "hash": "4c1dde03e075d808b9241ec760087e114d6d0ccf"}]
                },
                {
                    "old": null,
                    "new": bitbucket_cloud_ref("tag", "v1.1.0", "4c1dde03e075d808b9241ec760087e114d6d0ccf"),
                    "created": true,
                    "closed": false,
                    "forced": false,
                    "truncated": false
                },
                {
                    "old": bitbucket_cloud_ref("branch", "old-feature", "9f3f5b8fbb2bd8a1e4bfc7e8a0fbd2a36e8e2d43"),
                    "new": null,
                    "created": false,
                    "closed": true,
                    "forced": false,
                    "truncated": false
                }
            ]
        }
    })
}

/// A Bitbucket Server / Data Center `repo:refs_changed`: a branch update and a new tag.
fn bitbucket_server_push() -> Value {
    json!({
        "eventKey": "repo:refs_changed",
        "date": "2024-05-02T10:12:30+1000",
        "actor": {"name": "john", "emailAddress": "john@example.com", "id": 500, "displayName": "John", "slug": "john"},
        "repository": {
            "slug": "deploy",
            "id": 656,
            "name": "deploy",
            "scmId": "git",
            "state": "AVAILABLE",
            "forkable": true,
            "project": {"key": "OPS", "id": 389, "name": "Ops", "public": false, "type": "NORMAL"},
            "public": false,
            "links": {
                "clone": [
                    {"href": "ssh://git@bitbucket.example:7999/ops/deploy.git", "name": "ssh"},
                    {"href": "https://bitbucket.example/scm/ops/deploy.git", "name": "http"}
                ],
                "self": [{"href": "https://bitbucket.example/projects/OPS/repos/deploy/browse"}]
            }
        },
        "changes": [
            {
                "ref": {"id": "refs/heads/master", "displayId": "master", "type": "BRANCH"},
                "refId": "refs/heads/master",
                "fromHash": "f09c8889a2d234985734958795a31589cd91ffda",
                "toHash": "22671f0349857934857983457983475ec39f196b",
                "type": "UPDATE"
            },
            {
                "ref": {"id": "refs/tags/v2.0.0", "displayId": "v2.0.0", "type": "TAG"},
                "refId": "refs/tags/v2.0.0",
                "fromHash": "0000000000000000000000000000000000000000",
                "toHash": "22671f0349857934857983457983475ec39f196b",
                "type": "ADD"
            }
        ]
    })
}

fn app_annotated(name: &str, repo: &str, revision: &str, path: &str, annotations: Value) -> Application {
    serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1",
        "kind": "Application",
        "metadata": {"name": name, "namespace": "capstan", "annotations": annotations},
        "spec": {
            "source": {"repoURL": repo, "targetRevision": revision, "path": path},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": "x"}
        }
    }))
    .unwrap()
}

fn appset(generators: Value) -> ApplicationSet {
    serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1",
        "kind": "ApplicationSet",
        "metadata": {"name": "guestbook", "namespace": "capstan"},
        "spec": {
            "generators": generators,
            "template": {
                "metadata": {"name": "{{path.basename}}-{{name}}"},
                "spec": {
                    "source": {"repoURL": "https://github.com/acme/deploy.git", "targetRevision": "HEAD", "path": "{{path}}"},
                    "destination": {"server": "{{server}}", "namespace": "{{path.basename}}"}
                }
            }
        }
    }))
    .unwrap()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

// --- Providers ------------------------------------------------------------------------------

#[test]
fn each_provider_is_detected_from_the_headers_it_really_sends() {
    let github = headers(&[
        ("User-Agent", "GitHub-Hookshot/044aadd"),
        ("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
        ("X-GitHub-Event", "push"),
        ("X-GitHub-Hook-ID", "292430182"),
        ("X-Hub-Signature", "sha1=7d38cdd689735b008b3c702edd92eea23791c5f6"),
        (
            "X-Hub-Signature-256",
            "sha256=d57c68ca6f92289e6987922ff26938930f6e66a2d161ef06abdf1859230aa23c",
        ),
    ]);
    assert_eq!(provider(&github), Some((Provider::GitHub, "push".to_string())));

    // Gitea and Forgejo also send X-GitHub-Event (and X-Gogs-Event): they must not pass for GitHub.
    let body = bytes(&gitea_payload());
    assert_eq!(
        provider(&gitea_headers("push", &body)),
        Some((Provider::Gitea, "push".to_string()))
    );
    let forgejo = headers(&[
        ("X-GitHub-Event", "push"),
        ("X-Gogs-Event", "push"),
        ("X-Forgejo-Event", "push"),
        ("X-Forgejo-Signature", &sign(&body)),
    ]);
    assert_eq!(provider(&forgejo), Some((Provider::Gitea, "push".to_string())));

    let gitlab = headers(&[
        ("X-Gitlab-Event", "Tag Push Hook"),
        ("X-Gitlab-Token", "s3cret"),
        ("X-Gitlab-Instance", "https://gitlab.example"),
        ("X-Gitlab-Event-UUID", "13792a34-cac6-4fda-95a8-c58e00a3954e"),
    ]);
    assert_eq!(provider(&gitlab), Some((Provider::GitLab, "Tag Push Hook".to_string())));

    let bitbucket_cloud = headers(&[
        ("X-Event-Key", "repo:push"),
        ("X-Hook-UUID", "cb7a7b2e-8a4d-4f1f-9b0e-5e7b3b7f3c59"),
        ("X-Request-UUID", "b2b8f3c6-27c6-4b4e-8f0e-3a1d2c3b4a5f"),
        ("X-Attempt-Number", "1"),
    ]);
    assert_eq!(
        provider(&bitbucket_cloud),
        Some((Provider::Bitbucket, "repo:push".to_string()))
    );
    let bitbucket_server = headers(&[
        ("X-Event-Key", "repo:refs_changed"),
        ("X-Request-Id", "a2c1f3b4-1f2e-4d3c-9b8a-7f6e5d4c3b2a"),
    ]);
    assert_eq!(
        provider(&bitbucket_server),
        Some((Provider::Bitbucket, "repo:refs_changed".to_string()))
    );

    // Something else (no provider header at all).
    let other = headers(&[("Content-Type", "application/json"), ("User-Agent", "curl/8.5.0")]);
    assert_eq!(provider(&other), None);
}

// --- Signatures -----------------------------------------------------------------------------

#[test]
fn github_signature_must_be_an_hmac_sha256_of_the_exact_body() {
    let body = bytes(&github_main_push());
    let good = format!("sha256={}", sign(&body));
    let unauthorized = Err(WebhookError::Unauthorized("github"));

    let h = headers(&[("X-GitHub-Event", "push"), ("X-Hub-Signature-256", &good)]);
    assert_eq!(verify(Provider::GitHub, &h, &body, SECRET), Ok(()));

    // Signed with another secret.
    let other_secret = format!("sha256={}", hmac_hex("not the secret", &body));
    let h = headers(&[("X-Hub-Signature-256", &other_secret)]);
    assert_eq!(verify(Provider::GitHub, &h, &body, SECRET), unauthorized);

    // A valid signature of another body (the payload was tampered with).
    let mut tampered = github_main_push();
    tampered["ref"] = json!("refs/heads/release");
    let h = headers(&[("X-Hub-Signature-256", &good)]);
    assert_eq!(verify(Provider::GitHub, &h, &bytes(&tampered), SECRET), unauthorized);

    // No signature at all.
    let h = headers(&[("X-GitHub-Event", "push")]);
    assert_eq!(verify(Provider::GitHub, &h, &body, SECRET), unauthorized);

    // The legacy SHA-1 header alone is not enough.
    let h = headers(&[("X-Hub-Signature", "sha1=7d38cdd689735b008b3c702edd92eea23791c5f6")]);
    assert_eq!(verify(Provider::GitHub, &h, &body, SECRET), unauthorized);

    // The right hex without its `sha256=` prefix, a truncated one, and an empty one.
    let bare = sign(&body);
    for sig in [bare.clone(), format!("sha256={}", &bare[..62]), "sha256=".to_string()] {
        let h = headers(&[("X-Hub-Signature-256", &sig)]);
        assert_eq!(verify(Provider::GitHub, &h, &body, SECRET), unauthorized, "{sig}");
    }
}

#[test]
fn gitea_and_forgejo_signatures_are_bare_hex_hmacs() {
    let body = bytes(&gitea_payload());
    let unauthorized = Err(WebhookError::Unauthorized("gitea"));

    assert_eq!(
        verify(Provider::Gitea, &gitea_headers("push", &body), &body, SECRET),
        Ok(())
    );
    let forgejo = headers(&[("X-Forgejo-Event", "push"), ("X-Forgejo-Signature", &sign(&body))]);
    assert_eq!(verify(Provider::Gitea, &forgejo, &body, SECRET), Ok(()));

    let wrong = headers(&[
        ("X-Gitea-Event", "push"),
        ("X-Gitea-Signature", &hmac_hex("not the secret", &body)),
    ]);
    assert_eq!(verify(Provider::Gitea, &wrong, &body, SECRET), unauthorized);
    assert_eq!(
        verify(Provider::Gitea, &gitea_headers("push", &body), b"{}", SECRET),
        unauthorized,
        "signature of another body"
    );
    let missing = headers(&[("X-Gitea-Event", "push"), ("X-GitHub-Event", "push")]);
    assert_eq!(verify(Provider::Gitea, &missing, &body, SECRET), unauthorized);
}

#[test]
fn bitbucket_signature_is_an_x_hub_signature_hmac_sha256() {
    for payload in [bitbucket_cloud_push(), bitbucket_server_push()] {
        let body = bytes(&payload);
        let good = format!("sha256={}", sign(&body));
        // Bitbucket Cloud and Server both send `X-Hub-Signature: sha256=<hex>`.
        let h = headers(&[("X-Event-Key", "repo:push"), ("X-Hub-Signature", &good)]);
        assert_eq!(verify(Provider::Bitbucket, &h, &body, SECRET), Ok(()));
        assert_eq!(
            verify(Provider::Bitbucket, &h, b"{\"push\":{}}", SECRET),
            Err(WebhookError::Unauthorized("bitbucket"))
        );
        let wrong = headers(&[(
            "X-Hub-Signature",
            &format!("sha256={}", hmac_hex("not the secret", &body)),
        )]);
        assert_eq!(
            verify(Provider::Bitbucket, &wrong, &body, SECRET),
            Err(WebhookError::Unauthorized("bitbucket"))
        );
        assert_eq!(
            verify(
                Provider::Bitbucket,
                &headers(&[("X-Event-Key", "repo:push")]),
                &body,
                SECRET
            ),
            Err(WebhookError::Unauthorized("bitbucket"))
        );
    }
}

#[test]
fn gitlab_token_must_equal_the_secret() {
    let body = bytes(&gitlab_push());
    let token = std::str::from_utf8(SECRET).unwrap();
    let h = headers(&[("X-Gitlab-Event", "Push Hook"), ("X-Gitlab-Token", token)]);
    assert_eq!(verify(Provider::GitLab, &h, &body, SECRET), Ok(()));

    let longer = format!("{token}!");
    let hmac = sign(&body);
    for wrong in [
        &token[..token.len() - 1],
        longer.as_str(),
        "",
        "it's a secret to everybody",
        hmac.as_str(),
    ] {
        let h = headers(&[("X-Gitlab-Event", "Push Hook"), ("X-Gitlab-Token", wrong)]);
        assert_eq!(
            verify(Provider::GitLab, &h, &body, SECRET),
            Err(WebhookError::Unauthorized("gitlab")),
            "{wrong:?}"
        );
    }
    // GitLab does not sign: an HMAC header instead of the token is refused.
    let h = headers(&[
        ("X-Gitlab-Event", "Push Hook"),
        ("X-Hub-Signature-256", &format!("sha256={hmac}")),
    ]);
    assert_eq!(
        verify(Provider::GitLab, &h, &body, SECRET),
        Err(WebhookError::Unauthorized("gitlab"))
    );
}

#[test]
fn without_a_configured_secret_every_provider_is_refused_unless_unsigned_events_are_allowed() {
    for p in [Provider::GitHub, Provider::Gitea, Provider::GitLab, Provider::Bitbucket] {
        // By default a secret is mandatory, and the refusal says how to configure one.
        let err = must_verify(p, false, false, false).unwrap_err();
        assert_eq!(err, WebhookError::NoSecret(p.as_str()));
        let message = err.to_string();
        assert!(
            message.contains(&format!("webhook.{}.secret", p.as_str())) && message.contains("--webhook-allow-unsigned"),
            "{message}"
        );
        // Only the explicit opt-out accepts unsigned events, and only while no provider has a secret.
        assert_eq!(must_verify(p, false, false, true), Ok(false), "{p:?}");
        assert_eq!(
            must_verify(p, false, true, true),
            Err(WebhookError::NoSecretWhileOthersHave(p.as_str())),
            "{p:?}"
        );
        // With a secret, the signature is always checked.
        assert_eq!(must_verify(p, true, true, false), Ok(true));
        assert_eq!(must_verify(p, true, true, true), Ok(true));
    }
}

// --- Parsing --------------------------------------------------------------------------------

#[test]
fn github_push_is_parsed() {
    let push = parsed_github_main_push();
    assert_eq!(push.refs, vec!["refs/heads/main"]);
    assert_eq!(push.default_branch.as_deref(), Some("main"));
    for url in [
        "https://github.com/acme/deploy",
        "https://github.com/acme/deploy.git",
        "git@github.com:acme/deploy.git",
    ] {
        assert!(push.repo_urls.iter().any(|u| u == url), "{url} in {:?}", push.repo_urls);
    }
    // Files of every listed commit (added, modified and removed), and head_commit not counted twice.
    assert_eq!(
        sorted(push.changed.unwrap()),
        vec![
            "README.md",
            "apps/guestbook/deployment.yaml",
            "apps/guestbook/old-service.yaml",
            "charts/common/values.yaml"
        ]
    );

    let tag = parse(
        Provider::GitHub,
        "push",
        &bytes(&github_payload("refs/tags/v1.0.0", json!([]))),
    )
    .unwrap();
    assert_eq!(tag.refs, vec!["refs/tags/v1.0.0"]);
}

#[test]
fn gitea_push_is_parsed() {
    let body = bytes(&gitea_payload());
    let (p, event) = provider(&gitea_headers("push", &body)).unwrap();
    let push = parse(p, &event, &body).unwrap();
    assert_eq!(push.refs, vec!["refs/heads/develop"]);
    assert_eq!(push.default_branch.as_deref(), Some("main"));
    assert!(
        push.repo_urls
            .iter()
            .any(|u| u == "https://gitea.example/acme/deploy.git")
    );
    assert!(
        push.repo_urls
            .iter()
            .any(|u| u == "ssh://git@gitea.example:2222/acme/deploy.git")
    );
    assert_eq!(
        sorted(push.changed.unwrap()),
        vec!["apps/billing/hpa.yaml", "apps/billing/kustomization.yaml"]
    );
}

#[test]
fn gitlab_push_and_tag_push_are_parsed() {
    let push = parse(Provider::GitLab, "Push Hook", &bytes(&gitlab_push())).unwrap();
    assert_eq!(push.refs, vec!["refs/heads/master"]);
    assert_eq!(push.default_branch.as_deref(), Some("master"));
    for url in [
        "https://gitlab.example/platform/deploy.git",
        "ssh://git@gitlab.example:2222/platform/deploy.git",
        "https://gitlab.example/platform/deploy",
    ] {
        assert!(push.repo_urls.iter().any(|u| u == url), "{url} in {:?}", push.repo_urls);
    }
    assert_eq!(
        sorted(push.changed.unwrap()),
        vec![
            "envs/prod/ingress.yaml",
            "envs/prod/values.yaml",
            "envs/staging/old.yaml"
        ]
    );

    let tag = parse(Provider::GitLab, "Tag Push Hook", &bytes(&gitlab_tag_push())).unwrap();
    assert_eq!(tag.refs, vec!["refs/tags/v1.0.0"]);
    assert_eq!(tag.default_branch.as_deref(), Some("master"));
    assert!(same_repo(&tag, "https://gitlab.example/platform/deploy.git"));
}

#[test]
fn bitbucket_cloud_push_is_parsed() {
    let push = parse(Provider::Bitbucket, "repo:push", &bytes(&bitbucket_cloud_push())).unwrap();
    // Updated branch and new tag; the deleted branch (`new: null`) moved nothing to refresh.
    assert_eq!(push.refs, vec!["refs/heads/main", "refs/tags/v1.1.0"]);
    assert_eq!(push.repo_urls, vec!["https://bitbucket.org/acme/deploy"]);
    assert_eq!(push.changed, None, "Bitbucket does not list files");
    assert!(same_repo(&push, "git@bitbucket.org:acme/deploy.git"));
    assert!(same_repo(&push, "https://ops@bitbucket.org/acme/deploy.git"));
}

#[test]
fn bitbucket_server_push_is_parsed() {
    let push = parse(
        Provider::Bitbucket,
        "repo:refs_changed",
        &bytes(&bitbucket_server_push()),
    )
    .unwrap();
    assert_eq!(push.refs, vec!["refs/heads/master", "refs/tags/v2.0.0"]);
    assert_eq!(
        sorted(push.repo_urls.clone()),
        vec![
            "https://bitbucket.example/scm/ops/deploy.git",
            "ssh://git@bitbucket.example:7999/ops/deploy.git"
        ]
    );
    assert_eq!(push.default_branch, None);
    assert_eq!(push.changed, None);
}

#[test]
fn events_other_than_pushes_are_ignored() {
    let ping = bytes(&github_ping());
    assert_eq!(
        parse(Provider::GitHub, "ping", &ping),
        Err(WebhookError::Ignored("github", "ping".into()))
    );
    let issue = bytes(
        &json!({"action": "opened", "issue": {"number": 1, "title": "x"}, "repository": github_ping()["repository"]}),
    );
    assert_eq!(
        parse(Provider::GitHub, "issues", &issue),
        Err(WebhookError::Ignored("github", "issues".into()))
    );
    assert_eq!(
        parse(Provider::Gitea, "issues", &issue),
        Err(WebhookError::Ignored("gitea", "issues".into()))
    );
    assert_eq!(
        parse(
            Provider::GitLab,
            "Issue Hook",
            br#"{"object_kind":"issue","project":{}}"#
        ),
        Err(WebhookError::Ignored("gitlab", "Issue Hook".into()))
    );
    assert_eq!(
        parse(Provider::Bitbucket, "diagnostics:ping", br#"{"test":true}"#),
        Err(WebhookError::Ignored("bitbucket", "diagnostics:ping".into()))
    );
    assert_eq!(
        parse(Provider::Bitbucket, "pullrequest:created", b"{}"),
        Err(WebhookError::Ignored("bitbucket", "pullrequest:created".into()))
    );
}

#[test]
fn malformed_push_payloads_are_refused() {
    fn malformed(p: Provider, event: &str, body: &[u8]) -> bool {
        matches!(parse(p, event, body), Err(WebhookError::Malformed(name, _)) if name == p.as_str())
    }
    // Not JSON (truncated delivery).
    let body = bytes(&github_main_push());
    assert!(malformed(Provider::GitHub, "push", &body[..body.len() / 2]));
    assert!(malformed(Provider::Gitea, "push", b"ref=refs/heads/main"));
    assert!(malformed(Provider::GitLab, "Push Hook", b""));
    assert!(malformed(Provider::Bitbucket, "repo:push", b"<html>"));

    // No repository.
    let mut no_repo = github_main_push();
    no_repo.as_object_mut().unwrap().remove("repository");
    assert!(malformed(Provider::GitHub, "push", &bytes(&no_repo)));
    let mut no_project = gitlab_push();
    no_project.as_object_mut().unwrap().remove("project");
    no_project.as_object_mut().unwrap().remove("repository");
    assert!(malformed(Provider::GitLab, "Push Hook", &bytes(&no_project)));
    let mut no_links = bitbucket_server_push();
    no_links["repository"].as_object_mut().unwrap().remove("links");
    assert!(malformed(Provider::Bitbucket, "repo:refs_changed", &bytes(&no_links)));

    // No ref.
    let mut no_ref = github_main_push();
    no_ref.as_object_mut().unwrap().remove("ref");
    assert!(malformed(Provider::GitHub, "push", &bytes(&no_ref)));
    let mut no_ref = gitea_payload();
    no_ref.as_object_mut().unwrap().remove("ref");
    assert!(malformed(Provider::Gitea, "push", &bytes(&no_ref)));
    let mut no_ref = gitlab_push();
    no_ref["ref"] = json!("");
    assert!(malformed(Provider::GitLab, "Push Hook", &bytes(&no_ref)));
    let mut no_changes = bitbucket_cloud_push();
    no_changes["push"]["changes"] = json!([]);
    assert!(malformed(Provider::Bitbucket, "repo:push", &bytes(&no_changes)));
    let mut no_changes = bitbucket_server_push();
    no_changes.as_object_mut().unwrap().remove("changes");
    assert!(malformed(Provider::Bitbucket, "repo:refs_changed", &bytes(&no_changes)));

    // JSON, but not an object.
    assert!(malformed(Provider::GitHub, "push", b"[]"));
}

// --- Repository URLs ------------------------------------------------------------------------

#[test]
fn repository_urls_are_normalized() {
    let want = "github.com/acme/deploy";
    for url in [
        "https://github.com/acme/deploy",
        "https://github.com/acme/deploy.git",
        "https://mona:ghp_16C7e42F292c6912E7710c838347Ae178B4a@github.com/acme/deploy.git",
        "https://x-access-token@github.com/acme/deploy",
        "http://github.com/acme/deploy/",
        "https://github.com/acme/deploy.git/",
        "https://github.com/acme/deploy//",
        "git@github.com:acme/deploy.git",
        "git@github.com:acme/deploy",
        "ssh://git@github.com/acme/deploy.git",
        "git://github.com/acme/deploy.git",
        "HTTPS://GitHub.com/Acme/Deploy.git",
        "  https://github.com/acme/deploy\n",
    ] {
        assert_eq!(normalize_url(url), want, "{url}");
    }
    // Non-default ports are part of the address.
    assert_eq!(
        normalize_url("ssh://git@bitbucket.example:7999/ops/deploy.git"),
        "bitbucket.example:7999/ops/deploy"
    );
    // Other repositories stay apart.
    for other in [
        "https://github.com/acme/deploy-staging",
        "https://github.com/acme/deploy/sub",
        "https://github.com/acme2/deploy",
        "https://gitlab.com/acme/deploy",
        "git@github.com:acme/deploy2.git",
    ] {
        assert_ne!(normalize_url(other), want, "{other}");
    }
}

#[test]
fn default_ports_do_not_make_another_repository() {
    // `ssh://git@host:22/...` is the same repository as `git@host:...` (and `:443` as plain https),
    // as Argo CD's webhook handler considers them: an Application written either way is refreshed.
    assert_eq!(
        normalize_url("ssh://git@github.com:22/acme/deploy.git"),
        normalize_url("git@github.com:acme/deploy.git")
    );
    assert_eq!(
        normalize_url("https://github.com:443/acme/deploy"),
        normalize_url("https://github.com/acme/deploy")
    );
    assert!(same_repo(
        &parsed_github_main_push(),
        "ssh://git@github.com:22/acme/deploy.git"
    ));
}

// --- Revisions ------------------------------------------------------------------------------

#[test]
fn a_branch_push_touches_that_branch_and_head_only_when_it_is_the_default() {
    let main = parsed_github_main_push();
    for target in ["main", "refs/heads/main", "HEAD", "", " main "] {
        assert!(touches_revision(&main, target), "{target:?}");
    }
    for target in [
        "release",
        "refs/heads/release",
        "v1.0.0",
        "refs/tags/main",
        AFTER,
        "0d1a26e",
        "mai",
    ] {
        assert!(!touches_revision(&main, target), "{target:?}");
    }

    let feature = parse(
        Provider::GitHub,
        "push",
        &bytes(&github_payload(
            "refs/heads/feature/login",
            json!([github_commit(AFTER, &["a.yaml"], &[], &[])]),
        )),
    )
    .unwrap();
    assert!(touches_revision(&feature, "feature/login"));
    assert!(touches_revision(&feature, "refs/heads/feature/login"));
    for target in ["HEAD", "", "main", "login", "feature"] {
        assert!(!touches_revision(&feature, target), "{target:?}");
    }

    // GitLab's default branch comes from `project.default_branch`.
    let gitlab = parse(Provider::GitLab, "Push Hook", &bytes(&gitlab_push())).unwrap();
    assert!(touches_revision(&gitlab, "HEAD") && touches_revision(&gitlab, "master"));
    assert!(!touches_revision(&gitlab, "main"));
}

#[test]
fn a_tag_push_touches_only_that_tag() {
    let tag = parse(Provider::GitLab, "Tag Push Hook", &bytes(&gitlab_tag_push())).unwrap();
    assert!(touches_revision(&tag, "v1.0.0"));
    assert!(touches_revision(&tag, "refs/tags/v1.0.0"));
    for target in [
        "HEAD",
        "",
        "master",
        "v1.0",
        "v1.0.0-rc1",
        "82b3d5ae55f7080f1e6022629cdb57bfae7cccc7",
    ] {
        assert!(!touches_revision(&tag, target), "{target:?}");
    }
}

#[test]
fn head_refreshes_on_any_branch_when_the_default_branch_is_unknown() {
    // Bitbucket payloads do not say which branch is the default.
    let server = parse(
        Provider::Bitbucket,
        "repo:refs_changed",
        &bytes(&bitbucket_server_push()),
    )
    .unwrap();
    assert_eq!(server.default_branch, None);
    for target in ["HEAD", "", "master", "refs/heads/master", "v2.0.0"] {
        assert!(touches_revision(&server, target), "{target:?}");
    }
    for target in ["develop", "v1.0.0", "22671f0349857934857983457983475ec39f196b"] {
        assert!(!touches_revision(&server, target), "{target:?}");
    }

    let cloud = parse(Provider::Bitbucket, "repo:push", &bytes(&bitbucket_cloud_push())).unwrap();
    for target in ["HEAD", "main", "v1.1.0"] {
        assert!(touches_revision(&cloud, target), "{target:?}");
    }
    // The deleted branch is not a pushed revision.
    assert!(!touches_revision(&cloud, "old-feature"));

    // But a tag-only push never moves HEAD, known default branch or not.
    let mut tag_only = bitbucket_server_push();
    tag_only["changes"].as_array_mut().unwrap().remove(0);
    let tag_only = parse(Provider::Bitbucket, "repo:refs_changed", &bytes(&tag_only)).unwrap();
    assert!(!touches_revision(&tag_only, "HEAD"));
    assert!(!touches_revision(&tag_only, ""));
}

// --- manifest-generate-paths ----------------------------------------------------------------

#[test]
fn manifest_generate_paths_are_resolved_against_the_source_path() {
    // Changed: apps/guestbook/{deployment,old-service}.yaml, charts/common/values.yaml, README.md.
    let push = parsed_github_main_push();

    assert!(touches_paths(&push, "apps/billing", None), "no annotation");
    assert!(touches_paths(&push, "apps/guestbook", Some(".")));
    assert!(touches_paths(&push, "./apps/guestbook/", Some(".")));
    assert!(!touches_paths(&push, "apps/billing", Some(".")));
    assert!(
        !touches_paths(&push, "apps/guest", Some(".")),
        "a prefix is not a parent"
    );

    // Relative to spec.source.path, `..` included.
    assert!(touches_paths(&push, "apps/billing", Some("../guestbook")));
    assert!(touches_paths(&push, "apps/billing", Some("../../charts/common")));
    assert!(!touches_paths(&push, "apps/billing", Some("manifests")));
    assert!(
        touches_paths(&push, "", Some("charts")),
        "source at the repository root"
    );

    // Absolute from the repository root, `..` inside too, files as well as directories.
    assert!(touches_paths(&push, "apps/billing", Some("/charts/common")));
    assert!(touches_paths(&push, "apps/billing", Some("/charts")));
    assert!(touches_paths(&push, "apps/billing", Some("/apps/billing/../guestbook")));
    assert!(touches_paths(&push, "apps/billing", Some("/README.md")));
    assert!(!touches_paths(&push, "apps/billing", Some("/charts/commons")));
    assert!(!touches_paths(&push, "apps/billing", Some("/apps/billing")));

    // Several `;`-separated entries: any one of them.
    assert!(touches_paths(&push, "apps/billing", Some(".;/charts/common")));
    assert!(touches_paths(&push, "apps/billing", Some(" . ; ../guestbook ;")));
    assert!(!touches_paths(&push, "apps/billing", Some(".;/docs;../frontend")));
}

#[test]
fn without_a_file_list_every_push_touches_the_paths() {
    let cloud = parse(Provider::Bitbucket, "repo:push", &bytes(&bitbucket_cloud_push())).unwrap();
    assert!(touches_paths(&cloud, "apps/billing", Some(".")));
    assert!(touches_paths(&cloud, "apps/billing", Some("/nowhere;/else")));
}

#[test]
fn a_push_listing_no_commits_refreshes_annotated_apps() {
    // Tag pushes (GitHub and GitLab) and new branches pointing at an existing commit list no
    // commits, hence no files: nothing says the paths were not touched, so refresh (as Argo CD does
    // for an empty list of changed files, and as touches_paths' documentation promises).
    let github_tag = parse(
        Provider::GitHub,
        "push",
        &bytes(&github_payload("refs/tags/v1.0.0", json!([]))),
    )
    .unwrap();
    let gitlab_tag = parse(Provider::GitLab, "Tag Push Hook", &bytes(&gitlab_tag_push())).unwrap();
    for (push, repo) in [
        (github_tag, "https://github.com/acme/deploy.git"),
        (gitlab_tag, "https://gitlab.example/platform/deploy.git"),
    ] {
        assert!(touches_paths(&push, "apps/guestbook", Some(".")), "{repo}");
        let apps = [app("guestbook-v1", repo, "v1.0.0", "apps/guestbook", Some("."))];
        assert_eq!(affected_apps(&push, apps.iter()), vec!["guestbook-v1"], "{repo}");
    }
}

// --- Applications ---------------------------------------------------------------------------

#[test]
fn a_github_push_refreshes_exactly_the_matching_applications() {
    let push = parsed_github_main_push();
    let none = json!({});
    let ours = json!({MANIFEST_GENERATE_PATHS: "."});
    let apps = [
        app_annotated(
            "guestbook",
            "https://github.com/acme/deploy.git",
            "HEAD",
            "apps/guestbook",
            ours.clone(),
        ),
        app_annotated(
            "guestbook-ssh",
            "git@github.com:acme/deploy.git",
            "main",
            "apps/guestbook",
            none.clone(),
        ),
        app_annotated(
            "guestbook-ref",
            "HTTPS://GitHub.com/Acme/Deploy",
            "refs/heads/main",
            "apps/x",
            none.clone(),
        ),
        app_annotated(
            "default-rev",
            "https://github.com/acme/deploy",
            "",
            "apps/x",
            none.clone(),
        ),
        app_annotated(
            "other-repo",
            "https://github.com/acme/deploy-staging.git",
            "main",
            "apps/x",
            none.clone(),
        ),
        app_annotated(
            "other-host",
            "https://gitlab.com/acme/deploy.git",
            "main",
            "apps/x",
            none.clone(),
        ),
        app_annotated(
            "other-branch",
            "https://github.com/acme/deploy",
            "release",
            "apps/x",
            none.clone(),
        ),
        app_annotated(
            "a-tag",
            "https://github.com/acme/deploy",
            "v1.0.0",
            "apps/x",
            none.clone(),
        ),
        app_annotated(
            "a-commit",
            "https://github.com/acme/deploy",
            AFTER,
            "apps/x",
            none.clone(),
        ),
        app_annotated(
            "billing",
            "https://github.com/acme/deploy",
            "main",
            "apps/billing",
            ours,
        ),
        app_annotated(
            "billing-chart",
            "https://github.com/acme/deploy",
            "main",
            "apps/billing",
            json!({"argocd.argoproj.io/manifest-generate-paths": ".;/charts/common"}),
        ),
        app_annotated(
            "billing-docs",
            "https://github.com/acme/deploy",
            "main",
            "apps/billing",
            json!({"argocd.argoproj.io/manifest-generate-paths": "/docs"}),
        ),
    ];
    assert_eq!(
        affected_apps(&push, apps.iter()),
        vec![
            "guestbook",
            "guestbook-ssh",
            "guestbook-ref",
            "default-rev",
            "billing-chart"
        ]
    );
}

#[test]
fn gitlab_and_bitbucket_pushes_refresh_the_matching_applications() {
    let gitlab = parse(Provider::GitLab, "Push Hook", &bytes(&gitlab_push())).unwrap();
    let apps = [
        app(
            "prod",
            "ssh://git@gitlab.example:2222/platform/deploy.git",
            "HEAD",
            "envs/prod",
            Some("."),
        ),
        app(
            "prod-http",
            "https://gitlab.example/platform/deploy",
            "master",
            "envs/prod",
            None,
        ),
        app(
            "staging",
            "https://gitlab.example/platform/deploy.git",
            "master",
            "envs/staging",
            Some("."),
        ),
        app(
            "dev",
            "https://gitlab.example/platform/deploy.git",
            "master",
            "envs/dev",
            Some("."),
        ),
        app(
            "fork",
            "https://gitlab.example/jsmith/deploy.git",
            "master",
            "envs/prod",
            None,
        ),
    ];
    assert_eq!(
        affected_apps(&gitlab, apps.iter()),
        vec!["prod", "prod-http", "staging"]
    );

    let server = parse(
        Provider::Bitbucket,
        "repo:refs_changed",
        &bytes(&bitbucket_server_push()),
    )
    .unwrap();
    let apps = [
        app(
            "ssh",
            "ssh://git@bitbucket.example:7999/ops/deploy.git",
            "master",
            "a",
            None,
        ),
        app(
            "http",
            "https://bitbucket.example/scm/ops/deploy.git",
            "HEAD",
            "a",
            Some("/nothing"),
        ),
        app(
            "tag",
            "https://bitbucket.example/scm/ops/deploy.git",
            "v2.0.0",
            "a",
            None,
        ),
        app(
            "develop",
            "https://bitbucket.example/scm/ops/deploy.git",
            "develop",
            "a",
            None,
        ),
        app(
            "browse-url",
            "https://bitbucket.example/projects/OPS/repos/other",
            "master",
            "a",
            None,
        ),
    ];
    assert_eq!(affected_apps(&server, apps.iter()), vec!["ssh", "http", "tag"]);
}

// --- ApplicationSets ------------------------------------------------------------------------

#[test]
fn appsets_with_a_git_generator_nested_in_a_matrix_are_matched() {
    let push = parsed_github_main_push();
    let matrix = |repo: &str, revision: Option<&str>| {
        let mut git =
            json!({"repoURL": repo, "directories": [{"path": "apps/*"}, {"path": "apps/legacy", "exclude": true}]});
        if let Some(r) = revision {
            git["revision"] = json!(r);
        }
        appset(json!([{"matrix": {"generators": [
            {"git": git},
            {"clusters": {"selector": {"matchLabels": {"env": "prod"}}}}
        ]}}]))
    };
    assert!(touches_appset(
        &push,
        &matrix("https://github.com/acme/deploy.git", Some("HEAD"))
    ));
    assert!(touches_appset(
        &push,
        &matrix("git@github.com:acme/deploy.git", Some("main"))
    ));
    assert!(
        touches_appset(&push, &matrix("https://github.com/acme/deploy", None)),
        "revision defaults to HEAD"
    );
    assert!(!touches_appset(
        &push,
        &matrix("https://github.com/acme/other.git", Some("HEAD"))
    ));
    assert!(!touches_appset(
        &push,
        &matrix("https://github.com/acme/deploy.git", Some("release"))
    ));

    // A matrix whose first child is a merge holding the git generator (files).
    let nested = appset(json!([{"matrix": {"generators": [
        {"merge": {"mergeKeys": ["server"], "generators": [
            {"clusters": {"values": {"replicas": "1"}}},
            {"git": {"repoURL": "ssh://git@github.com/acme/deploy.git", "revision": "main", "files": [{"path": "clusters/*.json"}]}}
        ]}},
        {"list": {"elements": [{"app": "guestbook"}]}}
    ]}}]));
    assert!(touches_appset(&push, &nested));

    // A tag push only touches generators on that tag.
    let tag = parse(
        Provider::GitHub,
        "push",
        &bytes(&github_payload("refs/tags/v1.0.0", json!([]))),
    )
    .unwrap();
    assert!(!touches_appset(
        &tag,
        &matrix("https://github.com/acme/deploy.git", Some("HEAD"))
    ));
    assert!(touches_appset(
        &tag,
        &matrix("https://github.com/acme/deploy.git", Some("v1.0.0"))
    ));
}

#[test]
fn appsets_without_a_git_generator_for_the_repository_are_not_matched() {
    let push = parsed_github_main_push();
    let lists = appset(json!([
        {"list": {"elements": [{"name": "in-cluster", "server": "https://kubernetes.default.svc"}]}},
        {"clusters": {}}
    ]));
    assert!(
        !touches_appset(&push, &lists),
        "the template's repoURL is not a generator"
    );
    let top_level = appset(
        json!([{"git": {"repoURL": "https://github.com/acme/deploy.git", "revision": "HEAD", "directories": [{"path": "apps/*"}]}}]),
    );
    assert!(touches_appset(&push, &top_level));
    let gitlab = parse(Provider::GitLab, "Push Hook", &bytes(&gitlab_push())).unwrap();
    assert!(!touches_appset(&gitlab, &top_level));
}

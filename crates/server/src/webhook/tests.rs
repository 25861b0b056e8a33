use super::*;
use axum::http::HeaderValue;
use serde_json::json;

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, HeaderValue::from_str(v).unwrap());
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
    assert_eq!(normalize_url("git://127.0.0.1:9418/site"), "127.0.0.1:9418/site");
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
    assert_eq!(verify(Provider::GitHub, &h, &body, Some(b"s3cret")), Ok(()));
    // Wrong secret, other body, no signature, garbage.
    let wrong = headers(&[("x-hub-signature-256", &format!("sha256={}", hmac_hex("other", &body)))]);
    assert!(verify(Provider::GitHub, &wrong, &body, Some(b"s3cret")).is_err());
    assert!(verify(Provider::GitHub, &h, b"{}", Some(b"s3cret")).is_err());
    assert!(verify(Provider::GitHub, &HeaderMap::new(), &body, Some(b"s3cret")).is_err());
    let garbage = headers(&[("x-hub-signature-256", "sha256=zz")]);
    assert_eq!(
        verify(Provider::GitHub, &garbage, &body, Some(b"s3cret")),
        Err(WebhookError::Unauthorized("github"))
    );
    // Gitea: bare hex; GitLab: the token itself.
    let gitea = headers(&[("x-gitea-signature", &hmac_hex("s3cret", &body))]);
    assert_eq!(verify(Provider::Gitea, &gitea, &body, Some(b"s3cret")), Ok(()));
    let gitlab = headers(&[("x-gitlab-token", "s3cret")]);
    assert_eq!(verify(Provider::GitLab, &gitlab, &body, Some(b"s3cret")), Ok(()));
    assert!(
        verify(
            Provider::GitLab,
            &headers(&[("x-gitlab-token", "s3cre")]),
            &body,
            Some(b"s3cret")
        )
        .is_err()
    );
    // Without a configured secret, unsigned events are accepted (as in Argo CD).
    assert_eq!(verify(Provider::GitHub, &HeaderMap::new(), &body, None), Ok(()));
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

//! Parsing each provider's push payload into a `Push`: refs, repository URLs, default branch and
//! changed files; other events ignored, malformed payloads refused.

use super::*;

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
    // Files of every listed commit, commit by commit and added, modified then removed in each, and
    // head_commit not counted twice.
    assert_eq!(
        push.changed.unwrap(),
        vec![
            "apps/guestbook/deployment.yaml",
            "charts/common/values.yaml",
            "README.md",
            "apps/guestbook/old-service.yaml"
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

//! Which Applications and ApplicationSets a push refreshes: repository URLs, revisions,
//! manifest-generate-paths and ApplicationSet git generators.

use super::*;

// --- Repository URLs ------------------------------------------------------------------------

/// Whether `a` and `b` name one repository for a webhook.
fn same(a: &str, b: &str) -> bool {
    same_repo(
        &Push {
            repo_urls: vec![a.to_string()],
            ..Push::default()
        },
        b,
    )
}

#[test]
fn repository_urls_are_normalized() {
    let want = "https://github.com/acme/deploy";
    for url in [
        "https://github.com/acme/deploy",
        "https://github.com/acme/deploy.git",
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
        assert!(same(want, url), "{url}");
        assert!(same(url, want), "{url}");
    }
    // Non-default ports are part of the address.
    assert!(same(
        "ssh://git@bitbucket.example:7999/ops/deploy.git",
        "https://bitbucket.example:7999/ops/deploy"
    ));
    assert!(!same(
        "ssh://git@bitbucket.example:7999/ops/deploy.git",
        "https://bitbucket.example/ops/deploy"
    ));
    // Other repositories stay apart.
    for other in [
        "https://github.com/acme/deploy-staging",
        "https://github.com/acme/deploy/sub",
        "https://github.com/acme2/deploy",
        "https://gitlab.com/acme/deploy",
        "https://github.com.evil.io/acme/deploy",
        "git@github.com:acme/deploy2.git",
    ] {
        assert!(!same(want, other), "{other}");
    }
    // A URL with a password, or another unsafe spelling, matches nothing.
    for refused in [
        "https://mona:ghp_16C7e42F292c6912E7710c838347Ae178B4a@github.com/acme/deploy.git",
        "https://github.com/acme/x/../deploy",
        "https://github.com/acme//deploy",
    ] {
        assert!(!same(want, refused), "{refused}");
    }
}

#[test]
fn default_ports_do_not_make_another_repository() {
    // `ssh://git@host:22/...` is the same repository as `git@host:...` (and `:443` as plain https),
    // as Argo CD's webhook handler considers them: an Application written either way is refreshed.
    assert!(same(
        "ssh://git@github.com:22/acme/deploy.git",
        "git@github.com:acme/deploy.git"
    ));
    assert!(same(
        "https://github.com:443/acme/deploy",
        "https://github.com/acme/deploy"
    ));
    assert!(same_repo(
        &parsed_github_main_push(),
        "ssh://git@github.com:22/acme/deploy.git"
    ));
    // git:// too: a daemon's default port (9418) is dropped, another port is another daemon.
    assert!(same("git://127.0.0.1:9418/site", "git://127.0.0.1/site"));
    assert!(!same("git://127.0.0.1:9419/site", "git://127.0.0.1/site"));
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

#[test]
fn a_push_to_any_git_source_of_a_multi_source_app_refreshes_it() {
    let github_tag = parse(
        Provider::GitHub,
        "push",
        &bytes(&github_payload("refs/tags/v1.0.0", json!([]))),
    )
    .unwrap();
    let multi = |name: &str, values_repo: &str| -> Application {
        serde_json::from_value(json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
            "metadata": {"name": name, "namespace": "capstan"},
            "spec": {
                "sources": [
                    {"repoURL": "https://charts.example/stable", "chart": "web", "targetRevision": "1.*"},
                    {"repoURL": values_repo, "targetRevision": "v1.0.0", "ref": "values"},
                ],
                "destination": {"server": "https://kubernetes.default.svc", "namespace": "x"}
            }
        }))
        .unwrap()
    };
    let apps = [
        multi("values-here", "https://github.com/acme/deploy.git"),
        multi("values-elsewhere", "https://github.com/acme/other.git"),
    ];
    assert_eq!(affected_apps(&github_tag, apps.iter()), vec!["values-here"]);
}

/// manifest-generate-paths describes the rendered sources' paths; a `ref` source's files are read
/// through `$ref/…` value files anywhere in its repository, so a push to them refreshes regardless.
#[test]
fn a_push_to_a_ref_source_refreshes_whatever_manifest_generate_paths_says() {
    let push = parse(
        Provider::GitHub,
        "push",
        &bytes(&github_payload(
            "refs/heads/main",
            json!([github_commit(AFTER, &[], &["envs/prod.yaml"], &[])]),
        )),
    )
    .expect("a push");
    let app: Application = serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
        "metadata": {"name": "web", "namespace": "capstan",
                     "annotations": {MANIFEST_GENERATE_PATHS: "/charts/web"}},
        "spec": {
            "sources": [
                {"repoURL": "https://github.com/acme/charts.git", "path": "charts/web", "targetRevision": "main",
                 "helm": {"valueFiles": ["$values/envs/prod.yaml"]}},
                {"repoURL": "https://github.com/acme/deploy.git", "targetRevision": "main", "ref": "values"},
            ],
            "destination": {"server": "https://kubernetes.default.svc", "namespace": "x"}
        }
    }))
    .expect("an Application");
    assert_eq!(affected_apps(&push, [&app]), vec!["web"]);
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

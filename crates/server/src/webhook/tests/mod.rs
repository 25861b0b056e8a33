//! Tests of the webhook module: the payload and header builders they share (realistic deliveries
//! of each provider), with the tests themselves in `signatures`, `parsing` and `matching`.

mod matching;
mod parsing;
mod signatures;

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

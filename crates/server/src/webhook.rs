//! Git push webhooks: GitHub, GitLab, Gitea/Forgejo and Bitbucket (Cloud and Server). Each event is
//! verified with its provider's shared secret (`webhook.PROVIDER.secret` in `capstan-secret`; without
//! one the event is refused unless the server runs with `--webhook-allow-unsigned`), parsed into a
//! [`Push`], and the Applications and ApplicationSets whose repository and revision it touches are
//! refreshed (the `capstan.dev/refresh` annotation, which the controllers act on at once). The
//! answer tells the unauthenticated sender nothing about which or how many Applications matched.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State as AxState;
use axum::http::{HeaderMap, StatusCode};
use capstan_api::labels::REFRESH_ANNOTATION;
use capstan_api::{Application, ApplicationSet, RepoUrl};
use futures::{StreamExt, stream};
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use crate::api::model::WebhookReply;
use crate::auth::constant_time_eq;
use crate::error::ApiError;
use crate::state::State;

/// Annotation restricting which changed paths refresh an Application (`;`-separated, relative to
/// `spec.source.path`, or absolute from the repository root).
pub const MANIFEST_GENERATE_PATHS: &str = "capstan.dev/manifest-generate-paths";
const MANIFEST_GENERATE_PATHS_ARGO: &str = "argocd.argoproj.io/manifest-generate-paths";

/// A Git hosting provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// GitHub (and GitHub Enterprise).
    GitHub,
    /// GitLab.
    GitLab,
    /// Gitea and Forgejo.
    Gitea,
    /// Bitbucket Cloud and Bitbucket Server.
    Bitbucket,
}

impl Provider {
    /// Lower-case name (metric label, secret key part).
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::GitHub => "github",
            Provider::GitLab => "gitlab",
            Provider::Gitea => "gitea",
            Provider::Bitbucket => "bitbucket",
        }
    }
}

/// What a push changed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Push {
    /// Every URL the payload gives for the repository.
    pub repo_urls: Vec<String>,
    /// Pushed refs (`refs/heads/main`, `refs/tags/v1`).
    pub refs: Vec<String>,
    /// The repository's default branch, when the payload says.
    pub default_branch: Option<String>,
    /// Changed file paths, when the payload lists them.
    pub changed: Option<Vec<String>>,
}

/// Why an event was not accepted.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum WebhookError {
    /// No known provider header.
    #[error("unknown webhook: expected a GitHub, GitLab, Gitea/Forgejo or Bitbucket push event")]
    UnknownProvider,
    /// Signature or token missing or wrong.
    #[error("{0} webhook signature is missing or invalid")]
    Unauthorized(&'static str),
    /// No secret is configured for the provider, and unsigned events are not allowed.
    #[error(
        "no webhook secret is configured for {0}: set webhook.{0}.secret in capstan-secret \
         (or start the server with --webhook-allow-unsigned to accept unsigned events)"
    )]
    NoSecret(&'static str),
    /// No secret is configured for the provider while other providers have one.
    #[error("no webhook secret is configured for {0} while other providers have one")]
    NoSecretWhileOthersHave(&'static str),
    /// Not JSON, or not a push payload.
    #[error("malformed {0} push payload: {1}")]
    Malformed(&'static str, String),
    /// A valid event that is not a push (ping, issues, ...).
    #[error("ignored {0} event {1:?}")]
    Ignored(&'static str, String),
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// Which provider sent the event, and the event's name.
pub fn provider(headers: &HeaderMap) -> Option<(Provider, String)> {
    // Gitea and Forgejo also send X-GitHub-Event for compatibility: check them first.
    if let Some(e) = header(headers, "x-gitea-event").or_else(|| header(headers, "x-forgejo-event")) {
        return Some((Provider::Gitea, e.to_string()));
    }
    if let Some(e) = header(headers, "x-github-event") {
        return Some((Provider::GitHub, e.to_string()));
    }
    if let Some(e) = header(headers, "x-gitlab-event") {
        return Some((Provider::GitLab, e.to_string()));
    }
    if let Some(e) = header(headers, "x-event-key") {
        return Some((Provider::Bitbucket, e.to_string()));
    }
    None
}

fn hmac_ok(secret: &[u8], body: &[u8], hex_signature: &str) -> bool {
    let Some(sig) = decode_hex(hex_signature.trim()) else {
        return false;
    };
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
    ring::hmac::verify(&key, body, &sig).is_ok()
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Whether an event of `provider` must be verified, given whether it has a secret, whether any
/// provider has one and whether unsigned events are allowed: `Ok(true)` verify with the secret,
/// `Ok(false)` accept unsigned (only with the explicit opt-out and no secret anywhere), `Err` refuse.
pub fn must_verify(
    provider: Provider,
    has_secret: bool,
    any_secret: bool,
    allow_unsigned: bool,
) -> Result<bool, WebhookError> {
    match (has_secret, any_secret, allow_unsigned) {
        (true, _, _) => Ok(true),
        // Once any provider has a secret, a provider without one cannot be used to skip the check.
        (false, true, _) => Err(WebhookError::NoSecretWhileOthersHave(provider.as_str())),
        (false, false, true) => Ok(false),
        (false, false, false) => Err(WebhookError::NoSecret(provider.as_str())),
    }
}

/// Check the event's signature against `secret`.
pub fn verify(provider: Provider, headers: &HeaderMap, body: &[u8], secret: &[u8]) -> Result<(), WebhookError> {
    let name = provider.as_str();
    let ok = match provider {
        Provider::GitHub | Provider::Bitbucket => header(headers, "x-hub-signature-256")
            .or_else(|| header(headers, "x-hub-signature"))
            .and_then(|s| s.strip_prefix("sha256="))
            .is_some_and(|s| hmac_ok(secret, body, s)),
        Provider::Gitea => header(headers, "x-gitea-signature")
            .or_else(|| header(headers, "x-forgejo-signature"))
            .is_some_and(|s| hmac_ok(secret, body, s)),
        Provider::GitLab => header(headers, "x-gitlab-token").is_some_and(|t| constant_time_eq(t.as_bytes(), secret)),
    };
    if ok {
        Ok(())
    } else {
        Err(WebhookError::Unauthorized(name))
    }
}

fn strings(v: &Value, pointers: &[&str]) -> Vec<String> {
    pointers
        .iter()
        .filter_map(|p| v.pointer(p).and_then(Value::as_str))
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn changed_files(payload: &Value) -> Option<Vec<String>> {
    let commits = payload.get("commits")?.as_array()?;
    // No commits listed (a tag, a branch created at an existing commit), or fewer than were pushed
    // (GitLab lists 20 at most): which files changed is unknown.
    let total = payload.get("total_commits_count").and_then(Value::as_u64);
    if commits.is_empty() || total.is_some_and(|t| t > commits.len() as u64) {
        return None;
    }
    let mut files = Vec::new();
    for c in commits {
        for k in ["added", "modified", "removed"] {
            if let Some(list) = c.get(k).and_then(Value::as_array) {
                files.extend(list.iter().filter_map(Value::as_str).map(str::to_string));
            }
        }
    }
    Some(files)
}

/// Parse a push event of `provider` named `event`.
pub fn parse(provider: Provider, event: &str, body: &[u8]) -> Result<Push, WebhookError> {
    let name = provider.as_str();
    let is_push = match provider {
        Provider::GitHub | Provider::Gitea => event == "push",
        Provider::GitLab => event == "Push Hook" || event == "Tag Push Hook",
        Provider::Bitbucket => event == "repo:push" || event == "repo:refs_changed",
    };
    if !is_push {
        return Err(WebhookError::Ignored(name, event.to_string()));
    }
    let payload: Value = serde_json::from_slice(body).map_err(|e| WebhookError::Malformed(name, e.to_string()))?;
    let push = match provider {
        Provider::GitHub | Provider::Gitea => Push {
            repo_urls: strings(
                &payload,
                &[
                    "/repository/html_url",
                    "/repository/clone_url",
                    "/repository/ssh_url",
                    "/repository/git_url",
                    "/repository/url",
                ],
            ),
            refs: strings(&payload, &["/ref"]),
            default_branch: payload
                .pointer("/repository/default_branch")
                .and_then(Value::as_str)
                .map(str::to_string),
            changed: changed_files(&payload),
        },
        Provider::GitLab => Push {
            repo_urls: strings(
                &payload,
                &[
                    "/project/git_http_url",
                    "/project/git_ssh_url",
                    "/project/web_url",
                    "/repository/git_http_url",
                    "/repository/git_ssh_url",
                    "/repository/homepage",
                ],
            ),
            refs: strings(&payload, &["/ref"]),
            default_branch: payload
                .pointer("/project/default_branch")
                .and_then(Value::as_str)
                .map(str::to_string),
            changed: changed_files(&payload),
        },
        Provider::Bitbucket => {
            let mut urls = strings(&payload, &["/repository/links/html/href"]);
            if let Some(clones) = payload.pointer("/repository/links/clone").and_then(Value::as_array) {
                urls.extend(
                    clones
                        .iter()
                        .filter_map(|c| c.get("href").and_then(Value::as_str))
                        .map(str::to_string),
                );
            }
            let mut refs = Vec::new();
            // Cloud: push.changes[].new {type, name}; Server: changes[].ref.id.
            for c in payload
                .pointer("/push/changes")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let (Some(kind), Some(n)) = (
                    c.pointer("/new/type").and_then(Value::as_str),
                    c.pointer("/new/name").and_then(Value::as_str),
                ) else {
                    continue;
                };
                refs.push(if kind == "tag" {
                    format!("refs/tags/{n}")
                } else {
                    format!("refs/heads/{n}")
                });
            }
            for c in payload.get("changes").and_then(Value::as_array).into_iter().flatten() {
                if let Some(id) = c.pointer("/ref/id").and_then(Value::as_str) {
                    refs.push(id.to_string());
                }
            }
            Push {
                repo_urls: urls,
                refs,
                default_branch: payload
                    .pointer("/repository/mainbranch/name")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                changed: None,
            }
        }
    };
    if push.repo_urls.is_empty() {
        return Err(WebhookError::Malformed(name, "no repository URL".into()));
    }
    if push.refs.is_empty() {
        // Bitbucket Cloud reports deleted branches with `new: null`: nothing to refresh.
        let deletions_only = payload
            .pointer("/push/changes")
            .and_then(Value::as_array)
            .is_some_and(|c| !c.is_empty() && c.iter().all(|c| c.get("new").is_some_and(Value::is_null)));
        if provider == Provider::Bitbucket && deletions_only {
            return Err(WebhookError::Ignored(name, "push deleting refs only".into()));
        }
        return Err(WebhookError::Malformed(name, "no pushed ref".into()));
    }
    Ok(push)
}

/// Whether `push` is to the repository `repo_url` ([`RepoUrl::same_repository`]: any of the
/// payload's URLs names the same host, port and path, whatever the transport, user, case, `.git`
/// suffix or trailing `/`). A URL that does not parse matches nothing.
pub fn same_repo(push: &Push, repo_url: &str) -> bool {
    let Ok(want) = RepoUrl::parse(repo_url) else {
        return false;
    };
    push.repo_urls
        .iter()
        .any(|u| RepoUrl::parse(u).is_ok_and(|u| u.same_repository(&want)))
}

/// Whether `push` moved the revision `target` (branch, tag, `refs/...`, `HEAD` or empty).
pub fn touches_revision(push: &Push, target: &str) -> bool {
    let target = target.trim();
    push.refs.iter().any(|r| {
        if r == target {
            return true;
        }
        if let Some(branch) = r.strip_prefix("refs/heads/") {
            if branch == target {
                return true;
            }
            if target.is_empty() || target == "HEAD" {
                // Without a default branch in the payload, refreshing is the safe answer.
                return push.default_branch.as_deref().is_none_or(|d| d == branch);
            }
            return false;
        }
        r.strip_prefix("refs/tags/").is_some_and(|tag| tag == target)
    })
}

/// Whether `push` changed something under the Application's manifest-generate-paths (always true
/// without the annotation, or when the payload lists no files).
pub fn touches_paths(push: &Push, source_path: &str, annotation: Option<&str>) -> bool {
    let (Some(paths), Some(changed)) = (annotation, push.changed.as_ref()) else {
        return true;
    };
    let base = source_path.trim().trim_matches('/');
    let dirs: Vec<String> = paths
        .split(';')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            let joined = match p.strip_prefix('/') {
                Some(abs) => abs.to_string(),
                None if base.is_empty() || base == "." => p.to_string(),
                None => format!("{base}/{p}"),
            };
            normalize_rel(&joined)
        })
        .collect();
    if dirs.is_empty() {
        return true;
    }
    changed.iter().any(|f| {
        let f = normalize_rel(f);
        dirs.iter()
            .any(|d| d.is_empty() || f == *d || f.starts_with(&format!("{d}/")))
    })
}

fn normalize_rel(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            p => out.push(p),
        }
    }
    out.join("/")
}

/// Whether an ApplicationSet's generators (at any depth: matrix, merge) include a git generator for
/// the pushed repository and revision.
pub fn touches_appset(push: &Push, set: &ApplicationSet) -> bool {
    fn walk(push: &Push, v: &Value) -> bool {
        match v {
            Value::Object(map) => {
                if let Some(git) = map.get("git")
                    && let Some(url) = git.get("repoURL").and_then(Value::as_str)
                {
                    let revision = git.get("revision").and_then(Value::as_str).unwrap_or("");
                    if same_repo(push, url) && touches_revision(push, revision) {
                        return true;
                    }
                }
                map.values().any(|v| walk(push, v))
            }
            Value::Array(items) => items.iter().any(|v| walk(push, v)),
            _ => false,
        }
    }
    serde_json::to_value(&set.spec.generators).is_ok_and(|g| walk(push, &g))
}

/// The names of the Applications `push` should refresh.
pub fn affected_apps<'a>(push: &Push, apps: impl IntoIterator<Item = &'a Application>) -> Vec<String> {
    apps.into_iter()
        .filter(|a| {
            let ann = a
                .annotations()
                .get(MANIFEST_GENERATE_PATHS)
                .or_else(|| a.annotations().get(MANIFEST_GENERATE_PATHS_ARGO));
            // Any of its Git sources. The annotation describes the rendered sources' paths: a `ref`
            // source's files are read through `$ref/…` value files anywhere in its repository.
            a.spec.sources().iter().filter(|s| !s.is_chart()).any(|s| {
                let ann = if s.is_rendered() { ann.map(String::as_str) } else { None };
                same_repo(push, &s.repo_url)
                    && touches_revision(push, &s.target_revision)
                    && touches_paths(push, &s.path, ann)
            })
        })
        .map(|a| a.name_any())
        .collect()
}

/// `POST /api/webhook`.
pub async fn receive(
    AxState(state): AxState<Arc<State>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<WebhookReply>, ApiError> {
    let metrics = capstan_metrics::global();
    let Some((provider, event)) = provider(&headers) else {
        metrics.webhook("unknown", "malformed");
        return Err(ApiError::bad_request(WebhookError::UnknownProvider.to_string()));
    };
    let name = provider.as_str();
    if !state.is_ready() {
        // The secrets are not read yet: never mistake that for "no secret configured".
        metrics.webhook(name, "error");
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the server is starting"));
    }
    let secret = state.secret_value(&format!("webhook.{name}.secret"));
    let any_secret = state
        .secret_values("webhook.")
        .iter()
        .any(|(k, v)| k.ends_with(".secret") && !v.is_empty());
    let checked = must_verify(
        provider,
        secret.is_some(),
        any_secret,
        state.config.webhook_allow_unsigned,
    )
    .and_then(|needed| match (&secret, needed) {
        (Some(secret), true) => verify(provider, &headers, &body, secret),
        _ => Ok(()),
    });
    if let Err(err) = checked {
        metrics.webhook(name, "unauthorized");
        tracing::info!(provider = name, %err, "refused a webhook");
        return Err(ApiError::new(StatusCode::UNAUTHORIZED, err.to_string()));
    }
    let push = match parse(provider, &event, &body) {
        Ok(p) => p,
        Err(err @ WebhookError::Ignored(..)) => {
            metrics.webhook(name, "ignored");
            return Ok(Json(WebhookReply {
                accepted: None,
                ignored: Some(err.to_string()),
            }));
        }
        Err(err) => {
            metrics.webhook(name, "malformed");
            return Err(ApiError::bad_request(err.to_string()));
        }
    };
    let apps = affected_apps(&push, state.apps.state().iter().map(|a| a.as_ref()));
    let sets: Vec<String> = state
        .appsets
        .state()
        .iter()
        .filter(|s| touches_appset(&push, s))
        .map(|s| s.name_any())
        .collect();
    let ns = state.config.namespace.clone();
    let patch = Patch::Merge(json!({"metadata": {"annotations": {REFRESH_ANNOTATION: "normal"}}}));
    let app_api: Api<Application> = Api::namespaced(state.client.clone(), &ns);
    let set_api: Api<ApplicationSet> = Api::namespaced(state.client.clone(), &ns);
    let targets: Vec<(bool, String)> = apps
        .iter()
        .map(|n| (true, n.clone()))
        .chain(sets.iter().map(|n| (false, n.clone())))
        .collect();
    let failures: Vec<String> = stream::iter(targets)
        .map(|(is_app, n)| {
            let (app_api, set_api, patch) = (app_api.clone(), set_api.clone(), &patch);
            async move {
                let pp = PatchParams::default();
                let result = if is_app {
                    app_api.patch(&n, &pp, patch).await.map(|_| ())
                } else {
                    set_api.patch(&n, &pp, patch).await.map(|_| ())
                };
                result
                    .err()
                    .map(|e| format!("{n}: {}", capstan_kube::describe_kube_error(&e)))
            }
        })
        .buffer_unordered(16)
        .filter_map(|f| async move { f })
        .collect()
        .await;
    tracing::info!(provider = name, ?apps, ?sets, "webhook push");
    if !failures.is_empty() {
        metrics.webhook(name, "error");
        tracing::warn!(provider = name, failures = %failures.join("; "), "webhook refresh failed");
        return Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "refreshing failed (see the server log)",
        ));
    }
    metrics.webhook(name, "accepted");
    // Neither names nor counts: the caller is not authenticated (the server log has the names).
    Ok(Json(WebhookReply {
        accepted: Some(true),
        ignored: None,
    }))
}

#[cfg(test)]
mod tests;

//! Container logs of an Application's Pods, read through the destination's API server
//! (`pods/log`, as `kubectl logs`): one Pod, every Pod under one of its objects (a Deployment's),
//! or every Pod of its tree; one container or all; the last lines, a time window, the previous
//! container, or followed live.
//!
//! Only Pods of the Application's tree are read: a Pod it does not own (another project's) is
//! refused with 403 before anything is asked of the cluster. Pods in Capstan's own namespace on
//! the cluster it runs in are never read (its credentials live there). The answer is bounded:
//! at most [`MAX_PODS`] Pods, [`MAX_TAIL`] lines and [`LIMIT_BYTES`] per container unless
//! followed, lines cut at [`MAX_LINE`] bytes; every answer holds a place among the caller's live
//! streams ([`crate::stream::StreamLimiter`]) while it is sent; an unfollowed one ends after
//! [`MAX_UNFOLLOWED`], a followed one when the credentials or the caller's role stop being valid,
//! the server stops, or after [`MAX_FOLLOW`].

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State as AxState};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use capstan_api::Application;
use futures::stream::{self, BoxStream, StreamExt};
use futures::{AsyncRead, AsyncReadExt};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::LogParams;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::access::authorized;
use super::model::TreeNode;
use crate::auth::Auth;
use crate::auth::rbac::Role;
use crate::error::ApiError;
use crate::state::State;
use crate::stream::{RECHECK, permit, too_many_streams};

/// Pods one request may read.
pub const MAX_PODS: usize = 32;
/// Lines per container when `tailLines` is not given.
pub const DEFAULT_TAIL: i64 = 1000;
/// The most lines per container a request may ask for.
pub const MAX_TAIL: i64 = 10_000;
/// Bytes read per container when not following.
pub const LIMIT_BYTES: i64 = 8 * 1024 * 1024;
/// A longer line is cut there (the rest of it is dropped).
pub const MAX_LINE: usize = 16 * 1024;
/// A followed answer ends after this long (the client asks again).
pub const MAX_FOLLOW: Duration = Duration::from_secs(3600);
/// An unfollowed answer ends after this long, read or not.
pub const MAX_UNFOLLOWED: Duration = Duration::from_secs(120);

/// Query of `GET /api/applications/{name}/logs`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LogsQuery {
    /// One Pod of the tree (with `namespace` when its name is not unique).
    #[serde(default)]
    pub pod: String,
    /// Namespace of `pod` or of the resource.
    #[serde(default)]
    pub namespace: String,
    /// API group of the resource whose Pods are read (`apps` for a Deployment).
    #[serde(default)]
    pub group: String,
    /// Kind of the resource whose Pods are read (`Deployment`, `StatefulSet`, `Job`, …).
    #[serde(default)]
    pub kind: String,
    /// Name of that resource.
    #[serde(default)]
    pub resource_name: String,
    /// Only this container (default: every container of each Pod).
    #[serde(default)]
    pub container: String,
    /// The last lines per container (default 1000, at most 10000).
    pub tail_lines: Option<i64>,
    /// Only lines of the last this many seconds.
    pub since_seconds: Option<i64>,
    /// The previous (restarted) container's log.
    #[serde(default)]
    pub previous: bool,
    /// Keep the answer open and send new lines as they are written.
    #[serde(default)]
    pub follow: bool,
}

/// One line of the answer (`application/x-ndjson`: one JSON object per line).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LogLine {
    /// Namespace of the Pod.
    pub namespace: String,
    /// The Pod.
    pub pod: String,
    /// The container.
    pub container: String,
    /// When the container wrote it (RFC 3339), as the kubelet recorded it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub timestamp: String,
    /// The text (cut at 16 KiB).
    #[serde(default)]
    pub content: String,
    /// Set instead of `content` when this container's log cannot be read.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// The Pods of `tree` a query names: 403 for a Pod or resource that is not part of it. Only live
/// nodes count: a root the controller never found live — among them objects Git names that the
/// project denies, which are listed `Missing` and never read — is not part of the tree here.
pub fn select_pods<'a>(tree: &'a [TreeNode], q: &LogsQuery, app: &str) -> Result<Vec<&'a TreeNode>, ApiError> {
    let tree: Vec<&TreeNode> = tree.iter().filter(|n| super::tree::is_live_root(n)).collect();
    let is_pod = |n: &TreeNode| n.group.is_empty() && n.kind == "Pod";
    let ns_ok = |n: &TreeNode| q.namespace.is_empty() || n.namespace == q.namespace;
    let not_part = |what: String| {
        ApiError::new(
            StatusCode::FORBIDDEN,
            format!("{what} is not part of Application {app:?}: only its own Pods' logs are read"),
        )
    };
    if !q.pod.is_empty() {
        let found: Vec<&TreeNode> = tree
            .iter()
            .copied()
            .filter(|n| is_pod(n) && n.name == q.pod && ns_ok(n))
            .collect();
        return match found.len() {
            0 => Err(not_part(format!("Pod {:?}", q.pod))),
            1 => Ok(found),
            _ => Err(ApiError::bad_request(format!(
                "several Pods are named {:?}: give their namespace",
                q.pod
            ))),
        };
    }
    if !q.kind.is_empty() || !q.resource_name.is_empty() {
        let root = tree
            .iter()
            .copied()
            .find(|n| n.group == q.group && n.kind == q.kind && n.name == q.resource_name && ns_ok(n))
            .ok_or_else(|| {
                let group = if q.group.is_empty() { "" } else { &q.group };
                not_part(format!("{group}/{} {:?}", q.kind, q.resource_name))
            })?;
        let by_id: HashMap<&str, &TreeNode> = tree.iter().map(|n| (n.id.as_str(), *n)).collect();
        let under = |n: &TreeNode| {
            let mut at = Some(n);
            // A tree is acyclic, but a bound keeps a malformed one from looping.
            for _ in 0..16 {
                match at {
                    Some(x) if x.id == root.id => return true,
                    Some(x) => at = x.parent_id.as_deref().and_then(|p| by_id.get(p).copied()),
                    None => return false,
                }
            }
            false
        };
        return Ok(tree.iter().copied().filter(|n| is_pod(n) && under(n)).collect());
    }
    Ok(tree.iter().copied().filter(|n| is_pod(n)).collect())
}

/// `GET /api/applications/{name}/logs`.
pub async fn logs(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
    Query(q): Query<LogsQuery>,
) -> Result<Response, ApiError> {
    let app = authorized(&state, &auth, &name, Role::ReadOnly)?;
    let tail = q.tail_lines.unwrap_or(DEFAULT_TAIL);
    if !(0..=MAX_TAIL).contains(&tail) {
        return Err(ApiError::bad_request(format!("tailLines must be 0 to {MAX_TAIL}")));
    }
    if q.since_seconds.is_some_and(|s| s <= 0) {
        return Err(ApiError::bad_request("sinceSeconds must be positive"));
    }
    let tree = super::tree::build(&state, &app).await?;
    let pods = select_pods(&tree, &q, &name)?;
    if pods.is_empty() {
        return Err(ApiError::not_found(format!(
            "Pods of Application {name:?} (none is live)"
        )));
    }
    if pods.len() > MAX_PODS {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "{} Pods match, at most {MAX_PODS} are read at once: name a Pod (pod=) or a resource (kind=, resourceName=)",
                pods.len()
            ),
        ));
    }
    let dest = state
        .pipeline
        .destination(&app)
        .await
        .map_err(|e| ApiError::new(StatusCode::BAD_GATEWAY, e.to_string()))?;
    if is_local(&app) && pods.iter().any(|p| p.namespace == state.config.namespace) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "logs of Pods in Capstan's own namespace {:?} are not served",
                state.config.namespace
            ),
        ));
    }
    // Every answer holds one of the caller's live-stream places while it is sent (a slow reader of
    // many unfollowed answers holds upstream streams too).
    let Some(permit) = permit(&state, &auth.principal) else {
        return Ok(too_many_streams());
    };
    let params = LogParams {
        container: None,
        follow: q.follow,
        limit_bytes: (!q.follow).then_some(LIMIT_BYTES),
        previous: q.previous,
        since_seconds: q.since_seconds,
        tail_lines: Some(tail),
        timestamps: true,
        ..LogParams::default()
    };
    let mut streams: Vec<BoxStream<'static, LogLine>> = Vec::new();
    let mut first_error = None;
    for pod in &pods {
        let api: Api<Pod> = Api::namespaced(dest.client.clone(), &pod.namespace);
        let live = api
            .get_opt(&pod.name)
            .await
            .map_err(|e| ApiError::kube(&format!("reading Pod {}", pod.name), &e))?;
        let Some(live) = live else { continue };
        let containers = containers_of(&live);
        let chosen: Vec<String> = if q.container.is_empty() {
            containers
        } else if containers.contains(&q.container) {
            vec![q.container.clone()]
        } else if pods.len() == 1 {
            return Err(ApiError::bad_request(format!(
                "Pod {:?} has no container {:?} (it has {})",
                pod.name,
                q.container,
                containers_of(&live).join(", ")
            )));
        } else {
            continue;
        };
        for container in chosen {
            let line = LogLine {
                namespace: pod.namespace.clone(),
                pod: pod.name.clone(),
                container: container.clone(),
                ..LogLine::default()
            };
            let p = LogParams {
                container: Some(container.clone()),
                ..params.clone()
            };
            match api.log_stream(&pod.name, &p).await {
                Ok(reader) => streams.push(lines(reader, line).boxed()),
                Err(err) => {
                    let message = capstan_kube::describe_kube_error(&err);
                    first_error.get_or_insert_with(|| (err, line.clone()));
                    streams.push(stream::iter([LogLine { error: message, ..line }]).boxed());
                }
            }
        }
    }
    // One container asked for and unreadable: the request fails, with the API server's reason.
    if streams.len() == 1
        && let Some((err, line)) = first_error
    {
        let doing = format!(
            "reading the log of {}/{} container {}",
            line.namespace, line.pod, line.container
        );
        return Err(match &err {
            // The kubelet's refusal (no previous container, a container not started): the caller's.
            kube::Error::Api(s) if s.code == 400 => {
                ApiError::bad_request(format!("{doing}: {}", capstan_kube::describe_kube_error(&err)))
            }
            _ => ApiError::kube(&doing, &err),
        });
    }
    let merged: BoxStream<'static, LogLine> = if q.follow {
        stream::select_all(streams).boxed()
    } else {
        stream::iter(streams).flatten().boxed()
    };
    let stop = stop_signal(
        state.clone(),
        auth,
        super::access::project_of(&app).to_string(),
        q.follow,
    );
    let body = merged.take_until(stop).map(move |line| {
        let _held = &permit;
        let mut text = serde_json::to_string(&line).unwrap_or_default();
        text.push('\n');
        Ok::<Bytes, Infallible>(Bytes::from(text))
    });
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-ndjson"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Body::from_stream(body),
    )
        .into_response())
}

/// Whether `app` deploys to the cluster Capstan runs in.
fn is_local(app: &Application) -> bool {
    super::access::cluster_of(app) == capstan_api::cluster::IN_CLUSTER_NAME
}

/// Every container of a live Pod: init containers first, as the kubelet runs them.
fn containers_of(pod: &Pod) -> Vec<String> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    spec.init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .map(|c| c.name.clone())
        .collect()
}

/// Resolves when the answer must end: the server stops; an unfollowed answer after
/// [`MAX_UNFOLLOWED`]; a followed one when the credentials stop being valid or the caller's role in
/// `project` is gone (checked every [`RECHECK`]), or after [`MAX_FOLLOW`].
fn stop_signal(
    state: Arc<State>,
    auth: Auth,
    project: String,
    follow: bool,
) -> futures::future::BoxFuture<'static, ()> {
    use futures::FutureExt;
    let stopping = state.stopping();
    if !follow {
        return async move {
            tokio::select! {
                () = stopping => {}
                () = tokio::time::sleep(MAX_UNFOLLOWED) => {}
            }
        }
        .boxed();
    }
    let expired = async move {
        let deadline = tokio::time::Instant::now() + MAX_FOLLOW;
        loop {
            tokio::time::sleep(RECHECK).await;
            let still = auth.still_valid(&state) && auth.role(&state, &project) >= Role::ReadOnly;
            if !still || tokio::time::Instant::now() >= deadline {
                return;
            }
        }
    };
    async move {
        tokio::select! {
            () = stopping => {}
            () = expired => {}
        }
    }
    .boxed()
}

/// The lines of `reader` (a kubelet's answer with timestamps), each as a [`LogLine`] like `base`;
/// a line longer than [`MAX_LINE`] is cut there, so a container writing without newlines cannot
/// make the server hold more than one buffer per stream.
fn lines(reader: impl AsyncRead + Send + Unpin + 'static, base: LogLine) -> impl futures::Stream<Item = LogLine> {
    struct Reading<R> {
        reader: R,
        buf: Vec<u8>,
        /// Dropping the rest of a line that was cut.
        skipping: bool,
        done: bool,
    }
    let start = Reading {
        reader,
        buf: Vec::with_capacity(4096),
        skipping: false,
        done: false,
    };
    stream::unfold(start, move |mut r| {
        let base = base.clone();
        async move {
            loop {
                if let Some(end) = r.buf.iter().position(|b| *b == b'\n') {
                    let raw: Vec<u8> = r.buf.drain(..=end).collect();
                    if std::mem::take(&mut r.skipping) {
                        continue;
                    }
                    return Some((to_line(&raw[..raw.len() - 1], &base), r));
                }
                if r.buf.len() >= MAX_LINE {
                    let raw: Vec<u8> = r.buf.drain(..).collect();
                    let cut = !std::mem::replace(&mut r.skipping, true);
                    if cut {
                        return Some((to_line(&raw, &base), r));
                    }
                    continue;
                }
                if r.done {
                    if r.buf.is_empty() || std::mem::take(&mut r.skipping) {
                        return None;
                    }
                    let raw: Vec<u8> = r.buf.drain(..).collect();
                    return Some((to_line(&raw, &base), r));
                }
                let mut chunk = [0u8; 8192];
                let want = chunk.len().min(MAX_LINE.saturating_sub(r.buf.len()).max(1));
                match r.reader.read(&mut chunk[..want]).await {
                    Ok(0) | Err(_) => r.done = true,
                    Ok(n) => r.buf.extend_from_slice(&chunk[..n]),
                }
            }
        }
    })
}

/// One raw line (`TIMESTAMP TEXT`, as the kubelet sends with `timestamps=true`).
fn to_line(raw: &[u8], base: &LogLine) -> LogLine {
    let text = String::from_utf8_lossy(raw);
    let text = text.trim_end_matches('\r');
    let (timestamp, content) = match text.split_once(' ') {
        Some((t, rest)) if t.len() >= 20 && t.as_bytes()[4] == b'-' && t.contains('T') => (t, rest),
        _ => ("", text),
    };
    LogLine {
        timestamp: timestamp.to_string(),
        content: content.to_string(),
        ..base.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_api::status::HealthCode;

    fn node(id: &str, parent: Option<&str>, group: &str, kind: &str, ns: &str, name: &str) -> TreeNode {
        TreeNode {
            id: id.into(),
            parent_id: parent.map(String::from),
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            namespace: ns.into(),
            name: name.into(),
            sync: String::new(),
            health: HealthCode::Healthy,
            health_message: String::new(),
            requires_pruning: false,
            wave: 0,
            images: Vec::new(),
        }
    }

    fn tree() -> Vec<TreeNode> {
        vec![
            node("d", None, "apps", "Deployment", "web", "api"),
            node("rs", Some("d"), "apps", "ReplicaSet", "web", "api-1"),
            node("p1", Some("rs"), "", "Pod", "web", "api-1-a"),
            node("p2", Some("rs"), "", "Pod", "web", "api-1-b"),
            node("j", None, "batch", "Job", "web", "migrate"),
            node("p3", Some("j"), "", "Pod", "web", "migrate-x"),
            // Named in Git, denied by the project, never read: listed Missing.
            TreeNode {
                health: HealthCode::Missing,
                ..node("denied", None, "", "Pod", "team-b", "db-0")
            },
        ]
    }

    fn names(v: Vec<&TreeNode>) -> Vec<String> {
        v.into_iter().map(|n| n.name.clone()).collect()
    }

    #[test]
    fn pods_are_chosen_from_the_tree_only() {
        let t = tree();
        let all = select_pods(&t, &LogsQuery::default(), "a").expect("all");
        assert_eq!(names(all), ["api-1-a", "api-1-b", "migrate-x"]);
        let q = LogsQuery {
            group: "apps".into(),
            kind: "Deployment".into(),
            resource_name: "api".into(),
            ..LogsQuery::default()
        };
        assert_eq!(
            names(select_pods(&t, &q, "a").expect("deployment")),
            ["api-1-a", "api-1-b"]
        );
        let q = LogsQuery {
            pod: "migrate-x".into(),
            ..LogsQuery::default()
        };
        assert_eq!(names(select_pods(&t, &q, "a").expect("pod")), ["migrate-x"]);
        for q in [
            LogsQuery {
                pod: "other-team-pod".into(),
                ..LogsQuery::default()
            },
            LogsQuery {
                pod: "api-1-a".into(),
                namespace: "other".into(),
                ..LogsQuery::default()
            },
            LogsQuery {
                kind: "Deployment".into(),
                resource_name: "api".into(),
                ..LogsQuery::default()
            },
            LogsQuery {
                pod: "db-0".into(),
                ..LogsQuery::default()
            },
        ] {
            let err = select_pods(&t, &q, "a").expect_err("outside the tree");
            assert_eq!(err.status, StatusCode::FORBIDDEN, "{q:?}");
        }
    }

    #[tokio::test]
    async fn lines_keep_timestamps_and_are_cut_when_too_long() {
        let long = "x".repeat(MAX_LINE * 2 + 10);
        let text = format!("2026-12-02T07:00:00.123456789Z hello world\n{long}\nplain\n2026-12-02T07:00:01Z last");
        let reader = futures::io::Cursor::new(text.into_bytes());
        let got: Vec<LogLine> = lines(reader, LogLine::default()).collect().await;
        assert_eq!(
            got.len(),
            4,
            "{:?}",
            got.iter().map(|l| l.content.len()).collect::<Vec<_>>()
        );
        assert_eq!(got[0].timestamp, "2026-12-02T07:00:00.123456789Z");
        assert_eq!(got[0].content, "hello world");
        assert_eq!(
            got[1].content.len(),
            MAX_LINE,
            "the long line is cut once, its rest dropped"
        );
        assert_eq!((got[2].timestamp.as_str(), got[2].content.as_str()), ("", "plain"));
        assert_eq!(got[3].content, "last");
    }
}

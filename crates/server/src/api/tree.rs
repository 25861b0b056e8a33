//! The resource tree of an Application: its objects (from `status.resources`), the hooks a running
//! operation waits on (from `status.operationState`, while they are live) and, read live from the
//! destination, what they own — ReplicaSets of Deployments, Pods of ReplicaSets, StatefulSets,
//! DaemonSets and Jobs, Jobs of CronJobs — linked through `ownerReferences`; each Pod with the
//! images it runs.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State as AxState};
use axum::http::StatusCode;
use capstan_api::Application;
use capstan_api::status::HealthCode;
use capstan_health_rules::HealthRules;
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::{Api, ResourceExt};
use serde_json::Value;
#[cfg(test)]
use serde_json::json;

use super::access::authorized;
use crate::auth::Auth;
use crate::auth::rbac::Role;
use crate::error::ApiError;
use crate::state::State;

pub use super::model::TreeNode;

fn id(group: &str, kind: &str, namespace: &str, name: &str) -> String {
    format!("{group}/{kind}/{namespace}/{name}")
}

/// Kinds whose children are shown, and the kinds of those children.
const CHILD_KINDS: [(&str, &str, &str); 3] = [("apps", "v1", "ReplicaSet"), ("", "v1", "Pod"), ("batch", "v1", "Job")];

/// Whether the controller found this root object live. A `Missing` root — not created yet, or named
/// in Git but denied by the project and therefore never read — has no live object to show and no
/// children: nothing of the cluster is read or linked for it.
pub fn is_live_root(node: &TreeNode) -> bool {
    node.parent_id.is_some() || node.health != HealthCode::Missing
}

/// Link live `children` (objects with ownerReferences) below `roots`, transitively. Pure: the
/// objects are given.
pub fn link(roots: Vec<TreeNode>, children: &[Value], rules: &HealthRules) -> Vec<TreeNode> {
    let mut nodes = roots;
    // (namespace, kind, name) → node id, for everything placed so far.
    let mut placed: HashMap<(String, String, String), String> = nodes
        .iter()
        .filter(|n| is_live_root(n))
        .map(|n| ((n.namespace.clone(), n.kind.clone(), n.name.clone()), n.id.clone()))
        .collect();
    let mut remaining: Vec<&Value> = children.iter().collect();
    loop {
        let before = remaining.len();
        remaining.retain(|obj| {
            let ns = obj.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("");
            let owners = obj
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let parent = owners.iter().find_map(|o| {
                let kind = o.get("kind").and_then(Value::as_str)?;
                let name = o.get("name").and_then(Value::as_str)?;
                placed
                    .get(&(ns.to_string(), kind.to_string(), name.to_string()))
                    .cloned()
            });
            let Some(parent) = parent else { return true };
            let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("v1");
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
            let name = obj
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            // Children are built-in kinds or kinds discovery was not asked about: no status-subresource
            // context.
            let health = rules.assess(obj, &capstan_health::Context::default());
            let node = TreeNode {
                id: id(group, &kind, ns, &name),
                parent_id: Some(parent),
                group: group.into(),
                version: version.into(),
                kind: kind.clone(),
                namespace: ns.into(),
                name: name.clone(),
                sync: String::new(),
                health: health.code,
                health_message: health.message,
                requires_pruning: false,
                wave: 0,
                images: Vec::new(),
            };
            placed.insert((ns.to_string(), kind, name), node.id.clone());
            nodes.push(node);
            false
        });
        if remaining.len() == before {
            break;
        }
    }
    nodes
}

/// The Application's own objects.
fn roots(app: &Application) -> Vec<TreeNode> {
    app.status
        .as_ref()
        .map(|s| s.resources.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|r| {
            let health = r.health.unwrap_or_default();
            TreeNode {
                id: id(&r.group, &r.kind, &r.namespace, &r.name),
                parent_id: None,
                group: r.group,
                version: r.version,
                kind: r.kind,
                namespace: r.namespace,
                name: r.name,
                sync: r.status.to_string(),
                health: health.status,
                health_message: health.message,
                requires_pruning: r.requires_pruning,
                wave: r.sync_wave.unwrap_or(0),
                images: Vec::new(),
            }
        })
        .collect()
}

/// What marks a hook's node: its phases then this (`PreSync hook`) in `sync`.
pub(super) const HOOK: &str = " hook";

/// The Application's hooks that are live (Jobs and Pods: what an operation waits on), as roots: they
/// are not in `status.resources`, and Argo CD shows them in the tree while they exist. A hook is an
/// object with the hook annotation that the Application's tracking annotation claims; its `sync`
/// says its phases (`PreSync hook`). Pure: the objects are given.
pub fn hook_roots(app: &Application, live: &[Value], rules: &HealthRules) -> Vec<TreeNode> {
    let tracking = capstan_compare::normalize::Tracking::new(
        app.metadata.namespace.as_deref().unwrap_or_default(),
        &app.name_any(),
    )
    .id();
    live.iter()
        .filter(|o| capstan_compare::normalize::owner(o).as_deref() == Some(tracking.as_str()))
        .filter_map(|o| {
            let Ok(capstan_kube::annotations::HookSpec::Phases(phases)) = capstan_kube::annotations::hook(o) else {
                return None;
            };
            let api_version = o.get("apiVersion").and_then(Value::as_str).unwrap_or("v1");
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            let kind = o.get("kind").and_then(Value::as_str).unwrap_or("");
            let ns = o.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("");
            let name = o.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
            let health = rules.assess(o, &capstan_health::Context::default());
            let phases: Vec<&str> = phases.iter().map(|p| p.as_str()).collect();
            Some(TreeNode {
                id: id(group, kind, ns, name),
                parent_id: None,
                group: group.into(),
                version: version.into(),
                kind: kind.into(),
                namespace: ns.into(),
                name: name.into(),
                sync: format!("{}{HOOK}", phases.join(",")),
                health: health.code,
                health_message: health.message,
                requires_pruning: false,
                wave: 0,
                images: Vec::new(),
            })
        })
        .collect()
}

/// The tree of `app`, children read live from its destination.
pub async fn build(state: &State, app: &Application) -> Result<Vec<TreeNode>, ApiError> {
    let roots = roots(app);
    // While an operation runs, its hooks may be the only live objects (a first sync's PreSync Job).
    let running = app
        .status
        .as_ref()
        .and_then(|s| s.operation_state.as_ref())
        .is_some_and(|op| op.phase == capstan_api::operation::OperationPhase::Running);
    let destination = running.then(|| app.spec.destination.namespace.clone());
    let namespaces: BTreeSet<String> = roots
        .iter()
        .filter(|n| is_live_root(n))
        .filter(|n| {
            matches!(
                n.kind.as_str(),
                "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job" | "CronJob"
            ) || n.kind == "Pod"
        })
        .map(|n| n.namespace.clone())
        .chain(destination)
        .filter(|ns| !ns.is_empty())
        .collect();
    if namespaces.is_empty() {
        return Ok(roots);
    }
    let dest = state
        .pipeline
        .destination(app)
        .await
        .map_err(|e| ApiError::new(StatusCode::BAD_GATEWAY, e.to_string()))?;
    let mut children: Vec<Value> = Vec::new();
    let mut lists = Vec::new();
    for ns in &namespaces {
        for (group, version, kind) in CHILD_KINDS {
            let ar = ApiResource {
                group: group.into(),
                version: version.into(),
                api_version: if group.is_empty() {
                    version.into()
                } else {
                    format!("{group}/{version}")
                },
                kind: kind.into(),
                plural: format!("{}s", kind.to_lowercase()),
            };
            let api: Api<DynamicObject> = Api::namespaced_with(dest.client.clone(), ns, &ar);
            lists.push(async move {
                let list = api.list(&ListParams::default()).await;
                (ar, list)
            });
        }
    }
    for (ar, list) in futures::future::join_all(lists).await {
        match list {
            Ok(list) => children.extend(list.items.into_iter().filter_map(|mut o| {
                o.types = Some(kube::core::TypeMeta {
                    api_version: ar.api_version.clone(),
                    kind: ar.kind.clone(),
                });
                o.managed_fields_mut().clear();
                serde_json::to_value(o).ok()
            })),
            Err(err) => {
                tracing::debug!(kind = %ar.kind, err = %capstan_kube::describe_kube_error(&err), "listing tree children")
            }
        }
    }
    let mut roots = roots;
    let rules = state.pipeline.health.current();
    for hook in hook_roots(app, &children, &rules) {
        if !roots.iter().any(|r| r.id == hook.id) {
            roots.push(hook);
        }
    }
    Ok(with_images(link(roots, &children, &rules), &children))
}

/// Each Pod's images, from its live object. Pure: the objects are given.
pub fn with_images(mut nodes: Vec<TreeNode>, live: &[Value]) -> Vec<TreeNode> {
    for n in nodes.iter_mut().filter(|n| n.kind == "Pod") {
        let Some(pod) = live.iter().find(|o| {
            o.get("kind").and_then(Value::as_str) == Some("Pod")
                && o.pointer("/metadata/namespace").and_then(Value::as_str) == Some(n.namespace.as_str())
                && o.pointer("/metadata/name").and_then(Value::as_str) == Some(n.name.as_str())
        }) else {
            continue;
        };
        for list in ["/spec/initContainers", "/spec/containers"] {
            for c in pod.pointer(list).and_then(Value::as_array).into_iter().flatten() {
                if let Some(image) = c.get("image").and_then(Value::as_str)
                    && !n.images.iter().any(|i| i == image)
                {
                    n.images.push(image.to_string());
                }
            }
        }
    }
    nodes
}

/// `GET /api/applications/{name}/tree`.
pub async fn tree(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
) -> Result<Json<super::model::Tree>, ApiError> {
    let app = authorized(&state, &auth, &name, Role::ReadOnly)?;
    let nodes = build(&state, &app).await?;
    Ok(Json(super::model::Tree { nodes }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(kind: &str, name: &str) -> TreeNode {
        TreeNode {
            id: id("apps", kind, "ns", name),
            parent_id: None,
            group: "apps".into(),
            version: "v1".into(),
            kind: kind.into(),
            namespace: "ns".into(),
            name: name.into(),
            sync: "Synced".into(),
            health: HealthCode::Healthy,
            health_message: String::new(),
            requires_pruning: false,
            wave: 0,
            images: Vec::new(),
        }
    }

    fn owned(api_version: &str, kind: &str, name: &str, owner_kind: &str, owner: &str) -> Value {
        json!({"apiVersion": api_version, "kind": kind,
               "metadata": {"name": name, "namespace": "ns",
                            "ownerReferences": [{"kind": owner_kind, "name": owner, "uid": "u"}]},
               "status": {}})
    }

    #[test]
    fn children_hang_below_their_owners_transitively_and_strangers_are_left_out() {
        let children = vec![
            // Listed before its owner on purpose.
            owned("v1", "Pod", "web-1-abc", "ReplicaSet", "web-1"),
            owned("apps/v1", "ReplicaSet", "web-1", "Deployment", "web"),
            owned("apps/v1", "ReplicaSet", "other-1", "Deployment", "other"),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "loose", "namespace": "ns"}}),
        ];
        let nodes = link(vec![root("Deployment", "web")], &children, &HealthRules::default());
        let ids: Vec<(&str, Option<&str>)> = nodes.iter().map(|n| (n.id.as_str(), n.parent_id.as_deref())).collect();
        assert_eq!(
            ids,
            vec![
                ("apps/Deployment/ns/web", None),
                ("apps/ReplicaSet/ns/web-1", Some("apps/Deployment/ns/web")),
                ("/Pod/ns/web-1-abc", Some("apps/ReplicaSet/ns/web-1")),
            ]
        );
        assert_eq!(nodes[2].version, "v1");
        assert_eq!(nodes[2].sync, "");
    }

    #[test]
    fn a_missing_root_gets_no_children() {
        let mut denied = root("Deployment", "coredns");
        denied.health = HealthCode::Missing;
        let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "coredns-1", "namespace": "ns",
                "ownerReferences": [{"kind": "Deployment", "name": "coredns"}]}});
        let nodes = link(vec![denied], std::slice::from_ref(&rs), &HealthRules::default());
        assert_eq!(nodes.len(), 1, "nothing linked below a root that was never read");
        assert!(!is_live_root(&nodes[0]));
        let nodes = link(vec![root("Deployment", "coredns")], &[rs], &HealthRules::default());
        assert_eq!(nodes.len(), 2, "a live root gets its children");
    }

    #[test]
    fn the_applications_live_hooks_are_roots_with_their_pods_below() {
        let app: Application = serde_json::from_value(json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
            "metadata": {"name": "a", "namespace": "capstan"},
            "spec": {"source": {"repoURL": "https://git.test/r.git"}, "destination": {"namespace": "ns"}}
        }))
        .expect("an Application");
        let hook = |name: &str, tracking: &str, hook: Option<&str>| {
            let mut annotations = json!({"capstan.dev/tracking-id": tracking});
            if let Some(h) = hook {
                annotations["capstan.dev/hook"] = json!(h);
            }
            json!({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "namespace": "ns", "annotations": annotations},
                "status": {"active": 1}})
        };
        let live = vec![
            hook("migrate", "capstan/a", Some("PreSync")),
            hook("other-apps", "capstan/b", Some("PreSync")),
            hook("not-a-hook", "capstan/a", None),
            owned("v1", "Pod", "migrate-x", "Job", "migrate"),
        ];
        let roots = hook_roots(&app, &live, &HealthRules::default());
        assert_eq!(roots.len(), 1, "{roots:?}");
        assert_eq!(
            (roots[0].id.as_str(), roots[0].sync.as_str(), roots[0].health.as_str()),
            ("batch/Job/ns/migrate", "PreSync hook", "Progressing")
        );
        let nodes = link(roots, &live, &HealthRules::default());
        assert_eq!(nodes[1].id, "/Pod/ns/migrate-x");
        assert_eq!(nodes[1].parent_id.as_deref(), Some("batch/Job/ns/migrate"));
    }

    #[test]
    fn a_pod_lists_the_images_it_runs() {
        let mut pod_root = root("Pod", "web");
        pod_root.group = String::new();
        let live = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"initContainers": [{"name": "i", "image": "busybox:1"}],
                     "containers": [{"name": "a", "image": "nginx:1.27"}, {"name": "b", "image": "nginx:1.27"}]}});
        let nodes = with_images(vec![pod_root, root("Deployment", "web")], &[live]);
        assert_eq!(nodes[0].images, vec!["busybox:1", "nginx:1.27"]);
        assert!(nodes[1].images.is_empty());
    }
}

//! The resource tree of an Application: its objects (from `status.resources`) and, read live from
//! the destination, what they own — ReplicaSets of Deployments, Pods of ReplicaSets, StatefulSets,
//! DaemonSets and Jobs, Jobs of CronJobs — linked through `ownerReferences`.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State as AxState};
use axum::http::StatusCode;
use capstan_api::Application;
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
    node.parent_id.is_some() || node.health != "Missing"
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
                health: health.code.as_str().into(),
                health_message: health.message,
                requires_pruning: false,
                wave: 0,
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
                sync: r.status,
                health: health.status,
                health_message: health.message,
                requires_pruning: r.requires_pruning,
                wave: r.sync_wave.unwrap_or(0),
            }
        })
        .collect()
}

/// The tree of `app`, children read live from its destination.
pub async fn build(state: &State, app: &Application) -> Result<Vec<TreeNode>, ApiError> {
    let roots = roots(app);
    let namespaces: BTreeSet<String> = roots
        .iter()
        .filter(|n| is_live_root(n))
        .filter(|n| {
            matches!(
                n.kind.as_str(),
                "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job" | "CronJob"
            )
        })
        .map(|n| n.namespace.clone())
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
    Ok(link(roots, &children, &state.pipeline.health.current()))
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
            health: "Healthy".into(),
            health_message: String::new(),
            requires_pruning: false,
            wave: 0,
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
        denied.health = "Missing".into();
        let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "coredns-1", "namespace": "ns",
                "ownerReferences": [{"kind": "Deployment", "name": "coredns"}]}});
        let nodes = link(vec![denied], std::slice::from_ref(&rs), &HealthRules::default());
        assert_eq!(nodes.len(), 1, "nothing linked below a root that was never read");
        assert!(!is_live_root(&nodes[0]));
        let nodes = link(vec![root("Deployment", "coredns")], &[rs], &HealthRules::default());
        assert_eq!(nodes.len(), 2, "a live root gets its children");
    }
}

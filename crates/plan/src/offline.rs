//! The policies alone, without a cluster, for CI: the objects of a directory of manifests (as a
//! render would give them) judged by the policies of a file or directory, as if synced to a
//! cluster with the given labels in the given project. Every object is a create; kinds map to
//! resources by Kubernetes' pluralisation rules, since there is no discovery to ask.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use capstan_api::Policy;
use capstan_policy::{Candidate, Operation, Resource, Scope};
use serde_json::Value;

use crate::PlanError;
use crate::model::{Action, AppPlan, Change, ObjectPlan, Plan, VerdictPlan};

/// What an offline plan reads.
#[derive(Debug, Clone, Default)]
pub struct OfflineRequest {
    /// The directory (or file) of manifests.
    pub manifests: PathBuf,
    /// Files or directories of `Policy` manifests.
    pub policies: Vec<PathBuf>,
    /// The destination cluster's labels.
    pub cluster_labels: BTreeMap<String, String>,
    /// The destination cluster's name.
    pub cluster: String,
    /// The project.
    pub project: String,
    /// The namespace of namespaced objects that name none.
    pub namespace: String,
}

/// Every YAML or JSON file under `path` (itself when a file), sorted.
fn files(path: &Path) -> Result<Vec<PathBuf>, PlanError> {
    let read_err = |e: std::io::Error| PlanError::Manifests(format!("{}: {e}", path.display()));
    let meta = std::fs::metadata(path).map_err(read_err)?;
    if meta.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(path).map_err(read_err)? {
        let entry = entry.map_err(read_err)?;
        let p = entry.path();
        // Symbolic links are not followed: the manifests are the directory's own.
        let kind = entry.file_type().map_err(read_err)?;
        if kind.is_dir() {
            out.extend(files(&p)?);
        } else if kind.is_file()
            && p.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        {
            out.push(p);
        }
    }
    out.sort();
    Ok(out)
}

/// The objects of every file under `path`.
fn objects(path: &Path) -> Result<Vec<Value>, PlanError> {
    let mut out = Vec::new();
    for file in files(path)? {
        let text =
            std::fs::read_to_string(&file).map_err(|e| PlanError::Manifests(format!("{}: {e}", file.display())))?;
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(&text).map_err(|e| PlanError::Manifests(format!("{}: {e}", file.display())))?;
        for doc in docs.into_iter().filter(|d| d.is_object()) {
            if doc.get("kind").and_then(Value::as_str) == Some("List") {
                out.extend(doc.get("items").and_then(Value::as_array).cloned().unwrap_or_default());
            } else {
                out.push(doc);
            }
        }
    }
    Ok(out)
}

/// Kubernetes' plural of a kind (the rules of its REST mapper's guess).
pub fn plural(kind: &str) -> String {
    let lower = kind.to_lowercase();
    if lower == "endpoints" {
        return lower;
    }
    if let Some(stem) = lower.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        return format!("{stem}ies");
    }
    if lower.ends_with('s')
        || lower.ends_with("x")
        || lower.ends_with("z")
        || lower.ends_with("ch")
        || lower.ends_with("sh")
    {
        return format!("{lower}es");
    }
    format!("{lower}s")
}

/// Cluster-scoped kinds of Kubernetes' own APIs (a custom kind is taken as namespaced when it
/// names a namespace or the request gives one).
const CLUSTER_SCOPED: &[&str] = &[
    "Namespace",
    "Node",
    "PersistentVolume",
    "ClusterRole",
    "ClusterRoleBinding",
    "StorageClass",
    "CustomResourceDefinition",
    "PriorityClass",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "APIService",
    "IngressClass",
    "RuntimeClass",
    "CSIDriver",
    "VolumeAttachment",
];

fn candidate(object: Value, namespace: &str) -> Candidate {
    let text = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let (api_version, kind) = (text("/apiVersion"), text("/kind"));
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
    let namespaced = !CLUSTER_SCOPED.contains(&kind.as_str());
    let mut object = object.clone();
    if namespaced && object.pointer("/metadata/namespace").is_none() && !namespace.is_empty() {
        object["metadata"]["namespace"] = Value::String(namespace.to_string());
    }
    let ns = if namespaced {
        object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    } else {
        String::new()
    };
    Candidate {
        key: format!("{group}/{kind}/{ns}/{}", text("/metadata/name")),
        resource: Resource {
            group: group.to_string(),
            version: version.to_string(),
            kind: kind.clone(),
            resource: plural(&kind),
            namespaced,
        },
        operation: Operation::Create,
        object: Some(object),
        old_object: None,
        namespace_object: None,
    }
}

/// The policies' verdicts on the manifests, as a plan of one Application named after the
/// manifests' path.
pub fn offline(request: &OfflineRequest) -> Result<Plan, PlanError> {
    let mut policies = Vec::new();
    for path in &request.policies {
        for object in objects(path)? {
            if object.get("kind").and_then(Value::as_str) != Some("Policy") {
                continue;
            }
            let policy: Policy = serde_json::from_value(object)
                .map_err(|e| PlanError::Manifests(format!("{}: not a Policy: {e}", path.display())))?;
            policies.push(Arc::new(capstan_policy::compile(&policy)));
        }
    }
    let candidates: Vec<Candidate> = objects(&request.manifests)?
        .into_iter()
        .filter(|o| o.get("kind").and_then(Value::as_str) != Some("Policy"))
        .map(|o| candidate(o, &request.namespace))
        .collect();
    let scope = Scope {
        project: request.project.clone(),
        cluster: request.cluster.clone(),
        cluster_labels: request.cluster_labels.clone(),
    };
    let evaluation = capstan_policy::evaluate(&policies, &scope, &candidates, &HashMap::new());
    let mut objects: Vec<ObjectPlan> = candidates
        .iter()
        .map(|c| ObjectPlan {
            key: c.key.clone(),
            action: Action::Create,
            diff: String::new(),
        })
        .collect();
    objects.sort_by(|a, b| a.key.cmp(&b.key));
    let app = AppPlan {
        name: request.manifests.display().to_string(),
        project: request.project.clone(),
        cluster: request.cluster.clone(),
        namespace: request.namespace.clone(),
        change: if objects.is_empty() {
            Change::Unchanged
        } else {
            Change::Changed
        },
        resolved: String::new(),
        error: None,
        objects,
        verdicts: evaluation.verdicts.iter().map(VerdictPlan::from).collect(),
        deletion_budget: None,
    };
    let mut plan = Plan {
        repo: String::new(),
        revision: String::new(),
        base: None,
        applications: vec![app],
        application_sets: Vec::new(),
    };
    // A policy that does not compile is reported even when it matched nothing.
    for p in policies.iter().filter(|p| !p.errors.is_empty()) {
        plan.applications[0].verdicts.push(VerdictPlan {
            policy: p.name.clone(),
            object: String::new(),
            actions: p.actions.iter().map(|a| a.as_str().to_string()).collect(),
            message: format!("the policy does not compile: {}", p.errors.join("; ")),
        });
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::plural;

    #[test]
    fn kinds_pluralise_as_kubernetes_guesses() {
        for (kind, want) in [
            ("Deployment", "deployments"),
            ("Ingress", "ingresses"),
            ("Policy", "policies"),
            ("Gateway", "gateways"),
            ("PostgreSQLInstance", "postgresqlinstances"),
            ("Endpoints", "endpoints"),
        ] {
            assert_eq!(plural(kind), want);
        }
    }
}

//! The project's rules for the objects of one Application — protected namespaces, permitted kinds,
//! destinations and Capstan grants, child Applications of other projects — and the namespaces a
//! cluster registered for some namespaces only accepts.

use capstan_api::Application;
use capstan_api::project::AppProjectSpec;
use capstan_compare::Comparison;
use capstan_compare::diff::Desired;
use capstan_kube::ObjectKey;
use kube::ResourceExt;
use serde_json::Value;

use super::live::namespace_of;
use crate::clusters::Destination;
use crate::error::PipelineError;

/// Namespaces no Application may manage, create, adopt or prune, whatever its project allows: the
/// cluster's own and Capstan's (where its Applications, projects and credentials live).
const PROTECTED_NAMESPACES: [&str; 4] = ["kube-system", "kube-public", "kube-node-lease", "default"];

/// Why the Namespace `name` may not be managed by any Application, if it may not.
fn protected_namespace(name: &str, capstan_namespace: &str) -> Option<String> {
    (PROTECTED_NAMESPACES.contains(&name) || name == capstan_namespace).then(|| {
        format!(
            "Namespace/{name} is protected: no Application may create, adopt or delete the cluster's own \
             namespaces or Capstan's ({capstan_namespace})"
        )
    })
}

/// The project's rules for the objects of one Application.
pub struct ObjectRules<'a> {
    project: &'a str,
    rules: &'a AppProjectSpec,
    dest: &'a Destination,
    app_namespace: &'a str,
    capstan_namespace: String,
    /// The implicit `default` project: everything is permitted but rendered Applications naming
    /// another project.
    implicit_default: bool,
}

impl<'a> ObjectRules<'a> {
    pub fn new(project: &'a str, rules: &'a AppProjectSpec, dest: &'a Destination, app: &'a Application) -> Self {
        ObjectRules {
            project,
            rules,
            dest,
            app_namespace: app.spec.destination.namespace.as_str(),
            capstan_namespace: app.namespace().unwrap_or_else(|| capstan_api::NAMESPACE.to_string()),
            implicit_default: capstan_project::is_implicit_default(project, rules),
        }
    }

    /// Why a rendered object is not permitted, if it is not.
    pub fn desired_violation(&self, d: &Desired) -> Option<String> {
        let key = ObjectKey::of(&d.object).ok()?;
        self.check(&key.group, &key.kind, d.info.namespaced, &key.namespace, &key.name)
            .or_else(|| self.child_application_violation(&d.object))
    }

    /// Applications, ApplicationSets, ImageUpdaters and PromotionPipelines rendered by this one
    /// (app-of-apps) may only be in this Application's own project, and AppProjects are never
    /// rendered by an Application: otherwise a team could hand itself a more permissive project (or
    /// commit with another team's). The implicit `default` project, which
    /// permits everything anyway, may create Applications of any project (the usual bootstrap).
    fn child_application_violation(&self, object: &Value) -> Option<String> {
        let kind = object.get("kind").and_then(Value::as_str)?;
        let api_version = object.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let capstan_kind = api_version.starts_with("capstan.dev/") || api_version.starts_with("argoproj.io/");
        if !capstan_kind || self.implicit_default {
            return None;
        }
        let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("?");
        let pointer = match kind {
            "Application" | "ImageUpdater" | "PromotionPipeline" => "/spec/project",
            "ApplicationSet" => "/spec/template/spec/project",
            "AppProject" => {
                return Some(format!(
                    "project \"{}\": AppProject/{name}: projects are created by operators, never rendered by an \
                     Application",
                    self.project
                ));
            }
            _ => return None,
        };
        let child = object
            .pointer(pointer)
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
            .unwrap_or(capstan_api::project::DEFAULT_PROJECT);
        (child != self.project).then(|| {
            format!(
                "project \"{}\": {kind}/{name} names project \"{child}\"; an Application may only create \
                 Applications (and ApplicationSets, ImageUpdaters, PromotionPipelines) of its own project",
                self.project
            )
        })
    }

    /// Why an object of this group, kind, namespace and name is not permitted, if it is not.
    fn check(&self, group: &str, kind: &str, namespaced: bool, namespace: &str, name: &str) -> Option<String> {
        if group.is_empty()
            && kind == "Namespace"
            && !namespaced
            && let Some(message) = protected_namespace(name, &self.capstan_namespace)
        {
            return Some(message);
        }
        self.check_rules(group, kind, namespaced, namespace, name)
    }

    /// [`ObjectRules::check`] without the protected namespaces: for `CreateNamespace=true`, which
    /// creates a missing namespace and never touches an existing one.
    fn check_rules(&self, group: &str, kind: &str, namespaced: bool, namespace: &str, name: &str) -> Option<String> {
        let (project, rules, dest, app_namespace) = (self.project, self.rules, self.dest, self.app_namespace);
        let object = format!("{kind}/{name}");
        if let Err(v) = capstan_project::check_resource(project, rules, group, kind, namespaced, &object) {
            return Some(v.to_string());
        }
        if !self.implicit_default {
            let subject = capstan_project::Subject {
                group,
                kind,
                namespaced,
                namespace: if namespace.is_empty() { app_namespace } else { namespace },
                object: &object,
            };
            if let Err(v) = capstan_project::check_capstan_grant(project, rules, &self.capstan_namespace, &subject) {
                return Some(v.to_string());
            }
        }
        // Objects that name their own namespace must stay within the project's destinations too.
        if namespaced && !namespace.is_empty() && namespace != app_namespace {
            return capstan_project::check_destination(project, rules, &dest.server, &dest.name, namespace)
                .err()
                .map(|v| format!("{object}: {v}"));
        }
        None
    }
}

/// What `rules` and the destination's registration do not permit: `(for any sync, for a sync that
/// prunes, for creating the destination namespace)`, one message each naming the object and the rule.
pub fn project_violations(
    project: &str,
    rules: &AppProjectSpec,
    dest: &Destination,
    app: &Application,
    comparison: &Comparison,
) -> (Vec<String>, Vec<String>, Option<String>) {
    let object_rules = ObjectRules::new(project, rules, dest, app);
    let app_namespace = object_rules.app_namespace;
    let check = |group: &str, kind: &str, namespaced: bool, namespace: &str, name: &str| {
        object_rules.check(group, kind, namespaced, namespace, name)
    };
    let mut always = Vec::new();
    let mut pruning = Vec::new();
    for r in comparison.resources.iter().filter(|r| r.owned_by_other.is_none()) {
        let k = &r.key;
        let found = check(&k.group, &k.kind, r.info.namespaced, &k.namespace, &k.name).or_else(|| {
            r.desired
                .as_ref()
                .and_then(|d| object_rules.child_application_violation(d))
        });
        match (found, r.desired.is_some()) {
            (Some(message), true) => always.push(message),
            (Some(message), false) if r.requires_pruning => pruning.push(format!("{message} (it would be pruned)")),
            _ => {}
        }
    }
    // Parsed as the sync parses it (any case, comma-separated lists).
    let create_namespace = app
        .spec
        .sync_policy
        .as_ref()
        .is_some_and(|p| capstan_sync::SyncOptions::parse(&p.sync_options).create_namespace);
    // Checked whether or not the spec asks for it: a sync request may ask too.
    let namespace_violation = if app_namespace.is_empty() {
        None
    } else if let Some(message) = object_rules.check_rules("", "Namespace", false, "", app_namespace) {
        Some(format!("{message} (CreateNamespace=true)"))
    } else if !dest.permits(None) {
        Some(format!(
            "Namespace/{app_namespace}: {} is registered for some namespaces only and may not create namespaces (CreateNamespace=true)",
            dest.describe()
        ))
    } else {
        None
    };
    if create_namespace && let Some(message) = &namespace_violation {
        always.push(message.clone());
    }
    (always, pruning, namespace_violation)
}

/// A cluster registered for some namespaces only may not receive objects outside them.
pub fn check_namespaces(dest: &Destination, desired: &[Desired]) -> Result<(), PipelineError> {
    let refused: Vec<String> = desired
        .iter()
        .filter_map(|d| {
            let ns = d.info.namespaced.then(|| namespace_of(&d.object));
            (!dest.permits(ns.as_deref())).then(|| {
                let name = d
                    .object
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("?");
                match ns {
                    Some(ns) => format!("{}/{name} in namespace {ns:?}", d.info.resource.kind),
                    None => format!("{}/{name} (cluster-scoped)", d.info.resource.kind),
                }
            })
        })
        .collect();
    if refused.is_empty() {
        return Ok(());
    }
    let allowed = dest
        .secret
        .as_ref()
        .map(|s| s.namespaces.join(", "))
        .unwrap_or_default();
    Err(PipelineError::NamespacesRefused {
        destination: dest.describe(),
        allowed,
        refused,
    })
}

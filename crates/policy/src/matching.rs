//! Which objects a policy applies to: `matchConstraints` as Kubernetes reads them (resource rules
//! with operations, names and scope, their exclusions, namespace and object selectors), checked
//! when the policy is compiled so a mistake is reported on the policy, not skipped.

use std::collections::BTreeMap;

use capstan_kube::Selector;
use k8s_openapi::api::admissionregistration::v1::{MatchResources, NamedRuleWithOperations};
use serde_json::Value as Json;

/// What a sync would do to an object (Kubernetes' admission operations Capstan can cause).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// The object is not live yet.
    Create,
    /// The object is live and would be applied again.
    Update,
    /// The object would be pruned.
    Delete,
}

impl Operation {
    /// The operation's name in `resourceRules` and in `request.operation`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

/// An object's identity as the rules see it.
#[derive(Debug, Clone, Default)]
pub struct Resource {
    /// API group (`""` for the core group).
    pub group: String,
    /// API version (`v1`).
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Resource, plural, as the API server serves it (`deployments`).
    pub resource: String,
    /// Whether objects of the kind live in namespaces.
    pub namespaced: bool,
}

/// One `resourceRules` (or `excludeResourceRules`) entry, checked.
#[derive(Debug, Clone)]
struct Rule {
    groups: Vec<String>,
    versions: Vec<String>,
    resources: Vec<String>,
    operations: Vec<String>,
    names: Vec<String>,
    scope: String,
}

const OPERATIONS: &[&str] = &["CREATE", "UPDATE", "DELETE", "CONNECT", "*"];

impl Rule {
    fn new(rule: &NamedRuleWithOperations, at: &str) -> Result<Rule, String> {
        let list = |field: &str, v: &Option<Vec<String>>| -> Result<Vec<String>, String> {
            match v {
                Some(items) if !items.is_empty() => Ok(items.clone()),
                _ => Err(format!("{at}.{field} is required")),
            }
        };
        let operations = list("operations", &rule.operations)?;
        if let Some(bad) = operations.iter().find(|o| !OPERATIONS.contains(&o.as_str())) {
            return Err(format!(
                "{at}.operations: {bad:?} is not one of CREATE, UPDATE, DELETE, CONNECT, *"
            ));
        }
        let scope = rule.scope.clone().unwrap_or_else(|| "*".into());
        if !["*", "Cluster", "Namespaced"].contains(&scope.as_str()) {
            return Err(format!("{at}.scope: {scope:?} is not one of *, Cluster, Namespaced"));
        }
        Ok(Rule {
            groups: list("apiGroups", &rule.api_groups)?,
            versions: list("apiVersions", &rule.api_versions)?,
            resources: list("resources", &rule.resources)?,
            operations,
            names: rule.resource_names.clone().unwrap_or_default(),
            scope,
        })
    }

    /// Whether the rule names `r`; with `equivalent` (`matchPolicy: Equivalent`, the default) any
    /// version of its group and resource is named.
    fn matches(&self, r: &Resource, name: &str, op: Operation, equivalent: bool) -> bool {
        let any = |list: &[String], value: &str| list.iter().any(|x| x == "*" || x == value);
        // `deployments/*` names subresources only; `*/*` every resource and subresource.
        let resource = self
            .resources
            .iter()
            .any(|x| x == "*" || x == "*/*" || *x == r.resource);
        let scope = match self.scope.as_str() {
            "Cluster" => !r.namespaced,
            "Namespaced" => r.namespaced,
            _ => true,
        };
        any(&self.groups, &r.group)
            && (equivalent || any(&self.versions, &r.version))
            && resource
            && any(&self.operations, op.as_str())
            && (self.names.is_empty() || self.names.iter().any(|n| n == name))
            && scope
    }
}

/// A policy's `matchConstraints`, checked.
#[derive(Debug, Clone)]
pub struct Matcher {
    /// `matchPolicy` is `Equivalent` (the default), not `Exact`.
    equivalent: bool,
    rules: Vec<Rule>,
    exclude: Vec<Rule>,
    namespace_selector: Selector,
    object_selector: Selector,
}

/// The object a rule is matched against.
pub struct Subject<'a> {
    /// Its kind and resource.
    pub resource: &'a Resource,
    /// What the sync would do to it.
    pub operation: Operation,
    /// The object after the operation (none for a delete).
    pub object: Option<&'a Json>,
    /// The object before it (none for a create).
    pub old_object: Option<&'a Json>,
    /// The labels of its namespace on the destination (none when not known or not namespaced).
    pub namespace_labels: Option<&'a BTreeMap<String, String>>,
}

impl Subject<'_> {
    fn either(&self) -> Option<&Json> {
        self.object.or(self.old_object)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        self.either()
            .and_then(|o| o.pointer("/metadata/name"))
            .and_then(Json::as_str)
            .unwrap_or_default()
    }
}

/// The labels of `object` (none when absent).
pub fn labels_of(object: Option<&Json>) -> BTreeMap<String, String> {
    object
        .and_then(|o| o.pointer("/metadata/labels"))
        .and_then(Json::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

impl Matcher {
    /// `matchConstraints`, or why it cannot be used.
    pub fn new(constraints: Option<&MatchResources>) -> Result<Matcher, String> {
        let Some(c) = constraints else {
            return Err("spec.matchConstraints is required".into());
        };
        let rules = c
            .resource_rules
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, r)| Rule::new(r, &format!("spec.matchConstraints.resourceRules[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        if rules.is_empty() {
            return Err("spec.matchConstraints.resourceRules is required".into());
        }
        let exclude = c
            .exclude_resource_rules
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, r)| Rule::new(r, &format!("spec.matchConstraints.excludeResourceRules[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        // `Equivalent`: the API server converts an object to the version a rule names; Capstan
        // cannot convert, so a rule names every version of its resources and the object is judged
        // at the version it is rendered in (rendering it at another version does not escape it).
        if let Some(policy) = &c.match_policy
            && policy != "Exact"
            && policy != "Equivalent"
        {
            return Err(format!(
                "spec.matchConstraints.matchPolicy: {policy:?} is not Exact or Equivalent"
            ));
        }
        let selector = |s: &Option<_>, field: &str| match s {
            Some(s) => Selector::new(s).map_err(|e| format!("spec.matchConstraints.{field}: {e}")),
            None => Ok(Selector::default()),
        };
        Ok(Matcher {
            equivalent: c.match_policy.as_deref() != Some("Exact"),
            rules,
            exclude,
            namespace_selector: selector(&c.namespace_selector, "namespaceSelector")?,
            object_selector: selector(&c.object_selector, "objectSelector")?,
        })
    }

    /// Whether `subject` is one of the objects it names.
    pub fn matches(&self, subject: &Subject) -> bool {
        let name = subject.name();
        let (r, op) = (subject.resource, subject.operation);
        if !self.rules.iter().any(|rule| rule.matches(r, name, op, self.equivalent)) {
            return false;
        }
        if self
            .exclude
            .iter()
            .any(|rule| rule.matches(r, name, op, self.equivalent))
        {
            return false;
        }
        // As the API server: the object's labels, or the old object's.
        // A missing object (the old one of a create, the new one of a delete) is not considered
        // to match, as the API server says.
        let selected = |o: Option<&Json>| o.is_some_and(|o| self.object_selector.matches(&labels_of(Some(o))));
        if !self.object_selector.is_empty() && !selected(subject.object) && !selected(subject.old_object) {
            return false;
        }
        if self.namespace_selector.is_empty() {
            return true;
        }
        if r.group.is_empty() && r.kind == "Namespace" {
            return self.namespace_selector.matches(&labels_of(subject.either()));
        }
        if !r.namespaced {
            // Other cluster-scoped objects are never skipped by a namespace selector.
            return true;
        }
        let none = BTreeMap::new();
        self.namespace_selector
            .matches(subject.namespace_labels.unwrap_or(&none))
    }

    /// Whether its `namespaceSelector` needs the labels of the objects' namespaces.
    pub fn reads_namespaces(&self) -> bool {
        !self.namespace_selector.is_empty()
    }
}

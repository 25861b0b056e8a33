//! Policies (`capstan.dev/v1alpha1` `Policy`, docs/guardrails.md), read-only: every policy of Capstan's
//! namespace with its actions, its scope, whether it compiled and its recent verdicts. Any
//! logged-in user may list the policies; a verdict names an Application, its cluster and an object
//! of it, so the caller sees only the verdicts about Applications it may read ([`super::access`]'s
//! rule: a role of at least `read-only` in the Application's project).
//!
//! The API writes no policy: nothing here or elsewhere in the server creates, changes or deletes
//! one (they are written with `kubectl` or from Git by whoever may write them in the cluster), and
//! the server's role in the install may only read them.
//!
//! Policies are read from the API server on each request, as the cluster status ConfigMap is in
//! [`super::fleet`]: a page a person opens now and then, not worth a watch of its own.

use std::sync::Arc;

use axum::Json;
use axum::extract::State as AxState;
use capstan_api::Policy;
use capstan_api::policy::{PolicyVerdict, ValidationAction};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use super::access::project_of;
use super::model::{Items, PolicyItem};
use crate::auth::Auth;
use crate::auth::rbac::Role;
use crate::error::ApiError;
use crate::state::State;

/// The type of the condition the controller writes on a policy's status.
const READY: &str = "Ready";

/// `GET /api/policies`: every policy in name order, with the verdicts the caller may see.
pub async fn list(auth: Auth, AxState(state): AxState<Arc<State>>) -> Result<Json<Items<PolicyItem>>, ApiError> {
    let api: Api<Policy> = Api::namespaced(state.client.clone(), &state.config.namespace);
    let policies = match api.list(&ListParams::default()).await {
        Ok(list) => list.items,
        // No Policy CRD (an install older than policies): no policy, as the controller reads it.
        Err(kube::Error::Api(e)) if e.code == 404 => Vec::new(),
        Err(e) => return Err(ApiError::kube("listing the policies", &e)),
    };
    let mut items: Vec<PolicyItem> = policies
        .iter()
        .map(|p| item(p, |application| may_see(&state, &auth, application)))
        .collect();
    items.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Json(Items { items }))
}

/// Whether `auth` may see a verdict about `application` (`NAMESPACE/NAME`): it may read that
/// Application. An Application that no longer exists (or of another namespace) has no project to
/// judge by: only a caller who may read every project sees it.
fn may_see(state: &State, auth: &Auth, application: &str) -> bool {
    let roles = state.policy();
    let (namespace, name) = application.split_once('/').unwrap_or(("", application));
    let app = (namespace == state.config.namespace).then(|| state.app(name)).flatten();
    let project = app.as_deref().map_or("*", project_of);
    roles.role(&auth.principal, project) >= Role::ReadOnly
}

/// `policy` as answered, keeping the verdicts `visible` accepts (by their Application).
fn item(policy: &Policy, visible: impl Fn(&str) -> bool) -> PolicyItem {
    let spec = &policy.spec;
    let status = policy.status.clone().unwrap_or_default();
    let (ready, ready_message) = readiness(policy);
    let validation_actions = if spec.validation_actions.is_empty() {
        vec![ValidationAction::Deny]
    } else {
        spec.validation_actions.clone()
    };
    PolicyItem {
        name: policy.name_any(),
        validation_actions,
        cluster_selector: spec.cluster_selector.as_ref().map(selector_text).unwrap_or_default(),
        projects: spec.projects.clone(),
        ready,
        ready_message,
        recent_verdicts: status
            .recent_verdicts
            .into_iter()
            .filter(|v| visible(&v.application))
            .map(|v| PolicyVerdict {
                // A message may quote an object's values: none of a secret leaves the server.
                message: capstan_redact::scrub(&v.message),
                ..v
            })
            .collect(),
    }
}

/// Whether `policy` compiled, and the `Ready` condition's message: not ready, saying why, before the
/// controller has described the policy's current generation.
fn readiness(policy: &Policy) -> (bool, String) {
    let generation = policy.metadata.generation;
    let condition = policy
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == READY));
    let Some(condition) = condition else {
        return (false, "not checked yet: the controller has not compiled it".into());
    };
    let described = condition
        .observed_generation
        .or(policy.status.as_ref().and_then(|s| s.observed_generation));
    if let (Some(described), Some(generation)) = (described, generation)
        && described < generation
    {
        return (
            false,
            format!(
                "not checked yet: generation {generation} was not compiled by the controller yet (its status describes generation {described})"
            ),
        );
    }
    (condition.status == "True", condition.message.clone())
}

/// A label selector as text, in the syntax `kubectl -l` and the Application list's `label` filter
/// read: `env=prod,tier in (a,b),tier notin (c),canary,!legacy`.
fn selector_text(selector: &LabelSelector) -> String {
    let mut parts: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for e in selector.match_expressions.iter().flatten() {
        let values = e.values.as_deref().unwrap_or_default().join(",");
        parts.push(match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            "DoesNotExist" => format!("!{}", e.key),
            other => format!("{} {other} ({values})", e.key),
        });
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelectorRequirement, Time};
    use serde_json::json;

    fn policy(value: serde_json::Value) -> Policy {
        serde_json::from_value(value).expect("a Policy")
    }

    fn verdict(application: &str) -> PolicyVerdict {
        PolicyVerdict {
            time: "2026-12-01T10:00:00Z".into(),
            application: application.into(),
            cluster: "in-cluster".into(),
            object: "apps/Deployment/web/web".into(),
            actions: vec![ValidationAction::Deny],
            message: "replicas must be at most 5".into(),
        }
    }

    fn ready(status: &str, message: &str, generation: i64) -> Condition {
        Condition {
            type_: READY.into(),
            status: status.into(),
            reason: "Compiled".into(),
            message: message.into(),
            observed_generation: Some(generation),
            last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        }
    }

    #[test]
    fn selectors_read_as_kubectl_writes_them() {
        let s = LabelSelector {
            match_labels: Some([("env".to_string(), "prod".to_string())].into()),
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "In".into(),
                    values: Some(vec!["a".into(), "b".into()]),
                },
                LabelSelectorRequirement {
                    key: "zone".into(),
                    operator: "NotIn".into(),
                    values: Some(vec!["c".into()]),
                },
                LabelSelectorRequirement {
                    key: "canary".into(),
                    operator: "Exists".into(),
                    values: None,
                },
                LabelSelectorRequirement {
                    key: "legacy".into(),
                    operator: "DoesNotExist".into(),
                    values: None,
                },
            ]),
        };
        assert_eq!(
            selector_text(&s),
            "env=prod,tier in (a,b),zone notin (c),canary,!legacy"
        );
        assert_eq!(selector_text(&LabelSelector::default()), "");
    }

    #[test]
    fn an_item_says_whether_it_compiled_and_keeps_only_visible_verdicts() {
        let mut p = policy(json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "Policy",
            "metadata": {"name": "limits", "generation": 2},
            "spec": {"validations": [{"expression": "true"}], "projects": ["team-a"]},
        }));
        let unchecked = item(&p, |_| true);
        assert_eq!(
            unchecked.validation_actions,
            vec![ValidationAction::Deny],
            "the default"
        );
        assert_eq!(unchecked.cluster_selector, "");
        assert!(!unchecked.ready);
        assert!(
            unchecked.ready_message.contains("not checked yet"),
            "{}",
            unchecked.ready_message
        );

        p.status = Some(capstan_api::PolicyStatus {
            observed_generation: Some(1),
            conditions: vec![ready("True", "every expression compiled", 1)],
            recent_verdicts: vec![verdict("capstan/a"), verdict("capstan/b")],
        });
        let stale = item(&p, |_| true);
        assert!(
            !stale.ready,
            "a condition of an earlier generation says nothing of this one"
        );
        assert!(stale.ready_message.contains("generation 2"), "{}", stale.ready_message);

        let status = p.status.as_mut().expect("status");
        status.observed_generation = Some(2);
        status.conditions = vec![ready("False", "validations[0].expression: undeclared reference", 2)];
        let broken = item(&p, |application| application == "capstan/b");
        assert!(!broken.ready);
        assert_eq!(broken.ready_message, "validations[0].expression: undeclared reference");
        let seen: Vec<_> = broken.recent_verdicts.iter().map(|v| v.application.as_str()).collect();
        assert_eq!(seen, ["capstan/b"]);

        p.status.as_mut().expect("status").conditions = vec![ready("True", "every expression compiled", 2)];
        assert!(item(&p, |_| false).ready);
        assert!(item(&p, |_| false).recent_verdicts.is_empty());
    }
}

//! The guardrails an operation passes before anything is applied: the project's deletion budget
//! (how many objects one sync may prune before a person confirms) and the policies in scope of the
//! destination and project (`Deny` refuses the whole operation; `Warn` goes on with a warning;
//! `Audit` only records). Both refuse before the first write, so nothing of a refused sync is
//! applied or deleted.

use capstan_api::Application;
use capstan_api::project::DeletionBudget;
use capstan_compare::Comparison;
use capstan_kube::ObjectKey;
use capstan_sync::SyncOptions;
use kube::ResourceExt;

use crate::context::Ctx;
use crate::pipeline::AppState;
use crate::policies::SyncScope;
use crate::projects::Project;

/// Why the deletion budget stops a sync of `comparison` that prunes (of `selected` objects only,
/// when not empty), if it does: the objects it would prune and the limit they exceed.
pub fn over_budget(budget: Option<&DeletionBudget>, comparison: &Comparison, selected: &[ObjectKey]) -> Option<String> {
    let budget = budget?;
    let chosen = |key: &ObjectKey| selected.is_empty() || selected.contains(key);
    // What a prune deletes: not the objects that say `Prune=false`.
    let pruned: Vec<_> = comparison
        .resources
        .iter()
        .filter(|r| r.requires_pruning && !r.hook && chosen(&r.key))
        .filter(|r| r.live.as_ref().is_none_or(|l| SyncOptions::of_object(l).prune))
        .collect();
    // Deleting a Namespace or a CustomResourceDefinition deletes everything in it: over any budget.
    let containers: Vec<String> = pruned
        .iter()
        .filter(|r| {
            (r.key.group.is_empty() && r.key.kind == "Namespace")
                || (r.key.group == "apiextensions.k8s.io" && r.key.kind == "CustomResourceDefinition")
        })
        .map(|r| r.key.to_string())
        .collect();
    let pruned = pruned.len();
    let tracked = comparison
        .resources
        .iter()
        .filter(|r| r.live.is_some() && !r.hook)
        .count();
    let mut exceeded = Vec::new();
    if let Some(max) = budget.max_objects
        && pruned > max as usize
    {
        exceeded.push(format!("maxObjects {max}"));
    }
    if let Some(max) = budget.max_percent
        && pruned * 100 > max as usize * tracked
    {
        exceeded.push(format!("maxPercent {max} of {tracked} tracked objects"));
    }
    if !containers.is_empty() {
        exceeded.push(format!("{} deletes everything in it", containers.join(", ")));
    }
    (!exceeded.is_empty()).then(|| {
        format!(
            "the sync would prune {pruned} objects, more than the project's deletion budget allows ({})",
            exceeded.join(", ")
        )
    })
}

/// What the policies said about an operation that may go on: the warnings to show on the
/// Application.
#[derive(Debug, Default)]
pub struct Passed {
    /// One line per `Warn` verdict: policy, object, message.
    pub warnings: Vec<String>,
}

/// The policies' verdicts on the objects an operation of `app` would apply (and prune, with
/// `prune`), against `state`: `Err` with the denials, each naming the policy, the object and the
/// message, when any policy denies or the policies cannot be evaluated (fail closed).
pub async fn policies(
    ctx: &Ctx,
    app: &Application,
    project: &Project,
    state: &AppState,
    selected: &[ObjectKey],
    prune: bool,
) -> Result<Passed, String> {
    let destination = &state.destination;
    let application = format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any());
    // The cluster labels the policies' clusterSelector reads come from the cluster Secrets: read
    // once before judging (right after a start, `in-cluster`'s would otherwise look empty).
    ctx.pipeline.clusters.wait_ready().await;
    let scope = SyncScope {
        application: application.clone(),
        project: &project.name,
        destination,
        cluster_labels: ctx.pipeline.clusters.labels_of(&destination.name),
        prune,
    };
    let resources: Vec<_> = state
        .comparison
        .resources
        .iter()
        .filter(|r| selected.is_empty() || selected.contains(&r.key))
        .cloned()
        .collect();
    let evaluation = ctx
        .pipeline
        .policies
        .check(&scope, &resources)
        .await
        .map_err(|e| e.to_string())?;
    if evaluation.evaluated > 0 {
        tracing::debug!(app = %application, evaluated = evaluation.evaluated, cost = evaluation.cost, "policies evaluated");
    }
    if !evaluation.verdicts.is_empty() {
        ctx.pipeline
            .policies
            .record(&application, &destination.name, &evaluation.verdicts)
            .await;
    }
    let line = |v: &capstan_policy::Verdict| format!("policy {} on {}: {}", v.policy, v.object, v.message);
    let denials: Vec<String> = evaluation.denials().map(line).collect();
    if !denials.is_empty() {
        return Err(at_most(denials));
    }
    let warnings: Vec<String> = evaluation.verdicts.iter().filter(|v| v.warns()).map(line).collect();
    Ok(Passed {
        warnings: if warnings.is_empty() {
            warnings
        } else {
            vec![at_most(warnings)]
        },
    })
}

/// The verdicts listed in one condition or Event (the rest counted): a sync of thousands of objects
/// that all break a policy must not make a status too large to write.
pub const LISTED: usize = 20;

/// `lines` joined, at most [`LISTED`] of them and how many more.
fn at_most(lines: Vec<String>) -> String {
    let more = lines.len().saturating_sub(LISTED);
    let mut text = lines.into_iter().take(LISTED).collect::<Vec<_>>().join("; ");
    if more > 0 {
        text.push_str(&format!("; and {more} more"));
    }
    text
}

/// Judge the live objects of `state` by the `Audit` policies in scope, in the background: what
/// they find is recorded on their status; nothing waits for it or is blocked by it.
pub fn audit_live(ctx: &Ctx, app: &Application, project: &Project, state: &AppState) {
    let policies = ctx.pipeline.policies.clone();
    if !policies.audits() {
        return;
    }
    let clusters = ctx.pipeline.clusters.clone();
    let application = format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any());
    let project = project.name.clone();
    let destination = state.destination.clone();
    let resources = state.comparison.resources.clone();
    tokio::spawn(async move {
        let scope = SyncScope {
            application,
            project: &project,
            destination: &destination,
            cluster_labels: clusters.labels_of(&destination.name),
            prune: false,
        };
        policies.audit(&scope, &resources).await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_compare::ResourceState;
    use capstan_kube::KindInfo;

    fn resource(name: &str, live: bool, pruned: bool) -> ResourceState {
        ResourceState {
            key: ObjectKey::parse(&format!("/ConfigMap/n/{name}")).expect("key"),
            api_version: "v1".into(),
            info: KindInfo {
                resource: kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
                namespaced: true,
                status_subresource: Some(false),
            },
            desired: (!pruned).then(|| serde_json::json!({})),
            live: live.then(|| serde_json::json!({})),
            predicted: None,
            sync: capstan_compare::SyncCode::Synced,
            requires_pruning: pruned,
            hook: false,
            wave: 0,
            owned_by_other: None,
            error: None,
        }
    }

    #[test]
    fn thousands_of_verdicts_are_listed_twenty_and_counted() {
        let lines: Vec<String> = (0..2000).map(|i| format!("policy p on o{i}: no")).collect();
        let text = at_most(lines);
        assert!(text.starts_with("policy p on o0: no; policy p on o1: no"), "{text}");
        assert!(text.ends_with("policy p on o19: no; and 1980 more"), "{text}");
        assert_eq!(at_most(vec!["one".into()]), "one");
    }

    #[test]
    fn the_budget_counts_what_would_be_pruned_against_both_limits() {
        let mut resources: Vec<_> = (0..8).map(|i| resource(&format!("p{i}"), true, true)).collect();
        resources.extend((0..2).map(|i| resource(&format!("k{i}"), true, false)));
        let comparison = Comparison { resources };
        let budget = |objects, percent| DeletionBudget {
            max_objects: objects,
            max_percent: percent,
        };
        assert_eq!(over_budget(None, &comparison, &[]), None);
        assert_eq!(over_budget(Some(&budget(Some(8), None)), &comparison, &[]), None);
        assert_eq!(
            over_budget(Some(&budget(Some(5), Some(50))), &comparison, &[]).as_deref(),
            Some(
                "the sync would prune 8 objects, more than the project's deletion budget allows (maxObjects 5, maxPercent 50 of 10 tracked objects)"
            )
        );
        assert_eq!(over_budget(Some(&budget(None, Some(80))), &comparison, &[]), None);
        // An object that says Prune=false is not deleted, so not counted.
        let mut kept = resource("kept", true, true);
        kept.live = Some(serde_json::json!({"metadata": {"annotations": {"capstan.dev/sync-options": "Prune=false"}}}));
        let mut with_kept = comparison.clone();
        with_kept.resources.push(kept);
        assert_eq!(over_budget(Some(&budget(Some(8), None)), &with_kept, &[]), None);
        // A Namespace deletes everything in it: over any budget.
        let mut ns = resource("team", true, true);
        ns.key = ObjectKey::parse("/Namespace//team").expect("key");
        let mut with_ns = comparison.clone();
        with_ns.resources.push(ns);
        let over = over_budget(Some(&budget(Some(100), None)), &with_ns, &[]).unwrap_or_default();
        assert!(over.contains("/Namespace//team deletes everything in it"), "{over}");
        let one = [ObjectKey::parse("/ConfigMap/n/p0").expect("key")];
        assert_eq!(
            over_budget(Some(&budget(Some(1), None)), &comparison, &one),
            None,
            "a selective sync prunes only what it selects"
        );
    }
}

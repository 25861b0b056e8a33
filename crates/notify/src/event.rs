//! The state changes of an Application that can be notified ([`Trigger`]), read from its status:
//! each present state is a [`Fact`] with a fingerprint that stays the same while the state does
//! (the operation's id for a finished sync, the revision for a deployment, the message for a
//! denial) and an [`Event`] describing it. Promotions to an Application ([`promotion_facts`]) are
//! read from the history of the PromotionPipelines that target it: one fact per promotion, its
//! commit as fingerprint.

use capstan_api::notification::Trigger;
use capstan_api::operation::OperationPhase;
use capstan_api::status::{ConditionType, HealthCode, SyncCode};
use capstan_api::{Application, PromotionPipeline};
use kube::ResourceExt;
use serde::{Deserialize, Serialize};

/// One notified state change, as every destination describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// Unique per Application, trigger and state: a receiver can drop a repeat by it.
    pub id: String,
    /// What happened.
    pub trigger: Trigger,
    /// When it was seen (RFC 3339).
    pub time: String,
    /// The Application's namespace.
    pub namespace: String,
    /// The Application's name.
    pub application: String,
    /// Its project.
    pub project: String,
    /// The commit concerned (the one synced, deployed or refused).
    pub revision: String,
    /// The repository of its first source.
    #[serde(rename = "repoURL")]
    pub repo_url: String,
    /// Sync status now.
    pub sync: String,
    /// Health status now.
    pub health: String,
    /// What the controller said (operation message, health message or condition), secrets scrubbed.
    pub message: String,
    /// The promotion, for `PromotionMade` (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promotion: Option<Promotion>,
}

/// A promotion, as a `PromotionMade` event describes it (from the pipeline's `status.history`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Promotion {
    /// The PromotionPipeline.
    pub pipeline: String,
    /// The service promoted.
    pub service: String,
    /// The source stage (environment).
    pub from: String,
    /// The target stage (environment).
    pub to: String,
    /// The Application deploying the source stage.
    pub source_application: String,
    /// The Application deploying the target stage (the event's `application`).
    pub target_application: String,
    /// The commit the promotion made (the event's `revision`).
    pub commit: String,
    /// The source Application's synced revision the values were read at.
    pub source_revision: String,
    /// What was promoted: each field of the target's file (`imageTag`, `targetRevision`, values),
    /// its value before and the value promoted.
    pub changes: Vec<PromotedField>,
    /// Who promoted.
    pub user: String,
    /// Whether a failing check was overridden (`--force`), and why.
    pub forced: bool,
    /// Why it was forced (empty when it was not).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// One field a promotion changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromotedField {
    /// The key (`imageTag`, `a.b`).
    pub field: String,
    /// The target's value before.
    pub old: String,
    /// The value promoted.
    pub new: String,
}

/// A state present now: the trigger, its fingerprint and the event to send when it is new.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fact {
    /// The trigger.
    pub trigger: Trigger,
    /// Changes only when the state does.
    pub fingerprint: String,
    /// The event.
    pub event: Event,
}

/// A short, stable digest of `text` (FNV-1a, hexadecimal): fingerprints of messages stay small in
/// the annotation. Written here because it is eight lines and needs no cryptographic strength.
fn digest(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Every notifiable state `app` is in now, at time `now` (RFC 3339).
pub fn facts(app: &Application, now: &str) -> Vec<Fact> {
    let status = app.status.clone().unwrap_or_default();
    let sync = status.sync.as_ref().map(|s| s.status).unwrap_or_default();
    let health = status.health.as_ref().map(|h| h.status).unwrap_or_default();
    let synced_revision = status.sync.as_ref().map(|s| s.revision.clone()).unwrap_or_default();
    let project = if app.spec.project.is_empty() {
        "default".to_string()
    } else {
        app.spec.project.clone()
    };
    let namespace = app.namespace().unwrap_or_default();
    let name = app.name_any();
    let repo_url = app
        .spec
        .sources()
        .first()
        .map(|s| s.repo_url.clone())
        .unwrap_or_default();
    let event = |trigger: Trigger, fingerprint: &str, revision: &str, message: &str| Fact {
        trigger,
        fingerprint: fingerprint.to_string(),
        event: Event {
            id: format!("{namespace}/{name}/{trigger}/{}", digest(fingerprint)),
            trigger,
            time: now.to_string(),
            namespace: namespace.clone(),
            application: name.clone(),
            project: project.clone(),
            revision: revision.to_string(),
            repo_url: repo_url.clone(),
            sync: sync.to_string(),
            health: health.to_string(),
            message: capstan_redact::scrub(message),
            promotion: None,
        },
    };
    let mut out = Vec::new();
    if let Some(op) = status.operation_state.as_ref().filter(|o| o.finished_at.is_some()) {
        // One operation, however many times it was retried, is one event: its request id, else its
        // start time.
        let id = op
            .operation
            .as_ref()
            .map(|o| o.id.clone())
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| op.started_at.clone());
        let trigger = match op.phase {
            OperationPhase::Succeeded => Some(Trigger::SyncSucceeded),
            OperationPhase::Failed | OperationPhase::Error => Some(Trigger::SyncFailed),
            _ => None,
        };
        if let Some(trigger) = trigger {
            out.push(event(
                trigger,
                &format!("{id}@{}", op.started_at),
                &op.revision,
                &op.message,
            ));
        }
    }
    if health == HealthCode::Degraded {
        let message = status.health.as_ref().map(|h| h.message.clone()).unwrap_or_default();
        out.push(event(Trigger::HealthDegraded, "Degraded", &synced_revision, &message));
    }
    if sync == SyncCode::Synced && health == HealthCode::Healthy && !synced_revision.is_empty() {
        let revisions = status
            .sync
            .as_ref()
            .map(|s| s.revisions.join(","))
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| synced_revision.clone());
        out.push(event(
            Trigger::Deployed,
            &revisions,
            &synced_revision,
            "Synced and Healthy",
        ));
    }
    if let Some(c) = status
        .conditions
        .iter()
        .find(|c| c.type_ == ConditionType::PolicyDenied)
    {
        let revision = status
            .operation_state
            .as_ref()
            .map(|o| o.revision.clone())
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| synced_revision.clone());
        out.push(event(Trigger::PolicyDenied, &digest(&c.message), &revision, &c.message));
    }
    out
}

/// The promotions made to `app` (those of `pipelines` whose target stage it deploys, in its
/// namespace), newest first: one `PromotionMade` fact each, fingerprinted by its commit.
pub fn promotion_facts(app: &Application, pipelines: &[std::sync::Arc<PromotionPipeline>]) -> Vec<Fact> {
    let namespace = app.namespace().unwrap_or_default();
    let name = app.name_any();
    let project = if app.spec.project.is_empty() {
        "default".to_string()
    } else {
        app.spec.project.clone()
    };
    let status = app.status.clone().unwrap_or_default();
    let sync = status.sync.as_ref().map(|s| s.status).unwrap_or_default();
    let health = status.health.as_ref().map(|h| h.status).unwrap_or_default();
    let mut out: Vec<(String, Fact)> = Vec::new();
    for pipeline in pipelines {
        // A pipeline tells only its own project's Applications (another project's pipeline naming
        // this Application would reach this project's channels with its changes and users).
        let pipeline_project = capstan_api::project::project_name(&pipeline.spec.project);
        if pipeline.namespace().unwrap_or_default() != namespace || pipeline_project != project {
            continue;
        }
        let pipeline_name = pipeline.name_any();
        for record in pipeline.status.iter().flat_map(|s| s.history.iter()) {
            if pipeline.spec.application(&record.service, &record.to) != name || record.commit.is_empty() {
                continue;
            }
            let changes: Vec<PromotedField> = record
                .changes
                .iter()
                .map(|c| PromotedField {
                    field: c.field.clone(),
                    old: capstan_redact::scrub(&c.old),
                    new: capstan_redact::scrub(&c.new),
                })
                .collect();
            let what: Vec<String> = changes
                .iter()
                .map(|c| format!("{} {} → {}", c.field, c.old, c.new))
                .collect();
            let message = format!(
                "{} promoted {} from {} to {}{}",
                record.user,
                record.service,
                record.from,
                record.to,
                if what.is_empty() {
                    String::new()
                } else {
                    format!(": {}", what.join(", "))
                }
            );
            let event = Event {
                id: format!(
                    "{namespace}/{name}/{}/{}",
                    Trigger::PromotionMade,
                    digest(&record.commit)
                ),
                trigger: Trigger::PromotionMade,
                time: record.time.clone(),
                namespace: namespace.clone(),
                application: name.clone(),
                project: project.clone(),
                revision: record.commit.clone(),
                repo_url: pipeline.spec.repo_url.clone(),
                sync: sync.to_string(),
                health: health.to_string(),
                message: capstan_redact::scrub(&message),
                promotion: Some(Promotion {
                    pipeline: pipeline_name.clone(),
                    service: record.service.clone(),
                    from: record.from.clone(),
                    to: record.to.clone(),
                    source_application: pipeline.spec.application(&record.service, &record.from),
                    target_application: name.clone(),
                    commit: record.commit.clone(),
                    source_revision: record.source_revision.clone(),
                    changes,
                    user: record.user.clone(),
                    forced: record.forced,
                    reason: capstan_redact::scrub(&record.reason),
                }),
            };
            out.push((
                record.time.clone(),
                Fact {
                    trigger: Trigger::PromotionMade,
                    fingerprint: record.commit.clone(),
                    event,
                },
            ));
        }
    }
    // Newest first (RFC 3339 times in UTC sort as text; a stable sort keeps each history's order).
    out.sort_by(|a, b| b.0.cmp(&a.0));
    out.into_iter().map(|(_, f)| f).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app(status: serde_json::Value) -> Application {
        serde_json::from_value(json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
            "metadata": {"name": "shop", "namespace": "capstan"},
            "spec": {"project": "team-a", "source": {"repoURL": "https://git.example/shop.git", "path": "app"},
                     "destination": {"namespace": "shop"}},
            "status": status,
        }))
        .expect("application")
    }

    fn triggers(facts: &[Fact]) -> Vec<Trigger> {
        facts.iter().map(|f| f.trigger).collect()
    }

    #[test]
    fn states_become_facts_with_stable_fingerprints() {
        let deployed = app(json!({
            "sync": {"status": "Synced", "revision": "abc"},
            "health": {"status": "Healthy"},
            "operationState": {"phase": "Succeeded", "message": "done", "revision": "abc",
                               "startedAt": "t1", "finishedAt": "t2", "operation": {"id": "op-1", "initiatedBy": "x"}},
        }));
        let f = facts(&deployed, "now");
        assert_eq!(triggers(&f), [Trigger::SyncSucceeded, Trigger::Deployed]);
        assert_eq!(f[1].fingerprint, "abc");
        assert_eq!(f[0].event.revision, "abc");
        assert_eq!(f[0].event.project, "team-a");
        assert_eq!(
            facts(&deployed, "later")[0].fingerprint,
            f[0].fingerprint,
            "same state, same fingerprint"
        );

        let running = app(json!({"operationState": {"phase": "Running", "startedAt": "t1", "revision": "abc"}}));
        assert!(facts(&running, "now").is_empty(), "nothing finished, nothing to say");

        let bad = app(json!({
            "sync": {"status": "OutOfSync", "revision": "def"},
            "health": {"status": "Degraded", "message": "pod crash-looping"},
            "operationState": {"phase": "Failed", "message": "apply failed: token=hunter2", "revision": "def",
                               "startedAt": "t3", "finishedAt": "t4"},
            "conditions": [{"type": "PolicyDenied", "message": "no latest tags"}],
        }));
        let f = facts(&bad, "now");
        assert_eq!(
            triggers(&f),
            [Trigger::SyncFailed, Trigger::HealthDegraded, Trigger::PolicyDenied]
        );
        assert_eq!(f[1].event.message, "pod crash-looping");
        assert!(f[0].event.id.starts_with("capstan/shop/SyncFailed/"));
    }

    #[test]
    fn promotions_to_the_application_are_facts_newest_first() {
        let pipeline: PromotionPipeline = serde_json::from_value(json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "PromotionPipeline",
            "metadata": {"name": "services", "namespace": "capstan"},
            "spec": {"project": "team-a", "repoURL": "https://git.example/root.git", "path": "{service}/{env}.yaml",
                     "application": "{service}-{env}",
                     "environments": [{"name": "staging"}, {"name": "production"}]},
            "status": {"history": [
                {"service": "shop", "from": "staging", "to": "production", "commit": "c2", "user": "dev",
                 "time": "2026-12-02T09:00:00Z", "sourceRevision": "s2", "forced": true, "reason": "hotfix",
                 "changes": [{"field": "imageTag", "old": "1.0", "new": "1.1"}]},
                {"service": "cart", "from": "staging", "to": "production", "commit": "x", "user": "dev",
                 "time": "2026-12-02T08:30:00Z"},
                {"service": "shop", "from": "staging", "to": "production", "commit": "c1", "user": "ops",
                 "time": "2026-12-02T08:00:00Z", "changes": []},
            ]},
        }))
        .expect("pipeline");
        let mut target = app(json!({"sync": {"status": "OutOfSync"}, "health": {"status": "Healthy"}}));
        target.metadata.name = Some("shop-production".into());
        let facts = promotion_facts(&target, &[std::sync::Arc::new(pipeline.clone())]);
        let commits: Vec<&str> = facts.iter().map(|f| f.fingerprint.as_str()).collect();
        assert_eq!(commits, ["c2", "c1"], "the target's promotions only, newest first");
        let e = &facts[0].event;
        assert_eq!((e.trigger, e.revision.as_str()), (Trigger::PromotionMade, "c2"));
        assert_eq!(e.repo_url, "https://git.example/root.git");
        assert_eq!(e.time, "2026-12-02T09:00:00Z");
        assert_eq!(
            e.message,
            "dev promoted shop from staging to production: imageTag 1.0 → 1.1"
        );
        let p = e.promotion.as_ref().expect("promotion");
        assert_eq!(
            (
                p.pipeline.as_str(),
                p.source_application.as_str(),
                p.target_application.as_str()
            ),
            ("services", "shop-staging", "shop-production")
        );
        assert_eq!(
            p.changes,
            [PromotedField {
                field: "imageTag".into(),
                old: "1.0".into(),
                new: "1.1".into()
            }]
        );
        assert!(p.forced && p.reason == "hotfix" && p.source_revision == "s2" && p.user == "dev");
        assert!(e.id.starts_with("capstan/shop-production/PromotionMade/"));
        assert_ne!(e.id, facts[1].event.id);
        let json = serde_json::to_value(e).expect("json");
        assert_eq!(json["promotion"]["sourceApplication"], "shop-staging");
        // The source stage is not a target; another namespace's pipeline targets nothing here.
        target.metadata.name = Some("shop-staging".into());
        assert!(promotion_facts(&target, &[std::sync::Arc::new(pipeline.clone())]).is_empty());
        let mut elsewhere = pipeline;
        elsewhere.metadata.namespace = Some("other".into());
        target.metadata.name = Some("shop-production".into());
        assert!(promotion_facts(&target, &[std::sync::Arc::new(elsewhere)]).is_empty());
    }
}

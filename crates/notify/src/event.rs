//! The state changes of an Application that can be notified ([`Trigger`]), read from its status:
//! each present state is a [`Fact`] with a fingerprint that stays the same while the state does
//! (the operation's id for a finished sync, the revision for a deployment, the message for a
//! denial) and an [`Event`] describing it.

use capstan_api::Application;
use capstan_api::notification::Trigger;
use capstan_api::operation::OperationPhase;
use capstan_api::status::{ConditionType, HealthCode, SyncCode};
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
}

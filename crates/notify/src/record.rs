//! What was notified, kept on the Application itself (annotation [`NOTIFIED_ANNOTATION`]) so that a
//! change is sent once whichever replica owns the Application and however often the controller
//! restarts: per channel, the triggers it has seen (`t`) and, per trigger, the fingerprint of the
//! state last sent (`f`). [`due`] compares the facts of now with it.
//!
//! A channel, or a trigger of a channel, met for the first time records the present states without
//! sending them: adding a channel does not replay what every Application did before. A state that
//! ends (health no longer Degraded, the denial gone) is forgotten, so its next occurrence is sent.
//!
//! `PromotionMade` has one fact per promotion (newest first): the record keeps the newest commit
//! sent, and every promotion newer than it is sent, oldest first — two promotions between two looks
//! are two events. When the recorded commit is no longer in the history (it was trimmed), only the
//! newest is sent.

use std::collections::{BTreeMap, BTreeSet};

pub use capstan_api::notification::NOTIFIED_ANNOTATION;
use capstan_api::notification::Trigger;
use serde::{Deserialize, Serialize};

use crate::event::{Event, Fact};

/// One channel's record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelRecord {
    /// The triggers seen (baselined).
    #[serde(default)]
    pub t: BTreeSet<Trigger>,
    /// Fingerprint last sent (or recorded), per trigger.
    #[serde(default)]
    pub f: BTreeMap<Trigger, String>,
}

/// Every channel's record on one Application.
pub type Record = BTreeMap<String, ChannelRecord>;

/// The record in an annotation's value (an unreadable one counts as none: nothing is replayed,
/// since every channel is then met for the first time).
pub fn parse(value: Option<&str>) -> Record {
    value.and_then(|v| serde_json::from_str(v).ok()).unwrap_or_default()
}

/// The annotation's value for `record`.
pub fn render(record: &Record) -> String {
    serde_json::to_string(record).unwrap_or_default()
}

/// The events due to `channel` (subscribed to `triggers`) given the `facts` of now, and the
/// channel's record afterwards.
pub fn due(
    previous: Option<&ChannelRecord>,
    triggers: &BTreeSet<Trigger>,
    facts: &[Fact],
) -> (Vec<Event>, ChannelRecord) {
    let mut next = ChannelRecord {
        t: triggers.clone(),
        f: BTreeMap::new(),
    };
    let mut send = Vec::new();
    for trigger in triggers {
        let fact = facts.iter().find(|f| f.trigger == *trigger);
        let seen = previous.is_some_and(|p| p.t.contains(trigger));
        let last = previous.and_then(|p| p.f.get(trigger));
        if *trigger == Trigger::PromotionMade {
            let all: Vec<&Fact> = facts.iter().filter(|f| f.trigger == *trigger).collect();
            if let Some(newest) = all.first() {
                if seen && last != Some(&newest.fingerprint) {
                    let newer = match all.iter().position(|f| Some(&f.fingerprint) == last) {
                        Some(at) => &all[..at],
                        None => &all[..1],
                    };
                    send.extend(newer.iter().rev().map(|f| f.event.clone()));
                }
                next.f.insert(*trigger, newest.fingerprint.clone());
            } else if let Some(last) = last {
                next.f.insert(*trigger, last.clone());
            }
            continue;
        }
        if let Some(fact) = fact {
            if seen && last != Some(&fact.fingerprint) {
                send.push(fact.event.clone());
            }
            next.f.insert(*trigger, fact.fingerprint.clone());
        } else if matches!(
            trigger,
            Trigger::SyncSucceeded | Trigger::SyncFailed | Trigger::Deployed
        ) && let Some(last) = last
        {
            // A finished operation or a deployed revision is not "over" when the status moves on
            // (a new operation runs, the Application is briefly OutOfSync): keep its fingerprint so
            // the same one is not sent again when it shows again.
            next.f.insert(*trigger, last.clone());
        }
    }
    (send, next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Event;

    fn fact(trigger: Trigger, fp: &str) -> Fact {
        Fact {
            trigger,
            fingerprint: fp.into(),
            event: Event {
                id: format!("{trigger}/{fp}"),
                trigger,
                time: String::new(),
                namespace: String::new(),
                application: String::new(),
                project: String::new(),
                revision: String::new(),
                repo_url: String::new(),
                sync: String::new(),
                health: String::new(),
                message: String::new(),
                promotion: None,
            },
        }
    }

    fn ids(events: &[Event]) -> Vec<String> {
        events.iter().map(|e| e.id.clone()).collect()
    }

    #[test]
    fn a_change_is_sent_once_and_a_new_channel_replays_nothing() {
        let all: BTreeSet<Trigger> = Trigger::ALL.into_iter().collect();
        // First sight: recorded, not sent.
        let (sent, rec) = due(None, &all, &[fact(Trigger::Deployed, "a")]);
        assert!(sent.is_empty());
        // The same state again: nothing.
        let (sent, rec) = due(Some(&rec), &all, &[fact(Trigger::Deployed, "a")]);
        assert!(sent.is_empty());
        // A new revision deployed, and a degradation: both sent.
        let (sent, rec) = due(
            Some(&rec),
            &all,
            &[fact(Trigger::Deployed, "b"), fact(Trigger::HealthDegraded, "Degraded")],
        );
        assert_eq!(
            ids(&sent),
            ["HealthDegraded/Degraded", "Deployed/b"],
            "in the triggers' order"
        );
        // Degraded ends, then comes back: sent again; Deployed "b" while OutOfSync is kept.
        let (sent, rec) = due(Some(&rec), &all, &[]);
        assert!(sent.is_empty());
        assert_eq!(rec.f.get(&Trigger::Deployed).map(String::as_str), Some("b"));
        let (sent, rec) = due(
            Some(&rec),
            &all,
            &[fact(Trigger::HealthDegraded, "Degraded"), fact(Trigger::Deployed, "b")],
        );
        assert_eq!(ids(&sent), ["HealthDegraded/Degraded"]);
        // A trigger added later is baselined, not replayed.
        let only: BTreeSet<Trigger> = [Trigger::Deployed].into_iter().collect();
        let (_, narrow) = due(Some(&rec), &only, &[fact(Trigger::PolicyDenied, "x")]);
        let (sent, _) = due(Some(&narrow), &all, &[fact(Trigger::PolicyDenied, "x")]);
        assert!(sent.is_empty(), "PolicyDenied was not subscribed when x appeared");
        // The record survives its annotation.
        let mut record = Record::new();
        record.insert("hook".into(), rec.clone());
        assert_eq!(parse(Some(&render(&record))), record);
        assert!(parse(Some("not json")).is_empty());
    }

    #[test]
    fn each_promotion_is_sent_once_oldest_first() {
        let only: BTreeSet<Trigger> = [Trigger::PromotionMade].into_iter().collect();
        let promoted =
            |commits: &[&str]| -> Vec<Fact> { commits.iter().map(|c| fact(Trigger::PromotionMade, c)).collect() };
        // The history before the channel: recorded, not sent.
        let (sent, rec) = due(None, &only, &promoted(&["c1"]));
        assert!(sent.is_empty());
        let (sent, rec) = due(Some(&rec), &only, &promoted(&["c1"]));
        assert!(sent.is_empty(), "the same history again");
        // Two promotions between two looks: both, oldest first.
        let (sent, rec) = due(Some(&rec), &only, &promoted(&["c3", "c2", "c1"]));
        assert_eq!(ids(&sent), ["PromotionMade/c2", "PromotionMade/c3"]);
        let (sent, rec) = due(Some(&rec), &only, &promoted(&["c3", "c2", "c1"]));
        assert!(sent.is_empty(), "not again");
        // The pipelines not read (yet): the record is kept, nothing is replayed after.
        let (sent, rec) = due(Some(&rec), &only, &[]);
        assert!(sent.is_empty());
        assert_eq!(rec.f.get(&Trigger::PromotionMade).map(String::as_str), Some("c3"));
        let (sent, rec) = due(Some(&rec), &only, &promoted(&["c3", "c2"]));
        assert!(sent.is_empty());
        // The recorded commit trimmed from the history: the newest only.
        let (sent, _) = due(Some(&rec), &only, &promoted(&["c9", "c8"]));
        assert_eq!(ids(&sent), ["PromotionMade/c9"]);
        // A first promotion to an Application the channel already looked at: sent.
        let (_, empty) = due(None, &only, &[]);
        let (sent, _) = due(Some(&empty), &only, &promoted(&["p1"]));
        assert_eq!(ids(&sent), ["PromotionMade/p1"]);
    }
}

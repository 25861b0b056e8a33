//! What each kind of destination is sent for a batch of events: Capstan's JSON schema (version 1,
//! documented in docs/notifications.md, signed with HMAC-SHA256 when a key is given), a Slack
//! message, a Microsoft Teams Adaptive Card message, and commit statuses for GitHub-, GitLab- and
//! Gitea-style APIs (one request per event, on the event's commit).

use capstan_api::notification::{ChannelType, Trigger};
use serde_json::{Value, json};

use crate::event::Event;

/// The version of the webhook schema.
pub const SCHEMA_VERSION: u32 = 1;
/// The header carrying a webhook body's signature.
pub const SIGNATURE_HEADER: &str = "x-capstan-signature";
/// The header carrying a delivery's id.
pub const DELIVERY_HEADER: &str = "x-capstan-delivery";
/// The header naming the event (the first trigger of the batch).
pub const EVENT_HEADER: &str = "x-capstan-event";

/// One HTTP request to make: where (a path under the destination, for forges), and the JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct Payload {
    /// Path and query appended to the forge's address; empty for webhooks (the Secret's URL).
    pub path: String,
    /// The body.
    pub body: Value,
}

/// The webhook body of a batch.
pub fn webhook(delivery: &str, sent_at: &str, events: &[Event]) -> Value {
    json!({"version": SCHEMA_VERSION, "deliveryId": delivery, "sentAt": sent_at, "events": events})
}

/// `sha256=HEX` of HMAC-SHA256 over `body` with `key`, as GitHub signs its webhooks.
pub fn signature(key: &[u8], body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    let tag = ring::hmac::sign(&key, body);
    let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

fn short(revision: &str) -> &str {
    revision.get(..7).unwrap_or(revision)
}

/// One line of a chat message about `e`.
fn line(e: &Event) -> String {
    let what = match e.trigger {
        Trigger::SyncSucceeded => "sync succeeded",
        Trigger::SyncFailed => "sync failed",
        Trigger::HealthDegraded => "is Degraded",
        Trigger::Deployed => "deployed",
        Trigger::PolicyDenied => "sync denied by a policy",
        Trigger::PromotionMade => "promoted",
    };
    let message = if e.message.is_empty() {
        String::new()
    } else {
        format!(": {}", e.message)
    };
    format!(
        "{}/{} {what} at {}{message}",
        e.project,
        e.application,
        short(&e.revision)
    )
}

/// Slack's escaping of message text (`&`, `<`, `>`), so that text from a status cannot mention
/// `@channel` or make links.
fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The Slack message of a batch.
pub fn slack(events: &[Event]) -> Value {
    let lines: Vec<String> = events.iter().map(|e| slack_escape(&line(e))).collect();
    json!({"text": lines.join("\n")})
}

/// The Microsoft Teams message (an Adaptive Card) of a batch.
pub fn teams(events: &[Event]) -> Value {
    let body: Vec<Value> = events
        .iter()
        .map(|e| json!({"type": "TextBlock", "wrap": true, "text": line(e).replace(['[', ']'], "")}))
        .collect();
    json!({
        "type": "message",
        "attachments": [{
            "contentType": "application/vnd.microsoft.card.adaptive",
            "content": {"$schema": "http://adaptivecards.io/schemas/adaptive-card.json", "type": "AdaptiveCard", "version": "1.4", "body": body},
        }],
    })
}

/// The commit status state of an event, in the words of GitHub and Gitea (GitLab's differ for a
/// failure, see [`commit_status`]).
fn state(trigger: Trigger) -> &'static str {
    match trigger {
        // The promotion's commit was made: the status says so (under its own context).
        Trigger::Deployed | Trigger::PromotionMade => "success",
        // Synced, not yet known Healthy: Deployed follows.
        Trigger::SyncSucceeded => "pending",
        Trigger::SyncFailed | Trigger::HealthDegraded | Trigger::PolicyDenied => "failure",
    }
}

/// The repository's owner path and name from a clone URL (`https://host/owner/repo.git`,
/// `git@host:owner/repo.git`); none when it has no owner.
pub fn repository_path(repo_url: &str) -> Option<String> {
    let rest = match repo_url.split_once("://") {
        Some((_, rest)) => rest.split_once('/').map(|(_, path)| path)?,
        None => repo_url.split_once(':').map(|(_, path)| path)?,
    };
    let path = rest.trim_matches('/').trim_end_matches(".git");
    let ok = path.contains('/')
        && path.split('/').all(|s| {
            !s.is_empty() && s != "." && s != ".." && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        });
    ok.then(|| path.to_string())
}

/// The commit status request of one event for a forge; none when the event names no commit or its
/// repository has no owner path.
pub fn commit_status(kind: ChannelType, e: &Event) -> Option<Payload> {
    let sha = e.revision.as_str();
    if sha.len() < 7 || !sha.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let repo = repository_path(&e.repo_url)?;
    // GitHub and Gitea name a repository by exactly OWNER/REPO (GitLab's groups nest).
    if kind != ChannelType::Gitlab && repo.split('/').count() != 2 {
        return None;
    }
    let context = match e.trigger {
        Trigger::PromotionMade => format!("capstan/{}/promotion", e.application),
        _ => format!("capstan/{}", e.application),
    };
    let description: String = line(e).chars().take(140).collect();
    match kind {
        ChannelType::Github => Some(Payload {
            path: format!("/repos/{repo}/statuses/{sha}"),
            body: json!({"state": state(e.trigger), "context": context, "description": description}),
        }),
        ChannelType::Gitea => Some(Payload {
            path: format!("/api/v1/repos/{repo}/statuses/{sha}"),
            body: json!({"state": state(e.trigger), "context": context, "description": description}),
        }),
        ChannelType::Gitlab => {
            let state = match state(e.trigger) {
                "failure" => "failed",
                other => other,
            };
            let project = repo.replace('/', "%2F");
            Some(Payload {
                path: format!("/api/v4/projects/{project}/statuses/{sha}"),
                body: json!({"state": state, "name": context, "description": description}),
            })
        }
        ChannelType::Webhook | ChannelType::Slack | ChannelType::Teams => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(trigger: Trigger, message: &str) -> Event {
        Event {
            id: "capstan/shop/x/1".into(),
            trigger,
            time: "2026-12-02T08:00:00Z".into(),
            namespace: "capstan".into(),
            application: "shop".into(),
            project: "team-a".into(),
            revision: "0123456789abcdef0123456789abcdef01234567".into(),
            repo_url: "https://git.example.com/team-a/shop.git".into(),
            sync: "Synced".into(),
            health: "Healthy".into(),
            message: message.into(),
            promotion: None,
        }
    }

    #[test]
    fn each_destination_gets_its_own_shape() {
        let e = event(Trigger::SyncFailed, "<!channel> apply failed & more");
        let body = webhook("d-1", "now", std::slice::from_ref(&e));
        assert_eq!(body["version"], 1);
        assert_eq!(body["events"][0]["trigger"], "SyncFailed");
        assert_eq!(body["events"][0]["repoURL"], "https://git.example.com/team-a/shop.git");
        let text = slack(std::slice::from_ref(&e))["text"]
            .as_str()
            .unwrap_or("")
            .to_string();
        assert_eq!(
            text,
            "team-a/shop sync failed at 0123456: &lt;!channel&gt; apply failed &amp; more"
        );
        assert_eq!(
            teams(std::slice::from_ref(&e))["attachments"][0]["content"]["type"],
            "AdaptiveCard"
        );
        let gitea = commit_status(ChannelType::Gitea, &event(Trigger::Deployed, "")).expect("status");
        assert_eq!(
            gitea.path,
            "/api/v1/repos/team-a/shop/statuses/0123456789abcdef0123456789abcdef01234567"
        );
        assert_eq!(gitea.body["state"], "success");
        assert_eq!(gitea.body["context"], "capstan/shop");
        let promoted = event(Trigger::PromotionMade, "dev promoted shop from staging to production");
        let status = commit_status(ChannelType::Github, &promoted).expect("status");
        assert_eq!(
            (status.body["state"].as_str(), status.body["context"].as_str()),
            (Some("success"), Some("capstan/shop/promotion"))
        );
        assert_eq!(
            slack(std::slice::from_ref(&promoted))["text"],
            "team-a/shop promoted at 0123456: dev promoted shop from staging to production"
        );
        assert!(
            webhook("d", "now", std::slice::from_ref(&e))["events"][0]
                .get("promotion")
                .is_none(),
            "only PromotionMade carries a promotion"
        );
        let gitlab = commit_status(ChannelType::Gitlab, &e).expect("status");
        assert!(gitlab.path.starts_with("/api/v4/projects/team-a%2Fshop/statuses/"));
        assert_eq!(gitlab.body["state"], "failed");
        let mut no_commit = e.clone();
        no_commit.revision = "main".into();
        assert!(commit_status(ChannelType::Github, &no_commit).is_none());
        assert_eq!(
            repository_path("git@host:org/sub/repo.git").as_deref(),
            Some("org/sub/repo")
        );
        assert_eq!(repository_path("https://host/repo.git"), None);
        assert_eq!(repository_path("https://host/a/../b"), None);
        // GitHub's published example: HMAC-SHA256 of "Hello, World!" with "It's a Secret to Everybody".
        assert_eq!(
            signature(b"It's a Secret to Everybody", b"Hello, World!"),
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
        );
    }
}

//! The `NotificationChannel` resource: where the controller tells people what happened to their
//! Applications — a signed JSON webhook, a Slack- or Microsoft Teams-compatible incoming webhook,
//! or a commit status on the deployed commit of a GitHub-, GitLab- or Gitea-style forge — and on
//! which state changes (its triggers), for which projects and Applications.
//!
//! Everything secret (webhook URLs, which carry their token; forge tokens; the signing key) comes
//! from a Secret in Capstan's namespace and is never written to status, Events or logs.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The annotation on an Application recording, per channel and trigger, the state last notified
/// (so a change is sent once, across controller restarts and replicas).
pub const NOTIFIED_ANNOTATION: &str = "capstan.dev/notified";

/// A destination of notifications and what it is told.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "capstan.dev",
    version = "v1alpha1",
    kind = "NotificationChannel",
    plural = "notificationchannels",
    shortname = "cnc",
    namespaced,
    status = "NotificationChannelStatus",
    printcolumn = r#"{"name":"Type","type":"string","jsonPath":".spec.type"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NotificationChannelSpec {
    /// What kind of destination it is.
    #[serde(rename = "type")]
    pub type_: ChannelType,
    /// The Secret (in Capstan's namespace) holding the destination: key `url` (webhook, Slack,
    /// Teams), `token` (forges), and for `webhook` optionally `signingKey` (HMAC-SHA256 of each
    /// body, sent as `X-Capstan-Signature: sha256=HEX`).
    pub secret_ref: ChannelSecretRef,
    /// The forge's API base URL for commit statuses (`https://api.github.com`,
    /// `https://gitlab.example.com`, `https://gitea.example.com`); not used by the other types.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub address: String,
    /// The state changes sent (at least one).
    pub triggers: Vec<Trigger>,
    /// Only Applications of these projects (all when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub projects: Vec<String>,
    /// Only Applications with these labels (all when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Send nothing (state changes seen meanwhile are not sent later).
    #[serde(default)]
    pub suspend: bool,
}

/// The kinds of destination.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ChannelType {
    /// A JSON POST of Capstan's own schema (docs/notifications.md), signed when the Secret has a
    /// `signingKey`.
    #[default]
    Webhook,
    /// A Slack-compatible incoming webhook (`{"text": …}`).
    Slack,
    /// A Microsoft Teams incoming webhook (an Adaptive Card message).
    Teams,
    /// A commit status through GitHub's API (`POST /repos/OWNER/REPO/statuses/SHA`).
    Github,
    /// A commit status through GitLab's API (`POST /api/v4/projects/PATH/statuses/SHA`).
    Gitlab,
    /// A commit status through Gitea's or Forgejo's API (`POST /api/v1/repos/OWNER/REPO/statuses/SHA`).
    Gitea,
}

impl ChannelType {
    /// Whether it posts commit statuses (one per Application and commit, never batched).
    pub fn is_forge(self) -> bool {
        matches!(self, ChannelType::Github | ChannelType::Gitlab | ChannelType::Gitea)
    }
}

/// The Secret of a channel.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ChannelSecretRef {
    /// Its name, in Capstan's namespace.
    pub name: String,
}

/// A state change that can be notified.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema)]
pub enum Trigger {
    /// A sync (or rollback) finished successfully.
    SyncSucceeded,
    /// A sync (or rollback) failed or errored.
    SyncFailed,
    /// The Application became Degraded.
    HealthDegraded,
    /// A revision not deployed before is Synced and Healthy.
    Deployed,
    /// A sync was refused by a Policy (the `PolicyDenied` condition appeared or changed).
    PolicyDenied,
    /// A promotion changed the Application's file in Git (`capstan promote`, the API or the web
    /// UI): sent once per promotion, about the promotion's target Application.
    PromotionMade,
}

impl Trigger {
    /// Every trigger, in a fixed order.
    pub const ALL: [Trigger; 6] = [
        Trigger::SyncSucceeded,
        Trigger::SyncFailed,
        Trigger::HealthDegraded,
        Trigger::Deployed,
        Trigger::PolicyDenied,
        Trigger::PromotionMade,
    ];

    /// Its name, as written in specs and annotations.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::SyncSucceeded => "SyncSucceeded",
            Trigger::SyncFailed => "SyncFailed",
            Trigger::HealthDegraded => "HealthDegraded",
            Trigger::Deployed => "Deployed",
            Trigger::PolicyDenied => "PolicyDenied",
            Trigger::PromotionMade => "PromotionMade",
        }
    }
}

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the controller reports about a channel.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotificationChannelStatus {
    /// The generation the conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: True when the last delivery succeeded (or none was due yet), False with the reason
    /// when the spec or Secret is unusable or the last delivery failed after its retries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The last delivery that succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_delivery: Option<Delivery>,
    /// Deliveries that failed after every retry, newest first (at most 10).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent_failures: Vec<Delivery>,
}

/// One delivery, as recorded on a channel's status.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    /// When it ended (RFC 3339).
    pub time: String,
    /// The events it carried (`TRIGGER NAMESPACE/APPLICATION`).
    pub events: Vec<String>,
    /// How many attempts were made.
    pub attempts: u32,
    /// Why it failed (empty when it succeeded); never a secret.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

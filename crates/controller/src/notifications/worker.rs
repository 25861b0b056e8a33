//! One channel's deliveries: events collected for [`Settings::batch_window`] after the first of a
//! burst (at most [`Settings::max_batch`]) go out as one message — one commit status per event for
//! a forge — with the destination read from the channel's Secret at that moment, retried as
//! `capstan-notify`'s delivery says, and the outcome written on the channel's status (the last
//! success, the recent failures, `Ready`). Nothing secret is written: messages name statuses and
//! causes, never the URL or a token.

use std::collections::BTreeMap;
use std::time::Duration;

use capstan_api::notification::{ChannelType, Delivery, NotificationChannel};
use capstan_http::{Bytes, HeaderName, HeaderValue, Uri};
use capstan_notify::deliver::{self, DeliveryError, Outcome, Retry};
use capstan_notify::{Event, payload};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;

/// Events waiting per channel; beyond, new ones are dropped (and logged).
pub const QUEUE: usize = 1024;
/// Failures kept on a channel's status.
const KEEP_FAILURES: usize = 10;

/// How deliveries are batched and retried.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long a burst is collected into one message.
    pub batch_window: Duration,
    /// The most events in one message.
    pub max_batch: usize,
    /// Time limits and retries.
    pub retry: Retry,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            batch_window: Duration::from_secs(2),
            max_batch: 50,
            retry: Retry::default(),
        }
    }
}

/// One channel's worker.
pub(super) struct Worker {
    pub(super) client: Client,
    pub(super) namespace: String,
    pub(super) channel: String,
    pub(super) channels: Option<Store<NotificationChannel>>,
    pub(super) settings: Settings,
}

/// Why a channel cannot be delivered to, before any request.
#[derive(Debug, thiserror::Error)]
enum Unusable {
    #[error("Secret {0:?} cannot be read: {1}")]
    Secret(String, String),
    #[error("Secret {0:?} has no key {1:?}")]
    MissingKey(String, &'static str),
    #[error("{0}")]
    Destination(DeliveryError),
    #[error("spec.address is required for commit statuses")]
    NoAddress,
}

impl Worker {
    pub(super) async fn run(self, mut rx: mpsc::Receiver<Event>) {
        let http = match capstan_http::Client::new(&capstan_http::Options {
            connect_timeout: Some(Duration::from_secs(5)),
            ..Default::default()
        }) {
            Ok(c) => c,
            Err(err) => {
                tracing::warn!(channel = %self.channel, %err, "no HTTP client for notifications");
                return;
            }
        };
        while let Some(first) = rx.recv().await {
            let mut batch = vec![first];
            let until = tokio::time::Instant::now() + self.settings.batch_window;
            while batch.len() < self.settings.max_batch {
                match tokio::time::timeout_at(until, rx.recv()).await {
                    Ok(Some(e)) => batch.push(e),
                    _ => break,
                }
            }
            self.deliver(&http, batch).await;
        }
    }

    fn spec(&self) -> Option<std::sync::Arc<NotificationChannel>> {
        self.channels
            .as_ref()?
            .get(&ObjectRef::new(&self.channel).within(&self.namespace))
    }

    async fn deliver(&self, http: &capstan_http::Client, batch: Vec<Event>) {
        let Some(channel) = self.spec() else { return };
        if channel.spec.suspend {
            return;
        }
        let names: Vec<String> = batch
            .iter()
            .map(|e| format!("{} {}/{}", e.trigger, e.namespace, e.application))
            .collect();
        let outcome = match self.secret(&channel).await {
            Err(unusable) => Outcome {
                attempts: 0,
                result: Err(DeliveryError::Invalid(unusable.to_string())),
            },
            Ok(secret) => self.send(http, &channel, &secret, &batch).await,
        };
        match &outcome.result {
            Ok(()) => {
                tracing::info!(channel = %self.channel, events = names.len(), attempts = outcome.attempts, "notification delivered")
            }
            Err(err) => {
                tracing::warn!(channel = %self.channel, events = names.len(), attempts = outcome.attempts, %err, "notification not delivered")
            }
        }
        self.report(&channel, names, &outcome).await;
    }

    async fn secret(&self, channel: &NotificationChannel) -> Result<BTreeMap<String, String>, Unusable> {
        let name = &channel.spec.secret_ref.name;
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let secret = api
            .get(name)
            .await
            .map_err(|e| Unusable::Secret(name.clone(), capstan_kube::describe_kube_error(&e)))?;
        Ok(secret
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).trim().to_string()))
            .collect())
    }

    async fn send(
        &self,
        http: &capstan_http::Client,
        channel: &NotificationChannel,
        secret: &BTreeMap<String, String>,
        batch: &[Event],
    ) -> Outcome {
        let unusable = |u: Unusable| Outcome {
            attempts: 0,
            result: Err(DeliveryError::Invalid(u.to_string())),
        };
        let key = |k: &'static str| {
            secret
                .get(k)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| Unusable::MissingKey(channel.spec.secret_ref.name.clone(), k))
        };
        let retry = &self.settings.retry;
        let kind = channel.spec.type_;
        if !kind.is_forge() {
            let url = match key("url").and_then(|u| deliver::destination(u).map_err(Unusable::Destination)) {
                Ok(u) => u,
                Err(u) => return unusable(u),
            };
            let delivery = capstan_api::operation::new_request_id();
            let body = match kind {
                ChannelType::Slack => payload::slack(batch),
                ChannelType::Teams => payload::teams(batch),
                _ => payload::webhook(&delivery, &k8s_openapi::jiff::Timestamp::now().to_string(), batch),
            };
            let body = Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
            let mut headers = Vec::new();
            if kind == ChannelType::Webhook {
                headers.extend(header(payload::DELIVERY_HEADER, &delivery));
                headers.extend(header(
                    payload::EVENT_HEADER,
                    batch.first().map(|e| e.trigger.as_str()).unwrap_or(""),
                ));
                if let Some(k) = secret.get("signingKey").filter(|k| !k.is_empty()) {
                    headers.extend(header(
                        payload::SIGNATURE_HEADER,
                        &payload::signature(k.as_bytes(), &body),
                    ));
                }
            }
            return deliver::post(http, &url, &headers, body, retry).await;
        }
        // Commit statuses: one request per event, on the forge at spec.address only.
        let token = match key("token") {
            Ok(t) => t.clone(),
            Err(u) => return unusable(u),
        };
        if channel.spec.address.trim().is_empty() {
            return unusable(Unusable::NoAddress);
        }
        let base = match deliver::destination(&channel.spec.address) {
            Ok(b) => b,
            Err(e) => return unusable(Unusable::Destination(e)),
        };
        let auth = match kind {
            ChannelType::Github => header("authorization", &format!("Bearer {token}")),
            ChannelType::Gitlab => header("private-token", &token),
            _ => header("authorization", &format!("token {token}")),
        };
        let mut total = Outcome {
            attempts: 0,
            result: Ok(()),
        };
        for event in batch {
            // A repository the forge does not host gets no status there (its token is not sent).
            if !same_host(&event.repo_url, &base, kind) {
                continue;
            }
            let Some(status) = payload::commit_status(kind, event) else {
                continue;
            };
            let url: Uri = match format!("{}{}", base.to_string().trim_end_matches('/'), status.path).parse() {
                Ok(u) => u,
                Err(_) => continue,
            };
            let body = Bytes::from(serde_json::to_vec(&status.body).unwrap_or_default());
            let outcome = deliver::post(http, &url, auth.as_slice(), body, retry).await;
            total.attempts += outcome.attempts;
            if outcome.result.is_err() && total.result.is_ok() {
                total.result = outcome.result;
            }
        }
        total
    }

    /// Write the outcome on the channel's status.
    async fn report(&self, channel: &NotificationChannel, events: Vec<String>, outcome: &Outcome) {
        let now = k8s_openapi::jiff::Timestamp::now();
        let delivery = Delivery {
            time: now.to_string(),
            events,
            attempts: outcome.attempts,
            message: outcome.result.as_ref().err().map(|e| e.to_string()).unwrap_or_default(),
        };
        let (status, reason, message) = match &outcome.result {
            Ok(()) => ("True", "Delivered", "the last delivery succeeded".to_string()),
            Err(e) => ("False", "DeliveryFailed", e.to_string()),
        };
        let old = channel.status.clone().unwrap_or_default();
        let was = old.conditions.iter().find(|c| c.type_ == "Ready");
        let condition = Condition {
            type_: "Ready".into(),
            status: status.into(),
            reason: reason.into(),
            message,
            observed_generation: channel.metadata.generation,
            last_transition_time: match was {
                Some(c) if c.status == status => c.last_transition_time.clone(),
                _ => Time(now),
            },
        };
        let mut patch =
            json!({"status": {"observedGeneration": channel.metadata.generation, "conditions": [condition]}});
        if outcome.result.is_ok() {
            patch["status"]["lastDelivery"] = json!(delivery);
        } else {
            let mut failures = vec![delivery];
            failures.extend(old.recent_failures.into_iter().take(KEEP_FAILURES - 1));
            patch["status"]["recentFailures"] = json!(failures);
        }
        let api: Api<NotificationChannel> = Api::namespaced(self.client.clone(), &self.namespace);
        if let Err(err) = api
            .patch_status(&channel.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::debug!(channel = %self.channel, %err, "writing the channel's status");
        }
    }
}

fn header(name: &str, value: &str) -> Option<(HeaderName, HeaderValue)> {
    Some((
        HeaderName::from_bytes(name.as_bytes()).ok()?,
        HeaderValue::from_str(value).ok()?,
    ))
}

/// Whether `repo_url` is on the host (and port) of `base` — for GitHub, also a repository on
/// `HOST` when the API is `api.HOST` (github.com's API is api.github.com).
fn same_host(repo_url: &str, base: &Uri, kind: ChannelType) -> bool {
    let Ok(repo) = repo_url.parse::<Uri>() else {
        return false;
    };
    let (Some(host), Some(api)) = (repo.host(), base.host()) else {
        return false;
    };
    let github_api = kind == ChannelType::Github && api.strip_prefix("api.") == Some(host);
    (host == api && repo.port_u16() == base.port_u16()) || github_api
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_go_only_to_the_forge_hosting_the_repository() {
        let base: Uri = "http://127.0.0.1:3000".parse().expect("uri");
        let gitea = ChannelType::Gitea;
        assert!(same_host("http://127.0.0.1:3000/team/shop.git", &base, gitea));
        assert!(!same_host("http://127.0.0.1:3001/team/shop.git", &base, gitea));
        assert!(!same_host("https://github.com/team/shop.git", &base, gitea));
        assert!(!same_host("git@127.0.0.1:team/shop.git", &base, gitea));
        let github: Uri = "https://api.github.com".parse().expect("uri");
        assert!(same_host(
            "https://github.com/team/shop.git",
            &github,
            ChannelType::Github
        ));
        assert!(!same_host("https://github.com/team/shop.git", &github, gitea));
        assert!(!same_host(
            "https://evil.com/team/shop.git",
            &github,
            ChannelType::Github
        ));
    }
}

//! Registry notifications (the distribution registry's `notifications` endpoints): a push of an image
//! makes every `ImageUpdater` watching that repository check at once (the `capstan.dev/check`
//! annotation, which the image update controller acts on at its next tick). The sender authenticates
//! with `Authorization: Bearer SECRET`, the secret being `webhook.registry.secret` in `capstan-secret`
//! (distribution sends configured headers with every notification); without one the notification is
//! refused unless the server runs with `--webhook-allow-unsigned`. The answer tells the sender nothing
//! about which updaters matched.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State as AxState;
use axum::http::{HeaderMap, StatusCode};
use capstan_api::image_updater::{CHECK_ANNOTATION, ImageUpdater};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde::Deserialize;
use serde_json::json;

use crate::api::model::WebhookReply;
use crate::auth::constant_time_eq;
use crate::error::ApiError;
use crate::state::State;

/// The envelope distribution posts.
#[derive(Debug, Deserialize)]
struct Envelope {
    #[serde(default)]
    events: Vec<Event>,
}

#[derive(Debug, Deserialize)]
struct Event {
    #[serde(default)]
    id: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    target: Target,
    #[serde(default)]
    request: Request,
}

#[derive(Debug, Default, Deserialize)]
struct Target {
    #[serde(default)]
    repository: String,
}

#[derive(Debug, Default, Deserialize)]
struct Request {
    #[serde(default)]
    host: String,
}

/// The image repositories (`host/path`, or `/path` when the event names no host) pushed to.
fn pushed(envelope: &Envelope) -> Vec<(String, String)> {
    envelope
        .events
        .iter()
        .filter(|e| e.action == "push" && !e.target.repository.is_empty())
        .map(|e| (e.request.host.to_ascii_lowercase(), e.target.repository.clone()))
        .collect()
}

/// Whether an updater's `image` is the repository `(host, path)` a notification names: the same host
/// and the same path. A notification that names no host matches nothing: one registry's push must
/// not make every registry's updaters check (and a path alone names no repository).
fn matches(image: &str, host: &str, path: &str) -> bool {
    let Some((image_host, image_path)) = image.split_once('/') else {
        return false;
    };
    !host.is_empty() && image_path == path && image_host.eq_ignore_ascii_case(host)
}

/// `POST /api/webhook/registry`.
pub async fn receive(
    AxState(state): AxState<Arc<State>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<WebhookReply>, ApiError> {
    if !state.is_ready() {
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the server is starting"));
    }
    let secret = state.secret_value("webhook.registry.secret").filter(|s| !s.is_empty());
    match &secret {
        Some(secret) => {
            let given = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or_default();
            if !constant_time_eq(given.as_bytes(), secret) {
                tracing::info!("refused a registry notification: wrong or missing bearer token");
                return Err(ApiError::new(StatusCode::UNAUTHORIZED, "bad or missing bearer token"));
            }
        }
        None if state.config.webhook_allow_unsigned => {}
        None => {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "no webhook secret is configured for registry: set webhook.registry.secret in capstan-secret",
            ));
        }
    }
    let envelope: Envelope = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("not a registry notification: {e}")))?;
    let pushes = pushed(&envelope);
    if pushes.is_empty() {
        return Ok(Json(WebhookReply {
            accepted: None,
            ignored: Some("no push events".into()),
        }));
    }
    let api: Api<ImageUpdater> = Api::namespaced(state.client.clone(), &state.config.namespace);
    let updaters = api
        .list(&ListParams::default())
        .await
        .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, format!("listing ImageUpdaters: {e}")))?;
    let stamp = envelope
        .events
        .first()
        .map(|e| e.id.clone())
        .filter(|id| !id.is_empty() && id.len() <= 128)
        .unwrap_or_else(|| k8s_openapi::jiff::Timestamp::now().to_string());
    let patch = Patch::Merge(json!({"metadata": {"annotations": {CHECK_ANNOTATION: stamp}}}));
    for updater in updaters
        .items
        .iter()
        .filter(|u| pushes.iter().any(|(host, path)| matches(&u.spec.image, host, path)))
    {
        if let Err(e) = api.patch(&updater.name_any(), &PatchParams::default(), &patch).await {
            tracing::warn!(updater = %updater.name_any(), error = %e, "marking an ImageUpdater to check");
        }
    }
    Ok(Json(WebhookReply {
        accepted: Some(true),
        ignored: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushes_match_updaters_by_repository_and_host() {
        let envelope: Envelope = serde_json::from_value(json!({"events": [
            {"id": "e1", "action": "push", "target": {"repository": "services/payments", "tag": "1.1.0"},
             "request": {"host": "Registry.Test:5000"}},
            {"action": "pull", "target": {"repository": "services/other"}},
        ]}))
        .unwrap();
        let pushes = pushed(&envelope);
        assert_eq!(
            pushes,
            [("registry.test:5000".to_string(), "services/payments".to_string())]
        );
        assert!(matches(
            "registry.test:5000/services/payments",
            "registry.test:5000",
            "services/payments"
        ));
        assert!(!matches(
            "other.test/services/payments",
            "registry.test:5000",
            "services/payments"
        ));
        assert!(!matches(
            "registry.test:5000/services/payments-old",
            "registry.test:5000",
            "services/payments"
        ));
        assert!(!matches(
            "registry.test:5000/services/payments",
            "",
            "services/payments"
        ));
    }
}

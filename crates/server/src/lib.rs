//! Capstan's HTTP server: the JSON API over Applications, ApplicationSets and clusters, live updates
//! (server-sent events fed by watches), the embedded web UI, Git webhooks, Prometheus metrics, and
//! access control (local accounts, API tokens, signed session cookies with CSRF tokens, roles per
//! project).
//!
//! Like the CLI, it works through the Kubernetes API only: it reads from watches and requests
//! operations by annotating Applications; the controller executes them. It runs alone
//! (`capstan server`) or inside the controller process (`capstan controller --listen`).
//!
//! - [`state`]: the shared caches and the change feed.
//! - [`auth`]: accounts, tokens, sessions, CSRF, roles.
//! - [`api`]: the JSON endpoints; [`stream`]: live updates; [`webhook`]: Git push events;
//!   [`metrics`]: `/metrics`; [`ui`]: the embedded web UI; [`openapi`]: the API description.

pub mod api;
pub mod auth;
pub mod error;
pub mod metrics;
pub mod openapi;
pub mod redact;
pub mod state;
pub mod stream;
pub mod ui;
pub mod webhook;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::{delete, get, post};

pub use state::{ServerConfig, State};

/// Largest request body accepted (webhook payloads of big pushes included).
const BODY_LIMIT: usize = 8 * 1024 * 1024;

/// Every route: `(method, path)`, as documented in the OpenAPI document (a test keeps them equal).
pub const ROUTES: &[(&str, &str)] = &[
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/api/openapi.json"),
    ("post", "/api/session"),
    ("delete", "/api/session"),
    ("get", "/api/userinfo"),
    ("get", "/api/settings"),
    ("get", "/auth/login"),
    ("get", "/auth/callback"),
    ("get", "/api/applications"),
    ("get", "/api/applications/{name}"),
    ("get", "/api/applications/{name}/tree"),
    ("get", "/api/applications/{name}/diff"),
    ("get", "/api/applications/{name}/manifests"),
    ("get", "/api/applications/{name}/resource"),
    ("get", "/api/applications/{name}/events"),
    ("get", "/api/applications/{name}/history"),
    ("post", "/api/applications/{name}/sync"),
    ("post", "/api/applications/{name}/refresh"),
    ("post", "/api/applications/{name}/rollback"),
    ("delete", "/api/applications/{name}/operation"),
    ("get", "/api/stream/applications"),
    ("get", "/api/stream/applications/{name}"),
    ("get", "/api/applicationsets"),
    ("get", "/api/applicationsets/{name}"),
    ("get", "/api/clusters"),
    ("post", "/api/webhook"),
];

/// The router over `state`.
pub fn router(state: Arc<State>) -> Router {
    use api::{apps, fleet, tree};
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics::metrics))
        .route("/api/openapi.json", get(openapi::document))
        .route("/api/session", post(auth::login).delete(auth::logout))
        .route("/api/userinfo", get(auth::userinfo))
        .route("/api/settings", get(auth::oidc::settings))
        .route("/auth/login", get(auth::oidc::login))
        .route("/auth/callback", get(auth::oidc::callback))
        .route("/api/applications", get(apps::list))
        .route("/api/applications/{name}", get(apps::get))
        .route("/api/applications/{name}/tree", get(tree::tree))
        .route("/api/applications/{name}/diff", get(apps::diff))
        .route("/api/applications/{name}/manifests", get(apps::manifests))
        .route("/api/applications/{name}/resource", get(apps::resource))
        .route("/api/applications/{name}/events", get(apps::events))
        .route("/api/applications/{name}/history", get(apps::history))
        .route("/api/applications/{name}/sync", post(apps::sync))
        .route("/api/applications/{name}/refresh", post(apps::refresh))
        .route("/api/applications/{name}/rollback", post(apps::rollback))
        .route("/api/applications/{name}/operation", delete(apps::terminate))
        .route("/api/stream/applications", get(stream::applications))
        .route("/api/stream/applications/{name}", get(stream::application))
        .route("/api/applicationsets", get(fleet::list))
        .route("/api/applicationsets/{name}", get(fleet::get))
        .route("/api/clusters", get(fleet::clusters))
        .route("/api/webhook", post(webhook::receive))
        .route("/api/{*rest}", axum::routing::any(api_not_found))
        .route("/ui/{*path}", get(ui::file))
        .route("/", get(ui::index))
        .fallback(get(ui::index))
        .layer(axum::middleware::from_fn(json_errors))
        .layer(axum::middleware::from_fn(security_headers))
        .layer(axum::extract::DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

/// The Content-Security-Policy of every answer: nothing is allowed unless named (`default-src
/// 'none'`); the UI loads its scripts, styles and images from this server only and talks to it
/// only, has no inline scripts, styles, style attributes or event handlers (no `'unsafe-inline'`),
/// sets no `<base>`, posts forms only here, and is never framed.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// Security headers on every answer (the UI's pages and files, and the API's JSON alike).
async fn security_headers(request: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    use axum::http::{HeaderValue, header};
    let mut response = next.run(request).await;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

/// axum answers a body, query or path it cannot parse with plain text; the API answers every error
/// as `{"error": …}`, so clients parse one shape.
async fn json_errors(request: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    use axum::response::IntoResponse;
    let api = request.uri().path().starts_with("/api/");
    let response = next.run(request).await;
    let plain = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/plain"));
    if !api || !plain || !response.status().is_client_error() {
        return response;
    }
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), 64 * 1024)
        .await
        .unwrap_or_default();
    error::ApiError::new(status, String::from_utf8_lossy(&body).trim().to_string()).into_response()
}

async fn api_not_found() -> error::ApiError {
    error::ApiError::not_found("API endpoint")
}

async fn readyz(axum::extract::State(state): axum::extract::State<Arc<State>>) -> (StatusCode, &'static str) {
    if state.is_ready() {
        (StatusCode::OK, "ready")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "starting: waiting for the first list of every watch",
        )
    }
}

/// Errors that stop the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The listen address is taken or not allowed.
    #[error("cannot listen on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
    /// Serving failed.
    #[error("serving HTTP: {0}")]
    Serve(std::io::Error),
}

/// A bound server, ready to serve.
pub struct Server {
    listener: tokio::net::TcpListener,
    metrics_listener: Option<tokio::net::TcpListener>,
    state: Arc<State>,
}

impl Server {
    /// Start the watches and bind `addr`.
    pub async fn bind(client: kube::Client, config: ServerConfig, addr: SocketAddr) -> Result<Server, ServerError> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| ServerError::Listen(addr, e))?;
        let metrics_listener = match config.metrics_addr {
            Some(m) => Some(
                tokio::net::TcpListener::bind(m)
                    .await
                    .map_err(|e| ServerError::Listen(m, e))?,
            ),
            None => None,
        };
        Ok(Server {
            listener,
            metrics_listener,
            state: State::start(client, config),
        })
    }

    /// The address of the separate metrics listener, if any.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_listener.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The address actually bound (port 0 picks a free port).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Serve until `shutdown` resolves.
    pub async fn serve(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        tracing::info!(addr = ?self.local_addr(), "HTTP server listening");
        let state = self.state.clone();
        let shutdown = async move {
            shutdown.await;
            // Open event streams would otherwise keep the graceful shutdown waiting forever.
            state.shut_down();
        };
        if let Some(listener) = self.metrics_listener {
            let app = Router::new()
                .route("/metrics", get(metrics::open_metrics))
                .with_state(self.state.clone());
            let stop = self.state.stopping();
            tokio::spawn(async move {
                if let Err(err) = axum::serve(listener, app).with_graceful_shutdown(stop).await {
                    tracing::warn!(%err, "metrics listener stopped");
                }
            });
        }
        // The client's address, for the failed-login limits.
        let app = router(self.state).into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(self.listener, app)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(ServerError::Serve)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_in_the_openapi_document_and_nothing_else() {
        let doc: serde_json::Value = serde_json::from_str(openapi::DOCUMENT).expect("openapi.json is JSON");
        let paths = doc["paths"].as_object().expect("paths");
        let mut documented: Vec<(String, String)> = paths
            .iter()
            .flat_map(|(p, ops)| {
                ops.as_object()
                    .into_iter()
                    .flat_map(|o| o.keys())
                    .filter(|m| *m != "parameters")
                    .map(move |m| (m.clone(), p.clone()))
            })
            .collect();
        let mut routes: Vec<(String, String)> = ROUTES.iter().map(|(m, p)| (m.to_string(), p.to_string())).collect();
        documented.sort();
        routes.sort();
        assert_eq!(documented, routes);
    }
}

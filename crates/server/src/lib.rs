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
pub mod health;
pub mod metrics;
pub mod openapi;
/// Secret objects redacted in answers and diffs (owned by `capstan-redact`).
pub use capstan_redact::objects as redact;
pub mod registry_webhook;
pub mod state;
pub mod stream;
pub mod ui;
pub mod webhook;

use std::net::SocketAddr;
use std::sync::Arc;

use aide::axum::ApiRouter;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};

pub use state::{ServerConfig, State};

/// Largest request body accepted (webhook payloads of big pushes included).
const BODY_LIMIT: usize = 8 * 1024 * 1024;

/// Every documented route: the API, health, metrics and the single sign-on redirects. The OpenAPI
/// document ([`openapi`]) is generated from exactly these routes, their extractors and their answer
/// types, so a route cannot exist without its description or the other way round.
pub fn api_routes() -> ApiRouter<Arc<State>> {
    use aide::axum::routing::{delete_with, get_with, post_with};
    use api::{
        actions, app_promotions, apps, delete, fleet, list, logs, model, plan, policies, projects, promotions,
        revision, tree,
    };
    ApiRouter::new()
        .api_route(
            "/healthz",
            get_with(healthz, |op| op.summary("Liveness").tag("server")),
        )
        .api_route(
            "/readyz",
            get_with(readyz, |op| {
                op.summary("Readiness: every watch has listed once")
                    .tag("server")
                    .response_with::<200, String, _>(|r| r.description("ready"))
                    .response_with::<503, String, _>(|r| r.description("starting"))
            }),
        )
        .api_route(
            "/metrics",
            get_with(metrics::metrics, |op| {
                op.summary("Prometheus metrics (OpenMetrics text); needs a session or an API token here, none on --metrics-listen")
                    .tag("server")
                    .response_with::<200, String, _>(|r| r.description("OpenMetrics text"))
            }),
        )
        .api_route(
            "/api/openapi.json",
            get_with(openapi::serve, |op| op.summary("This document").tag("server")),
        )
        .api_route(
            "/api/session",
            post_with(auth::login, |op| {
                op.summary("Log in with a local account: sets the session cookie")
                    .tag("session")
                    .response::<200, Json<model::UserInfo>>()
                    .response_with::<429, Json<error::ErrorBody>, _>(|r| r.description("too many failed logins"))
            })
            .delete_with(auth::logout, |op| {
                op.summary("Log out: clears the session cookie")
                    .tag("session")
                    .response_with::<204, (), _>(|r| r.description("logged out"))
            }),
        )
        .api_route(
            "/auth/cli/confirm",
            post_with(auth::oidc::cli::confirm, |op| {
                op.summary("Single sign-on from the CLI: the person confirms, in the browser, the command-line login they started; the code then goes to the CLI")
                    .tag("session")
                    .response_with::<200, String, _>(|r| r.description("the code to paste"))
                    .response_with::<303, (), _>(|r| r.description("to the CLI's loopback listener"))
            }),
        )
        .api_route(
            "/api/session/cli",
            post_with(auth::oidc::cli::redeem, |op| {
                op.summary("Single sign-on from the CLI: redeem the code the browser handed over, with the PKCE verifier; sets the session cookie")
                    .tag("session")
                    .response::<200, Json<model::UserInfo>>()
            }),
        )
        .api_route(
            "/api/userinfo",
            get_with(auth::userinfo, |op| op.summary("Who the caller is").tag("session")),
        )
        .api_route(
            "/api/settings",
            get_with(auth::oidc::settings, |op| {
                op.summary("What the login page needs before anyone logs in").tag("session")
            }),
        )
        .api_route(
            "/auth/login",
            get_with(auth::oidc::login, |op| {
                op.summary("Single sign-on: redirect to the provider")
                    .tag("session")
                    .response_with::<302, (), _>(|r| r.description("to the provider"))
            }),
        )
        .api_route(
            "/auth/callback",
            get_with(auth::oidc::callback, |op| {
                op.summary("Single sign-on: the provider's redirect back")
                    .tag("session")
                    .response_with::<302, (), _>(|r| r.description("to the UI, logged in or with an error"))
            }),
        )
        .api_route(
            "/api/applications",
            get_with(list::list, |op| {
                op.summary("Applications the caller may read: summaries in name order, filtered, in pages of `limit` (at most 1000) with `continue`")
                    .tag("applications")
            }),
        )
        .api_route(
            "/api/applications/{name}",
            get_with(apps::get, |op| op.summary("One Application").tag("applications")).delete_with(
                delete::delete,
                |op| {
                    op.summary("Delete an Application, with its objects unless cascade=false (admin role)")
                        .tag("operations")
                },
            ),
        )
        .api_route(
            "/api/applications/{name}/tree",
            get_with(tree::tree, |op| {
                op.summary("Its objects and what they own, read live").tag("applications")
            }),
        )
        .api_route(
            "/api/applications/{name}/revisions/{revision}/metadata",
            get_with(revision::metadata, |op| {
                op.summary("Author, date and message of a commit of its Git sources (read from the cache)")
                    .tag("applications")
            }),
        )
        .api_route(
            "/api/applications/{name}/diff",
            get_with(apps::diff, |op| {
                op.summary("Every out-of-sync object as a unified diff (secret values masked)")
                    .tag("applications")
            }),
        )
        .api_route(
            "/api/applications/{name}/manifests",
            get_with(apps::manifests, |op| {
                op.summary("The desired objects rendered from Git (secret values masked)")
                    .tag("applications")
            }),
        )
        .api_route(
            "/api/applications/{name}/resource",
            get_with(apps::resource, |op| {
                op.summary("One live object of its tree (secret values masked)").tag("applications")
            }),
        )
        .api_route(
            "/api/applications/{name}/events",
            get_with(apps::events, |op| {
                op.summary("Events of the Application and its objects").tag("applications")
            }),
        )
        .api_route(
            "/api/applications/{name}/logs",
            get_with(logs::logs, |op| {
                op.summary("Container logs of its Pods (one Pod, a resource's Pods, or all; followed with follow=true), one JSON object per line; only Pods of its tree")
                    .tag("applications")
                    .response_with::<200, String, _>(|r| r.description("application/x-ndjson: one LogLine per line"))
            }),
        )
        .api_route(
            "/api/applications/{name}/actions",
            get_with(actions::list, |op| {
                op.summary("The resource actions of one object of its tree (restart, suspend, resume)")
                    .tag("operations")
            })
            .post_with(actions::run, |op| {
                op.summary("Run a resource action on one object of its tree (role `action`); recorded in an Event naming the user")
                    .tag("operations")
            }),
        )
        .api_route(
            "/api/applications/{name}/history",
            get_with(apps::history, |op| op.summary("Deployment history, newest first").tag("applications")),
        )
        .api_route(
            "/api/applications/{name}/promotions",
            get_with(app_promotions::promotions, |op| {
                op.summary("Promotions into or out of it, and where the caller may promote it to")
                    .tag("promotions")
            }),
        )
        .api_route(
            "/api/applications/{name}/sync",
            post_with(apps::sync, |op| op.summary("Request a sync").tag("operations")),
        )
        .api_route(
            "/api/applications/{name}/refresh",
            post_with(apps::refresh, |op| op.summary("Request a refresh").tag("operations")),
        )
        .api_route(
            "/api/applications/{name}/rollback",
            post_with(apps::rollback, |op| {
                op.summary("Request a rollback to a history entry, or roll back by a Git revert commit (`revert`)")
                    .tag("operations")
            }),
        )
        .api_route(
            "/api/applications/{name}/operation",
            delete_with(apps::terminate, |op| op.summary("Terminate the running operation").tag("operations")),
        )
        .api_route(
            "/api/promotions",
            post_with(promotions::promote, |op| {
                op.summary("Promote a service from one environment to a later one (one Git commit)")
                    .tag("promotions")
            }),
        )
        .api_route(
            "/api/promotions/preview",
            post_with(promotions::preview, |op| {
                op.summary("What a promotion would change (the target file's diff) and whether its checks pass; commits nothing")
                    .tag("promotions")
            }),
        )
        .api_route(
            "/api/promotions/{pipeline}/history",
            get_with(promotions::history, |op| {
                op.summary("Promotions made in a pipeline, newest first").tag("promotions")
            }),
        )
        .api_route(
            "/api/stream/applications",
            get_with(stream::applications, |op| {
                op.summary("Server-sent events: a summary of every readable Application, then each change")
                    .tag("live updates")
                    .response_with::<200, String, _>(|r| r.description("text/event-stream of Application summaries"))
            }),
        )
        .api_route(
            "/api/stream/applications/{name}",
            get_with(stream::application, |op| {
                op.summary("Server-sent events: one Application as it changes")
                    .tag("live updates")
                    .response_with::<200, String, _>(|r| r.description("text/event-stream of the Application"))
            }),
        )
        .api_route(
            "/api/applicationsets",
            get_with(fleet::list, |op| op.summary("ApplicationSets the caller may read").tag("fleet")),
        )
        .api_route(
            "/api/applicationsets/{name}",
            get_with(fleet::get, |op| op.summary("One ApplicationSet").tag("fleet")),
        )
        .api_route(
            "/api/projects/{name}",
            get_with(projects::get, |op| {
                op.summary("One AppProject, for a caller with a role in it").tag("fleet")
            }),
        )
        .api_route(
            "/api/clusters",
            get_with(fleet::clusters, |op| {
                op.summary("Destination clusters and their connection state (never credentials)")
                    .tag("fleet")
            }),
        )
        .api_route(
            "/api/policies",
            get_with(policies::list, |op| {
                op.summary("Policies with their scope, whether they compiled, and the recent verdicts about Applications the caller may read (read-only: no endpoint writes a policy)")
                    .tag("policies")
            }),
        )
        .api_route(
            "/api/plan",
            post_with(plan::plan, |op| {
                op.summary("What a revision of a repository would change across the Applications and ApplicationSets the caller may read: diffs, prunes, policy verdicts, deletion budgets; applies nothing")
                    .tag("policies")
            }),
        )
        .api_route(
            "/api/webhook",
            post_with(webhook::receive, |op| {
                op.summary("Git push events (GitHub, GitLab, Gitea, Bitbucket); signed with the webhook secret")
                    .tag("webhooks")
            }),
        )
        .api_route(
            "/api/webhook/registry",
            post_with(registry_webhook::receive, |op| {
                op.summary("Registry push notifications (distribution); Authorization: Bearer webhook.registry.secret")
                    .tag("webhooks")
            }),
        )
}

/// The router over `state`: the documented routes ([`api_routes`]), then the web UI.
pub fn router(state: Arc<State>) -> Router {
    let mut document = openapi::base();
    api_routes()
        .finish_api(&mut document)
        // A WebSocket upgrade: not described by the OpenAPI document (see docs/ui.md).
        .route("/api/stream", get(stream::socket::connect))
        .route("/api/{*rest}", axum::routing::any(api_not_found))
        .route("/ui/{*path}", get(ui::file))
        .route("/", get(ui::index))
        .fallback(get(ui::index))
        .layer(axum::middleware::from_fn(json_errors))
        .layer(axum::middleware::from_fn(security_headers))
        .layer(axum::extract::DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

async fn healthz() -> &'static str {
    "ok"
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
    // A page that needs another policy sets its own (the CLI login's confirmation page, whose
    // form leads to the CLI's loopback port); every other answer gets the strict one.
    if !h.contains_key(header::CONTENT_SECURITY_POLICY) {
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        );
    }
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
        Self::bind_with(client, config, addr, None).await
    }

    /// [`Server::bind`], reading Applications from the controller's `shared` cache when given (a
    /// server in the controller's process; see [`State::start_with`]).
    pub async fn bind_with(
        client: kube::Client,
        config: ServerConfig,
        addr: SocketAddr,
        shared: Option<Arc<capstan_controller::shared_apps::SharedApps>>,
    ) -> Result<Server, ServerError> {
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
            state: State::start_with(client, config, shared),
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

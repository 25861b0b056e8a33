//! The health listener of a process that serves no API: `/healthz` (alive), `/readyz` (200 once the
//! process says it is ready, 503 before) and `/metrics` (Capstan's metrics, OpenMetrics text).
//! The controller's Pod is probed on it (`capstan controller --health-listen`).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::ServerError;

/// Whether the process is ready to do its work.
pub type Ready = Arc<dyn Fn() -> bool + Send + Sync>;

/// A bound health listener.
pub struct Health {
    listener: tokio::net::TcpListener,
    ready: Ready,
}

impl Health {
    /// Bind `addr`; `ready` answers `/readyz`.
    pub async fn bind(addr: SocketAddr, ready: Ready) -> Result<Health, ServerError> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| ServerError::Listen(addr, e))?;
        Ok(Health { listener, ready })
    }

    /// The bound address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Serve until `shutdown` resolves.
    pub async fn serve(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        let ready = self.ready;
        let router = Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .route(
                "/readyz",
                get(move || {
                    let ready = ready.clone();
                    async move {
                        if ready() {
                            (StatusCode::OK, "ready")
                        } else {
                            (
                                StatusCode::SERVICE_UNAVAILABLE,
                                "starting: waiting for the first list of the watches",
                            )
                        }
                    }
                }),
            )
            .route(
                "/metrics",
                get(|| async {
                    (
                        [(
                            header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        capstan_metrics::encode(""),
                    )
                        .into_response()
                }),
            );
        axum::serve(self.listener, router)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(ServerError::Serve)
    }
}

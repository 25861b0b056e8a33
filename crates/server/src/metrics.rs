//! `/metrics`: the process's metric families (see `capstan-metrics`) plus, computed from the
//! Application cache at scrape time, one `capstan_app_info` sample per Application with its sync and
//! health status.

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::State as AxState;
use axum::http::header;
use axum::response::IntoResponse;
use kube::ResourceExt;

use crate::api::access::{cluster_of, project_of};
use crate::state::State;

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The per-Application samples.
pub fn app_info(state: &State) -> String {
    let mut out = String::from(
        "# HELP capstan_app_info Sync and health status of each Application\n# TYPE capstan_app_info gauge\n",
    );
    let mut apps = state.apps.state();
    apps.sort_by_key(|a| a.name_any());
    for app in apps {
        let status = app.status.clone().unwrap_or_default();
        let sync = status.sync.map(|s| s.status).unwrap_or_default();
        let health = status.health.map(|h| h.status).unwrap_or_default();
        let phase = status.operation_state.map(|o| o.phase.as_str()).unwrap_or_default();
        let _ = writeln!(
            out,
            "capstan_app_info{{namespace=\"{}\",name=\"{}\",project=\"{}\",dest_cluster=\"{}\",dest_namespace=\"{}\",sync_status=\"{}\",health_status=\"{}\",operation=\"{}\"}} 1",
            escape(&app.namespace().unwrap_or_default()),
            escape(&app.name_any()),
            escape(project_of(&app)),
            escape(&cluster_of(&app)),
            escape(&app.spec.destination.namespace),
            escape(sync.as_str()),
            escape(health.as_str()),
            escape(phase),
        );
    }
    out
}

/// `GET /metrics` on the main address: Application names are not for anonymous callers, so a session
/// or an API token is needed (Prometheus: `authorization: {credentials: TOKEN}`).
pub async fn metrics(_auth: crate::auth::Auth, state: AxState<Arc<State>>) -> axum::response::Response {
    open_metrics(state).await.into_response()
}

/// `GET /metrics` on the separate `--metrics-listen` address, without authentication (like Argo CD's
/// metrics ports: meant for a network only the scraper reaches).
pub async fn open_metrics(AxState(state): AxState<Arc<State>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        capstan_metrics::encode(&app_info(&state)),
    )
}

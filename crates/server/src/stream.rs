//! Live updates over server-sent events, fed by the Application watch (no polling): the list stream
//! sends a summary of every Application the caller may read, then each change; the single-Application
//! stream sends the whole object on each change.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State as AxState};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use futures::stream::{self, StreamExt};
use kube::ResourceExt;
use tokio::sync::broadcast;

use crate::api::apps::{authorized, project_of, summary};
use crate::auth::Auth;
use crate::auth::rbac::Role;
use crate::error::ApiError;
use crate::state::{AppEvent, State};

type Events = Response;

fn sse(s: impl Stream<Item = Event> + Send + 'static) -> Events {
    Sse::new(s.map(Ok::<Event, Infallible>))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// The events of the list stream for everything in the cache now.
fn snapshot(state: &State, auth: &Auth) -> Vec<Event> {
    let policy = state.policy();
    state
        .apps
        .state()
        .iter()
        .filter_map(|app| {
            let role = policy.role(&auth.principal, project_of(app));
            (role >= Role::ReadOnly).then(|| {
                Event::default()
                    .event("application")
                    .data(summary(app, role).to_string())
            })
        })
        .collect()
}

/// `GET /api/stream/applications`.
pub async fn applications(auth: Auth, AxState(state): AxState<Arc<State>>) -> Events {
    let rx = state.events.subscribe();
    let first = snapshot(&state, &auth);
    let updates = stream::unfold((rx, state, auth), |(mut rx, state, auth)| async move {
        loop {
            let events = match rx.recv().await {
                Ok(AppEvent::Applied(app)) => {
                    let role = state.policy().role(&auth.principal, project_of(&app));
                    if role < Role::ReadOnly {
                        continue;
                    }
                    vec![
                        Event::default()
                            .event("application")
                            .data(summary(&app, role).to_string()),
                    ]
                }
                Ok(AppEvent::Deleted(name)) => {
                    vec![
                        Event::default()
                            .event("deleted")
                            .data(serde_json::json!({"name": name}).to_string()),
                    ]
                }
                // Fell behind: send the whole state again.
                Err(broadcast::error::RecvError::Lagged(_)) => snapshot(&state, &auth),
                Err(broadcast::error::RecvError::Closed) => return None,
            };
            return Some((stream::iter(events), (rx, state, auth)));
        }
    })
    .flatten();
    sse(stream::iter(first).chain(updates))
}

/// `GET /api/stream/applications/{name}`.
pub async fn application(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
) -> Result<Events, ApiError> {
    let app = authorized(&state, &auth, &name, Role::ReadOnly)?;
    let rx = state.events.subscribe();
    let first = Event::default()
        .event("application")
        .data(serde_json::to_string(&*app).unwrap_or_default());
    let updates = stream::unfold((rx, state, name), |(mut rx, state, name)| async move {
        loop {
            match rx.recv().await {
                Ok(AppEvent::Applied(app)) if app.name_any() == name => {
                    let event = Event::default()
                        .event("application")
                        .data(serde_json::to_string(&*app).unwrap_or_default());
                    return Some((event, (rx, state, name)));
                }
                Ok(AppEvent::Deleted(n)) if n == name => {
                    let event = Event::default()
                        .event("deleted")
                        .data(serde_json::json!({"name": n}).to_string());
                    return Some((event, (rx, state, name)));
                }
                Ok(_) => continue,
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    if let Some(app) = state.app(&name) {
                        let event = Event::default()
                            .event("application")
                            .data(serde_json::to_string(&*app).unwrap_or_default());
                        return Some((event, (rx, state, name)));
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    Ok(sse(stream::iter([first]).chain(updates)))
}

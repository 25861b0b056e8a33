//! Live updates over server-sent events, fed by the Application watch (no polling): the list stream
//! sends a summary of every Application the caller may read, then each summary that changed (a change
//! that leaves the summary as it was sends nothing, see [`list`]); the single-Application
//! stream sends the whole object on each change.
//!
//! Access is checked again on every event, not only when the stream opens: an Application that
//! becomes unreadable (project moved, grant removed) is reported `deleted` on the list stream and ends
//! the single-Application stream, and every stream ends when the session expires, the token is revoked
//! or the server shuts down.
//!
//! Open streams are bounded ([`StreamLimiter`]): at most [`PER_PRINCIPAL`] per principal and
//! [`GLOBAL`] in all; over either, a new stream is refused with 429.

pub mod limit;
pub mod list;
pub mod socket;

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

use crate::api::access::{authorized, project_of};
use crate::auth::Auth;
use crate::auth::rbac::{Principal, Role, Source};
use crate::error::ApiError;
use crate::state::{AppEvent, State};
pub use limit::{GLOBAL, PER_PRINCIPAL, StreamLimiter};
use list::{ListUpdate, ListView};

/// How often a quiet stream re-checks that its credentials are still good.
pub(crate) const RECHECK: Duration = Duration::from_secs(15);
/// What a client over a limit is told to wait before trying again.
const RETRY_AFTER: Duration = Duration::from_secs(15);

/// One open stream; dropping it (the stream ends or its client goes away) frees its place.
pub struct StreamPermit {
    limiter: Arc<State>,
    key: (Source, String),
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        self.limiter.streams.release(&self.key);
    }
}

/// A place for one more stream of `principal`, if it is under the limits.
pub(crate) fn permit(state: &Arc<State>, principal: &Principal) -> Option<StreamPermit> {
    let key = (principal.source, principal.name.clone());
    if state.streams.acquire(&key) {
        Some(StreamPermit {
            limiter: state.clone(),
            key,
        })
    } else {
        tracing::info!(user = %principal.name, "live-update stream refused: too many open");
        None
    }
}

/// The 429 of a stream over the limits.
pub(crate) fn too_many_streams() -> Response {
    crate::auth::too_many(
        &format!("too many open live-update streams (at most {PER_PRINCIPAL} per user, {GLOBAL} in all)"),
        RETRY_AFTER,
    )
}

fn sse(state: &State, s: impl Stream<Item = Event> + Send + 'static) -> Response {
    let s = s.take_until(state.stopping()).map(Ok::<Event, Infallible>);
    Sse::new(s)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

fn application_event(app: &capstan_api::Application) -> Event {
    Event::default()
        .event("application")
        .data(serde_json::to_string(app).unwrap_or_default())
}

fn deleted_event(name: &str) -> Event {
    Event::default()
        .event("deleted")
        .data(serde_json::json!({"name": name}).to_string())
}

/// The list stream's state: what its client was told, and the change feed.
struct ListStream {
    rx: broadcast::Receiver<AppEvent>,
    state: Arc<State>,
    auth: Auth,
    view: ListView,
    _permit: StreamPermit,
}

fn list_events(updates: Vec<ListUpdate>) -> Vec<Event> {
    updates
        .into_iter()
        .map(|u| match u {
            ListUpdate::Summary(s) => Event::default().event("application").data(s.to_string()),
            ListUpdate::Deleted(name) => deleted_event(&name),
        })
        .collect()
}

/// `GET /api/stream/applications`.
pub async fn applications(auth: Auth, AxState(state): AxState<Arc<State>>) -> Response {
    let Some(permit) = permit(&state, &auth.principal) else {
        return too_many_streams();
    };
    let mut list = ListStream {
        rx: state.events.subscribe(),
        state: state.clone(),
        auth,
        view: ListView::default(),
        _permit: permit,
    };
    let first = list_events(list.view.snapshot(&list.state, &list.auth));
    let updates = stream::unfold(list, |mut list| async move {
        loop {
            let received = tokio::time::timeout(RECHECK, list.rx.recv()).await;
            if !list.auth.still_valid(&list.state) {
                return None;
            }
            let events = match received {
                Err(_) => continue,
                Ok(Ok(event)) => list_events(list.view.on(&list.state, &list.auth, &event)),
                // Fell behind: send the whole state again.
                Ok(Err(broadcast::error::RecvError::Lagged(_))) => {
                    list_events(list.view.snapshot(&list.state, &list.auth))
                }
                Ok(Err(broadcast::error::RecvError::Closed)) => return None,
            };
            if !events.is_empty() {
                return Some((stream::iter(events), list));
            }
        }
    })
    .flatten();
    sse(&state, stream::iter(first).chain(updates))
}

/// `GET /api/stream/applications/{name}`.
pub async fn application(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let app = authorized(&state, &auth, &name, Role::ReadOnly)?;
    let Some(permit) = permit(&state, &auth.principal) else {
        return Ok(too_many_streams());
    };
    let rx = state.events.subscribe();
    let first = application_event(&app);
    let updates = stream::unfold(
        (rx, state.clone(), auth, name, permit),
        |(mut rx, state, auth, name, permit)| async move {
            loop {
                let received = tokio::time::timeout(RECHECK, rx.recv()).await;
                if !auth.still_valid(&state) {
                    return None;
                }
                let app = match received {
                    Err(_) => continue,
                    Ok(Ok(AppEvent::Applied(app))) if app.name_any() == name => app,
                    Ok(Ok(AppEvent::Deleted(n))) if n == name => {
                        return Some((deleted_event(&n), (rx, state, auth, name, permit)));
                    }
                    Ok(Ok(_)) => continue,
                    Ok(Err(broadcast::error::RecvError::Lagged(_))) => match state.app(&name) {
                        Some(app) => app,
                        None => continue,
                    },
                    Ok(Err(broadcast::error::RecvError::Closed)) => return None,
                };
                // Access is checked on every event: a moved Application or a removed grant ends the stream.
                if auth.role(&state, project_of(&app)) < Role::ReadOnly {
                    return None;
                }
                return Some((application_event(&app), (rx, state, auth, name, permit)));
            }
        },
    );
    Ok(sse(&state, stream::iter([first]).chain(updates)))
}

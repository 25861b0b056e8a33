//! `GET /api/stream`: one WebSocket per browser tab carrying every live update the tab shows.
//!
//! Browsers give an HTTP/1.1 host six connections; two server-sent-event streams per page used them
//! up after three tabs and left the next ones blank. A WebSocket does not count against those six,
//! and one per tab carries all of its subscriptions, so a user may keep many tabs open.
//!
//! The client sends `{"topics": [...]}` whenever what it shows changes: `applications` (the list:
//! every readable Application's summary, then each change) and `application/NAME` (one Application,
//! whole, on each change). A topic newly named starts with its current state. The server sends
//! `{"topic", "event", "data"}` frames: `application` (a summary or the object), `deleted`
//! (`data.name`), and `error` (`data.error`: the topic was refused or is no longer readable, and is
//! dropped).
//!
//! The same rules as the server-sent-event streams apply: the stream counts against
//! [`super::PER_PRINCIPAL`], access is checked on every event, and the socket closes when the
//! session expires or is revoked or the server stops. A request whose `Origin` is not the server
//! itself is refused (a page elsewhere must not read a logged-in user's Applications through the
//! browser's cookie).

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::extract::State as AxState;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kube::ResourceExt;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::list::{ListUpdate, ListView};
use super::{RECHECK, StreamPermit, permit, too_many_streams};
use crate::api::access::{authorized, project_of};
use crate::auth::Auth;
use crate::auth::rbac::Role;
use crate::error::ApiError;
use crate::state::{AppEvent, State};

/// What a tab may subscribe to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Topic {
    /// The Application list.
    Applications,
    /// One Application.
    Application(String),
}

impl Topic {
    /// `applications` or `application/NAME`; anything else is not a topic.
    pub fn parse(s: &str) -> Option<Topic> {
        match s.split_once('/') {
            None if s == "applications" => Some(Topic::Applications),
            Some(("application", name)) if !name.is_empty() => Some(Topic::Application(name.to_string())),
            _ => None,
        }
    }
}

impl std::fmt::Display for Topic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Topic::Applications => f.write_str("applications"),
            Topic::Application(name) => write!(f, "application/{name}"),
        }
    }
}

/// The most topics one subscription may name: a tab shows the list and one Application; a client
/// naming thousands would make the server check and hold them all.
pub const MAX_TOPICS: usize = 64;

/// The largest message a tab may send (a subscription is a short JSON list).
const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// Why a subscription naming `topics` is refused, if it is.
fn too_many(topics: &[String]) -> Option<String> {
    (topics.len() > MAX_TOPICS).then(|| format!("{} topics named; at most {MAX_TOPICS}", topics.len()))
}

/// A message from the tab.
#[derive(Debug, Deserialize)]
struct Subscribe {
    /// Everything the tab wants now (replaces what it asked for before).
    topics: Vec<String>,
}

fn frame(topic: &str, event: &str, data: Value) -> Value {
    json!({"topic": topic, "event": event, "data": data})
}

/// One tab's subscriptions and what it has been told.
struct Tab {
    state: Arc<State>,
    auth: Auth,
    list: Option<ListView>,
    apps: BTreeSet<String>,
}

impl Tab {
    fn list_frames(updates: Vec<ListUpdate>) -> impl Iterator<Item = Value> {
        updates.into_iter().map(|u| match u {
            ListUpdate::Summary(s) => frame("applications", "application", s),
            ListUpdate::Deleted(name) => frame("applications", "deleted", json!({"name": name})),
        })
    }

    fn app_frame(app: &capstan_api::Application) -> Value {
        let topic = Topic::Application(app.name_any()).to_string();
        frame(&topic, "application", serde_json::to_value(app).unwrap_or_default())
    }

    /// Replace the subscriptions with `topics`; frames for the newly named ones.
    fn subscribe(&mut self, topics: &[String]) -> Vec<Value> {
        let mut frames = Vec::new();
        let mut wanted_list = false;
        let mut wanted = BTreeSet::new();
        for raw in topics {
            match Topic::parse(raw) {
                Some(Topic::Applications) => wanted_list = true,
                Some(Topic::Application(name)) => {
                    wanted.insert(name);
                }
                None => frames.push(frame(raw, "error", json!({"error": format!("unknown topic {raw:?}")}))),
            }
        }
        match (wanted_list, &mut self.list) {
            (true, None) => {
                let mut view = ListView::default();
                frames.extend(Self::list_frames(view.snapshot(&self.state, &self.auth)));
                self.list = Some(view);
            }
            (false, Some(_)) => self.list = None,
            _ => {}
        }
        self.apps.retain(|name| wanted.contains(name));
        for name in wanted {
            if self.apps.contains(&name) {
                continue;
            }
            match authorized(&self.state, &self.auth, &name, Role::ReadOnly) {
                Ok(app) => {
                    frames.push(Self::app_frame(&app));
                    self.apps.insert(name);
                }
                Err(ApiError { message, .. }) => {
                    let topic = Topic::Application(name).to_string();
                    frames.push(frame(&topic, "error", json!({"error": message})));
                }
            }
        }
        frames
    }

    /// The frames one change means for this tab.
    fn on(&mut self, event: &AppEvent) -> Vec<Value> {
        let mut frames = Vec::new();
        if let Some(view) = &mut self.list {
            frames.extend(Self::list_frames(view.on(&self.state, &self.auth, event)));
        }
        match event {
            AppEvent::Applied(app) if self.apps.contains(&app.name_any()) => frames.push(self.app_or_refusal(app)),
            AppEvent::Deleted(name) if self.apps.contains(name) => {
                let topic = Topic::Application(name.clone()).to_string();
                frames.push(frame(&topic, "deleted", json!({"name": name})));
            }
            _ => {}
        }
        frames
    }

    /// The Application's frame if the tab may still read it; else an error frame, and the topic dropped.
    fn app_or_refusal(&mut self, app: &capstan_api::Application) -> Value {
        if self.auth.role(&self.state, project_of(app)) >= Role::ReadOnly {
            return Self::app_frame(app);
        }
        let name = app.name_any();
        self.apps.remove(&name);
        let topic = Topic::Application(name.clone()).to_string();
        frame(
            &topic,
            "error",
            json!({"error": format!("Application {name:?} not found")}),
        )
    }

    /// Everything again, after falling behind the change feed.
    fn resync(&mut self) -> Vec<Value> {
        let mut frames = Vec::new();
        if let Some(view) = &mut self.list {
            frames.extend(Self::list_frames(view.snapshot(&self.state, &self.auth)));
        }
        for name in self.apps.clone() {
            match self.state.app(&name) {
                Some(app) => frames.push(self.app_or_refusal(&app)),
                None => {
                    let topic = Topic::Application(name.clone()).to_string();
                    frames.push(frame(&topic, "deleted", json!({"name": name})));
                }
            }
        }
        frames
    }
}

/// Whether a browser's `Origin` (if it sent one) names this server (`Host`).
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true; // not a browser: its credentials are its own
    };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let authority = origin
        .to_str()
        .ok()
        .and_then(|o| o.strip_prefix("http://").or_else(|| o.strip_prefix("https://")));
    matches!((authority, host), (Some(a), Some(h)) if a.eq_ignore_ascii_case(h))
}

/// `GET /api/stream` (a WebSocket upgrade).
pub async fn connect(
    auth: Auth,
    AxState(state): AxState<Arc<State>>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    if !same_origin(&headers) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "the live-update socket accepts pages of this server only (Origin differs from Host)",
        )
        .into_response();
    }
    let Some(permit) = permit(&state, &auth.principal) else {
        return too_many_streams();
    };
    ws.max_message_size(MAX_MESSAGE_BYTES)
        .on_upgrade(move |socket| run(socket, state, auth, permit))
}

async fn send_all(socket: &mut WebSocket, frames: Vec<Value>) -> bool {
    for f in frames {
        if socket.send(Message::Text(f.to_string().into())).await.is_err() {
            return false;
        }
    }
    true
}

async fn run(mut socket: WebSocket, state: Arc<State>, auth: Auth, _permit: StreamPermit) {
    let mut rx = state.events.subscribe();
    let stop = state.stopping();
    tokio::pin!(stop);
    let mut recheck = tokio::time::interval(RECHECK);
    recheck.tick().await;
    let mut tab = Tab {
        state: state.clone(),
        auth,
        list: None,
        apps: BTreeSet::new(),
    };
    loop {
        let frames = tokio::select! {
            () = &mut stop => break,
            msg = socket.recv() => match msg {
                Some(Ok(Message::Text(text))) => match serde_json::from_str::<Subscribe>(text.as_str()) {
                    Ok(s) => match too_many(&s.topics) {
                        Some(error) => vec![frame("", "error", json!({"error": error}))],
                        None => tab.subscribe(&s.topics),
                    },
                    Err(err) => vec![frame("", "error", json!({"error": format!("not a subscription: {err}")}))],
                },
                Some(Ok(Message::Close(_)) | Err(_)) | None => return,
                Some(Ok(_)) => continue,
            },
            received = rx.recv() => match received {
                Ok(event) => tab.on(&event),
                Err(broadcast::error::RecvError::Lagged(_)) => tab.resync(),
                Err(broadcast::error::RecvError::Closed) => break,
            },
            _ = recheck.tick() => {
                if !tab.auth.still_valid(&state) {
                    break;
                }
                // Keeps the connection alive through idle proxies.
                if socket.send(Message::Ping(Default::default())).await.is_err() {
                    return;
                }
                continue;
            }
        };
        if !send_all(&mut socket, frames).await {
            return;
        }
    }
    let _ = socket.send(Message::Close(None)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_parse_and_print_back() {
        for t in ["applications", "application/guestbook"] {
            assert_eq!(Topic::parse(t).map(|t| t.to_string()).as_deref(), Some(t));
        }
        for bad in ["", "application/", "applications/x", "application", "apps"] {
            assert_eq!(Topic::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_subscription_names_a_bounded_number_of_topics() {
        let topics = |n: usize| (0..n).map(|i| format!("application/a{i}")).collect::<Vec<_>>();
        assert_eq!(too_many(&topics(MAX_TOPICS)), None);
        let refusal = too_many(&topics(MAX_TOPICS + 1)).unwrap_or_default();
        assert!(
            refusal.contains("65 topics") && refusal.contains("at most 64"),
            "{refusal}"
        );
    }

    #[test]
    fn only_this_servers_pages_may_open_the_socket() {
        let with = |origin: Option<&str>| {
            let mut h = HeaderMap::new();
            h.insert(header::HOST, "localhost:8080".parse().expect("header"));
            if let Some(o) = origin {
                h.insert(header::ORIGIN, o.parse().expect("header"));
            }
            same_origin(&h)
        };
        assert!(with(None));
        assert!(with(Some("http://localhost:8080")));
        assert!(with(Some("https://LOCALHOST:8080")));
        assert!(!with(Some("http://localhost:8081")));
        assert!(!with(Some("http://evil.test")));
        assert!(!with(Some("null")));
    }
}

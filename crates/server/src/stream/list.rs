//! What a client of the Application list has been told, and what each change means for it: shared by
//! the list's server-sent-events stream and the `applications` topic of the tab's WebSocket.
//!
//! Only changed summaries are sent: the view keeps a fingerprint of each summary it sent, and a change
//! to an Application that leaves its summary as it was (its resources, history, managed fields or
//! resource version moved, nothing a list shows) sends nothing. Catching up after falling behind the
//! change feed sends only what differs from what the client has.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use kube::ResourceExt;

use crate::api::access::project_of;
use crate::api::apps::summary;
use crate::auth::Auth;
use crate::auth::rbac::Role;
use crate::state::{AppEvent, State};

/// One thing to tell a list client.
#[derive(Debug)]
pub enum ListUpdate {
    /// An Application's summary (new or changed).
    Summary(serde_json::Value),
    /// An Application the client had is gone or no longer readable.
    Deleted(String),
}

/// The names a list client has been sent, each with its summary's fingerprint.
#[derive(Debug, Default)]
pub struct ListView {
    sent: HashMap<String, u64>,
}

/// The summary of `app` as `role` sees it, and its fingerprint.
fn summary_of(app: &capstan_api::Application, role: Role) -> (serde_json::Value, u64) {
    let value = serde_json::to_value(summary(app, role)).unwrap_or_default();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    value.to_string().hash(&mut hasher);
    (value, hasher.finish())
}

impl ListView {
    /// Everything readable in the cache now that the client does not have as it is, and `Deleted`
    /// for what the client has that is gone.
    pub fn snapshot(&mut self, state: &State, auth: &Auth) -> Vec<ListUpdate> {
        let policy = state.policy();
        let mut updates = Vec::new();
        let mut now = HashMap::new();
        for app in state.apps.state() {
            let role = policy.role(&auth.principal, project_of(&app));
            if role >= Role::ReadOnly {
                let (value, print) = summary_of(&app, role);
                let name = app.name_any();
                if self.sent.get(&name) != Some(&print) {
                    updates.push(ListUpdate::Summary(value));
                }
                now.insert(name, print);
            }
        }
        for gone in self.sent.keys().filter(|n| !now.contains_key(*n)) {
            updates.push(ListUpdate::Deleted(gone.clone()));
        }
        self.sent = now;
        updates
    }

    /// What one change means for this client.
    pub fn on(&mut self, state: &State, auth: &Auth, event: &AppEvent) -> Vec<ListUpdate> {
        match event {
            AppEvent::Applied(app) => {
                let name = app.name_any();
                let role = state.policy().role(&auth.principal, project_of(app));
                if role >= Role::ReadOnly {
                    let (value, print) = summary_of(app, role);
                    if self.sent.insert(name, print) == Some(print) {
                        return Vec::new(); // nothing the list shows changed
                    }
                    vec![ListUpdate::Summary(value)]
                } else if self.sent.remove(&name).is_some() {
                    // No longer readable: gone, as far as this client is concerned.
                    vec![ListUpdate::Deleted(name)]
                } else {
                    Vec::new()
                }
            }
            AppEvent::Deleted(name) if self.sent.remove(name).is_some() => vec![ListUpdate::Deleted(name.clone())],
            AppEvent::Deleted(_) => Vec::new(),
        }
    }
}

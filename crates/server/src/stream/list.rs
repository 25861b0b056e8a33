//! What a client of the Application list has been told, and what each change means for it: shared by
//! the list's server-sent-events stream and the `applications` topic of the tab's WebSocket.

use std::collections::HashSet;

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

/// The names a list client has been sent.
#[derive(Debug, Default)]
pub struct ListView {
    sent: HashSet<String>,
}

fn summary_of(app: &capstan_api::Application, role: Role) -> serde_json::Value {
    serde_json::to_value(summary(app, role)).unwrap_or_default()
}

impl ListView {
    /// Everything readable in the cache now, and `Deleted` for what the client has that is gone.
    pub fn snapshot(&mut self, state: &State, auth: &Auth) -> Vec<ListUpdate> {
        let policy = state.policy();
        let mut updates = Vec::new();
        let mut now = HashSet::new();
        for app in state.apps.state() {
            let role = policy.role(&auth.principal, project_of(&app));
            if role >= Role::ReadOnly {
                now.insert(app.name_any());
                updates.push(ListUpdate::Summary(summary_of(&app, role)));
            }
        }
        for gone in self.sent.difference(&now) {
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
                    self.sent.insert(name);
                    vec![ListUpdate::Summary(summary_of(app, role))]
                } else if self.sent.remove(&name) {
                    // No longer readable: gone, as far as this client is concerned.
                    vec![ListUpdate::Deleted(name)]
                } else {
                    Vec::new()
                }
            }
            AppEvent::Deleted(name) if self.sent.remove(name) => vec![ListUpdate::Deleted(name.clone())],
            AppEvent::Deleted(_) => Vec::new(),
        }
    }
}

//! Events the server records on an Application for what a user did through the API (an action run,
//! an Application deleted): the Kubernetes Event is the audit trail `kubectl describe` and the web
//! UI's Events show, and it names the user.

use capstan_api::Application;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use crate::state::State;

/// Record a Normal Event `reason` with `note` on `app`; a failure is logged, never the user's error
/// (what was asked has been done).
pub async fn record(state: &State, app: &Application, reason: &str, action: &str, note: &str) {
    let reporter = Reporter {
        controller: "capstan-server".into(),
        instance: None,
    };
    let recorder = Recorder::new(state.client.clone(), reporter);
    let event = Event {
        type_: EventType::Normal,
        reason: reason.into(),
        note: Some(note.to_string()),
        action: action.into(),
        secondary: None,
    };
    if let Err(err) = recorder.publish(&event, &app.object_ref(&())).await {
        tracing::warn!(%err, reason, "recording an Event");
    }
}

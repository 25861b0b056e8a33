//! The requests an Application carries into a reconcile, read from its annotations and its status:
//! a refresh (normal or hard), an operation request (valid or not, handled already or not), a
//! terminate request, and an operation that was running when the controller last stopped. Pure.

use capstan_api::Application;
use capstan_api::labels::REFRESH_ANNOTATION;
use capstan_api::operation::{OPERATION_ANNOTATION, Operation, OperationPhase, TERMINATE_ANNOTATION};

use crate::error::InvalidRequest;

/// What was asked of an Application, as one reconcile reads it.
#[derive(Debug)]
pub struct Requests {
    /// The refresh annotation's value (`hard`, or anything else for a normal refresh); cleared
    /// while the Application is compared.
    pub refresh: Option<String>,
    /// The operation annotation as written; cleared once its operation has finished.
    pub raw_operation: Option<String>,
    /// A new operation request (not the one the status already carries): parsed, or why not.
    pub requested: Option<Result<Operation, InvalidRequest>>,
    /// Whether a terminate request is present.
    pub terminate: bool,
    /// The operation the status records as running (a restart resumes it).
    pub running: Option<Operation>,
    /// Whether the status records an operation as running (even one whose request it lacks).
    pub operation_running: bool,
}

impl Requests {
    /// Read the requests of `app`.
    pub fn read(app: &Application) -> Requests {
        let annotations = app.metadata.annotations.as_ref();
        let get = |key: &str| annotations.and_then(|a| a.get(key)).cloned();
        let raw_operation = get(OPERATION_ANNOTATION);
        // A request the operation in status carries is being (or has been) handled.
        let requested = raw_operation
            .as_deref()
            .filter(|raw| !app.handled(raw))
            .map(|raw| serde_json::from_str(raw).map_err(InvalidRequest::from));
        let state = app
            .status
            .as_ref()
            .and_then(|s| s.operation_state.as_ref())
            .filter(|o| o.phase == OperationPhase::Running);
        let running = state.and_then(|o| o.operation.clone());
        Requests {
            refresh: get(REFRESH_ANNOTATION),
            raw_operation,
            requested,
            terminate: annotations.is_some_and(|a| a.contains_key(TERMINATE_ANNOTATION)),
            running,
            operation_running: state.is_some(),
        }
    }

    /// A hard refresh: render again instead of reusing the render cache (as Argo CD's does).
    pub fn hard_refresh(&self) -> bool {
        self.refresh.as_deref() == Some("hard")
    }

    /// The operation request to clear before anything else happens: a new one without an id (one
    /// with an id is cleared once its operation has finished; the id in status keeps it from
    /// running twice).
    pub fn clear_first(&self) -> Option<String> {
        let identified = matches!(&self.requested, Some(Ok(op)) if !op.id.is_empty());
        self.raw_operation
            .clone()
            .filter(|_| self.requested.is_some() && !identified)
    }

    /// Whether Git is asked now instead of answering from the poller: a refresh or an operation
    /// asks.
    pub fn force(&self) -> bool {
        self.refresh.is_some() || self.requested.is_some() || self.running.is_some()
    }

    /// Whether an operation resumes after a restart.
    pub fn resuming(&self) -> bool {
        self.running.is_some()
    }

    /// A terminate request with no operation running: stale, and cleared (it must not stop an
    /// operation requested after it).
    pub fn stale_terminate(&self) -> bool {
        self.terminate && !self.operation_running
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app(annotations: serde_json::Value, status: serde_json::Value) -> Application {
        serde_json::from_value(json!({
            "apiVersion": "capstan.dev/v1alpha1",
            "kind": "Application",
            "metadata": {"name": "a", "namespace": "capstan", "annotations": annotations},
            "spec": {"destination": {"namespace": "d"}},
            "status": status,
        }))
        .expect("a valid Application")
    }

    #[test]
    fn a_request_without_an_id_is_cleared_first_one_with_an_id_once_it_has_run() {
        let plain = json!({"sync": {}, "initiatedBy": "ann"}).to_string();
        let r = Requests::read(&app(json!({OPERATION_ANNOTATION: plain.clone()}), json!({})));
        assert!(matches!(r.requested, Some(Ok(_))));
        assert_eq!(r.clear_first(), Some(plain));
        assert!(r.force());

        let with_id = json!({"sync": {}, "initiatedBy": "ann", "id": "7"}).to_string();
        let r = Requests::read(&app(json!({OPERATION_ANNOTATION: with_id}), json!({})));
        assert!(matches!(r.requested, Some(Ok(_))));
        assert_eq!(r.clear_first(), None);
    }

    #[test]
    fn a_request_the_status_carries_is_not_new() {
        let with_id = json!({"sync": {}, "initiatedBy": "ann", "id": "7"});
        let status = json!({"operationState": {"phase": "Succeeded", "operation": with_id, "startedAt": "2026-01-01T00:00:00Z"}});
        let r = Requests::read(&app(json!({OPERATION_ANNOTATION: with_id.to_string()}), status));
        assert!(r.requested.is_none());
        assert!(r.raw_operation.is_some(), "kept, to be cleared once handled");
        assert!(!r.force());
    }

    #[test]
    fn a_request_that_does_not_parse_is_cleared_and_reported() {
        let r = Requests::read(&app(json!({OPERATION_ANNOTATION: "{not json"}), json!({})));
        assert!(matches!(r.requested, Some(Err(_))));
        assert_eq!(r.clear_first().as_deref(), Some("{not json"));
    }

    #[test]
    fn refresh_terminate_and_a_running_operation() {
        let r = Requests::read(&app(
            json!({REFRESH_ANNOTATION: "hard", TERMINATE_ANNOTATION: "ann"}),
            json!({}),
        ));
        assert!(r.hard_refresh() && r.force() && r.stale_terminate() && !r.resuming());
        let r = Requests::read(&app(json!({REFRESH_ANNOTATION: "normal"}), json!({})));
        assert!(!r.hard_refresh() && r.force());

        let running = json!({"operationState": {"phase": "Running", "operation": {"sync": {}, "initiatedBy": "ann"}, "startedAt": "2026-01-01T00:00:00Z"}});
        let r = Requests::read(&app(json!({TERMINATE_ANNOTATION: "ann"}), running));
        assert!(r.resuming() && r.force() && !r.stale_terminate());
    }
}

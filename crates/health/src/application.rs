//! Health of an Application (`capstan.dev/v1alpha1`, or Argo CD's `argoproj.io/v1alpha1`) seen as a
//! resource of another Application, the app-of-apps pattern.
//!
//! The child's recorded health is not enough for sync waves: a child that has not synced its new
//! revision yet still reports the old revision's health. So a child counts as Progressing until it is
//! Synced and no operation is running on it, unless its own health is already Degraded or Unknown.

use capstan_api::operation::OperationPhase;
use serde_json::Value;

use capstan_api::status::SyncCode;

use crate::json::str_at;
use crate::{Health, HealthCode};

/// An Application's health, from `status.health`, `status.sync.status` and `status.operationState`.
pub(crate) fn application(obj: &Value) -> Health {
    let Some(status) = obj.get("status").filter(|s| s.is_object()) else {
        return Health::progressing("Waiting for the Application to be reconciled");
    };
    let Some(recorded) = str_at(status, &["health", "status"]).filter(|s| !s.is_empty()) else {
        return Health::progressing("Waiting for the Application to be reconciled");
    };
    let message = str_at(status, &["health", "message"]).unwrap_or("");
    let Some(code) = HealthCode::parse(recorded) else {
        return Health::unknown(format!("Application reports unrecognised health \"{recorded}\""));
    };
    if matches!(code, HealthCode::Degraded | HealthCode::Unknown) {
        return Health::new(code, message);
    }
    let phase = str_at(status, &["operationState", "phase"]).and_then(|p| p.parse::<OperationPhase>().ok());
    if phase.is_some_and(|p| !p.is_completed()) {
        return Health::progressing("Application sync is running");
    }
    match str_at(status, &["sync", "status"]).filter(|s| !s.is_empty()) {
        None => Health::progressing("Waiting for the Application to be compared"),
        Some(text) => match SyncCode::parse(text) {
            Some(SyncCode::Synced) => Health::new(code, message),
            Some(SyncCode::OutOfSync) => Health::progressing("Application is OutOfSync"),
            _ => Health::progressing(format!("Application sync status is {text}")),
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::{Health, HealthCode::*, assess};

    fn app(status: Value) -> Value {
        json!({
            "apiVersion": "capstan.dev/v1alpha1",
            "kind": "Application",
            "metadata": {"name": "payments", "namespace": "capstan", "generation": 4},
            "spec": {
                "project": "default",
                "source": {"repoURL": "https://git.example.com/apps.git", "path": "payments", "targetRevision": "main"},
                "destination": {"server": "https://kubernetes.default.svc", "namespace": "payments"}
            },
            "status": status
        })
    }

    fn status(sync: &str, health: &str, message: Option<&str>) -> Value {
        let mut h = json!({"status": health});
        if let Some(m) = message {
            h["message"] = json!(m);
        }
        json!({
            "sync": {"status": sync, "revision": "4f2a9c1"},
            "health": h,
            "operationState": {"phase": "Succeeded", "message": "successfully synced (all tasks run)"}
        })
    }

    #[test]
    fn synced_and_healthy_application_is_healthy() {
        assert_eq!(
            assess(&app(status("Synced", "Healthy", None))),
            Health::new(Healthy, "")
        );
    }

    #[test]
    fn out_of_sync_healthy_application_is_progressing() {
        assert_eq!(
            assess(&app(status("OutOfSync", "Healthy", None))),
            Health::new(Progressing, "Application is OutOfSync")
        );
    }

    #[test]
    fn degraded_application_reports_degraded_even_when_out_of_sync() {
        let expected = Health::new(Degraded, "Deployment \"api\" exceeded its progress deadline");
        assert_eq!(
            assess(&app(status(
                "OutOfSync",
                "Degraded",
                Some("Deployment \"api\" exceeded its progress deadline")
            ))),
            expected
        );
        assert_eq!(
            assess(&app(status(
                "Synced",
                "Degraded",
                Some("Deployment \"api\" exceeded its progress deadline")
            ))),
            expected
        );
    }

    #[test]
    fn unknown_application_health_is_reported() {
        assert_eq!(
            assess(&app(status("Unknown", "Unknown", Some("cluster unreachable")))).code,
            Unknown
        );
    }

    #[test]
    fn synced_application_reports_its_own_health() {
        assert_eq!(
            assess(&app(status("Synced", "Progressing", Some("waiting for pods")))),
            Health::new(Progressing, "waiting for pods")
        );
        assert_eq!(assess(&app(status("Synced", "Suspended", None))).code, Suspended);
        assert_eq!(assess(&app(status("Synced", "Missing", None))).code, Missing);
    }

    #[test]
    fn out_of_sync_missing_application_is_progressing() {
        assert_eq!(assess(&app(status("OutOfSync", "Missing", None))).code, Progressing);
    }

    #[test]
    fn unknown_sync_status_is_progressing() {
        assert_eq!(
            assess(&app(status("Unknown", "Healthy", None))),
            Health::new(Progressing, "Application sync status is Unknown")
        );
        let mut s = status("Synced", "Healthy", None);
        s.as_object_mut().unwrap().remove("sync");
        assert_eq!(assess(&app(s)).code, Progressing);
    }

    #[test]
    fn running_operation_is_progressing() {
        let mut s = status("Synced", "Healthy", None);
        s["operationState"] =
            json!({"phase": "Running", "message": "waiting for completion of hook batch/Job/migrate"});
        assert_eq!(assess(&app(s)), Health::new(Progressing, "Application sync is running"));
    }

    #[test]
    fn unreconciled_application_is_progressing() {
        let expected = Health::new(Progressing, "Waiting for the Application to be reconciled");
        assert_eq!(assess(&app(json!(null))), expected);
        assert_eq!(assess(&app(json!({}))), expected);
        assert_eq!(assess(&app(json!({"sync": {"status": "Synced"}}))), expected);
    }

    #[test]
    fn unrecognised_health_is_unknown() {
        assert_eq!(assess(&app(status("Synced", "Sleepy", None))).code, Unknown);
    }

    #[test]
    fn argo_cd_applications_are_understood() {
        let mut a = app(status("OutOfSync", "Healthy", None));
        a["apiVersion"] = json!("argoproj.io/v1alpha1");
        assert_eq!(assess(&a).code, Progressing);
        a["status"] = status("Synced", "Healthy", None);
        assert_eq!(assess(&a).code, Healthy);
    }
}

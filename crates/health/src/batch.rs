//! Health of batch objects: a Job by its terminal conditions, a CronJob by whether it is suspended.

use serde_json::Value;

use crate::Health;
use crate::json::{condition, int_at, is_true};

/// batch/v1 Job: Failed=True is Degraded, Complete=True is Healthy, a suspended Job is Suspended, and
/// anything else is still running. Since Kubernetes 1.31 a Job's verdict comes first as
/// `FailureTarget` / `SuccessCriteriaMet` while its remaining Pods terminate; those count as the
/// verdict, so a failing Job is Degraded as soon as the API server has decided it.
pub(crate) fn job(obj: &Value) -> Health {
    let failed = condition(obj, "Failed")
        .filter(|c| c.is_true())
        .or_else(|| condition(obj, "FailureTarget").filter(|c| c.is_true()));
    if let Some(failed) = failed {
        return Health::degraded(failed.describe(|| "Job failed".into()));
    }
    let complete = condition(obj, "Complete")
        .filter(|c| c.is_true())
        .or_else(|| condition(obj, "SuccessCriteriaMet").filter(|c| c.is_true()));
    if let Some(complete) = complete {
        return Health::healthy(complete.message);
    }
    if is_true(obj, &["spec", "suspend"]) {
        return Health::suspended("Job is suspended");
    }
    let active = int_at(obj, &["status", "active"]).unwrap_or(0);
    if active > 0 {
        Health::progressing(format!("Waiting for Job to complete: {active} active pods"))
    } else {
        Health::progressing("Waiting for Job to complete")
    }
}

/// batch/v1 CronJob: Suspended if `spec.suspend`, otherwise Healthy (the Jobs it spawns carry their own
/// health).
pub(crate) fn cron_job(obj: &Value) -> Health {
    if is_true(obj, &["spec", "suspend"]) {
        Health::suspended("CronJob is suspended")
    } else {
        Health::healthy("")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::{Health, HealthCode::*, assess};

    fn job(spec: Value, status: Value) -> Value {
        json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "db-migrate", "namespace": "shop", "generation": 1},
            "spec": spec,
            "status": status
        })
    }

    fn template() -> Value {
        json!({"backoffLimit": 2, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "shop/migrate:1"}]}}})
    }

    #[test]
    fn failed_job_is_degraded_with_its_message() {
        let j = job(
            template(),
            json!({
                "startTime": "2024-05-01T10:00:00Z", "failed": 3,
                "conditions": [
                    {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"},
                    {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}
                ]
            }),
        );
        assert_eq!(
            assess(&j),
            Health::new(Degraded, "Job has reached the specified backoff limit")
        );
    }

    #[test]
    fn failed_job_without_message_uses_reason() {
        let j = job(
            template(),
            json!({"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]}),
        );
        assert_eq!(assess(&j), Health::new(Degraded, "DeadlineExceeded"));
    }

    #[test]
    fn complete_job_is_healthy() {
        let j = job(
            template(),
            json!({
                "startTime": "2024-05-01T10:00:00Z", "completionTime": "2024-05-01T10:00:30Z", "succeeded": 1,
                "conditions": [
                    {"type": "SuccessCriteriaMet", "status": "True"},
                    {"type": "Complete", "status": "True", "lastTransitionTime": "2024-05-01T10:00:30Z"}
                ]
            }),
        );
        assert_eq!(assess(&j).code, Healthy);
    }

    #[test]
    fn a_job_decided_by_the_api_server_has_its_verdict_before_its_pods_are_gone() {
        let failing = job(
            json!({"template": template()}),
            json!({"active": 1, "conditions": [
                {"type": "FailureTarget", "status": "True", "reason": "PodFailurePolicy", "message": "Container main for pod default/migrate-x failed with exit code 42"}
            ]}),
        );
        assert_eq!(
            assess(&failing),
            Health::new(
                Degraded,
                "Container main for pod default/migrate-x failed with exit code 42"
            )
        );
        let succeeding = job(
            json!({"template": template()}),
            json!({"active": 1, "conditions": [{"type": "SuccessCriteriaMet", "status": "True", "reason": "SuccessPolicy"}]}),
        );
        assert_eq!(assess(&succeeding).code, Healthy);
    }

    #[test]
    fn running_job_is_progressing() {
        let j = job(template(), json!({"startTime": "2024-05-01T10:00:00Z", "active": 1}));
        assert_eq!(
            assess(&j),
            Health::new(Progressing, "Waiting for Job to complete: 1 active pods")
        );
        let j = job(template(), json!(null));
        assert_eq!(assess(&j), Health::new(Progressing, "Waiting for Job to complete"));
    }

    #[test]
    fn false_conditions_do_not_finish_a_job() {
        let j = job(
            template(),
            json!({"active": 1, "conditions": [{"type": "Failed", "status": "False"}, {"type": "Complete", "status": "False"}]}),
        );
        assert_eq!(assess(&j).code, Progressing);
    }

    #[test]
    fn suspended_job_is_suspended_until_finished() {
        let mut spec = template();
        spec["suspend"] = json!(true);
        let j = job(
            spec.clone(),
            json!({"conditions": [{"type": "Suspended", "status": "True", "reason": "JobSuspended"}]}),
        );
        assert_eq!(assess(&j), Health::new(Suspended, "Job is suspended"));
        let j = job(spec, json!({"conditions": [{"type": "Complete", "status": "True"}]}));
        assert_eq!(assess(&j).code, Healthy);
    }

    fn cron_job(suspend: Value) -> Value {
        json!({
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": "nightly", "namespace": "shop"},
            "spec": {"schedule": "0 3 * * *", "suspend": suspend, "jobTemplate": {"spec": template()}},
            "status": {"lastScheduleTime": "2024-05-01T03:00:00Z", "lastSuccessfulTime": "2024-05-01T03:01:00Z"}
        })
    }

    #[test]
    fn cron_job_is_healthy_unless_suspended() {
        assert_eq!(assess(&cron_job(json!(false))).code, Healthy);
        assert_eq!(assess(&cron_job(json!(null))).code, Healthy);
        assert_eq!(
            assess(&cron_job(json!(true))),
            Health::new(Suspended, "CronJob is suspended")
        );
    }
}

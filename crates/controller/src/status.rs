//! Writing an Application: its status (as a merge patch of what changed, with the conditions that
//! go with a comparison) and the removal of handled request annotations (refresh, operation,
//! terminate).

use capstan_api::Application;
use capstan_api::application::{ApplicationCondition, ApplicationStatus, SyncStatus};
use capstan_api::labels::REFRESH_ANNOTATION;
use capstan_api::operation::{OPERATION_ANNOTATION, TERMINATE_ANNOTATION};
use capstan_api::status::ConditionType;
use capstan_health_rules::CONFIG_MAP_NAME;
use capstan_kube::{describe_kube_error, merge_patch};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::clock;
use crate::context::Ctx;
use crate::error::ReconcileError;
use crate::pipeline::AppState;

/// Put `state` (and an error condition, if any) into `status` and write it when it changed.
pub async fn write_status(
    ctx: &Ctx,
    app: &mut Application,
    status: &mut ApplicationStatus,
    state: Option<&AppState>,
    error: Option<(ConditionType, String)>,
) -> Result<(), ReconcileError> {
    let before = app.status.clone().unwrap_or_default();
    if let Some(state) = state {
        status.sync = Some(SyncStatus {
            status: state.comparison.sync(),
            revision: state.revision.id(),
            revisions: state.revision.revisions(),
        });
        status.health = Some(state.health.clone());
        status.resources = state.resources.clone();
        status.conditions.retain(|c| !c.type_.is_comparison());
        let shared: Vec<String> = state
            .comparison
            .resources
            .iter()
            .filter_map(|r| {
                r.owned_by_other
                    .as_ref()
                    .map(|o| format!("{} is tracked by Application {o}", r.key))
            })
            .collect();
        status
            .conditions
            .retain(|c| c.type_ != ConditionType::SharedResourceWarning);
        if !shared.is_empty() {
            set_condition(status, ConditionType::SharedResourceWarning, shared.join("; "));
        }
        status.conditions.retain(|c| c.type_ != ConditionType::HealthRuleError);
        if !state.health_rule_errors.is_empty() {
            set_condition(
                status,
                ConditionType::HealthRuleError,
                format!(
                    "custom health rules of {CONFIG_MAP_NAME} cannot be used: {}",
                    state.health_rule_errors.join("; ")
                ),
            );
        }
        status.conditions.retain(|c| c.type_ != ConditionType::ProjectViolation);
        if !state.project_violations.is_empty() {
            set_condition(
                status,
                ConditionType::ProjectViolation,
                state.project_violations.join("; "),
            );
        }
    }
    if let Some((type_, message)) = error {
        status.conditions.retain(|c| !c.type_.is_comparison());
        set_condition(status, type_, message);
    }
    // No secret value (decrypted, or from a secret store) reaches the stored status, whichever
    // message quoted it; scrubbed before comparing, so the stored form is what is compared.
    *status = capstan_redact::scrub_serde(std::mem::take(status));
    let mut compare_before = before.clone();
    compare_before.reconciled_at = None;
    let forced = status.reconciled_at.is_some() && status.reconciled_at != before.reconciled_at;
    status.reconciled_at = None;
    if *status == compare_before && !forced {
        status.reconciled_at = before.reconciled_at;
        return Ok(());
    }
    status.reconciled_at = Some(clock::now_precise());
    patch_status(ctx, app, status).await
}

/// Write `status`, sending only what changed from the stored status as a JSON merge patch.
///
/// `app` must hold the status as last stored; it is updated with the stored result, so that several
/// writes in one reconcile each send the difference from the previous one.
pub async fn patch_status(ctx: &Ctx, app: &mut Application, status: &ApplicationStatus) -> Result<(), ReconcileError> {
    let api: Api<Application> = Api::namespaced(ctx.client.clone(), &app.namespace().unwrap_or_default());
    let to_json = |s: &ApplicationStatus| serde_json::to_value(s).unwrap_or(serde_json::Value::Null);
    let before = app.status.as_ref().map(to_json).unwrap_or(serde_json::Value::Null);
    let mut patch = json!({"status": merge_patch(&before, &to_json(status))});
    capstan_redact::scrub_json(&mut patch);
    let stored = api
        .patch_status(&app.name_any(), &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(|e| ReconcileError::update(app.name_any(), e))?;
    ctx.record_written(&stored);
    *app = stored;
    Ok(())
}

/// Set the condition `type_` to `message` (its transition time changes with the message).
pub fn set_condition(status: &mut ApplicationStatus, type_: ConditionType, message: String) {
    if let Some(c) = status.conditions.iter_mut().find(|c| c.type_ == type_) {
        if c.message != message {
            c.message = message;
            c.last_transition_time = clock::now();
        }
        return;
    }
    status.conditions.push(ApplicationCondition {
        type_,
        message,
        last_transition_time: clock::now(),
    });
}

/// Remove the request `raw` once the stored `app` says its operation has finished (the request
/// names the operation in status, which is not running). Before that it stays: a restart resumes the
/// operation it names, and never runs it twice.
pub async fn clear_handled_request(ctx: &Ctx, app: &Application, raw: Option<String>) -> Result<(), ReconcileError> {
    let Some(raw) = raw.filter(|raw| app.handled(raw)) else {
        return Ok(());
    };
    let running = app.operation_running();
    if running {
        return Ok(());
    }
    clear_annotations(&ctx.client, app, None, Some(raw)).await
}

/// Remove the refresh and operation request annotations, unless they changed since `app` was read
/// (a JSON patch that first tests their values: a request written meanwhile is kept for the next
/// reconcile).
pub async fn clear_annotations(
    client: &Client,
    app: &Application,
    refresh: Option<String>,
    operation: Option<String>,
) -> Result<(), ReconcileError> {
    let api: Api<Application> = Api::namespaced(client.clone(), &app.namespace().unwrap_or_default());
    use json_patch::{PatchOperation, RemoveOperation, TestOperation, jsonptr::PointerBuf};
    let mut ops = Vec::new();
    for (key, value) in [(REFRESH_ANNOTATION, refresh), (OPERATION_ANNOTATION, operation)] {
        let Some(value) = value else { continue };
        let path = PointerBuf::from_tokens(["metadata", "annotations", key]);
        ops.push(PatchOperation::Test(TestOperation {
            path: path.clone(),
            value: value.into(),
        }));
        ops.push(PatchOperation::Remove(RemoveOperation { path }));
    }
    let patch = json_patch::Patch(ops);
    match api
        .patch(&app.name_any(), &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
    {
        Ok(_) => Ok(()),
        // A test failed: a newer request replaced the one read; its own reconcile follows.
        Err(kube::Error::Api(s)) if s.code == 422 => {
            tracing::debug!(app = %app.name_any(), message = %s.message, "request changed before it was cleared");
            Ok(())
        }
        Err(e) => Err(ReconcileError::update(app.name_any(), e)),
    }
}

/// Remove the terminate annotation (a request for an operation that has ended means nothing).
pub async fn clear_terminate(ctx: &Ctx, app: &Application) {
    let apps: Api<Application> = Api::namespaced(ctx.client.clone(), &app.namespace().unwrap_or_default());
    let patch = json!({"metadata": {"annotations": {TERMINATE_ANNOTATION: null}}});
    if let Err(err) = apps
        .patch(&app.name_any(), &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        tracing::debug!(err = %describe_kube_error(&err), "clearing the terminate annotation");
    }
}

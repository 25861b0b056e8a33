//! Single writes to an owned Application: delete it (keeping or not its resources), request a sync,
//! and the view of it a rollout plans with.

use capstan_api::Application;
use capstan_api::labels::RESOURCES_FINALIZER;
use capstan_api::operation::{OPERATION_ANNOTATION, Operation};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::json;

use super::*;
use crate::rollout::{AppView, OperationView};

/// Delete an owned Application; with `preserve`, first remove its resources finalizer so its objects
/// stay in the cluster.
pub(super) async fn delete_app(api: &Api<Application>, app: &Application, preserve: bool) -> Result<(), WriteError> {
    let name = app.name_any();
    if preserve {
        strip_resources_finalizer(api, app).await?;
    }
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: app.uid(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&name, &dp).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

pub(super) async fn strip_resources_finalizer(api: &Api<Application>, app: &Application) -> Result<(), WriteError> {
    if !app.finalizers().iter().any(|f| f == RESOURCES_FINALIZER) {
        return Ok(());
    }
    let rest: Vec<&String> = app.finalizers().iter().filter(|f| *f != RESOURCES_FINALIZER).collect();
    let patch = json!({"metadata": {"finalizers": rest, "resourceVersion": app.resource_version()}});
    match api
        .patch(&app.name_any(), &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Ask the Application controller to sync `app` (unless a request or an operation is already there).
pub(super) async fn request_sync(api: &Api<Application>, app: &Application, op: &Operation) -> Result<(), WriteError> {
    let body = serde_json::to_string(op)?;
    let pp = PatchParams {
        field_manager: Some(ROLLOUT_FIELD_MANAGER.into()),
        ..Default::default()
    };
    let mut current = app.clone();
    for _ in 0..3 {
        let busy = current.pending_request().is_some() || current.operation_running();
        if busy {
            return Ok(());
        }
        // With the resourceVersion read, so a request written meanwhile is never overwritten.
        let patch = json!({"metadata": {
            "annotations": {OPERATION_ANNOTATION: body},
            "resourceVersion": current.resource_version(),
        }});
        match api.patch(&current.name_any(), &pp, &Patch::Merge(patch)).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                current = api.get(&current.name_any()).await.map_err(WriteError::from)?;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(WriteError::Waiting("the Application kept changing; will retry"))
}

/// The rollout's view of an Application.
pub(super) fn view(app: &Application, updated: bool) -> AppView {
    let status = app.status.clone().unwrap_or_default();
    // Every source's `repoURL@targetRevision` (one for a single-source Application).
    let sources: Vec<String> = app
        .spec
        .sources()
        .iter()
        .map(|source| {
            let revision = if source.target_revision.is_empty() {
                "HEAD"
            } else {
                &source.target_revision
            };
            format!("{}@{revision}", source.repo_url)
        })
        .collect();
    AppView {
        name: app.name_any(),
        labels: app.labels().clone(),
        source: sources.join(","),
        sync: status.sync.as_ref().map(|s| s.status),
        revision: status.sync.as_ref().map(|s| s.revision.clone()).unwrap_or_default(),
        health: status.health.as_ref().map(|h| h.status),
        health_message: status.health.as_ref().map(|h| h.message.clone()).unwrap_or_default(),
        operation: status.operation_state.as_ref().map(|o| OperationView {
            phase: o.phase,
            message: o.message.clone(),
            started_at: o.started_at.clone(),
            initiated_by: o
                .operation
                .as_ref()
                .map(|op| op.initiated_by.clone())
                .unwrap_or_default(),
        }),
        request_pending: app.pending_request().is_some(),
        updated,
    }
}

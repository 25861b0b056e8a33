//! Deleting an Application's objects when the Application is deleted with the resources finalizer
//! (objects with `sync-options: Delete=false` stay), then removing the finalizer. Deletion runs in
//! reverse dependency order: while Applications that depend on this one exist, it waits and says so.

use std::time::{Duration, Instant};

use capstan_api::Application;
use capstan_api::labels::RESOURCES_FINALIZER;
use capstan_compare::normalize::Tracking;
use capstan_kube::describe_kube_error;
use capstan_sync::SyncOptions;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PropagationPolicy};
use kube::runtime::events::EventType;
use serde_json::json;

use crate::clusters::Destination;
use crate::context::Ctx;
use crate::error::{PipelineError, PipelineErrorKind, ReconcileError};

/// The client that deletes `app`'s objects on `dest`: acting as the ServiceAccount its project's
/// syncs act as there (`destinationServiceAccounts`), so a deletion can do no more than a sync. A
/// project that no longer exists restricts nothing; one that cannot be read, or names no account for
/// the destination, stops the deletion (the message says why).
async fn deletion_client(app: &Application, ctx: &Ctx, dest: &Destination) -> Result<kube::Client, String> {
    let project = match ctx.pipeline.project(app).await {
        Ok(project) => project,
        Err(PipelineError::UnknownProject { .. }) => return Ok(dest.client.clone()),
        Err(err) => return Err(format!("cannot delete the Application's objects: {err}")),
    };
    let account = capstan_project::sync_account(
        &project.name,
        &project.spec,
        &dest.server,
        &app.spec.destination.namespace,
        &app.namespace().unwrap_or_default(),
    )
    .map_err(|v| format!("cannot delete the Application's objects: {v}"))?;
    match account {
        Some(account) => capstan_kube::impersonating(&dest.client, &account.username())
            .map_err(|err| format!("cannot delete the Application's objects: {err}")),
        None => Ok(dest.client.clone()),
    }
}

/// Whether `app` carries the resources finalizer.
pub fn has_finalizer(app: &Application) -> bool {
    app.finalizers().iter().any(|f| f == RESOURCES_FINALIZER)
}

/// Delete the objects of an Application being deleted with the resources finalizer, then remove
/// the finalizer. Objects with `sync-options: Delete=false` are left in place.
pub async fn finalize(app: &Application, ctx: &Ctx) -> Result<(), ReconcileError> {
    if !has_finalizer(app) {
        return Ok(());
    }
    if wait_for_dependents(app, ctx).await? {
        return Ok(());
    }
    let tracking = Tracking::new(&app.namespace().unwrap_or_default(), &app.name_any());
    // The kinds of its objects, and of the hooks its last operation ran (hooks are not among its
    // resources, but a hook left behind carries its tracking label too).
    let status = app.status.as_ref();
    let resources = status.into_iter().flat_map(|s| &s.resources);
    let last_results = status
        .and_then(|s| s.operation_state.as_ref())
        .into_iter()
        .flat_map(|o| &o.resources);
    let mut kinds: Vec<(String, String)> = resources
        .map(|r| (&r.group, &r.version, &r.kind))
        .chain(last_results.map(|r| (&r.group, &r.version, &r.kind)))
        .filter(|(_, version, _)| !version.is_empty())
        .map(|(group, version, kind)| {
            (
                if group.is_empty() {
                    version.clone()
                } else {
                    format!("{group}/{version}")
                },
                kind.clone(),
            )
        })
        .collect();
    kinds.sort();
    kinds.dedup();
    let mut pending: Vec<(Api<DynamicObject>, String)> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    let dest = match ctx.pipeline.destination(app).await {
        Ok(dest) => dest,
        Err(err) if err.kind() == PipelineErrorKind::InvalidSpec => {
            // The cluster is no longer registered: its objects cannot be reached, and deleting them
            // later, should a cluster of that name be registered again, would surprise everyone.
            // Leave them in place (as Argo CD does) and let the Application go.
            ctx.event(
                app,
                EventType::Warning,
                "ResourcesLeftInPlace",
                format!("the Application's objects were not deleted: {err}"),
            )
            .await;
            return remove_finalizer(app, ctx).await;
        }
        Err(err) => {
            // The objects cannot be reached: keep the finalizer and say why (removing it by hand
            // leaves them in place).
            let message = format!("cannot delete the Application's objects: {err}");
            ctx.event(app, EventType::Warning, "DeletionFailed", message.clone())
                .await;
            return Err(ReconcileError::Deletion {
                app: app.name_any(),
                message,
            });
        }
    };
    // Objects are listed as Capstan and deleted as the account the project's syncs act as.
    let deleter = match deletion_client(app, ctx, &dest).await {
        Ok(client) => client,
        Err(message) => {
            ctx.event(app, EventType::Warning, "DeletionFailed", message.clone())
                .await;
            return Err(ReconcileError::Deletion {
                app: app.name_any(),
                message,
            });
        }
    };
    for (api_version, kind) in kinds {
        let info = match dest.discovery.resolve(&api_version, &kind).await {
            Ok(Some(info)) => info,
            Ok(None) => continue, // the kind is gone, and its objects with it
            Err(e) => {
                failures.push(e.to_string());
                continue;
            }
        };
        let api: Api<DynamicObject> = Api::all_with(dest.client.clone(), &info.resource);
        let list = match api.list(&ListParams::default().labels(&tracking.selector())).await {
            Ok(list) => list,
            Err(e) => {
                failures.push(format!("listing {kind}: {}", describe_kube_error(&e)));
                continue;
            }
        };
        for obj in list.items {
            let value = serde_json::to_value(&obj).unwrap_or_default();
            if !tracking.owns(&value) || !SyncOptions::of_object(&value).delete {
                continue;
            }
            let ns = obj.namespace();
            let scoped: Api<DynamicObject> = match &ns {
                Some(ns) if info.namespaced => Api::namespaced_with(deleter.clone(), ns, &info.resource),
                _ => Api::all_with(deleter.clone(), &info.resource),
            };
            let name = obj.name_any();
            let dp = DeleteParams {
                propagation_policy: Some(PropagationPolicy::Foreground),
                preconditions: obj.metadata.uid.clone().map(|uid| kube::api::Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match scoped.delete(&name, &dp).await {
                // Waited for with Capstan's own client: the deleting account may not read.
                Ok(_) => pending.push((
                    match &ns {
                        Some(ns) if info.namespaced => Api::namespaced_with(dest.client.clone(), ns, &info.resource),
                        _ => Api::all_with(dest.client.clone(), &info.resource),
                    },
                    name,
                )),
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => failures.push(format!("deleting {kind} {name}: {}", describe_kube_error(&e))),
            }
        }
    }
    if !failures.is_empty() {
        // Keep the finalizer: the next attempt deletes what is left.
        ctx.event(app, EventType::Warning, "DeletionFailed", failures.join("; "))
            .await;
        return Err(ReconcileError::Deletion {
            app: app.name_any(),
            message: failures.join("; "),
        });
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for (api, name) in pending {
        while Instant::now() < deadline && matches!(api.get_opt(&name).await, Ok(Some(_))) {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    remove_finalizer(app, ctx).await
}

/// Whether Applications that depend on `app` still exist: then its objects stay until they are gone
/// (their deletion wakes it), and its status says which it waits for.
async fn wait_for_dependents(app: &Application, ctx: &Ctx) -> Result<bool, ReconcileError> {
    let namespace = app.namespace().unwrap_or_default();
    let cached = ctx.cached_apps();
    let waiting_for = crate::dependencies::dependents(&app.name_any(), &namespace, cached.iter().map(|a| &**a));
    let mut status = app.status.clone().unwrap_or_default();
    let before = status.conditions.clone();
    status
        .conditions
        .retain(|c| c.type_ != crate::dependencies::DELETION_CONDITION);
    if !waiting_for.is_empty() {
        crate::status::set_condition(
            &mut status,
            crate::dependencies::DELETION_CONDITION,
            format!(
                "deletion waits for the Applications that depend on it to be deleted first: {}",
                waiting_for.join(", ")
            ),
        );
    }
    if status.conditions != before {
        let mut stored = app.clone();
        crate::status::patch_status(ctx, &mut stored, &status).await?;
    }
    Ok(!waiting_for.is_empty())
}

/// Remove the resources finalizer, keeping any other.
async fn remove_finalizer(app: &Application, ctx: &Ctx) -> Result<(), ReconcileError> {
    let remaining: Vec<String> = app
        .finalizers()
        .iter()
        .filter(|f| *f != RESOURCES_FINALIZER)
        .cloned()
        .collect();
    let apps: Api<Application> = Api::namespaced(ctx.client.clone(), &app.namespace().unwrap_or_default());
    apps.patch(
        &app.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": remaining}})),
    )
    .await
    .map(|_| ())
    .map_err(|e| ReconcileError::update(app.name_any(), e))
}

//! The sync's calls to the Kubernetes API: server-side apply, dry-run validation, replace, prune,
//! the destination namespace, and what the API server answered (kept as Capstan's own writes).

use std::time::{Duration, Instant};

use capstan_compare::ResourceState;
use capstan_compare::diff::FIELD_MANAGER;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, PropagationPolicy};
use serde_json::Value;
use tokio::sync::Semaphore;

use crate::error::SyncError;
use crate::options::SyncOptions;

use super::*;

pub(super) fn api_for(client: &kube::Client, state: &ResourceState, namespace: &str) -> Api<DynamicObject> {
    if state.info.namespaced {
        Api::namespaced_with(client.clone(), namespace, &state.info.resource)
    } else {
        Api::all_with(client.clone(), &state.info.resource)
    }
}

/// Server-side apply (or replace, with `Replace=true`), retrying briefly while a just-created CRD's
/// kind is not yet served. Returns the object as the API server answered. Each request takes a place
/// among `writes` (not held while waiting to retry).
pub(super) async fn apply(
    client: &kube::Client,
    state: &ResourceState,
    dry_run: bool,
    writes: &Semaphore,
) -> Result<Option<Value>, SyncError> {
    let Some(desired) = &state.desired else { return Ok(None) };
    let api = api_for(client, state, &state.key.namespace);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let permit = write_permit(writes).await?;
        let res = send(&api, state, desired, dry_run).await;
        drop(permit);
        match res {
            Ok(obj) => return Ok(observed(obj)),
            Err(kube::Error::Api(s)) if s.code == 404 && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Why the API server would refuse to create the object of `state` (a server-side dry run), if it
/// would; `None` also when it cannot tell yet (the namespace or kind is created by this sync).
pub(super) async fn validate(client: &kube::Client, state: &ResourceState) -> Option<SyncError> {
    let desired = state.desired.as_ref()?;
    let api = api_for(client, state, &state.key.namespace);
    match send(&api, state, desired, true).await {
        Ok(_) => None,
        Err(kube::Error::Api(s)) if s.code == 404 => None,
        Err(e) => Some(e.into()),
    }
}

/// A place among the write requests in flight to the destination.
pub(super) async fn write_permit(writes: &Semaphore) -> Result<tokio::sync::SemaphorePermit<'_>, SyncError> {
    writes.acquire().await.map_err(|_| SyncError::Stopped)
}

/// One request writing `desired`: a server-side apply, or a replace with `Replace=true`.
pub(super) async fn send(
    api: &Api<DynamicObject>,
    state: &ResourceState,
    desired: &Value,
    dry_run: bool,
) -> Result<DynamicObject, kube::Error> {
    if SyncOptions::of_object(desired).replace {
        return replace(api, state, desired, dry_run).await;
    }
    let mut pp = capstan_compare::diff::strict(PatchParams::apply(FIELD_MANAGER).force());
    if dry_run {
        pp = pp.dry_run();
    }
    api.patch(&state.key.name, &pp, &Patch::Apply(desired)).await
}

pub(super) async fn replace(
    api: &Api<DynamicObject>,
    state: &ResourceState,
    desired: &Value,
    dry_run: bool,
) -> Result<DynamicObject, kube::Error> {
    let mut obj: DynamicObject = serde_json::from_value(desired.clone()).map_err(kube::Error::SerdeError)?;
    let pp = PostParams {
        dry_run,
        field_manager: Some(FIELD_MANAGER.into()),
    };
    match api.get_opt(&state.key.name).await? {
        Some(live) => {
            obj.metadata.resource_version = live.metadata.resource_version;
            api.replace(&state.key.name, &pp, &obj).await
        }
        None => api.create(&pp, &obj).await,
    }
}

/// `Force=true`: delete the object of `state` — exactly the one that was compared (its uid), with
/// foreground propagation so that its dependents (a Job's Pods) go first — wait until it is gone
/// (at most `timeout`), then create it from Git as [`apply`] does. An object that did not exist is
/// just created.
pub(super) async fn recreate(
    client: &kube::Client,
    state: &ResourceState,
    timeout: Duration,
    writes: &Semaphore,
) -> Result<Option<Value>, SyncError> {
    let what = &state.key;
    let api = api_for(client, state, &state.key.namespace);
    let uid = state
        .live
        .as_ref()
        .and_then(|l| l.pointer("/metadata/uid"))
        .and_then(Value::as_str)
        .map(str::to_string);
    if let Some(uid) = &uid {
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Foreground),
            preconditions: Some(kube::api::Preconditions {
                uid: Some(uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        let permit = write_permit(writes).await?;
        let deleted = api.delete(&state.key.name, &dp).await;
        drop(permit);
        match deleted {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {
                return Err(SyncError::NotRecreated(format!(
                    "{what} was replaced by another object since it was compared; refusing to delete it"
                )));
            }
            Err(e) => return Err(e.into()),
        }
        tracing::info!(object = %what, %uid, "deleted to be recreated (Force=true)");
        let deadline = Instant::now() + timeout;
        loop {
            match api.get_opt(&state.key.name).await? {
                None => break,
                Some(obj) if obj.metadata.uid.as_deref() != Some(uid.as_str()) => {
                    return Err(SyncError::NotRecreated(format!(
                        "{what} was created again by someone else while the old one was being deleted"
                    )));
                }
                Some(obj) => {
                    if Instant::now() >= deadline {
                        let finalizers = obj.metadata.finalizers.unwrap_or_default();
                        let why = if finalizers.is_empty() {
                            String::new()
                        } else {
                            format!(" (finalizers: {})", finalizers.join(", "))
                        };
                        return Err(SyncError::NotRecreated(format!(
                            "{what} was still being deleted after {} s{why}",
                            timeout.as_secs()
                        )));
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        }
    }
    apply(client, state, false, writes).await
}

pub(super) async fn prune(client: &kube::Client, state: &ResourceState, dry_run: bool) -> TaskOutcome {
    let live = state.live.as_ref();
    if live.is_some_and(|l| !SyncOptions::of_object(l).prune) {
        return Ok((ResultCode::PruneSkipped, Seen::Nothing));
    }
    let api = api_for(client, state, &state.key.namespace);
    // Delete exactly the object that was compared: one recreated meanwhile (maybe by someone else)
    // has another uid and is left alone.
    let uid = live
        .and_then(|l| l.pointer("/metadata/uid"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let dp = DeleteParams {
        dry_run,
        propagation_policy: Some(PropagationPolicy::Background),
        preconditions: uid.map(|uid| kube::api::Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    // A deleted object may live on for a while (finalizers): it is gone for the Application,
    // whose next comparison sees it if it is still there.
    match api.delete(&state.key.name, &dp).await {
        Ok(_) => Ok((ResultCode::Pruned, Seen::Deleted)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok((ResultCode::Pruned, Seen::Deleted)),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok((ResultCode::PruneSkipped, Seen::Nothing)),
        Err(e) => Err(e.into()),
    }
}

pub(super) async fn ensure_namespace(client: &kube::Client, name: &str) -> Result<(), SyncError> {
    use k8s_namespace::*;
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &namespace_resource());
    let found = match api.get_opt(name).await {
        Ok(found) => found.is_some(),
        // An account that may not read namespaces (a project's destination ServiceAccount) may
        // still create one: creating answers 409 when it exists.
        Err(kube::Error::Api(s)) if s.code == 403 => false,
        Err(source) => {
            return Err(SyncError::Namespace {
                action: "reading",
                name: name.to_string(),
                source,
            });
        }
    };
    if found {
        return Ok(());
    }
    let ns: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}
    }))?;
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(source) => Err(SyncError::Namespace {
            action: "creating",
            name: name.to_string(),
            source,
        }),
    }
}

mod k8s_namespace {
    use kube::core::GroupVersionKind;
    use kube::discovery::ApiResource;

    pub fn namespace_resource() -> ApiResource {
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Namespace"), "namespaces")
    }
}

/// The object of `state` as it is now (`None`: it does not exist), or why it cannot be read.
pub(super) async fn read(client: &kube::Client, state: &ResourceState) -> Result<Option<Value>, kube::Error> {
    let api = api_for(client, state, &state.key.namespace);
    Ok(api.get_opt(&state.key.name).await?.and_then(observed))
}

/// The `resourceVersion` of an object the API server returned.
pub(super) fn resource_version(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/resourceVersion").and_then(Value::as_str)
}

/// An object the API server returned, as the comparison reads live objects: of `managedFields`
/// only Capstan's own apply entry (which says what a field removed from Git would change).
pub(super) fn observed(mut obj: DynamicObject) -> Option<Value> {
    capstan_compare::owned::keep_own_apply_entry(&mut obj.metadata);
    serde_json::to_value(obj).ok()
}

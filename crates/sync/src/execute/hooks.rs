//! Hooks: create one, wait for it to complete, delete it as its policy says.

use std::time::{Duration, Instant};

use capstan_compare::ResourceState;
use capstan_compare::diff::FIELD_MANAGER;
use capstan_compare::normalize::owner;
use capstan_health::HealthCode;
use capstan_kube::annotations::{self, DeletePolicy};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, PropagationPolicy};
use serde_json::Value;

use crate::error::SyncError;

use super::*;

/// Create a hook and wait for it to complete; delete it according to its policy.
pub(super) async fn run_hook(
    client: &kube::Client,
    state: &ResourceState,
    timeout: Duration,
    report: impl Fn(String),
) -> Result<(), SyncError> {
    let Some(desired) = &state.desired else { return Ok(()) };
    let policies = annotations::delete_policies(desired);
    let api = api_for(client, state, &state.key.namespace);
    let generate = desired
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .is_none();
    let name = if generate {
        let obj: DynamicObject = serde_json::from_value(desired.clone())?;
        let created = api.create(&PostParams::default(), &obj).await?;
        created.metadata.name.unwrap_or_default()
    } else {
        let name = state.key.name.clone();
        if policies.contains(&DeletePolicy::BeforeHookCreation) {
            delete_previous_hook(&api, state, desired).await?;
        }
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        api.patch(&name, &pp, &Patch::Apply(desired)).await?;
        name
    };
    let deadline = Instant::now() + timeout;
    let outcome = loop {
        let live = api.get_opt(&name).await?;
        let Some(live) = live else {
            break Err(SyncError::HookDisappeared(name.clone()));
        };
        let value = serde_json::to_value(live)?;
        let health = capstan_health::assess(&value);
        match health.code {
            HealthCode::Healthy => break Ok(()),
            HealthCode::Degraded => {
                break Err(SyncError::HookFailed {
                    name: name.clone(),
                    message: health.message,
                });
            }
            _ if Instant::now() > deadline => {
                break Err(SyncError::HookTimeout {
                    name: name.clone(),
                    seconds: timeout.as_secs(),
                });
            }
            _ => {
                report(format!("waiting for hook {}/{name} to complete", state.key.kind));
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    };
    let delete = match &outcome {
        Ok(()) => policies.contains(&DeletePolicy::HookSucceeded),
        Err(_) => policies.contains(&DeletePolicy::HookFailed),
    };
    if delete {
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..Default::default()
        };
        let _ = api.delete(&name, &dp).await;
    }
    outcome
}

/// `BeforeHookCreation`: delete the previous run of a hook (and wait until it is gone) — but only an
/// object this Application created: an existing object of the same name that is not tracked by it
/// (someone else's, or nobody's) fails the hook instead. The delete names the uid that was checked,
/// so an object recreated meanwhile is never deleted.
pub(super) async fn delete_previous_hook(
    api: &Api<DynamicObject>,
    state: &ResourceState,
    desired: &Value,
) -> Result<(), SyncError> {
    let name = &state.key.name;
    let what = format!("{}/{name}", state.key.kind);
    let Some(live) = api.get_opt(name).await? else {
        return Ok(());
    };
    let live = serde_json::to_value(live)?;
    // The desired object carries this Application's tracking id (set when it was prepared).
    let ours = owner(desired);
    if ours.is_none() || owner(&live) != ours {
        return Err(SyncError::HookNotReplaced(format!(
            "{what} exists and is not managed by this Application; refusing to replace it"
        )));
    }
    let Some(uid) = live
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return Err(SyncError::HookNotReplaced(format!(
            "{what} has no uid; refusing to replace it"
        )));
    };
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Foreground),
        preconditions: Some(kube::api::Preconditions {
            uid: Some(uid.clone()),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(name, &dp).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            return Err(SyncError::HookNotReplaced(format!(
                "{what} was replaced by another object while deleting the previous hook; refusing to replace it"
            )));
        }
        Err(e) => return Err(e.into()),
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        match api.get_opt(name).await? {
            None => return Ok(()),
            Some(obj) if obj.metadata.uid.as_deref() != Some(uid.as_str()) => {
                return Err(SyncError::HookNotReplaced(format!(
                    "{what} was recreated by someone else while deleting the previous hook; refusing to replace it"
                )));
            }
            Some(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    Err(SyncError::HookNotReplaced(format!(
        "previous hook {what} was not deleted within 60 s"
    )))
}

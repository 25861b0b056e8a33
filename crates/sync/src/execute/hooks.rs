//! Hooks: create one, wait for it to complete, delete it as its policy says.
//!
//! `HookSucceeded` is not acted on when one hook completes: a hook is often a prerequisite of a later
//! one (a ServiceAccount, Role and RoleBinding of weight -1 that the Job of weight 0 runs as), so the
//! hooks that succeeded are deleted only once the whole operation has succeeded. This is Argo CD's rule
//! (gitops-engine `pkg/sync/sync_context.go`: the hooks pending deletion on success are deleted when
//! the operation has completed successfully) and it keeps Helm's (`pkg/action/hooks.go` `execHook`: the
//! `hook-succeeded` hooks of an event are deleted only after every hook of the event succeeded).
//! `HookFailed` deletes the hook that failed at once, as both do.

use std::time::{Duration, Instant};

use capstan_api::labels::HOOK_RUN;
use capstan_compare::ResourceState;
use capstan_compare::diff::FIELD_MANAGER;
use capstan_compare::normalize::owner;
use capstan_health::HealthCode;
use capstan_kube::annotations::{self, DeletePolicy};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::discovery::ApiResource;
use serde_json::Value;

use crate::error::SyncError;

use super::*;

/// A hook that completed: its object's name (generated or not) and whether its policy deletes it once
/// the operation has succeeded (`HookSucceeded`).
#[derive(Debug, Clone)]
pub(super) struct CompletedHook {
    /// The hook object's name.
    pub name: String,
    /// `HookSucceeded` is among its delete policies.
    pub delete_on_success: bool,
}

/// How often the Events of a hook that has not completed are read for the reason it is stuck.
const EVENTS_EVERY: Duration = Duration::from_secs(2);

/// Create a hook and wait for it to complete. A hook that failed is deleted at once when its policy
/// says `HookFailed`; one that succeeded is left for [`delete_succeeded_hooks`].
pub(super) async fn run_hook(
    client: &kube::Client,
    state: &ResourceState,
    opts: &ExecuteOptions,
    report: impl Fn(String),
) -> Result<Option<CompletedHook>, SyncError> {
    let Some(desired) = &state.desired else { return Ok(None) };
    let policies = annotations::delete_policies(desired);
    let api = api_for(client, state, &state.key.namespace);
    let mut desired = desired.clone();
    if !opts.run.is_empty()
        && let Some(meta) = desired.get_mut("metadata").and_then(Value::as_object_mut)
    {
        let annotations = meta
            .entry("annotations")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(HOOK_RUN.to_string(), Value::String(opts.run.clone()));
        }
    }
    let desired = &desired;
    let generate = desired
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .is_none();
    let name = if generate {
        let obj: DynamicObject = serde_json::from_value(desired.clone())?;
        let created = api.create(&PostParams::default(), &obj).await?;
        created.metadata.name.unwrap_or_default()
    } else if adoptable(&api, state, desired, &opts.run).await? {
        // Created by the interrupted run of this very operation: waited for, not run again.
        report(format!(
            "adopting hook {}/{} of the interrupted run",
            state.key.kind, state.key.name
        ));
        state.key.name.clone()
    } else {
        let name = state.key.name.clone();
        if policies.contains(&DeletePolicy::BeforeHookCreation) {
            delete_previous_hook(&api, state, desired).await?;
        }
        let pp = capstan_compare::diff::strict(PatchParams::apply(FIELD_MANAGER).force());
        api.patch(&name, &pp, &Patch::Apply(desired)).await?;
        name
    };
    let deadline = Instant::now() + opts.wave_timeout;
    // The last warning the hook's Events gave (why its Pods are refused, for example), and when
    // they were read.
    let mut warning: Option<String> = None;
    let mut events_read: Option<Instant> = None;
    let outcome = loop {
        let live = api.get_opt(&name).await?;
        let Some(live) = live else {
            break Err(SyncError::HookDisappeared(name.clone()));
        };
        let uid = live.metadata.uid.clone();
        let value = serde_json::to_value(live)?;
        let health = super::health_of(opts, state, &value);
        if !matches!(health.code, HealthCode::Healthy | HealthCode::Degraded)
            && events_read.is_none_or(|at| at.elapsed() >= EVENTS_EVERY)
            && let Some(uid) = uid.as_deref()
        {
            events_read = Some(Instant::now());
            if let Some(w) = last_warning(client, &state.key.namespace, uid).await {
                warning = Some(w);
            }
        }
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
                    seconds: opts.wave_timeout.as_secs(),
                    detail: warning.as_ref().map(|w| format!(": {w}")).unwrap_or_default(),
                });
            }
            _ => {
                let why = match (&warning, health.message.is_empty()) {
                    (Some(w), _) => format!(": {w}"),
                    (None, false) => format!(": {}", health.message),
                    (None, true) => String::new(),
                };
                report(format!("waiting for hook {}/{name} to complete{why}", state.key.kind));
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    };
    match outcome {
        Ok(()) => Ok(Some(CompletedHook {
            name,
            delete_on_success: policies.contains(&DeletePolicy::HookSucceeded),
        })),
        Err(err) => {
            if policies.contains(&DeletePolicy::HookFailed) {
                delete_hook(&api, &name).await;
            }
            Err(err)
        }
    }
}

/// Whether the live hook `state` names was created by this operation's run `run` (an interrupted
/// run of it: the controller stopped or died, or another replica took over) for this Application.
async fn adoptable(
    api: &Api<DynamicObject>,
    state: &ResourceState,
    desired: &Value,
    run: &str,
) -> Result<bool, SyncError> {
    if run.is_empty() {
        return Ok(false);
    }
    let Some(live) = api.get_opt(&state.key.name).await? else {
        return Ok(false);
    };
    let live = serde_json::to_value(live)?;
    let same_run = live
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(HOOK_RUN))
        .and_then(Value::as_str)
        == Some(run);
    Ok(same_run && owner(desired).is_some() && owner(&live) == owner(desired))
}

/// Delete the hooks that succeeded and whose policy says `HookSucceeded`, once the operation has
/// succeeded (see the module's documentation).
pub(super) async fn delete_succeeded_hooks(
    client: &kube::Client,
    resources: &[ResourceState],
    hooks: &[(usize, String)],
) {
    for (index, name) in hooks {
        let state = &resources[*index];
        let api = api_for(client, state, &state.key.namespace);
        delete_hook(&api, name).await;
    }
}

/// Delete a hook object (its dependents in the background); a failure is logged, not fatal: the hook
/// did its work.
async fn delete_hook(api: &Api<DynamicObject>, name: &str) {
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..Default::default()
    };
    match api.delete(name, &dp).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(err) => tracing::warn!(hook = name, error = %err, "deleting a hook failed"),
    }
}

/// The newest `Warning` Event about the object with `uid` (in `namespace`): `REASON: message`, such as
/// the Job controller's `FailedCreate` when the API server refuses the hook's Pods.
async fn last_warning(client: &kube::Client, namespace: &str, uid: &str) -> Option<String> {
    let resource = ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "Event".into(),
        plural: "events".into(),
    };
    let api: Api<DynamicObject> = if namespace.is_empty() {
        Api::all_with(client.clone(), &resource)
    } else {
        Api::namespaced_with(client.clone(), namespace, &resource)
    };
    let lp = ListParams::default().fields(&format!("involvedObject.uid={uid},type=Warning"));
    let events = match api.list(&lp).await {
        Ok(list) => list.items,
        Err(err) => {
            tracing::debug!(error = %err, "reading a hook's events failed");
            return None;
        }
    };
    let time = |e: &DynamicObject| -> String {
        ["lastTimestamp", "eventTime", "firstTimestamp"]
            .iter()
            .find_map(|k| e.data.get(*k).and_then(Value::as_str))
            .unwrap_or_default()
            .to_string()
    };
    let newest = events.iter().max_by_key(|e| time(e))?;
    let reason = newest.data.get("reason").and_then(Value::as_str).unwrap_or("Warning");
    let message = newest.data.get("message").and_then(Value::as_str)?;
    Some(format!("{reason}: {message}"))
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

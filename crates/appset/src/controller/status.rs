//! The set's status: per-Application rollout state, resources, conditions (credentials redacted),
//! and the finalizer that keeps or deletes the generated Applications with the set.

use capstan_api::applicationset::{
    ApplicationSetApplicationStatus, ApplicationSetCondition, ApplicationSetResource, ApplicationsSyncPolicy,
};
use capstan_api::status::ApplicationSetConditionType;
use capstan_api::{Application, ApplicationSet, ApplicationSetStatus};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use super::*;
use crate::rollout::{self, Summary};

/// Put what a successful generation did into the status.
pub(super) fn record(status: &mut ApplicationSetStatus, set: &ApplicationSet, out: &Outcome) {
    status.resources = out
        .names
        .iter()
        .filter_map(|n| out.current.get(n))
        .map(|a| {
            let s = a.status.clone().unwrap_or_default();
            ApplicationSetResource {
                name: a.name_any(),
                status: s.sync.map(|s| s.status),
                health: s.health.map(|h| h.status),
            }
        })
        .collect();
    let conds = &mut status.conditions;
    set_condition(
        conds,
        ApplicationSetConditionType::ParametersGenerated,
        true,
        "ParametersGenerated",
        &format!("generated {} Applications", out.names.len()),
    );
    match &out.held {
        Some(why) => set_condition(
            conds,
            ApplicationSetConditionType::DeletionBudgetExceeded,
            true,
            "DeletionBudgetExceeded",
            why,
        ),
        None => conds.retain(|c| c.type_ != ApplicationSetConditionType::DeletionBudgetExceeded),
    }
    let mut problems = Vec::new();
    if !out.conflicts.is_empty() {
        problems.push(format!(
            "Application{} {} already exist{} and {} not owned by ApplicationSet {}: left alone",
            if out.conflicts.len() == 1 { "" } else { "s" },
            out.conflicts.join(", "),
            if out.conflicts.len() == 1 { "s" } else { "" },
            if out.conflicts.len() == 1 { "is" } else { "are" },
            set.name_any()
        ));
    }
    problems.extend(out.errors.iter().cloned());
    if problems.is_empty() {
        let mut message = format!("all {} generated Applications are up to date", out.names.len());
        let policy_text = match policy(set) {
            ApplicationsSyncPolicy::CreateOnly => "create-only",
            ApplicationsSyncPolicy::CreateUpdate => "create-update",
            ApplicationsSyncPolicy::CreateDelete => "create-delete",
            ApplicationsSyncPolicy::Sync => "sync",
        };
        if !out.kept.is_empty() {
            message = format!(
                "{} Application(s) differ from the template and are kept as they are (applicationsSync: {policy_text}): {}",
                out.kept.len(),
                out.kept.join(", ")
            );
        }
        if !out.orphans.is_empty() {
            message.push_str(&format!(
                "; {} Application(s) no longer generated are kept (applicationsSync: {policy_text}): {}",
                out.orphans.len(),
                out.orphans.join(", ")
            ));
        }
        set_condition(
            conds,
            ApplicationSetConditionType::ErrorOccurred,
            false,
            "ApplicationSetUpToDate",
            "",
        );
        set_condition(
            conds,
            ApplicationSetConditionType::ResourcesUpToDate,
            true,
            "ApplicationSetUpToDate",
            &message,
        );
    } else {
        let reason = if out.conflicts.is_empty() {
            "ApplicationUpdateError"
        } else {
            "ApplicationConflict"
        };
        let message = problems.join("; ");
        set_condition(
            conds,
            ApplicationSetConditionType::ErrorOccurred,
            true,
            reason,
            &message,
        );
        set_condition(
            conds,
            ApplicationSetConditionType::ResourcesUpToDate,
            false,
            reason,
            &message,
        );
    }
    match &out.rollout {
        Some(summary) => {
            let (progressing, reason) = match summary {
                Summary::Complete(_) => (false, "RolloutComplete"),
                Summary::Progressing(_) => (true, "RolloutProgressing"),
                Summary::Stopped(_) => (false, "RolloutStopped"),
            };
            set_condition(
                conds,
                ApplicationSetConditionType::RolloutProgressing,
                progressing,
                reason,
                summary.message(),
            );
            status.application_status = out
                .application_status
                .iter()
                .map(|s| ApplicationSetApplicationStatus {
                    message: redact(&s.message),
                    ..s.clone()
                })
                .collect();
        }
        None => {
            conds.retain(|c| c.type_ != ApplicationSetConditionType::RolloutProgressing);
            status.application_status.clear();
        }
    }
}

/// Remove credentials from repository (and any other) URLs in `text`: `https://user:token@host`
/// becomes `https://user:***@host`, `https://token@host` becomes `https://***@host`.
pub(super) fn redact(text: &str) -> String {
    capstan_source::redact(text, &[])
}

/// Set a condition (its message with credentials redacted); its transition time changes only when its
/// status does.
pub(super) fn set_condition(
    conds: &mut Vec<ApplicationSetCondition>,
    type_: ApplicationSetConditionType,
    status: bool,
    reason: &str,
    message: &str,
) {
    let status = if status { "True" } else { "False" };
    let message = redact(message);
    let message = message.as_str();
    if let Some(c) = conds.iter_mut().find(|c| c.type_ == type_) {
        if c.status != status {
            c.last_transition_time = rollout::format_time(k8s_openapi::jiff::Timestamp::now());
        }
        c.status = status.into();
        c.reason = reason.into();
        c.message = message.into();
        return;
    }
    conds.push(ApplicationSetCondition {
        type_,
        status: status.into(),
        message: message.into(),
        reason: reason.into(),
        last_transition_time: rollout::format_time(k8s_openapi::jiff::Timestamp::now()),
    });
}

/// Write `status` when it differs from the stored one (a JSON merge patch of the difference).
pub(super) async fn write_status(
    api: &Api<ApplicationSet>,
    set: &ApplicationSet,
    status: &ApplicationSetStatus,
) -> Result<(), WriteError> {
    let before = set.status.clone().unwrap_or_default();
    if before == *status {
        return Ok(());
    }
    let old = serde_json::to_value(&before).unwrap_or(Value::Null);
    let new = serde_json::to_value(status).unwrap_or(Value::Null);
    let patch = json!({"status": capstan_kube::merge_patch(&old, &new)});
    api.patch_status(&set.name_any(), &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map(|_| ())
        .map_err(WriteError::from)
}

/// Keep [`PRESERVE_FINALIZER`] on the set exactly when it preserves resources on deletion.
pub(super) async fn ensure_finalizer(api: &Api<ApplicationSet>, set: &mut ApplicationSet) -> Result<(), WriteError> {
    let has = set.finalizers().iter().any(|f| f == PRESERVE_FINALIZER);
    let want = preserve(set);
    if has == want {
        return Ok(());
    }
    let mut finalizers: Vec<String> = set
        .finalizers()
        .iter()
        .filter(|f| *f != PRESERVE_FINALIZER)
        .cloned()
        .collect();
    if want {
        finalizers.push(PRESERVE_FINALIZER.into());
    }
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": set.resource_version()}});
    *set = api
        .patch(&set.name_any(), &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(WriteError::from)?;
    Ok(())
}

/// A set being deleted: with [`PRESERVE_FINALIZER`], take the resources finalizer off every owned
/// Application, then let garbage collection proceed.
pub(super) async fn finalize(ctx: &Ctx, api: &Api<ApplicationSet>, set: &ApplicationSet) -> Result<(), WriteError> {
    if !set.finalizers().iter().any(|f| f == PRESERVE_FINALIZER) {
        return Ok(());
    }
    let namespace = set.namespace().unwrap_or_default();
    let apps: Api<Application> = Api::namespaced(ctx.client.clone(), &namespace);
    let uid = set.uid().unwrap_or_default();
    // Listed from the API server, not the cache: no Application may keep its finalizer.
    let list = apps.list(&ListParams::default()).await.map_err(WriteError::from)?;
    for app in list.items.iter().filter(|a| is_owned(a, &uid)) {
        strip_resources_finalizer(&apps, app).await?;
    }
    let rest: Vec<&String> = set.finalizers().iter().filter(|f| *f != PRESERVE_FINALIZER).collect();
    let patch = json!({"metadata": {"finalizers": rest, "resourceVersion": set.resource_version()}});
    match api
        .patch(&set.name_any(), &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {

    use capstan_api::ApplicationSetStatus;
    use capstan_api::applicationset::ApplicationSetApplicationStatus;

    use super::*;

    use crate::controller::tests::{BASE, set};
    use crate::rollout::Summary;

    #[test]
    fn conditions_never_show_repository_credentials() {
        let mut conds = Vec::new();
        set_condition(
            &mut conds,
            ApplicationSetConditionType::ErrorOccurred,
            true,
            "RepositoryError",
            "repository https://bot:s3cr3t@git.example/r.git at revision main: fatal: unable to access \
             'https://ghp_T0KEN@git.example/r.git/': 403",
        );
        assert_eq!(
            conds[0].message,
            "repository https://bot:***@git.example/r.git at revision main: fatal: unable to access \
             'https://***@git.example/r.git/': 403"
        );
        let mut status = ApplicationSetStatus::default();
        let out = Outcome {
            errors: vec![
                "applying Application a: spec.source.repoURL \"https://u:p4ssw0rd@h/r.git\" is invalid".into(),
            ],
            rollout: Some(Summary::Progressing("syncing".into())),
            application_status: vec![ApplicationSetApplicationStatus {
                application: "a".into(),
                message: "sync of https://u:p4ssw0rd@h/r.git failed".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        record(&mut status, &set(BASE), &out);
        let text = serde_json::to_string(&status).unwrap();
        assert!(!text.contains("p4ssw0rd"), "{text}");
        assert!(text.contains("https://u:***@h/r.git"), "{text}");
        assert_eq!(
            redact("ssh://git@host/r.git"),
            "ssh://git@host/r.git",
            "a user name is kept"
        );
    }
}

//! Per-object annotations that steer sync and compare, with the Argo CD spellings accepted as
//! aliases: sync wave, hook phases and delete policies, sync options and compare options.

use capstan_api::labels;
use serde_json::Value;

/// Value of annotation `key` (Capstan spelling first, then the Argo CD alias).
pub fn get<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    let annotations = obj.get("metadata")?.get("annotations")?;
    annotations.get(key).and_then(Value::as_str).or_else(|| {
        labels::argo_alias(key)
            .and_then(|alias| annotations.get(alias.as_str()))
            .and_then(Value::as_str)
    })
}

/// An annotation whose value cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnnotationError {
    /// The sync wave is not an integer.
    #[error("{} {value:?} is not an integer", labels::SYNC_WAVE)]
    SyncWave {
        /// The annotation's value.
        value: String,
        /// Why it does not parse.
        #[source]
        source: std::num::ParseIntError,
    },
    /// The hook annotation names a phase that does not exist.
    #[error("unknown hook phase {0:?} in {hook}", hook = labels::HOOK)]
    HookPhase(String),
}

/// The object's sync wave (default 0; an unparsable value is an error for the caller to report).
pub fn sync_wave(obj: &Value) -> Result<i64, AnnotationError> {
    match get(obj, labels::SYNC_WAVE) {
        None => Ok(0),
        Some(v) => v.trim().parse().map_err(|source| AnnotationError::SyncWave {
            value: v.to_string(),
            source,
        }),
    }
}

/// Sync phase of a hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// Before anything is applied.
    PreSync,
    /// With the ordinary objects.
    Sync,
    /// After everything is applied and healthy.
    PostSync,
    /// When the sync fails.
    SyncFail,
}

impl Phase {
    /// The annotation spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::PreSync => "PreSync",
            Phase::Sync => "Sync",
            Phase::PostSync => "PostSync",
            Phase::SyncFail => "SyncFail",
        }
    }
}

/// What the hook annotation says about an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookSpec {
    /// Not a hook: an ordinary object synced in the Sync phase.
    None,
    /// `Skip`: never applied.
    Skip,
    /// A hook for these phases.
    Phases(Vec<Phase>),
}

/// Parse the hook annotation.
pub fn hook(obj: &Value) -> Result<HookSpec, AnnotationError> {
    let Some(value) = get(obj, labels::HOOK) else {
        return Ok(HookSpec::None);
    };
    let mut phases = Vec::new();
    for word in value.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        match word {
            "Skip" => return Ok(HookSpec::Skip),
            "PreSync" => phases.push(Phase::PreSync),
            "Sync" => phases.push(Phase::Sync),
            "PostSync" => phases.push(Phase::PostSync),
            "SyncFail" => phases.push(Phase::SyncFail),
            other => return Err(AnnotationError::HookPhase(other.to_string())),
        }
    }
    phases.sort();
    phases.dedup();
    if phases.is_empty() {
        Ok(HookSpec::None)
    } else {
        Ok(HookSpec::Phases(phases))
    }
}

/// When a hook is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeletePolicy {
    /// After it succeeded.
    HookSucceeded,
    /// After it failed.
    HookFailed,
    /// Before a new one is created (the default, as in Argo CD).
    BeforeHookCreation,
}

/// The hook's delete policies (default: BeforeHookCreation).
pub fn delete_policies(obj: &Value) -> Vec<DeletePolicy> {
    let mut out: Vec<DeletePolicy> = get(obj, labels::HOOK_DELETE_POLICY)
        .unwrap_or("")
        .split(',')
        .filter_map(|w| match w.trim() {
            "HookSucceeded" => Some(DeletePolicy::HookSucceeded),
            "HookFailed" => Some(DeletePolicy::HookFailed),
            "BeforeHookCreation" => Some(DeletePolicy::BeforeHookCreation),
            _ => None,
        })
        .collect();
    if out.is_empty() {
        out.push(DeletePolicy::BeforeHookCreation);
    }
    out
}

/// Whether a comma-separated options annotation (or list) contains `option` (e.g. `Prune=false`).
pub fn has_option(options: &str, option: &str) -> bool {
    options.split(',').any(|o| o.trim().eq_ignore_ascii_case(option))
}

/// Whether the object's `sync-options` annotation contains `option`.
pub fn has_sync_option(obj: &Value, option: &str) -> bool {
    get(obj, labels::SYNC_OPTIONS).is_some_and(|v| has_option(v, option))
}

/// Whether the object's `compare-options` annotation contains `option`.
pub fn has_compare_option(obj: &Value, option: &str) -> bool {
    get(obj, labels::COMPARE_OPTIONS).is_some_and(|v| has_option(v, option))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(annotations: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "annotations": annotations}})
    }

    #[test]
    fn reads_capstan_and_argo_spellings() {
        assert_eq!(sync_wave(&obj(json!({"capstan.dev/sync-wave": "-2"}))), Ok(-2));
        assert_eq!(sync_wave(&obj(json!({"argocd.argoproj.io/sync-wave": "5"}))), Ok(5));
        assert_eq!(sync_wave(&obj(json!({}))), Ok(0));
        assert_eq!(
            sync_wave(&obj(json!({"capstan.dev/sync-wave": "soon"})))
                .err()
                .map(|e| e.to_string()),
            Some("capstan.dev/sync-wave \"soon\" is not an integer".into())
        );
        assert_eq!(
            hook(&obj(json!({"argocd.argoproj.io/hook": "PostSync,PreSync"}))),
            Ok(HookSpec::Phases(vec![Phase::PreSync, Phase::PostSync]))
        );
        assert_eq!(hook(&obj(json!({"capstan.dev/hook": "Skip"}))), Ok(HookSpec::Skip));
        assert_eq!(
            hook(&obj(json!({"capstan.dev/hook": "Later"})))
                .err()
                .map(|e| e.to_string()),
            Some("unknown hook phase \"Later\" in capstan.dev/hook".into())
        );
        assert_eq!(delete_policies(&obj(json!({}))), vec![DeletePolicy::BeforeHookCreation]);
        assert_eq!(
            delete_policies(&obj(
                json!({"capstan.dev/hook-delete-policy": "HookSucceeded,HookFailed"})
            )),
            vec![DeletePolicy::HookSucceeded, DeletePolicy::HookFailed]
        );
        assert!(has_sync_option(
            &obj(json!({"capstan.dev/sync-options": "Prune=false, Replace=true"})),
            "replace=true"
        ));
        assert!(has_compare_option(
            &obj(json!({"argocd.argoproj.io/compare-options": "IgnoreExtraneous"})),
            "IgnoreExtraneous"
        ));
    }
}

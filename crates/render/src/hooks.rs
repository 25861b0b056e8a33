//! Mapping Helm hook annotations onto Capstan's sync phases, as Argo CD does: `helm.sh/hook` becomes
//! `capstan.dev/hook`, `helm.sh/hook-weight` becomes `capstan.dev/sync-wave` and
//! `helm.sh/hook-delete-policy` becomes `capstan.dev/hook-delete-policy`. Helm's own annotations are
//! kept. Objects whose only hooks have no Capstan phase (delete, rollback and test hooks) are dropped.

use capstan_api::labels::{HOOK, HOOK_DELETE_POLICY, SYNC_WAVE, argo_alias};
use serde_json::{Map, Value};

/// Helm's hook annotation.
pub const HELM_HOOK: &str = "helm.sh/hook";
/// Helm's hook ordering annotation.
pub const HELM_HOOK_WEIGHT: &str = "helm.sh/hook-weight";
/// Helm's hook deletion annotation.
pub const HELM_HOOK_DELETE_POLICY: &str = "helm.sh/hook-delete-policy";

/// What a `helm.sh/hook` value means for Capstan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HelmHook {
    /// Not a hook (empty value): render as an ordinary object.
    None,
    /// Run in these phases (deduplicated, in order of first appearance).
    Phases(Vec<&'static str>),
    /// Only hooks with no Capstan phase (`pre-delete`, `post-delete`, rollback, `test`): leave out.
    Drop,
}

/// Map a comma-separated `helm.sh/hook` value to Capstan phases.
pub fn helm_hook_phases(value: &str) -> HelmHook {
    let mut phases = Vec::new();
    let mut any = false;
    for hook in value.split(',').map(str::trim).filter(|h| !h.is_empty()) {
        any = true;
        let phase = match hook {
            "pre-install" | "pre-upgrade" => "PreSync",
            "post-install" | "post-upgrade" => "PostSync",
            // pre-delete, post-delete, pre-rollback, post-rollback, test, test-success, test-failure,
            // and anything unknown (Helm skips unknown hooks too).
            _ => continue,
        };
        if !phases.contains(&phase) {
            phases.push(phase);
        }
    }
    match (any, phases.is_empty()) {
        (false, _) => HelmHook::None,
        (true, true) => HelmHook::Drop,
        (true, false) => HelmHook::Phases(phases),
    }
}

/// Map a comma-separated `helm.sh/hook-delete-policy` value to Capstan's names; unknown ones are left
/// out. `None` when nothing maps.
pub fn helm_delete_policy(value: &str) -> Option<String> {
    let mut policies: Vec<&str> = Vec::new();
    for policy in value.split(',').map(str::trim) {
        let mapped = match policy {
            "before-hook-creation" => "BeforeHookCreation",
            "hook-succeeded" => "HookSucceeded",
            "hook-failed" => "HookFailed",
            _ => continue,
        };
        if !policies.contains(&mapped) {
            policies.push(mapped);
        }
    }
    (!policies.is_empty()).then(|| policies.join(","))
}

/// Apply the Helm hook mapping to one rendered object; `false` means the object must be dropped.
/// Objects that already carry a Capstan or Argo CD hook annotation are left as they are.
pub fn map_helm_hooks(object: &mut Value) -> bool {
    let Some(annotations) = object
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    else {
        return true;
    };
    if has_capstan_or_argo(annotations, HOOK) {
        return true;
    }
    if let Some(hook) = annotation(annotations, HELM_HOOK) {
        match helm_hook_phases(&hook) {
            HelmHook::Drop => return false,
            HelmHook::Phases(phases) => {
                annotations.insert(HOOK.to_string(), Value::String(phases.join(",")));
            }
            HelmHook::None => {}
        }
    }
    if let Some(weight) = annotation(annotations, HELM_HOOK_WEIGHT)
        && !weight.trim().is_empty()
        && !has_capstan_or_argo(annotations, SYNC_WAVE)
    {
        annotations.insert(SYNC_WAVE.to_string(), Value::String(weight.trim().to_string()));
    }
    if let Some(policy) = annotation(annotations, HELM_HOOK_DELETE_POLICY).and_then(|p| helm_delete_policy(&p))
        && !has_capstan_or_argo(annotations, HOOK_DELETE_POLICY)
    {
        annotations.insert(HOOK_DELETE_POLICY.to_string(), Value::String(policy));
    }
    true
}

fn annotation(annotations: &Map<String, Value>, key: &str) -> Option<String> {
    match annotations.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn has_capstan_or_argo(annotations: &Map<String, Value>, capstan_key: &str) -> bool {
    annotations.contains_key(capstan_key) || argo_alias(capstan_key).is_some_and(|k| annotations.contains_key(&k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(annotations: Value) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "annotations": annotations}})
    }

    #[test]
    fn phases_from_helm_hooks() {
        assert_eq!(helm_hook_phases("pre-install"), HelmHook::Phases(vec!["PreSync"]));
        assert_eq!(
            helm_hook_phases("pre-install,post-install"),
            HelmHook::Phases(vec!["PreSync", "PostSync"])
        );
        assert_eq!(
            helm_hook_phases("pre-install, pre-upgrade ,post-upgrade"),
            HelmHook::Phases(vec!["PreSync", "PostSync"])
        );
        assert_eq!(
            helm_hook_phases("pre-delete,pre-install"),
            HelmHook::Phases(vec!["PreSync"])
        );
        assert_eq!(helm_hook_phases("test"), HelmHook::Drop);
        assert_eq!(helm_hook_phases("test-success"), HelmHook::Drop);
        assert_eq!(helm_hook_phases("post-delete,pre-delete"), HelmHook::Drop);
        assert_eq!(helm_hook_phases(" "), HelmHook::None);
    }

    #[test]
    fn delete_policies() {
        assert_eq!(
            helm_delete_policy("before-hook-creation,hook-succeeded").as_deref(),
            Some("BeforeHookCreation,HookSucceeded")
        );
        assert_eq!(helm_delete_policy("hook-failed").as_deref(), Some("HookFailed"));
        assert_eq!(helm_delete_policy("whatever"), None);
    }

    #[test]
    fn maps_hook_weight_and_policy() {
        let mut o = obj(json!({
            "helm.sh/hook": "pre-install,pre-upgrade",
            "helm.sh/hook-weight": "-5",
            "helm.sh/hook-delete-policy": "before-hook-creation",
        }));
        assert!(map_helm_hooks(&mut o));
        let a = &o["metadata"]["annotations"];
        assert_eq!(a[HOOK], "PreSync");
        assert_eq!(a[SYNC_WAVE], "-5");
        assert_eq!(a[HOOK_DELETE_POLICY], "BeforeHookCreation");
        assert_eq!(a[HELM_HOOK], "pre-install,pre-upgrade");
    }

    #[test]
    fn drops_delete_and_test_hooks() {
        assert!(!map_helm_hooks(&mut obj(json!({"helm.sh/hook": "pre-delete"}))));
        assert!(!map_helm_hooks(&mut obj(json!({"helm.sh/hook": "test"}))));
    }

    #[test]
    fn existing_capstan_or_argo_annotations_win() {
        let mut o = obj(json!({"helm.sh/hook": "test", "argocd.argoproj.io/hook": "Sync"}));
        let before = o.clone();
        assert!(map_helm_hooks(&mut o));
        assert_eq!(o, before);
        let mut o =
            obj(json!({"helm.sh/hook": "post-install", "helm.sh/hook-weight": "3", "capstan.dev/sync-wave": "1"}));
        assert!(map_helm_hooks(&mut o));
        assert_eq!(o["metadata"]["annotations"][SYNC_WAVE], "1");
        assert_eq!(o["metadata"]["annotations"][HOOK], "PostSync");
        let mut o = obj(json!({"helm.sh/hook-weight": "2", "argocd.argoproj.io/sync-wave": "7"}));
        assert!(map_helm_hooks(&mut o));
        assert!(o["metadata"]["annotations"].get(SYNC_WAVE).is_none());
    }

    #[test]
    fn objects_without_annotations_are_untouched() {
        let mut o = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}});
        let before = o.clone();
        assert!(map_helm_hooks(&mut o));
        assert_eq!(o, before);
    }
}

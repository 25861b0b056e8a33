//! Well-known labels and annotations Capstan reads and writes, with the Argo CD aliases it accepts.

/// Label on every object Capstan applies, naming the owning Application (`<namespace>_<name>`).
pub const TRACKING_LABEL: &str = "capstan.dev/instance";
/// Annotation that triggers a refresh of an Application: `normal` or `hard`.
pub const REFRESH_ANNOTATION: &str = "capstan.dev/refresh";
/// The annotation `kubectl apply` writes: the whole object as last applied (a cluster Secret's
/// credentials included). Never shown.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// Finalizer that makes deleting an Application delete the objects it manages.
pub const RESOURCES_FINALIZER: &str = "capstan.dev/resources-finalizer";
/// Label on Secrets describing a destination cluster.
pub const SECRET_TYPE_LABEL: &str = "capstan.dev/secret-type";

/// Sync wave of a rendered object (integer, default 0).
pub const SYNC_WAVE: &str = "capstan.dev/sync-wave";
/// Hook phase(s) of a rendered object: PreSync, Sync, PostSync, SyncFail, Skip.
pub const HOOK: &str = "capstan.dev/hook";
/// When to delete a hook: HookSucceeded, HookFailed, BeforeHookCreation.
pub const HOOK_DELETE_POLICY: &str = "capstan.dev/hook-delete-policy";
/// Which run of an operation created a hook object (the operation's start time, kept when it
/// resumes): a resumed operation adopts the hook its interrupted run created instead of running it
/// again.
pub const HOOK_RUN: &str = "capstan.dev/hook-run";
/// Per-object sync options, comma separated (`Prune=false`, `Replace=true`, ...).
pub const SYNC_OPTIONS: &str = "capstan.dev/sync-options";
/// Per-object compare options, comma separated (`IgnoreExtraneous`).
pub const COMPARE_OPTIONS: &str = "capstan.dev/compare-options";

/// Annotation on an ApplicationSet by which a person confirms deletions above its
/// `deletionBudget` (`"true"`); the controller removes it once the deletions are made.
pub const ALLOW_DELETIONS_ANNOTATION: &str = "capstan.dev/allow-deletions";

/// Annotation on an Application where the controller records its automatic revert
/// (`spec.syncPolicy.autoRevert`) before making it: JSON naming the revision reverted, the history
/// entry returned to and, once pushed, the revert commit or the error. Written with the
/// Application's resourceVersion as a precondition, so each revision is reverted at most once,
/// across restarts and replicas.
pub const AUTO_REVERTED_ANNOTATION: &str = "capstan.dev/auto-reverted";

/// Pod (template) annotation read by the playground's node simulator:
/// `fail`, `never-ready`, `delay=<seconds>`, comma separated.
pub const SIMULATE: &str = "capstan.dev/simulate";

/// The Argo CD spelling of a Capstan annotation, accepted as an alias on rendered objects.
pub fn argo_alias(capstan_key: &str) -> Option<String> {
    capstan_key
        .strip_prefix("capstan.dev/")
        .map(|rest| format!("argocd.argoproj.io/{rest}"))
}

/// The annotations on an Application that are requests to the controller (an operation, its
/// termination, a refresh) or the controller's own records (what was notified, what was reverted
/// automatically): never copied from an ApplicationSet's template, which would repeat a request on
/// every reconcile of the set or forge a record.
pub const APPLICATION_CONTROL_ANNOTATIONS: [&str; 5] = [
    crate::operation::OPERATION_ANNOTATION,
    crate::operation::TERMINATE_ANNOTATION,
    REFRESH_ANNOTATION,
    crate::notification::NOTIFIED_ANNOTATION,
    AUTO_REVERTED_ANNOTATION,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argo_alias_maps_the_prefix() {
        assert_eq!(argo_alias(SYNC_WAVE).as_deref(), Some("argocd.argoproj.io/sync-wave"));
        assert_eq!(argo_alias("example.com/x"), None);
    }
}

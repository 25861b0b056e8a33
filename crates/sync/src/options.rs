//! Sync options, parsed once: the list an Application's `syncPolicy.syncOptions` and an operation's
//! `syncOptions` give, and an object's `sync-options` annotation (`capstan.dev/sync-options` or Argo
//! CD's alias), each a list of comma-separated `Name=value` words.
//!
//! Names and values are compared without regard to case, as Argo CD does. An option changes its
//! default only in the spelling that does so (`PruneLast=true`, `Prune=false`); once given, that
//! spelling wins over the default one anywhere in the list. Words Capstan does not know are ignored
//! here; an Application's own list is checked first with [`unsupported_app_option`], so that an option
//! that asks for something Capstan does not do is refused rather than ignored.

use capstan_api::labels;
use serde_json::Value;

/// The sync options Capstan acts on. [`Default`] is what an empty list means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncOptions {
    /// `Prune=false` (on an object) turns this off: a sync never deletes the object.
    pub prune: bool,
    /// `Delete=false` (on an object) turns this off: deleting the Application leaves the object.
    pub delete: bool,
    /// `PruneLast=true`: prune after everything else (after PostSync).
    pub prune_last: bool,
    /// `Replace=true` (on an object): replace it instead of applying it.
    pub replace: bool,
    /// `ApplyOutOfSyncOnly=false` turns this off: objects already equal to Git are applied again.
    pub apply_out_of_sync_only: bool,
    /// `CreateNamespace=true`: create the destination namespace when it is missing.
    pub create_namespace: bool,
    /// `Force=true` (in an operation's options only): every object the operation applies is
    /// deleted and created again from Git, as Argo CD's `Force=true,Replace=true` (`kubectl replace
    /// --force`). Refused in an Application's own list ([`unsupported_app_option`]) and not read from
    /// an object's annotation: it is a one-off request, not a standing policy.
    pub force: bool,
}

impl Default for SyncOptions {
    fn default() -> Self {
        Self {
            prune: true,
            delete: true,
            prune_last: false,
            replace: false,
            apply_out_of_sync_only: true,
            create_namespace: false,
            force: false,
        }
    }
}

impl SyncOptions {
    /// Parse a list of options (each entry may itself be comma-separated).
    pub fn parse<I>(options: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let mut parsed = Self::default();
        for entry in options {
            for word in entry.as_ref().split(',') {
                parsed.set(word.trim());
            }
        }
        parsed
    }

    /// The options of an object's `sync-options` annotation (the defaults without one). `Force=true`
    /// is not read there (see [`SyncOptions::force`]).
    pub fn of_object(obj: &Value) -> Self {
        Self {
            force: false,
            ..Self::parse(capstan_kube::annotations::get(obj, labels::SYNC_OPTIONS))
        }
    }

    fn set(&mut self, word: &str) {
        let is = |spelling: &str| word.eq_ignore_ascii_case(spelling);
        if is("Prune=false") {
            self.prune = false;
        } else if is("Delete=false") {
            self.delete = false;
        } else if is("PruneLast=true") {
            self.prune_last = true;
        } else if is("Replace=true") {
            self.replace = true;
        } else if is("ApplyOutOfSyncOnly=false") {
            self.apply_out_of_sync_only = false;
        } else if is("CreateNamespace=true") {
            self.create_namespace = true;
        } else if is("Force=true") {
            self.force = true;
        }
    }
}

/// Why `word`, an entry of an Application's `syncPolicy.syncOptions`, cannot be honoured (`None`: it
/// is, or it asks for what Capstan always does). Argo CD's options that Capstan has no equivalent
/// for, or only as an object annotation, are refused by name.
pub fn unsupported_app_option(word: &str) -> Option<&'static str> {
    let word = word.trim();
    if word.is_empty() {
        return None;
    }
    let Some((name, value)) = word.split_once('=') else {
        return Some("an option is written Name=value");
    };
    let (name, value) = (name.trim().to_ascii_lowercase(), value.trim().to_ascii_lowercase());
    let bool_value = matches!(value.as_str(), "true" | "false");
    match (name.as_str(), value.as_str()) {
        ("createnamespace" | "prunelast" | "applyoutofsynconly", _) if bool_value => None,
        // Capstan always applies server-side and validates with the API server.
        ("serversideapply" | "validate", "true") => None,
        ("serversideapply", _) => Some("Capstan always applies server-side"),
        ("validate", _) => Some("Capstan always has the API server validate what it applies"),
        // Capstan never takes over an object another Application tracks.
        ("failonsharedresource", "true") => None,
        ("failonsharedresource", _) => Some("Capstan never takes over an object another Application tracks"),
        ("replace" | "prune" | "delete", _) => Some("only as an object's capstan.dev/sync-options annotation"),
        // Deleting and recreating on every sync is no standing policy: one operation asks for it
        // (the `retry` action of a failed Job does).
        ("force", "false") => None,
        ("force", _) => Some("only in one operation's syncOptions (deletes and recreates the objects it applies)"),
        ("respectignoredifferences", _) => {
            Some("not supported: jsonPointers are compared only (managedFieldsManagers' fields are never applied)")
        }
        ("prunepropagationpolicy", "background") => None,
        ("prunepropagationpolicy", _) => Some("Capstan prunes with background propagation"),
        _ => Some("not a sync option Capstan supports"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_empty_list_means_the_defaults() {
        let none: [&str; 0] = [];
        assert_eq!(SyncOptions::parse(none), SyncOptions::default());
        let defaults = SyncOptions::default();
        assert!(defaults.prune && defaults.delete && defaults.apply_out_of_sync_only);
        assert!(!defaults.prune_last && !defaults.replace && !defaults.create_namespace);
    }

    #[test]
    fn each_option_is_read_in_the_spelling_that_changes_it() {
        let parsed = SyncOptions::parse([
            "Prune=false",
            "Delete=false",
            "PruneLast=true",
            "Replace=true",
            "ApplyOutOfSyncOnly=false",
            "CreateNamespace=true",
        ]);
        assert_eq!(
            parsed,
            SyncOptions {
                prune: false,
                delete: false,
                prune_last: true,
                replace: true,
                apply_out_of_sync_only: false,
                create_namespace: true,
                force: false,
            }
        );
        assert!(SyncOptions::parse(["force=TRUE"]).force);
        // The default spellings change nothing.
        let defaults = SyncOptions::parse(["Prune=true", "PruneLast=false", "ApplyOutOfSyncOnly=true"]);
        assert_eq!(defaults, SyncOptions::default());
    }

    #[test]
    fn entries_may_hold_several_words_in_any_case_and_unknown_words_are_ignored() {
        let parsed = SyncOptions::parse(vec![
            " prunelast=TRUE , Validate=false".to_string(),
            "ServerSideApply=true,createnamespace=true".to_string(),
        ]);
        assert!(parsed.prune_last && parsed.create_namespace);
        assert!(parsed.prune && !parsed.replace);
        // Words are trimmed, but not inside: `PruneLast = true` is not an option.
        assert!(!SyncOptions::parse(["PruneLast = true"]).prune_last);
        // The spelling that changes a default wins wherever it appears.
        assert!(SyncOptions::parse(["PruneLast=true", "PruneLast=false"]).prune_last);
        for fine in [
            "CreateNamespace=true",
            "PruneLast=false",
            "applyOutOfSyncOnly=true",
            "ServerSideApply=true",
            "Validate=true",
            "FailOnSharedResource=true",
            "PrunePropagationPolicy=background",
            "Force=false",
        ] {
            assert_eq!(unsupported_app_option(fine), None, "{fine}");
        }
        for refused in [
            "Validate=false",
            "ServerSideApply=false",
            "Replace=true",
            "Prune=false",
            "RespectIgnoreDifferences=true",
            "PrunePropagationPolicy=foreground",
            "SkipDryRunOnMissingResource=true",
            "Force=true",
            "CreateNamespace=yes",
            "Frobnicate",
        ] {
            assert!(unsupported_app_option(refused).is_some(), "{refused}");
        }
    }

    #[test]
    fn objects_give_them_in_either_annotation_spelling() {
        let obj = |annotations: Value| json!({"metadata": {"name": "x", "annotations": annotations}});
        let capstan = SyncOptions::of_object(&obj(json!({"capstan.dev/sync-options": "Prune=false, Replace=true"})));
        assert!(!capstan.prune && capstan.replace);
        let argo = SyncOptions::of_object(&obj(json!({"argocd.argoproj.io/sync-options": "Delete=false"})));
        assert!(!argo.delete && argo.prune);
        let forced = SyncOptions::of_object(&obj(json!({"capstan.dev/sync-options": "Force=true,Replace=true"})));
        assert!(forced.replace && !forced.force, "Force is an operation's option only");
        assert_eq!(SyncOptions::of_object(&json!({"metadata": {}})), SyncOptions::default());
    }
}

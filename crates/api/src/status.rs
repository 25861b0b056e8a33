//! The words of Capstan's status vocabulary, as types: an object's or an Application's sync state
//! ([`SyncCode`]), health ([`HealthCode`]), what a sync did to one object ([`ResultCode`]), the
//! types of an Application's conditions ([`ConditionType`]), and for ApplicationSets the types of
//! their conditions ([`ApplicationSetConditionType`]) and where each generated Application stands in
//! a RollingSync ([`RolloutStatus`]), and whether a destination cluster was reached
//! ([`ConnectionStatus`]). Operation phases are [`crate::operation::OperationPhase`].
//!
//! Each word is spelt once, here, exactly as it appears in the JSON (Argo CD's spelling wherever the
//! concept is Argo CD's): `serde` reads and writes that spelling, and `schemars` lists the closed
//! words ([`SyncCode`], [`HealthCode`], [`ConnectionStatus`]) as the field's `enum` in the CRDs, so
//! the API server refuses any other value there; the open ones (below) are described, not enumerated. Every other crate compares
//! and builds these types, never the strings (`scripts/vocabulary-check.py`, run by `make lint`,
//! checks that no Rust file outside this crate compares a string literal of this vocabulary).
//!
//! # Words this version does not know
//!
//! Status is read from the cluster, where it may have been written by another version of Capstan
//! (a newer one during a rolling upgrade, an older one after a rollback) or by hand. Reading must not
//! fail: one Application that cannot be deserialised would break every LIST and watch of
//! Applications, and with them the controller, the server and the CLI. So every type here reads an
//! unknown word instead of refusing it:
//! - [`SyncCode`], [`HealthCode`] and [`ConnectionStatus`] read it as their own `Unknown`, which is one of their words (the
//!   state is then, honestly, unknown to this version) and which the schema of every version allows,
//!   so writing the status back is accepted.
//! - the others ([`ResultCode`], [`ConditionType`], …) keep the word as it was written (`Other`), so that writing
//!   the status back (merge patches of the whole status) sends the same word the other version
//!   wrote, which every CRD accepts (open words are not enumerated). Nothing in this version acts on an `Other`: it is
//!   shown as written.

use std::borrow::Cow;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Implements `ALL`, `as_str`, `Display` and `FromStr` for a unit-variant enum whose variants are
/// spelt as given.
macro_rules! spelt {
    ($name:ident, $error:ident { $($variant:ident => $text:literal,)* }) => {
        impl $name {
            /// Every word, in declaration order.
            pub const ALL: [$name; [$($name::$variant),*].len()] = [$($name::$variant),*];

            /// The spelling in the API.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }

            /// The word spelt `text` (exactly, case-sensitive), if there is one.
            pub fn parse(text: &str) -> Option<$name> {
                $name::ALL.into_iter().find(|w| w.as_str() == text)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = $error;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                $name::parse(text).ok_or_else(|| $error(text.to_string()))
            }
        }
    };
}

/// Whether the live state of an object (or of every object of an Application) equals Git.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum SyncCode {
    /// Live equals desired.
    Synced,
    /// Live differs, is missing, or should be pruned.
    OutOfSync,
    /// Not compared (yet), or written by another version in a word this one does not know.
    #[default]
    #[serde(other)]
    Unknown,
}

/// A word that is none of [`SyncCode`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown sync status {0:?}")]
pub struct UnknownSyncCode(pub String);

spelt!(SyncCode, UnknownSyncCode {
    Synced => "Synced",
    OutOfSync => "OutOfSync",
    Unknown => "Unknown",
});

/// The health of an object or an Application, from best to worst: Healthy, Suspended, Progressing,
/// Missing, Degraded, Unknown (the order of [`HealthCode::ALL`]). The same words Argo CD uses.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum HealthCode {
    /// The object is fully available.
    Healthy,
    /// The object is deliberately paused or suspended (a paused Deployment, a suspended CronJob).
    Suspended,
    /// The object is not healthy yet but is still expected to get there.
    Progressing,
    /// The object does not exist in the cluster.
    Missing,
    /// The object failed or cannot reach a healthy state without intervention.
    Degraded,
    /// Health could not be determined (or was written by another version in a word this one does
    /// not know).
    #[default]
    #[serde(other)]
    Unknown,
}

/// A word that is none of [`HealthCode`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown health status {0:?}")]
pub struct UnknownHealthCode(pub String);

spelt!(HealthCode, UnknownHealthCode {
    Healthy => "Healthy",
    Suspended => "Suspended",
    Progressing => "Progressing",
    Missing => "Missing",
    Degraded => "Degraded",
    Unknown => "Unknown",
});

/// Whether the controller last reached a destination cluster (stored per cluster in the
/// `capstan-cluster-status` ConfigMap, shown by `capstan cluster list` and the web UI), as Argo CD's
/// `ConnectionStatus`.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ConnectionStatus {
    /// The last probe succeeded.
    Successful,
    /// The last probe failed: Applications of the cluster are not compared.
    Failed,
    /// Not probed yet (or a word this version does not know).
    #[default]
    #[serde(other)]
    Unknown,
}

/// A word that is none of [`ConnectionStatus`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown connection status {0:?}")]
pub struct UnknownConnectionStatus(pub String);

spelt!(ConnectionStatus, UnknownConnectionStatus {
    Successful => "Successful",
    Failed => "Failed",
    Unknown => "Unknown",
});

/// Implements serde and schemars for an enum of known words plus `Other(String)`: the known words
/// are read and written as spelt, any other word is kept as written, and the schema is a string whose
/// description names the known words (no `enum`, see `json_schema` below).
macro_rules! open_words {
    ($name:ident, $kind:ident, $schema_name:literal { $($variant:ident => $text:literal,)* }) => {
        /// The known words (every variant but `Other`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        enum $kind {
            $($variant,)*
        }

        impl $kind {
            const ALL: [$kind; [$($kind::$variant),*].len()] = [$($kind::$variant),*];

            fn as_str(self) -> &'static str {
                match self {
                    $($kind::$variant => $text,)*
                }
            }

            fn word(self) -> $name {
                match self {
                    $($kind::$variant => $name::$variant,)*
                }
            }
        }

        impl $name {
            /// Every word Capstan writes, in declaration order (not `Other`).
            pub fn all() -> impl Iterator<Item = $name> {
                $kind::ALL.into_iter().map($kind::word)
            }

            /// The spelling in the API (an `Other` word as it was written).
            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$variant => $text,)*
                    $name::Other(text) => text,
                }
            }

            /// The word spelt `text`: a known one, else `Other(text)`.
            pub fn parse(text: &str) -> $name {
                $kind::ALL
                    .into_iter()
                    .find(|k| k.as_str() == text)
                    .map_or_else(|| $name::Other(text.to_string()), $kind::word)
            }

            /// Whether this is a word this version knows (not `Other`).
            pub fn is_known(&self) -> bool {
                !matches!(self, $name::Other(_))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = Cow::<'de, str>::deserialize(deserializer)?;
                Ok($name::parse(&text))
            }
        }

        impl JsonSchema for $name {
            fn schema_name() -> Cow<'static, str> {
                $schema_name.into()
            }

            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                // No `enum`: a word another version wrote is kept and written back (`Other`), and
                // the CRD installed may be an older one that does not list it (after a rollback);
                // an `enum` there would make the API server refuse every later status write.
                json_schema!({
                    "type": "string",
                    "description": concat!("One of: ", $($text, " ",)* "(or a word another version of Capstan writes)."),
                })
            }
        }
    };
}

/// What a sync did to one object (`status.operationState.resources[].status`), as Argo CD's
/// `ResultCode`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ResultCode {
    /// Applied (or, for a hook, completed successfully).
    Synced,
    /// The API server refused it, or the hook failed.
    SyncFailed,
    /// Deleted (it is no longer in Git).
    Pruned,
    /// Not deleted: `Prune=false`, or someone else owns it now.
    PruneSkipped,
    /// A hook not run: the operation is a dry run.
    Skipped,
    /// A word this version does not know (written by another version), kept as written.
    Other(String),
}

open_words!(ResultCode, KnownResultCode, "ResultCode" {
    Synced => "Synced",
    SyncFailed => "SyncFailed",
    Pruned => "Pruned",
    PruneSkipped => "PruneSkipped",
    Skipped => "Skipped",
});

/// The type of an Application's condition (`status.conditions[].type`): errors (`…Error`,
/// `ProjectViolation`) and warnings or waits a person should know about.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ConditionType {
    /// The comparison with Git failed (render, repository or destination error): the Application can
    /// become neither Synced nor Healthy until it is fixed.
    ComparisonError,
    /// The spec (or an operation request) is invalid or uses what Capstan refuses.
    InvalidSpecError,
    /// An object is tracked by another Application.
    SharedResourceWarning,
    /// The custom health rules of `capstan-cm` cannot be used.
    HealthRuleError,
    /// The project forbids objects the source renders.
    ProjectViolation,
    /// A dependency (`spec.dependsOn`) is missing, or the dependencies form a cycle.
    DependencyError,
    /// A sync waits for dependencies to become Synced and Healthy.
    DependencyWaiting,
    /// Deletion waits for the Applications that depend on this one to be deleted first.
    DeletionWaiting,
    /// A sync window of the project cannot be read.
    SyncWindowError,
    /// A sync window holds automated sync.
    SyncWindowBlocked,
    /// A policy denied the last sync: nothing of it was applied.
    PolicyDenied,
    /// A policy warned about objects of the last sync, which went on.
    PolicyWarning,
    /// The last sync would have pruned more than the project's deletion budget allows: it waits
    /// for a person to confirm.
    DeletionBudgetExceeded,
    /// `spec.syncPolicy.autoRevert` cannot act (the source, the project, the credentials, the
    /// history), or an automatic revert failed: the Application is not rolled back automatically.
    AutoRevertError,
    /// A type this version does not know (written by another version), kept as written.
    Other(String),
}

open_words!(ConditionType, KnownConditionType, "ConditionType" {
    ComparisonError => "ComparisonError",
    InvalidSpecError => "InvalidSpecError",
    SharedResourceWarning => "SharedResourceWarning",
    HealthRuleError => "HealthRuleError",
    ProjectViolation => "ProjectViolation",
    DependencyError => "DependencyError",
    DependencyWaiting => "DependencyWaiting",
    DeletionWaiting => "DeletionWaiting",
    SyncWindowError => "SyncWindowError",
    SyncWindowBlocked => "SyncWindowBlocked",
    PolicyDenied => "PolicyDenied",
    PolicyWarning => "PolicyWarning",
    DeletionBudgetExceeded => "DeletionBudgetExceeded",
    AutoRevertError => "AutoRevertError",
});

impl ConditionType {
    /// The types a failed comparison with Git is reported as; a pass that compares sets or clears
    /// them together.
    pub fn is_comparison(&self) -> bool {
        matches!(self, ConditionType::ComparisonError | ConditionType::InvalidSpecError)
    }
}

/// Where one Application generated by an ApplicationSet stands in its RollingSync
/// (`status.applicationStatus[].status`), as Argo CD spells it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum RolloutStatus {
    /// Out of sync, its step not reached (or matched by no step); also what a generated Application
    /// is before the rollout has looked at it (the default).
    #[default]
    Waiting,
    /// Its step is reached; waiting for a `maxUpdate` slot (or held).
    Pending,
    /// A sync was requested or is running.
    Progressing,
    /// Synced and Healthy.
    Healthy,
    /// Its sync failed, or it became Degraded.
    Failed,
    /// A word this version does not know (written by another version), kept as written.
    Other(String),
}

open_words!(RolloutStatus, KnownRolloutStatus, "RolloutStatus" {
    Waiting => "Waiting",
    Pending => "Pending",
    Progressing => "Progressing",
    Healthy => "Healthy",
    Failed => "Failed",
});

/// The type of an ApplicationSet's condition (`status.conditions[].type`), as Argo CD spells it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ApplicationSetConditionType {
    /// Generating or applying the Applications failed (`True`), or not (`False`).
    ErrorOccurred,
    /// The generators produced their parameters (`True`), or failed to.
    ParametersGenerated,
    /// Every generated Application is as the template says.
    ResourcesUpToDate,
    /// A RollingSync is in progress (`True`) or complete/stopped (`False`).
    RolloutProgressing,
    /// A pass would delete more Applications than `syncPolicy.deletionBudget` allows: it deleted
    /// none and waits for the annotation `capstan.dev/allow-deletions: "true"`.
    DeletionBudgetExceeded,
    /// A type this version does not know (written by another version), kept as written.
    Other(String),
}

open_words!(ApplicationSetConditionType, KnownApplicationSetConditionType, "ApplicationSetConditionType" {
    ErrorOccurred => "ErrorOccurred",
    ParametersGenerated => "ParametersGenerated",
    ResourcesUpToDate => "ResourcesUpToDate",
    RolloutProgressing => "RolloutProgressing",
    DeletionBudgetExceeded => "DeletionBudgetExceeded",
});

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The words a schema allows: its `enum`, or (documented variants) the `const`s of its `oneOf`.
    fn enum_of<T: JsonSchema>() -> Vec<String> {
        let schema = serde_json::to_value(schemars::schema_for!(T)).expect("schema");
        if let Some(words) = schema["enum"].as_array() {
            return words.iter().filter_map(|w| w.as_str().map(String::from)).collect();
        }
        let one_of = schema["oneOf"].as_array().expect("an enum or a oneOf");
        one_of
            .iter()
            .flat_map(|v| match v["enum"].as_array() {
                Some(words) => words.iter().filter_map(|w| w.as_str().map(String::from)).collect(),
                None => v["const"].as_str().map(String::from).into_iter().collect::<Vec<_>>(),
            })
            .collect()
    }

    #[test]
    fn closed_words_keep_their_api_spelling_and_read_unknown_words_as_unknown() {
        for code in SyncCode::ALL {
            assert_eq!(serde_json::to_value(code).expect("json"), json!(code.as_str()));
            assert_eq!(
                serde_json::from_value::<SyncCode>(json!(code.as_str())).expect("read"),
                code
            );
            assert_eq!(code.as_str().parse::<SyncCode>(), Ok(code));
            assert_eq!(code.to_string(), code.as_str());
        }
        for code in HealthCode::ALL {
            assert_eq!(serde_json::to_value(code).expect("json"), json!(code.as_str()));
            assert_eq!(
                serde_json::from_value::<HealthCode>(json!(code.as_str())).expect("read"),
                code
            );
            assert_eq!(HealthCode::parse(code.as_str()), Some(code));
        }
        assert_eq!(
            serde_json::from_value::<SyncCode>(json!("Drifting")).expect("tolerant"),
            SyncCode::Unknown
        );
        assert_eq!(
            serde_json::from_value::<HealthCode>(json!("Sleepy")).expect("tolerant"),
            HealthCode::Unknown
        );
        assert!("synced".parse::<SyncCode>().is_err(), "case-sensitive");
        assert_eq!(HealthCode::parse("healthy"), None);
        assert_eq!(enum_of::<SyncCode>(), ["Synced", "OutOfSync", "Unknown"]);
        assert_eq!(
            enum_of::<HealthCode>(),
            ["Healthy", "Suspended", "Progressing", "Missing", "Degraded", "Unknown"]
        );
    }

    #[test]
    fn open_words_keep_their_api_spelling_and_keep_unknown_words_as_written() {
        for code in ResultCode::all() {
            let json = serde_json::to_value(&code).expect("json");
            assert_eq!(json, json!(code.as_str()));
            assert_eq!(serde_json::from_value::<ResultCode>(json).expect("read"), code);
            assert!(code.is_known());
        }
        for kind in ConditionType::all() {
            assert_eq!(ConditionType::parse(kind.as_str()), kind);
            assert_eq!(kind.to_string(), kind.as_str());
        }
        let newer: ConditionType = serde_json::from_value(json!("OrphanedResourceWarning")).expect("tolerant");
        assert_eq!(newer, ConditionType::Other("OrphanedResourceWarning".into()));
        assert!(!newer.is_known());
        assert_eq!(
            serde_json::to_value(&newer).expect("json"),
            json!("OrphanedResourceWarning")
        );
        // Open words are not constrained by the schema (an older CRD must accept a newer word).
        let schema = serde_json::to_value(schemars::schema_for!(ResultCode)).expect("schema");
        assert!(schema.get("enum").is_none(), "{schema}");
        let described = schema["description"].as_str().unwrap_or_default();
        assert!(ResultCode::all().all(|c| described.contains(c.as_str())), "{described}");
        assert!(
            serde_json::to_value(schemars::schema_for!(ConditionType))
                .expect("schema")
                .get("enum")
                .is_none()
        );
        assert!(ConditionType::ComparisonError.is_comparison() && !ConditionType::ProjectViolation.is_comparison());
    }
}

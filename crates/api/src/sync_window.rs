//! Sync windows of an AppProject (`spec.syncWindows[]`): when its Applications may sync, with Argo
//! CD's field names and meaning. The rules that decide whether a window is active and whether a sync
//! may run are in `capstan-project`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Whether a window allows syncs while it is active, or denies them.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SyncWindowKind {
    /// Syncs may run only while an allow window is active (when the Application matches any).
    #[default]
    Allow,
    /// No sync runs while the window is active (a deny window wins over an allow window).
    Deny,
}

impl SyncWindowKind {
    /// `allow` or `deny`, as written.
    pub fn as_str(self) -> &'static str {
        match self {
            SyncWindowKind::Allow => "allow",
            SyncWindowKind::Deny => "deny",
        }
    }
}

/// One sync window (`AppProject.spec.syncWindows[]`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncWindow {
    /// `allow` or `deny`.
    #[serde(default)]
    pub kind: SyncWindowKind,
    /// When the window opens: a cron schedule of five fields (minute hour day-of-month month
    /// day-of-week), in `timeZone`.
    pub schedule: String,
    /// How long the window stays open after each start (`1h`, `30m`, `1h30m`).
    pub duration: String,
    /// Globs on the names of the Applications the window applies to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applications: Vec<String>,
    /// Globs on the destination namespaces the window applies to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Globs on the destination clusters (server URL or name) the window applies to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,
    /// Whether a manual sync may run while this window blocks syncs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub manual_sync: bool,
    /// IANA time zone the schedule is read in (`Europe/Berlin`); UTC when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub time_zone: String,
    /// The Application must match every list that is set (applications, namespaces, clusters)
    /// instead of any one of them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub and_operator: bool,
    /// What the window is for.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
}

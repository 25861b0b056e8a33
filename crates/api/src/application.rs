//! The `Application` resource: what to deploy (a path in a Git repository at a revision, or a chart from a
//! Helm repository or an OCI registry, or several such sources), where (a cluster and namespace), how
//! (sync policy), and the status the controller reports.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::operation::{OPERATION_ANNOTATION, Operation, OperationPhase};
pub use crate::status::{ConditionType, HealthCode, ResultCode, SyncCode};

/// An Application: a source in Git rendered and kept in sync with a destination.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "capstan.dev",
    version = "v1alpha1",
    kind = "Application",
    plural = "applications",
    shortname = "app",
    shortname = "apps",
    namespaced,
    status = "ApplicationStatus",
    printcolumn = r#"{"name":"Sync","type":"string","jsonPath":".status.sync.status"}"#,
    printcolumn = r#"{"name":"Health","type":"string","jsonPath":".status.health.status"}"#,
    printcolumn = r#"{"name":"Revision","type":"string","jsonPath":".status.sync.revision","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSpec {
    /// Where the desired state comes from (one source; see `sources` for several).
    #[serde(default, skip_serializing_if = "ApplicationSource::is_unset")]
    pub source: ApplicationSource,
    /// Several sources rendered together into one Application (Argo CD's multi-source Applications).
    /// When set, `source` is ignored. A source with a `ref` and no `path` or `chart` is not rendered: its
    /// files are only read through `$ref/…` Helm value files of the other sources.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<ApplicationSource>,
    /// The cluster and namespace to deploy to.
    pub destination: ApplicationDestination,
    /// The AppProject this Application belongs to (`default` if empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub project: String,
    /// When and how to sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_policy: Option<SyncPolicy>,
    /// Differences to ignore when comparing desired and live state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore_differences: Vec<ResourceIgnoreDifferences>,
    /// How many entries `status.history` keeps (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_history_limit: Option<i64>,
    /// Decrypt SOPS-encrypted files of the sources at render time (Flux's `decryption`), with the age
    /// identities of a Secret in Capstan's namespace that the project permits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decryption: Option<Decryption>,
    /// Applications (in the same namespace) that must be Synced and Healthy at their own current
    /// target revision before this one starts a sync; deleted only after this one is gone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<ApplicationDependency>,
}

/// An Application another one depends on (`spec.dependsOn[]`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ApplicationDependency {
    /// Its name, in the dependent Application's namespace.
    pub name: String,
}

/// How encrypted files of the sources are decrypted.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Decryption {
    /// The format of the encrypted files: `sops`.
    #[serde(default)]
    pub provider: DecryptionProvider,
    /// The Secret (in Capstan's namespace, labelled `capstan.dev/secret-type: decryption`) whose keys
    /// ending in `.agekey` hold age identities (`AGE-SECRET-KEY-1…`). Its name must be listed in the
    /// project's `decryptionSecrets`.
    pub secret_ref: LocalSecretReference,
}

/// The decryption providers Capstan knows.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DecryptionProvider {
    /// SOPS 3.x files encrypted for age recipients.
    #[default]
    Sops,
}

/// A Secret named in Capstan's own namespace.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct LocalSecretReference {
    /// The Secret's name.
    pub name: String,
}

impl ApplicationSpec {
    /// Whether a source that renders no object is accepted ("empty on purpose"):
    /// `syncPolicy.automated.allowEmpty`.
    pub fn allows_empty(&self) -> bool {
        self.sync_policy
            .as_ref()
            .and_then(|p| p.automated.as_ref())
            .is_some_and(|a| a.allow_empty)
    }
}

/// A path in a Git repository at a revision, or a chart in a Helm repository or OCI registry at a
/// version, and how to render it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSource {
    /// URL of the Git repository (`https://`, `ssh://`, `git@host:path`, `git://`, `file://`); with
    /// `chart`, of the Helm repository (`https://`, `http://`) or the OCI registry namespace
    /// (`oci://registry/path`).
    #[serde(rename = "repoURL")]
    pub repo_url: String,
    /// Git: branch, tag, commit SHA (full or short) or `HEAD` (the default). Chart: an exact version or
    /// a semantic-version constraint (`1.2.*`, `>=1.0.0 <2.0.0`, `^3.1`); empty means the latest
    /// non-pre-release version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub target_revision: String,
    /// Directory inside the repository (default: its root). Not used with `chart`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// The chart's name in the Helm repository or OCI registry named by `repoURL`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub chart: String,
    /// In `sources`: a name other sources use to read this one's files, as `$NAME/path` in Helm
    /// `valueFiles`.
    #[serde(default, rename = "ref", skip_serializing_if = "String::is_empty")]
    pub ref_name: String,
    /// In `sources`: a name shown for this source (optional).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Options for plain directories of YAML/JSON manifests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<ApplicationSourceDirectory>,
    /// Options for Helm charts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helm: Option<ApplicationSourceHelm>,
    /// Options for Kustomize overlays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kustomize: Option<ApplicationSourceKustomize>,
    /// Argo CD's config management plugin. Capstan runs no plugins: the field is accepted (so that a
    /// parent that renders such an Application still syncs) and the Application is refused with an
    /// `InvalidSpecError` naming it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub plugin: Option<serde_json::Value>,
}

impl ApplicationSource {
    /// Whether nothing is set (an Application with `sources` leaves `source` out).
    pub fn is_unset(&self) -> bool {
        self == &ApplicationSource::default()
    }

    /// Whether this source is a chart from a Helm repository or OCI registry rather than Git.
    pub fn is_chart(&self) -> bool {
        !self.chart.trim().is_empty()
    }

    /// Whether this source is rendered: every source but a `ref` source without a `path` or `chart`.
    pub fn is_rendered(&self) -> bool {
        self.ref_name.is_empty() || !self.path.is_empty() || self.is_chart()
    }
}

impl ApplicationSpec {
    /// The Application's sources: `sources` when set, otherwise the one `source`.
    pub fn sources(&self) -> &[ApplicationSource] {
        if self.sources.is_empty() {
            std::slice::from_ref(&self.source)
        } else {
            &self.sources
        }
    }

    /// Whether the Application has several sources (`spec.sources`), whose revisions are reported as
    /// lists (`status.sync.revisions`, `history[].revisions`).
    pub fn is_multi_source(&self) -> bool {
        !self.sources.is_empty()
    }
}

/// Options for rendering a directory of manifests.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSourceDirectory {
    /// Read subdirectories too.
    #[serde(default)]
    pub recurse: bool,
    /// Glob of files to include (e.g. `*.yaml` or `{a.yaml,b.yaml}`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub include: String,
    /// Glob of files to exclude.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub exclude: String,
    /// Options for the directory's `.jsonnet` files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jsonnet: Option<ApplicationSourceJsonnet>,
}

/// Options for evaluating a directory's `.jsonnet` files, as Argo CD's `directory.jsonnet`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSourceJsonnet {
    /// Top-level arguments passed to each file that evaluates to a function.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tlas: Vec<JsonnetVar>,
    /// External variables, read with `std.extVar(name)`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ext_vars: Vec<JsonnetVar>,
    /// Library search paths for `import`, relative to the repository root (e.g. `vendor`); they may
    /// not leave the repository.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub libs: Vec<String>,
}

/// One Jsonnet top-level argument or external variable.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JsonnetVar {
    /// Name of the argument or variable.
    pub name: String,
    /// Its value: a string, or Jsonnet code when `code` is set.
    #[serde(default)]
    pub value: String,
    /// Evaluate `value` as Jsonnet code instead of passing it as a string.
    #[serde(default)]
    pub code: bool,
}

/// Options for rendering a Helm chart with `helm template`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSourceHelm {
    /// Values files, relative to the chart (they may not leave the repository).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub value_files: Vec<String>,
    /// Values as a YAML string.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub values: String,
    /// Values as an object (takes precedence over `values`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub values_object: Option<serde_json::Value>,
    /// `--set` style parameters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parameters: Vec<HelmParameter>,
    /// Release name (default: the Application's name).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub release_name: String,
}

/// One `--set` (or `--set-string`) parameter.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HelmParameter {
    /// Dotted key, as for `helm --set`.
    pub name: String,
    /// Value.
    #[serde(default)]
    pub value: String,
    /// Pass as a string (`--set-string`).
    #[serde(default)]
    pub force_string: bool,
}

/// Options for rendering a Kustomize overlay with `kustomize build`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSourceKustomize {
    /// Prefix added to the names of all resources.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name_prefix: String,
    /// Suffix added to the names of all resources.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name_suffix: String,
    /// Image overrides (`name=newName:tag`, `name:tag`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,
    /// Labels added to all resources.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub common_labels: BTreeMap<String, String>,
    /// Annotations added to all resources.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub common_annotations: BTreeMap<String, String>,
    /// Namespace set on all resources.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

/// The cluster (by `server` URL or by `name`) and namespace to deploy to.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationDestination {
    /// API server URL of the cluster (`https://kubernetes.default.svc` is the cluster Capstan runs in).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub server: String,
    /// Name of a registered cluster (alternative to `server`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Namespace given to namespaced objects that do not name one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

/// When and how an Application is synced.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncPolicy {
    /// Sync automatically when Git changes; absent means manual sync only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub automated: Option<SyncPolicyAutomated>,
    /// Application-wide sync options (`CreateNamespace=true`, `PruneLast=true`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sync_options: Vec<String>,
    /// Retries of a failed sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryStrategy>,
    /// How long one sync operation may run, as a duration (`10m`, `90s`; a bare number is seconds).
    /// When it is exceeded the operation is stopped between requests and fails with a message saying
    /// it timed out (an automated sync is then retried per `retry`). Empty: no limit beyond each
    /// wave's and hook's timeout (the controller's `--wave-timeout`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sync_timeout: String,
    /// Roll back automatically, by one revert commit in Git, when a sync leaves the Application
    /// Degraded for longer than a set time (Flux's `upgrade.remediation`, done the GitOps way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_revert: Option<AutoRevert>,
}

/// Automatic rollback by Git revert (`spec.syncPolicy.autoRevert`): when the revision a sync
/// deployed stays Degraded for longer than `degradedFor` (and nothing newer was synced meanwhile),
/// the controller pushes one revert commit back to the previous history entry's revision, once per
/// revision, authored by Capstan.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoRevert {
    /// How long the Application must stay Degraded at the revision a sync deployed before it is
    /// reverted, as a duration (`10m`, `90s`; a bare number is seconds; not zero).
    pub degraded_for: String,
}

/// Automated sync behaviour.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncPolicyAutomated {
    /// Delete tracked objects that are no longer in Git.
    #[serde(default)]
    pub prune: bool,
    /// Revert changes made to tracked objects in the cluster.
    #[serde(default)]
    pub self_heal: bool,
    /// Accept a source that renders no object at all ("empty on purpose"): without it such a render is
    /// a `ComparisonError` and nothing is pruned; with it an automated sync may prune everything.
    #[serde(default)]
    pub allow_empty: bool,
}

/// How often and how fast to retry a failed sync.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryStrategy {
    /// Maximum number of attempts (negative: unlimited).
    #[serde(default)]
    pub limit: i64,
    /// Backoff between attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<Backoff>,
}

/// Exponential backoff between retries.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Backoff {
    /// First delay, as a duration string (`5s`, `1m`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub duration: String,
    /// Multiplier applied after each attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factor: Option<i64>,
    /// Upper bound of a delay.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub max_duration: String,
}

/// A difference to ignore on matching objects.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceIgnoreDifferences {
    /// API group of the objects (empty for the core group).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// Kind of the objects.
    pub kind: String,
    /// Name of one object (all objects of the kind if empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Namespace of the objects (all if empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// RFC 6901 JSON pointers of fields to ignore.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub json_pointers: Vec<String>,
    /// Field managers (`kube-controller-manager` for an HPA) whose fields, per the live object's
    /// `managedFields`, are ignored on both sides.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub managed_fields_managers: Vec<String>,
    /// jq path expressions of fields to ignore. Not supported yet: an Application that sets it is
    /// refused with an `InvalidSpecError` (never accepted and ignored).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jq_path_expressions: Vec<String>,
}

/// What the controller observed and did.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationStatus {
    /// Whether the live state equals Git, and at which revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<SyncStatus>,
    /// Aggregated health of the managed objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthStatus>,
    /// Every object the Application manages, with its sync and health.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceStatus>,
    /// The current or last sync operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_state: Option<OperationState>,
    /// Past successful syncs, newest last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<RevisionHistory>,
    /// Errors and warnings a person should act on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ApplicationCondition>,
    /// When the Application was last compared with Git (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconciled_at: Option<String>,
}

/// Sync status: `Synced`, `OutOfSync` or `Unknown`, and the revision compared against.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncStatus {
    /// `Synced`, `OutOfSync` or `Unknown`.
    pub status: SyncCode,
    /// The resolved commit SHA (or chart version) of a single-source Application.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub revision: String,
    /// The resolved revision of each of `spec.sources`, in order (multi-source Applications).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revisions: Vec<String>,
}

/// Health: `Healthy`, `Progressing`, `Degraded`, `Suspended`, `Missing` or `Unknown`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthStatus {
    /// The health status.
    pub status: HealthCode,
    /// Why, when not Healthy.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// One managed object.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceStatus {
    /// API group (empty for the core group).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// API version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Namespace (empty for cluster-scoped objects).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `Synced`, `OutOfSync` or `Unknown`.
    #[serde(default)]
    pub status: SyncCode,
    /// Health of the object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthStatus>,
    /// The object's sync wave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_wave: Option<i64>,
    /// Whether the object is a hook.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hook: bool,
    /// Whether sync would delete it (it is no longer in Git).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requires_pruning: bool,
}

/// The current or last sync operation.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperationState {
    /// `Running`, `Succeeded`, `Failed`, `Error` or `Terminating`.
    pub phase: crate::operation::OperationPhase,
    /// What is happening or what went wrong.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The revision being synced (single source).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub revision: String,
    /// The revision of each source being synced (multi-source Applications).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revisions: Vec<String>,
    /// When the operation started (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub started_at: String,
    /// When the operation finished (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// How many attempts were made.
    #[serde(default)]
    pub retry_count: i64,
    /// The result of each object in the operation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceResult>,
    /// The operation being run, so a restarted controller can resume it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<crate::operation::Operation>,
    /// Who stopped the operation, when a terminate request (`capstan.dev/terminate`) ended it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminated_by: Option<String>,
}

/// What a sync did to one object.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceResult {
    /// API group.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// API version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `Synced`, `SyncFailed`, `Pruned`, `PruneSkipped`.
    pub status: ResultCode,
    /// Message from the API server or the hook.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Hook phase or `Sync`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sync_phase: String,
    /// The object's wave.
    #[serde(default)]
    pub sync_wave: i64,
    /// Whether the object is a hook (a resumed operation does not run completed hooks again).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hook: bool,
}

/// One successful sync in the Application's history.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionHistory {
    /// Increasing identifier, used by rollback.
    pub id: i64,
    /// The commit SHA (or chart version) that was synced (single source).
    #[serde(default)]
    pub revision: String,
    /// When it was deployed (RFC 3339).
    pub deployed_at: String,
    /// The source as it was at the time (single source).
    #[serde(default, skip_serializing_if = "ApplicationSource::is_unset")]
    pub source: ApplicationSource,
    /// The revision of each source that was synced (multi-source Applications).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revisions: Vec<String>,
    /// The sources as they were at the time (multi-source Applications).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<ApplicationSource>,
}

/// An error or warning about the Application.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationCondition {
    /// e.g. `ComparisonError`, `SyncError`, `InvalidSpecError`, `SharedResourceWarning`.
    #[serde(rename = "type")]
    pub type_: ConditionType,
    /// What is wrong, and where.
    pub message: String,
    /// When it was first observed (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_transition_time: String,
}

/// Schema for free-form JSON objects (Helm `valuesObject`).
pub(crate) fn preserve_unknown_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// Why a new operation cannot be requested now (see [`Application::busy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Busy {
    /// An operation is running.
    #[error("another operation is already in progress")]
    Running,
    /// A request has been written and not yet taken up by the controller.
    #[error("another operation is already requested")]
    Requested,
}

/// Why a rollback is refused (see [`Application::rollback_entry`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RollbackRefused {
    /// Rollbacks and automated sync would undo each other (Argo CD refuses the same way).
    #[error(
        "rollback is not allowed while automated sync is enabled: disable syncPolicy.automated first, or roll back by a Git revert (capstan app rollback --revert, or \"Revert in Git\" in the web UI)"
    )]
    Automated,
    /// The rollback names no entry of the history.
    #[error("history entry {id} not found{}", known_ids(.known))]
    NoHistoryEntry {
        /// The entry asked for.
        id: i64,
        /// The entries there are.
        known: Vec<i64>,
    },
}

fn known_ids(known: &[i64]) -> String {
    if known.is_empty() {
        " (the history is empty: nothing has been synced yet)".into()
    } else {
        let ids: Vec<String> = known.iter().map(i64::to_string).collect();
        format!(" (entries: {})", ids.join(", "))
    }
}

/// How deleting an Application treats what it deployed.
impl Application {
    /// The finalizers to set before deleting the Application so that its objects are deleted too
    /// (`cascade`: Capstan's resources finalizer, as Argo CD's cascade) or left running; `None` when
    /// they are already so.
    pub fn finalizers_for_delete(&self, cascade: bool) -> Option<Vec<String>> {
        let current = self.metadata.finalizers.clone().unwrap_or_default();
        let mut wanted = current.clone();
        let has = wanted.iter().any(|f| f == crate::labels::RESOURCES_FINALIZER);
        if cascade && !has {
            wanted.push(crate::labels::RESOURCES_FINALIZER.into());
        } else if !cascade && has {
            wanted.retain(|f| f != crate::labels::RESOURCES_FINALIZER);
        }
        (wanted != current).then_some(wanted)
    }
}

/// What the operation annotation asks, and whether an operation runs.
impl Application {
    /// The request in the operation annotation, unless the operation in its status already handled it (an
    /// unparsable request counts as pending: the controller reports and removes it).
    pub fn pending_request(&self) -> Option<&str> {
        let raw = self.metadata.annotations.as_ref()?.get(OPERATION_ANNOTATION)?;
        (!self.handled(raw)).then_some(raw.as_str())
    }

    /// Whether the status records an operation that is still running.
    pub fn operation_running(&self) -> bool {
        self.status
            .as_ref()
            .and_then(|s| s.operation_state.as_ref())
            .is_some_and(|o| o.phase == OperationPhase::Running)
    }

    /// Why a new operation may not be requested now: one is running, or another request has not
    /// been taken up yet (a new request would silently replace it). `None` when idle.
    pub fn busy(&self) -> Option<Busy> {
        if self.operation_running() {
            Some(Busy::Running)
        } else if self.pending_request().is_some() {
            Some(Busy::Requested)
        } else {
            None
        }
    }

    /// What is wrong with the Application, in one line (empty when nothing is): its first
    /// condition (`TYPE: message`), else the message of its last operation if that failed, else why
    /// it is not Healthy. What `capstan app list` and the web UI's list show.
    pub fn status_message(&self) -> String {
        let Some(status) = &self.status else {
            return String::new();
        };
        let failed_operation = status
            .operation_state
            .as_ref()
            .filter(|o| o.phase.is_failed() && !o.message.is_empty());
        let unhealthy = status
            .health
            .as_ref()
            .filter(|h| h.status != HealthCode::Healthy && !h.message.is_empty());
        let message = if let Some(c) = status.conditions.iter().find(|c| !c.message.is_empty()) {
            format!("{}: {}", c.type_, c.message)
        } else if let Some(o) = failed_operation {
            o.message.clone()
        } else if let Some(h) = unhealthy {
            h.message.clone()
        } else {
            String::new()
        };
        message.lines().next().unwrap_or_default().trim().to_string()
    }

    /// Whether automated sync is enabled (`spec.syncPolicy.automated` is set).
    pub fn is_automated(&self) -> bool {
        self.spec.sync_policy.as_ref().is_some_and(|p| p.automated.is_some())
    }

    /// The entry of `history` (the Application's `status.history`, or the one the controller is
    /// writing) that a rollback to `id` returns to, or why that rollback is refused. Checked by the
    /// CLI and the HTTP server before they write the request, and by the controller again before
    /// it runs one (the spec may have changed in between).
    pub fn rollback_entry<'h>(
        &self,
        history: &'h [RevisionHistory],
        id: i64,
    ) -> Result<&'h RevisionHistory, RollbackRefused> {
        if self.is_automated() {
            return Err(RollbackRefused::Automated);
        }
        history
            .iter()
            .find(|h| h.id == id)
            .ok_or_else(|| RollbackRefused::NoHistoryEntry {
                id,
                known: history.iter().map(|h| h.id).collect(),
            })
    }

    /// Whether the request `raw` is the operation in its status.
    pub fn handled(&self, raw: &str) -> bool {
        let Ok(requested) = serde_json::from_str::<Operation>(raw) else {
            return false;
        };
        !requested.id.is_empty()
            && self
                .status
                .as_ref()
                .and_then(|s| s.operation_state.as_ref())
                .and_then(|o| o.operation.as_ref())
                .is_some_and(|o| o.id == requested.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deleting_sets_the_resources_finalizer_for_a_cascade_only() {
        let with = |finalizers: &[&str]| -> Application {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
                "metadata": {"name": "a", "namespace": "capstan", "finalizers": finalizers},
                "spec": {"source": {"repoURL": "file:///r", "path": "."}, "destination": {"namespace": "d"}}
            }))
            .expect("application")
        };
        let ours = crate::labels::RESOURCES_FINALIZER;
        assert_eq!(
            with(&["other"]).finalizers_for_delete(true),
            Some(vec!["other".to_string(), ours.to_string()])
        );
        assert_eq!(with(&[ours]).finalizers_for_delete(true), None, "already so");
        assert_eq!(
            with(&["other", ours]).finalizers_for_delete(false),
            Some(vec!["other".to_string()]),
            "others' finalizers are kept"
        );
        assert_eq!(with(&[]).finalizers_for_delete(false), None);
    }

    #[test]
    fn argo_cd_manifest_deserialises_with_changed_api_version() {
        let yaml = r#"
apiVersion: capstan.dev/v1alpha1
kind: Application
metadata: {name: guestbook, namespace: capstan}
spec:
  project: default
  source:
    repoURL: https://git.example/guestbook.git
    targetRevision: HEAD
    path: guestbook
    helm:
      valueFiles: [values-prod.yaml]
      parameters: [{name: image.tag, value: "1.2", forceString: true}]
      valuesObject: {replicas: 3}
  destination: {server: "https://kubernetes.default.svc", namespace: guestbook}
  syncPolicy:
    automated: {prune: true, selfHeal: true}
    syncOptions: [CreateNamespace=true]
    retry: {limit: 5, backoff: {duration: 5s, factor: 2, maxDuration: 3m}}
  ignoreDifferences:
  - {group: apps, kind: Deployment, jsonPointers: [/spec/replicas]}
"#;
        let app: Application = serde_saphyr::from_str(yaml).expect("valid Application");
        assert_eq!(app.spec.source.repo_url, "https://git.example/guestbook.git");
        let helm = app.spec.source.helm.as_ref().expect("helm");
        assert_eq!(helm.parameters[0].name, "image.tag");
        assert!(helm.parameters[0].force_string);
        assert_eq!(helm.values_object, Some(serde_json::json!({"replicas": 3})));
        let policy = app.spec.sync_policy.as_ref().expect("policy");
        assert!(policy.automated.as_ref().expect("automated").self_heal);
        assert_eq!(policy.retry.as_ref().expect("retry").limit, 5);
        assert_eq!(app.spec.ignore_differences[0].json_pointers, ["/spec/replicas"]);
        // And back: field names are Argo CD's.
        let json = serde_json::to_value(&app.spec).expect("serialise");
        assert!(json["source"]["repoURL"].is_string());
        assert!(json["syncPolicy"]["automated"]["selfHeal"].as_bool() == Some(true));
    }

    #[test]
    fn multi_source_manifest_deserialises_as_argo_cd_writes_it() {
        let yaml = r#"
apiVersion: capstan.dev/v1alpha1
kind: Application
metadata: {name: prometheus, namespace: capstan}
spec:
  sources:
  - repoURL: https://prometheus-community.example/charts
    chart: prometheus
    targetRevision: 15.7.1
    helm:
      valueFiles: [$values/charts/prometheus/values.yaml]
  - repoURL: https://git.example/values.git
    targetRevision: dev
    ref: values
  destination: {name: in-cluster, namespace: monitoring}
"#;
        let app: Application = serde_saphyr::from_str(yaml).expect("valid Application");
        assert!(app.spec.is_multi_source());
        assert!(app.spec.source.is_unset());
        let sources = app.spec.sources();
        assert_eq!(sources.len(), 2);
        assert!(sources[0].is_chart() && sources[0].is_rendered());
        assert_eq!(sources[1].ref_name, "values");
        assert!(!sources[1].is_chart() && !sources[1].is_rendered());
        let json = serde_json::to_value(&app.spec).expect("serialise");
        assert!(json.get("source").is_none(), "an unset source is left out: {json}");
        assert_eq!(json["sources"][1]["ref"], "values");
    }

    #[test]
    fn a_single_source_is_the_one_source() {
        let spec = ApplicationSpec {
            source: ApplicationSource {
                repo_url: "https://git.example/a.git".into(),
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(!spec.is_multi_source());
        assert_eq!(spec.sources().len(), 1);
        assert_eq!(spec.sources()[0].repo_url, "https://git.example/a.git");
    }
}

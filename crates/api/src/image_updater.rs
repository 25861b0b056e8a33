//! The `ImageUpdater` resource: watch one image repository in an OCI registry, choose the newest image
//! by a policy, and write its tag into one key of one file in Git (a Helm values key, a Kustomize
//! `images:` entry, or a key of a JSON/YAML file such as seed 004's `imageTag`) as a commit. One object
//! per image and file, in the spirit of Flux's ImageRepository + ImagePolicy + ImageUpdateAutomation,
//! folded into one (docs/images-and-promotion.md says why).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Annotation a registry notification (or a user) sets to have the updater check now.
pub const CHECK_ANNOTATION: &str = "capstan.dev/check";

/// An image repository watched, and where its newest tag is written.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "capstan.dev",
    version = "v1alpha1",
    kind = "ImageUpdater",
    plural = "imageupdaters",
    shortname = "imgup",
    namespaced,
    status = "ImageUpdaterStatus",
    printcolumn = r#"{"name":"Image","type":"string","jsonPath":".spec.image"}"#,
    printcolumn = r#"{"name":"Latest","type":"string","jsonPath":".status.latestTag"}"#,
    printcolumn = r#"{"name":"Commit","type":"string","jsonPath":".status.lastCommit","priority":1}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ImageUpdaterSpec {
    /// The image repository: `registry[:port]/path` (no tag, no scheme). Credentials, a CA and plain
    /// HTTP come from the repository Secret whose `url` covers `oci://registry/path`.
    pub image: String,
    /// How the newest image is chosen.
    pub policy: ImagePolicy,
    /// Where the tag is written.
    pub write: ImageWrite,
    /// How often the registry is asked, in seconds (default 60). A registry notification to
    /// `/api/webhook/registry` checks at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_seconds: Option<u64>,
    /// The AppProject the updater belongs to (required by the CRD): its `sourceRepos` must permit the Git
    /// repository, and one of its `sourceRepoPaths` entries the file and the branch written. An
    /// updater stored without one (before the field was required) counts as `default`, and is
    /// refused unless `default` is the implicit project that allows everything.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(min = 1))]
    pub project: String,
}

/// Exactly one way of choosing the newest tag.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImagePolicy {
    /// The highest semantic version within a range (Helm's constraint syntax: `^1.2`, `>=1.0 <2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semver: Option<SemverPolicy>,
    /// The highest tag matching a regular expression, by the whole tag or an extracted part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<PatternPolicy>,
    /// A mutable tag followed by digest: the value written is `TAG@sha256:…`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<DigestPolicy>,
}

/// [`ImagePolicy::semver`].
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SemverPolicy {
    /// The range (empty: any release).
    #[serde(default)]
    pub range: String,
    /// Whether pre-releases may be chosen.
    #[serde(default)]
    pub allow_prerelease: bool,
}

/// [`ImagePolicy::pattern`].
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PatternPolicy {
    /// A regular expression a tag must match (`^main-(?P<ts>\d+)$`).
    pub regex: String,
    /// What is ordered: a template such as `$ts` or `$1` (default: the whole tag).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub extract: String,
    /// `alphabetical` (default) or `numerical`.
    #[serde(default)]
    pub order: PatternOrder,
}

/// How [`PatternPolicy`] orders values.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PatternOrder {
    /// Byte-wise.
    #[default]
    Alphabetical,
    /// As non-negative integers.
    Numerical,
}

/// [`ImagePolicy::digest`].
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DigestPolicy {
    /// The tag followed (`latest`).
    pub tag: String,
}

/// The file and key the chosen tag is written to.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageWrite {
    /// The Git repository (its repository Secret must grant push).
    #[serde(rename = "repoURL")]
    pub repo_url: String,
    /// The branch read and written (default `main`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub branch: String,
    /// Push to this branch instead (created from `branch`), for a pull-request flow.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub push_branch: String,
    /// The file, relative to the repository root.
    pub path: String,
    /// The key set to the tag (`imageTag`, `image.tag`, `images[0].newTag`); must exist.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
    /// Or: the `name` of a kustomization's `images:` entry whose `newTag` is set.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kustomize_image: String,
}

/// What the updater saw and did.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageUpdaterStatus {
    /// The tag the policy chose at the last check.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub latest_tag: String,
    /// The commit that last wrote a tag.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_commit: String,
    /// When the registry was last asked (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_checked: String,
    /// The value of the `capstan.dev/check` annotation last acted on.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub observed_check: String,
    /// Tags the policy skipped at the last check, with the reason (at most 20).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    /// Why the last check or write failed; empty when it succeeded.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

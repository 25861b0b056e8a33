//! The API's request and response bodies as types: what handlers answer and what the OpenAPI
//! document describes come from the same definitions, so a renamed field changes both.

use std::collections::BTreeMap;

use aide::OperationOutput;
use aide::generate::GenContext;
use aide::openapi::{Operation, Response};
use axum::Json;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use capstan_api::status::{ConditionType, ConnectionStatus, HealthCode, SyncCode};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

/// A list answer.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "{T}List")]
pub struct Items<T> {
    /// The items.
    pub items: Vec<T>,
}

/// `GET /api/applications`: a page of Application summaries.
#[derive(Debug, Serialize, JsonSchema)]
pub struct AppSummaryList {
    /// Where the next page starts.
    pub metadata: ListMeta,
    /// The Applications of this page, in name order.
    pub items: Vec<AppSummary>,
}

/// A list's metadata, as Kubernetes' `ListMeta`.
#[derive(Debug, Default, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ListMeta {
    /// Send as `continue` (with the same filters) for the next page; empty on the last page.
    #[serde(rename = "continue")]
    pub continue_: String,
    /// How many matching Applications come after this page (absent on the last page).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remaining_item_count: Option<usize>,
}

/// An Application as lists and live updates show it: what a row of the list needs. Its resources
/// and history are only in the single-Application answer; it carries the first five conditions and
/// cuts every message to 512 bytes.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AppSummary {
    /// Name.
    pub name: String,
    /// Namespace of the Application object.
    pub namespace: String,
    /// AppProject (`default` when unset).
    pub project: String,
    /// Labels of the Application.
    pub labels: BTreeMap<String, String>,
    /// Repository URL.
    #[serde(rename = "repoURL")]
    pub repo_url: String,
    /// Path in the repository.
    pub path: String,
    /// Branch, tag or commit followed.
    pub target_revision: String,
    /// Destination cluster name (`in-cluster` for the local one).
    pub cluster: String,
    /// Destination API server URL as written in the spec.
    pub server: String,
    /// Destination namespace.
    pub dest_namespace: String,
    /// `Synced`, `OutOfSync` or `Unknown`.
    pub sync: SyncCode,
    /// The commit last compared.
    pub revision: String,
    /// Aggregated health (`Unknown` before the first comparison).
    pub health: HealthCode,
    /// Why the health is what it is.
    pub health_message: String,
    /// The current or last operation.
    pub operation: Option<OperationSummary>,
    /// Whether automated sync is on.
    pub automated: bool,
    /// When the Application was last compared with Git (RFC 3339).
    pub reconciled_at: Option<String>,
    /// Conditions (errors and warnings), the first five.
    pub conditions: Vec<ConditionSummary>,
    /// What the caller may do with it.
    pub permissions: Permissions,
}

/// The most conditions a summary carries.
pub const SUMMARY_CONDITIONS: usize = 5;
/// The longest message (bytes) a summary carries; longer ones end in `…`.
pub const SUMMARY_MESSAGE: usize = 512;

/// The current or last operation of an Application.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OperationSummary {
    /// Phase of the operation.
    pub phase: capstan_api::operation::OperationPhase,
    /// What is happening or what went wrong.
    pub message: String,
    /// When it started (RFC 3339).
    pub started_at: String,
    /// When it finished (RFC 3339).
    pub finished_at: Option<String>,
}

/// A condition as lists show it.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct ConditionSummary {
    /// e.g. `ComparisonError`.
    #[serde(rename = "type")]
    pub type_: ConditionType,
    /// What is wrong.
    pub message: String,
}

/// What the caller may do with an Application.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema, PartialEq, Eq)]
pub struct Permissions {
    /// Sync, refresh, roll back, terminate.
    pub sync: bool,
    /// Run resource actions (restart, suspend, resume).
    pub action: bool,
    /// Everything.
    pub admin: bool,
}

/// `GET /api/applications/{name}/diff`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Diff {
    /// The commit compared.
    pub revision: String,
    /// Every out-of-sync object.
    pub objects: Vec<ObjectDiff>,
}

/// Why an object is in a diff.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema, PartialEq, Eq)]
pub enum DiffStatus {
    /// Live differs from Git (or is missing).
    OutOfSync,
    /// Live but no longer in Git.
    RequiresPruning,
}

/// One object's unified diff, live → desired (secret values masked).
#[derive(Debug, Serialize, JsonSchema)]
pub struct ObjectDiff {
    /// API group.
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Namespace (empty for cluster-scoped objects).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Why it is listed.
    pub status: DiffStatus,
    /// The unified diff.
    pub diff: String,
}

/// `GET /api/applications/{name}/manifests`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Manifests {
    /// The commit rendered.
    pub revision: String,
    /// The desired objects (secret values masked).
    pub objects: Vec<Value>,
}

/// `GET /api/applications/{name}/tree`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Tree {
    /// The Application's objects and what they own.
    pub nodes: Vec<TreeNode>,
}

/// One node of the tree.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TreeNode {
    /// `group/kind/namespace/name`.
    pub id: String,
    /// The owner's id; None for the Application's own objects.
    pub parent_id: Option<String>,
    /// API group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `Synced`/`OutOfSync` for the Application's objects, `PreSync hook` (…) for the hooks of a
    /// running operation, empty for children.
    pub sync: String,
    /// Health status.
    pub health: HealthCode,
    /// Health message.
    pub health_message: String,
    /// Tracked but no longer in Git.
    pub requires_pruning: bool,
    /// Sync wave.
    pub wave: i64,
    /// The images a live Pod runs (its init and app containers); empty for other kinds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,
}

/// An Event of an Application or of one of its objects.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventItem {
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// Reason.
    pub reason: Option<String>,
    /// Message.
    pub message: Option<String>,
    /// `Kind/name` of the object.
    pub object: String,
    /// How many times it happened.
    pub count: Option<i32>,
    /// When it last happened.
    pub last_timestamp: String,
}

/// `POST …/sync` and `…/rollback`: the request written onto the Application.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Requested {
    /// The operation the controller will run.
    pub requested: capstan_api::operation::Operation,
}

/// `POST …/rollback` with `revert: true`: the revert commit pushed to the Application's branch.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Reverted {
    /// The new commit.
    pub commit: String,
    /// The commits it reverts, newest first.
    pub reverted: Vec<String>,
    /// The branch it was pushed to.
    pub branch: String,
}

/// What `POST …/rollback` answers: `202` with the operation requested, or `200` with the revert
/// commit pushed (`revert: true`).
#[derive(Debug)]
pub enum RollbackAnswer {
    /// A rollback operation written onto the Application.
    Requested(Requested),
    /// A revert commit pushed.
    Reverted(Reverted),
}

impl IntoResponse for RollbackAnswer {
    fn into_response(self) -> axum::response::Response {
        match self {
            RollbackAnswer::Requested(requested) => Accept(requested).into_response(),
            RollbackAnswer::Reverted(reverted) => (StatusCode::OK, Json(reverted)).into_response(),
        }
    }
}

impl OperationOutput for RollbackAnswer {
    type Inner = Requested;

    fn operation_response(ctx: &mut GenContext, operation: &mut Operation) -> Option<Response> {
        Json::<Requested>::operation_response(ctx, operation)
    }

    fn inferred_responses(
        ctx: &mut GenContext,
        operation: &mut Operation,
    ) -> Vec<(Option<aide::openapi::StatusCode>, Response)> {
        let requested = Json::<Requested>::operation_response(ctx, operation)
            .map(|r| (Some(aide::openapi::StatusCode::Code(202)), r));
        let reverted = Json::<Reverted>::operation_response(ctx, operation)
            .map(|r| (Some(aide::openapi::StatusCode::Code(200)), r));
        requested.into_iter().chain(reverted).collect()
    }
}

/// How thorough a refresh is.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RefreshKind {
    /// Compare again (Git and the cluster).
    Normal,
    /// Also render again, bypassing cached results.
    Hard,
}

/// `POST …/refresh`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Refreshing {
    /// The refresh requested.
    pub refresh: RefreshKind,
}

/// `DELETE …/operation`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Terminating {
    /// Always true: termination was requested.
    pub terminating: bool,
}

/// An ApplicationSet as lists show it.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppSetSummary {
    /// Name.
    pub name: String,
    /// Project of its Applications (`*` when templated).
    pub project: String,
    /// Number of generators.
    pub generators: usize,
    /// Number of Applications it owns.
    pub applications: usize,
    /// Conditions.
    pub conditions: Vec<capstan_api::applicationset::ApplicationSetCondition>,
    /// The progressive rollout's steps, if any.
    pub rolling_sync: Option<Value>,
}

/// A destination cluster (never its credentials).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterItem {
    /// Name.
    pub name: String,
    /// API server URL.
    pub server: String,
    /// Name of its cluster Secret (empty for `in-cluster` without one).
    pub secret: String,
    /// Labels of its cluster Secret.
    pub labels: BTreeMap<String, String>,
    /// Annotations of its cluster Secret (never `kubectl apply`'s copy of the whole Secret); only
    /// to an administrator of every project, empty for anyone else.
    pub annotations: BTreeMap<String, String>,
    /// The namespaces Capstan may manage there (empty: all); only to an administrator of every
    /// project, empty for anyone else.
    pub namespaces: Vec<String>,
    /// Last known connection state.
    pub state: ConnectionStatus,
    /// Kubernetes version last seen.
    pub version: String,
    /// Why it is not reachable, if it is not.
    pub message: String,
    /// When it was last checked.
    pub checked_at: String,
}

/// Who the caller is (`GET /api/userinfo`, `POST /api/session`).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserInfo {
    /// User or account name.
    pub username: String,
    /// Groups (SSO).
    pub groups: Vec<String>,
    /// Whether the user logged in through SSO (absent on login answers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sso: Option<bool>,
    /// The token to send as `X-CSRF-Token` with state-changing requests (cookie sessions).
    pub csrf_token: Option<String>,
}

/// `GET /api/settings`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Settings {
    /// The SSO provider, when SSO is configured.
    pub sso: Option<SsoSettings>,
}

/// The SSO provider as the login page shows it.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SsoSettings {
    /// Display name.
    pub name: String,
    /// Where the login button leads.
    pub login_path: String,
}

/// `POST /api/webhook`: whether the event was taken (how many Applications it concerns is not told).
#[derive(Debug, Serialize, JsonSchema)]
pub struct WebhookReply {
    /// True when the push was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accepted: Option<bool>,
    /// Why an event of a kind Capstan does not act on (a ping, a tag deletion…) was ignored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ignored: Option<String>,
}

/// `202 Accepted` with a JSON body.
#[derive(Debug)]
pub struct Accept<T>(pub T);

impl<T: Serialize> IntoResponse for Accept<T> {
    fn into_response(self) -> axum::response::Response {
        (StatusCode::ACCEPTED, Json(self.0)).into_response()
    }
}

impl<T: JsonSchema> OperationOutput for Accept<T> {
    type Inner = T;

    fn operation_response(ctx: &mut GenContext, operation: &mut Operation) -> Option<Response> {
        Json::<T>::operation_response(ctx, operation)
    }

    fn inferred_responses(
        ctx: &mut GenContext,
        operation: &mut Operation,
    ) -> Vec<(Option<aide::openapi::StatusCode>, Response)> {
        Self::operation_response(ctx, operation)
            .map(|r| (Some(aide::openapi::StatusCode::Code(202)), r))
            .into_iter()
            .collect()
    }
}

/// `GET /api/applications/{name}/revisions/{revision}/metadata`: a deployed commit (Argo CD's
/// `RevisionMetadata`).
#[derive(Debug, Serialize, JsonSchema)]
pub struct RevisionMetadata {
    /// `Name <email>` of the commit's author.
    pub author: String,
    /// The author date, RFC 3339.
    pub date: String,
    /// The commit message.
    pub message: String,
}

/// A `Policy` of Capstan's namespace as `GET /api/policies` answers it: its scope, whether it
/// compiled, and the verdicts of its recent failed validations that the caller may see.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyItem {
    /// Name.
    pub name: String,
    /// What a failed validation does (`[Deny]` when the spec names none, as the controller reads it).
    pub validation_actions: Vec<capstan_api::policy::ValidationAction>,
    /// The destination clusters it applies to, as a label selector in text (`env=prod,tier in
    /// (a,b)`); empty: every cluster.
    pub cluster_selector: String,
    /// The projects whose Applications it applies to; empty: every project.
    pub projects: Vec<String>,
    /// Whether its `Ready` condition is True for its current generation: every expression compiled.
    /// False before the controller has checked it.
    pub ready: bool,
    /// The `Ready` condition's message: each expression that did not compile when not ready.
    pub ready_message: String,
    /// Its most recent failed validations, newest first: only those about Applications the caller
    /// may read (about an Application that no longer exists, only for a caller who may read every
    /// project).
    pub recent_verdicts: Vec<capstan_api::policy::PolicyVerdict>,
}

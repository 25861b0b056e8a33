//! The controller's errors: why a pipeline pass failed ([`PipelineError`], reported as an Application
//! condition) and why a reconcile failed ([`ReconcileError`], retried with backoff).

use capstan_api::operation::OPERATION_ANNOTATION;
use capstan_api::status::ConditionType;
use capstan_kube::{KubeError, ObjectKey, describe_kube_error};

/// Why a pass failed; each maps to an Application condition type ([`PipelineError::kind`]). The
/// message is what the condition says; the underlying error is the source.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    // The Application's spec is wrong (`InvalidSpecError`).
    /// No repository.
    #[error("{field}.repoURL is empty")]
    EmptyRepoUrl {
        /// `spec.source` or `spec.sources[i]`.
        field: String,
    },
    /// A revision for a multi-source Application does not name one revision per source.
    #[error("revision {revision:?} names {given} revisions for {sources} sources (one per source, comma-separated)")]
    RevisionCount {
        /// The revision asked for.
        revision: String,
        /// How many it names.
        given: usize,
        /// How many sources the Application has.
        sources: usize,
    },
    /// No source is rendered: each has a `ref` and neither `path` nor `chart`.
    #[error(
        "{field}: no source is rendered (a source with `ref` and neither `path` nor `chart` only provides files to \
         `$ref/…` Helm value files); give a source a `path`, or remove the `ref` of spec.source"
    )]
    NothingRendered {
        /// `spec.source` or `spec.sources`.
        field: String,
    },
    /// Two sources have the same `ref`, so `$NAME/…` value files would be ambiguous.
    #[error("{first} and {second} both have `ref: {name}`; each ref names one source")]
    DuplicateRef {
        /// The `ref`.
        name: String,
        /// The first source with it (`spec.sources[i]`).
        first: String,
        /// The other (`spec.sources[j]`).
        second: String,
    },
    /// A `ref` that is not a plain name (`$NAME/…` value files could not name it unambiguously).
    #[error("{field}.ref {name:?} is not a plain name (letters, digits, '-' and '_', at most 63)")]
    BadRef {
        /// The source (`spec.sources[i]`).
        field: String,
        /// The `ref`, shortened.
        name: String,
    },
    /// A field Capstan accepts in the schema but does not support.
    #[error("{field} is not supported by Capstan: {why}")]
    Unsupported {
        /// Where it is (`spec.source.plugin`, `spec.ignoreDifferences[0].jqPathExpressions`).
        field: String,
        /// What to do instead.
        why: &'static str,
    },
    /// A sync option of the Application that Capstan cannot honour.
    #[error("{field} {option:?} is not supported by Capstan: {why}")]
    UnsupportedOption {
        /// `spec.syncPolicy.syncOptions[i]`.
        field: String,
        /// The option.
        option: String,
        /// Why.
        why: &'static str,
    },
    /// A duration field that does not parse.
    #[error("{field} {value:?} is not a duration (`90s`, `10m`, or a number of seconds)")]
    BadDuration {
        /// Where it is (`spec.syncPolicy.syncTimeout`).
        field: &'static str,
        /// Its value.
        value: String,
    },
    /// A duration field that must not be zero.
    #[error("{field} {value:?} is zero: give how long to wait (`90s`, `10m`)")]
    ZeroDuration {
        /// Where it is (`spec.syncPolicy.autoRevert.degradedFor`).
        field: &'static str,
        /// Its value.
        value: String,
    },
    /// More sources than an Application may have.
    #[error("spec.sources has {count} entries; at most {max} are allowed")]
    TooManySources {
        /// How many there are.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// `spec.decryption` names a key Secret that cannot be used.
    #[error("spec.decryption: {0}")]
    Decryption(#[source] capstan_cluster::decryption::DecryptionKeyError),
    /// A local repository inside Capstan's cache.
    #[error("repoURL {url:?} points into Capstan's own cache, which may hold other Applications' repositories")]
    RepoInCache {
        /// The repository URL.
        url: String,
    },
    /// The AppProject does not allow the source or destination.
    #[error(transparent)]
    Project(#[from] capstan_project::Violation),
    /// The AppProject does not permit the secret store a Secret names.
    #[error("{object}: {source}")]
    SecretStoreRefused {
        /// `Secret NAMESPACE/NAME`.
        object: String,
        /// The project's rule.
        #[source]
        source: capstan_project::Violation,
    },
    /// The AppProject does not exist.
    #[error("project {name:?} does not exist in namespace {namespace}")]
    UnknownProject {
        /// The project's name.
        name: String,
        /// Capstan's namespace.
        namespace: String,
    },
    /// The destination names both a server and a name.
    #[error("destination has both server and name; give one of them")]
    ServerAndName,
    /// Several cluster Secrets describe the destination.
    #[error(
        "the destination is ambiguous: cluster Secrets {} describe the same cluster {cluster}; remove all but one",
        .secrets.join(" and ")
    )]
    AmbiguousDestination {
        /// The Secrets' names.
        secrets: Vec<String>,
        /// The server or name asked for.
        cluster: String,
    },
    /// No cluster is registered under the destination's server or name.
    #[error(
        "destination cluster with {which} is not registered (known clusters: {}); register it with `capstan cluster add`",
        .known.join(", ")
    )]
    UnknownDestination {
        /// `server "…"` or `name "…"`.
        which: String,
        /// The clusters that are registered.
        known: Vec<String>,
    },
    /// Objects outside the namespaces the destination is registered for.
    #[error(
        "{destination} is registered for namespaces [{allowed}] only; refusing {}",
        .refused.join(", ")
    )]
    NamespacesRefused {
        /// The destination, described.
        destination: String,
        /// The namespaces it is registered for, comma separated.
        allowed: String,
        /// The objects refused.
        refused: Vec<String>,
    },

    // Repository, revision or rendering problem (`ComparisonError`).
    /// The repository or revision cannot be read.
    #[error(transparent)]
    Source(#[from] capstan_source::SourceError),
    /// A chart could not be resolved or fetched from its Helm repository or OCI registry.
    #[error("{field}: {source}")]
    Chart {
        /// `spec.source` or `spec.sources[i]`.
        field: String,
        /// Why (boxed: chart errors are large).
        #[source]
        source: Box<capstan_source::ChartError>,
    },
    /// A chart dependency names a repository no repository Secret registers.
    #[error(
        "{field}: repository {repository:?} is not registered; add a repository Secret for it (chart dependencies are \
         fetched from registered repositories only)"
    )]
    UnregisteredDependency {
        /// `spec.source dependency "NAME"` (or `spec.sources[i] …`).
        field: String,
        /// The dependency's repository.
        repository: String,
    },
    /// Rendering failed.
    #[error("rendering {which}{path} at {revision}: {source}")]
    Render {
        /// For a multi-source Application, which source (`spec.sources[1] (URL) `); empty otherwise.
        which: String,
        /// The source path, as users wrote it.
        path: String,
        /// The short commit.
        revision: String,
        /// Why (boxed: a render error is large, and this enum is returned everywhere).
        #[source]
        source: Box<capstan_render::RenderError>,
    },
    /// A Secret's `capstan.dev/secret-data` annotation is malformed.
    #[error("{object}: {reason}")]
    SecretData {
        /// `Secret NAMESPACE/NAME`.
        object: String,
        /// What is wrong (names keys and references, never values).
        reason: String,
    },
    /// The secret store a Secret names cannot be used (missing, incomplete, unreadable).
    #[error("{object}: {source}")]
    SecretStore {
        /// `Secret NAMESPACE/NAME`.
        object: String,
        /// Why.
        #[source]
        source: capstan_cluster::secret_store::StoreError,
    },
    /// A value of a Secret could not be read from its secret store.
    #[error("{object} key {key:?} from store {store:?} ({reference}): {source}")]
    SecretValue {
        /// `Secret NAMESPACE/NAME`.
        object: String,
        /// The Secret's data key.
        key: String,
        /// The store's name.
        store: String,
        /// `mount/path#key` in the store.
        reference: String,
        /// What the store (or the client) said (boxed: the variant would be large).
        #[source]
        source: Box<capstan_vault::VaultError>,
    },
    /// Rendered kinds the destination does not serve.
    #[error("the destination does not know these kinds: {}", .kinds.join(", "))]
    UnknownKinds {
        /// Each kind with its object, API version and, for removed APIs, the replacement.
        kinds: Vec<String>,
    },
    /// The comparison failed (boxed: a comparison error is large, and this enum is returned
    /// everywhere).
    #[error(transparent)]
    Compare(Box<capstan_compare::CompareError>),

    // The destination cluster cannot be reached or read (`ComparisonError`, health Unknown).
    /// The cluster's last probe failed.
    #[error("{destination} is unreachable: {message}")]
    Unreachable {
        /// The destination, described.
        destination: String,
        /// The probe's message.
        message: String,
    },
    /// The cluster did not answer now.
    #[error("{destination} is unreachable: {}", describe_kube_error(.source))]
    NoAnswer {
        /// The destination, described.
        destination: String,
        /// What the request answered.
        #[source]
        source: kube::Error,
    },
    /// A kind could not be resolved through discovery.
    #[error(transparent)]
    Discovery(KubeError),
    /// The list of APIs the cluster serves could not be read.
    #[error("{destination}: {source}")]
    ApiVersions {
        /// The destination, described.
        destination: String,
        /// Why.
        #[source]
        source: KubeError,
    },
    /// Listing a kind's live objects failed.
    #[error("listing {kind}: {}", describe_kube_error(.source))]
    List {
        /// The kind.
        kind: String,
        /// What the API server answered.
        #[source]
        source: kube::Error,
    },
    /// Reading one live object failed.
    #[error("reading {key}: {}", describe_kube_error(.source))]
    Read {
        /// The object.
        key: ObjectKey,
        /// What the API server answered (boxed: with the key, the variant would be large).
        #[source]
        source: Box<kube::Error>,
    },
    /// The cluster Secrets could not be listed.
    #[error("listing cluster Secrets: {}", describe_kube_error(.0))]
    ClusterSecrets(#[source] kube::Error),
    /// The AppProjects' cache is not filled yet.
    #[error("AppProjects could not be read from the cluster yet")]
    ProjectsNotReady,
    /// Reading an AppProject failed.
    #[error("reading AppProject {name}: {}", describe_kube_error(.source))]
    ReadProject {
        /// The project's name.
        name: String,
        /// What the API server answered.
        #[source]
        source: kube::Error,
    },
}

impl From<capstan_compare::CompareError> for PipelineError {
    fn from(err: capstan_compare::CompareError) -> Self {
        PipelineError::Compare(Box::new(err))
    }
}

/// What a [`PipelineError`] is about, which decides its condition and the health it leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PipelineErrorKind {
    /// Repository, revision or rendering problem (`ComparisonError`).
    Comparison,
    /// The Application's spec is wrong (`InvalidSpecError`).
    InvalidSpec,
    /// The destination cluster cannot be reached (`ComparisonError`, health Unknown).
    Destination,
}

impl PipelineError {
    /// What the error is about.
    pub fn kind(&self) -> PipelineErrorKind {
        use PipelineError::*;
        match self {
            EmptyRepoUrl { .. }
            | RevisionCount { .. }
            | NothingRendered { .. }
            | DuplicateRef { .. }
            | BadRef { .. }
            | TooManySources { .. }
            | Unsupported { .. }
            | BadDuration { .. }
            | ZeroDuration { .. }
            | UnsupportedOption { .. }
            | RepoInCache { .. }
            | Project(_)
            | SecretStoreRefused { .. }
            | UnknownProject { .. }
            | ServerAndName
            | AmbiguousDestination { .. }
            | UnknownDestination { .. }
            | NamespacesRefused { .. } => PipelineErrorKind::InvalidSpec,
            Source(_)
            | Chart { .. }
            | UnregisteredDependency { .. }
            | Decryption(_)
            | Render { .. }
            | UnknownKinds { .. }
            | SecretData { .. }
            | SecretStore { .. }
            | SecretValue { .. }
            | Compare(_) => PipelineErrorKind::Comparison,
            Unreachable { .. }
            | NoAnswer { .. }
            | Discovery(_)
            | ApiVersions { .. }
            | List { .. }
            | Read { .. }
            | ClusterSecrets(_)
            | ProjectsNotReady
            | ReadProject { .. } => PipelineErrorKind::Destination,
        }
    }

    /// The condition type this error is reported as.
    pub fn condition_type(&self) -> ConditionType {
        match self.kind() {
            PipelineErrorKind::Comparison | PipelineErrorKind::Destination => ConditionType::ComparisonError,
            PipelineErrorKind::InvalidSpec => ConditionType::InvalidSpecError,
        }
    }
}

/// An operation request annotation that does not hold an operation (reported as `InvalidSpecError`).
#[derive(Debug, thiserror::Error)]
#[error("invalid {OPERATION_ANNOTATION} annotation: {source}")]
pub struct InvalidRequest {
    /// Why it does not parse.
    #[from]
    pub source: serde_json::Error,
}

/// Errors of one reconcile (they are retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// Reading or writing the Application (its status, annotations or finalizers) failed.
    #[error("updating Application {app}: {}", describe_kube_error(.source))]
    Update {
        /// The Application's name.
        app: String,
        /// What the API server answered.
        #[source]
        source: kube::Error,
    },
    /// The objects of an Application being deleted could not all be deleted (the finalizer stays).
    #[error("updating Application {app}: {message}")]
    Deletion {
        /// The Application's name.
        app: String,
        /// What failed, object by object.
        message: String,
    },
}

impl ReconcileError {
    /// A failed read or write of the Application `app`.
    pub fn update(app: impl Into<String>, source: kube::Error) -> Self {
        ReconcileError::Update {
            app: app.into(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipeline_errors_keep_their_condition_words_and_kind() {
        let unknown = PipelineError::UnknownDestination {
            which: "name \"prod\"".into(),
            known: vec!["in-cluster".into(), "staging".into()],
        };
        assert_eq!(
            unknown.to_string(),
            "destination cluster with name \"prod\" is not registered (known clusters: in-cluster, staging); \
             register it with `capstan cluster add`"
        );
        assert_eq!(unknown.condition_type(), ConditionType::InvalidSpecError);
        let kinds = PipelineError::UnknownKinds {
            kinds: vec![
                "Widget \"a\" (example.com/v1)".into(),
                "Gadget \"b\" (example.com/v1)".into(),
            ],
        };
        assert_eq!(
            kinds.to_string(),
            "the destination does not know these kinds: Widget \"a\" (example.com/v1), Gadget \"b\" (example.com/v1)"
        );
        assert_eq!(kinds.kind(), PipelineErrorKind::Comparison);
        let refused = PipelineError::NamespacesRefused {
            destination: "cluster \"spoke\"".into(),
            allowed: "a, b".into(),
            refused: vec!["ConfigMap/x in namespace \"c\"".into()],
        };
        assert_eq!(
            refused.to_string(),
            "cluster \"spoke\" is registered for namespaces [a, b] only; refusing ConfigMap/x in namespace \"c\""
        );
        let unreachable = PipelineError::Unreachable {
            destination: "cluster \"spoke\"".into(),
            message: "connection refused".into(),
        };
        assert_eq!(
            unreachable.to_string(),
            "cluster \"spoke\" is unreachable: connection refused"
        );
        assert_eq!(unreachable.kind(), PipelineErrorKind::Destination);
        assert_eq!(unreachable.condition_type(), ConditionType::ComparisonError);
    }

    #[test]
    fn pipeline_errors_keep_their_source() {
        use std::error::Error as _;
        let err = PipelineError::ReadProject {
            name: "team".into(),
            source: kube::Error::LinesCodecMaxLineLengthExceeded,
        };
        assert!(err.to_string().starts_with("reading AppProject team: "));
        assert!(err.source().is_some_and(|s| s.is::<kube::Error>()));
    }
}

//! The controller's errors: why a pipeline pass failed ([`PipelineError`], reported as an Application
//! condition) and why a reconcile failed ([`ReconcileError`], retried with backoff).

use capstan_api::operation::OPERATION_ANNOTATION;
use capstan_kube::describe_kube_error;

/// Why a pass failed; each maps to an Application condition type.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// Repository, revision or rendering problem (`ComparisonError`).
    #[error("{0}")]
    Comparison(String),
    /// The Application's spec is wrong (`InvalidSpecError`).
    #[error("{0}")]
    InvalidSpec(String),
    /// The destination cluster cannot be reached (`ComparisonError`, health Unknown).
    #[error("{0}")]
    Destination(String),
}

impl PipelineError {
    /// The condition type this error is reported as.
    pub fn condition_type(&self) -> &'static str {
        match self {
            PipelineError::Comparison(_) | PipelineError::Destination(_) => "ComparisonError",
            PipelineError::InvalidSpec(_) => "InvalidSpecError",
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

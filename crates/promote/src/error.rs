//! Why a promotion was refused or failed; [`PromoteError::kind`] is what the HTTP API answers with.

use capstan_gitwrite::WriteError;

/// The class of a [`PromoteError`], as an HTTP status would say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is unusable (bad names, `force` without a reason).
    BadRequest,
    /// The pipeline, an environment or an Application does not exist.
    NotFound,
    /// A check failed: the source is not Synced and Healthy, or the promotion goes backwards.
    Conflict,
    /// The files cannot be promoted (a missing file or key, a value that is not a scalar).
    Unprocessable,
    /// The pipeline's AppProject refuses the promotion (repository, file, branch, an Application of
    /// another project, no project named).
    Forbidden,
    /// Git or the cluster failed.
    Internal,
}

/// Why a promotion was not made. Messages name the file and key concerned.
#[derive(Debug, thiserror::Error)]
pub enum PromoteError {
    /// The request is unusable.
    #[error("{0}")]
    BadRequest(String),
    /// Something named does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// The source Application is not Synced and Healthy.
    #[error(
        "Application {app} is {sync}/{health} (revision {revision}): promote only from a Synced and Healthy \
         environment, or use --force with a reason"
    )]
    SourceNotReady {
        /// The source Application.
        app: String,
        /// Its sync status.
        sync: String,
        /// Its health status.
        health: String,
        /// Its synced revision.
        revision: String,
    },
    /// The target comes before the source in the pipeline.
    #[error("{from} comes after {to} in the pipeline: promoting backwards needs --force with a reason")]
    Backwards {
        /// The source environment.
        from: String,
        /// The target environment.
        to: String,
    },
    /// The source Application's synced revision is not the one the caller previewed.
    #[error("{app} is now at revision {now}, not {expected} as previewed: preview the promotion again")]
    SourceMoved {
        /// The source Application.
        app: String,
        /// The revision the caller saw.
        expected: String,
        /// The revision it is at now.
        now: String,
    },
    /// A file does not exist at the revision read.
    #[error("{path}: no such file at {revision}")]
    MissingFile {
        /// Repository-relative path.
        path: String,
        /// The revision read.
        revision: String,
    },
    /// A promoted key is missing from a file.
    #[error("{path}: key {key} not found")]
    MissingKey {
        /// Repository-relative path.
        path: String,
        /// The key.
        key: String,
    },
    /// A file is not YAML, or a key's value is not a scalar.
    #[error("{path}: {reason}")]
    BadFile {
        /// Repository-relative path.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The pipeline's AppProject does not permit the repository, the file or the branch written.
    #[error("pipeline {pipeline}: {source}")]
    Project {
        /// The pipeline.
        pipeline: String,
        /// The rule broken.
        #[source]
        source: capstan_project::Violation,
    },
    /// The pipeline names no usable project, or an environment's Application belongs to another.
    #[error("pipeline {pipeline}: {message}")]
    ProjectRefused {
        /// The pipeline.
        pipeline: String,
        /// What is refused, naming the project.
        message: String,
    },
    /// Reading from Git failed.
    #[error(transparent)]
    Git(#[from] capstan_source::SourceError),
    /// Writing to Git failed.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// The cluster refused or failed.
    #[error("{context}: {source}")]
    Kube {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: kube::Error,
    },
    /// A local file operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

impl PromoteError {
    /// The class of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            PromoteError::BadRequest(_) => ErrorKind::BadRequest,
            PromoteError::NotFound(_) => ErrorKind::NotFound,
            PromoteError::SourceNotReady { .. } | PromoteError::Backwards { .. } | PromoteError::SourceMoved { .. } => {
                ErrorKind::Conflict
            }
            PromoteError::MissingFile { .. } | PromoteError::MissingKey { .. } | PromoteError::BadFile { .. } => {
                ErrorKind::Unprocessable
            }
            PromoteError::Write(
                WriteError::MissingFile { .. } | WriteError::MissingKey { .. } | WriteError::CannotEdit { .. },
            ) => ErrorKind::Unprocessable,
            PromoteError::Project { .. } | PromoteError::ProjectRefused { .. } => ErrorKind::Forbidden,
            PromoteError::Write(WriteError::InvalidRequest(_) | WriteError::UnsafePath { .. }) => ErrorKind::BadRequest,
            PromoteError::Git(_) | PromoteError::Write(_) | PromoteError::Kube { .. } | PromoteError::Io { .. } => {
                ErrorKind::Internal
            }
        }
    }

    pub(crate) fn kube(context: impl Into<String>) -> impl FnOnce(kube::Error) -> PromoteError {
        let context = context.into();
        move |source| PromoteError::Kube { context, source }
    }

    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> PromoteError {
        let context = context.into();
        move |source| PromoteError::Io { context, source }
    }
}

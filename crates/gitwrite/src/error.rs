//! What can go wrong writing to Git: one error type for the writer and the file editor.

/// Why a write was not made. Messages name the file and key concerned and never contain secrets
/// (git failures come from `capstan-source`, which redacts them).
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The request itself is unusable (no edits, a batch mixing repositories, a bad branch name ...).
    #[error("invalid write request: {0}")]
    InvalidRequest(String),
    /// A path is absolute, leaves the repository (`..`, a symlink pointing outside) or names `.git`.
    #[error("refusing to edit {path:?}: {reason}")]
    UnsafePath {
        /// The path as requested.
        path: String,
        /// Why it is refused.
        reason: String,
    },
    /// The file to edit does not exist on the branch.
    #[error("{path}: no such file in the repository")]
    MissingFile {
        /// Repository-relative path.
        path: String,
    },
    /// The key to set does not exist in the file (keys are never created silently).
    #[error("{path}: key {key} not found")]
    MissingKey {
        /// Repository-relative path.
        path: String,
        /// The key path, as written by [`crate::KeyPath`]'s `Display`.
        key: String,
    },
    /// The key exists but cannot be edited without risking the rest of the file.
    #[error("{path}: cannot edit {key}: {reason}")]
    CannotEdit {
        /// Repository-relative path.
        path: String,
        /// The key path.
        key: String,
        /// Why (flow style, anchors, multi-line scalar, not a scalar ...).
        reason: String,
    },
    /// A git command failed (clone, fetch, commit, push refused for authentication ...).
    #[error(transparent)]
    Git(#[from] capstan_source::SourceError),
    /// Every push attempt was rejected (concurrent changes each time, or a server hook refusing).
    #[error("push rejected after {attempts} attempt(s): {last_reason}")]
    PushRejected {
        /// Attempts made.
        attempts: u32,
        /// git's message for the last rejection (redacted).
        last_reason: String,
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

impl WriteError {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> WriteError {
        let context = context.into();
        move |source| WriteError::Io { context, source }
    }
}

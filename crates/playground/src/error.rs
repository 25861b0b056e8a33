//! Errors of the local control plane, each naming what failed and where to look.

use std::path::PathBuf;

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong starting, stopping or inspecting a local control plane.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A required binary is not installed.
    #[error("{name} not found (looked in {searched}); run `scripts/setup.sh` to install the playground's binaries")]
    MissingBinary {
        /// The binary's file name.
        name: String,
        /// The places searched, for the message.
        searched: String,
    },
    /// `CAPSTAN_KUBE_VERSION` names a release that is not pinned.
    #[error("CAPSTAN_KUBE_VERSION={wanted}: the playground runs {known} (scripts/versions.env)")]
    UnknownKubeVersion {
        /// The value given.
        wanted: String,
        /// The releases available.
        known: String,
    },
    /// A file system operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Certificates or keys could not be generated.
    #[error("generating the playground's certificates: {0}")]
    Pki(#[from] rcgen::Error),
    /// The state or a generated file could not be (de)serialised.
    #[error("{context}: {message}")]
    Format {
        /// What was being read or written.
        context: String,
        /// What was wrong.
        message: String,
    },
    /// A Kubernetes API request failed.
    #[error("{context}: {source}")]
    Kube {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: kube::Error,
    },
    /// A component process exited while starting.
    #[error("{name} exited during start-up ({status}); last lines of {log}:\n{tail}")]
    ComponentExited {
        /// Component name.
        name: String,
        /// Exit status.
        status: String,
        /// Its log file.
        log: PathBuf,
        /// The end of its log.
        tail: String,
    },
    /// Something did not become ready in time.
    #[error("timed out after {seconds} s waiting for {what}; see the logs in {logs}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        seconds: u64,
        /// Where the component logs are.
        logs: PathBuf,
    },
}

impl Error {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }

    pub(crate) fn kube(context: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let context = context.into();
        move |source| Error::Kube { context, source }
    }
}

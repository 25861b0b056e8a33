//! What the shared helpers fail with, and the one-line wording of a kube error that every crate uses
//! in conditions, operation messages and logs.

/// Why an object cannot be identified or its kind resolved.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// A rendered object is not usable (no kind, no name ...).
    #[error("invalid object {what}: {message}")]
    InvalidObject {
        /// Which object.
        what: String,
        /// What is wrong.
        message: String,
    },
    /// The destination does not know the kind.
    #[error("unknown kind {kind} in {api_version} (object {object}): the destination cluster has no such resource")]
    UnknownKind {
        /// apiVersion.
        api_version: String,
        /// kind.
        kind: String,
        /// The object that uses it.
        object: String,
    },
    /// A Kubernetes request failed.
    #[error("{context}: {}", describe_kube_error(.source))]
    Request {
        /// What was being done.
        context: String,
        /// What the API server (or the connection to it) answered.
        #[source]
        source: kube::Error,
    },
}

/// A one-line description of a kube error: the API server's message for API errors.
pub fn describe_kube_error(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) => format!("{} ({})", status.message, status.reason),
        other => {
            let mut msg = other.to_string();
            let mut source = std::error::Error::source(other);
            while let Some(cause) = source {
                let text = cause.to_string();
                if !msg.contains(&text) {
                    msg.push_str(": ");
                    msg.push_str(&text);
                }
                source = cause.source();
            }
            msg
        }
    }
}

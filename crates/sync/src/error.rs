//! Why a sync, or one of its tasks, failed. Each error's message is what the operation records (the
//! API server's answers as [`describe_kube_error`] words them); the underlying error is its source.

use capstan_kube::annotations::AnnotationError;
use capstan_kube::{ObjectKey, describe_kube_error};

/// Why the operation's record (see [`Recorded`](crate::Recorded)) is not there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Writing the record failed (why, as the writer words it).
    #[error("{0}")]
    Failed(String),
    /// The gate was dropped without a record.
    #[error("the operation was not recorded as running")]
    NotRecorded,
}

/// Why a sync or one of its tasks failed.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// An annotation that steers the sync cannot be used.
    #[error(transparent)]
    Annotation(#[from] AnnotationError),
    /// The sync must not run at all (an object tracked by another Application, or refused when it
    /// was compared).
    #[error("{0}")]
    Refused(String),
    /// The API server refused or failed a request.
    #[error("{}", describe_kube_error(.0))]
    Api(#[from] kube::Error),
    /// An object could not be (de)serialised.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// The destination namespace could not be read or created (`CreateNamespace=true`).
    #[error("{action} namespace {name}: {}", describe_kube_error(.source))]
    Namespace {
        /// `reading` or `creating`.
        action: &'static str,
        /// The namespace.
        name: String,
        /// What the API server answered.
        #[source]
        source: kube::Error,
    },
    /// A task on one object failed.
    #[error("{verb} {key}: {source}")]
    Task {
        /// What the task did (`applying`, `pruning`, `hook`).
        verb: &'static str,
        /// The object.
        key: ObjectKey,
        /// Why it failed.
        #[source]
        source: Box<SyncError>,
    },
    /// A wave's objects did not become healthy in time.
    #[error("wave did not become healthy within {seconds} s: waiting for {waiting_on}")]
    WaveTimeout {
        /// The wave timeout.
        seconds: u64,
        /// The first object still not healthy, and its health.
        waiting_on: String,
    },
    /// The sync was stopped (its write requests closed).
    #[error("the sync was stopped")]
    Stopped,
    /// The operation's record failed.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// A hook was deleted before it completed.
    #[error("hook {0} disappeared before completing")]
    HookDisappeared(String),
    /// A hook failed.
    #[error("hook {name} failed: {message}")]
    HookFailed {
        /// The hook's name.
        name: String,
        /// Its health message.
        message: String,
    },
    /// A hook did not complete in time.
    #[error("hook {name} did not complete within {seconds} s{detail}")]
    HookTimeout {
        /// The hook's name.
        name: String,
        /// The wave timeout.
        seconds: u64,
        /// Why it did not, from its Events (`: REASON: message`), or empty.
        detail: String,
    },
    /// The previous run of a hook (`BeforeHookCreation`) may not or could not be replaced.
    #[error("{0}")]
    HookNotReplaced(String),
    /// `Force=true`: the object could not be deleted to be created again (changed since it was
    /// compared, or still there when the wait ended).
    #[error("not recreated: {0}")]
    NotRecreated(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_the_ones_operations_record() {
        let key = ObjectKey {
            group: "batch".into(),
            kind: "Job".into(),
            namespace: "web".into(),
            name: "migrate".into(),
        };
        let hook = SyncError::Task {
            verb: "hook",
            key: key.clone(),
            source: Box::new(SyncError::HookFailed {
                name: "migrate".into(),
                message: "exit code 2".into(),
            }),
        };
        assert_eq!(
            hook.to_string(),
            format!("hook {key}: hook migrate failed: exit code 2")
        );
        assert!(
            std::error::Error::source(&hook).is_some(),
            "the task's error is its source"
        );
        assert_eq!(
            SyncError::WaveTimeout {
                seconds: 600,
                waiting_on: "apps/Deployment/web/api (Progressing)".into(),
            }
            .to_string(),
            "wave did not become healthy within 600 s: waiting for apps/Deployment/web/api (Progressing)"
        );
        assert_eq!(
            SyncError::HookTimeout {
                name: "migrate".into(),
                seconds: 5,
                detail: String::new(),
            }
            .to_string(),
            "hook migrate did not complete within 5 s"
        );
        assert_eq!(
            SyncError::HookTimeout {
                name: "migrate".into(),
                seconds: 5,
                detail: ": FailedCreate: serviceaccount \"runner\" not found".into(),
            }
            .to_string(),
            "hook migrate did not complete within 5 s: FailedCreate: serviceaccount \"runner\" not found"
        );
        assert_eq!(SyncError::Stopped.to_string(), "the sync was stopped");
        assert_eq!(
            SyncError::from(RecordError::NotRecorded).to_string(),
            "the operation was not recorded as running"
        );
        assert_eq!(
            SyncError::from(RecordError::Failed("conflict".into())).to_string(),
            "conflict"
        );
    }
}

//! The gate between a sync's first applies and everything after them: the operation must be
//! recorded as running before hooks run or a later stage starts, so a restart resumes it.

use tokio::sync::watch;

use crate::error::RecordError;

/// Whether the operation has been recorded as running, so that a controller restart resumes it
/// rather than starting it again.
///
/// Applying an object twice changes nothing, so the applies of the first stage need not wait for
/// the record; hooks (which must never run twice) and every later stage do. A record that failed
/// stops the sync before its next stage.
#[derive(Clone)]
pub struct Recorded(watch::Receiver<Option<Result<(), RecordError>>>);

/// Opens a [`Recorded`] gate once the operation's record has been written (or has failed).
pub struct Recording(watch::Sender<Option<Result<(), RecordError>>>);

impl Recorded {
    /// A closed gate and the [`Recording`] that opens it.
    pub fn gate() -> (Recording, Recorded) {
        let (tx, rx) = watch::channel(None);
        (Recording(tx), Recorded(rx))
    }

    /// Why the record could not be written, if it has failed already (without waiting).
    pub fn failure(&self) -> Option<RecordError> {
        self.0.borrow().as_ref().and_then(|r| r.clone().err())
    }

    /// Wait until the record has been written; its error if it failed.
    pub async fn wait(&mut self) -> Result<(), RecordError> {
        match self.0.wait_for(Option::is_some).await {
            Ok(done) => done.clone().unwrap_or(Ok(())),
            Err(_) => Err(RecordError::NotRecorded),
        }
    }
}

impl Recording {
    /// The record was written (`Ok`) or could not be (`Err`, with why).
    pub fn finish(self, result: Result<(), RecordError>) {
        let _ = self.0.send(Some(result));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_gate_opens_on_the_record_and_reports_a_failed_one() {
        let (recording, mut recorded) = Recorded::gate();
        assert_eq!(recorded.failure(), None, "nothing known yet");
        let mut waiting = recorded.clone();
        let waiter = tokio::spawn(async move { waiting.wait().await });
        recording.finish(Ok(()));
        assert_eq!(waiter.await.ok(), Some(Ok(())));
        assert_eq!(recorded.wait().await, Ok(()));

        let (recording, mut recorded) = Recorded::gate();
        recording.finish(Err(RecordError::Failed("conflict".into())));
        assert_eq!(recorded.failure(), Some(RecordError::Failed("conflict".into())));
        assert_eq!(recorded.wait().await, Err(RecordError::Failed("conflict".into())));

        let (recording, mut recorded) = Recorded::gate();
        drop(recording);
        assert_eq!(
            recorded.wait().await,
            Err(RecordError::NotRecorded),
            "a gate dropped without a record never opens as recorded"
        );
    }
}

//! Why an ApplicationSet could not be generated this pass: the reason and message its condition
//! carries (nothing is changed when there is one).

use crate::GenerateError;

/// Why a set could not be generated: nothing is changed, the condition says why.
pub(super) struct Problem {
    pub(super) reason: &'static str,
    pub(super) message: String,
}

impl From<GenerateError> for Problem {
    fn from(e: GenerateError) -> Self {
        Problem {
            reason: e.reason(),
            message: e.to_string(),
        }
    }
}

//! Whether the controller is ready to work: its Application watch has listed once (a Pod's
//! readiness probe asks this through `capstan controller --health-listen`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once the Application watch has listed; shared by clones.
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Whether the controller is ready.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// Mark the controller ready.
    pub(crate) fn set(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

//! Verdict shapes that several upstream health checks share, so each family module states only what
//! is particular to its kinds.

use crate::Health;
use crate::json::Condition;

/// The first `Ready` condition that is True (Healthy, with its message) or False (Degraded, with its
/// message or reason) decides; with none, Progressing with `waiting` as message. This is the shape of
/// Argo CD's checks for cert-manager issuers and certificates and for External Secrets stores.
pub(crate) fn first_ready(conditions: &[Condition<'_>], waiting: &str) -> Health {
    for c in conditions.iter().filter(|c| c.type_ == "Ready") {
        if c.is_false() {
            return Health::degraded(c.describe(|| "Ready is False".to_owned()));
        }
        if c.is_true() {
            return Health::healthy(c.message);
        }
    }
    Health::progressing(waiting)
}

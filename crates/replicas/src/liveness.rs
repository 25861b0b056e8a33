//! Whether another replica is alive, judged as Kubernetes' leader election does: by when *this*
//! replica last saw its Lease change (its `resourceVersion`), on this replica's monotonic clock.
//! The renew times written in the Lease come from the other replica's clock and are only shown,
//! never compared, so clocks that disagree by seconds do not matter. A Lease first seen counts as
//! just renewed: a replica that starts gives every existing member a full lease duration. A Lease
//! that disappears (deleted by hand) still counts until a lease duration after it last changed: its
//! replica may still be working.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// When each Lease (by name) was last seen to change.
#[derive(Debug, Default)]
pub struct Observations {
    seen: BTreeMap<String, (String, Instant)>,
}

impl Observations {
    /// Record that Lease `name` has `resource_version` at `now`; returns when it was last seen to
    /// change.
    pub fn observe(&mut self, name: &str, resource_version: &str, now: Instant) -> Instant {
        match self.seen.get_mut(name) {
            Some((rv, since)) if rv == resource_version => *since,
            Some(entry) => {
                *entry = (resource_version.to_string(), now);
                now
            }
            None => {
                self.seen.insert(name.to_string(), (resource_version.to_string(), now));
                now
            }
        }
    }

    /// Forget Leases that last changed more than `horizon` before `now` and are not in `present`
    /// (deleted long ago).
    pub fn forget_gone(&mut self, present: &std::collections::BTreeSet<String>, horizon: Duration, now: Instant) {
        self.seen
            .retain(|name, (_, since)| present.contains(name) || now.saturating_duration_since(*since) < horizon);
    }

    /// Whether Lease `name`, of duration `duration`, was seen to change within `duration` before
    /// `now`. A Lease never observed is not live.
    pub fn live(&self, name: &str, duration: Duration, now: Instant) -> bool {
        self.seen
            .get(name)
            .is_some_and(|(_, since)| now.saturating_duration_since(*since) < duration)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_live_until_it_stops_changing_for_its_duration() {
        let mut o = Observations::default();
        let t0 = Instant::now();
        let d = Duration::from_secs(15);
        assert!(!o.live("a", d, t0), "never seen");
        o.observe("a", "1", t0);
        assert!(o.live("a", d, t0 + Duration::from_secs(14)));
        // The same version seen again does not renew it.
        o.observe("a", "1", t0 + Duration::from_secs(10));
        assert!(!o.live("a", d, t0 + Duration::from_secs(15)));
        // A new version does.
        o.observe("a", "2", t0 + Duration::from_secs(16));
        assert!(o.live("a", d, t0 + Duration::from_secs(30)));
        // Deleted: still live until a lease duration after its last change, then forgotten.
        let t1 = t0 + Duration::from_secs(17);
        o.forget_gone(&Default::default(), d, t1);
        assert!(o.live("a", d, t1), "deleted a second ago: its replica may still work");
        o.forget_gone(&Default::default(), d, t0 + Duration::from_secs(40));
        assert!(!o.live("a", d, t0 + Duration::from_secs(40)));
    }
}

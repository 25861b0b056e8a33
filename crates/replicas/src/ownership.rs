//! What this replica may work on now, shared by the [`crate::Coordinator`] (which changes it) and
//! the controllers (which ask it): the shards it holds and accepts work for, until when its member
//! Lease is valid, whether it leads, and the reconciles in flight per shard — a shard is given
//! away only once those have finished ([`Ownership::drained`]).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::{Notify, mpsc, watch};

use crate::hashing::{SHARDS, shard_of};
use crate::identity::ReplicaId;

#[derive(Debug)]
struct Inner {
    /// Shards held and accepting new work.
    active: Vec<bool>,
    /// Reconciles in flight per shard.
    in_flight: Vec<u32>,
    /// Until when this replica's member Lease is its own (`None`: not now).
    valid_until: Option<Instant>,
    /// Ownership lapsed and the work begun before it has not all finished: ownership is not
    /// valid again until it has (its writes are refused meanwhile, so it ends soon).
    lapsed: bool,
    /// Runs of the leader's controllers in flight ([`LeaderPermit`]).
    leading_runs: u32,
    /// Lapses so far: a term of ownership is the time between two.
    lapses: u64,
}

/// This replica's ownership. Cheap to clone (an `Arc` inside).
#[derive(Debug, Clone)]
pub struct Ownership {
    id: ReplicaId,
    inner: Arc<Mutex<Inner>>,
    finished: Arc<Notify>,
    leader: Arc<watch::Sender<bool>>,
    /// Changes at each lapse, for the writes waiting on an answer (`fence`).
    lapsed_tx: Arc<watch::Sender<u64>>,
    gained_tx: mpsc::UnboundedSender<Vec<u16>>,
    gained_rx: Arc<Mutex<Option<mpsc::UnboundedReceiver<Vec<u16>>>>>,
    settled: Arc<watch::Sender<bool>>,
}

/// Held by a reconcile of an owned Application: while any is held, the shard is not given away.
#[derive(Debug)]
pub struct Permit {
    ownership: Ownership,
    shard: u16,
}

/// Held while the leader's controllers run ([`Ownership::leading_run`]).
#[derive(Debug)]
pub struct LeaderPermit {
    ownership: Ownership,
}

impl Drop for LeaderPermit {
    fn drop(&mut self) {
        let mut inner = self.ownership.lock();
        inner.leading_runs = inner.leading_runs.saturating_sub(1);
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut inner = self.ownership.lock();
        let n = &mut inner.in_flight[usize::from(self.shard)];
        *n = n.saturating_sub(1);
        drop(inner);
        self.ownership.finished.notify_waiters();
    }
}

impl Ownership {
    /// Nothing owned yet.
    pub fn new(id: ReplicaId) -> Self {
        let (gained_tx, gained_rx) = mpsc::unbounded_channel();
        Self {
            id,
            inner: Arc::new(Mutex::new(Inner {
                active: vec![false; usize::from(SHARDS)],
                in_flight: vec![0; usize::from(SHARDS)],
                valid_until: None,
                lapsed: false,
                leading_runs: 0,
                lapses: 0,
            })),
            finished: Arc::new(Notify::new()),
            leader: Arc::new(watch::channel(false).0),
            lapsed_tx: Arc::new(watch::channel(0).0),
            gained_tx,
            gained_rx: Arc::new(Mutex::new(Some(gained_rx))),
            settled: Arc::new(watch::channel(false).0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding this lock leaves plain data behind: keep using it.
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// This replica's identity.
    pub fn id(&self) -> &ReplicaId {
        &self.id
    }

    /// Start a reconcile of the Application `name` in `namespace` if this replica owns it now.
    pub fn enter(&self, namespace: &str, name: &str) -> Option<Permit> {
        let shard = shard_of(namespace, name);
        let mut inner = self.lock();
        let valid = inner.valid_until.is_some_and(|until| Instant::now() < until);
        if !valid || !inner.active[usize::from(shard)] {
            return None;
        }
        inner.in_flight[usize::from(shard)] += 1;
        Some(Permit {
            ownership: self.clone(),
            shard,
        })
    }

    /// Whether this replica's member Lease is its own now: writes are allowed (the fence of fenced clients is open).
    pub fn valid(&self) -> bool {
        self.lock().valid_until.is_some_and(|until| Instant::now() < until)
    }

    /// The shards held and accepting work.
    pub fn shards(&self) -> Vec<u16> {
        let inner = self.lock();
        (0..SHARDS).filter(|s| inner.active[usize::from(*s)]).collect()
    }

    /// Whether this replica leads (runs the ApplicationSet and image-update controllers).
    pub fn leader(&self) -> watch::Receiver<bool> {
        self.leader.subscribe()
    }

    /// The shards gained, each time some are: the controller reconciles their Applications. The
    /// first caller takes the receiver; later ones get `None`.
    pub fn gained(&self) -> Option<mpsc::UnboundedReceiver<Vec<u16>>> {
        self.gained_rx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    /// Resolves once the coordinator has made its first pass (taken what it could), so a
    /// controller starting after it reconciles its Applications from its first list.
    pub async fn settled(&self) {
        let _ = self.settled.subscribe().wait_for(|s| *s).await;
    }

    pub(crate) fn set_settled(&self) {
        self.settled.send_replace(true);
    }

    /// Until when ownership is valid now.
    pub(crate) fn valid_until(&self) -> Option<Instant> {
        self.lock().valid_until
    }

    /// Told of every lapse from now on (subscribe before reading [`Ownership::term`]).
    pub(crate) fn lapses(&self) -> watch::Receiver<u64> {
        self.lapsed_tx.subscribe()
    }

    /// Until when ownership is valid now, and which term of ownership that is (it changes at each
    /// lapse): a write sent in one term must not be waited for into the next.
    pub(crate) fn term(&self) -> (Option<Instant>, u64) {
        let inner = self.lock();
        (inner.valid_until, inner.lapses)
    }

    /// Ownership is valid until `until`. After a lapse it stays invalid (and this returns the
    /// number of reconciles and leader runs still going) until all the work begun before the lapse
    /// has finished: a reconcile that was running when the process froze must not write again.
    pub(crate) fn set_valid_until(&self, until: Instant) -> Result<(), u32> {
        let mut inner = self.lock();
        if inner.lapsed {
            let busy = inner.in_flight.iter().sum::<u32>() + inner.leading_runs;
            if busy > 0 {
                return Err(busy);
            }
            inner.lapsed = false;
        }
        inner.valid_until = Some(until);
        Ok(())
    }

    /// Ownership lapsed (the member Lease could not be renewed in time, or another process wrote
    /// it): nothing is owned, no write is allowed, and this replica does not lead.
    pub(crate) fn lapse(&self) {
        let mut inner = self.lock();
        inner.valid_until = None;
        inner.lapsed = true;
        inner.lapses += 1;
        // Under the lock: a reader of `term` after this sees the new term.
        self.lapsed_tx.send_replace(inner.lapses);
        inner.active.iter_mut().for_each(|a| *a = false);
        drop(inner);
        self.leader.send_replace(false);
    }

    /// Held while the leader's controllers run: after a lapse, ownership is valid again only once
    /// they have stopped.
    pub fn leading_run(&self) -> LeaderPermit {
        self.lock().leading_runs += 1;
        LeaderPermit {
            ownership: self.clone(),
        }
    }

    pub(crate) fn activate(&self, shards: &[u16]) {
        if shards.is_empty() {
            return;
        }
        let mut inner = self.lock();
        for s in shards {
            inner.active[usize::from(*s)] = true;
        }
        drop(inner);
        let _ = self.gained_tx.send(shards.to_vec());
    }

    /// Stop accepting work for `shard`; [`Ownership::drained`] then says when it is idle.
    pub(crate) fn deactivate(&self, shard: u16) {
        self.lock().active[usize::from(shard)] = false;
    }

    /// Whether `shard` is held and accepting work.
    pub(crate) fn is_active(&self, shard: u16) -> bool {
        self.lock().active[usize::from(shard)]
    }

    /// Resolves once no reconcile of `shard` is in flight.
    pub(crate) async fn drained(&self, shard: u16) {
        loop {
            let notified = self.finished.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.lock().in_flight[usize::from(shard)] == 0 {
                return;
            }
            notified.await;
        }
    }

    pub(crate) fn set_leader(&self, leader: bool) {
        self.leader.send_if_modified(|l| std::mem::replace(l, leader) != leader);
    }

    /// Own everything at once, without Leases, until `until` (unit tests of this crate).
    #[cfg(test)]
    fn own_all(&self, until: Instant) {
        let _ = self.set_valid_until(until);
        self.activate(&(0..SHARDS).collect::<Vec<_>>());
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn permits_hold_a_shard_until_they_are_dropped() {
        let o = Ownership::new(ReplicaId::new("r").expect("an id"));
        assert!(o.enter("ns", "a").is_none(), "nothing owned yet");
        o.own_all(Instant::now() + Duration::from_secs(60));
        let permit = o.enter("ns", "a").expect("owned");
        let shard = shard_of("ns", "a");
        o.deactivate(shard);
        assert!(o.enter("ns", "a").is_none(), "no new work once deactivated");
        let drained = o.drained(shard);
        tokio::pin!(drained);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), drained.as_mut())
                .await
                .is_err(),
            "a reconcile is in flight"
        );
        drop(permit);
        tokio::time::timeout(Duration::from_secs(5), drained)
            .await
            .expect("drained once the permit is dropped");
        o.lapse();
        assert!(!o.valid());
        assert!(o.shards().is_empty());
    }

    #[test]
    fn after_a_lapse_ownership_waits_for_the_work_begun_before_it() {
        let o = Ownership::new(ReplicaId::new("r").expect("an id"));
        o.own_all(Instant::now() + Duration::from_secs(60));
        let running = o.enter("ns", "a").expect("owned");
        let leading = o.leading_run();
        o.lapse();
        assert!(!o.valid(), "nothing is written once lapsed");
        assert_eq!(o.set_valid_until(Instant::now() + Duration::from_secs(60)), Err(2));
        assert!(
            !o.valid(),
            "a renewal does not reopen the fence for the reconcile that was running"
        );
        drop(running);
        assert_eq!(o.set_valid_until(Instant::now() + Duration::from_secs(60)), Err(1));
        drop(leading);
        assert_eq!(o.set_valid_until(Instant::now() + Duration::from_secs(60)), Ok(()));
        assert!(o.valid());
        assert!(o.shards().is_empty(), "shards are taken again through the Leases");
    }

    #[tokio::test]
    async fn gains_reach_the_receiver() {
        let o = Ownership::new(ReplicaId::new("r").expect("an id"));
        let mut rx = o.gained().expect("the receiver");
        assert!(o.gained().is_none(), "taken once");
        o.activate(&[3, 4]);
        let got = tokio::time::timeout(Duration::from_secs(1), rx.recv())
            .await
            .expect("in time");
        assert_eq!(got, Some(vec![3, 4]));
    }
}

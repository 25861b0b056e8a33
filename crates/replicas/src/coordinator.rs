//! The loop each replica runs: renew its member Lease, observe the others, take the shards that
//! rendezvous hashing gives it once they are free, give away (after draining) those it no longer
//! should hold, and keep or take the leader's Lease. See the crate's documentation for the rules.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client, ResourceExt};
use tokio::sync::mpsc;

use crate::hashing::{SHARDS, owner_of};
use crate::identity::ReplicaId;
use crate::leases::{self, LEADER, MEMBER_PREFIX};
use crate::liveness::Observations;
use crate::ownership::Ownership;

/// How replicas coordinate.
#[derive(Debug, Clone)]
pub struct Settings {
    /// This replica.
    pub id: ReplicaId,
    /// Capstan's namespace, where the Leases live.
    pub namespace: String,
    /// How long a member Lease lasts without renewal before others take over its shards (15 s by
    /// default, as Kubernetes' own components). Renewed every third of it; this replica stops
    /// working two thirds into it when it could not renew.
    pub lease_duration: Duration,
}

impl Settings {
    fn renew_every(&self) -> Duration {
        self.lease_duration / 3
    }

    fn valid_for(&self) -> Duration {
        self.lease_duration * 2 / 3
    }

    fn duration_secs(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }
}

/// The running coordination of one replica: [`Coordinator::leave`] ends it.
pub struct Coordinator {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    ownership: Ownership,
}

impl Coordinator {
    /// Start coordinating with `client` (it must not be [`crate::fence::fenced`]: the renewals are
    /// what keeps the fence open).
    pub fn spawn(client: Client, settings: Settings) -> Self {
        let ownership = Ownership::new(settings.id.clone());
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let (drained_tx, drained_rx) = mpsc::unbounded_channel();
        let mut state = State {
            api: Api::namespaced(crate::fence::named(&client, &settings.id), &settings.namespace),
            settings,
            ownership: ownership.clone(),
            observations: Observations::default(),
            member: None,
            held: BTreeSet::new(),
            draining: BTreeSet::new(),
            drained_tx,
            drained_rx,
            leading: false,
        };
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(state.settings.renew_every());
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tokio::pin!(stopped);
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        state.step().await;
                        state.ownership.set_settled();
                    }
                    _ = &mut stopped => break,
                }
            }
            state.leave().await;
        });
        Self {
            stop: Some(stop),
            task,
            ownership,
        }
    }

    /// What this replica owns, for the controllers.
    pub fn ownership(&self) -> Ownership {
        self.ownership.clone()
    }

    /// Leave: stop accepting work, wait for the reconciles in flight, give every shard and the
    /// leader's Lease back and delete the member Lease, so the other replicas take over at once
    /// instead of after the lease duration. Call it after the controllers have stopped.
    pub async fn leave(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

struct State {
    api: Api<Lease>,
    settings: Settings,
    ownership: Ownership,
    observations: Observations,
    /// This replica's member Lease as last written.
    member: Option<Lease>,
    /// Shards whose Lease this replica wrote its name into while its ownership was valid.
    held: BTreeSet<u16>,
    /// Held shards no longer accepting work, waiting for their reconciles to finish.
    draining: BTreeSet<u16>,
    drained_tx: mpsc::UnboundedSender<u16>,
    drained_rx: mpsc::UnboundedReceiver<u16>,
    leading: bool,
}

impl State {
    async fn step(&mut self) {
        // Ownership that lapsed (no renewal in time: a partition, a frozen process) is gone for
        // good: what was held may have been taken over meanwhile. It is acquired again, by writes.
        if !self.held.is_empty() || self.leading {
            if !self.ownership.valid() {
                tracing::warn!(replica = %self.settings.id, "the member Lease was not renewed in time: stopped working on every shard");
                self.held.clear();
                self.draining.clear();
                self.leading = false;
                self.ownership.lapse();
            }
        }
        if !self.renew().await {
            return;
        }
        let leases = match leases::list(&self.api).await {
            Ok(leases) => leases,
            Err(e) => {
                tracing::warn!(error = %capstan_kube::describe_kube_error(&e), "cannot list the replicas' Leases");
                return;
            }
        };
        let now = Instant::now();
        let present: BTreeSet<String> = leases.iter().map(ResourceExt::name_any).collect();
        self.observations.retain(&present);
        let mut live: BTreeSet<String> = BTreeSet::new();
        let mut shards: BTreeMap<u16, Lease> = BTreeMap::new();
        let mut leader: Option<Lease> = None;
        for lease in leases {
            let name = lease.name_any();
            let rv = lease.resource_version().unwrap_or_default();
            self.observations.observe(&name, &rv, now);
            let duration = lease
                .spec
                .as_ref()
                .and_then(|s| s.lease_duration_seconds)
                .map_or(self.settings.lease_duration, |s| Duration::from_secs(s.max(1) as u64));
            if let Some(id) = name.strip_prefix(MEMBER_PREFIX) {
                if self.observations.live(&name, duration, now) {
                    live.insert(id.to_string());
                }
            } else if let Some(shard) = leases::shard_of_name(&name) {
                shards.insert(shard, lease);
            } else if name == LEADER {
                leader = Some(lease);
            }
        }
        live.insert(self.settings.id.to_string());
        let members: Vec<ReplicaId> = live.iter().filter_map(|id| ReplicaId::new(id).ok()).collect();
        let is_live = |holder: &str| live.contains(holder);

        // Shards whose reconciles have finished are given back.
        while let Ok(shard) = self.drained_rx.try_recv() {
            if let Some(lease) = shards.get(&shard).cloned() {
                self.release(shard, lease).await;
            }
        }

        let mut gained = Vec::new();
        for shard in 0..SHARDS {
            let desired = owner_of(shard, &members).is_some_and(|m| *m == self.settings.id);
            let lease = shards.get(&shard);
            let holder = lease.and_then(leases::holder);
            if self.held.contains(&shard) {
                if holder != Some(self.settings.id.as_str()) {
                    // Written by someone else: no longer this replica's.
                    tracing::warn!(
                        shard,
                        holder,
                        "a held shard's Lease names another holder: stopped working on it"
                    );
                    self.held.remove(&shard);
                    self.draining.remove(&shard);
                    self.ownership.deactivate(shard);
                } else if !desired && !self.draining.contains(&shard) {
                    self.drain(shard);
                }
                continue;
            }
            if !desired {
                continue;
            }
            let free = holder.is_none_or(|h| h == self.settings.id.as_str() || !is_live(h));
            if !free {
                continue;
            }
            let written = match lease {
                None => {
                    let new = leases::new_lease(
                        &leases::shard_name(shard),
                        "shard",
                        Some(&self.settings.id),
                        self.settings.duration_secs(),
                    );
                    leases::create(&self.api, &new).await.map(|l| l.is_some())
                }
                Some(lease) => leases::write_holder(
                    &self.api,
                    lease.clone(),
                    Some(&self.settings.id),
                    self.settings.duration_secs(),
                )
                .await
                .map(|_| true),
            };
            match written {
                Ok(true) => {
                    tracing::info!(shard, previous = holder, "took shard");
                    self.held.insert(shard);
                    gained.push(shard);
                }
                Ok(false) => {}
                Err(e) if leases::is_conflict(&e) => {}
                Err(e) => tracing::warn!(shard, error = %capstan_kube::describe_kube_error(&e), "cannot take shard"),
            }
        }
        // Only while the ownership is still valid (the writes above took time).
        if self.ownership.valid() {
            self.ownership.activate(&gained);
        } else if !gained.is_empty() {
            tracing::warn!(shards = gained.len(), "ownership lapsed while taking shards: not working on them");
        }
        self.lead(leader, &is_live).await;
    }

    /// Renew (or create) this replica's member Lease; whether ownership is valid afterwards.
    async fn renew(&mut self) -> bool {
        let started = Instant::now();
        let name = leases::member_name(&self.settings.id);
        let result = match self.member.take() {
            Some(lease) => {
                leases::write_holder(&self.api, lease, Some(&self.settings.id), self.settings.duration_secs()).await
            }
            None => match self.api.get_opt(&name).await {
                Ok(Some(lease)) => {
                    leases::write_holder(&self.api, lease, Some(&self.settings.id), self.settings.duration_secs()).await
                }
                Ok(None) => {
                    let new =
                        leases::new_lease(&name, "member", Some(&self.settings.id), self.settings.duration_secs());
                    match leases::create(&self.api, &new).await {
                        Ok(Some(lease)) => Ok(lease),
                        Ok(None) => return self.ownership.valid(),
                        Err(e) => Err(e),
                    }
                }
                Err(e) => Err(e),
            },
        };
        match result {
            Ok(lease) => {
                self.member = Some(lease);
                self.ownership.set_valid_until(started + self.settings.valid_for());
                true
            }
            Err(e) => {
                // Read again next time (a conflict: the Lease changed under this replica).
                tracing::warn!(error = %capstan_kube::describe_kube_error(&e), "cannot renew the member Lease");
                self.ownership.valid()
            }
        }
    }

    /// Stop accepting work for `shard` and give it back once its reconciles finished.
    fn drain(&mut self, shard: u16) {
        tracing::info!(shard, "giving shard away: waiting for its reconciles to finish");
        self.draining.insert(shard);
        self.ownership.deactivate(shard);
        let ownership = self.ownership.clone();
        let tx = self.drained_tx.clone();
        tokio::spawn(async move {
            ownership.drained(shard).await;
            let _ = tx.send(shard);
        });
    }

    /// Clear `shard`'s holder (its reconciles have finished).
    async fn release(&mut self, shard: u16, lease: Lease) {
        if !self.draining.contains(&shard) || self.ownership.is_active(shard) {
            return;
        }
        match leases::write_holder(&self.api, lease, None, self.settings.duration_secs()).await {
            Ok(_) => {
                tracing::info!(shard, "gave shard away");
                self.held.remove(&shard);
                self.draining.remove(&shard);
            }
            Err(e) => {
                tracing::warn!(shard, error = %capstan_kube::describe_kube_error(&e), "cannot give shard away; trying again");
                let _ = self.drained_tx.send(shard);
            }
        }
    }

    /// Keep leading, or take the leader's Lease when it is free or its holder is gone.
    async fn lead(&mut self, lease: Option<Lease>, is_live: &impl Fn(&str) -> bool) {
        let holder = lease.as_ref().and_then(leases::holder).map(str::to_string);
        let holder = holder.as_deref();
        if self.leading {
            if holder != Some(self.settings.id.as_str()) {
                tracing::warn!(holder, "the leader's Lease names another holder: no longer leading");
                self.leading = false;
            }
        } else if holder.is_none_or(|h| h == self.settings.id.as_str() || !is_live(h)) {
            let written = match lease {
                None => {
                    let new =
                        leases::new_lease(LEADER, "leader", Some(&self.settings.id), self.settings.duration_secs());
                    leases::create(&self.api, &new).await.map(|l| l.is_some())
                }
                Some(lease) => {
                    leases::write_holder(&self.api, lease, Some(&self.settings.id), self.settings.duration_secs())
                        .await
                        .map(|_| true)
                }
            };
            match written {
                Ok(taken) => {
                    if taken {
                        tracing::info!(previous = holder, "leading");
                    }
                    self.leading = taken;
                }
                Err(e) if leases::is_conflict(&e) => {}
                Err(e) => {
                    tracing::warn!(error = %capstan_kube::describe_kube_error(&e), "cannot take the leader's Lease")
                }
            }
        }
        self.ownership.set_leader(self.leading && self.ownership.valid());
    }

    /// Give everything back (the controllers have stopped) and delete the member Lease.
    async fn leave(&mut self) {
        self.ownership.set_leader(false);
        for shard in self.held.clone() {
            self.ownership.deactivate(shard);
            self.ownership.drained(shard).await;
        }
        let valid = self.ownership.valid();
        self.ownership.lapse();
        if !valid {
            return;
        }
        let mut names: Vec<String> = self.held.iter().map(|s| leases::shard_name(*s)).collect();
        if self.leading {
            names.push(LEADER.to_string());
        }
        for name in names {
            match self.api.get_opt(&name).await {
                Ok(Some(lease)) if leases::holder(&lease) == Some(self.settings.id.as_str()) => {
                    if let Err(e) = leases::write_holder(&self.api, lease, None, self.settings.duration_secs()).await {
                        tracing::warn!(lease = name, error = %capstan_kube::describe_kube_error(&e), "cannot give the Lease back");
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(lease = name, error = %capstan_kube::describe_kube_error(&e), "cannot read the Lease")
                }
            }
        }
        let rv = self.member.as_ref().and_then(ResourceExt::resource_version);
        if let Err(e) = leases::delete(&self.api, &leases::member_name(&self.settings.id), rv).await {
            tracing::warn!(error = %capstan_kube::describe_kube_error(&e), "cannot delete the member Lease");
        }
        tracing::info!(replica = %self.settings.id, "left: shards and leadership given back");
    }
}

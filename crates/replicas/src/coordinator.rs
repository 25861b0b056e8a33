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
    /// Bound one call to the API server: a third of the lease duration, so a stalled connection
    /// cannot hold up renewals (a late answer is treated as no answer).
    async fn bounded<T>(
        &self,
        what: &str,
        call: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Option<Result<T, kube::Error>> {
        match tokio::time::timeout(self.settings.renew_every(), call).await {
            Ok(result) => Some(result),
            Err(_) => {
                tracing::warn!(
                    what,
                    "no answer from the API server within a third of the lease duration"
                );
                None
            }
        }
    }

    /// Stop working on everything: what was held may be another replica's by now, and is taken
    /// again only through the Leases.
    fn lapse(&mut self, why: &str) {
        if !self.held.is_empty() || self.leading || self.ownership.valid() {
            tracing::warn!(replica = %self.settings.id, why, "stopped working on every shard");
        }
        self.held.clear();
        self.draining.clear();
        self.leading = false;
        self.ownership.lapse();
    }

    async fn step(&mut self) {
        // Ownership that lapsed (no renewal in time: a partition, a frozen process) is gone for
        // good: what was held may have been taken over meanwhile.
        if (!self.held.is_empty() || self.leading) && !self.ownership.valid() {
            self.lapse("the member Lease was not renewed in time");
        }
        if !self.renew().await {
            return;
        }
        let Some(listed) = self.bounded("listing the Leases", leases::list(&self.api)).await else {
            return;
        };
        let leases = match listed {
            Ok(leases) => leases,
            Err(e) => {
                tracing::warn!(error = %capstan_kube::describe_kube_error(&e), "cannot list the replicas' Leases");
                return;
            }
        };
        let now = Instant::now();
        let present: BTreeSet<String> = leases.iter().map(ResourceExt::name_any).collect();
        self.observations
            .forget_gone(&present, self.settings.lease_duration * 4, now);
        // Members: replicas whose Lease is there and live (they get shards); a replica whose Lease
        // was deleted still counts as live for what it holds until its lease duration has passed.
        let mut members: BTreeSet<String> = BTreeSet::new();
        let mut shards: BTreeMap<u16, Lease> = BTreeMap::new();
        let mut leader: Option<Lease> = None;
        let mut durations: BTreeMap<String, Duration> = BTreeMap::new();
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
                durations.insert(id.to_string(), duration);
                if self.observations.live(&name, duration, now) {
                    members.insert(id.to_string());
                }
            } else if let Some(shard) = leases::shard_of_name(&name) {
                shards.insert(shard, lease);
            } else if name == LEADER {
                leader = Some(lease);
            }
        }
        members.insert(self.settings.id.to_string());
        let me = self.settings.id.as_str().to_string();
        let default_duration = self.settings.lease_duration;
        let observations = &self.observations;
        let holder_live = |holder: &str| {
            holder == me
                || observations.live(
                    &format!("{MEMBER_PREFIX}{holder}"),
                    durations.get(holder).copied().unwrap_or(default_duration),
                    now,
                )
        };
        let live_holders: BTreeSet<String> = shards
            .values()
            .chain(leader.iter())
            .filter_map(leases::holder)
            .filter(|h| holder_live(h))
            .map(str::to_string)
            .collect();
        let members: Vec<ReplicaId> = members.iter().filter_map(|id| ReplicaId::new(id).ok()).collect();

        // A held shard whose Lease is gone or names another holder: something outside the protocol
        // changed it; nothing held can be trusted any more.
        if self
            .held
            .iter()
            .any(|s| shards.get(s).and_then(leases::holder) != Some(self.settings.id.as_str()))
        {
            self.lapse("a held shard's Lease was deleted or names another holder");
            return;
        }

        // Shards whose reconciles have finished are given back.
        while let Ok(shard) = self.drained_rx.try_recv() {
            if let Some(lease) = shards.get(&shard).cloned() {
                self.release(shard, lease).await;
            }
        }

        let mut gained = Vec::new();
        for shard in 0..SHARDS {
            let desired = owner_of(shard, &members).is_some_and(|m| *m == self.settings.id);
            if self.held.contains(&shard) {
                if !desired && !self.draining.contains(&shard) {
                    self.drain(shard);
                }
                continue;
            }
            let lease = shards.get(&shard);
            let holder = lease.and_then(leases::holder);
            if !desired {
                // Held by this identity's previous process (it died; its member Lease had expired
                // before this one took it): given back, or its holder would seem live forever.
                if let (Some(lease), Some(h)) = (lease, holder)
                    && h == self.settings.id.as_str()
                {
                    let write = leases::write_holder(&self.api, lease.clone(), None, self.settings.duration_secs());
                    if let Some(Ok(_)) = self.bounded("giving back a shard of a previous process", write).await {
                        tracing::info!(shard, "gave back a shard this identity's previous process held");
                    }
                }
                continue;
            }
            // Free: nobody's, this replica's own (from before a restart: its member Lease was
            // taken over only once it had expired), or a holder no longer live.
            if holder.is_some_and(|h| h != self.settings.id.as_str() && live_holders.contains(h)) {
                continue;
            }
            let write = async {
                match lease {
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
                }
            };
            match self.bounded("taking a shard", write).await {
                Some(Ok(true)) => {
                    tracing::info!(shard, previous = holder, "took shard");
                    self.held.insert(shard);
                    gained.push(shard);
                }
                Some(Ok(false)) | None => {}
                Some(Err(e)) if leases::is_conflict(&e) => {}
                Some(Err(e)) => {
                    tracing::warn!(shard, error = %capstan_kube::describe_kube_error(&e), "cannot take shard")
                }
            }
        }
        // Only while the ownership is still valid (the writes above took time).
        if self.ownership.valid() {
            self.ownership.activate(&gained);
        } else if !gained.is_empty() {
            self.lapse("ownership lapsed while taking shards");
            return;
        }
        self.lead(leader, &live_holders).await;
    }

    /// Renew (or create) this replica's member Lease; whether ownership is valid afterwards.
    ///
    /// A renewal keeps ownership only if it was answered before the previous one's validity
    /// ended (two thirds into the lease, a third before others may take over); a later answer
    /// means others may already have, so everything is dropped first. A conflict means another
    /// process writes this replica's Lease (two processes with one identity): everything is
    /// dropped, and the Lease is written again only once it has stopped changing for a lease
    /// duration — which is also how a replica restarted after a crash takes its identity back.
    async fn renew(&mut self) -> bool {
        let started = Instant::now();
        let before = self.ownership.valid_until();
        let name = leases::member_name(&self.settings.id);
        let duration = self.settings.duration_secs();
        let result = match self.member.clone() {
            Some(lease) => {
                self.bounded(
                    "renewing the member Lease",
                    leases::write_holder(&self.api, lease, Some(&self.settings.id), duration),
                )
                .await
            }
            None => match self.bounded("reading the member Lease", self.api.get_opt(&name)).await {
                Some(Ok(Some(lease))) => {
                    let rv = lease.resource_version().unwrap_or_default();
                    self.observations.observe(&name, &rv, started);
                    if self.observations.live(&name, self.settings.lease_duration, started) {
                        tracing::warn!(
                            replica = %self.settings.id,
                            "this replica's Lease is renewed by another process (the same --replica-id twice?) or was until recently: waiting for it to expire"
                        );
                        return false;
                    }
                    self.bounded(
                        "taking the member Lease",
                        leases::write_holder(&self.api, lease, Some(&self.settings.id), duration),
                    )
                    .await
                }
                Some(Ok(None)) => {
                    let new = leases::new_lease(&name, "member", Some(&self.settings.id), duration);
                    match self
                        .bounded("creating the member Lease", leases::create(&self.api, &new))
                        .await
                    {
                        Some(Ok(Some(lease))) => Some(Ok(lease)),
                        // Created meanwhile by another process with this identity.
                        Some(Ok(None)) => return false,
                        Some(Err(e)) => Some(Err(e)),
                        None => None,
                    }
                }
                Some(Err(e)) => Some(Err(e)),
                None => None,
            },
        };
        match result {
            Some(Ok(lease)) => {
                self.member = Some(lease);
                if before.is_some_and(|until| Instant::now() >= until) {
                    self.lapse("the member Lease was renewed too late");
                }
                match self.ownership.set_valid_until(started + self.settings.valid_for()) {
                    Ok(()) => true,
                    Err(busy) => {
                        tracing::info!(busy, "waiting for the work begun before the lapse to finish");
                        false
                    }
                }
            }
            Some(Err(e)) if leases::is_conflict(&e) => {
                self.member = None;
                tracing::error!(
                    replica = %self.settings.id,
                    "another process wrote this replica's Lease: two controllers have the same --replica-id"
                );
                self.lapse("another process wrote this replica's Lease");
                false
            }
            Some(Err(e)) => {
                tracing::warn!(error = %capstan_kube::describe_kube_error(&e), "cannot renew the member Lease");
                // Read again next time.
                self.ownership.valid()
            }
            None => self.ownership.valid(),
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
        let write = leases::write_holder(&self.api, lease, None, self.settings.duration_secs());
        match self.bounded("giving a shard away", write).await {
            Some(Ok(_)) => {
                tracing::info!(shard, "gave shard away");
                self.held.remove(&shard);
                self.draining.remove(&shard);
            }
            Some(Err(e)) => {
                tracing::warn!(shard, error = %capstan_kube::describe_kube_error(&e), "cannot give shard away; trying again");
                let _ = self.drained_tx.send(shard);
            }
            None => {
                let _ = self.drained_tx.send(shard);
            }
        }
    }

    /// Keep leading, or take the leader's Lease when it is free or its holder is gone.
    async fn lead(&mut self, lease: Option<Lease>, live_holders: &BTreeSet<String>) {
        let holder = lease.as_ref().and_then(leases::holder).map(str::to_string);
        let holder = holder.as_deref();
        if self.leading {
            if holder != Some(self.settings.id.as_str()) {
                // Written by someone else: as with a held shard, nothing can be trusted.
                self.lapse("the leader's Lease was deleted or names another holder");
                return;
            }
        } else if holder.is_none_or(|h| h == self.settings.id.as_str() || !live_holders.contains(h)) {
            let duration = self.settings.duration_secs();
            let write = async {
                match lease {
                    None => {
                        let new = leases::new_lease(LEADER, "leader", Some(&self.settings.id), duration);
                        leases::create(&self.api, &new).await.map(|l| l.is_some())
                    }
                    Some(lease) => leases::write_holder(&self.api, lease, Some(&self.settings.id), duration)
                        .await
                        .map(|_| true),
                }
            };
            match self.bounded("taking the leader's Lease", write).await {
                Some(Ok(taken)) => {
                    if taken {
                        tracing::info!(previous = holder, "leading");
                    }
                    self.leading = taken;
                }
                Some(Err(e)) if leases::is_conflict(&e) => {}
                Some(Err(e)) => {
                    tracing::warn!(error = %capstan_kube::describe_kube_error(&e), "cannot take the leader's Lease")
                }
                None => {}
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
        // All at once: a process leaving at the end of a short grace period has little time, and
        // some thirty Leases one after another took over a second on a loaded API server.
        let this = &*self;
        let give_back = |name: String| async move {
            match this.bounded("reading a Lease", this.api.get_opt(&name)).await {
                Some(Ok(Some(lease))) if leases::holder(&lease) == Some(this.settings.id.as_str()) => {
                    let write = leases::write_holder(&this.api, lease, None, this.settings.duration_secs());
                    if let Some(Err(e)) = this.bounded("giving a Lease back", write).await {
                        tracing::warn!(lease = name, error = %capstan_kube::describe_kube_error(&e), "cannot give the Lease back");
                    }
                }
                Some(Err(e)) => {
                    tracing::warn!(lease = name, error = %capstan_kube::describe_kube_error(&e), "cannot read the Lease")
                }
                _ => {}
            }
        };
        futures::future::join_all(names.into_iter().map(give_back)).await;
        let rv = self.member.as_ref().and_then(ResourceExt::resource_version);
        let member = leases::member_name(&self.settings.id);
        let delete = leases::delete(&self.api, &member, rv);
        if let Some(Err(e)) = self.bounded("deleting the member Lease", delete).await {
            tracing::warn!(error = %capstan_kube::describe_kube_error(&e), "cannot delete the member Lease");
        }
        tracing::info!(replica = %self.settings.id, "left: shards and leadership given back");
    }
}

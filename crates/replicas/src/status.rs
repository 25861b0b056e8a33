//! Who owns what, read from the Leases by anyone (`capstan controller status`): each replica, when
//! it last renewed (by its own clock), the shards it holds, how many Applications those hold, and
//! which replica leads.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::{Api, ResourceExt};

use crate::hashing::shard_of;
use crate::leases::{self, LEADER, MEMBER_PREFIX};

/// One replica as the Leases describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replica {
    /// Its identity (`?` for shards whose holder has no member Lease).
    pub id: String,
    /// When it last renewed its member Lease (its clock), if it has one.
    pub renewed: Option<Timestamp>,
    /// Whether that renewal is within the lease duration of now (this machine's clock).
    pub live: bool,
    /// The shards it holds.
    pub shards: Vec<u16>,
    /// The Applications in those shards.
    pub applications: usize,
    /// Whether it holds the leader's Lease.
    pub leader: bool,
}

/// The replicas and their shares; Applications in shards nobody holds are counted under `None`.
#[derive(Debug, Clone, Default)]
pub struct Status {
    /// Every replica with a member Lease or a shard, by identity.
    pub replicas: Vec<Replica>,
    /// Applications whose shard has no holder.
    pub unowned: usize,
}

/// Read the Leases of `namespace` and attribute `apps` (namespace, name) to their replicas.
pub async fn read(client: kube::Client, namespace: &str, apps: &[(String, String)]) -> Result<Status, kube::Error> {
    let api: Api<Lease> = Api::namespaced(client, namespace);
    Ok(summarize(&leases::list(&api).await?, apps, Timestamp::now()))
}

/// [`read`] without the API server.
pub fn summarize(all: &[Lease], apps: &[(String, String)], now: Timestamp) -> Status {
    let mut replicas: BTreeMap<String, Replica> = BTreeMap::new();
    let entry = |replicas: &mut BTreeMap<String, Replica>, id: &str| {
        replicas.entry(id.to_string()).or_insert_with(|| Replica {
            id: id.to_string(),
            renewed: None,
            live: false,
            shards: Vec::new(),
            applications: 0,
            leader: false,
        });
    };
    let mut holders: BTreeMap<u16, String> = BTreeMap::new();
    for lease in all {
        let name = lease.name_any();
        let spec = lease.spec.clone().unwrap_or_default();
        if let Some(id) = name.strip_prefix(MEMBER_PREFIX) {
            entry(&mut replicas, id);
            if let Some(r) = replicas.get_mut(id) {
                r.renewed = spec.renew_time.map(|t| t.0);
                let duration = spec.lease_duration_seconds.unwrap_or(15).max(1);
                r.live = r
                    .renewed
                    .is_some_and(|t| now.duration_since(t).as_secs_f64() < f64::from(duration));
            }
        } else if let Some(holder) = leases::holder(lease) {
            entry(&mut replicas, holder);
            if let Some(shard) = leases::shard_of_name(&name) {
                holders.insert(shard, holder.to_string());
                if let Some(r) = replicas.get_mut(holder) {
                    r.shards.push(shard);
                }
            } else if name == LEADER
                && let Some(r) = replicas.get_mut(holder)
            {
                r.leader = true;
            }
        }
    }
    let mut unowned = 0;
    for (namespace, name) in apps {
        match holders
            .get(&shard_of(namespace, name))
            .and_then(|h| replicas.get_mut(h))
        {
            Some(r) => r.applications += 1,
            None => unowned += 1,
        }
    }
    Status {
        replicas: replicas.into_values().collect(),
        unowned,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::ReplicaId;

    #[test]
    fn applications_are_counted_under_the_holder_of_their_shard() {
        let a = ReplicaId::new("a").expect("an id");
        let mut member = leases::new_lease(&leases::member_name(&a), "member", Some(&a), 15);
        member.metadata.resource_version = Some("1".into());
        let app = ("capstan".to_string(), "web".to_string());
        let shard = shard_of(&app.0, &app.1);
        let held = leases::new_lease(&leases::shard_name(shard), "shard", Some(&a), 15);
        let leader = leases::new_lease(LEADER, "leader", Some(&a), 15);
        let other = (
            "capstan".to_string(),
            (0..)
                .map(|i| format!("x{i}"))
                .find(|n| shard_of("capstan", n) != shard)
                .expect("another shard"),
        );
        let status = summarize(&[member, held, leader], &[app, other], Timestamp::now());
        assert_eq!(status.replicas.len(), 1);
        let r = &status.replicas[0];
        assert_eq!((r.id.as_str(), r.live, r.leader, r.applications), ("a", true, true, 1));
        assert_eq!(r.shards, vec![shard]);
        assert_eq!(status.unowned, 1);
    }
}

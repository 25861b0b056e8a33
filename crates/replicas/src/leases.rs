//! The Leases replicas coordinate through, in Capstan's namespace: their names and labels, and the
//! writes, each conditional on the `resourceVersion` read (two replicas racing for one Lease: one
//! write succeeds, the other gets a conflict and reads again).

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};

use crate::identity::ReplicaId;

pub use crate::identity::MEMBER_PREFIX;
/// Prefix of a shard Lease's name; the rest is the shard's number, two digits.
pub const SHARD_PREFIX: &str = "capstan-shard-";
/// The leader's Lease.
pub const LEADER: &str = "capstan-leader";
/// The label every coordination Lease carries, with its role (`member`, `shard`, `leader`).
pub const ROLE_LABEL: &str = "capstan.dev/lease";

/// The member Lease of `id`.
pub fn member_name(id: &ReplicaId) -> String {
    format!("{MEMBER_PREFIX}{id}")
}

/// The Lease of `shard`.
pub fn shard_name(shard: u16) -> String {
    format!("{SHARD_PREFIX}{shard:02}")
}

/// The shard a shard Lease's name stands for.
pub fn shard_of_name(name: &str) -> Option<u16> {
    name.strip_prefix(SHARD_PREFIX)?
        .parse()
        .ok()
        .filter(|s| *s < crate::SHARDS)
}

/// The holder a Lease names (none when empty).
pub fn holder(lease: &Lease) -> Option<&str> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty())
}

/// The Leases replicas coordinate through.
pub async fn list(api: &Api<Lease>) -> Result<Vec<Lease>, kube::Error> {
    Ok(api.list(&ListParams::default().labels(ROLE_LABEL)).await?.items)
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

/// A new Lease `name` with role `role` held by `holder`.
pub fn new_lease(name: &str, role: &str, holder: Option<&ReplicaId>, duration_secs: i32) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(
                [
                    (ROLE_LABEL.to_string(), role.to_string()),
                    ("app.kubernetes.io/part-of".to_string(), "capstan".to_string()),
                ]
                .into(),
            ),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: holder.map(ToString::to_string),
            lease_duration_seconds: Some(duration_secs),
            acquire_time: holder.map(|_| now()),
            renew_time: holder.map(|_| now()),
            lease_transitions: Some(0),
            ..Default::default()
        }),
    }
}

/// Write `lease` (read before, its `resourceVersion` kept) with `holder` and a new renew time;
/// a new holder also gets a new acquire time and one more transition. Fails with a conflict when
/// the Lease changed since it was read.
pub async fn write_holder(
    api: &Api<Lease>,
    mut lease: Lease,
    holder: Option<&ReplicaId>,
    duration_secs: i32,
) -> Result<Lease, kube::Error> {
    let name = lease.metadata.name.clone().unwrap_or_default();
    let spec = lease.spec.get_or_insert_with(Default::default);
    let changed = spec.holder_identity.as_deref().filter(|h| !h.is_empty()) != holder.map(ReplicaId::as_str);
    if changed {
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        spec.acquire_time = holder.map(|_| now());
    }
    spec.holder_identity = holder.map(ToString::to_string);
    spec.lease_duration_seconds = Some(duration_secs);
    spec.renew_time = Some(now());
    lease.metadata.managed_fields = None;
    api.replace(&name, &PostParams::default(), &lease).await
}

/// Create `lease`; `Ok(None)` when another replica created it first.
pub async fn create(api: &Api<Lease>, lease: &Lease) -> Result<Option<Lease>, kube::Error> {
    match api.create(&PostParams::default(), lease).await {
        Ok(created) => Ok(Some(created)),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
        Err(e) => Err(e),
    }
}

/// Delete Lease `name`, if it still has `resource_version`.
pub async fn delete(api: &Api<Lease>, name: &str, resource_version: Option<String>) -> Result<(), kube::Error> {
    let params = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            resource_version,
            uid: None,
        }),
        ..Default::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Whether `error` says the Lease changed since it was read (or was created meanwhile).
pub fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

//! Replicas of `capstan controller` coordinating through `coordination.k8s.io` Leases in Capstan's
//! namespace, so that several processes share the Applications and nothing is reconciled by two at
//! once.
//!
//! - Every replica holds a **member Lease** (`capstan-replica-ID`) and renews it every third of the
//!   lease duration. Another replica counts it live while its `resourceVersion` keeps changing within
//!   the lease duration *as that other replica observes it* on its own monotonic clock, as
//!   Kubernetes' leader election does: clocks that disagree by seconds do not matter.
//! - Applications are spread over [`SHARDS`] shards by a stable hash of `namespace/name`
//!   ([`hashing`]); each shard is assigned to a live replica by rendezvous hashing, so a replica
//!   joining or leaving moves only its share. A shard is owned through its **shard Lease**
//!   (`capstan-shard-NN`): a replica works on a shard only after writing its name into that Lease
//!   (a write conditional on the `resourceVersion` it read), and gives a shard away only after
//!   its reconciles of that shard have finished, by clearing the holder — the **fenced handover**.
//!   A shard whose holder is no longer live is taken over once the holder's lease has expired.
//! - One replica is **leader** (`capstan-leader`) and runs the ApplicationSet and image-update
//!   controllers.
//! - A replica that cannot renew its member Lease in time stops on its own: its ownership lapses
//!   two thirds into the lease duration, before any other replica may take over, and from then on
//!   [`fence::fenced`] clients refuse to send any write.
//!
//! Modules: [`identity`] (who this replica is), [`hashing`] (shards and rendezvous; pure),
//! [`liveness`] (observed renewals; pure), [`ownership`] (what this replica may work on now, and
//! the permits of reconciles in flight), [`leases`] (names, labels and conditional writes),
//! [`coordinator`] (the loop that renews, observes, acquires and releases), [`fence`] (a client
//! that refuses writes once ownership lapsed), [`status`] (who owns what, for `capstan controller
//! status`).

pub mod coordinator;
pub mod fence;
pub mod hashing;
pub mod identity;
pub mod leases;
pub mod liveness;
pub mod ownership;
pub mod status;

pub use coordinator::{Coordinator, Settings};
pub use hashing::SHARDS;
pub use identity::ReplicaId;
pub use ownership::{LeaderPermit, Ownership, Permit};

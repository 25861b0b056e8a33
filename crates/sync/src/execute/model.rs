//! What a sync is given and what it gives back: the execution settings, progress and outcome.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use capstan_api::application::ResourceResult;
use capstan_health_rules::HealthRules;
use capstan_kube::{ObjectKey, OwnWrites};
use serde_json::Value;
use tokio::sync::Semaphore;

/// Result message of objects that already equalled Git and were not applied again.
pub const UNCHANGED: &str = "unchanged";

/// Result message of objects deleted and created again (`Force=true`): a resumed run of the
/// operation does not delete them a second time (see [`ExecuteOptions::recreated`]).
pub const RECREATED: &str = "deleted and recreated";

/// The longest a forced recreation waits for the old object (and, with foreground deletion, its
/// dependents) to be gone; shorter when the wave timeout is.
pub const RECREATE_TIMEOUT: Duration = Duration::from_secs(120);

/// How many write requests of syncs may be in flight to one cluster: the objects of one wave are
/// applied this many at a time, and the syncs of several Applications to one cluster share the limit
/// (see [`ExecuteOptions::writes`]). On the playground's 2-core API server a first sync of 2,000
/// ConfigMaps took 2.2 s with 64 at a time against 2.5 s with 16; the API server's own limit of
/// mutating requests in flight is 200 by default (more are answered 429, which the client retries).
pub const PARALLELISM: usize = 64;

/// How one sync operation runs (the sync options it was given among them, see [`SyncOptions`]).
#[derive(Debug, Clone)]
pub struct ExecuteOptions {
    /// Delete tracked objects that are no longer in Git.
    pub prune: bool,
    /// Validate with the API server, change nothing.
    pub dry_run: bool,
    /// Prune after everything else.
    pub prune_last: bool,
    /// Apply only OutOfSync objects (objects that already equal Git are kept as they are).
    pub apply_out_of_sync_only: bool,
    /// Create the destination namespace if it is missing.
    pub create_namespace: bool,
    /// The destination namespace.
    pub destination_namespace: String,
    /// Only these objects (all when empty).
    pub selected: Vec<ObjectKey>,
    /// `Force=true`: every object the sync applies is deleted (foreground: its dependents first),
    /// and created again from Git once it is gone.
    pub force: bool,
    /// Objects (`GROUP/KIND/NAMESPACE/NAME`) an interrupted run of this operation already deleted and
    /// created again: applied, not deleted again.
    pub recreated: HashSet<String>,
    /// How long one wave may take to become healthy (and a hook to complete).
    pub wave_timeout: Duration,
    /// Hook tasks (`PHASE:KEY`) already completed by an interrupted run of this operation.
    pub completed_hooks: HashSet<String>,
    /// This operation's run (its start time, kept when it resumes after a controller restart or
    /// on another replica): written on every hook it creates (`capstan.dev/hook-run`), so that a
    /// resumed run adopts a named hook its interrupted run created — still running or done —
    /// instead of deleting and running it again. Empty: hooks are never adopted.
    pub run: String,
    /// The write requests (applies, prunes, validations) in flight to the destination, shared by
    /// the syncs of every Application that deploys there: at most [`PARALLELISM`].
    pub writes: Arc<Semaphore>,
    /// Where the versions this sync writes are recorded, so the destination's watches know them as
    /// Capstan's own (see [`OwnWrites`]).
    pub own_writes: OwnWrites,
    /// The operators' custom health rules (Lua and CEL), tried before the built-in ones when waiting
    /// for a wave or a hook.
    pub health: HealthRules,
}

impl Default for ExecuteOptions {
    fn default() -> Self {
        Self {
            prune: false,
            dry_run: false,
            prune_last: false,
            apply_out_of_sync_only: true,
            create_namespace: false,
            destination_namespace: String::new(),
            selected: Vec::new(),
            force: false,
            recreated: HashSet::new(),
            wave_timeout: Duration::from_secs(600),
            completed_hooks: HashSet::new(),
            run: String::new(),
            writes: Arc::new(Semaphore::new(PARALLELISM)),
            own_writes: OwnWrites::default(),
            health: HealthRules::default(),
        }
    }
}

/// Progress of a running sync.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    /// What is happening now (names the object being waited for).
    pub message: String,
    /// Results so far.
    pub results: Vec<ResourceResult>,
}

/// The end of a sync.
#[derive(Debug, Clone, Default)]
pub struct SyncOutcome {
    /// Whether every task succeeded.
    pub succeeded: bool,
    /// Summary or the first error.
    pub message: String,
    /// Per-object results.
    pub results: Vec<ResourceResult>,
    /// The last state the sync saw of each object it applied, waited for or deleted (`None`:
    /// deleted), with only Capstan's own `managedFields` entry: the API server's answers to its
    /// requests. Hooks are not included.
    pub observed: HashMap<ObjectKey, Option<Value>>,
}

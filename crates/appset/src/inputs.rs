//! What generation reads from the outside world — registered clusters and checkouts of the Git
//! repositories the generators name — gathered beforehand by the caller.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A registered cluster, as the clusters generator sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterInfo {
    /// Cluster name (`in-cluster` for the cluster Capstan runs in).
    pub name: String,
    /// API server URL.
    #[serde(default)]
    pub server: String,
    /// The cluster's labels (what `clusters.selector` matches).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The cluster's annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// A repository at a revision that a git generator reads.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GitSource {
    /// Repository URL, as written in the generator.
    pub repo_url: String,
    /// Branch, tag or commit; never empty (`HEAD` when the generator gives none).
    pub revision: String,
}

impl GitSource {
    /// The source a generator names; an empty revision means `HEAD`.
    pub fn new(repo_url: &str, revision: &str) -> Self {
        let revision = revision.trim();
        Self {
            repo_url: repo_url.trim().to_string(),
            revision: if revision.is_empty() {
                "HEAD".into()
            } else {
                revision.into()
            },
        }
    }
}

/// What generation reads from the outside world, gathered beforehand by the caller.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    /// Registered clusters. `in-cluster` is added by the clusters generator unless present here,
    /// which a cluster is by its server URL alone (`https://kubernetes.default.svc`; it is then named
    /// `in-cluster`). The name `in-cluster` with another server, and two clusters with the same name
    /// or server, are errors.
    pub clusters: Vec<ClusterInfo>,
    /// A read-only checkout directory per git source.
    pub checkouts: HashMap<GitSource, PathBuf>,
}

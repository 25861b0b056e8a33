//! What an Application's sources resolved to: one revision per source (a commit of a Git repository,
//! or a version of a chart),
//! and the single revision string the rest of the controller compares, records and shows.
//!
//! A single-source Application's revision is its source's (a commit SHA). A multi-source
//! Application's is every source's revision in `spec.sources` order joined with `,` (commit SHAs and
//! chart versions contain no comma), so "a new revision" means "any source moved", and the same string
//! resolves again to the same revisions (a rollback to a history entry, a retry at one revision).

/// The revision of one source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceRevision {
    /// A commit of a Git repository.
    Git(capstan_source::Resolved),
    /// A version of a chart in a Helm repository or an OCI registry.
    Chart(capstan_source::ResolvedChart),
}

impl SourceRevision {
    /// The revision as recorded: the commit SHA, or the chart's version.
    pub fn id(&self) -> &str {
        match self {
            SourceRevision::Git(resolved) => &resolved.sha,
            SourceRevision::Chart(chart) => &chart.version,
        }
    }

    /// What a render of this source is cached by: the commit, or the chart's version and digest (a
    /// version re-published with other content renders again).
    pub fn cache_key(&self) -> String {
        match self {
            SourceRevision::Git(resolved) => resolved.sha.clone(),
            SourceRevision::Chart(chart) => match &chart.digest {
                Some(digest) => format!("{}@sha256:{digest}", chart.version),
                None => chart.version.clone(),
            },
        }
    }
}

/// The revisions of all of an Application's sources, in `spec.sources` order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// One per source.
    pub sources: Vec<SourceRevision>,
    /// Whether the Application has `spec.sources` (its revisions are reported as a list).
    pub multi: bool,
}

impl Resolved {
    /// The revision recorded in `status.sync.revision`, operations and history: the source's revision,
    /// or every source's joined with `,`.
    pub fn id(&self) -> String {
        self.sources
            .iter()
            .map(SourceRevision::id)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Every source's revision, for `status.sync.revisions` and `history[].revisions` (empty for a
    /// single-source Application, which reports `revision` only, as Argo CD does).
    pub fn revisions(&self) -> Vec<String> {
        if self.multi {
            self.sources.iter().map(|s| s.id().to_string()).collect()
        } else {
            Vec::new()
        }
    }
}

/// The revisions a recorded revision string asks for, one per source (see [`Resolved::id`]).
pub fn split(revision: &str) -> Vec<&str> {
    revision.split(',').map(str::trim).collect()
}

/// `revision` shortened for messages: each commit SHA to 7 characters (chart versions stay whole).
pub fn short(revision: &str) -> String {
    revision
        .split(',')
        .map(|r| {
            let is_sha = r.len() == 40 && r.bytes().all(|b| b.is_ascii_hexdigit());
            if is_sha { &r[..7] } else { r }
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(sha: &str) -> SourceRevision {
        SourceRevision::Git(capstan_source::Resolved {
            sha: sha.into(),
            ref_name: None,
        })
    }

    #[test]
    fn a_single_source_reports_its_revision_only() {
        let resolved = Resolved {
            sources: vec![git("a".repeat(40).as_str())],
            multi: false,
        };
        assert_eq!(resolved.id(), "a".repeat(40));
        assert!(resolved.revisions().is_empty());
    }

    #[test]
    fn several_sources_join_and_split_again() {
        let (a, b) = ("a".repeat(40), "b".repeat(40));
        let resolved = Resolved {
            sources: vec![git(&a), git(&b)],
            multi: true,
        };
        assert_eq!(resolved.id(), format!("{a},{b}"));
        assert_eq!(resolved.revisions(), vec![a.clone(), b.clone()]);
        assert_eq!(split(&resolved.id()), vec![a.as_str(), b.as_str()]);
        assert_eq!(short(&resolved.id()), "aaaaaaa,bbbbbbb");
        assert_eq!(short("1.2.3"), "1.2.3", "a chart version is not a SHA");
        assert_eq!(short("abc"), "abc");
    }
}

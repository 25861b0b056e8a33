//! A Helm repository's `index.yaml`, parsed under a budget: nesting depth, aliases and their
//! expansion, nodes and entries are bounded, so a hostile index costs at most what its (already
//! size-limited) bytes allow. Only what resolution needs is kept: per chart, its versions with their
//! archive URLs and digests.

use std::collections::HashMap;

use semver::Version;
use serde::Deserialize;

use super::version::parse_version;

/// One version of a chart.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub version: Version,
    /// The version as the index writes it.
    pub raw_version: String,
    pub urls: Vec<String>,
    /// Lower-case hex SHA-256 of the archive, if the index gives one.
    pub digest: Option<String>,
}

/// The parsed index.
#[derive(Debug, Default)]
pub(crate) struct Index {
    pub entries: HashMap<String, Vec<Entry>>,
}

#[derive(Deserialize)]
struct RawIndex {
    #[serde(default)]
    entries: Option<HashMap<String, Option<Vec<RawEntry>>>>,
}

#[derive(Deserialize)]
struct RawEntry {
    version: String,
    #[serde(default)]
    urls: Vec<String>,
    #[serde(default)]
    digest: Option<String>,
}

/// Parse `bytes`, accepting at most `max_entries` chart versions. The error says what is wrong.
pub(crate) fn parse(bytes: &[u8], max_entries: usize) -> Result<Index, String> {
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    let mut budget = serde_saphyr::Budget::default();
    // An index is entries → name → [version] → field → (list of) scalars: a handful of levels.
    budget.max_depth = 16;
    budget.max_aliases = 1_000;
    budget.max_anchors = 1_000;
    budget.max_nodes = max_entries.saturating_mul(64).max(10_000);
    budget.max_events = max_entries.saturating_mul(128).max(20_000);
    options.budget = Some(budget);
    options.alias_limits.max_total_replayed_events = 100_000;
    options.alias_limits.max_replay_stack_depth = 8;
    let raw: RawIndex = serde_saphyr::from_slice_with_options(bytes, options).map_err(|e| one_line(&e.to_string()))?;
    let mut index = Index::default();
    let mut count = 0usize;
    for (name, versions) in raw.entries.unwrap_or_default() {
        let versions = versions.unwrap_or_default();
        count += versions.len();
        if count > max_entries {
            return Err(format!("more than {max_entries} chart versions"));
        }
        let kept = versions
            .into_iter()
            .filter_map(|e| {
                let version = parse_version(&e.version)?;
                let digest = e
                    .digest
                    .map(|d| d.trim().trim_start_matches("sha256:").to_ascii_lowercase())
                    .filter(|d| !d.is_empty());
                Some(Entry {
                    version,
                    raw_version: e.version,
                    urls: e.urls,
                    digest,
                })
            })
            .collect();
        index.entries.insert(name, kept);
    }
    Ok(index)
}

fn one_line(message: &str) -> String {
    let mut s = message.split_whitespace().collect::<Vec<_>>().join(" ");
    s.truncate(400);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_and_digests() {
        let yaml = br#"
apiVersion: v1
entries:
  demo:
  - name: demo
    version: 1.2.3
    digest: ABCDEF
    urls: [demo-1.2.3.tgz]
    maintainers: [{name: a, email: b}]
  - name: demo
    version: not-a-version
    urls: [x.tgz]
  empty:
generated: "2024-01-01T00:00:00Z"
"#;
        let index = parse(yaml, 100).expect("parses");
        let demo = &index.entries["demo"];
        assert_eq!(demo.len(), 1);
        assert_eq!(demo[0].digest.as_deref(), Some("abcdef"));
        assert_eq!(demo[0].urls, ["demo-1.2.3.tgz"]);
        assert!(index.entries["empty"].is_empty());
    }

    #[test]
    fn too_many_entries_and_absurd_nesting_are_refused() {
        let yaml = b"entries:\n  a:\n  - version: 1.0.0\n  - version: 1.0.1\n";
        assert!(parse(yaml, 1).unwrap_err().contains("more than 1"));
        let deep = format!("entries: {}{}", "[".repeat(200), "]".repeat(200));
        assert!(parse(deep.as_bytes(), 100).is_err());
    }
}

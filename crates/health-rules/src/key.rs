//! Which kinds a rule applies to: Argo CD's override keys (`group/Kind`, `Kind` for the core group,
//! and glob patterns such as `*.crossplane.io/*`) and Flux's `apiVersion` + `kind` pairs.

use globset::{GlobBuilder, GlobMatcher};
use serde_json::Value;

/// An object's API group and kind. The version does not choose a rule, in Argo CD's keys or Flux's
/// expressions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupKind {
    /// The API group, empty for the core group.
    pub group: String,
    /// The kind.
    pub kind: String,
}

impl GroupKind {
    /// The group and kind of a Kubernetes object, `None` when it has no kind.
    pub fn of(obj: &Value) -> Option<GroupKind> {
        let kind = obj.get("kind")?.as_str()?;
        let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        Some(GroupKind {
            group: capstan_health::api_group(api_version).to_string(),
            kind: kind.to_string(),
        })
    }

    /// The key Argo CD uses for this kind: `group/Kind`, or `Kind` for the core group.
    pub fn override_key(&self) -> String {
        if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}/{}", self.group, self.kind)
        }
    }
}

/// The kinds one rule applies to.
#[derive(Debug)]
pub enum Selector {
    /// Exactly one group and kind.
    Exact(GroupKind),
    /// An Argo CD wildcard key, matched against [`GroupKind::override_key`] as Argo CD does: `*`
    /// matches any run of characters, `/` and `.` included.
    Glob(GlobMatcher),
    /// No kind (the rule's key does not name one; kept only to report it).
    Nothing,
}

impl Selector {
    /// The selector of an Argo CD override key (`group/Kind`, `Kind`, or a pattern).
    pub fn from_override_key(key: &str) -> Result<Selector, String> {
        if key.contains(['*', '?', '[', '{']) {
            let glob = GlobBuilder::new(key)
                .literal_separator(false)
                .build()
                .map_err(|e| format!("the pattern {key:?} does not parse: {e}"))?;
            return Ok(Selector::Glob(glob.compile_matcher()));
        }
        let (group, kind) = key.rsplit_once('/').unwrap_or(("", key));
        if kind.is_empty() {
            return Err(format!("{key:?} names no kind"));
        }
        Ok(Selector::Exact(GroupKind {
            group: group.to_string(),
            kind: kind.to_string(),
        }))
    }

    /// Exactly `group` and `kind`.
    pub fn exact(group: &str, kind: &str) -> Selector {
        Selector::Exact(GroupKind {
            group: group.to_string(),
            kind: kind.to_string(),
        })
    }

    /// Whether this selector chooses `gk`.
    pub fn matches(&self, gk: &GroupKind) -> bool {
        match self {
            Selector::Exact(exact) => exact == gk,
            Selector::Glob(glob) => glob.is_match(gk.override_key()),
            Selector::Nothing => false,
        }
    }

    /// Exact selectors are tried before patterns.
    pub fn is_exact(&self) -> bool {
        matches!(self, Selector::Exact(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gk(group: &str, kind: &str) -> GroupKind {
        GroupKind {
            group: group.into(),
            kind: kind.into(),
        }
    }

    #[test]
    fn group_and_kind_of_objects() {
        assert_eq!(
            GroupKind::of(&json!({"apiVersion": "apps/v1", "kind": "Deployment"})),
            Some(gk("apps", "Deployment"))
        );
        assert_eq!(
            GroupKind::of(&json!({"apiVersion": "v1", "kind": "ConfigMap"})),
            Some(gk("", "ConfigMap"))
        );
        assert_eq!(GroupKind::of(&json!({"apiVersion": "v1"})), None);
        assert_eq!(gk("", "ConfigMap").override_key(), "ConfigMap");
        assert_eq!(
            gk("cert-manager.io", "Certificate").override_key(),
            "cert-manager.io/Certificate"
        );
    }

    #[test]
    fn wildcards_match_like_argo_cd() {
        let s = Selector::from_override_key("*.crossplane.io/*").unwrap();
        assert!(s.matches(&gk("s3.aws.crossplane.io", "Bucket")));
        assert!(s.matches(&gk("pkg.crossplane.io", "Provider")));
        assert!(!s.matches(&gk("cert-manager.io", "Certificate")));
        assert!(!s.is_exact());
        let exact = Selector::from_override_key("ConfigMap").unwrap();
        assert!(exact.matches(&gk("", "ConfigMap")));
        assert!(!exact.matches(&gk("apps", "ConfigMap")));
        assert!(Selector::from_override_key("apps/").is_err());
        assert!(Selector::from_override_key("[").is_err());
    }
}

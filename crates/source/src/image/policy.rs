//! Choosing the newest tag of an image repository: pure functions of a tag list, so that what a
//! policy chooses is decided (and tested) without a registry.
//!
//! - [`Policy::Semver`]: tags that are semantic versions (`1.2.3`, `v1.2.3`, `1.2.3-rc.1+b.5`; all
//!   three numbers, an optional leading `v`) within a constraint in Helm's syntax (the chart
//!   module's parser: `^1.2`, `>=1.0 <2.0`, `~1.4`, `1.x`, `*`, `||` …); the highest wins. A
//!   pre-release is chosen only with `allow_prerelease`, and then counts as part of the release it
//!   precedes (`^1.0` admits `1.3.0-rc.1`, not `2.0.0-rc.1`).
//! - [`Policy::Pattern`]: tags matched by a regular expression (unanchored, as Flux does; write `^…$`
//!   for a whole-tag match), ordered by the whole tag or the value extracted from it (`$ts`,
//!   `${ts}`, `$1`), alphabetically or as a non-negative integer.
//! - [`Policy::Digest`]: one tag (`latest`) whose digest is followed.
//!
//! Every tag a policy does not take is listed in [`Choice::skipped`] with the reason; when none
//! qualifies the error names the policy and the nearest tags.

use std::cmp::Ordering;
use std::fmt;
use std::sync::LazyLock;

use regex::{Regex, RegexBuilder};
use semver::Version;

use crate::chart::version::{Constraint, exact};

/// The largest compiled regular expression (and lazy DFA) a pattern may make.
const REGEX_SIZE_LIMIT: usize = 1 << 20;
/// The longest pattern, constraint or extraction template accepted.
const MAX_TEXT: usize = 1024;
/// How many nearest tags a [`PolicyError::NoMatch`] names.
const NEAREST: usize = 5;

/// `$name`, `${name}` or `$1` in an extraction template.
static GROUP_REF: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"\$(?:\{([^}]*)\}|([A-Za-z0-9_]+))").ok());

/// How the newest tag is chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Policy {
    /// The highest semantic version within `constraint` (empty or `*`: any release).
    Semver {
        /// A constraint in Helm's syntax.
        constraint: String,
        /// Whether pre-releases (`1.2.0-rc.1`) may be chosen.
        allow_prerelease: bool,
    },
    /// The highest (or lowest) tag matched by `regex`, by the whole tag or an extracted value.
    Pattern {
        /// A regular expression (Rust `regex` syntax, which has no look-around or back-references).
        regex: String,
        /// What of the match is ordered: a template such as `$ts` or `$1`; the whole tag if `None`.
        extract: Option<String>,
        /// How the values are ordered.
        order: Order,
        /// Which end of the order is the newest.
        pick: Pick,
    },
    /// One tag, by name; its digest is what changes.
    Digest {
        /// The tag (`latest`).
        tag: String,
    },
}

/// How a [`Policy::Pattern`] orders the values it extracts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Byte-wise string order (ISO dates and zero-padded numbers sort right).
    #[default]
    Alphabetical,
    /// As non-negative integers (`20` after `9`); other values are skipped.
    Numerical,
}

/// Which end of the order a [`Policy::Pattern`] chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pick {
    /// The highest value is the newest.
    #[default]
    Highest,
    /// The lowest value is the newest.
    Lowest,
}

/// A tag a policy did not take, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The tag.
    pub tag: String,
    /// Why (`not a semantic version`, `outside the constraint ^1.0` …).
    pub reason: String,
}

/// What a policy chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// The chosen tag.
    pub tag: String,
    /// The tags that did not qualify, in the order given, with the reason. Tags that qualified but
    /// lost to the chosen one are not listed. A [`Policy::Digest`] skips nothing.
    pub skipped: Vec<Skipped>,
}

/// A policy that cannot be applied, or a tag list where nothing qualifies.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The semver constraint does not parse.
    #[error("invalid semver constraint {constraint:?}: {detail}")]
    InvalidConstraint {
        /// The constraint as written.
        constraint: String,
        /// What is wrong.
        detail: String,
    },
    /// The regular expression does not compile (or is too large).
    #[error("invalid tag pattern {regex:?}: {source}")]
    InvalidRegex {
        /// The pattern as written (cut to 200 characters).
        regex: String,
        /// The compiler's error.
        #[source]
        source: regex::Error,
    },
    /// The pattern or the extraction template is not usable.
    #[error("invalid tag pattern {text:?}: {reason}")]
    InvalidPattern {
        /// The pattern or template (cut to 200 characters).
        text: String,
        /// What is wrong.
        reason: String,
    },
    /// No tag qualifies.
    #[error(
        "no tag qualifies under {policy} (nearest: {})",
        if nearest.is_empty() { "no tags".to_string() } else { nearest.join(", ") }
    )]
    NoMatch {
        /// The policy, described.
        policy: String,
        /// The tags closest to qualifying (the highest versions, or a few tags).
        nearest: Vec<String>,
        /// Every tag that did not qualify, and why.
        skipped: Vec<Skipped>,
    },
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::Semver {
                constraint,
                allow_prerelease,
            } => {
                write!(f, "semver {constraint:?}")?;
                if *allow_prerelease {
                    write!(f, " with pre-releases")?;
                }
                Ok(())
            }
            Policy::Pattern {
                regex,
                extract,
                order,
                pick,
            } => {
                write!(f, "pattern {regex:?}")?;
                if let Some(e) = extract {
                    write!(f, " extracting {e:?}")?;
                }
                write!(f, " ({order:?}, {pick:?})")
            }
            Policy::Digest { tag } => write!(f, "digest of tag {tag:?}"),
        }
    }
}

impl Policy {
    /// Check the policy without applying it (constraint, regex and template).
    pub fn validate(&self) -> Result<(), PolicyError> {
        match self {
            Policy::Semver { constraint, .. } => constraint_of(constraint).map(|_| ()),
            Policy::Pattern { regex, extract, .. } => compile(regex, extract.as_deref()).map(|_| ()),
            Policy::Digest { tag } if tag.is_empty() => Err(PolicyError::InvalidPattern {
                text: String::new(),
                reason: "a digest policy names a tag".into(),
            }),
            Policy::Digest { .. } => Ok(()),
        }
    }

    /// The newest of `tags` under this policy.
    pub fn choose(&self, tags: &[String]) -> Result<Choice, PolicyError> {
        match self {
            Policy::Semver {
                constraint,
                allow_prerelease,
            } => self.semver(tags, constraint, *allow_prerelease),
            Policy::Pattern {
                regex,
                extract,
                order,
                pick,
            } => self.pattern(tags, regex, extract.as_deref(), *order, *pick),
            Policy::Digest { tag } => {
                self.validate()?;
                if tags.contains(tag) {
                    return Ok(Choice {
                        tag: tag.clone(),
                        skipped: Vec::new(),
                    });
                }
                Err(PolicyError::NoMatch {
                    policy: self.to_string(),
                    nearest: tags.iter().take(NEAREST).cloned().collect(),
                    skipped: Vec::new(),
                })
            }
        }
    }

    fn semver(&self, tags: &[String], constraint: &str, allow_prerelease: bool) -> Result<Choice, PolicyError> {
        let parsed = constraint_of(constraint)?;
        let mut skipped = Vec::new();
        let mut versions: Vec<(Version, &String)> = Vec::new();
        let mut best: Option<(Version, &String)> = None;
        for tag in tags {
            let Some(version) = exact(tag).filter(|_| !tag.trim().is_empty() && tag.trim() == tag) else {
                skipped.push(skip(
                    tag,
                    "not a semantic version (major.minor.patch, optional leading v)",
                ));
                continue;
            };
            versions.push((version.clone(), tag));
            if !version.pre.is_empty() && !allow_prerelease {
                skipped.push(skip(tag, "a pre-release (pre-releases are not allowed)"));
                continue;
            }
            let release = Version::new(version.major, version.minor, version.patch);
            if !(parsed.matches(&version) || (!version.pre.is_empty() && parsed.matches(&release))) {
                skipped.push(skip(tag, &format!("outside the constraint {constraint:?}")));
                continue;
            }
            if best.as_ref().is_none_or(|(v, t)| newer(&version, tag, v, t)) {
                best = Some((version, tag));
            }
        }
        match best {
            Some((_, tag)) => Ok(Choice {
                tag: tag.clone(),
                skipped,
            }),
            None => {
                versions.sort_by(|(a, ta), (b, tb)| order(b, tb, a, ta));
                Err(PolicyError::NoMatch {
                    policy: self.to_string(),
                    nearest: versions.into_iter().take(NEAREST).map(|(_, t)| t.clone()).collect(),
                    skipped,
                })
            }
        }
    }

    fn pattern(
        &self,
        tags: &[String],
        regex: &str,
        extract: Option<&str>,
        order: Order,
        pick: Pick,
    ) -> Result<Choice, PolicyError> {
        let re = compile(regex, extract)?;
        let mut skipped = Vec::new();
        let mut best: Option<(Key, &String)> = None;
        for tag in tags {
            let Some(caps) = re.captures(tag) else {
                skipped.push(skip(tag, &format!("does not match {regex:?}")));
                continue;
            };
            let value = match extract {
                Some(template) => {
                    let mut value = String::new();
                    caps.expand(template, &mut value);
                    value
                }
                None => tag.clone(),
            };
            if value.is_empty() {
                skipped.push(skip(tag, "the extracted value is empty"));
                continue;
            }
            let key = match order {
                Order::Alphabetical => Key::Text(value),
                Order::Numerical => match value.parse::<u128>() {
                    Ok(n) => Key::Number(n),
                    Err(_) => {
                        skipped.push(skip(tag, &format!("the extracted value {value:?} is not a number")));
                        continue;
                    }
                },
            };
            let better = match &best {
                None => true,
                Some((k, t)) => {
                    let by_key = match pick {
                        Pick::Highest => key.cmp(k),
                        Pick::Lowest => k.cmp(&key),
                    };
                    by_key.then_with(|| (*t).cmp(tag)) == Ordering::Greater
                }
            };
            if better {
                best = Some((key, tag));
            }
        }
        match best {
            Some((_, tag)) => Ok(Choice {
                tag: tag.clone(),
                skipped,
            }),
            None => Err(PolicyError::NoMatch {
                policy: self.to_string(),
                nearest: tags.iter().take(NEAREST).cloned().collect(),
                skipped,
            }),
        }
    }
}

/// What a pattern policy orders.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Number(u128),
    Text(String),
}

/// Whether `a` (tag `ta`) is newer than `b` (tag `tb`): higher precedence, then build metadata,
/// then the tag text (so `v1.2.3` and `1.2.3` always resolve the same way).
fn newer(a: &Version, ta: &str, b: &Version, tb: &str) -> bool {
    order(a, ta, b, tb) == Ordering::Greater
}

fn order(a: &Version, ta: &str, b: &Version, tb: &str) -> Ordering {
    a.cmp_precedence(b).then_with(|| a.cmp(b)).then_with(|| tb.cmp(ta))
}

fn skip(tag: &str, reason: &str) -> Skipped {
    Skipped {
        tag: tag.to_string(),
        reason: reason.to_string(),
    }
}

fn cut(text: &str) -> String {
    text.chars().take(200).collect()
}

fn constraint_of(constraint: &str) -> Result<Constraint, PolicyError> {
    Constraint::parse(constraint).map_err(|detail| PolicyError::InvalidConstraint {
        constraint: cut(constraint),
        detail,
    })
}

/// Compile `regex` within the size limits and check that `extract` names only groups it has.
fn compile(regex: &str, extract: Option<&str>) -> Result<Regex, PolicyError> {
    let invalid = |text: &str, reason: &str| PolicyError::InvalidPattern {
        text: cut(text),
        reason: reason.to_string(),
    };
    if regex.is_empty() {
        return Err(invalid(regex, "the pattern is empty"));
    }
    if regex.len() > MAX_TEXT {
        return Err(invalid(regex, "longer than 1024 characters"));
    }
    let re = RegexBuilder::new(regex)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|source| PolicyError::InvalidRegex {
            regex: cut(regex),
            source,
        })?;
    if let Some(template) = extract {
        if template.len() > MAX_TEXT {
            return Err(invalid(template, "longer than 1024 characters"));
        }
        let refs = GROUP_REF
            .as_ref()
            .ok_or_else(|| invalid(template, "internal: the group reference syntax did not compile"))?;
        let mut any = false;
        for caps in refs.captures_iter(template) {
            any = true;
            let name = caps.get(1).or_else(|| caps.get(2)).map_or("", |m| m.as_str());
            let exists = match name.parse::<usize>() {
                Ok(i) => i < re.captures_len(),
                Err(_) => re.capture_names().flatten().any(|n| n == name),
            };
            if !exists {
                return Err(invalid(template, &format!("the pattern has no group {name:?}")));
            }
        }
        if !any {
            return Err(invalid(template, "the template names no group ($name, ${name} or $1)"));
        }
    }
    Ok(re)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn semver(constraint: &str, allow_prerelease: bool) -> Policy {
        Policy::Semver {
            constraint: constraint.into(),
            allow_prerelease,
        }
    }

    fn pattern(regex: &str, extract: Option<&str>, order: Order) -> Policy {
        Policy::Pattern {
            regex: regex.into(),
            extract: extract.map(Into::into),
            order,
            pick: Pick::Highest,
        }
    }

    #[test]
    fn semver_picks_the_highest_within_the_constraint() -> Result<(), PolicyError> {
        let list = tags(&[
            "1.0.0",
            "v1.4.2",
            "1.10.0",
            "2.0.0",
            "latest",
            "1.5.0-rc.1",
            "main-3",
            "1.2",
        ]);
        let choice = semver("^1.0", false).choose(&list)?;
        assert_eq!(choice.tag, "1.10.0");
        let reasons: Vec<(&str, &str)> = choice
            .skipped
            .iter()
            .map(|s| (s.tag.as_str(), s.reason.as_str()))
            .collect();
        assert!(
            reasons
                .iter()
                .any(|(t, r)| *t == "latest" && r.starts_with("not a semantic version"))
        );
        assert!(
            reasons
                .iter()
                .any(|(t, r)| *t == "1.2" && r.starts_with("not a semantic version"))
        );
        assert!(reasons.iter().any(|(t, r)| *t == "2.0.0" && r.starts_with("outside")));
        assert!(
            reasons
                .iter()
                .any(|(t, r)| *t == "1.5.0-rc.1" && r.contains("pre-release"))
        );
        assert!(!reasons.iter().any(|(t, _)| *t == "1.0.0"), "losers are not skipped");
        assert_eq!(semver("", false).choose(&list)?.tag, "2.0.0");
        assert_eq!(semver("*", false).choose(&list)?.tag, "2.0.0");
        assert_eq!(
            semver("~1.4", false).choose(&list)?.tag,
            "v1.4.2",
            "a leading v is accepted"
        );
        assert_eq!(semver(">=1.0 <1.5", false).choose(&list)?.tag, "v1.4.2");
        Ok(())
    }

    #[test]
    fn prereleases_only_when_allowed() -> Result<(), PolicyError> {
        let list = tags(&["1.4.0", "1.5.0-rc.1", "1.5.0-rc.2", "2.0.0-rc.1"]);
        assert_eq!(semver("^1.0", false).choose(&list)?.tag, "1.4.0");
        assert_eq!(semver("^1.0", true).choose(&list)?.tag, "1.5.0-rc.2");
        assert_eq!(semver("*", true).choose(&list)?.tag, "2.0.0-rc.1");
        let list = tags(&["1.5.0-rc.2", "1.5.0"]);
        assert_eq!(
            semver("^1.0", true).choose(&list)?.tag,
            "1.5.0",
            "a release beats its pre-releases"
        );
        Ok(())
    }

    #[test]
    fn no_match_names_the_nearest() {
        let list = tags(&["1.0.0", "3.1.0", "latest", "3.2.0", "2.0.0"]);
        match semver("^4", false).choose(&list) {
            Err(PolicyError::NoMatch {
                policy,
                nearest,
                skipped,
            }) => {
                assert!(policy.contains("^4"), "{policy}");
                assert_eq!(nearest, ["3.2.0", "3.1.0", "2.0.0", "1.0.0"]);
                assert_eq!(skipped.len(), 5);
            }
            other => panic!("{other:?}"),
        }
        let err = semver("^1", false)
            .choose(&[])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("no tags"), "{err}");
        assert!(matches!(
            semver(">=>=", false).choose(&list),
            Err(PolicyError::InvalidConstraint { .. })
        ));
    }

    #[test]
    fn patterns_order_numerically_or_alphabetically() -> Result<(), PolicyError> {
        let list = tags(&["main-9", "main-20", "main-3", "dev-99", "main-x", "latest"]);
        let numeric = pattern(r"^main-(?P<ts>\d+)$", Some("$ts"), Order::Numerical).choose(&list)?;
        assert_eq!(numeric.tag, "main-20");
        assert!(
            numeric
                .skipped
                .iter()
                .any(|s| s.tag == "dev-99" && s.reason.contains("does not match"))
        );
        let alpha = pattern(r"^main-(\d+)$", Some("${1}"), Order::Alphabetical).choose(&list)?;
        assert_eq!(alpha.tag, "main-9");
        let loose = pattern(r"^main-(?P<ts>.+)$", Some("$ts"), Order::Numerical).choose(&list)?;
        assert!(
            loose
                .skipped
                .iter()
                .any(|s| s.tag == "main-x" && s.reason.contains("not a number"))
        );
        let whole = pattern("^main-", None, Order::Alphabetical).choose(&list)?;
        assert_eq!(whole.tag, "main-x");
        let lowest = Policy::Pattern {
            regex: r"^main-(\d+)$".into(),
            extract: Some("$1".into()),
            order: Order::Numerical,
            pick: Pick::Lowest,
        };
        assert_eq!(lowest.choose(&list)?.tag, "main-3");
        Ok(())
    }

    #[test]
    fn bad_patterns_are_refused() {
        assert!(matches!(
            pattern("(", None, Order::Alphabetical).validate(),
            Err(PolicyError::InvalidRegex { .. })
        ));
        // A pattern whose compiled program would be huge is refused, not built.
        assert!(matches!(
            pattern(r"\w{1000}\w{1000}\w{1000}", None, Order::Alphabetical).validate(),
            Err(PolicyError::InvalidRegex { .. })
        ));
        for (regex, extract) in [
            ("^a-(\\d+)$", "$ts"),
            ("^a-(\\d+)$", "$2"),
            ("^a-(\\d+)$", "ts"),
            ("", "$1"),
        ] {
            assert!(
                matches!(
                    pattern(regex, Some(extract), Order::Numerical).validate(),
                    Err(PolicyError::InvalidPattern { .. })
                ),
                "{regex} {extract}"
            );
        }
        assert!(
            pattern(&"a".repeat(2000), None, Order::Alphabetical)
                .validate()
                .is_err()
        );
    }

    #[test]
    fn digest_policy_follows_one_tag() -> Result<(), PolicyError> {
        let policy = Policy::Digest { tag: "latest".into() };
        assert_eq!(policy.choose(&tags(&["1.0", "latest"]))?.tag, "latest");
        assert!(matches!(
            policy.choose(&tags(&["1.0"])),
            Err(PolicyError::NoMatch { .. })
        ));
        Ok(())
    }
}

//! Chart versions and `targetRevision` constraints as Helm writes them (Masterminds semver), translated
//! to the `semver` crate's requirements.
//!
//! Accepted: an exact version (`1.2.3`, `v1.2.3`, `1.2.3-rc.1`), wildcards (`1.2.*`, `1.2.x`, `*`,
//! empty = the highest release), comparisons (`>=1.0.0 <2.0.0`, space or comma = AND, `>= 1.0` with a
//! space after the operator), `^3.1`, `~1.2` (`~>` too), `!=1.2.3`, hyphen ranges (`1.2 - 1.4.5`) and
//! `||` alternatives. A bare version means *equal* (Helm), not the `semver` crate's default caret.
//!
//! Pre-releases match only when a comparator names one on the same `major.minor.patch` (the
//! `semver` crate's rule): `>=1.0.0-0` selects `1.0.0-rc.1`; with no pre-release in the constraint,
//! none is ever selected — as in Helm. (Masterminds also lets `>=1.0.0-0` select `1.1.0-rc.1`; that
//! wider case is not reproduced.)
//!
//! Hand-written on top of `semver` because no maintained Rust crate parses Masterminds' syntax.

use semver::{Version, VersionReq};

/// A parsed `targetRevision`.
#[derive(Debug, Clone)]
pub(crate) struct Constraint {
    alternatives: Vec<Alternative>,
}

#[derive(Debug, Clone)]
struct Alternative {
    req: VersionReq,
    excluded: Vec<Version>,
}

/// Parse a version as chart repositories write them: an optional `v`, and missing minor or patch
/// numbers taken as 0 (`1.2` is `1.2.0`).
pub(crate) fn parse_version(text: &str) -> Option<Version> {
    let text = text.trim();
    let text = text.strip_prefix('v').unwrap_or(text);
    if let Ok(v) = Version::parse(text) {
        return Some(v);
    }
    let split = text.find(['-', '+']).unwrap_or(text.len());
    let (core, rest) = text.split_at(split);
    let parts = core.split('.').count();
    if core.is_empty() || parts >= 3 {
        return None;
    }
    let padded = format!("{core}{}{rest}", ".0".repeat(3 - parts));
    Version::parse(&padded).ok()
}

/// The exact version named by `text`, if it is one (no operator, no wildcard, all three numbers).
pub(crate) fn exact(text: &str) -> Option<Version> {
    let t = text.trim();
    let t = t.strip_prefix('v').unwrap_or(t);
    let core = &t[..t.find(['-', '+']).unwrap_or(t.len())];
    if core.split('.').count() != 3 {
        return None;
    }
    Version::parse(t).ok()
}

impl Constraint {
    /// Parse Helm's constraint syntax. The error says what is wrong.
    pub(crate) fn parse(text: &str) -> Result<Constraint, String> {
        let text = text.trim();
        if text.len() > 1024 {
            return Err("longer than 1024 characters".into());
        }
        let mut alternatives = Vec::new();
        for alt in text.split("||") {
            alternatives.push(parse_and(alt.trim())?);
        }
        Ok(Constraint { alternatives })
    }

    /// Whether `version` satisfies the constraint.
    pub(crate) fn matches(&self, version: &Version) -> bool {
        self.alternatives
            .iter()
            .any(|a| a.req.matches(version) && !a.excluded.iter().any(|e| same(e, version)))
    }

    /// The highest of `versions` that satisfies the constraint.
    pub(crate) fn best<'a, T>(&self, versions: impl IntoIterator<Item = (&'a Version, T)>) -> Option<(&'a Version, T)> {
        versions
            .into_iter()
            .filter(|(v, _)| self.matches(v))
            .max_by(|(a, _), (b, _)| a.cmp_precedence(b).then_with(|| a.cmp(b)))
    }
}

/// Equal ignoring build metadata, as semver precedence does.
fn same(a: &Version, b: &Version) -> bool {
    a.cmp_precedence(b).is_eq()
}

const OPERATORS: [&str; 8] = [">=", "<=", "~>", "!=", ">", "<", "=", "~"];

fn parse_and(text: &str) -> Result<Alternative, String> {
    // Tokens, with an operator written apart from its version joined to it (`>= 1.2`).
    let mut tokens: Vec<String> = Vec::new();
    let mut pending_op: Option<String> = None;
    for word in text.split([' ', ',', '\t']).filter(|w| !w.is_empty()) {
        if let Some(op) = pending_op.take() {
            tokens.push(format!("{op}{word}"));
        } else if OPERATORS.contains(&word) || word == "^" {
            pending_op = Some(word.to_string());
        } else {
            tokens.push(word.to_string());
        }
    }
    if let Some(op) = pending_op {
        return Err(format!("operator {op:?} without a version"));
    }
    let mut comparators: Vec<String> = Vec::new();
    let mut excluded = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        // Hyphen range: `A - B`.
        if tokens.get(i + 1).is_some_and(|t| t == "-") {
            let (Some(low), Some(high)) = (tokens.get(i), tokens.get(i + 2)) else {
                return Err("hyphen range without an upper bound".into());
            };
            comparators.push(format!(">={}", bare(low)));
            comparators.push(upper_inclusive(bare(high)));
            i += 3;
            continue;
        }
        let token = &tokens[i];
        i += 1;
        if let Some(v) = token.strip_prefix("!=") {
            excluded.push(parse_version(v).ok_or_else(|| format!("{v:?} is not a version"))?);
            continue;
        }
        let op = OPERATORS
            .iter()
            .chain(std::iter::once(&"^"))
            .find(|op| token.starts_with(**op))
            .copied();
        match op {
            Some("~>") => comparators.push(format!("~{}", bare(&token[2..]))),
            Some(op) => comparators.push(format!("{op}{}", bare(&token[op.len()..]))),
            None if is_wildcard(token) => comparators.push(bare(token).to_string()),
            None => comparators.push(format!("={}", bare(token))),
        }
    }
    let joined = if comparators.is_empty() {
        "*".to_string()
    } else {
        comparators.join(", ")
    };
    let req = VersionReq::parse(&joined).map_err(|e| e.to_string())?;
    Ok(Alternative { req, excluded })
}

fn bare(version: &str) -> &str {
    version.strip_prefix('v').unwrap_or(version)
}

fn is_wildcard(token: &str) -> bool {
    token.split('.').any(|p| matches!(p, "*" | "x" | "X"))
}

/// `<= B` for the upper end of a hyphen range; a partial `B` covers its whole range (`1.4` → `<1.5.0`).
fn upper_inclusive(high: &str) -> String {
    let parts: Vec<&str> = high.split('.').collect();
    match parts.as_slice() {
        [major] => match major.parse::<u64>() {
            Ok(m) => format!("<{}.0.0", m + 1),
            Err(_) => format!("<={high}"),
        },
        [major, minor] => match minor.parse::<u64>() {
            Ok(n) => format!("<{major}.{}.0", n + 1),
            Err(_) => format!("<={high}"),
        },
        _ => format!("<={high}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(constraint: &str, available: &[&str]) -> Option<String> {
        let c = Constraint::parse(constraint).unwrap_or_else(|e| panic!("{constraint}: {e}"));
        let versions: Vec<Version> = available.iter().map(|v| parse_version(v).expect(v)).collect();
        c.best(versions.iter().map(|v| (v, ()))).map(|(v, _)| v.to_string())
    }

    const ALL: &[&str] = &[
        "0.9.0",
        "1.0.0",
        "1.2.0",
        "1.2.3",
        "1.2.9",
        "1.3.0-rc.1",
        "1.3.0",
        "1.9.9",
        "2.0.0-beta.1",
        "2.0.0",
        "3.1.0",
        "3.4.5",
        "4.0.0",
    ];

    #[test]
    fn exact_versions_mean_equal() {
        assert_eq!(pick("1.2.3", ALL).as_deref(), Some("1.2.3"));
        assert_eq!(pick("v1.2.3", ALL).as_deref(), Some("1.2.3"));
        assert_eq!(pick("=1.2.0", ALL).as_deref(), Some("1.2.0"));
        assert_eq!(pick("1.3.0-rc.1", ALL).as_deref(), Some("1.3.0-rc.1"));
        assert_eq!(pick("1.2.4", ALL), None);
        assert!(exact("1.2.3").is_some() && exact("v1.2.3-rc.1").is_some());
        assert!(exact("1.2").is_none() && exact("^1.2.3").is_none() && exact("1.2.*").is_none());
    }

    #[test]
    fn wildcards() {
        assert_eq!(pick("1.2.*", ALL).as_deref(), Some("1.2.9"));
        assert_eq!(pick("1.2.x", ALL).as_deref(), Some("1.2.9"));
        assert_eq!(pick("1.x", ALL).as_deref(), Some("1.9.9"));
        assert_eq!(pick("*", ALL).as_deref(), Some("4.0.0"));
        assert_eq!(pick("", ALL).as_deref(), Some("4.0.0"));
        assert_eq!(
            pick("1.2", ALL).as_deref(),
            Some("1.2.9"),
            "a partial version is a range"
        );
    }

    #[test]
    fn ranges_with_space_or_comma_as_and() {
        assert_eq!(pick(">=1.0.0 <2.0.0", ALL).as_deref(), Some("1.9.9"));
        assert_eq!(pick(">=1.0.0, <1.3.0", ALL).as_deref(), Some("1.2.9"));
        assert_eq!(pick(">= 1.0 < 1.3", ALL).as_deref(), Some("1.2.9"));
        assert_eq!(pick(">1.2.3 <=1.3.0", ALL).as_deref(), Some("1.3.0"));
        assert_eq!(pick(">=5.0.0", ALL), None);
    }

    #[test]
    fn caret_and_tilde() {
        assert_eq!(pick("^3.1", ALL).as_deref(), Some("3.4.5"));
        assert_eq!(pick("^1.2.3", ALL).as_deref(), Some("1.9.9"));
        assert_eq!(pick("~1.2", ALL).as_deref(), Some("1.2.9"));
        assert_eq!(pick("~1.2.3", ALL).as_deref(), Some("1.2.9"));
        assert_eq!(pick("~>1.2", ALL).as_deref(), Some("1.2.9"));
        assert_eq!(pick("^0.9", ALL).as_deref(), Some("0.9.0"));
    }

    #[test]
    fn alternatives_not_equal_and_hyphen_ranges() {
        assert_eq!(pick("^3.1 || 1.2.*", ALL).as_deref(), Some("3.4.5"));
        assert_eq!(pick("0.9.* || ~1.2", ALL).as_deref(), Some("1.2.9"));
        assert_eq!(pick("1.2.* != 1.2.9", ALL).as_deref(), Some("1.2.3"));
        assert_eq!(pick("1.2 - 1.4", ALL).as_deref(), Some("1.3.0"));
        assert_eq!(pick("1.0.0 - 1.2.3", ALL).as_deref(), Some("1.2.3"));
    }

    #[test]
    fn pre_releases_only_when_named() {
        assert_eq!(pick(">=1.3.0-0 <1.3.0", ALL).as_deref(), Some("1.3.0-rc.1"));
        assert_eq!(pick("^2.0.0-0", ALL).as_deref(), Some("2.0.0"));
        assert_eq!(pick(">=2.0.0-0 <2.0.0", ALL).as_deref(), Some("2.0.0-beta.1"));
        assert_eq!(
            pick(">=1.2.9 <2.0.0", &["1.2.9", "1.3.0-rc.1"]).as_deref(),
            Some("1.2.9")
        );
        assert_eq!(pick("*", &["1.0.0", "2.0.0-rc.1"]).as_deref(), Some("1.0.0"));
    }

    #[test]
    fn invalid_constraints_are_refused() {
        for bad in [">=", "1.2.3.4", "latest", ">=1.0 -", "^^1", "!=x"] {
            assert!(Constraint::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn lenient_versions() {
        assert_eq!(parse_version("v1.2").map(|v| v.to_string()).as_deref(), Some("1.2.0"));
        assert_eq!(
            parse_version("1-rc.1").map(|v| v.to_string()).as_deref(),
            Some("1.0.0-rc.1")
        );
        assert!(parse_version("one").is_none() && parse_version("").is_none());
    }
}

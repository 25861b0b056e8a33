//! Label selectors of the list's `label` parameter, written as `kubectl -l` takes them: `key`,
//! `!key`, `key=value` (or `==`), `key!=value`, `key in (a,b)`, `key notin (a,b)`, joined by commas;
//! matched with kube's [`Expression`] so that the semantics are Kubernetes' own.

use std::collections::{BTreeMap, BTreeSet};

use kube::core::{Expression, SelectorExt};

/// The most expressions one request may carry (each is checked against every Application).
pub const MAX_EXPRESSIONS: usize = 20;

/// Why a selector does not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SelectorError {
    /// An expression is empty (`a=b,,c`).
    #[error("has an empty expression")]
    Empty,
    /// A `(` without its `)`, or the other way round.
    #[error("has unbalanced parentheses")]
    Parentheses,
    /// Not one of the forms a selector takes.
    #[error("cannot read {0:?}: use key, !key, key=value, key!=value, key in (a,b) or key notin (a,b)")]
    Syntax(String),
    /// A key that cannot be a label key.
    #[error("has an invalid label key {0:?}")]
    Key(String),
    /// Too many expressions.
    #[error("has {0} expressions; at most {MAX_EXPRESSIONS}")]
    TooMany(usize),
}

/// Parsed label selector: every expression must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector(Vec<Expression>);

fn valid_key(key: &str) -> bool {
    let (prefix, name) = key.rsplit_once('/').unwrap_or(("", key));
    let part = |s: &str, max: usize| {
        !s.is_empty() && s.len() <= max && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    };
    part(name, 63) && (prefix.is_empty() || part(prefix, 253)) && !key.starts_with('/')
}

fn key(raw: &str) -> Result<String, SelectorError> {
    let k = raw.trim();
    if valid_key(k) {
        Ok(k.to_string())
    } else {
        Err(SelectorError::Key(k.to_string()))
    }
}

/// Commas outside parentheses separate expressions.
fn split(text: &str) -> Result<Vec<&str>, SelectorError> {
    let (mut depth, mut start, mut parts) = (0i32, 0, Vec::new());
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(SelectorError::Parentheses);
        }
    }
    if depth != 0 {
        return Err(SelectorError::Parentheses);
    }
    parts.push(&text[start..]);
    Ok(parts)
}

fn set(raw: &str) -> Result<BTreeSet<String>, SelectorError> {
    let inner = raw
        .trim()
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| SelectorError::Syntax(raw.trim().to_string()))?;
    Ok(inner.split(',').map(|v| v.trim().to_string()).collect())
}

fn expression(raw: &str) -> Result<Expression, SelectorError> {
    let e = raw.trim();
    if e.is_empty() {
        return Err(SelectorError::Empty);
    }
    if let Some(k) = e.strip_prefix('!') {
        return Ok(Expression::DoesNotExist(key(k)?));
    }
    if let Some((k, v)) = e.split_once("!=") {
        return Ok(Expression::NotEqual(key(k)?, v.trim().to_string()));
    }
    if let Some((k, v)) = e.split_once("==").or_else(|| e.split_once('=')) {
        return Ok(Expression::Equal(key(k)?, v.trim().to_string()));
    }
    if let Some((k, rest)) = e.split_once(char::is_whitespace) {
        let rest = rest.trim_start();
        if let Some(values) = rest.strip_prefix("notin") {
            return Ok(Expression::NotIn(key(k)?, set(values)?));
        }
        if let Some(values) = rest.strip_prefix("in") {
            return Ok(Expression::In(key(k)?, set(values)?));
        }
        return Err(SelectorError::Syntax(e.to_string()));
    }
    Ok(Expression::Exists(key(e)?))
}

impl Selector {
    /// Every expression of `texts` (each a comma-separated selector; a repeated parameter adds its
    /// expressions to the others).
    pub fn parse<'a>(texts: impl IntoIterator<Item = &'a str>) -> Result<Selector, SelectorError> {
        let mut exprs = Vec::new();
        for text in texts.into_iter().filter(|t| !t.trim().is_empty()) {
            for part in split(text)? {
                exprs.push(expression(part)?);
            }
        }
        if exprs.len() > MAX_EXPRESSIONS {
            return Err(SelectorError::TooMany(exprs.len()));
        }
        exprs.sort();
        exprs.dedup();
        Ok(Selector(exprs))
    }

    /// Whether `labels` satisfy every expression.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|e| e.matches(labels))
    }

    /// The selector written back, in a canonical order (the same for the same expressions).
    pub fn canonical(&self) -> String {
        self.0.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn sel(s: &str) -> Selector {
        Selector::parse([s]).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn every_form_kubectl_takes() {
        let l = labels(&[("team", "t3"), ("env", "prod"), ("capstan.dev/tier", "web")]);
        for yes in [
            "team",
            "team=t3",
            "team==t3",
            "team!=t4",
            "!owner",
            "team in (t1, t3)",
            "team notin (t1,t2)",
            "owner notin (x)",
            "team=t3,env=prod",
            " env = prod , capstan.dev/tier=web",
            "env,team in (t3),!gone",
        ] {
            assert!(sel(yes).matches(&l), "{yes}");
        }
        for no in [
            "owner",
            "team=t4",
            "team!=t3",
            "!team",
            "team in (t1,t2)",
            "team notin (t3)",
            "team=t3,env=dev",
        ] {
            assert!(!sel(no).matches(&l), "{no}");
        }
        assert!(sel("").matches(&labels(&[])));
    }

    #[test]
    fn repeated_parameters_add_up_and_order_does_not_matter() {
        let both = Selector::parse(["team=t3", "env=prod"]).expect("parses");
        assert_eq!(both, sel("env=prod,team=t3"));
        assert_eq!(both.canonical(), sel("team=t3, env=prod").canonical());
    }

    #[test]
    fn nonsense_is_refused_with_a_reason() {
        assert_eq!(Selector::parse(["a,,b"]), Err(SelectorError::Empty));
        assert_eq!(Selector::parse(["a in (b"]), Err(SelectorError::Parentheses));
        assert_eq!(Selector::parse(["a in b)"]), Err(SelectorError::Parentheses));
        assert_eq!(Selector::parse(["a in ((b))"]), Err(SelectorError::Parentheses));
        assert!(matches!(Selector::parse(["a b"]), Err(SelectorError::Syntax(_))));
        assert!(matches!(Selector::parse(["a in b"]), Err(SelectorError::Syntax(_))));
        assert!(matches!(Selector::parse(["bad key=1"]), Err(SelectorError::Key(_))));
        assert!(matches!(Selector::parse(["k%y=1"]), Err(SelectorError::Key(_))));
        assert!(matches!(Selector::parse(["=1"]), Err(SelectorError::Key(_))));
        let many = (0..=MAX_EXPRESSIONS)
            .map(|i| format!("k{i}"))
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(
            Selector::parse([many.as_str()]),
            Err(SelectorError::TooMany(MAX_EXPRESSIONS + 1))
        );
    }
}

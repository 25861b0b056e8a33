//! Kubernetes label selectors (`matchLabels`, `matchExpressions` with `In`, `NotIn`, `Exists`,
//! `DoesNotExist`) over string maps: cluster labels for the clusters generator, flattened parameters
//! for a generator's post-filter `selector`, and Application labels for rollout steps.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

/// A validated label selector. Every requirement must hold; an empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Op {
    Equals(String),
    In(BTreeSet<String>),
    NotIn(BTreeSet<String>),
    Exists,
    DoesNotExist,
}

impl Selector {
    /// Validate `selector`. The error says which requirement is wrong and why
    /// (`matchExpressions[0]: unknown operator "Foo" ...`).
    pub fn new(selector: &LabelSelector) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for (key, value) in selector.match_labels.iter().flatten() {
            if key.is_empty() {
                return Err("matchLabels: empty key".into());
            }
            requirements.push(Requirement {
                key: key.clone(),
                op: Op::Equals(value.clone()),
            });
        }
        let expressions = selector.match_expressions.as_deref().unwrap_or_default();
        requirements.extend(Self::from_expressions(expressions)?.requirements);
        Ok(Self { requirements })
    }

    /// Validate a list of `matchExpressions` (as in a RollingSync step).
    pub fn from_expressions(expressions: &[LabelSelectorRequirement]) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for (i, expr) in expressions.iter().enumerate() {
            let at = format!("matchExpressions[{i}]");
            if expr.key.is_empty() {
                return Err(format!("{at}: empty key"));
            }
            let values: BTreeSet<String> = expr.values.iter().flatten().cloned().collect();
            let op = match expr.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => {
                    return Err(format!("{at}: operator {} needs at least one value", expr.operator));
                }
                "In" => Op::In(values),
                "NotIn" => Op::NotIn(values),
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err(format!("{at}: operator {} takes no values", expr.operator));
                }
                "Exists" => Op::Exists,
                "DoesNotExist" => Op::DoesNotExist,
                other => {
                    return Err(format!(
                        "{at}: unknown operator {other:?} (expected In, NotIn, Exists or DoesNotExist)"
                    ));
                }
            };
            requirements.push(Requirement {
                key: expr.key.clone(),
                op,
            });
        }
        Ok(Self { requirements })
    }

    /// Whether the selector has no requirement (and so matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| {
            let value = labels.get(&r.key);
            match &r.op {
                Op::Equals(want) => value == Some(want),
                Op::In(values) => value.is_some_and(|v| values.contains(v)),
                Op::NotIn(values) => value.is_none_or(|v| !values.contains(v)),
                Op::Exists => value.is_some(),
                Op::DoesNotExist => value.is_none(),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn expr(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn match_labels_and_expressions_all_must_hold() {
        let sel = Selector::new(&LabelSelector {
            match_labels: Some(labels(&[("env", "prod")])),
            match_expressions: Some(vec![
                expr("region", "In", &["eu", "us"]),
                expr("tier", "NotIn", &["test"]),
                expr("upgrade_testing", "Exists", &[]),
                expr("frozen", "DoesNotExist", &[]),
            ]),
        })
        .unwrap();
        assert!(sel.matches(&labels(&[
            ("env", "prod"),
            ("region", "eu"),
            ("upgrade_testing", "true")
        ])));
        assert!(!sel.matches(&labels(&[
            ("env", "staging"),
            ("region", "eu"),
            ("upgrade_testing", "true")
        ])));
        assert!(!sel.matches(&labels(&[
            ("env", "prod"),
            ("region", "ap"),
            ("upgrade_testing", "true")
        ])));
        assert!(!sel.matches(&labels(&[("env", "prod"), ("region", "eu")])));
        assert!(!sel.matches(&labels(&[
            ("env", "prod"),
            ("region", "eu"),
            ("upgrade_testing", "1"),
            ("tier", "test")
        ])));
        assert!(!sel.matches(&labels(&[
            ("env", "prod"),
            ("region", "eu"),
            ("upgrade_testing", "1"),
            ("frozen", "yes")
        ])));
    }

    #[test]
    fn empty_selector_matches_everything() {
        let sel = Selector::new(&LabelSelector::default()).unwrap();
        assert!(sel.is_empty());
        assert!(sel.matches(&BTreeMap::new()));
    }

    #[test]
    fn invalid_selectors_are_rejected_with_the_requirement() {
        let err = Selector::from_expressions(&[expr("a", "Exists", &[]), expr("env", "Foo", &["x"])]).unwrap_err();
        assert!(
            err.starts_with("matchExpressions[1]: unknown operator \"Foo\""),
            "{err}"
        );
        let err = Selector::from_expressions(&[expr("env", "In", &[])]).unwrap_err();
        assert!(err.contains("operator In needs at least one value"), "{err}");
        let err = Selector::from_expressions(&[expr("env", "Exists", &["x"])]).unwrap_err();
        assert!(err.contains("takes no values"), "{err}");
    }
}

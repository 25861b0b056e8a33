//! Kubernetes label selectors (`matchLabels`, `matchExpressions` with `In`, `NotIn`, `Exists`,
//! `DoesNotExist`) over string maps: cluster labels for the clusters generator and for a policy's
//! `clusterSelector`, flattened parameters for a generator's post-filter `selector`, Application
//! labels for rollout steps, and the object and namespace labels of a policy's `matchConstraints`.
//!
//! Matching is kube's ([`kube::core::Selector`]). Validation is Capstan's own because it is stricter
//! than kube's conversion and names the requirement at fault, as the API server does: `In`/`NotIn`
//! need values, `Exists`/`DoesNotExist` take none, keys are not empty.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::core::{Expression, SelectorExt};

/// A validated label selector. Every requirement must hold; an empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector(kube::core::Selector);

/// Why a selector is invalid, naming the requirement.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// A `matchLabels` entry with an empty key.
    #[error("matchLabels: empty key")]
    EmptyLabelKey,
    /// A `matchExpressions` entry with an empty key.
    #[error("matchExpressions[{index}]: empty key")]
    EmptyKey {
        /// Index of the expression.
        index: usize,
    },
    /// `In`/`NotIn` without values.
    #[error("matchExpressions[{index}]: operator {operator} needs at least one value")]
    NoValues {
        /// Index of the expression.
        index: usize,
        /// The operator.
        operator: String,
    },
    /// `Exists`/`DoesNotExist` with values.
    #[error("matchExpressions[{index}]: operator {operator} takes no values")]
    UnexpectedValues {
        /// Index of the expression.
        index: usize,
        /// The operator.
        operator: String,
    },
    /// Any other operator.
    #[error("matchExpressions[{index}]: unknown operator {operator:?} (expected In, NotIn, Exists or DoesNotExist)")]
    UnknownOperator {
        /// Index of the expression.
        index: usize,
        /// The operator.
        operator: String,
    },
}

impl Selector {
    /// Validate `selector`. The error says which requirement is wrong and why
    /// (`matchExpressions[0]: unknown operator "Foo" ...`).
    pub fn new(selector: &LabelSelector) -> Result<Self, SelectorError> {
        let mut expressions = Vec::new();
        for (key, value) in selector.match_labels.iter().flatten() {
            if key.is_empty() {
                return Err(SelectorError::EmptyLabelKey);
            }
            expressions.push(Expression::Equal(key.clone(), value.clone()));
        }
        let requirements = selector.match_expressions.as_deref().unwrap_or_default();
        expressions.extend(Self::from_expressions(requirements)?.0);
        Ok(Self(expressions.into_iter().collect()))
    }

    /// Validate a list of `matchExpressions` (as in a RollingSync step).
    pub fn from_expressions(requirements: &[LabelSelectorRequirement]) -> Result<Self, SelectorError> {
        let mut expressions = Vec::new();
        for (index, req) in requirements.iter().enumerate() {
            if req.key.is_empty() {
                return Err(SelectorError::EmptyKey { index });
            }
            let values: std::collections::BTreeSet<String> = req.values.iter().flatten().cloned().collect();
            let operator = req.operator.clone();
            let key = req.key.clone();
            expressions.push(match req.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => return Err(SelectorError::NoValues { index, operator }),
                "In" => Expression::In(key, values),
                "NotIn" => Expression::NotIn(key, values),
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err(SelectorError::UnexpectedValues { index, operator });
                }
                "Exists" => Expression::Exists(key),
                "DoesNotExist" => Expression::DoesNotExist(key),
                _ => return Err(SelectorError::UnknownOperator { index, operator }),
            });
        }
        Ok(Self(expressions.into_iter().collect()))
    }

    /// Whether the selector has no requirement (and so matches everything).
    pub fn is_empty(&self) -> bool {
        self.0.selects_all()
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.matches(labels)
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
        let err = Selector::from_expressions(&[expr("a", "Exists", &[]), expr("env", "Foo", &["x"])])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("matchExpressions[1]: unknown operator \"Foo\""),
            "{err}"
        );
        let err = Selector::from_expressions(&[expr("env", "In", &[])])
            .unwrap_err()
            .to_string();
        assert!(err.contains("operator In needs at least one value"), "{err}");
        let err = Selector::from_expressions(&[expr("env", "Exists", &["x"])])
            .unwrap_err()
            .to_string();
        assert!(err.contains("takes no values"), "{err}");
    }
}

//! `clusters`: one parameter set per registered cluster whose labels match the selector, plus
//! `in-cluster` when the selector is empty (and no registered cluster already describes it).

use capstan_api::applicationset::ClusterGenerator;
use capstan_api::cluster::{IN_CLUSTER_NAME, IN_CLUSTER_SERVER};

use super::ParamSet;
use super::selector::Selector;
use crate::generate::{ClusterInfo, GenerateError, Inputs};
use crate::params::{Params, normalize_name};

/// The matching clusters as parameter sets (sorted by cluster name): `name`, `nameNormalized`,
/// `server`, `metadata.labels.KEY`, `metadata.annotations.KEY`, `values.KEY`.
pub(crate) fn generate(g: &ClusterGenerator, place: &str, inputs: &Inputs) -> Result<Vec<ParamSet>, GenerateError> {
    let selector = Selector::new(&g.selector).map_err(|message| GenerateError::InvalidSelector {
        place: format!("{place}.selector"),
        message,
    })?;
    let mut clusters: Vec<&ClusterInfo> = inputs.clusters.iter().collect();
    let local = ClusterInfo {
        name: IN_CLUSTER_NAME.into(),
        server: IN_CLUSTER_SERVER.into(),
        ..Default::default()
    };
    let described = clusters
        .iter()
        .any(|c| c.name == IN_CLUSTER_NAME || c.server == IN_CLUSTER_SERVER);
    if !described && selector.is_empty() {
        clusters.push(&local);
    }
    clusters.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| a.server.cmp(&b.server)));

    let mut sets = Vec::new();
    for cluster in clusters.into_iter().filter(|c| selector.matches(&c.labels)) {
        let origin = format!("cluster {:?}", cluster.name);
        let mut params = Params::new();
        params.insert("name".into(), cluster.name.clone());
        params.insert("nameNormalized".into(), normalize_name(&cluster.name));
        params.insert("server".into(), cluster.server.clone());
        for (k, v) in &cluster.labels {
            params.insert(format!("metadata.labels.{k}"), v.clone());
        }
        for (k, v) in &cluster.annotations {
            params.insert(format!("metadata.annotations.{k}"), v.clone());
        }
        super::add_values(&g.values, &mut params, place, &origin)?;
        sets.push(ParamSet { params, origin });
    }
    Ok(sets)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

    use super::*;

    fn cluster(name: &str, labels: &[(&str, &str)]) -> ClusterInfo {
        ClusterInfo {
            name: name.into(),
            server: format!("https://{name}.example:6443"),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            annotations: BTreeMap::from([("owner".to_string(), format!("team-{name}"))]),
        }
    }

    fn inputs() -> Inputs {
        Inputs {
            clusters: vec![
                cluster("Spoke_B", &[("env", "production"), ("upgrade_testing", "true")]),
                cluster("spoke-a", &[("env", "staging")]),
            ],
            ..Default::default()
        }
    }

    fn names(sets: &[ParamSet]) -> Vec<&str> {
        sets.iter().map(|s| s.params["name"].as_str()).collect()
    }

    #[test]
    fn empty_selector_gives_every_cluster_and_in_cluster() {
        let sets = generate(&ClusterGenerator::default(), "generators[0].clusters", &inputs()).unwrap();
        assert_eq!(names(&sets), ["Spoke_B", "in-cluster", "spoke-a"]);
        let local = &sets[1].params;
        assert_eq!(local["server"], IN_CLUSTER_SERVER);
        let b = &sets[0].params;
        assert_eq!(b["nameNormalized"], "spoke-b");
        assert_eq!(b["server"], "https://Spoke_B.example:6443");
        assert_eq!(b["metadata.labels.env"], "production");
        assert_eq!(b["metadata.labels.upgrade_testing"], "true");
        assert_eq!(b["metadata.annotations.owner"], "team-Spoke_B");
    }

    #[test]
    fn selector_filters_and_excludes_in_cluster() {
        let g = ClusterGenerator {
            selector: LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "env".into(),
                    operator: "NotIn".into(),
                    values: Some(vec!["staging".into()]),
                }]),
            },
            ..Default::default()
        };
        let sets = generate(&g, "generators[0].clusters", &inputs()).unwrap();
        assert_eq!(names(&sets), ["Spoke_B"]);

        let g = ClusterGenerator {
            selector: LabelSelector {
                match_labels: Some(BTreeMap::from([("env".to_string(), "staging".to_string())])),
                match_expressions: None,
            },
            ..Default::default()
        };
        assert_eq!(names(&generate(&g, "x", &inputs()).unwrap()), ["spoke-a"]);
    }

    #[test]
    fn a_registered_in_cluster_replaces_the_implicit_one_and_its_labels_count() {
        let mut inputs = inputs();
        inputs.clusters.push(ClusterInfo {
            name: IN_CLUSTER_NAME.into(),
            server: IN_CLUSTER_SERVER.into(),
            labels: BTreeMap::from([("env".to_string(), "staging".to_string())]),
            ..Default::default()
        });
        let g = ClusterGenerator {
            selector: LabelSelector {
                match_labels: Some(BTreeMap::from([("env".to_string(), "staging".to_string())])),
                match_expressions: None,
            },
            ..Default::default()
        };
        assert_eq!(names(&generate(&g, "x", &inputs).unwrap()), ["in-cluster", "spoke-a"]);
        let all = generate(&ClusterGenerator::default(), "x", &inputs).unwrap();
        assert_eq!(
            names(&all),
            ["Spoke_B", "in-cluster", "spoke-a"],
            "in-cluster listed once"
        );
    }

    #[test]
    fn values_are_substituted_with_the_cluster_params() {
        let mut g = ClusterGenerator {
            selector: LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "env".into(),
                    operator: "Exists".into(),
                    values: None,
                }]),
            },
            values: BTreeMap::from([
                ("revision".to_string(), "{{metadata.labels.env}}-branch".to_string()),
                ("fixed".to_string(), "x".to_string()),
            ]),
            ..Default::default()
        };
        let sets = generate(&g, "generators[0].clusters", &inputs()).unwrap();
        let a = sets.iter().find(|s| s.params["name"] == "spoke-a").unwrap();
        assert_eq!(a.params["values.revision"], "staging-branch");
        assert_eq!(a.params["values.fixed"], "x");
        // With an empty selector in-cluster is included; it has no labels: the value cannot be
        // resolved for it, which is an error rather than a value with "{{...}}" left in it.
        g.selector = LabelSelector::default();
        let err = generate(&g, "generators[0].clusters", &inputs()).unwrap_err();
        assert_eq!(err.reason(), "MissingParameter");
        assert!(
            err.to_string().starts_with(
                "generators[0].clusters.values.revision: parameter \"metadata.labels.env\" is not defined for cluster \"in-cluster\""
            ),
            "{err}"
        );
    }

    #[test]
    fn unknown_operator_is_an_invalid_selector() {
        let g = ClusterGenerator {
            selector: LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "env".into(),
                    operator: "Foo".into(),
                    values: Some(vec!["x".into()]),
                }]),
            },
            ..Default::default()
        };
        let err = generate(&g, "generators[1].clusters", &inputs()).unwrap_err();
        assert_eq!(err.reason(), "InvalidSelector");
        assert!(
            err.to_string()
                .starts_with("generators[1].clusters.selector: matchExpressions[0]: unknown operator \"Foo\""),
            "{err}"
        );
    }
}

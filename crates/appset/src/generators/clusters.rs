//! `clusters`: one parameter set per registered cluster whose labels match the selector, plus
//! `in-cluster` when the selector is empty (and no registered cluster already describes it, which one
//! does by having `in-cluster`'s server, `https://kubernetes.default.svc`).

use capstan_api::applicationset::ClusterGenerator;
use capstan_api::cluster::{IN_CLUSTER_NAME, IN_CLUSTER_SERVER};

use super::ParamSet;
use super::selector::Selector;
use crate::error::GenerateError;
use crate::inputs::{ClusterInfo, Inputs};
use crate::params::{Params, normalize_name};

/// The matching clusters as parameter sets (sorted by cluster name): `name`, `nameNormalized`,
/// `server`, `metadata.labels.KEY`, `metadata.annotations.KEY`, `values.KEY`.
pub(crate) fn generate(g: &ClusterGenerator, place: &str, inputs: &Inputs) -> Result<Vec<ParamSet>, GenerateError> {
    let selector = Selector::new(&g.selector).map_err(|err| GenerateError::InvalidSelector {
        place: format!("{place}.selector"),
        message: err.to_string(),
    })?;
    // `in-cluster` is recognised by its server alone: a cluster with that server adds its labels and
    // annotations to it and is named `in-cluster`; the name with another server is refused.
    let mut clusters: Vec<ClusterInfo> = Vec::with_capacity(inputs.clusters.len() + 1);
    for cluster in &inputs.clusters {
        let mut cluster = cluster.clone();
        if cluster.server == IN_CLUSTER_SERVER {
            cluster.name = IN_CLUSTER_NAME.into();
        } else if cluster.name == IN_CLUSTER_NAME {
            return Err(GenerateError::InvalidCluster {
                place: place.to_string(),
                message: format!(
                    "cluster {IN_CLUSTER_NAME:?} has server {:?}: the name is reserved for the cluster Capstan \
                     runs in ({IN_CLUSTER_SERVER})",
                    cluster.server
                ),
            });
        }
        let same = |o: &&ClusterInfo| o.name == cluster.name || (!o.server.is_empty() && o.server == cluster.server);
        if let Some(other) = clusters.iter().find(same) {
            return Err(GenerateError::InvalidCluster {
                place: place.to_string(),
                message: if other.name == cluster.name {
                    format!("two clusters are named {:?}", cluster.name)
                } else {
                    format!(
                        "clusters {:?} and {:?} have the same server {}",
                        other.name, cluster.name, cluster.server
                    )
                },
            });
        }
        clusters.push(cluster);
    }
    let described = clusters.iter().any(|c| c.server == IN_CLUSTER_SERVER);
    if !described && selector.is_empty() {
        clusters.push(ClusterInfo {
            name: IN_CLUSTER_NAME.into(),
            server: IN_CLUSTER_SERVER.into(),
            ..Default::default()
        });
    }
    clusters.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| a.server.cmp(&b.server)));

    let mut sets = Vec::new();
    for cluster in clusters.iter().filter(|c| selector.matches(&c.labels)) {
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
    fn in_cluster_is_recognised_by_its_server_only() {
        // Another name with in-cluster's server describes in-cluster, under its usual name.
        let mut with_hub = inputs();
        with_hub.clusters.push(ClusterInfo {
            name: "hub".into(),
            server: IN_CLUSTER_SERVER.into(),
            labels: BTreeMap::from([("env".to_string(), "hub".to_string())]),
            ..Default::default()
        });
        let all = generate(&ClusterGenerator::default(), "x", &with_hub).unwrap();
        assert_eq!(
            names(&all),
            ["Spoke_B", "in-cluster", "spoke-a"],
            "listed once, as in-cluster"
        );
        assert_eq!(all[1].params["server"], IN_CLUSTER_SERVER);
        assert_eq!(all[1].params["metadata.labels.env"], "hub");

        // The name in-cluster with another server is an error, not the local cluster.
        let mut impostor = inputs();
        impostor.clusters.push(ClusterInfo {
            name: IN_CLUSTER_NAME.into(),
            server: "https://spoke.example:6443".into(),
            ..Default::default()
        });
        let err = generate(&ClusterGenerator::default(), "generators[0].clusters", &impostor).unwrap_err();
        assert_eq!(err.reason(), "InvalidCluster");
        assert!(
            err.to_string().starts_with(
                "generators[0].clusters: cluster \"in-cluster\" has server \"https://spoke.example:6443\""
            ),
            "{err}"
        );
    }

    #[test]
    fn two_clusters_with_one_name_or_server_are_an_error() {
        let mut same_server = inputs();
        same_server.clusters.push(ClusterInfo {
            name: "spoke-a-again".into(),
            server: "https://spoke-a.example:6443".into(),
            ..Default::default()
        });
        let err = generate(&ClusterGenerator::default(), "x", &same_server).unwrap_err();
        assert_eq!(err.reason(), "InvalidCluster");
        assert!(
            err.to_string().contains("same server https://spoke-a.example:6443"),
            "{err}"
        );

        let mut two_locals = inputs();
        for name in ["hub-a", "hub-b"] {
            two_locals.clusters.push(ClusterInfo {
                name: name.into(),
                server: IN_CLUSTER_SERVER.into(),
                ..Default::default()
            });
        }
        let err = generate(&ClusterGenerator::default(), "x", &two_locals).unwrap_err();
        assert!(
            err.to_string().contains("two clusters are named \"in-cluster\""),
            "{err}"
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

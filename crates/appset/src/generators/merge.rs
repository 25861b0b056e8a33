//! `merge`: the first child's sets are the base; a set of a later child whose `mergeKeys` values all
//! equal a base set's extends and overrides that base set. Later sets without a matching base are
//! dropped; base sets without a match are kept as they are (Argo CD's behaviour).

use std::collections::BTreeMap;

use capstan_api::applicationset::MergeGenerator;

use super::{Context, ParamSet};
use crate::error::GenerateError;
use crate::params::Params;

/// The merged parameter sets, in the base child's order.
pub(crate) fn generate(g: &MergeGenerator, place: &str, ctx: &Context<'_>) -> Result<Vec<ParamSet>, GenerateError> {
    if g.generators.len() < 2 {
        return Err(GenerateError::InvalidGenerator {
            place: place.to_string(),
            message: format!(
                "a merge needs at least two child generators, found {}",
                g.generators.len()
            ),
        });
    }
    let mut keys: Vec<&str> = Vec::new();
    for key in &g.merge_keys {
        if !keys.contains(&key.as_str()) {
            keys.push(key);
        }
    }
    if keys.is_empty() {
        return Err(GenerateError::InvalidGenerator {
            place: format!("{place}.mergeKeys"),
            message: "at least one merge key is needed".into(),
        });
    }
    let mut children = g.generators.iter().enumerate().map(|(i, value)| {
        let child_place = format!("{place}.generators[{i}]");
        let generator = super::child(value, &child_place)?;
        let sets = super::run(&generator, &child_place, ctx)?;
        Ok::<_, GenerateError>((child_place, sets))
    });
    let Some(first) = children.next() else {
        return Ok(Vec::new());
    };
    let (base_place, mut base) = first?;
    let base_index = index(&base, &keys, &base_place)?;
    for child in children {
        let (child_place, sets) = child?;
        let by_key = index(&sets, &keys, &child_place)?;
        for (key, i) in &by_key {
            if let Some(&b) = base_index.get(key) {
                let set = &sets[*i];
                base[b].params.extend(set.params.clone());
                base[b].origin = format!("{} + {}", base[b].origin, set.origin);
            }
        }
    }
    Ok(base)
}

/// Sets by the values of their merge keys; sets missing a key cannot be matched and are left out.
/// Two sets of one child with the same values are an error (as in Argo CD).
fn index(sets: &[ParamSet], keys: &[&str], place: &str) -> Result<BTreeMap<Vec<String>, usize>, GenerateError> {
    let mut out: BTreeMap<Vec<String>, usize> = BTreeMap::new();
    for (i, set) in sets.iter().enumerate() {
        let Some(values) = key_values(&set.params, keys) else {
            continue;
        };
        if let Some(&first) = out.get(&values) {
            let shown: Vec<String> = keys
                .iter()
                .zip(values.iter())
                .map(|(k, v)| format!("{k}={v:?}"))
                .collect();
            return Err(GenerateError::InvalidGenerator {
                place: place.to_string(),
                message: format!(
                    "{} and {} have the same merge key values ({}): merge keys must identify one parameter set",
                    sets[first].origin,
                    set.origin,
                    shown.join(", ")
                ),
            });
        }
        out.insert(values, i);
    }
    Ok(out)
}

fn key_values(params: &Params, keys: &[&str]) -> Option<Vec<String>> {
    keys.iter().map(|k| params.get(*k).cloned()).collect()
}

#[cfg(test)]
mod tests {
    use capstan_api::ApplicationSet;

    use crate::generate::{ClusterInfo, Inputs, generate_detailed};

    fn set(yaml: &str) -> ApplicationSet {
        serde_saphyr::from_str(yaml).expect("valid ApplicationSet")
    }

    #[test]
    fn later_children_override_base_sets_with_equal_merge_keys() {
        let s = set(r#"
apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata: {name: m}
spec:
  generators:
  - merge:
      mergeKeys: [server]
      generators:
      - clusters: {values: {kafka: "true", redis: "false"}}
      - clusters:
          selector: {matchLabels: {use-redis: "yes"}}
          values: {redis: "true"}
      - list:
          elements:
          - {server: "https://b", values.kafka: "false", extra: "x"}
          - {server: "https://nowhere", values.kafka: "never"}
          - {values.kafka: "no-key"}
  template:
    metadata: {name: "{{nameNormalized}}"}
    spec:
      source: {repoURL: r, helm: {parameters: [{name: kafka, value: "{{values.kafka}}"}, {name: redis, value: "{{values.redis}}"}]}}
      destination: {server: "{{server}}"}
"#);
        let inputs = Inputs {
            clusters: vec![
                ClusterInfo {
                    name: "a".into(),
                    server: "https://a".into(),
                    labels: [("use-redis".to_string(), "yes".to_string())].into(),
                    ..Default::default()
                },
                ClusterInfo {
                    name: "b".into(),
                    server: "https://b".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let generated = generate_detailed(&s, &inputs).unwrap();
        let summary: Vec<(String, String, String)> = generated
            .iter()
            .map(|g| {
                (
                    g.application.metadata.name.clone().unwrap(),
                    g.params["values.kafka"].clone(),
                    g.params["values.redis"].clone(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("a".into(), "true".into(), "true".into()),
                ("b".into(), "false".into(), "false".into()),
                ("in-cluster".into(), "true".into(), "false".into()),
            ]
        );
        assert_eq!(generated[1].params["extra"], "x");
        assert_eq!(generated[1].origin, "cluster \"b\" + element 0");
    }

    #[test]
    fn duplicate_merge_keys_and_missing_merge_keys_are_errors() {
        let s = set(r#"
apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata: {name: m}
spec:
  generators:
  - merge:
      mergeKeys: [app]
      generators:
      - list: {elements: [{app: a}, {app: a}]}
      - list: {elements: []}
  template: {metadata: {name: "{{app}}"}, spec: {source: {repoURL: r}, destination: {}}}
"#);
        let err = crate::generate(&s, &Inputs::default()).unwrap_err();
        assert_eq!(err.reason(), "InvalidGenerator");
        assert!(
            err.to_string().starts_with(
                "generators[0].merge.generators[0]: element 0 and element 1 have the same merge key values (app=\"a\")"
            ),
            "{err}"
        );

        let s = set(r#"
apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata: {name: m}
spec:
  generators:
  - merge:
      mergeKeys: []
      generators: [{list: {elements: []}}, {list: {elements: []}}]
  template: {metadata: {name: "x"}, spec: {source: {repoURL: r}, destination: {}}}
"#);
        let err = crate::generate(&s, &Inputs::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "generators[0].merge.mergeKeys: at least one merge key is needed"
        );
    }
}

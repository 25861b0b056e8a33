//! `matrix`: every combination of the sets of exactly two child generators. The second child's
//! definition may use the first child's parameters: they are substituted into its strings (unknown
//! placeholders left for later) before it is generated, once per set of the first child.

use capstan_api::applicationset::MatrixGenerator;

use super::{Context, ParamSet};
use crate::error::GenerateError;
use crate::template::{has_placeholders, substitute_lenient};

/// The combined parameter sets; on a key present in both, the second child's value wins.
pub(crate) fn generate(g: &MatrixGenerator, place: &str, ctx: &Context<'_>) -> Result<Vec<ParamSet>, GenerateError> {
    if g.generators.len() != 2 {
        return Err(GenerateError::InvalidGenerator {
            place: place.to_string(),
            message: format!(
                "a matrix needs exactly two child generators, found {}",
                g.generators.len()
            ),
        });
    }
    let first_place = format!("{place}.generators[0]");
    let second_place = format!("{place}.generators[1]");
    let first = super::run(&super::child(&g.generators[0], &first_place)?, &first_place, ctx)?;
    // Validate the second child's shape even when the first produced nothing.
    let second_static = super::child(&g.generators[1], &second_place)?;
    let templated = has_placeholders(&g.generators[1]);
    let mut fixed: Option<Vec<ParamSet>> = None;

    let mut out = Vec::new();
    for a in &first {
        let second = if templated {
            let mut definition = g.generators[1].clone();
            substitute_lenient(&mut definition, &a.params);
            super::run(&super::child(&definition, &second_place)?, &second_place, ctx)?
        } else {
            if fixed.is_none() {
                fixed = Some(super::run(&second_static, &second_place, ctx)?);
            }
            fixed.clone().unwrap_or_default()
        };
        for b in second {
            let mut params = a.params.clone();
            params.extend(b.params);
            out.push(ParamSet {
                params,
                origin: format!("{} × {}", a.origin, b.origin),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use capstan_api::ApplicationSet;

    use crate::generate::{ClusterInfo, GitSource, Inputs, generate_detailed};

    fn set(yaml: &str) -> ApplicationSet {
        serde_saphyr::from_str(yaml).expect("valid ApplicationSet")
    }

    #[test]
    fn second_child_uses_the_first_childs_params() {
        let dir = tempfile::tempdir().unwrap();
        for (path, body) in [
            ("staging/web.yaml", "service: web\nimageTag: s1\n"),
            ("staging/api.yaml", "service: api\nimageTag: s2\n"),
            ("production/web.yaml", "service: web\nimageTag: p1\n"),
        ] {
            let p = dir.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, body).unwrap();
        }
        let s = set(r#"
apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata: {name: fleet, namespace: capstan}
spec:
  generators:
  - matrix:
      generators:
      - clusters: {selector: {matchExpressions: [{key: env, operator: Exists}]}}
      - git:
          repoURL: https://git.example/services.git
          files: [{path: "{{metadata.labels.env}}/*.yaml"}]
  template:
    metadata: {name: "{{service}}-{{name}}"}
    spec:
      source: {repoURL: https://git.example/charts.git, path: chart, helm: {parameters: [{name: image.tag, value: "{{imageTag}}"}]}}
      destination: {server: "{{server}}", namespace: "{{service}}"}
"#);
        let inputs = Inputs {
            clusters: vec![
                ClusterInfo {
                    name: "prod-1".into(),
                    server: "https://prod-1".into(),
                    labels: [("env".to_string(), "production".to_string())].into(),
                    ..Default::default()
                },
                ClusterInfo {
                    name: "stage-1".into(),
                    server: "https://stage-1".into(),
                    labels: [("env".to_string(), "staging".to_string())].into(),
                    ..Default::default()
                },
            ],
            checkouts: [(
                GitSource::new("https://git.example/services.git", ""),
                dir.path().to_path_buf(),
            )]
            .into(),
        };
        let generated = generate_detailed(&s, &inputs).unwrap();
        let names: Vec<_> = generated
            .iter()
            .map(|g| g.application.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["api-stage-1", "web-prod-1", "web-stage-1"]);
        let web_prod = &generated[1];
        assert_eq!(web_prod.application.spec.destination.server, "https://prod-1");
        let helm = web_prod.application.spec.source.helm.as_ref().unwrap();
        assert_eq!(helm.parameters[0].value, "p1");
        assert_eq!(web_prod.generator, "generators[0].matrix");
        assert_eq!(web_prod.origin, "cluster \"prod-1\" × file production/web.yaml");
        assert_eq!(web_prod.application.metadata.namespace.as_deref(), Some("capstan"));
    }

    #[test]
    fn second_child_wins_on_conflicts_and_selector_filters_combinations() {
        let s = set(r#"
apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata: {name: m}
spec:
  generators:
  - matrix:
      generators:
      - list: {elements: [{app: a, tier: one}, {app: b, tier: one}]}
      - list: {elements: [{env: dev, tier: two}, {env: prod, tier: two}]}
    selector: {matchLabels: {env: prod}}
  template:
    metadata: {name: "{{app}}-{{env}}-{{tier}}"}
    spec: {source: {repoURL: r}, destination: {}}
"#);
        let apps = crate::generate(&s, &Inputs::default()).unwrap();
        let names: Vec<_> = apps.iter().map(|a| a.metadata.name.clone().unwrap()).collect();
        assert_eq!(names, ["a-prod-two", "b-prod-two"]);
    }

    #[test]
    fn matrix_needs_two_children_and_nests() {
        let s = set(r#"
apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata: {name: m}
spec:
  generators:
  - matrix:
      generators:
      - list: {elements: [{a: x}]}
  template: {metadata: {name: "{{a}}"}, spec: {source: {repoURL: r}, destination: {}}}
"#);
        let err = crate::generate(&s, &Inputs::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "generators[0].matrix: a matrix needs exactly two child generators, found 1"
        );

        let s = set(r#"
apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata: {name: m}
spec:
  generators:
  - matrix:
      generators:
      - list: {elements: [{a: p}, {a: q}]}
      - matrix:
          generators:
          - list: {elements: [{b: "{{a}}1"}]}
          - list: {elements: [{c: "3"}, {c: "4"}]}
  template: {metadata: {name: "{{a}}-{{b}}-{{c}}"}, spec: {source: {repoURL: r}, destination: {}}}
"#);
        let apps = crate::generate(&s, &Inputs::default()).unwrap();
        let names: Vec<_> = apps.iter().map(|a| a.metadata.name.clone().unwrap()).collect();
        assert_eq!(names, ["p-p1-3", "p-p1-4", "q-q1-3", "q-q1-4"]);
    }
}

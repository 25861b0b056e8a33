//! The entry points: which Git sources a set reads ([`git_sources`]) and the Applications it produces
//! ([`generate`], [`generate_detailed`]), with the inputs they read and the errors they give.

use std::collections::{BTreeMap, BTreeSet};

use capstan_api::{Application, ApplicationSet, ApplicationSetSpec};

pub use crate::error::GenerateError;
use crate::generators::{self, Context};
pub use crate::inputs::{ClusterInfo, GitSource, Inputs};
use crate::params::Params;
use crate::template;

/// One generated Application with the parameter set it was rendered from.
#[derive(Clone, Debug)]
pub struct Generated {
    /// The Application (no owner references: the controller sets them).
    pub application: Application,
    /// The parameters substituted into the template.
    pub params: Params,
    /// The top-level generator that produced it (`generators[1].clusters`).
    pub generator: String,
    /// Where the set came from inside that generator (`cluster "staging" × file apps/a.yaml`).
    pub origin: String,
}

/// Every git source the set's generators read (nested ones included), so the caller can check them out
/// first. Sources whose URL or revision contains a `{{placeholder}}` are left out: they are known only
/// during generation (see [`GenerateError::missing_git_source`]). Sorted, without duplicates.
pub fn git_sources(spec: &ApplicationSetSpec) -> Result<Vec<GitSource>, GenerateError> {
    let mut out = BTreeSet::new();
    for (i, generator) in spec.generators.iter().enumerate() {
        generators::collect_git_sources(generator, &format!("generators[{i}]"), &mut out)?;
    }
    Ok(out.into_iter().collect())
}

/// The Applications the set produces, sorted by name. Pure: no I/O except reading files under the
/// checkouts.
pub fn generate(set: &ApplicationSet, inputs: &Inputs) -> Result<Vec<Application>, GenerateError> {
    Ok(generate_detailed(set, inputs)?
        .into_iter()
        .map(|g| g.application)
        .collect())
}

/// Like [`generate`], with each Application's parameter set and origin (for diagnostics).
pub fn generate_detailed(set: &ApplicationSet, inputs: &Inputs) -> Result<Vec<Generated>, GenerateError> {
    let spec = &set.spec;
    let ctx = Context::new(inputs);
    let base = serde_json::to_value(&spec.template).map_err(|e| GenerateError::InvalidTemplate {
        place: "template".into(),
        message: e.to_string(),
    })?;
    let namespace = set.metadata.namespace.as_deref();
    let mut by_name: BTreeMap<String, Generated> = BTreeMap::new();
    for (i, generator) in spec.generators.iter().enumerate() {
        let place = format!("generators[{i}]");
        let sets = generators::run(generator, &place, &ctx)?;
        let mut tmpl = base.clone();
        if let Some(over) = generators::template_of(generator) {
            template::deep_merge(&mut tmpl, over.clone());
        }
        let kind_place = format!("{place}.{}", generators::kind_name(generator));
        for set in sets {
            let origin = format!("{kind_place}, {}", set.origin);
            let application = template::render(&tmpl, spec.template_patch.as_deref(), &set.params, namespace, &origin)?;
            let name = application.metadata.name.clone().unwrap_or_default();
            if let Some(first) = by_name.get(&name) {
                return Err(GenerateError::DuplicateApplicationName {
                    name,
                    first: format!("{}, {}", first.generator, first.origin),
                    second: origin,
                });
            }
            by_name.insert(
                name,
                Generated {
                    application,
                    params: set.params,
                    generator: kind_place.clone(),
                    origin: set.origin,
                },
            );
        }
    }
    Ok(by_name.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(yaml: &str) -> ApplicationSet {
        serde_saphyr::from_str(yaml).expect("valid ApplicationSet")
    }

    fn names(apps: &[Application]) -> Vec<String> {
        apps.iter()
            .map(|a| a.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    const TEMPLATE: &str = r#"
  template:
    metadata:
      name: "{{cluster}}-guestbook"
      labels: {cluster: "{{cluster}}", app: guestbook}
    spec:
      project: default
      source: {repoURL: "https://git.example/apps.git", targetRevision: HEAD, path: "guestbook/{{cluster}}"}
      destination: {server: "{{url}}", namespace: guestbook}
"#;

    #[test]
    fn list_generator_end_to_end_sorted_by_name() {
        let s = set(&format!(
            r#"
apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata: {{name: guestbook, namespace: capstan}}
spec:
  generators:
  - list:
      elements:
      - {{cluster: zeta, url: "https://zeta"}}
      - {{cluster: alpha, url: "https://alpha"}}
{TEMPLATE}"#
        ));
        let apps = generate(&s, &Inputs::default()).unwrap();
        assert_eq!(names(&apps), ["alpha-guestbook", "zeta-guestbook"]);
        let alpha = &apps[0];
        assert_eq!(alpha.spec.source.path, "guestbook/alpha");
        assert_eq!(alpha.spec.destination.server, "https://alpha");
        assert_eq!(alpha.metadata.labels.as_ref().unwrap()["cluster"], "alpha");
        assert_eq!(alpha.metadata.namespace.as_deref(), Some("capstan"));
        assert!(alpha.metadata.owner_references.is_none());
        let json = serde_json::to_value(alpha).unwrap();
        assert_eq!(json["apiVersion"], "capstan.dev/v1alpha1");
        assert_eq!(json["kind"], "Application");
    }

    #[test]
    fn generator_template_is_merged_over_the_set_template() {
        let s = set(&format!(
            r#"
apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata: {{name: guestbook}}
spec:
  generators:
  - list:
      elements: [{{cluster: a, url: "https://a"}}]
      template:
        metadata: {{labels: {{tier: "{{{{cluster}}}}-special"}}}}
        spec: {{source: {{path: "special/{{{{cluster}}}}"}}, syncPolicy: {{automated: {{selfHeal: true}}}}}}
  - list:
      elements: [{{cluster: b, url: "https://b"}}]
{TEMPLATE}"#
        ));
        let apps = generate(&s, &Inputs::default()).unwrap();
        assert_eq!(names(&apps), ["a-guestbook", "b-guestbook"]);
        let (a, b) = (&apps[0], &apps[1]);
        assert_eq!(a.spec.source.path, "special/a");
        assert_eq!(
            a.spec.source.repo_url, "https://git.example/apps.git",
            "other fields kept"
        );
        let labels = a.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["tier"], "a-special");
        assert_eq!(labels["app"], "guestbook");
        assert!(
            a.spec
                .sync_policy
                .as_ref()
                .unwrap()
                .automated
                .as_ref()
                .unwrap()
                .self_heal
        );
        assert_eq!(b.spec.source.path, "guestbook/b", "the override is per generator");
        assert!(b.spec.sync_policy.is_none());
    }

    #[test]
    fn missing_parameter_names_the_parameter_the_place_and_the_set() {
        let s = set(r#"
apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata: {name: s}
spec:
  generators:
  - list: {elements: [{cluster: a, url: "https://a"}]}
  template:
    metadata: {name: "{{cluster}}"}
    spec:
      source: {repoURL: r, targetRevision: "{{ imageTag }}"}
      destination: {server: "{{url}}"}
"#);
        let err = generate(&s, &Inputs::default()).unwrap_err();
        assert_eq!(err.reason(), "MissingParameter");
        assert_eq!(
            err.to_string(),
            "template: spec.source.targetRevision: parameter \"imageTag\" is not defined for \
             generators[0].list, element 0 (known: cluster, url)"
        );
    }

    #[test]
    fn duplicate_application_names_are_an_error() {
        let s = set(r#"
apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata: {name: s}
spec:
  generators:
  - list: {elements: [{cluster: a, url: "https://a"}]}
  - list: {elements: [{cluster: b, url: "https://b"}, {cluster: a, url: "https://other"}]}
  template:
    metadata: {name: "{{cluster}}"}
    spec: {source: {repoURL: r}, destination: {server: "{{url}}"}}
"#);
        let err = generate(&s, &Inputs::default()).unwrap_err();
        assert_eq!(err.reason(), "DuplicateApplicationName");
        assert_eq!(
            err.to_string(),
            "generators produce two Applications named \"a\" (from generators[0].list, element 0 and from \
             generators[1].list, element 1)"
        );
    }

    #[test]
    fn selector_post_filters_on_params_and_is_validated() {
        let s = set(r#"
apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata: {name: s}
spec:
  generators:
  - list:
      elements:
      - {cluster: a, env: prod, meta: {tier: gold}}
      - {cluster: b, env: staging, meta: {tier: gold}}
      - {cluster: c, env: prod}
    selector:
      matchLabels: {env: prod}
      matchExpressions: [{key: meta.tier, operator: In, values: [gold]}]
  template:
    metadata: {name: "{{cluster}}"}
    spec: {source: {repoURL: r}, destination: {}}
"#);
        assert_eq!(names(&generate(&s, &Inputs::default()).unwrap()), ["a"]);

        let s = set(r#"
apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata: {name: s}
spec:
  generators:
  - list: {elements: [{cluster: a}]}
  - list: {elements: [{cluster: b}]}
    selector: {matchExpressions: [{key: env, operator: Foo}]}
  template:
    metadata: {name: "{{cluster}}"}
    spec: {source: {repoURL: r}, destination: {}}
"#);
        let err = generate(&s, &Inputs::default()).unwrap_err();
        assert_eq!(err.reason(), "InvalidSelector");
        assert!(
            err.to_string()
                .starts_with("generators[1].selector: matchExpressions[0]: unknown operator \"Foo\""),
            "{err}"
        );
    }

    #[test]
    fn git_sources_lists_nested_sources_once_and_skips_templated_ones() {
        let s = set(r#"
apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata: {name: s}
spec:
  generators:
  - git: {repoURL: "https://git.example/b.git", directories: [{path: "*"}]}
  - matrix:
      generators:
      - git: {repoURL: "https://git.example/a.git", revision: v1, files: [{path: "*.yaml"}]}
      - merge:
          mergeKeys: [x]
          generators:
          - git: {repoURL: "https://git.example/b.git", revision: "", directories: [{path: "*"}]}
          - git: {repoURL: "https://git.example/c.git", revision: "{{branch}}", directories: [{path: "*"}]}
  - list: {elements: []}
  template: {metadata: {name: x}, spec: {source: {repoURL: r}, destination: {}}}
"#);
        let sources = git_sources(&s.spec).unwrap();
        assert_eq!(
            sources,
            [
                GitSource::new("https://git.example/a.git", "v1"),
                GitSource::new("https://git.example/b.git", "HEAD"),
            ]
        );
        assert_eq!(sources[1].revision, "HEAD");
    }

    #[test]
    fn templated_git_sources_are_reported_as_missing_during_generation() {
        let s = set(r#"
apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata: {name: s}
spec:
  generators:
  - matrix:
      generators:
      - list: {elements: [{branch: release-1}]}
      - git: {repoURL: "https://git.example/c.git", revision: "{{branch}}", directories: [{path: "apps/*"}]}
  template: {metadata: {name: "{{path.basename}}-{{branch}}"}, spec: {source: {repoURL: r}, destination: {}}}
"#);
        let mut inputs = Inputs::default();
        let err = generate(&s, &inputs).unwrap_err();
        let missing = err.missing_git_source().cloned().expect("a missing source");
        assert_eq!(missing, GitSource::new("https://git.example/c.git", "release-1"));
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("apps/web")).unwrap();
        inputs.checkouts.insert(missing, dir.path().to_path_buf());
        assert_eq!(names(&generate(&s, &inputs).unwrap()), ["web-release-1"]);
    }

    #[test]
    fn repository_errors_never_show_credentials() {
        let s = set(r#"
apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata: {name: s}
spec:
  generators:
  - git: {repoURL: "https://bot:s3cr3t-token@git.example/r.git", directories: [{path: "*"}]}
  template: {metadata: {name: "{{path.basename}}"}, spec: {source: {repoURL: r}, destination: {}}}
"#);
        let err = generate(&s, &Inputs::default()).unwrap_err();
        assert_eq!(err.reason(), "GitSourceUnavailable");
        assert_eq!(
            err.to_string(),
            "generators[0].git: repository https://bot:***@git.example/r.git at revision HEAD: not checked out"
        );
        // The source itself keeps the URL, to check it out.
        assert!(err.missing_git_source().unwrap().repo_url.contains("s3cr3t-token"));
    }

    #[test]
    fn no_generators_no_applications() {
        let s = set(r#"
apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata: {name: s}
spec:
  generators: []
  template: {metadata: {name: x}, spec: {source: {repoURL: r}, destination: {}}}
"#);
        assert!(generate(&s, &Inputs::default()).unwrap().is_empty());
    }
}

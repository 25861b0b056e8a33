//! The entry points: which Git sources a set reads ([`git_sources`]) and the Applications it produces
//! ([`generate`], [`generate_detailed`]), with the inputs they read and the errors they give.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;

use capstan_api::{Application, ApplicationSet, ApplicationSetSpec};
use serde::{Deserialize, Serialize};

use crate::generators::{self, Context};
use crate::params::Params;
use crate::template;

/// A registered cluster, as the clusters generator sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterInfo {
    /// Cluster name (`in-cluster` for the cluster Capstan runs in).
    pub name: String,
    /// API server URL.
    #[serde(default)]
    pub server: String,
    /// The cluster's labels (what `clusters.selector` matches).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The cluster's annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// A repository at a revision that a git generator reads.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GitSource {
    /// Repository URL, as written in the generator.
    pub repo_url: String,
    /// Branch, tag or commit; never empty (`HEAD` when the generator gives none).
    pub revision: String,
}

impl GitSource {
    /// The source a generator names; an empty revision means `HEAD`.
    pub fn new(repo_url: &str, revision: &str) -> Self {
        let revision = revision.trim();
        Self {
            repo_url: repo_url.trim().to_string(),
            revision: if revision.is_empty() {
                "HEAD".into()
            } else {
                revision.into()
            },
        }
    }
}

/// What generation reads from the outside world, gathered beforehand by the caller.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    /// Registered clusters. `in-cluster` is added by the clusters generator unless present here,
    /// which a cluster is by its server URL alone (`https://kubernetes.default.svc`; it is then named
    /// `in-cluster`). The name `in-cluster` with another server, and two clusters with the same name
    /// or server, are errors.
    pub clusters: Vec<ClusterInfo>,
    /// A read-only checkout directory per git source.
    pub checkouts: HashMap<GitSource, PathBuf>,
}

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

/// Why an ApplicationSet cannot be generated. Every message names where the problem is.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GenerateError {
    /// A generator is malformed: no kind or several, the wrong number of children, a bad glob or a
    /// path that leaves the repository, a child that is not a generator.
    #[error("{place}: {message}")]
    InvalidGenerator {
        /// Where (`generators[0].matrix`).
        place: String,
        /// What.
        message: String,
    },
    /// A label selector is malformed (unknown operator, missing values).
    #[error("{place}: {message}")]
    InvalidSelector {
        /// Where (`generators[1].clusters.selector`).
        place: String,
        /// What.
        message: String,
    },
    /// A file matched by a git files generator cannot be used.
    #[error("{place}: {file}: {message}")]
    InvalidGitFile {
        /// The generator (`generators[0].git`).
        place: String,
        /// The file, relative to the repository root.
        file: String,
        /// What is wrong with it.
        message: String,
    },
    /// A git generator's repository at its revision is not among the checkouts, or cannot be read.
    /// The URL is shown without credentials.
    #[error(
        "{place}: repository {} at revision {}: {message}",
        capstan_source::redact(&git.repo_url, &[]),
        git.revision
    )]
    GitSourceUnavailable {
        /// The generator.
        place: String,
        /// The source it needs.
        git: GitSource,
        /// Why it is unavailable.
        message: String,
    },
    /// A `{{placeholder}}` names a parameter the set does not have.
    #[error(
        "{place}: parameter {name:?} is not defined for {origin} (known: {})",
        list_keys(known)
    )]
    MissingParameter {
        /// Where the placeholder is (`template: metadata.name`, `generators[0].clusters.values.x`).
        place: String,
        /// The parameter named.
        name: String,
        /// The parameter set (`generators[0].git, file services/a/prod.yaml`).
        origin: String,
        /// The parameters the set does have.
        known: Vec<String>,
    },
    /// The template, its patch or its result is malformed.
    #[error("{place}: {message}")]
    InvalidTemplate {
        /// Where (`template: spec`, `templatePatch`).
        place: String,
        /// What.
        message: String,
    },
    /// The substituted name is not a DNS-1123 subdomain.
    #[error(
        "template: metadata.name: Application name {name:?} (for {origin}) is not a valid DNS-1123 subdomain \
         (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters)"
    )]
    InvalidApplicationName {
        /// The name after substitution.
        name: String,
        /// The parameter set.
        origin: String,
    },
    /// The registered clusters cannot be used: `in-cluster`'s name with another server, or two
    /// clusters with the same name or server.
    #[error("{place}: {message}")]
    InvalidCluster {
        /// The clusters generator (`generators[0].clusters`).
        place: String,
        /// What.
        message: String,
    },
    /// Two parameter sets render to the same Application name.
    #[error("generators produce two Applications named {name:?} (from {first} and from {second})")]
    DuplicateApplicationName {
        /// The name.
        name: String,
        /// The first parameter set producing it.
        first: String,
        /// The second.
        second: String,
    },
}

fn list_keys(keys: &[String]) -> String {
    const SHOWN: usize = 25;
    if keys.is_empty() {
        return "none".into();
    }
    let mut out = keys.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", ");
    if keys.len() > SHOWN {
        out.push_str(&format!(", ... and {} more", keys.len() - SHOWN));
    }
    out
}

impl GenerateError {
    /// A short CamelCase reason for a status condition.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::InvalidGenerator { .. } => "InvalidGenerator",
            Self::InvalidSelector { .. } => "InvalidSelector",
            Self::InvalidGitFile { .. } => "InvalidGitFile",
            Self::GitSourceUnavailable { .. } => "GitSourceUnavailable",
            Self::MissingParameter { .. } => "MissingParameter",
            Self::InvalidTemplate { .. } => "InvalidTemplate",
            Self::InvalidCluster { .. } => "InvalidCluster",
            Self::InvalidApplicationName { .. } => "InvalidApplicationName",
            Self::DuplicateApplicationName { .. } => "DuplicateApplicationName",
        }
    }

    /// The git source a generator needed and did not find in [`Inputs::checkouts`]. Sources whose
    /// URL or revision is only known during generation (a matrix's second child using the first
    /// child's parameters) are not listed by [`git_sources`]; a caller checks this one out and
    /// generates again.
    pub fn missing_git_source(&self) -> Option<&GitSource> {
        match self {
            Self::GitSourceUnavailable { git, .. } => Some(git),
            _ => None,
        }
    }
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

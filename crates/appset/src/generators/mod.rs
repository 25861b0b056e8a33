//! The generators: each turns its part of the spec (and the [`Inputs`]) into parameter sets. One
//! module per generator, plus [`selector`] (label selectors, used by `clusters` and by every
//! generator's post-filter `selector`).

pub mod clusters;
pub mod git;
pub mod list;
pub mod matrix;
pub mod merge;
pub use capstan_kube::selector;

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use capstan_api::applicationset::{
    ApplicationSetGenerator, ClusterGenerator, GitGenerator, ListGenerator, MatrixGenerator, MergeGenerator,
};
use serde_json::Value;

use crate::error::GenerateError;
use crate::inputs::{GitSource, Inputs};
use crate::params::Params;
use selector::Selector;

/// One parameter set and a short description of where it came from inside its generator
/// (`element 2`, `cluster "staging"`, `file services/a/prod.yaml`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ParamSet {
    pub params: Params,
    pub origin: String,
}

/// What generators read during one generation: the inputs, and each checkout's file tree, listed once.
pub(crate) struct Context<'a> {
    pub inputs: &'a Inputs,
    trees: RefCell<HashMap<PathBuf, Rc<git::Tree>>>,
}

impl<'a> Context<'a> {
    pub fn new(inputs: &'a Inputs) -> Self {
        Self {
            inputs,
            trees: RefCell::new(HashMap::new()),
        }
    }

    /// The tree under `root`, listed on first use.
    fn tree(&self, root: &Path) -> std::io::Result<Rc<git::Tree>> {
        if let Some(tree) = self.trees.borrow().get(root) {
            return Ok(tree.clone());
        }
        let tree = Rc::new(git::Tree::list(root)?);
        self.trees.borrow_mut().insert(root.to_path_buf(), tree.clone());
        Ok(tree)
    }
}

/// Which generator a generator entry is.
enum Kind<'a> {
    List(&'a ListGenerator),
    Clusters(&'a ClusterGenerator),
    Git(&'a GitGenerator),
    Matrix(&'a MatrixGenerator),
    Merge(&'a MergeGenerator),
}

fn kinds(g: &ApplicationSetGenerator) -> Vec<(&'static str, Kind<'_>)> {
    let mut out = Vec::new();
    if let Some(x) = &g.list {
        out.push(("list", Kind::List(x)));
    }
    if let Some(x) = &g.clusters {
        out.push(("clusters", Kind::Clusters(x)));
    }
    if let Some(x) = &g.git {
        out.push(("git", Kind::Git(x)));
    }
    if let Some(x) = &g.matrix {
        out.push(("matrix", Kind::Matrix(x)));
    }
    if let Some(x) = &g.merge {
        out.push(("merge", Kind::Merge(x)));
    }
    out
}

fn kind<'g>(g: &'g ApplicationSetGenerator, place: &str) -> Result<(&'static str, Kind<'g>), GenerateError> {
    let mut found = kinds(g);
    if found.len() == 1 {
        return Ok(found.remove(0));
    }
    let names: Vec<&str> = found.iter().map(|(n, _)| *n).collect();
    Err(GenerateError::InvalidGenerator {
        place: place.to_string(),
        message: if names.is_empty() {
            "no generator given: set one of list, clusters, git, matrix, merge".into()
        } else {
            format!(
                "exactly one of list, clusters, git, matrix, merge must be set, found {}",
                names.join(", ")
            )
        },
    })
}

/// The name of the generator's kind (`list`, `git`, ...), or `generator` when it is malformed.
pub(crate) fn kind_name(g: &ApplicationSetGenerator) -> &'static str {
    match kinds(g).as_slice() {
        [(name, _)] => name,
        _ => "generator",
    }
}

/// The generator's own partial template, if any.
pub(crate) fn template_of(g: &ApplicationSetGenerator) -> Option<&Value> {
    match kinds(g).into_iter().next()?.1 {
        Kind::List(x) => x.template.as_ref(),
        Kind::Clusters(x) => x.template.as_ref(),
        Kind::Git(x) => x.template.as_ref(),
        Kind::Matrix(x) => x.template.as_ref(),
        Kind::Merge(x) => x.template.as_ref(),
    }
}

/// Run one generator (at `place`, e.g. `generators[0]`) and apply its `selector`.
pub(crate) fn run(g: &ApplicationSetGenerator, place: &str, ctx: &Context<'_>) -> Result<Vec<ParamSet>, GenerateError> {
    let (name, kind) = kind(g, place)?;
    let here = format!("{place}.{name}");
    // Compile the post-filter first: a bad selector is reported even when nothing is generated.
    let filter = match &g.selector {
        Some(sel) => Some(Selector::new(sel).map_err(|err| GenerateError::InvalidSelector {
            place: format!("{place}.selector"),
            message: err.to_string(),
        })?),
        None => None,
    };
    let mut sets = match kind {
        Kind::List(x) => list::generate(x, &here)?,
        Kind::Clusters(x) => clusters::generate(x, &here, ctx.inputs)?,
        Kind::Git(x) => git::generate(x, &here, ctx)?,
        Kind::Matrix(x) => matrix::generate(x, &here, ctx)?,
        Kind::Merge(x) => merge::generate(x, &here, ctx)?,
    };
    if let Some(filter) = filter {
        sets.retain(|s| filter.matches(&s.params));
    }
    Ok(sets)
}

/// Parse a child generator of a matrix or merge.
pub(crate) fn child(value: &Value, place: &str) -> Result<ApplicationSetGenerator, GenerateError> {
    if !value.is_object() {
        return Err(GenerateError::InvalidGenerator {
            place: place.to_string(),
            message: "a child generator must be an object".into(),
        });
    }
    serde_json::from_value(value.clone()).map_err(|e| GenerateError::InvalidGenerator {
        place: place.to_string(),
        message: format!("not a valid generator: {e}"),
    })
}

/// Add the git sources `g` reads (children included) to `out`; placeholders make a source unknown
/// until generation, so those are skipped.
pub(crate) fn collect_git_sources(
    g: &ApplicationSetGenerator,
    place: &str,
    out: &mut BTreeSet<GitSource>,
) -> Result<(), GenerateError> {
    let (name, kind) = kind(g, place)?;
    let here = format!("{place}.{name}");
    let children = match kind {
        Kind::Git(x) => {
            if !x.repo_url.contains("{{") && !x.revision.contains("{{") && !x.repo_url.trim().is_empty() {
                out.insert(GitSource::new(&x.repo_url, &x.revision));
            }
            return Ok(());
        }
        Kind::Matrix(x) => &x.generators,
        Kind::Merge(x) => &x.generators,
        Kind::List(_) | Kind::Clusters(_) => return Ok(()),
    };
    for (i, value) in children.iter().enumerate() {
        let place = format!("{here}.generators[{i}]");
        collect_git_sources(&child(value, &place)?, &place, out)?;
    }
    Ok(())
}

/// Append `values.KEY` parameters, each substituted with the set's parameters first.
pub(crate) fn add_values(
    values: &std::collections::BTreeMap<String, String>,
    params: &mut Params,
    place: &str,
    origin: &str,
) -> Result<(), GenerateError> {
    let mut resolved = Vec::with_capacity(values.len());
    for (k, v) in values {
        let value = crate::template::substitute_strict(v, params, &format!("{place}.values.{k}"), origin)?;
        resolved.push((format!("values.{k}"), value));
    }
    params.extend(resolved);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_api::ApplicationSet;

    use crate::generate::generate;

    fn set(yaml: &str) -> ApplicationSet {
        serde_saphyr::from_str(yaml).expect("valid ApplicationSet")
    }

    #[test]
    fn a_generator_must_have_exactly_one_kind() {
        let s = set(r#"
apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata: {name: s}
spec:
  generators:
  - list: {elements: [{name: a}]}
    clusters: {}
  template: {metadata: {name: "{{name}}"}, spec: {source: {repoURL: r}, destination: {}}}
"#);
        let err = generate(&s, &Inputs::default()).unwrap_err();
        assert_eq!(err.reason(), "InvalidGenerator");
        assert_eq!(
            err.to_string(),
            "generators[0]: exactly one of list, clusters, git, matrix, merge must be set, found list, clusters"
        );
    }

    #[test]
    fn invalid_child_generators_are_reported_with_their_place() {
        let s = set(r#"
apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata: {name: s}
spec:
  generators:
  - matrix:
      generators:
      - list: {elements: [{name: a}]}
      - git: {repoURL: 3}
  template: {metadata: {name: "{{name}}"}, spec: {source: {repoURL: r}, destination: {}}}
"#);
        let err = generate(&s, &Inputs::default()).unwrap_err();
        assert_eq!(err.reason(), "InvalidGenerator");
        assert!(
            err.to_string()
                .starts_with("generators[0].matrix.generators[1]: not a valid generator"),
            "{err}"
        );
    }
}

//! ApplicationSets: turning one template and its generators into the Applications they produce.
//!
//! This crate owns ApplicationSet *generation*, following Argo CD's ApplicationSet in its default
//! ("fasttemplate") mode: every generator (`list`, `clusters`, `git` directories and files, `matrix`,
//! `merge`, each with an optional `selector`) produces flat parameter sets (`BTreeMap<String, String>`,
//! nested values flattened to `a.b.c`), and each set is substituted into `spec.template` (after the
//! generator's own `template` override and before `templatePatch`) to give one Application.
//!
//! Generation is pure: everything it reads from the outside world — registered clusters and checkouts
//! of the Git repositories the generators name — is gathered beforehand by the caller into [`Inputs`]
//! (see [`git_sources`]); the only I/O is reading files under those checkouts. The same code serves the
//! ApplicationSet controller and the offline `capstan appset generate` command, so what a pull request
//! review shows is what the controller will create. Every error names where it comes from
//! (`generators[0].matrix.generators[1].git: services/a/prod.yaml: ...`) and has a short
//! [`GenerateError::reason`] for status conditions.
//!
//! Creating, updating and deleting the generated Applications (with owner references), and rolling
//! changes out, belong to the ApplicationSet controller (`controller`, `rollout`), not to generation.

pub mod budget;
pub mod controller;
pub mod error;
pub mod generate;
pub mod generators;
pub mod inputs;
pub mod params;
pub mod rollout;
pub mod template;

pub use generate::{
    ClusterInfo, GenerateError, Generated, GitSource, Inputs, generate, generate_detailed, git_sources,
};
pub use generators::selector::Selector;
pub use params::Params;

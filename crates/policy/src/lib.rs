//! Policies: Kubernetes ValidatingAdmissionPolicy rules, in CEL, evaluated in-process on the
//! objects a sync would apply (and prune) before anything is applied, and by `capstan plan`.
//!
//! Modules, in dependency order:
//! - [`value`]: Kubernetes objects as CEL values.
//! - [`cost`]: the cost budget (every comprehension range and call result charged).
//! - [`library`]: the Kubernetes CEL libraries beyond CEL's standard one.
//! - [`env`]: the CEL environment every expression is compiled and run in.
//! - [`matching`]: `matchConstraints` (resource rules, selectors).
//! - [`compile`]: a `Policy` compiled, with every mistake named.
//! - [`evaluate`]: the verdicts of compiled policies on a sync's objects.

pub mod compile;
pub mod cost;
pub mod env;
pub mod evaluate;
pub mod library;
pub mod matching;
pub mod value;

pub use compile::{CompiledPolicy, compile};
pub use evaluate::{Candidate, Evaluation, Params, Scope, Verdict, evaluate};
pub use matching::{Operation, Resource};

#[cfg(test)]
mod tests;

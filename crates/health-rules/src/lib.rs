//! Health rules written by operators, run next to the built-in ones of `capstan-health`.
//!
//! This crate owns the custom-health part of Capstan's configuration ConfigMap (`capstan-cm`): it reads
//! the keys into [`HealthRules`] ([`HealthRules::from_config`]) and evaluates them in a sandbox
//! ([`HealthRules::assess`]). Two formats are accepted, so teams bring what they already have:
//!
//! * **Argo CD's Lua customizations, unchanged**: `resource.customizations.health.<group>_<kind>` (and
//!   `resource.customizations.useOpenLibs.<group>_<kind>`), or the older `resource.customizations` map
//!   of `group/Kind: {health.lua: ...}`, with wildcards such as `*.crossplane.io/*`. Scripts see the
//!   object as the global `obj` and return a table `{status, message}` (module [`lua`]).
//! * **Flux's `healthCheckExprs`**: a YAML list under the key `healthCheckExprs` of `{apiVersion, kind,
//!   current, inProgress, failed}` CEL expressions evaluated over the object's top-level fields
//!   (module [`cel`]).
//!
//! A custom rule takes precedence over the built-in rule for its kind, as in Argo CD. A rule that does
//! not compile stays in the set as a broken rule: objects of its kind are Unknown with the compile
//! error (never silently judged by another rule), and [`HealthRules::broken_rule_for`] lets callers put
//! a condition on each Application using that kind.

mod bounded;
pub mod cel;
mod config;
mod key;
pub mod lua;

use std::sync::Arc;

use capstan_health::{Context, Health};
use serde_json::Value;

pub use config::CONFIG_MAP_NAME;
pub use key::GroupKind;

/// Why a rule of the configuration cannot be used. Shown in an Event on the ConfigMap and in a
/// condition of every Application with an object of the rule's kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct RuleError {
    /// The ConfigMap key (and, for list entries, the index) holding the rule.
    pub key: String,
    /// What is wrong with it.
    pub message: String,
}

/// One rule of the configuration, for the kinds its selector matches.
#[derive(Debug)]
pub(crate) enum Rule {
    Lua(lua::LuaRule),
    Cel(Box<cel::CelRule>),
    /// A rule that does not compile: objects of its kind are Unknown with this error.
    Broken(RuleError),
}

/// A rule with the kinds it applies to.
#[derive(Debug)]
pub(crate) struct Entry {
    pub selector: key::Selector,
    pub rule: Rule,
}

/// The custom health rules of one version of the configuration. Cheap to share ([`Arc`] inside);
/// [`HealthRules::default`] has no rules, so [`HealthRules::assess`] gives the built-in verdicts.
#[derive(Debug, Clone, Default)]
pub struct HealthRules {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Rules in the order they are tried: exact group/kind keys first, then wildcards by key.
    entries: Vec<Entry>,
    /// Keys of the configuration that are not health rules Capstan can use.
    unsupported: Vec<RuleError>,
}

impl HealthRules {
    /// The rules held by a ConfigMap's `data` (the keys this crate does not own are ignored).
    pub fn from_config<'a>(data: impl IntoIterator<Item = (&'a str, &'a str)>) -> HealthRules {
        let (entries, unsupported) = config::parse(data);
        HealthRules {
            inner: Arc::new(Inner { entries, unsupported }),
        }
    }

    /// Whether there are no rules at all.
    pub fn is_empty(&self) -> bool {
        self.inner.entries.is_empty() && self.inner.unsupported.is_empty()
    }

    /// Every problem of the configuration: rules that do not compile and keys Capstan does not support.
    pub fn errors(&self) -> Vec<&RuleError> {
        let broken = self.inner.entries.iter().filter_map(|e| match &e.rule {
            Rule::Broken(err) => Some(err),
            _ => None,
        });
        broken.chain(self.inner.unsupported.iter()).collect()
    }

    /// The rule that applies to `obj`, if any.
    fn entry_for(&self, obj: &Value) -> Option<&Entry> {
        // The common case (no custom rule at all) costs nothing per object.
        if self.inner.entries.is_empty() {
            return None;
        }
        let gk = GroupKind::of(obj)?;
        self.inner.entries.iter().find(|e| e.selector.matches(&gk))
    }

    /// The compile error of the rule for `obj`'s kind, when that rule is broken.
    pub fn broken_rule_for(&self, obj: &Value) -> Option<&RuleError> {
        match &self.entry_for(obj)?.rule {
            Rule::Broken(err) => Some(err),
            _ => None,
        }
    }

    /// Health of one live object: Progressing while it is being deleted, else its custom rule's verdict
    /// when one applies, else the built-in verdict of [`capstan_health::assess_with`].
    pub fn assess(&self, obj: &Value, ctx: &Context) -> Health {
        if let Some(deleting) = capstan_health::deletion_health(obj) {
            return deleting;
        }
        let Some(entry) = self.entry_for(obj) else {
            return capstan_health::assess_with(obj, ctx);
        };
        let health = match &entry.rule {
            Rule::Lua(rule) => rule.assess(obj),
            Rule::Cel(rule) => rule.assess(obj),
            Rule::Broken(err) => Health::new(capstan_health::HealthCode::Unknown, format!("custom health rule {err}")),
        };
        capstan_health::bounded(health)
    }
}

#[cfg(test)]
mod tests;

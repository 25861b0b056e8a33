//! Health of Crossplane objects: managed resources, claims and composite resources of any API group,
//! the configuration kinds of the `*.crossplane.io` and `*.upbound.io` groups, and the packages of
//! `pkg.crossplane.io` (Provider, Function, Configuration and their revisions).
//!
//! Upstream rules followed:
//! - Argo CD `resource_customizations/_.crossplane.io/_/health.lua` for every kind of a group ending in
//!   `.crossplane.io`, and for managed resources, claims and composite resources recognised by shape in
//!   any other group (see [`looks_like_crossplane`]);
//! - Argo CD `resource_customizations/_.upbound.io/_/health.lua` for groups ending in `.upbound.io`;
//! - Argo CD `resource_customizations/pkg.crossplane.io/{Provider,Function,Configuration}/health.lua`
//!   (Installed and Healthy conditions) and `.../{Provider,Function,Configuration}Revision/health.lua`
//!   (Healthy condition).
//!
//! One deliberate difference: upstream's `obj.status == nil` test answers Healthy for an object with no
//! status at all, so a claim that Crossplane has not reconciled yet would let the next sync wave start
//! before its database exists. Here a managed resource, claim or composite resource without status is
//! Progressing; only the configuration kinds that never get a status (Composition, ProviderConfig, ...)
//! are Healthy without one.

use serde_json::Value;

use crate::Health;
use crate::json::{Verdict, find, status_conditions, status_object, str_at};

/// Which of the two upstream wildcard checks applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavour {
    /// `*.crossplane.io`, and shape-recognised resources of other groups.
    Crossplane,
    /// `*.upbound.io`: only `Ready` makes Healthy, and a later failing condition still wins.
    Upbound,
}

/// The flavour of the wildcard rule for an API group, if the group is Crossplane's or Upbound's.
pub(crate) fn flavour_of_group(group: &str) -> Option<Flavour> {
    if group.ends_with(".crossplane.io") {
        Some(Flavour::Crossplane)
    } else if group.ends_with(".upbound.io") {
        Some(Flavour::Upbound)
    } else {
        None
    }
}

/// Kinds that never get a status (upstream's `has_no_status`, plus EnvironmentConfig and ImageConfig,
/// which upstream's fixtures show without status): Healthy as they are.
const HAS_NO_STATUS: [&str; 9] = [
    "Composition",
    "CompositionRevision",
    "DeploymentRuntimeConfig",
    "ClusterProviderConfig",
    "ProviderConfig",
    "ProviderConfigUsage",
    "ControllerConfig",
    "EnvironmentConfig",
    "ImageConfig",
];

/// Whether `obj` is a resource Crossplane reconciles into external state, recognised by the fields
/// Crossplane adds to the spec of such kinds whatever their group:
/// - a managed resource has `spec.forProvider` (an object) or `spec.providerConfigRef` (with a name);
/// - a claim has `spec.resourceRef` (with apiVersion and kind) or a composition choice
///   (`spec.compositionRef`, `spec.compositionSelector`, `spec.compositionRevisionRef`);
/// - a composite resource has `spec.resourceRefs` (a list), `spec.claimRef` or a composition choice,
///   and in Crossplane v2 these sit under `spec.crossplane` (an object);
/// - all three may have `spec.writeConnectionSecretToRef` (with a name).
pub(crate) fn looks_like_crossplane(obj: &Value) -> bool {
    let Some(spec) = obj.get("spec").and_then(Value::as_object) else {
        return false;
    };
    let object = |key: &str| spec.get(key).is_some_and(Value::is_object);
    let with_strings = |key: &str, fields: &[&str]| {
        spec.get(key)
            .is_some_and(|r| fields.iter().all(|f| r.get(f).is_some_and(Value::is_string)))
    };
    object("forProvider")
        || object("crossplane")
        || object("compositionSelector")
        || with_strings("providerConfigRef", &["name"])
        || with_strings("writeConnectionSecretToRef", &["name"])
        || with_strings("compositionRef", &["name"])
        || with_strings("compositionRevisionRef", &["name"])
        || with_strings("resourceRef", &["apiVersion", "kind"])
        || with_strings("claimRef", &["apiVersion", "kind"])
        || spec.get("resourceRefs").is_some_and(Value::is_array)
}

/// Upstream's default verdict.
fn provisioning() -> Health {
    Health::progressing("Provisioning ...")
}

fn up_to_date() -> Health {
    Health::healthy("Resource is up-to-date.")
}

/// The wildcard rule for any Crossplane or Upbound kind without a dedicated one.
pub(crate) fn resource(obj: &Value, flavour: Flavour) -> Verdict {
    let kind = str_at(obj, &["kind"]).unwrap_or("");
    let reconciled = looks_like_crossplane(obj);
    let Some(status) = status_object(obj)? else {
        return Ok(if reconciled {
            Health::progressing("Waiting for Crossplane to report the resource's status")
        } else {
            up_to_date()
        });
    };
    if status.is_empty() && HAS_NO_STATUS.contains(&kind) {
        return Ok(up_to_date());
    }
    let Some(conditions) = status_conditions(obj)? else {
        if matches!(kind, "ProviderConfig" | "ClusterProviderConfig")
            && status.get("users").is_some_and(|u| !u.is_null())
        {
            return Ok(Health::healthy("Resource is in use."));
        }
        return Ok(provisioning());
    };
    let healthy_types: &[&str] = match flavour {
        Flavour::Crossplane => &[
            "Ready",
            "Healthy",
            "Offered",
            "Established",
            "ValidPipeline",
            "RevisionHealthy",
        ],
        Flavour::Upbound => &["Ready"],
    };
    let mut verdict = provisioning();
    for c in &conditions {
        // vocabulary: Crossplane condition types
        if matches!(c.type_, "LastAsyncOperation" | "Synced") && c.is_false() {
            return Ok(Health::degraded(c.describe(|| format!("{} is False", c.type_))));
        }
        if healthy_types.contains(&c.type_) && c.is_true() {
            match flavour {
                Flavour::Crossplane => return Ok(up_to_date()),
                Flavour::Upbound => verdict = up_to_date(),
            }
        }
    }
    if verdict.code == crate::HealthCode::Progressing
        && let Some(ready) = find(&conditions, "Ready").filter(|c| !c.reason.is_empty())
    {
        // Same verdict as upstream, with the reason Crossplane gives (Creating, Unavailable, ...).
        return Ok(Health::progressing(format!("Provisioning ... ({})", ready.reason)));
    }
    Ok(verdict)
}

/// Which package kind, for the default message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Package {
    Provider,
    Function,
    Configuration,
}

impl Package {
    fn waiting(self) -> &'static str {
        match self {
            Package::Provider => "Waiting for provider to be installed",
            Package::Function => "Waiting for Function",
            Package::Configuration => "Waiting for Configuration",
        }
    }
}

/// pkg.crossplane.io Provider, Function, Configuration: Healthy when both Installed and Healthy are
/// True, Degraded as soon as there are conditions and either is not, Progressing without conditions.
/// The message is the two conditions' reasons.
pub(crate) fn package(obj: &Value, package: Package) -> Verdict {
    let Some(conditions) = status_conditions(obj)? else {
        return Ok(Health::progressing(package.waiting()));
    };
    // Upstream keeps the last occurrence of each type.
    let last = |t: &str| conditions.iter().rev().find(|c| c.type_ == t);
    let installed = last("Installed");
    let healthy = last("Healthy");
    let message = [installed, healthy]
        .iter()
        .map(|c| c.map_or("", |c| c.reason))
        .collect::<Vec<_>>()
        .join(" ");
    let message = message.trim().to_owned();
    if installed.is_some_and(|c| c.is_true()) && healthy.is_some_and(|c| c.is_true()) {
        Ok(Health::healthy(message))
    } else {
        Ok(Health::degraded(if message.is_empty() {
            "Package is not installed and healthy".to_owned()
        } else {
            message
        }))
    }
}

/// pkg.crossplane.io ProviderRevision, FunctionRevision, ConfigurationRevision: by the Healthy
/// condition alone.
pub(crate) fn package_revision(obj: &Value, package: Package) -> Verdict {
    let Some(conditions) = status_conditions(obj)? else {
        return Ok(Health::progressing(match package {
            Package::Provider => "Waiting for ProviderRevision",
            Package::Function => "Waiting for FunctionRevision",
            Package::Configuration => "Waiting for ConfigurationRevision",
        }));
    };
    // vocabulary: Crossplane condition types
    match conditions.iter().rev().find(|c| c.type_ == "Healthy") {
        Some(c) if c.is_true() => Ok(Health::healthy(c.reason)),
        Some(c) => Ok(Health::degraded(c.describe(|| "Healthy is not True".to_owned()))),
        None => Ok(Health::degraded("Package revision has no Healthy condition")),
    }
}

#[cfg(test)]
mod tests;

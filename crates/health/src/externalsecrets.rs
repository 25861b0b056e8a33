//! Health of External Secrets Operator objects (`external-secrets.io`): ExternalSecret,
//! ClusterExternalSecret, SecretStore, ClusterSecretStore and PushSecret.
//!
//! Upstream rules followed: Argo CD `resource_customizations/external-secrets.io/<Kind>/health.lua` for
//! each of the five kinds. All are decided by the `Ready` condition and wait (Progressing) without
//! one; a ClusterExternalSecret is judged by its newest (last) condition, where `PartiallyReady` and
//! `NotReady` are Degraded; an ExternalSecret with `refreshPolicy: OnChange` ignores a Ready condition
//! older than its last refresh.

use serde_json::Value;

use crate::Health;
use crate::json::{Condition, Verdict, status_conditions, str_at};
use crate::verdicts::first_ready;

/// ExternalSecret. A Ready condition whose status is neither True nor False (upstream returns no
/// verdict for it) is Progressing here.
pub(crate) fn external_secret(obj: &Value) -> Verdict {
    const WAITING: &str = "Waiting for ExternalSecret";
    let Some(conditions) = status_conditions(obj)? else {
        return Ok(Health::progressing(WAITING));
    };
    let on_change = str_at(obj, &["spec", "refreshPolicy"]) == Some("OnChange");
    let refresh_time = str_at(obj, &["status", "refreshTime"]);
    // RFC 3339 timestamps in UTC compare correctly as strings, as upstream compares them. Without a
    // refresh time there is nothing to be older than.
    let current = |c: &&Condition<'_>| !on_change || refresh_time.is_none_or(|r| c.last_transition_time >= r);
    Ok(match conditions.iter().filter(|c| c.type_ == "Ready").find(current) {
        Some(c) if c.is_false() => Health::degraded(c.describe(|| "Ready is False".to_owned())),
        Some(c) if c.is_true() => Health::healthy(c.message),
        Some(c) => Health::progressing(c.message_or(WAITING)),
        None => Health::progressing(WAITING),
    })
}

/// ClusterExternalSecret: its newest condition, the last of the list.
pub(crate) fn cluster_external_secret(obj: &Value) -> Verdict {
    const WAITING: &str = "Waiting for ClusterExternalSecret";
    let Some(conditions) = status_conditions(obj)? else {
        return Ok(Health::progressing(WAITING));
    };
    Ok(match conditions.last() {
        Some(c) if c.type_ == "Ready" && c.is_true() => Health::healthy(c.message),
        Some(c) if matches!(c.type_, "PartiallyReady" | "NotReady") && c.is_true() => {
            Health::degraded(c.describe(|| format!("ClusterExternalSecret is {}", c.type_)))
        }
        _ => Health::progressing(WAITING),
    })
}

/// SecretStore, ClusterSecretStore and PushSecret: the first Ready condition that is True or False.
pub(crate) fn by_ready(obj: &Value, kind: StoreKind) -> Verdict {
    let waiting = match kind {
        StoreKind::SecretStore => "Waiting for SecretStore",
        StoreKind::ClusterSecretStore => "Waiting for ClusterSecretStore",
        StoreKind::PushSecret => "Waiting for PushSecret",
    };
    Ok(status_conditions(obj)?.map_or_else(|| Health::progressing(waiting), |c| first_ready(&c, waiting)))
}

/// The kinds judged by [`by_ready`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreKind {
    SecretStore,
    ClusterSecretStore,
    PushSecret,
}

#[cfg(test)]
mod tests;

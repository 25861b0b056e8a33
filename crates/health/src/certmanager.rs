//! Health of cert-manager objects (`cert-manager.io`): Certificate, CertificateRequest, Issuer and
//! ClusterIssuer.
//!
//! Upstream rules followed: Argo CD `resource_customizations/cert-manager.io/Certificate/health.lua`,
//! `.../CertificateRequest/health.lua`, `.../Issuer/health.lua` and `.../ClusterIssuer/health.lua`.
//! Each waits (Progressing) until the `Ready` condition is True or False; a Certificate being issued is
//! Progressing whatever Ready says, and a CertificateRequest that was denied or is invalid is Degraded.

use serde_json::Value;

use crate::Health;
use crate::json::{Verdict, status_conditions};
use crate::verdicts::first_ready;

/// Certificate: `Issuing` True first (a renewal in flight is Progressing even while the old
/// certificate is still Ready), then `Ready`.
pub(crate) fn certificate(obj: &Value) -> Verdict {
    const WAITING: &str = "Waiting for certificate";
    let Some(conditions) = status_conditions(obj)? else {
        return Ok(Health::progressing(WAITING));
    };
    if let Some(issuing) = conditions.iter().find(|c| c.type_ == "Issuing" && c.is_true()) {
        return Ok(Health::progressing(issuing.message_or("Issuing certificate")));
    }
    Ok(first_ready(&conditions, WAITING))
}

/// CertificateRequest: `Denied` or `InvalidRequest` True is Degraded; then the first `Ready`
/// condition: True is Healthy, reason `Pending` is Progressing, anything else (Failed) Degraded.
pub(crate) fn certificate_request(obj: &Value) -> Verdict {
    const WAITING: &str = "Waiting for certificate request";
    let Some(conditions) = status_conditions(obj)? else {
        return Ok(Health::progressing(WAITING));
    };
    if let Some(refused) = conditions
        .iter()
        .find(|c| matches!(c.type_, "Denied" | "InvalidRequest") && c.is_true())
    {
        return Ok(Health::degraded(
            refused.describe(|| format!("CertificateRequest is {}", refused.type_)),
        ));
    }
    Ok(match conditions.iter().find(|c| c.type_ == "Ready") {
        Some(c) if c.is_true() => Health::healthy(c.message),
        // vocabulary: cert-manager's reasons
        Some(c) if c.reason == "Pending" => Health::progressing(c.message_or(WAITING)),
        Some(c) => Health::degraded(c.describe(|| format!("Ready is {}", c.status))),
        None => Health::progressing(WAITING),
    })
}

/// Issuer.
pub(crate) fn issuer(obj: &Value) -> Verdict {
    const WAITING: &str = "Initializing issuer";
    Ok(status_conditions(obj)?.map_or_else(|| Health::progressing(WAITING), |c| first_ready(&c, WAITING)))
}

/// ClusterIssuer.
pub(crate) fn cluster_issuer(obj: &Value) -> Verdict {
    const WAITING: &str = "Initializing ClusterIssuer";
    Ok(status_conditions(obj)?.map_or_else(|| Health::progressing(WAITING), |c| first_ready(&c, WAITING)))
}

#[cfg(test)]
mod tests;

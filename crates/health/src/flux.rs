//! Health of Flux objects: Kustomization (`kustomize.toolkit.fluxcd.io`), HelmRelease
//! (`helm.toolkit.fluxcd.io`), the sources GitRepository, HelmRepository, OCIRepository, Bucket and
//! HelmChart (`source.toolkit.fluxcd.io`) and ImagePolicy (`image.toolkit.fluxcd.io`).
//!
//! Upstream rules followed: Argo CD `resource_customizations/<group>/<Kind>/health.lua` for each of
//! these kinds. They share one shape: `spec.suspend: true` is Suspended; without conditions the object
//! is Progressing ("Status unknown"); otherwise conditions are counted: `Ready` Unknown (False for an
//! ImagePolicy) and `Reconciling` True each count as in progress, and two of those make Progressing;
//! `Ready` True and the kind's second success condition (`ArtifactInStorage` for sources, `Released` or
//! `TestSuccess` for a HelmRelease) count as succeeded, and all of them make Healthy; anything else is
//! Degraded, with the Ready reason as message.
//!
//! Two additions from Flux's own (kstatus) conventions, which upstream does not check: a
//! `status.observedGeneration` behind `metadata.generation` is Progressing (the controller has not
//! seen the new spec, so its Ready condition is about the old one), and `Stalled` True is Degraded.

use serde_json::Value;

use crate::Health;
use crate::json::{Verdict, int_at, is_true, status_conditions, str_at};

/// The Flux kinds with a rule, which differ in what counts as success and in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FluxKind {
    Kustomization,
    HelmRelease,
    /// GitRepository, HelmRepository, OCIRepository, Bucket, HelmChart.
    Source,
    ImagePolicy,
}

/// Reasons of `Reconciling` that count as in progress for an ImagePolicy.
const IMAGE_POLICY_WORK: [&str; 3] = ["NewGeneration", "AccessingRepository", "ApplyingPolicy"];

pub(crate) fn flux(obj: &Value, kind: FluxKind) -> Verdict {
    if kind != FluxKind::ImagePolicy && is_true(obj, &["spec", "suspend"]) {
        let name = str_at(obj, &["kind"]).unwrap_or("Object");
        return Ok(Health::suspended(format!("{name} is suspended")));
    }
    if kind == FluxKind::Source
        && str_at(obj, &["kind"]) == Some("HelmRepository")
        && str_at(obj, &["spec", "type"]) == Some("oci")
    {
        return Ok(Health::healthy(
            "Helm repositories of type 'oci' do not contain any information in the status.",
        ));
    }
    let conditions = status_conditions(obj)?;
    let generation = int_at(obj, &["metadata", "generation"]);
    let observed = int_at(obj, &["status", "observedGeneration"]);
    if let (Some(generation), Some(observed)) = (generation, observed)
        && observed < generation
    {
        return Ok(Health::progressing(format!(
            "Waiting for the controller to observe generation {generation} (observed {observed})"
        )));
    }
    let Some(conditions) = conditions else {
        return Ok(Health::progressing("Status unknown"));
    };
    if let Some(stalled) = conditions.iter().find(|c| c.type_ == "Stalled" && c.is_true()) {
        return Ok(Health::degraded(stalled.describe(|| "Stalled".to_owned())));
    }

    let mut in_progress = 0;
    let mut succeeded = 0;
    let mut message = String::new();
    for c in &conditions {
        match c.type_ {
            "Ready" => {
                if c.is_true() {
                    succeeded += 1;
                } else if (kind == FluxKind::ImagePolicy && c.is_false())
                    || (kind != FluxKind::ImagePolicy && c.is_unknown())
                {
                    in_progress += 1;
                }
                c.reason.clone_into(&mut message);
            }
            "Reconciling"
                if c.is_true() && (kind != FluxKind::ImagePolicy || IMAGE_POLICY_WORK.contains(&c.reason)) =>
            {
                in_progress += 1;
            }
            "ArtifactOutdated" if kind == FluxKind::Source && c.is_true() => {
                message = format!("{message} {}", c.reason);
            }
            "ArtifactInStorage" if kind == FluxKind::Source && c.is_true() => succeeded += 1,
            "Released" | "TestSuccess" if kind == FluxKind::HelmRelease && c.is_true() => succeeded += 1,
            _ => {}
        }
    }
    let needed = match kind {
        FluxKind::Kustomization | FluxKind::ImagePolicy => 1,
        FluxKind::HelmRelease | FluxKind::Source => 2,
    };
    Ok(if in_progress == 2 {
        Health::progressing(message)
    } else if succeeded == needed {
        Health::healthy(message)
    } else if message.trim().is_empty() {
        Health::degraded("Not ready")
    } else {
        Health::degraded(message)
    })
}

#[cfg(test)]
mod tests;

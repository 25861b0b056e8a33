//! Chart dependencies a render needs from outside the repository: [`RemoteDependency`] (what a chart
//! or a kustomization names) and [`ChartDependency`] (what the caller fetched for it).

use std::path::Path;

/// A chart dependency on a Helm repository or OCI registry, as the chart declares it (or as a
/// kustomization's `helmCharts` entry names it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteDependency {
    /// The dependency's name (the chart's name in the repository).
    pub name: String,
    /// Its `repository`: `http(s)://…` or `oci://…`.
    pub repository: String,
    /// Its `version`: an exact version or a constraint.
    pub version: String,
}

/// A remote dependency fetched: the extracted chart to vendor as `charts/NAME/` of a Helm chart, or
/// where Kustomize looks for a `helmCharts` entry.
#[derive(Debug, Clone, Copy)]
pub struct ChartDependency<'a> {
    /// The dependency's name.
    pub name: &'a str,
    /// Its repository, as declared.
    pub repository: &'a str,
    /// Its version or constraint, as declared.
    pub version: &'a str,
    /// The extracted chart (`Chart.yaml` at its root).
    pub dir: &'a Path,
    /// What identifies its content (version and digest), for the render cache key.
    pub revision: &'a str,
}

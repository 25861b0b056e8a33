//! What a caller asks the renderer for: the [`RenderRequest`] (checkout, source, destination facts,
//! `$ref` sources, fetched chart dependencies, decryption), and [`remote_dependencies`], which says
//! what a caller must fetch before asking.

use std::path::Path;

use capstan_api::application::ApplicationSource;

use crate::decrypt::Decryption;
use crate::dependency::{ChartDependency, RemoteDependency};
use crate::error::RenderError;
use crate::kind::Tool;
use crate::paths::{normalise_app_path, resolve_in_repo};
use crate::{helm, kustomize};

/// What to render.
#[derive(Debug, Clone)]
pub struct RenderRequest<'a> {
    /// Root of the checkout: a directory holding the whole repository tree at one commit.
    pub repo_root: &'a Path,
    /// The Application's `spec.source`.
    pub source: &'a ApplicationSource,
    /// The Application's name: the default Helm release name.
    pub app_name: &'a str,
    /// The destination namespace, passed to `helm template --namespace`. Kustomize uses only
    /// `source.kustomize.namespace`.
    pub namespace: &'a str,
    /// The cluster's Kubernetes version (e.g. `1.20.2`), for `helm --kube-version`.
    pub kube_version: Option<String>,
    /// The cluster's API versions (`apps/v1`, `networking.k8s.io/v1/Ingress`), for
    /// `helm --api-versions`.
    pub api_versions: Vec<String>,
    /// The other sources of a multi-source Application that carry a `ref`, whose files Helm
    /// `valueFiles` entries name as `$NAME/path`.
    pub refs: &'a [RefSource<'a>],
    /// Whether a render with no object at all is accepted (`spec.syncPolicy.automated.allowEmpty`).
    /// Without it, such a render is [`RenderError::EmptyRender`], naming the files the source skipped.
    pub allow_empty: bool,
    /// Charts that a Helm chart's repository dependencies resolved to, fetched by the caller from
    /// registered repositories only (see [`remote_dependencies`]); put under `charts/` of a scratch
    /// copy before `helm template`.
    pub dependencies: &'a [ChartDependency<'a>],
    /// `spec.decryption`: SOPS files of the checkout (and of `refs`) are decrypted in a scratch copy
    /// before the tool runs.
    pub decryption: Option<&'a Decryption>,
}

/// The dependencies of the Helm chart at `source.path` in `repo_root` that name a Helm repository or
/// an OCI registry and are not vendored under `charts/`, or the `helmCharts` entries of a Kustomize
/// overlay that name one and are not in the repository where Kustomize looks for them: what a caller
/// must fetch (from registered repositories only) and pass as [`RenderRequest::dependencies`]. Empty
/// for other sources.
pub fn remote_dependencies(repo_root: &Path, source: &ApplicationSource) -> Result<Vec<RemoteDependency>, RenderError> {
    let root = std::fs::canonicalize(repo_root)
        .map_err(|e| RenderError::io(format!("cannot open repository checkout {}", repo_root.display()), e))?;
    let app_rel = normalise_app_path(&source.path);
    let dir = resolve_in_repo(&root, &root, &app_rel)?;
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    match Tool::detect(&dir) {
        Tool::Helm => Ok(helm::remote_dependencies(&dir)),
        Tool::Kustomize => {
            let mut out: Vec<RemoteDependency> = Vec::new();
            for chart in kustomize::helm_charts(&root, &app_rel)? {
                if chart.repo.is_empty() || chart.is_vendored() {
                    continue;
                }
                let dependency = RemoteDependency {
                    name: chart.name,
                    repository: chart.repo,
                    version: chart.version,
                };
                if !out.contains(&dependency) {
                    out.push(dependency);
                }
            }
            Ok(out)
        }
        Tool::Directory => Ok(Vec::new()),
    }
}

/// A source named by `ref` in a multi-source Application: its checkout and revision.
#[derive(Debug, Clone, Copy)]
pub struct RefSource<'a> {
    /// The source's `ref`.
    pub name: &'a str,
    /// Root of its checkout.
    pub root: &'a Path,
    /// Its resolved revision (part of the render cache key: a new values commit renders again).
    pub revision: &'a str,
}

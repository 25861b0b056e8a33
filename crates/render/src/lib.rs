//! The `render` stage of Capstan's pipeline (`source → render → compare → sync → health`): turning a
//! checked-out Git tree plus an Application's `spec.source` into the Kubernetes objects it declares,
//! as `serde_json::Value`s.
//!
//! The tool is chosen by what `spec.source.path` contains, as Argo CD does: a `Chart.yaml` means Helm
//! (`helm template`), a `kustomization.yaml`, `kustomization.yml` or `Kustomization` means Kustomize
//! (`kustomize build`), anything else is a plain directory of YAML/JSON manifests and Jsonnet files
//! (see [`jsonnet`]). The real `helm` and `kustomize` binaries are used (see [`tools`]), each invocation
//! bounded by the renderer's timeout; Jsonnet is evaluated in a child process of Capstan's own binary,
//! bounded the same way. Helm hook annotations are mapped onto Capstan's sync phases (see [`hooks`]).
//! No default namespace is applied here: a later stage does that with API discovery.
//!
//! Rendering never lets a path escape the repository: `spec.source.path`, Helm value files, chart
//! dependencies, kustomization references and every manifest read are resolved with
//! [`resolve_in_repo`], checkouts containing symlinks that point outside are refused before a tool runs
//! on them, and tools that must write (`kustomize edit`, `helm dependency build`) work in a scratch
//! copy, never in the shared checkout.
//!
//! A render with no object at all is an error ([`RenderError::EmptyRender`], naming the files the
//! source skipped) unless the request allows it ([`RenderRequest::allow_empty`]): a source that
//! silently renders nothing would otherwise report success, or prune everything.
//!
//! Results are cached by revision, path, render parameters and tool version. A hard refresh drops an
//! Application's cached results with [`Renderer::invalidate`], so its next render runs the tool again.
//!
//! This file only declares the modules and re-exports their public items: [`request`] (what to
//! render), [`kind`] (which tool), [`renderer`] (cache, single flight and dispatch), and one module
//! per tool and per concern below them.

mod cache;
mod decrypt;
pub mod dependency;
pub mod directory;
mod empty;
mod error;
pub mod helm;
pub mod hooks;
pub mod jsonnet;
pub mod kind;
mod kustomization;
pub mod kustomize;
mod kustomize_charts;
mod manifests;
mod paths;
pub mod rendered;
pub mod renderer;
pub mod request;
mod task;
pub mod tools;

pub use decrypt::Decryption;
pub use dependency::{ChartDependency, RemoteDependency};
pub use error::RenderError;
pub use kind::Tool;
pub use kustomization::check_text as check_kustomization;
pub use manifests::parse as parse_manifests;
pub use paths::resolve_in_repo;
pub use rendered::Rendered;
pub use renderer::{DEFAULT_CACHE_CAPACITY, DEFAULT_TIMEOUT, MAX_CONCURRENT_RENDERS, RenderActivity, Renderer};
pub use request::{RefSource, RenderRequest, remote_dependencies};

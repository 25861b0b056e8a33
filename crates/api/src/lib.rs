//! Capstan's custom resource types, API group `capstan.dev`, version `v1alpha1`.
//!
//! This crate owns the shape of the objects users write (Applications, ApplicationSets, AppProjects,
//! Policies, PromotionPipelines and the cluster Secret layout), the well-known labels and annotations, the shapes of Kubernetes names ([`names`]), and the
//! identity of a repository URL ([`repo_url`]: one normalisation, one "same repository" rule). Field names
//! follow Argo CD's `argoproj.io/v1alpha1` schema wherever the concept is the same, so existing manifests carry over by
//! changing `apiVersion`. Beyond that URL rule it has no behaviour but (de)serialisation and CRD generation; every other
//! crate depends on it, and it depends on none of them.

pub mod application;
pub mod applicationset;
pub mod cluster;
pub mod crd;
pub mod image_updater;
pub mod labels;
pub mod names;
pub mod notification;
pub mod operation;
pub mod policy;
pub mod project;
pub mod promotion;
pub mod repo_url;
pub mod status;
pub mod sync_window;

pub use application::{Application, ApplicationSpec, ApplicationStatus};
pub use applicationset::{ApplicationSet, ApplicationSetSpec, ApplicationSetStatus};
pub use image_updater::{ImageUpdater, ImageUpdaterSpec, ImageUpdaterStatus};
pub use notification::{NotificationChannel, NotificationChannelSpec, NotificationChannelStatus};
pub use policy::{Policy, PolicySpec, PolicyStatus};
pub use project::{AppProject, AppProjectSpec};
pub use promotion::{PromotionPipeline, PromotionPipelineSpec};
pub use repo_url::{RepoUrl, UrlError};

/// The API group of every Capstan custom resource.
pub const GROUP: &str = "capstan.dev";
/// The API version of every Capstan custom resource.
pub const VERSION: &str = "v1alpha1";
/// The namespace Capstan runs in and keeps its own objects (Applications, cluster and repository Secrets).
pub const NAMESPACE: &str = "capstan";

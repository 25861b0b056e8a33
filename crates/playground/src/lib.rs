//! A local Kubernetes control plane for the playground and the test suite.
//!
//! This crate owns everything needed to run a real, throwaway cluster on one machine without a
//! kubelet: locating the cached binaries of the selected Kubernetes release ([`binaries`]), a private
//! PKI ([`pki`]), starting and stopping etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler and kwok as supervised processes ([`process`], [`plane`]), and what kwok is told
//! ([`kwok`]): the simulated Nodes and the stages that move Pods through their lifecycle, so that
//! Deployments, StatefulSets and Jobs reach real health through the real controllers. It knows
//! nothing about GitOps; the rest of Capstan only uses the kubeconfig it writes.

pub mod binaries;
pub mod error;
pub mod kubeconfig;
pub mod kwok;
pub mod pki;
pub mod plane;
pub mod process;

pub use binaries::KubeVersion;
pub use error::{Error, Result};
pub use plane::{AUDIT_LOG, ComponentStatus, Playground, UpOptions};

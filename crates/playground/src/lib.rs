//! A local Kubernetes control plane for the playground and the test suite.
//!
//! This crate owns everything needed to run a real, throwaway cluster on one machine without a
//! kubelet: locating the cached binaries ([`binaries`]), a private PKI ([`pki`]), starting and stopping
//! etcd, kube-apiserver and kube-controller-manager as supervised processes ([`process`],
//! [`plane`]), and a node simulator ([`nodesim`]) that registers Nodes, binds Pods to them and moves
//! Pods through their lifecycle so that Deployments, StatefulSets and Jobs reach real health through
//! the real controllers. It knows nothing about GitOps; the rest of Capstan only uses the kubeconfig
//! it writes.

pub mod binaries;
pub mod error;
pub mod kubeconfig;
pub mod nodesim;
pub mod pki;
pub mod plane;
pub mod process;

pub use error::{Error, Result};
pub use plane::{ComponentStatus, Playground, Simulator, UpOptions};

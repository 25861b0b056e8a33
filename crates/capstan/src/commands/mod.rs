//! One module per top-level subcommand.

pub mod crds;
pub mod install;
pub mod local;

//! One module per top-level subcommand.

pub mod account;
pub mod app;
pub mod appset;
pub mod appset_generate;
pub mod cluster;
pub mod controller;
pub mod crds;
pub mod install;
pub mod local;
pub mod server;

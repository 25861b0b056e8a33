//! The CLI through Capstan's HTTP server, for people who log in rather than hold a kubeconfig:
//! the sessions `capstan login` keeps per server ([`sessions`]: a file of mode 0600 in the user's
//! configuration directory) and the client that sends every request with them ([`client`]), so the
//! server's project roles apply to the CLI exactly as to the web UI.

pub mod client;
pub mod sessions;

pub use client::{Remote, RemoteError};

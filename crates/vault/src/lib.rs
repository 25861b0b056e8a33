//! Capstan's client for a secret store speaking the OpenBao/Vault HTTP API: it owns reading one
//! secret from a KV version 2 engine (`GET /v1/{mount}/data/{path}`), authenticated with a token or
//! with Kubernetes auth (a service-account JWT exchanged for a client token, cached for its lease).
//!
//! It is the building block of Secrets whose values come from a secret store, resolved when the
//! controller applies: a reference such as `secret/payments#apiKey` ([`KvPath`]) names the engine's
//! mount, the secret's path and one key of it.
//!
//! Nothing secret leaves this crate by accident: tokens, JWTs and secret values are held in
//! [`SecretString`], whose `Debug` and `Display` print `***`; errors ([`VaultError`]) and logs name
//! addresses, paths, keys, mounts and roles, never values.
//!
//! - [`config`]: where the store is and how to authenticate ([`StoreConfig`], [`Auth`]).
//! - [`path`]: `mount/path#key` references ([`KvPath`]).
//! - [`secret`]: masked strings and a read secret ([`SecretString`], [`KvSecret`]).
//! - [`client`]: [`VaultClient`], reading KV v2 secrets.
//! - `auth`: logging in and caching the client token.
//! - `http`: the HTTP transport (timeouts, size limit, TLS with an optional private CA).
//! - [`error`]: the error type, [`VaultError`].

mod auth;
pub mod client;
pub mod config;
pub mod error;
mod http;
pub mod path;
pub mod secret;

pub use client::VaultClient;
pub use config::{Auth, StoreConfig};
pub use error::VaultError;
pub use path::KvPath;
pub use secret::{KvSecret, SecretString, SecretValue};

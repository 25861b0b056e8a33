//! Decryption of SOPS 3.x files with age identities, in pure Rust.
//!
//! This crate owns one question: given the bytes of a file encrypted by [sops](https://github.com/getsops/sops)
//! and the age X25519 [`Identities`] Capstan holds, what is the plaintext file? [`decrypt`] returns it
//! in the same [`Format`] with the `sops` metadata removed, ready for helm, kustomize or a plain directory
//! render to read; [`is_encrypted`] tells cheaply whether a file is a SOPS file at all. Nothing here
//! encrypts, reads files, or talks to a key service.
//!
//! What is checked, as sops itself does: the 32-byte data key is age-decrypted from `sops.age[].enc`;
//! every encrypted value (`ENC[AES256_GCM,data:…,iv:…,tag:…,type:…]`) is opened with AES-256-GCM using
//! its path (keys joined with `:`, plus `:`) as additional data; the MAC (SHA-512 over the values in
//! document order, `mac_only_encrypted` honoured) is itself opened with `lastmodified` as additional data
//! and compared. A changed value, MAC or `lastmodified` is refused. Errors ([`SopsError`]) never carry
//! plaintext or key material.
//!
//! The format layer is hand-written rather than taken from `rops` (the one Rust SOPS implementation on
//! crates.io): rops pulls in the AWS SDK and the deprecated `serde_yaml` by default, has no dotenv or
//! binary support, and is a small single-maintainer project; the format itself is small (sops
//! `sops.go`, `aes/cipher.go`, `stores/`) and is checked here against the real sops binary
//! (`tests/real_sops.rs`).
//!
//! Not supported (refused with a clear error): pgp/KMS/Vault-only files, Shamir key groups (more than
//! one group), `encrypted_comment_regex`/`unencrypted_comment_regex`, INI files. YAML comments are not
//! carried to the output (the data, key order and types are).

mod dotenv;
mod error;
mod identities;
mod json;
mod mac;
mod metadata;
mod tree;
mod value;
mod walk;
mod yaml;

pub use error::SopsError;
pub use identities::Identities;

use error::not_sops;
use metadata::Metadata;
use tree::Node;
use walk::Walker;

/// The store a file is read with, as sops chooses it from the file name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `*.yaml`, `*.yml`.
    Yaml,
    /// `*.json`.
    Json,
    /// `*.env`.
    Dotenv,
    /// Any other file: sops wraps its bytes as `{"data": "…"}` in JSON.
    Binary,
}

impl Format {
    /// sops' choice by suffix: `.yaml`/`.yml`, `.json`, `.env`, anything else is binary.
    pub fn from_path(path: impl AsRef<std::path::Path>) -> Self {
        let name = path.as_ref().to_string_lossy();
        if name.ends_with(".yaml") || name.ends_with(".yml") {
            Format::Yaml
        } else if name.ends_with(".json") {
            Format::Json
        } else if name.ends_with(".env") {
            Format::Dotenv
        } else {
            Format::Binary
        }
    }
}

/// Whether the bytes look like a SOPS file of that format: a top-level `sops` map with `mac` and
/// `lastmodified` (dotenv: `sops_mac=` and `sops_lastmodified=` lines). No decryption is attempted.
pub fn is_encrypted(bytes: &[u8], format: Format) -> bool {
    let has_meta = |doc: &Node| {
        doc.get("sops")
            .is_some_and(|m| matches!(m, Node::Map(_)) && m.get("mac").is_some() && m.get("lastmodified").is_some())
    };
    match format {
        Format::Dotenv => dotenv::is_encrypted(bytes),
        Format::Json | Format::Binary => {
            // Cheap pre-check before parsing.
            contains(bytes, b"\"sops\"") && json::parse(bytes).is_ok_and(|d| has_meta(&d))
        }
        Format::Yaml => {
            contains(bytes, b"sops") && yaml::parse(bytes).is_ok_and(|docs| docs.first().is_some_and(has_meta))
        }
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Decrypts a SOPS file into the plaintext file in the same format, without the `sops` metadata.
pub fn decrypt(bytes: &[u8], format: Format, ids: &Identities) -> Result<Vec<u8>, SopsError> {
    match format {
        Format::Yaml => {
            let mut docs = yaml::parse(bytes)?;
            let meta = take_metadata(&mut docs)?;
            let docs = decrypt_docs(docs, &meta, ids)?;
            Ok(yaml::emit(&docs))
        }
        Format::Json | Format::Binary => {
            let mut docs = vec![json::parse(bytes)?];
            let meta = take_metadata(&mut docs)?;
            let docs = decrypt_docs(docs, &meta, ids)?;
            let doc = docs.into_iter().next().unwrap_or(Node::Null);
            if format == Format::Binary {
                json::binary_data(&doc)
            } else {
                json::emit(&doc)
            }
        }
        Format::Dotenv => {
            let (lines, meta) = dotenv::parse(bytes)?;
            let meta = Metadata::parse(&meta.ok_or_else(|| not_sops("no sops_ entries"))?)?;
            let key = meta.data_key(ids)?;
            let mut walker = Walker::new(key, &meta);
            let mut out = Vec::with_capacity(lines.len());
            for line in lines {
                match line {
                    dotenv::Line::Comment(c) => out.push((None, Node::Str(walker.comment(c, &[])))),
                    dotenv::Line::Pair(k, v) => {
                        let path = [k];
                        if let Some(v) = walker.leaf(Node::Str(v), &path)? {
                            let [k] = path;
                            out.push((Some(k), v));
                        }
                    }
                }
            }
            mac::verify(&meta, &key, &walker.mac())?;
            Ok(dotenv::emit(&out))
        }
    }
}

/// Removes the `sops` entry from every document; the metadata is the first document's (sops
/// `ExtractMetadata`).
fn take_metadata(docs: &mut [Node]) -> Result<Metadata, SopsError> {
    let mut found = None;
    for (i, doc) in docs.iter_mut().enumerate() {
        let Node::Map(items) = doc else {
            if i == 0 {
                return Err(not_sops(format!("the document is a {}, not a map", doc.kind())));
            }
            continue;
        };
        let mut seen = 0;
        items.retain(|(k, v)| {
            if k != "sops" {
                return true;
            }
            if i == 0 {
                seen += 1;
                found = Some(v.clone());
            }
            false
        });
        if seen > 1 {
            return Err(not_sops("duplicate sops entry"));
        }
    }
    Metadata::parse(&found.ok_or_else(|| not_sops("no top-level sops entry"))?)
}

fn decrypt_docs(docs: Vec<Node>, meta: &Metadata, ids: &Identities) -> Result<Vec<Node>, SopsError> {
    let key = meta.data_key(ids)?;
    let mut walker = Walker::new(key, meta);
    let mut out = Vec::with_capacity(docs.len());
    for doc in docs {
        out.push(walker.document(doc)?);
    }
    mac::verify(meta, &key, &walker.mac())?;
    Ok(out)
}

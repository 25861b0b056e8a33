//! The walk over a SOPS tree (sops `Tree.Decrypt`): decrypts the leaves the metadata's rule marks as
//! encrypted, with the value's path (keys joined with `:`, plus a trailing `:`; list items keep their
//! parent's path) as additional data, and feeds the MAC with every value (or only the encrypted ones
//! under `mac_only_encrypted`), in document order. Null values are neither decrypted nor MAC'd.

use sha2::{Digest, Sha512};

use crate::error::{SopsError, malformed};
use crate::metadata::Metadata;
use crate::tree::{Node, mac_bytes};
use crate::value::{self, Plain};

/// sops `MACOnlyEncryptedInitialization`: the MAC of a `mac_only_encrypted` file starts with these bytes.
const MAC_ONLY_ENCRYPTED_INIT: [u8; 32] = [
    0x8a, 0x3f, 0xd2, 0xad, 0x54, 0xce, 0x66, 0x52, 0x7b, 0x10, 0x34, 0xf3, 0xd1, 0x47, 0xbe, 0x0b, 0x0b, 0x97, 0x5b,
    0x3b, 0xf4, 0x4f, 0x72, 0xc6, 0xfd, 0xad, 0xec, 0x81, 0x76, 0xf2, 0x7d, 0x69,
];

pub(crate) struct Walker<'a> {
    key: [u8; 32],
    meta: &'a Metadata,
    hasher: Sha512,
}

impl<'a> Walker<'a> {
    pub(crate) fn new(key: [u8; 32], meta: &'a Metadata) -> Self {
        let mut hasher = Sha512::new();
        if meta.mac_only_encrypted {
            hasher.update(MAC_ONLY_ENCRYPTED_INIT);
        }
        Self { key, meta, hasher }
    }

    /// The MAC of everything walked so far, as SOPS writes it (upper-case hex of the SHA-512).
    pub(crate) fn mac(self) -> String {
        self.hasher.finalize().iter().map(|b| format!("{b:02X}")).collect()
    }

    /// Decrypts one document (a map) in place.
    pub(crate) fn document(&mut self, doc: Node) -> Result<Node, SopsError> {
        let mut path = Vec::new();
        Ok(self.node(doc, &mut path)?.unwrap_or(Node::Null))
    }

    /// `None` when the node turned out to be a comment (dropped from the output tree).
    fn node(&mut self, node: Node, path: &mut Vec<String>) -> Result<Option<Node>, SopsError> {
        match node {
            Node::Null => Ok(Some(Node::Null)),
            Node::Map(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (k, v) in items {
                    path.push(k);
                    let v = self.node(v, path)?;
                    let k = path.pop().unwrap_or_default();
                    if let Some(v) = v {
                        out.push((k, v));
                    }
                }
                Ok(Some(Node::Map(out)))
            }
            Node::Seq(items) => {
                let mut out = Vec::with_capacity(items.len());
                for v in items {
                    if let Some(v) = self.node(v, path)? {
                        out.push(v);
                    }
                }
                Ok(Some(Node::Seq(out)))
            }
            leaf => self.leaf(leaf, path),
        }
    }

    /// One scalar at `path`; `None` for a decrypted comment.
    pub(crate) fn leaf(&mut self, leaf: Node, path: &[String]) -> Result<Option<Node>, SopsError> {
        let keys: Vec<&str> = path.iter().map(String::as_str).collect();
        let encrypted = self.meta.rule.encrypts(&keys);
        let plain = if encrypted {
            let Node::Str(text) = &leaf else {
                return Err(malformed(format!(
                    "the value at {:?} should be encrypted but is a plain {}",
                    aad(path),
                    leaf.kind()
                )));
            };
            match value::decrypt(text, &self.key, &aad(path), &aad(path))? {
                Plain::Value(v) => v,
                Plain::Comment(_) => return Ok(None),
            }
        } else {
            leaf
        };
        if (!self.meta.mac_only_encrypted || encrypted)
            && let Some(bytes) = mac_bytes(&plain)
        {
            self.hasher.update(bytes);
        }
        Ok(Some(plain))
    }

    /// A comment at `path` (dotenv): decrypted when the rule encrypts it and it is an encrypted comment;
    /// kept as it is otherwise (SOPS does the same for comments written by older versions). Never MAC'd.
    pub(crate) fn comment(&mut self, text: String, path: &[String]) -> String {
        let keys: Vec<&str> = path.iter().map(String::as_str).collect();
        if !self.meta.rule.encrypts(&keys) || !value::looks_encrypted(&text) {
            return text;
        }
        match value::decrypt(&text, &self.key, &aad(path), &aad(path)) {
            Ok(Plain::Comment(c)) => c,
            Ok(Plain::Value(Node::Str(c))) => c,
            _ => text,
        }
    }
}

/// sops' additional data for a value: `strings.Join(path, ":") + ":"`.
pub(crate) fn aad(path: &[String]) -> String {
    let mut s = path.join(":");
    s.push(':');
    s
}

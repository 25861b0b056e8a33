//! The `sops` metadata block (sops `stores/stores.go`): master keys, MAC, `lastmodified`, the rules
//! that say which leaves are encrypted, and recovery of the 32-byte data key with age identities.

use regex::Regex;

use crate::error::{SopsError, not_sops};
use crate::identities::Identities;
use crate::tree::Node;

/// SOPS' default when a file names no encryption rule.
const DEFAULT_UNENCRYPTED_SUFFIX: &str = "_unencrypted";

/// Which leaves are encrypted (exactly one rule applies; SOPS refuses files naming more than one).
#[derive(Debug)]
pub(crate) enum Rule {
    UnencryptedSuffix(String),
    EncryptedSuffix(String),
    UnencryptedRegex(Regex),
    EncryptedRegex(Regex),
}

impl Rule {
    /// sops `Tree.shouldBeEncrypted` for a value at `path` (comment regexes are refused at parse time).
    pub(crate) fn encrypts(&self, path: &[&str]) -> bool {
        match self {
            Rule::UnencryptedSuffix(s) => !path.iter().any(|k| k.ends_with(s.as_str())),
            Rule::EncryptedSuffix(s) => path.iter().any(|k| k.ends_with(s.as_str())),
            Rule::UnencryptedRegex(r) => !path.iter().any(|k| r.is_match(k)),
            Rule::EncryptedRegex(r) => path.iter().any(|k| r.is_match(k)),
        }
    }
}

/// One age master key: its public recipient and the armored, age-encrypted data key.
#[derive(Debug)]
struct AgeKey {
    recipient: String,
    enc: String,
}

/// The parsed `sops` metadata.
#[derive(Debug)]
pub(crate) struct Metadata {
    pub(crate) lastmodified: String,
    pub(crate) mac: String,
    pub(crate) mac_only_encrypted: bool,
    pub(crate) rule: Rule,
    age: Vec<AgeKey>,
    /// Kinds of other master keys (pgp, kms, …) present in the file.
    others: Vec<&'static str>,
}

const OTHER_KINDS: [(&str, &str); 6] = [
    ("pgp", "pgp"),
    ("kms", "aws kms"),
    ("gcp_kms", "gcp kms"),
    ("azure_kv", "azure key vault"),
    ("hc_vault", "hashicorp vault"),
    ("hckms", "huaweicloud kms"),
];

fn string_field<'a>(meta: &'a Node, name: &str) -> Result<Option<&'a str>, SopsError> {
    match meta.get(name) {
        None | Some(Node::Null) => Ok(None),
        Some(Node::Str(s)) => Ok(Some(s.as_str())),
        Some(other) => Err(not_sops(format!("sops.{name} is a {}, not a string", other.kind()))),
    }
}

fn non_empty<'a>(meta: &'a Node, name: &str) -> Result<Option<&'a str>, SopsError> {
    Ok(string_field(meta, name)?.filter(|s| !s.is_empty()))
}

impl Metadata {
    /// Parses the `sops` map (already unflattened for dotenv). Errors name the missing or bad field.
    pub(crate) fn parse(meta: &Node) -> Result<Self, SopsError> {
        if !matches!(meta, Node::Map(_)) {
            return Err(not_sops(format!("the sops entry is a {}, not a map", meta.kind())));
        }
        let mac = string_field(meta, "mac")?
            .ok_or_else(|| not_sops("sops.mac is missing"))?
            .to_string();
        let lastmodified = string_field(meta, "lastmodified")?
            .ok_or_else(|| not_sops("sops.lastmodified is missing"))?
            .to_string();
        if !looks_rfc3339(&lastmodified) {
            return Err(not_sops("sops.lastmodified is not an RFC 3339 time"));
        }
        if let Some(version) = string_field(meta, "version")?
            && version.split('.').next() != Some("3")
        {
            return Err(SopsError::UnsupportedVersion {
                version: version.to_string(),
            });
        }
        let mac_only_encrypted = match meta.get("mac_only_encrypted") {
            None | Some(Node::Null) => false,
            Some(Node::Bool(b)) => *b,
            Some(Node::Str(s)) if s == "true" || s == "True" => true,
            Some(Node::Str(s)) if s == "false" || s == "False" || s.is_empty() => false,
            Some(_) => return Err(not_sops("sops.mac_only_encrypted is not a boolean")),
        };
        for name in ["unencrypted_comment_regex", "encrypted_comment_regex"] {
            if non_empty(meta, name)?.is_some() {
                return Err(SopsError::Unsupported {
                    feature: format!("sops.{name}"),
                });
            }
        }
        let regex =
            |name: &str, r: &str| Regex::new(r).map_err(|_| not_sops(format!("sops.{name} is not a valid regex")));
        let mut rules = Vec::new();
        if let Some(s) = non_empty(meta, "unencrypted_suffix")? {
            rules.push(Rule::UnencryptedSuffix(s.to_string()));
        }
        if let Some(s) = non_empty(meta, "encrypted_suffix")? {
            rules.push(Rule::EncryptedSuffix(s.to_string()));
        }
        if let Some(s) = non_empty(meta, "unencrypted_regex")? {
            rules.push(Rule::UnencryptedRegex(regex("unencrypted_regex", s)?));
        }
        if let Some(s) = non_empty(meta, "encrypted_regex")? {
            rules.push(Rule::EncryptedRegex(regex("encrypted_regex", s)?));
        }
        if rules.len() > 1 {
            return Err(not_sops(
                "sops names more than one of encrypted_suffix, unencrypted_suffix, encrypted_regex, unencrypted_regex",
            ));
        }
        let rule = rules
            .pop()
            .unwrap_or(Rule::UnencryptedSuffix(DEFAULT_UNENCRYPTED_SUFFIX.to_string()));

        let mut age = Vec::new();
        let mut others = Vec::new();
        let flat_keys = read_group(meta, "sops", &mut age, &mut others)?;
        // Like SOPS, master keys at the top level win over key_groups.
        if !flat_keys {
            match meta.get("key_groups") {
                None | Some(Node::Null) => {}
                Some(Node::Seq(groups)) if groups.len() > 1 => {
                    return Err(SopsError::Unsupported {
                        feature: format!("Shamir secret sharing over {} key groups", groups.len()),
                    });
                }
                Some(Node::Seq(groups)) => {
                    for group in groups {
                        read_group(group, "sops.key_groups[0]", &mut age, &mut others)?;
                    }
                }
                Some(other) => return Err(not_sops(format!("sops.key_groups is a {}, not a list", other.kind()))),
            }
        }
        if age.is_empty() && others.is_empty() {
            return Err(not_sops("sops names no master key (age, pgp, kms, …)"));
        }
        others.dedup();
        Ok(Self {
            lastmodified,
            mac,
            mac_only_encrypted,
            rule,
            age,
            others,
        })
    }

    /// Recovers the 32-byte data key with the first age master key one of `ids` opens.
    pub(crate) fn data_key(&self, ids: &Identities) -> Result<[u8; 32], SopsError> {
        if self.age.is_empty() {
            return Err(SopsError::UnsupportedKeyGroup {
                kinds: self.others.join(", "),
            });
        }
        for key in &self.age {
            if let Some(plain) = ids.decrypt_armored(&key.enc)? {
                return <[u8; 32]>::try_from(plain.as_slice()).map_err(|_| {
                    crate::error::malformed(format!(
                        "the data key for {} is {} bytes, not 32",
                        key.recipient,
                        plain.len()
                    ))
                });
            }
        }
        Err(SopsError::NoMatchingKey {
            recipients: self.age.iter().map(|k| k.recipient.clone()).collect(),
        })
    }
}

/// Reads the master keys of one group; whether it had any.
fn read_group(
    group: &Node,
    at: &str,
    age: &mut Vec<AgeKey>,
    others: &mut Vec<&'static str>,
) -> Result<bool, SopsError> {
    let mut any = false;
    match group.get("age") {
        None | Some(Node::Null) => {}
        Some(Node::Seq(items)) => {
            for (i, item) in items.iter().enumerate() {
                let field = |name: &str| match item.get(name) {
                    Some(Node::Str(s)) if !s.is_empty() => Ok(s.clone()),
                    _ => Err(not_sops(format!("{at}.age[{i}].{name} is missing or not a string"))),
                };
                age.push(AgeKey {
                    recipient: field("recipient")?,
                    enc: field("enc")?,
                });
                any = true;
            }
        }
        Some(other) => return Err(not_sops(format!("{at}.age is a {}, not a list", other.kind()))),
    }
    for (field, kind) in OTHER_KINDS {
        match group.get(field) {
            None | Some(Node::Null) => {}
            Some(Node::Seq(items)) if items.is_empty() => {}
            Some(Node::Seq(_)) => {
                others.push(kind);
                any = true;
            }
            Some(other) => return Err(not_sops(format!("{at}.{field} is a {}, not a list", other.kind()))),
        }
    }
    Ok(any)
}

/// A cheap shape check of `2006-01-02T15:04:05Z07:00`.
fn looks_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 20
        && b[4] == b'-'
        && b[7] == b'-'
        && (b[10] == b'T' || b[10] == b't')
        && b[13] == b':'
        && b[16] == b':'
        && b[..4].iter().all(u8::is_ascii_digit)
}

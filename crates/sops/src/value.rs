//! One encrypted SOPS value: `ENC[AES256_GCM,data:…,iv:…,tag:…,type:…]` (sops `aes/cipher.go`), opened
//! with AES-256-GCM under the data key, a 32-byte IV, and the value's path as additional data.

use aes_gcm::aead::consts::U32;
use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{AesGcm, aes::Aes256};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use crate::error::{SopsError, malformed};
use crate::tree::Node;

/// AES-256-GCM with SOPS' 32-byte nonce.
type Cipher = AesGcm<Aes256, U32>;

/// The decrypted content of an `ENC[]` value, typed as its `type:` field says.
#[derive(Debug, PartialEq)]
pub(crate) enum Plain {
    Value(Node),
    /// A `type:comment` value (SOPS stores comments of lists and dotenv files this way).
    Comment(String),
}

struct Parts<'a> {
    data: &'a str,
    iv: &'a str,
    tag: &'a str,
    kind: &'a str,
}

/// Whether a string has SOPS' encrypted-value shape (no decryption attempted).
pub(crate) fn looks_encrypted(s: &str) -> bool {
    split(s).is_some()
}

fn split(s: &str) -> Option<Parts<'_>> {
    let rest = s.strip_prefix("ENC[AES256_GCM,data:")?.strip_suffix(']')?;
    let (data, rest) = rest.split_once(",iv:")?;
    let (iv, rest) = rest.split_once(",tag:")?;
    let (tag, kind) = rest.split_once(",type:")?;
    Some(Parts { data, iv, tag, kind })
}

/// Decrypts one value. `path` is the additional data (SOPS: the keys joined with `:`, plus `:`); it
/// only appears in errors, which never contain the plaintext.
pub(crate) fn decrypt(value: &str, key: &[u8; 32], aad: &str, path: &str) -> Result<Plain, SopsError> {
    if value.is_empty() {
        // SOPS leaves empty strings unencrypted.
        return Ok(Plain::Value(Node::Str(String::new())));
    }
    let parts =
        split(value).ok_or_else(|| malformed(format!("the value at {path:?} is not an ENC[AES256_GCM,…] value")))?;
    let field = |name: &str, b64: &str| {
        STANDARD
            .decode(b64)
            .map_err(|_| malformed(format!("the {name} of the value at {path:?} is not base64")))
    };
    let data = field("data", parts.data)?;
    let iv = field("iv", parts.iv)?;
    let tag = field("tag", parts.tag)?;
    if iv.len() != 32 {
        return Err(malformed(format!(
            "the iv of the value at {path:?} is {} bytes, not 32",
            iv.len()
        )));
    }
    if tag.len() != 16 {
        return Err(malformed(format!(
            "the tag of the value at {path:?} is {} bytes, not 16",
            tag.len()
        )));
    }
    let mut sealed = data;
    sealed.extend_from_slice(&tag);
    let cipher = Cipher::new(key.into());
    let plain = cipher
        .decrypt(
            aes_gcm::Nonce::<U32>::from_slice(&iv),
            Payload {
                msg: &sealed,
                aad: aad.as_bytes(),
            },
        )
        .map_err(|_| SopsError::TamperedValue { path: path.to_string() })?;
    let text = String::from_utf8(plain);
    let bad = |kind: &str| malformed(format!("the value at {path:?} does not decrypt to a valid {kind}"));
    let text = match (parts.kind, text) {
        ("bytes", Ok(t)) => t,
        (_, Ok(t)) => t,
        (kind, Err(_)) => return Err(bad(kind)),
    };
    // From now on this value is scrubbed from whatever leaves the process (a tool's error quoting a
    // decrypted value file, a condition, an event).
    if parts.kind != "comment" {
        capstan_redact::register(&text);
    }
    Ok(match parts.kind {
        "str" | "bytes" | "time" => Plain::Value(Node::Str(text)),
        "int" => Plain::Value(Node::Int(text.parse().map_err(|_| bad("int"))?)),
        "float" => Plain::Value(Node::Float(parse_go_float(&text).ok_or_else(|| bad("float"))?)),
        "bool" => Plain::Value(Node::Bool(parse_go_bool(&text).ok_or_else(|| bad("bool"))?)),
        "comment" => Plain::Comment(text),
        other => return Err(malformed(format!("the value at {path:?} has unknown type {other:?}"))),
    })
}

/// Go's `strconv.ParseBool`.
fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Go's `strconv.ParseFloat` for what SOPS writes (decimal forms, `+Inf`, `-Inf`, `NaN`).
fn parse_go_float(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" | "inf" | "+inf" => Some(f64::INFINITY),
        "-Inf" | "-inf" => Some(f64::NEG_INFINITY),
        "NaN" | "nan" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seal(key: &[u8; 32], iv: &[u8; 32], plain: &str, aad: &str, kind: &str) -> String {
        let out = Cipher::new(key.into())
            .encrypt(
                aes_gcm::Nonce::<U32>::from_slice(iv),
                Payload {
                    msg: plain.as_bytes(),
                    aad: aad.as_bytes(),
                },
            )
            .expect("encrypt");
        let (data, tag) = out.split_at(out.len() - 16);
        format!(
            "ENC[AES256_GCM,data:{},iv:{},tag:{},type:{kind}]",
            STANDARD.encode(data),
            STANDARD.encode(iv),
            STANDARD.encode(tag)
        )
    }

    #[test]
    fn round_trips_typed_values() {
        let key = [7u8; 32];
        let iv = [9u8; 32];
        let v = seal(&key, &iv, "42", "a:b:", "int");
        assert!(looks_encrypted(&v));
        assert_eq!(
            decrypt(&v, &key, "a:b:", "a:b:").expect("int"),
            Plain::Value(Node::Int(42))
        );
        let v = seal(&key, &iv, "True", "x:", "bool");
        assert_eq!(
            decrypt(&v, &key, "x:", "x:").expect("bool"),
            Plain::Value(Node::Bool(true))
        );
        let v = seal(&key, &iv, " note", ":", "comment");
        assert_eq!(
            decrypt(&v, &key, ":", ":").expect("comment"),
            Plain::Comment(" note".into())
        );
    }

    #[test]
    fn wrong_path_or_truncation_is_refused() {
        let key = [7u8; 32];
        let v = seal(&key, &[1u8; 32], "secret-plaintext", "a:", "str");
        let err = decrypt(&v, &key, "b:", "b:").expect_err("moved value");
        assert!(matches!(err, SopsError::TamperedValue { .. }));
        assert!(!err.to_string().contains("secret-plaintext"));
        let err = decrypt(&v[..v.len() - 10], &key, "a:", "a:").expect_err("truncated");
        assert!(matches!(err, SopsError::Malformed { .. }));
    }
}

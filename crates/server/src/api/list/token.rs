//! The list's `continue` token: where the next page starts (after the last name returned) and which
//! filters it was made for, signed so that a token cannot be forged, altered, or reused with other
//! filters.
//!
//! The token is checked without any state kept by the server: its signing key is derived from the
//! session key of the server's Secret (`server.secretkey`), which every server replica reads from the
//! API server, so a token made by one replica is good on every other. Rotating that key (as a logout
//! of everyone does) makes outstanding tokens invalid: the client starts the list again.
//!
//! Layout, base64url without padding: a version byte, 16 bytes of the filters' SHA-256, the last name
//! (UTF-8), then the first 16 bytes of an HMAC-SHA256 over everything before it.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use subtle::ConstantTimeEq;

/// The layout this server writes and reads.
const VERSION: u8 = 1;
/// Bytes of the filters' digest kept in the token.
const DIGEST: usize = 16;
/// Bytes of the signature kept in the token.
const TAG: usize = 16;
/// The longest name an Application may have (a DNS subdomain).
const MAX_NAME: usize = 253;
/// The longest token this server can have made.
pub const MAX_TOKEN: usize = (1 + DIGEST + MAX_NAME + TAG).div_ceil(3) * 4;

/// Why a `continue` token is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    /// Longer than any token this server makes.
    #[error("is {0} characters long; a continue token of this server has at most {MAX_TOKEN}")]
    TooLong(usize),
    /// Not base64url, or too short to hold a token.
    #[error("is not a continue token of this server (not base64url, or too short)")]
    Undecodable,
    /// A layout this server does not know.
    #[error("has version {0}; this server reads version {VERSION}")]
    Version(u8),
    /// The signature does not match: altered, forged, or signed with a key since rotated.
    #[error("was altered or not made by this server (its signature does not match); start the list again")]
    Signature,
    /// A genuine token, made for a request with other filters.
    #[error(
        "was made for other filters; send it with the same project, cluster, namespace, sync, health, label and search as the request that returned it"
    )]
    OtherFilters,
    /// The name inside is not an Application name.
    #[error("does not hold an Application name")]
    Name,
}

/// The digest of a request's filters, in the canonical form [`super::Filters::canonical`] gives.
pub fn filters_digest(canonical: &str) -> [u8; DIGEST] {
    let full = ring::digest::digest(&ring::digest::SHA256, canonical.as_bytes());
    let mut out = [0u8; DIGEST];
    out.copy_from_slice(&full.as_ref()[..DIGEST]);
    out
}

/// The key continue tokens are signed with, derived from the server's session key (so that it is
/// never the session key itself).
pub fn signing_key(session_key: &[u8]) -> ring::hmac::Key {
    let base = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, session_key);
    let derived = ring::hmac::sign(&base, b"capstan list continue token v1");
    ring::hmac::Key::new(ring::hmac::HMAC_SHA256, derived.as_ref())
}

fn tag(key: &ring::hmac::Key, body: &[u8]) -> [u8; TAG] {
    let full = ring::hmac::sign(key, body);
    let mut out = [0u8; TAG];
    out.copy_from_slice(&full.as_ref()[..TAG]);
    out
}

/// The token of a page that ended at `after`, for filters of digest `filters`.
pub fn encode(key: &ring::hmac::Key, filters: &[u8; DIGEST], after: &str) -> String {
    let mut body = Vec::with_capacity(1 + DIGEST + after.len() + TAG);
    body.push(VERSION);
    body.extend_from_slice(filters);
    body.extend_from_slice(after.as_bytes());
    let t = tag(key, &body);
    body.extend_from_slice(&t);
    B64.encode(body)
}

/// The name the next page starts after, if `token` is genuine and was made for filters of digest
/// `filters`.
pub fn decode(key: &ring::hmac::Key, filters: &[u8; DIGEST], token: &str) -> Result<String, TokenError> {
    if token.len() > MAX_TOKEN {
        return Err(TokenError::TooLong(token.len()));
    }
    let raw = B64.decode(token).map_err(|_| TokenError::Undecodable)?;
    if raw.len() < 1 + DIGEST + TAG {
        return Err(TokenError::Undecodable);
    }
    if raw[0] != VERSION {
        return Err(TokenError::Version(raw[0]));
    }
    let (body, sig) = raw.split_at(raw.len() - TAG);
    if !bool::from(tag(key, body).ct_eq(sig)) {
        return Err(TokenError::Signature);
    }
    if body[1..1 + DIGEST] != filters[..] {
        return Err(TokenError::OtherFilters);
    }
    let name = std::str::from_utf8(&body[1 + DIGEST..]).map_err(|_| TokenError::Name)?;
    if crate::api::valid_name(name).is_err() {
        return Err(TokenError::Name);
    }
    Ok(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ring::hmac::Key {
        signing_key(b"the session key of a test")
    }

    #[test]
    fn a_token_gives_back_its_name_for_the_same_filters() {
        let f = filters_digest("project=a");
        let t = encode(&key(), &f, "app-0999");
        assert_eq!(decode(&key(), &f, &t), Ok("app-0999".to_string()));
        // URL-safe as it is: no padding, no `+` or `/`.
        assert!(
            t.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
            "{t}"
        );
        let longest = encode(&key(), &f, &"a".repeat(MAX_NAME));
        assert!(longest.len() <= MAX_TOKEN);
        assert_eq!(decode(&key(), &f, &longest), Ok("a".repeat(MAX_NAME)));
    }

    #[test]
    fn another_replica_with_the_same_secret_reads_it() {
        // Nothing but the shared session key is needed: a second key built from it agrees.
        let f = filters_digest("");
        let t = encode(&signing_key(b"shared"), &f, "web");
        assert_eq!(decode(&signing_key(b"shared"), &f, &t), Ok("web".to_string()));
        assert_eq!(decode(&signing_key(b"rotated"), &f, &t), Err(TokenError::Signature));
    }

    #[test]
    fn other_filters_are_refused() {
        let t = encode(&key(), &filters_digest("health=Healthy"), "web");
        assert_eq!(
            decode(&key(), &filters_digest("health=Degraded"), &t),
            Err(TokenError::OtherFilters)
        );
    }

    #[test]
    fn any_altered_byte_is_refused() {
        let f = filters_digest("");
        let t = encode(&key(), &f, "app-0100");
        let raw = B64.decode(&t).expect("own token decodes");
        for i in 0..raw.len() {
            let mut bad = raw.clone();
            bad[i] ^= 0x01;
            let result = decode(&key(), &f, &B64.encode(&bad));
            assert!(result.is_err(), "byte {i} flipped: {result:?}");
        }
        // A forged token naming another start, with a made-up signature.
        let mut forged = vec![VERSION];
        forged.extend_from_slice(&f);
        forged.extend_from_slice(b"app-0000");
        forged.extend_from_slice(&[0u8; TAG]);
        assert_eq!(decode(&key(), &f, &B64.encode(&forged)), Err(TokenError::Signature));
    }

    #[test]
    fn garbage_is_refused_with_a_reason() {
        let f = filters_digest("");
        assert_eq!(decode(&key(), &f, "not base64!"), Err(TokenError::Undecodable));
        assert_eq!(decode(&key(), &f, "abcd"), Err(TokenError::Undecodable));
        assert_eq!(decode(&key(), &f, ""), Err(TokenError::Undecodable));
        let long = "A".repeat(MAX_TOKEN + 1);
        assert_eq!(decode(&key(), &f, &long), Err(TokenError::TooLong(MAX_TOKEN + 1)));
        let mut v2 = vec![2u8];
        v2.extend_from_slice(&[0u8; DIGEST + TAG + 3]);
        assert_eq!(decode(&key(), &f, &B64.encode(&v2)), Err(TokenError::Version(2)));
    }

    #[test]
    fn a_signed_token_must_still_hold_a_name() {
        // Signed with the right key but holding something that is not a name: refused all the same.
        let f = filters_digest("");
        for bad in ["", "Not/A/Name", "../x"] {
            let t = encode(&key(), &f, bad);
            assert_eq!(decode(&key(), &f, &t), Err(TokenError::Name), "{bad:?}");
        }
    }
}

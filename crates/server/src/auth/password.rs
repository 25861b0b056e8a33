//! Password hashes: PBKDF2-HMAC-SHA256 (ring's implementation), stored as
//! `$pbkdf2-sha256$i=ITERATIONS$SALT$HASH` with base64 (no padding) salt and hash.

use std::num::NonZeroU32;

use base64::Engine;
use base64::engine::general_purpose::STANDARD_NO_PAD as B64;
use ring::rand::{SecureRandom, SystemRandom};

/// Iterations for new hashes (OWASP's figure for PBKDF2-HMAC-SHA256).
const ITERATIONS: u32 = 600_000;
const PREFIX: &str = "$pbkdf2-sha256$i=";

/// Hash `password` with a fresh random salt.
pub fn hash(password: &str) -> String {
    let mut salt = [0u8; 16];
    // The system's random source failing is not something a caller can handle.
    SystemRandom::new().fill(&mut salt).expect("system random source");
    hash_with(password, &salt, ITERATIONS)
}

fn hash_with(password: &str, salt: &[u8], iterations: u32) -> String {
    let mut out = [0u8; 32];
    let n = NonZeroU32::new(iterations).unwrap_or(NonZeroU32::MIN);
    ring::pbkdf2::derive(ring::pbkdf2::PBKDF2_HMAC_SHA256, n, salt, password.as_bytes(), &mut out);
    format!("{PREFIX}{iterations}${}${}", B64.encode(salt), B64.encode(out))
}

/// Whether `password` matches `stored` (constant time in the hash comparison). A malformed stored
/// value never matches.
pub fn verify(password: &str, stored: &str) -> bool {
    let Some(rest) = stored.trim().strip_prefix(PREFIX) else {
        return false;
    };
    let mut parts = rest.split('$');
    let (Some(iterations), Some(salt), Some(hash), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let (Ok(iterations), Ok(salt), Ok(hash)) = (iterations.parse::<u32>(), B64.decode(salt), B64.decode(hash)) else {
        return false;
    };
    let Some(n) = NonZeroU32::new(iterations) else {
        return false;
    };
    ring::pbkdf2::verify(ring::pbkdf2::PBKDF2_HMAC_SHA256, n, &salt, password.as_bytes(), &hash).is_ok()
}

/// A random secret of `bytes` bytes, base64url without padding (passwords, keys, token secrets).
pub fn random_secret(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    SystemRandom::new().fill(&mut buf).expect("system random source");
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_verifies_its_password_only() {
        let stored = hash_with("s3cret", b"0123456789abcdef", 1000);
        assert!(stored.starts_with("$pbkdf2-sha256$i=1000$"));
        assert!(verify("s3cret", &stored));
        assert!(!verify("s3cret ", &stored));
        assert!(!verify("", &stored));
    }

    #[test]
    fn malformed_hashes_never_match() {
        for stored in [
            "",
            "s3cret",
            "$pbkdf2-sha256$i=0$AAAA$AAAA",
            "$pbkdf2-sha256$i=10$!!$AA",
            "$md5$x",
        ] {
            assert!(!verify("s3cret", stored), "{stored}");
        }
    }

    #[test]
    fn random_secrets_differ() {
        assert_ne!(random_secret(16), random_secret(16));
        assert_eq!(random_secret(32).len(), 43);
    }
}

//! Signed session cookies: `BASE64URL(JSON payload).BASE64URL(HMAC-SHA256(key, first part))`.
//! Stateless: the server keeps no session table; a session ends when it expires, the signing key
//! (`server.secretkey` in `capstan-secret`) changes, or (local accounts) the account's session
//! generation moves past the one the cookie carries.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Name of the session cookie.
pub const COOKIE: &str = "capstan_session";
/// How long a session lasts.
pub const LIFETIME_SECS: u64 = 12 * 3600;

/// What a session cookie says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// The user.
    pub sub: String,
    /// The user's groups.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Whether the user logged in through single sign-on (and is not a local account).
    #[serde(default)]
    pub sso: bool,
    /// Expiry, seconds since the epoch.
    pub exp: u64,
    /// The CSRF token state-changing requests must repeat in `X-CSRF-Token`.
    pub csrf: String,
    /// The account's session generation at login (local accounts; cookies from before generations
    /// existed read as 0).
    #[serde(default)]
    pub generation: u64,
}

/// Seconds since the epoch.
pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The cookie value of `session` signed with `key`.
pub fn encode(session: &Session, key: &[u8]) -> String {
    seal(session, key)
}

/// The session in `value` if its signature is valid under `key` and it has not expired.
pub fn decode(value: &str, key: &[u8], now: u64) -> Option<Session> {
    open::<Session>(value, key).filter(|s| s.exp > now)
}

/// `value` as JSON, signed with `key`.
pub fn seal<T: Serialize>(value: &T, key: &[u8]) -> String {
    let payload = B64.encode(serde_json::to_vec(value).unwrap_or_default());
    let tag = ring::hmac::sign(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key), payload.as_bytes());
    format!("{payload}.{}", B64.encode(tag.as_ref()))
}

/// What [`seal`] sealed, if the signature is valid under `key`.
pub fn open<T: DeserializeOwned>(value: &str, key: &[u8]) -> Option<T> {
    let (payload, tag) = value.split_once('.')?;
    let tag = B64.decode(tag).ok()?;
    ring::hmac::verify(
        &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key),
        payload.as_bytes(),
        &tag,
    )
    .ok()?;
    serde_json::from_slice(&B64.decode(payload).ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(exp: u64) -> Session {
        Session {
            sub: "admin".into(),
            groups: vec!["ops".into()],
            sso: false,
            exp,
            csrf: "c".into(),
            generation: 0,
        }
    }

    #[test]
    fn a_signed_session_round_trips_until_it_expires() {
        let value = encode(&session(100), b"key");
        assert_eq!(decode(&value, b"key", 99), Some(session(100)));
        assert_eq!(decode(&value, b"key", 100), None, "expired");
    }

    #[test]
    fn a_forged_or_re_keyed_session_is_refused() {
        let value = encode(&session(100), b"key");
        assert_eq!(decode(&value, b"other", 0), None);
        let (payload, tag) = value.split_once('.').unwrap();
        let mut forged: Session = serde_json::from_slice(&B64.decode(payload).unwrap()).unwrap();
        forged.sub = "root".into();
        let forged = format!("{}.{tag}", B64.encode(serde_json::to_vec(&forged).unwrap()));
        assert_eq!(decode(&forged, b"key", 0), None);
        assert_eq!(decode("garbage", b"key", 0), None);
        assert_eq!(decode("a.b.c", b"key", 0), None);
    }
}

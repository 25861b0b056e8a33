//! Connection state per cluster. The controller probes every destination and records the result
//! in one ConfigMap in Capstan's namespace (one key per cluster, JSON), so `capstan cluster list`
//! can show it without talking to every cluster itself.

use capstan_api::status::ConnectionStatus;
use serde_json::Value;

/// Name of the ConfigMap holding every cluster's connection state.
pub const STATUS_CONFIGMAP: &str = "capstan-cluster-status";

/// The connection state of one cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectionState {
    /// `Successful`, `Failed` or `Unknown`.
    pub status: ConnectionStatus,
    /// The last error, if the last probe failed.
    pub message: String,
    /// The server's version (`v1.20.2`), from the last successful probe.
    pub server_version: String,
    /// When it was last probed (RFC 3339).
    pub checked_at: String,
}

impl ConnectionState {
    /// The JSON stored under the cluster's key.
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "status": self.status,
            "message": self.message,
            "serverVersion": self.server_version,
            "checkedAt": self.checked_at,
        })
        .to_string()
    }

    /// Read the JSON stored under a cluster's key (`Unknown` if it is not readable).
    pub fn from_json(text: &str) -> ConnectionState {
        let v: Value = serde_json::from_str(text).unwrap_or_default();
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        ConnectionState {
            status: ConnectionStatus::parse(&s("status")).unwrap_or_default(),
            message: s("message"),
            server_version: s("serverVersion"),
            checked_at: s("checkedAt"),
        }
    }
}

/// The ConfigMap key for a cluster name (`:` and `/` of server URLs are not allowed in keys).
pub fn key_for(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-._".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_and_garbage_is_unknown() {
        let s = ConnectionState {
            status: ConnectionStatus::Failed,
            message: "connection refused".into(),
            server_version: "v1.20.2".into(),
            checked_at: "2026-01-01T00:00:00Z".into(),
        };
        assert_eq!(ConnectionState::from_json(&s.to_json()), s);
        assert_eq!(ConnectionState::from_json("nope").status, ConnectionStatus::Unknown);
        assert_eq!(key_for("https://a:1"), "https___a_1");
    }
}

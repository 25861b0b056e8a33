//! Decryption Secrets: age identities for SOPS files (`spec.decryption.secretRef`), read from a Secret
//! in Capstan's namespace labelled `capstan.dev/secret-type: decryption`. Every data key ending in
//! `.agekey` holds one or more `AGE-SECRET-KEY-1…` lines (Flux's layout). Errors name the Secret and
//! its keys, never their values.

use capstan_api::labels::SECRET_TYPE_LABEL;
use capstan_sops::Identities;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

/// The label value of decryption Secrets.
pub const DECRYPTION_SECRET_TYPE: &str = "decryption";

/// Why a decryption Secret cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DecryptionKeyError {
    /// No Secret of that name in Capstan's namespace.
    #[error("decryption Secret {name:?} not found in namespace {namespace:?}")]
    NotFound {
        /// The Secret's name.
        name: String,
        /// Capstan's namespace.
        namespace: String,
    },
    /// The Secret exists but is not labelled as a decryption Secret.
    #[error("Secret {name:?} is not a decryption Secret (label it {SECRET_TYPE_LABEL}={DECRYPTION_SECRET_TYPE})")]
    NotLabelled {
        /// The Secret's name.
        name: String,
    },
    /// The Secret holds no usable identity.
    #[error("decryption Secret {name:?}: {reason}")]
    Invalid {
        /// The Secret's name.
        name: String,
        /// What is wrong (names keys, never values).
        reason: String,
    },
    /// The API server refused or failed the read.
    #[error("cannot read decryption Secret {name:?}: {source}")]
    Api {
        /// The Secret's name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

/// The age identities of the decryption Secret `name` in `namespace`.
pub async fn identities(client: &kube::Client, namespace: &str, name: &str) -> Result<Identities, DecryptionKeyError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = secrets
        .get_opt(name)
        .await
        .map_err(|source| DecryptionKeyError::Api {
            name: name.to_string(),
            source,
        })?
        .ok_or_else(|| DecryptionKeyError::NotFound {
            name: name.to_string(),
            namespace: namespace.to_string(),
        })?;
    let labelled = secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(SECRET_TYPE_LABEL))
        .is_some_and(|t| t == DECRYPTION_SECRET_TYPE);
    if !labelled {
        return Err(DecryptionKeyError::NotLabelled { name: name.to_string() });
    }
    parse(name, &secret)
}

fn parse(name: &str, secret: &Secret) -> Result<Identities, DecryptionKeyError> {
    let invalid = |reason: String| DecryptionKeyError::Invalid {
        name: name.to_string(),
        reason,
    };
    let mut text = String::new();
    let mut keys = Vec::new();
    for (key, value) in secret.data.iter().flatten() {
        if !key.ends_with(".agekey") {
            continue;
        }
        let value = std::str::from_utf8(&value.0).map_err(|_| invalid(format!("key {key:?} is not text")))?;
        text.push_str(value);
        text.push('\n');
        keys.push(key.as_str());
    }
    if keys.is_empty() {
        return Err(invalid("no data key ending in .agekey".into()));
    }
    Identities::parse(&text).map_err(|e| invalid(format!("keys {}: {e}", keys.join(", "))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    fn secret(data: &[(&str, &str)]) -> Secret {
        Secret {
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn keys_ending_in_agekey_hold_identities_and_errors_show_no_key_material() {
        let err = parse("k", &secret(&[("age.txt", "AGE-SECRET-KEY-1XYZ")])).unwrap_err();
        assert!(err.to_string().contains(".agekey"), "{err}");
        let err = parse("k", &secret(&[("a.agekey", "AGE-SECRET-KEY-1NOTAKEY")])).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("a.agekey") && !message.contains("NOTAKEY"),
            "{message}"
        );
    }
}

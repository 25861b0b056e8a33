//! Secrets whose values come from a secret store (OpenBao/Vault), resolved on every pass between
//! rendering and preparing the objects: a rendered `v1` Secret annotated `capstan.dev/secret-store:
//! STORE` and `capstan.dev/secret-data: "KEY: mount/path#key"` lines gets `data[KEY]` read from the
//! store. It owns the clients of the stores (one per store, rebuilt when the store's Secret changes)
//! and nothing else: values are never cached beyond one pass, and never logged or put in an error.
//!
//! The objects given are the pass's own (the render cache hands out clones), so the resolved values
//! never reach the render cache; they go to the cluster in the Secret and nowhere else.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use capstan_api::Application;
use capstan_api::project::AppProjectSpec;
use capstan_cluster::secret_store::{self, StoreError};
use capstan_vault::{Auth, KvPath, KvSecret, SecretString, VaultClient};
use serde_json::{Map, Value};

use super::Pipeline;
use crate::error::PipelineError;

/// The annotation naming a Secret's store.
pub const STORE_ANNOTATION: &str = "capstan.dev/secret-store";
/// The annotation mapping a Secret's data keys to references in the store.
pub const DATA_ANNOTATION: &str = "capstan.dev/secret-data";

/// The longest data key Kubernetes accepts.
const MAX_KEY_LEN: usize = 253;

/// Clients of the secret stores, by store name; a client is rebuilt when its store Secret's
/// resourceVersion (or the service-account token it logs in with) changes.
#[derive(Default)]
pub(crate) struct StoreClients {
    clients: Mutex<HashMap<String, Cached>>,
}

struct Cached {
    resource_version: String,
    jwt: Option<SecretString>,
    client: Arc<VaultClient>,
}

impl StoreClients {
    /// The client of the store `name` in Capstan's `namespace`, reading its Secret now.
    async fn client(&self, kube: &kube::Client, namespace: &str, name: &str) -> Result<Arc<VaultClient>, StoreError> {
        let store = secret_store::lookup(kube, namespace, name).await?;
        let jwt = match &store.config.auth {
            Auth::Kubernetes { jwt, .. } => Some(jwt.clone()),
            Auth::Token(_) => None,
        };
        let mut clients = self.clients.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(cached) = clients.get(name)
            && cached.resource_version == store.resource_version
            && cached.jwt == jwt
        {
            return Ok(cached.client.clone());
        }
        let client = VaultClient::new(store.config).map_err(|e| StoreError::BadStore {
            name: name.to_string(),
            reason: e.to_string(),
        })?;
        tracing::debug!(
            store = name,
            address = client.address(),
            "secret store client (re)built"
        );
        let client = Arc::new(client);
        clients.insert(
            name.to_string(),
            Cached {
                resource_version: store.resource_version,
                jwt,
                client: client.clone(),
            },
        );
        Ok(client)
    }
}

/// Fill the data of every Secret in `objects` that names a secret store, reading the values now.
/// The first failure fails the pass (nothing of it is applied).
pub(super) async fn resolve(
    pipeline: &Pipeline,
    app: &Application,
    project: &str,
    rules: &AppProjectSpec,
    objects: &mut [Value],
) -> Result<(), PipelineError> {
    // One pass: each store's Secret read once, each secret of a store read once.
    let mut clients: HashMap<String, Arc<VaultClient>> = HashMap::new();
    let mut read: HashMap<(String, String), KvSecret> = HashMap::new();
    for object in objects.iter_mut() {
        let Some(store) = store_of(object) else {
            continue;
        };
        let described = describe(object, &app.spec.destination.namespace);
        capstan_project::check_secret_store(project, rules, &store).map_err(|source| {
            PipelineError::SecretStoreRefused {
                object: described.clone(),
                source,
            }
        })?;
        let annotation = object["metadata"]["annotations"][DATA_ANNOTATION]
            .as_str()
            .unwrap_or_default();
        let references = parse_references(annotation).map_err(|reason| PipelineError::SecretData {
            object: described.clone(),
            reason,
        })?;
        for (_, reference) in &references {
            capstan_project::check_secret_path(project, rules, &store, &reference.location()).map_err(|source| {
                PipelineError::SecretStoreRefused {
                    object: described.clone(),
                    source,
                }
            })?;
        }
        for (key, _) in &references {
            for field in ["data", "stringData"] {
                if object[field].get(key).is_some() {
                    return Err(PipelineError::SecretData {
                        object: described.clone(),
                        reason: format!("key {key:?} is given both in {field} and in {DATA_ANNOTATION}"),
                    });
                }
            }
        }
        let client = match clients.get(&store) {
            Some(client) => client.clone(),
            None => {
                let client = pipeline
                    .secret_stores
                    .client(&pipeline.client, &pipeline.namespace, &store)
                    .await
                    .map_err(|source| PipelineError::SecretStore {
                        object: described.clone(),
                        source,
                    })?;
                clients.insert(store.clone(), client.clone());
                client
            }
        };
        let mut values = Map::new();
        for (key, reference) in &references {
            let value_error = |source| PipelineError::SecretValue {
                object: described.clone(),
                key: key.clone(),
                store: store.clone(),
                reference: reference.to_string(),
                source: Box::new(source),
            };
            let slot = (store.clone(), reference.location());
            if !read.contains_key(&slot) {
                let secret = client.read_kv(reference).await.map_err(value_error)?;
                read.insert(slot.clone(), secret);
            }
            if let Some(secret) = read.get(&slot) {
                let value = secret.get(reference.key()).map_err(value_error)?;
                values.insert(key.clone(), Value::String(BASE64.encode(value.expose())));
            }
        }
        let resolved = values.len();
        match object.get_mut("data").and_then(Value::as_object_mut) {
            Some(data) => data.extend(values),
            None => object["data"] = Value::Object(values),
        }
        tracing::debug!(object = %described, store, keys = resolved, "Secret values read from its secret store");
    }
    Ok(())
}

/// The store a rendered object names, if it is a `v1` Secret with the store annotation.
fn store_of(object: &Value) -> Option<String> {
    if object["apiVersion"] != "v1" || object["kind"] != "Secret" {
        return None;
    }
    object["metadata"]["annotations"][STORE_ANNOTATION]
        .as_str()
        .map(|s| s.trim().to_string())
}

/// `Secret NAMESPACE/NAME`, the namespace defaulting to the destination's.
fn describe(object: &Value, default_namespace: &str) -> String {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let namespace = object["metadata"]["namespace"]
        .as_str()
        .filter(|n| !n.is_empty())
        .unwrap_or(default_namespace);
    if namespace.is_empty() {
        format!("Secret {name}")
    } else {
        format!("Secret {namespace}/{name}")
    }
}

/// The `KEY: mount/path#key` lines of the data annotation (blank lines and `#` comments skipped;
/// keys and references may be quoted), in order.
fn parse_references(text: &str) -> Result<Vec<(String, KvPath)>, String> {
    let mut references: Vec<(String, KvPath)> = Vec::new();
    let mut seen = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let n = i + 1;
        let Some((key, reference)) = line.split_once(':') else {
            return Err(format!("{DATA_ANNOTATION} line {n} is not `KEY: mount/path#key`"));
        };
        let key = unquote(key.trim());
        let reference = unquote(reference.trim());
        if !valid_key(key) {
            return Err(format!(
                "{DATA_ANNOTATION} line {n}: {key:?} is not a valid Secret data key (letters, digits, '-', '_' \
                 and '.', at most {MAX_KEY_LEN})"
            ));
        }
        if seen.insert(key.to_string(), n).is_some() {
            return Err(format!("{DATA_ANNOTATION} names key {key:?} twice"));
        }
        let path = KvPath::parse(reference).map_err(|e| format!("{DATA_ANNOTATION} key {key:?}: {e}"))?;
        references.push((key.to_string(), path));
    }
    if references.is_empty() {
        return Err(format!(
            "{STORE_ANNOTATION} is set but {DATA_ANNOTATION} names no keys (one `KEY: mount/path#key` line per key)"
        ));
    }
    Ok(references)
}

fn unquote(s: &str) -> &str {
    for quote in ['"', '\''] {
        if let Some(inner) = s.strip_prefix(quote).and_then(|s| s.strip_suffix(quote)) {
            return inner;
        }
    }
    s
}

/// A valid Secret data key: `[-._a-zA-Z0-9]+`, not `.` or `..`, at most 253 characters.
fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= MAX_KEY_LEN
        && key != "."
        && key != ".."
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_are_key_lines() {
        let refs = parse_references(
            "apiKey: secret/payments#apiKey\n\n# a comment\n\"db.password\": 'secret/payments/db#password'\n",
        )
        .expect("valid");
        let shown: Vec<(String, String)> = refs.iter().map(|(k, p)| (k.clone(), p.to_string())).collect();
        assert_eq!(shown.len(), 2);
        assert_eq!(shown[0].0, "apiKey");
        assert_eq!(refs[0].1.location(), "secret/payments");
        assert_eq!(refs[0].1.key(), "apiKey");
        assert_eq!(shown[1].0, "db.password");
        assert_eq!(refs[1].1.location(), "secret/payments/db");
        assert_eq!(refs[1].1.key(), "password");
    }

    #[test]
    fn bad_references_are_refused_with_their_line_or_key() {
        for (text, expected) in [
            ("", "names no keys"),
            ("just words", "line 1"),
            ("a/b: secret/x#y", "\"a/b\""),
            ("a: secret/x#y\na: secret/x#z", "twice"),
            ("a: secret/x", "\"a\""),
            ("..: secret/x#y", "\"..\""),
        ] {
            let err = parse_references(text).err().unwrap_or_default();
            assert!(err.contains(expected), "{text:?}: {err}");
        }
    }

    #[test]
    fn only_annotated_v1_secrets_name_a_store() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "annotations": {STORE_ANNOTATION: " bao "}}});
        assert_eq!(store_of(&secret).as_deref(), Some("bao"));
        let mut cm = secret.clone();
        cm["kind"] = json!("ConfigMap");
        assert_eq!(store_of(&cm), None);
        assert_eq!(
            store_of(&json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}})),
            None
        );
        assert_eq!(describe(&secret, "apps"), "Secret apps/s");
    }
}

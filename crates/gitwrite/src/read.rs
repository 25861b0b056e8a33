//! Reading the value an edit would replace, before writing: the scalar at a [`KeyPath`] of a YAML or
//! JSON document, or the `newTag` of a kustomization's `images:` entry. Image updates (is the chosen
//! tag there already?) and promotions (what does the source environment run, what does the target?)
//! read through these two functions, so that what they compare is what [`crate::edit`] changes.

use serde_json::Value;

use crate::{KeyPath, Segment};

/// Why a value could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The text is not a YAML (or JSON) document.
    #[error("not YAML: {0}")]
    Document(#[source] serde_saphyr::Error),
    /// No value at the key path (or no `images:` entry of that name).
    #[error("key {key} not found")]
    MissingKey {
        /// The key path, as written.
        key: String,
    },
    /// The value at the key path is a mapping or a sequence.
    #[error("{key} is not a scalar")]
    NotScalar {
        /// The key path, as written.
        key: String,
    },
}

/// The scalar at `key` in `text` as a string: a string as it is, a number or a boolean as YAML
/// writes it; `None` for null (`key:` with no value).
pub fn scalar_at(text: &str, key: &KeyPath) -> Result<Option<String>, ReadError> {
    let document: Value = serde_saphyr::from_str(text).map_err(ReadError::Document)?;
    let mut at = &document;
    for segment in key.segments() {
        at = match segment {
            Segment::Key(k) => at.get(k.as_str()),
            Segment::Index(i) => at.get(*i),
        }
        .ok_or_else(|| ReadError::MissingKey { key: key.to_string() })?;
    }
    scalar(at).ok_or_else(|| ReadError::NotScalar { key: key.to_string() })
}

/// The `newTag` of the `images:` entry named `name` in the kustomization `text` (`None` when the
/// entry has no `newTag` yet).
pub fn kustomize_image_tag(text: &str, name: &str) -> Result<Option<String>, ReadError> {
    let document: Value = serde_saphyr::from_str(text).map_err(ReadError::Document)?;
    let key = || format!("images[name={name}].newTag");
    let entry = document
        .get("images")
        .and_then(Value::as_array)
        .and_then(|images| {
            images
                .iter()
                .find(|i| i.get("name").and_then(Value::as_str) == Some(name))
        })
        .ok_or_else(|| ReadError::MissingKey { key: key() })?;
    match entry.get("newTag") {
        None => Ok(None),
        Some(tag) => scalar(tag).ok_or_else(|| ReadError::NotScalar { key: key() }),
    }
}

/// A scalar as a string (`Some(None)` for null); `None` for a mapping or a sequence.
fn scalar(value: &Value) -> Option<Option<String>> {
    match value {
        Value::String(s) => Some(Some(s.clone())),
        Value::Number(n) => Some(Some(n.to_string())),
        Value::Bool(b) => Some(Some(b.to_string())),
        Value::Null => Some(None),
        Value::Array(_) | Value::Object(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> KeyPath {
        s.parse().expect("a key path")
    }

    #[test]
    fn scalars_are_read_as_strings() {
        let text = "# c\nimageTag: \"1.4.2\"\nreplicas: 3\nimage:\n  tag: v1\nlist: [a, 7]\nempty:\non: true\n";
        assert_eq!(scalar_at(text, &key("imageTag")).unwrap().as_deref(), Some("1.4.2"));
        assert_eq!(scalar_at(text, &key("replicas")).unwrap().as_deref(), Some("3"));
        assert_eq!(scalar_at(text, &key("image.tag")).unwrap().as_deref(), Some("v1"));
        assert_eq!(scalar_at(text, &key("list[1]")).unwrap().as_deref(), Some("7"));
        assert_eq!(scalar_at(text, &key("empty")).unwrap(), None);
        assert_eq!(
            scalar_at(text, &key("targetRevision")).unwrap_err().to_string(),
            "key targetRevision not found"
        );
        assert_eq!(
            scalar_at(text, &key("list")).unwrap_err().to_string(),
            "list is not a scalar"
        );
        assert!(matches!(
            scalar_at(text, &key("list[2]")),
            Err(ReadError::MissingKey { .. })
        ));
        assert!(matches!(scalar_at("a: [", &key("a")), Err(ReadError::Document(_))));
        // JSON is YAML.
        assert_eq!(
            scalar_at("{\"image\": {\"tag\": \"2.0\"}}", &key("image.tag"))
                .unwrap()
                .as_deref(),
            Some("2.0")
        );
    }

    #[test]
    fn kustomize_image_tags_are_read_by_name() {
        let text = "images:\n- name: web\n  newTag: 1.2.0\n- name: api\n- name: bad\n  newTag: [x]\n";
        assert_eq!(kustomize_image_tag(text, "web").unwrap().as_deref(), Some("1.2.0"));
        assert_eq!(kustomize_image_tag(text, "api").unwrap(), None);
        assert_eq!(
            kustomize_image_tag(text, "db").unwrap_err().to_string(),
            "key images[name=db].newTag not found"
        );
        assert!(matches!(
            kustomize_image_tag(text, "bad"),
            Err(ReadError::NotScalar { .. })
        ));
    }
}

//! The promoted fields' values in a file: the scalar at a key path, as a string.

use capstan_gitwrite::{KeyPath, Segment};
use serde_json::Value;

use crate::PromoteError;

/// The value of `key` in `text` (the YAML file at `path`), as a string.
pub fn scalar(path: &str, text: &str, key: &str) -> Result<String, PromoteError> {
    let document: Value = serde_saphyr::from_str(text).map_err(|e| PromoteError::BadFile {
        path: path.into(),
        reason: format!("not YAML: {e}"),
    })?;
    let key_path: KeyPath = key
        .parse()
        .map_err(|e| PromoteError::BadRequest(format!("field {key:?}: {e}")))?;
    let missing = || PromoteError::MissingKey {
        path: path.into(),
        key: key.into(),
    };
    let mut at = &document;
    for segment in key_path.segments() {
        at = match segment {
            Segment::Key(k) => at.get(k.as_str()),
            Segment::Index(i) => at.get(*i),
        }
        .ok_or_else(missing)?;
    }
    match at {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Null => Err(missing()),
        _ => Err(PromoteError::BadFile {
            path: path.into(),
            reason: format!("{key} is not a scalar"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_are_read_as_strings() {
        let text = "# c\nimageTag: \"1.4.2\"\nreplicas: 3\nimage:\n  tag: v1\nlist: [a]\n";
        assert_eq!(scalar("f.yaml", text, "imageTag").unwrap(), "1.4.2");
        assert_eq!(scalar("f.yaml", text, "replicas").unwrap(), "3");
        assert_eq!(scalar("f.yaml", text, "image.tag").unwrap(), "v1");
        let err = scalar("f.yaml", text, "targetRevision").unwrap_err().to_string();
        assert_eq!(err, "f.yaml: key targetRevision not found");
        assert!(scalar("f.yaml", text, "list").is_err());
    }
}

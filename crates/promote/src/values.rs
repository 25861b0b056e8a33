//! The promoted fields' values in a file: the scalar at a key path, as a string.

use capstan_gitwrite::{KeyPath, ReadError};

use crate::PromoteError;

/// The value of `key` in `text` (the YAML file at `path`), as a string, read by the Git writer's
/// reader ([`capstan_gitwrite::scalar_at`]); a null value is a missing one.
pub fn scalar(path: &str, text: &str, key: &str) -> Result<String, PromoteError> {
    let key_path: KeyPath = key
        .parse()
        .map_err(|e| PromoteError::BadRequest(format!("field {key:?}: {e}")))?;
    let missing = || PromoteError::MissingKey {
        path: path.into(),
        key: key.into(),
    };
    match capstan_gitwrite::scalar_at(text, &key_path) {
        Ok(Some(value)) => Ok(value),
        Ok(None) | Err(ReadError::MissingKey { .. }) => Err(missing()),
        Err(e) => Err(PromoteError::BadFile {
            path: path.into(),
            reason: e.to_string(),
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

//! What a watch cache keeps of an object: everything but `metadata.managedFields`.
//!
//! `managedFields` say which client wrote which field, as a tree of small JSON maps per writer. For
//! an Application whose status the controller rewrites, that tree is larger than the rest of the
//! object together (about 10 KB of heap per Application, measured with heaptrack), and nothing that
//! reads an Application from a cache looks at it: the controller and the server write Applications
//! only with patches, never by replacing the whole object.

use kube::Resource;

/// Forget `object`'s `managedFields` (to `None`, which a serialised object omits: an update sent from
/// it would leave them as they are, where an empty list would reset them).
pub fn without_managed_fields<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_api::Application;

    #[test]
    fn managed_fields_are_gone_and_not_an_empty_list() {
        let mut app: Application = serde_json::from_value(serde_json::json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
            "metadata": {"name": "a", "managedFields": [{"manager": "kubectl", "operation": "Apply"}]},
            "spec": {"source": {"repoURL": "https://example.invalid/r.git"}, "destination": {}},
        }))
        .expect("an Application");
        assert!(app.metadata.managed_fields.is_some());
        without_managed_fields(&mut app);
        assert_eq!(app.metadata.managed_fields, None);
        assert_eq!(app.metadata.name.as_deref(), Some("a"));
        let json = serde_json::to_value(&app).expect("serialised");
        assert!(json["metadata"].get("managedFields").is_none(), "{json}");
    }
}

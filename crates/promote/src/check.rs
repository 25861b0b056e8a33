//! The rules a promotion must pass: plain names, both environments in the pipeline and in order,
//! the source Application Synced and Healthy — the last two overridable with `force` and a reason.

use capstan_api::status::{HealthCode, SyncCode};
use capstan_api::{Application, PromotionPipelineSpec};

use crate::PromoteError;

/// Whether `name` is a plain name (`[a-z0-9-]`, 1 to 63 characters, not starting with `-`): what a
/// service or environment name must be to be put in a path.
fn plain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Refuse a service or environment name that is not plain, and a pipeline whose path could leave
/// the repository.
pub fn check_names(spec: &PromotionPipelineSpec, service: &str, from: &str, to: &str) -> Result<(), PromoteError> {
    for (what, name) in [("service", service), ("environment", from), ("environment", to)] {
        if !plain(name) {
            return Err(PromoteError::BadRequest(format!(
                "invalid {what} name {name:?}: use lowercase letters, digits and '-'"
            )));
        }
    }
    if from == to {
        return Err(PromoteError::BadRequest(format!("cannot promote {from} to itself")));
    }
    let path = &spec.path;
    let unsafe_path = path.is_empty()
        || path.starts_with('/')
        || path.split('/').any(|s| s.is_empty() || s == "." || s == "..")
        || !path.contains("{service}")
        || !path.contains("{env}");
    if unsafe_path {
        return Err(PromoteError::BadRequest(format!(
            "the pipeline's path {path:?} must be relative, without '..', and contain {{service}} and {{env}}"
        )));
    }
    Ok(())
}

/// Both environments exist in the pipeline and `to` comes after `from` (unless `force`).
pub fn check_order(spec: &PromotionPipelineSpec, from: &str, to: &str, force: bool) -> Result<(), PromoteError> {
    let at = |env: &str| {
        spec.position(env)
            .ok_or_else(|| PromoteError::NotFound(format!("environment {env:?} of the pipeline")))
    };
    let (f, t) = (at(from)?, at(to)?);
    if t < f && !force {
        return Err(PromoteError::Backwards {
            from: from.into(),
            to: to.into(),
        });
    }
    Ok(())
}

/// The source Application's synced revision, if it is Synced and Healthy (or `force`); `None` for a
/// forced promotion from an Application that has no synced revision (the source file is then read at
/// the branch head).
pub fn check_source(app: &Application, force: bool) -> Result<Option<String>, PromoteError> {
    let status = app.status.clone().unwrap_or_default();
    let sync = status.sync.unwrap_or_default();
    let health = status.health.map(|h| h.status).unwrap_or_default();
    let name = app.metadata.name.clone().unwrap_or_default();
    let ready = sync.status == SyncCode::Synced && health == HealthCode::Healthy && !sync.revision.is_empty();
    if !ready && !force {
        let or_unknown = |s: &str| {
            if s.is_empty() {
                "Unknown".to_string()
            } else {
                s.to_string()
            }
        };
        return Err(PromoteError::SourceNotReady {
            app: name,
            sync: sync.status.to_string(),
            health: health.to_string(),
            revision: or_unknown(&sync.revision),
        });
    }
    Ok(Some(sync.revision).filter(|r| !r.is_empty()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use capstan_api::promotion::Environment;

    /// A pipeline `dev` → `staging` → `production` over `services/{service}/{env}.yaml` (shared with
    /// the other modules' tests).
    pub(crate) fn spec() -> PromotionPipelineSpec {
        PromotionPipelineSpec {
            repo_url: "git://x/r.git".into(),
            path: "services/{service}/{env}.yaml".into(),
            environments: ["dev", "staging", "production"]
                .iter()
                .map(|n| Environment {
                    name: n.to_string(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn names_must_be_plain_and_paths_stay_inside() {
        let s = spec();
        assert!(check_names(&s, "payments", "staging", "production").is_ok());
        for (svc, from, to) in [
            ("../x", "staging", "production"),
            ("a/b", "staging", "production"),
            ("p", "Staging", "production"),
            ("p", "staging", "staging"),
        ] {
            assert!(
                matches!(check_names(&s, svc, from, to), Err(PromoteError::BadRequest(_))),
                "{svc} {from} {to}"
            );
        }
        for path in [
            "/abs/{service}/{env}.yaml",
            "a/../{service}/{env}",
            "{service}.yaml",
            "a//{service}/{env}",
        ] {
            let bad = PromotionPipelineSpec {
                path: path.into(),
                ..spec()
            };
            assert!(check_names(&bad, "p", "staging", "production").is_err(), "{path}");
        }
    }

    #[test]
    fn promotions_go_forward_unless_forced() {
        let s = spec();
        assert!(check_order(&s, "staging", "production", false).is_ok());
        assert!(matches!(
            check_order(&s, "production", "staging", false),
            Err(PromoteError::Backwards { .. })
        ));
        assert!(check_order(&s, "production", "staging", true).is_ok());
        assert!(matches!(
            check_order(&s, "staging", "qa", true),
            Err(PromoteError::NotFound(_))
        ));
    }

    #[test]
    fn the_source_must_be_synced_and_healthy() {
        let mut app: Application = serde_json::from_value(serde_json::json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
            "metadata": {"name": "p-staging"},
            "spec": {"source": {"repoURL": "git://x/r.git"}, "destination": {}},
            "status": {"sync": {"status": "Synced", "revision": "abc"}, "health": {"status": "Degraded"}}
        }))
        .unwrap();
        let err = check_source(&app, false).unwrap_err().to_string();
        assert!(err.contains("p-staging is Synced/Degraded"), "{err}");
        assert_eq!(check_source(&app, true).unwrap().as_deref(), Some("abc"));
        if let Some(h) = app.status.as_mut().and_then(|s| s.health.as_mut()) {
            h.status = HealthCode::Healthy;
        }
        assert_eq!(check_source(&app, false).unwrap().as_deref(), Some("abc"));
    }
}

//! An ApplicationSet's deletion budget (`spec.syncPolicy.deletionBudget`): how many of the
//! Applications it owns one pass may delete before a person confirms. Pure; read by the controller
//! before it deletes and by `capstan plan`.

use capstan_api::ApplicationSet;
use capstan_api::labels::ALLOW_DELETIONS_ANNOTATION;

/// Why deleting `deleting` of the `owned` Applications of `set` is more than its
/// `syncPolicy.deletionBudget` allows, if it is.
pub fn over_budget(set: &ApplicationSet, deleting: usize, owned: usize) -> Option<String> {
    let budget = set.spec.sync_policy.as_ref()?.deletion_budget.as_ref()?;
    let mut exceeded = Vec::new();
    if let Some(max) = budget.max_applications
        && deleting > max as usize
    {
        exceeded.push(format!("maxApplications {max}"));
    }
    if let Some(max) = budget.max_percent
        && deleting * 100 > max as usize * owned
    {
        exceeded.push(format!("maxPercent {max} of {owned} owned Applications"));
    }
    (!exceeded.is_empty()).then(|| {
        format!(
            "this pass would delete {deleting} Applications, more than the deletion budget allows ({}): none was deleted; confirm with the annotation {ALLOW_DELETIONS_ANNOTATION}=true",
            exceeded.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn either_limit_stops_the_deletions() {
        let set: ApplicationSet = serde_json::from_value(serde_json::json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "ApplicationSet",
            "metadata": {"name": "s"},
            "spec": {"generators": [], "template": {"metadata": {}, "spec": {"source": {"repoURL": "x"}, "destination": {}}},
                     "syncPolicy": {"deletionBudget": {"maxApplications": 3, "maxPercent": 50}}},
        }))
        .expect("set");
        assert_eq!(over_budget(&set, 3, 10), None);
        assert!(over_budget(&set, 4, 10).is_some_and(|m| m.contains("maxApplications 3") && !m.contains("maxPercent")));
        assert!(over_budget(&set, 3, 5).is_some_and(|m| m.contains("maxPercent 50 of 5")));
    }
}

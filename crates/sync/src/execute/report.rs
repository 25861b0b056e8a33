//! How a sync describes itself: per-object results and the words of its progress messages.

use capstan_api::application::ResourceResult;
use capstan_api::status::ResultCode;
use capstan_compare::ResourceState;

use crate::plan::{Action, Task};

pub(super) fn more(n: usize) -> String {
    if n > 1 {
        format!(" and {} more", n - 1)
    } else {
        String::new()
    }
}

pub(super) fn display_wave(t: &Task) -> String {
    if t.action == Action::Prune {
        "prune".into()
    } else {
        t.wave.to_string()
    }
}

pub(super) fn verb(action: Action) -> &'static str {
    match action {
        Action::Apply => "applying",
        Action::Hook => "hook",
        Action::Prune => "pruning",
        Action::Keep => "keeping",
    }
}

pub(super) fn result(task: &Task, state: &ResourceState, status: ResultCode, message: &str) -> ResourceResult {
    ResourceResult {
        group: task.key.group.clone(),
        version: state.info.resource.version.clone(),
        kind: task.key.kind.clone(),
        namespace: task.key.namespace.clone(),
        name: task.key.name.clone(),
        status,
        message: message.to_string(),
        sync_phase: task.phase.as_str().to_string(),
        sync_wave: state.wave,
        hook: task.action == Action::Hook,
    }
}

#[cfg(test)]
mod tests {
    use capstan_kube::ObjectKey;
    use capstan_kube::annotations::Phase;

    use super::*;

    fn task(action: Action, wave: i64) -> Task {
        Task {
            phase: Phase::Sync,
            wave,
            action,
            group: 0,
            index: 0,
            key: ObjectKey {
                group: "apps".into(),
                kind: "Deployment".into(),
                namespace: "web".into(),
                name: "web".into(),
            },
        }
    }

    #[test]
    fn progress_words_name_the_wave_and_how_many_more() {
        assert_eq!(more(1), "");
        assert_eq!(more(3), " and 2 more");
        assert_eq!(display_wave(&task(Action::Apply, -2)), "-2");
        assert_eq!(
            display_wave(&task(Action::Prune, 5)),
            "prune",
            "prunes are their own stage"
        );
        assert_eq!(verb(Action::Apply), "applying");
        assert_eq!(verb(Action::Prune), "pruning");
        assert_eq!(verb(Action::Hook), "hook");
        assert_eq!(verb(Action::Keep), "keeping");
    }
}

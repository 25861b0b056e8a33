//! Ordering a sync into tasks: phase → wave → kind → name.

use capstan_compare::{ResourceState, SyncCode};
use capstan_kube::ObjectKey;
use capstan_kube::annotations::{self, AnnotationError, HookSpec, Phase};

use crate::options::SyncOptions;

/// What a task does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    /// Server-side apply an ordinary object.
    Apply,
    /// Create a hook (after deleting the previous one when its policy says so) and wait for it.
    Hook,
    /// Delete an object no longer in Git.
    Prune,
    /// Nothing to apply: the object already equals Git (it still counts for its wave's health).
    Keep,
}

/// One step of a sync.
#[derive(Debug, Clone)]
pub struct Task {
    /// Phase it runs in.
    pub phase: Phase,
    /// Wave inside the phase.
    pub wave: i64,
    /// What to do.
    pub action: Action,
    /// Orders prunes inside the prune stage: the negated wave of the pruned object, so later waves
    /// are deleted first (0 for other tasks).
    pub group: i64,
    /// Index into the comparison's resources.
    pub index: usize,
    /// The object.
    pub key: ObjectKey,
}

/// Options that shape the plan.
#[derive(Debug, Clone, Default)]
pub struct PlanOptions {
    /// Prune objects no longer in Git.
    pub prune: bool,
    /// Prune after everything else (also per object with `sync-options: PruneLast=true`).
    pub prune_last: bool,
    /// Apply only objects that are OutOfSync.
    pub apply_out_of_sync_only: bool,
    /// Only these objects (all when empty).
    pub selected: Vec<ObjectKey>,
    /// `Force=true`: every object is deleted and created again, so none is kept as it is.
    pub force: bool,
}

/// Position of a kind in the apply order (lower first); unknown kinds go last.
pub fn kind_order(kind: &str) -> usize {
    const ORDER: &[&str] = &[
        "Namespace",
        "CustomResourceDefinition",
        "NetworkPolicy",
        "ResourceQuota",
        "LimitRange",
        "PodSecurityPolicy",
        "PodDisruptionBudget",
        "ServiceAccount",
        "Secret",
        "ConfigMap",
        "StorageClass",
        "PersistentVolume",
        "PersistentVolumeClaim",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Service",
        "DaemonSet",
        "Pod",
        "ReplicationController",
        "ReplicaSet",
        "Deployment",
        "HorizontalPodAutoscaler",
        "StatefulSet",
        "Job",
        "CronJob",
        "IngressClass",
        "Ingress",
        "APIService",
    ];
    ORDER.iter().position(|k| *k == kind).unwrap_or(ORDER.len())
}

/// A synthetic phase after PostSync for `PruneLast` prunes.
const LAST_WAVE: i64 = i64::MAX;

/// Order the work for `resources`.
pub fn plan(resources: &[ResourceState], opts: &PlanOptions) -> Result<Vec<Task>, AnnotationError> {
    let selected = |key: &ObjectKey| opts.selected.is_empty() || opts.selected.contains(key);
    let mut tasks = Vec::new();
    for (index, r) in resources.iter().enumerate() {
        if !selected(&r.key) {
            continue;
        }
        if r.requires_pruning {
            // `IgnoreExtraneous` (compared as Synced) only affects the sync status, as in Argo CD: a
            // sync that prunes deletes the object too (`Prune=false` keeps it).
            if !opts.prune {
                continue;
            }
            let prune_last = opts.prune_last || r.live.as_ref().is_some_and(|l| SyncOptions::of_object(l).prune_last);
            let (phase, wave) = if prune_last {
                (Phase::PostSync, LAST_WAVE)
            } else {
                (Phase::Sync, LAST_WAVE - 1)
            };
            tasks.push(Task {
                phase,
                wave,
                action: Action::Prune,
                group: -r.wave,
                index,
                key: r.key.clone(),
            });
            continue;
        }
        let Some(desired) = &r.desired else { continue };
        match annotations::hook(desired)? {
            HookSpec::Skip => {}
            HookSpec::Phases(phases) => {
                for phase in phases {
                    tasks.push(Task {
                        phase,
                        wave: r.wave,
                        action: Action::Hook,
                        group: 0,
                        index,
                        key: r.key.clone(),
                    });
                }
            }
            HookSpec::None => {
                let unchanged = r.sync == SyncCode::Synced && r.live.is_some();
                tasks.push(Task {
                    phase: Phase::Sync,
                    wave: r.wave,
                    action: if opts.apply_out_of_sync_only && unchanged && !opts.force {
                        Action::Keep
                    } else {
                        Action::Apply
                    },
                    group: 0,
                    index,
                    key: r.key.clone(),
                });
            }
        }
    }
    tasks.sort_by(|a, b| sort_key(a).cmp(&sort_key(b)));
    Ok(tasks)
}

fn sort_key(t: &Task) -> (Phase, i64, bool, i64, usize, &str, &str, &str) {
    (
        t.phase,
        t.wave,
        t.action == Action::Prune,
        t.group,
        kind_order(&t.key.kind),
        &t.key.kind,
        &t.key.namespace,
        &t.key.name,
    )
}

fn stage(t: &Task) -> (Phase, i64, bool, i64) {
    (t.phase, t.wave, t.action == Action::Prune, t.group)
}

/// Group consecutive tasks of the same (phase, wave) — the units that run in parallel.
pub fn waves(tasks: &[Task]) -> Vec<&[Task]> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=tasks.len() {
        if i == tasks.len() || stage(&tasks[i - 1]) != stage(&tasks[i]) {
            out.push(&tasks[start..i]);
            start = i;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_kube::KindInfo;
    use kube::core::GroupVersionKind;
    use kube::discovery::ApiResource;
    use serde_json::{Value, json};

    fn state(kind: &str, name: &str, annotations: Value, sync: SyncCode, prune: bool) -> ResourceState {
        let obj = json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": "ns", "annotations": annotations}});
        let key = ObjectKey::of(&obj).expect("key");
        let wave = annotations::sync_wave(&obj).unwrap_or(0);
        let hook = matches!(annotations::hook(&obj), Ok(HookSpec::Phases(_)));
        ResourceState {
            key,
            api_version: "v1".into(),
            info: KindInfo {
                resource: ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", kind)),
                namespaced: true,
                status_subresource: None,
            },
            desired: (!prune).then(|| obj.clone()),
            live: (prune || sync == SyncCode::Synced).then(|| obj.clone()),
            predicted: None,
            sync,
            requires_pruning: prune,
            hook,
            wave,
            owned_by_other: None,
            error: None,
        }
    }

    fn order(tasks: &[Task]) -> Vec<String> {
        tasks
            .iter()
            .map(|t| format!("{}:{}:{:?}:{}", t.phase.as_str(), t.wave, t.action, t.key.name))
            .collect()
    }

    #[test]
    fn orders_by_phase_wave_kind_then_name() {
        let rs = vec![
            state("Deployment", "web", json!({}), SyncCode::OutOfSync, false),
            state("ConfigMap", "b", json!({}), SyncCode::OutOfSync, false),
            state("ConfigMap", "a", json!({}), SyncCode::OutOfSync, false),
            state("Namespace", "ns", json!({}), SyncCode::OutOfSync, false),
            state(
                "Job",
                "migrate",
                json!({"capstan.dev/hook": "PreSync"}),
                SyncCode::OutOfSync,
                false,
            ),
            state(
                "Job",
                "smoke",
                json!({"argocd.argoproj.io/hook": "PostSync"}),
                SyncCode::OutOfSync,
                false,
            ),
            state(
                "Service",
                "late",
                json!({"capstan.dev/sync-wave": "2"}),
                SyncCode::OutOfSync,
                false,
            ),
            state(
                "Service",
                "early",
                json!({"capstan.dev/sync-wave": "-1"}),
                SyncCode::OutOfSync,
                false,
            ),
            state(
                "Job",
                "cleanup",
                json!({"capstan.dev/hook": "SyncFail"}),
                SyncCode::OutOfSync,
                false,
            ),
            state(
                "Secret",
                "skipped",
                json!({"capstan.dev/hook": "Skip"}),
                SyncCode::OutOfSync,
                false,
            ),
        ];
        let tasks = plan(&rs, &PlanOptions::default()).expect("plan");
        assert_eq!(
            order(&tasks),
            [
                "PreSync:0:Hook:migrate",
                "Sync:-1:Apply:early",
                "Sync:0:Apply:ns",
                "Sync:0:Apply:a",
                "Sync:0:Apply:b",
                "Sync:0:Apply:web",
                "Sync:2:Apply:late",
                "PostSync:0:Hook:smoke",
                "SyncFail:0:Hook:cleanup",
            ]
        );
        let w = waves(&tasks);
        assert_eq!(waves(&[]).len(), 0);
        assert_eq!(w.iter().map(|w| w.len()).collect::<Vec<_>>(), [1, 1, 4, 1, 1, 1]);
    }

    #[test]
    fn prunes_only_when_asked_in_reverse_waves_and_last_with_prune_last() {
        let rs = vec![
            state("ConfigMap", "keep", json!({}), SyncCode::Synced, false),
            state("ConfigMap", "old0", json!({}), SyncCode::OutOfSync, true),
            state(
                "ConfigMap",
                "old5",
                json!({"capstan.dev/sync-wave": "5"}),
                SyncCode::OutOfSync,
                true,
            ),
            state(
                "Job",
                "post",
                json!({"capstan.dev/hook": "PostSync"}),
                SyncCode::OutOfSync,
                false,
            ),
        ];
        let no_prune = plan(&rs, &PlanOptions::default()).expect("plan");
        assert!(no_prune.iter().all(|t| t.action != Action::Prune));
        let pruned = plan(
            &rs,
            &PlanOptions {
                prune: true,
                ..Default::default()
            },
        )
        .expect("plan");
        assert_eq!(
            order(&pruned)
                .iter()
                .filter(|s| s.contains("Prune") || s.contains("post"))
                .cloned()
                .collect::<Vec<_>>(),
            [
                format!("Sync:{}:Prune:old5", LAST_WAVE - 1),
                format!("Sync:{}:Prune:old0", LAST_WAVE - 1),
                "PostSync:0:Hook:post".to_string()
            ]
        );
        let last = plan(
            &rs,
            &PlanOptions {
                prune: true,
                prune_last: true,
                ..Default::default()
            },
        )
        .expect("plan");
        assert_eq!(last.last().map(|t| t.action), Some(Action::Prune));
        assert_eq!(last.last().map(|t| t.phase), Some(Phase::PostSync));

        let only = plan(
            &rs,
            &PlanOptions {
                apply_out_of_sync_only: true,
                ..Default::default()
            },
        )
        .expect("plan");
        let keep = only.iter().find(|t| t.key.name == "keep").map(|t| t.action);
        assert_eq!(keep, Some(Action::Keep), "synced objects are not applied again");
        let all = plan(&rs, &PlanOptions::default()).expect("plan");
        let keep = all.iter().find(|t| t.key.name == "keep").map(|t| t.action);
        assert_eq!(
            keep,
            Some(Action::Apply),
            "without ApplyOutOfSyncOnly everything is applied"
        );
        let forced = plan(
            &rs,
            &PlanOptions {
                apply_out_of_sync_only: true,
                force: true,
                ..Default::default()
            },
        )
        .expect("plan");
        let keep = forced.iter().find(|t| t.key.name == "keep").map(|t| t.action);
        assert_eq!(keep, Some(Action::Apply), "with Force every object is recreated");
    }
}

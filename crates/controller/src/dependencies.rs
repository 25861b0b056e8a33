//! Dependencies between Applications (`spec.dependsOn`): whether an Application may start a sync
//! (every dependency Synced and Healthy at its own current revision, its last sync of that revision
//! successful), the cycles and missing names that make that impossible, and which Applications
//! depend on one (they are woken when it changes, and delay its deletion). Pure: the caller passes
//! the Applications of the namespace and the revisions it resolved.

use capstan_api::Application;
use capstan_api::operation::OperationPhase;
use capstan_api::status::{ConditionType, HealthCode, SyncCode};
use kube::ResourceExt;

/// Why a dependency does not let its dependents sync yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// The dependency's name.
    pub name: String,
    /// Where it stands: its health (`Progressing`, `Degraded`, …), its sync status, `Running` while
    /// it syncs, `sync Failed` after a failed sync, or that it has not been compared at its
    /// current revision yet.
    pub state: String,
}

/// Whether an Application may start a sync, as far as its dependencies are concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// It has no dependencies, or every one is ready.
    Ready,
    /// These dependencies are not ready yet.
    Waiting(Vec<Waiting>),
    /// These dependencies do not exist (in the Application's namespace).
    Missing(Vec<String>),
    /// The dependencies form a cycle: the names along it, the first repeated at the end.
    Cycle(Vec<String>),
}

impl Gate {
    /// The condition type this gate is reported under, if it blocks.
    pub fn condition_type(&self) -> Option<ConditionType> {
        match self {
            Gate::Ready => None,
            Gate::Waiting(_) => Some(WAITING_CONDITION),
            Gate::Missing(_) | Gate::Cycle(_) => Some(ERROR_CONDITION),
        }
    }
}

/// The condition an Application waiting for its dependencies carries.
pub const WAITING_CONDITION: ConditionType = ConditionType::DependencyWaiting;
/// The condition an Application with a missing dependency or a dependency cycle carries.
pub const ERROR_CONDITION: ConditionType = ConditionType::DependencyError;
/// The condition an Application being deleted carries while Applications that depend on it exist.
pub const DELETION_CONDITION: ConditionType = ConditionType::DeletionWaiting;

impl std::fmt::Display for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Gate::Ready => write!(f, "dependencies ready"),
            Gate::Waiting(w) => {
                let each: Vec<String> = w.iter().map(|w| format!("{} ({})", w.name, w.state)).collect();
                write!(f, "waiting for {}", each.join(", "))
            }
            Gate::Missing(names) => write!(
                f,
                "dependency {} not found: spec.dependsOn names an Application that does not exist in this namespace",
                names.join(", ")
            ),
            Gate::Cycle(path) => write!(f, "dependency cycle: {}", path.join(" -> ")),
        }
    }
}

/// The gate of `app`: `lookup` finds an Application of its namespace by name; `revision_of` is the
/// dependency's current target revision as the caller resolved it (`None`: not known, its status
/// is taken as it stands).
pub fn gate(
    app: &Application,
    lookup: &dyn Fn(&str) -> Option<Application>,
    revision_of: &dyn Fn(&Application) -> Option<String>,
) -> Gate {
    if app.spec.depends_on.is_empty() {
        return Gate::Ready;
    }
    if let Some(cycle) = find_cycle(app, lookup) {
        return Gate::Cycle(cycle);
    }
    let mut missing = Vec::new();
    let mut waiting = Vec::new();
    for dep in names(app) {
        match lookup(&dep) {
            None => missing.push(dep),
            Some(found) => {
                if let Err(state) = ready(&found, revision_of(&found).as_deref()) {
                    waiting.push(Waiting { name: dep, state });
                }
            }
        }
    }
    if !missing.is_empty() {
        Gate::Missing(missing)
    } else if !waiting.is_empty() {
        Gate::Waiting(waiting)
    } else {
        Gate::Ready
    }
}

/// The names `app` depends on, each once, in order.
pub fn names(app: &Application) -> Vec<String> {
    let mut seen = Vec::new();
    for d in &app.spec.depends_on {
        let name = d.name.trim().to_string();
        if !name.is_empty() && !seen.contains(&name) {
            seen.push(name);
        }
    }
    seen
}

/// Whether `dep` lets its dependents sync: Synced and Healthy, compared at `current` (its current
/// target revision, when known), and its last sync of that revision (if any) succeeded and is not
/// running. `Err` says where it stands.
pub fn ready(dep: &Application, current: Option<&str>) -> Result<(), String> {
    let Some(status) = &dep.status else {
        return Err("not compared yet".into());
    };
    let sync = status.sync.as_ref();
    let revision = sync.map(|s| s.revision.as_str()).unwrap_or_default();
    if let Some(current) = current
        && revision != current
    {
        return Err("not compared at its current revision yet".into());
    }
    if let Some(op) = &status.operation_state {
        if op.phase == OperationPhase::Running {
            return Err(OperationPhase::Running.to_string());
        }
        if op.revision == revision && op.phase != OperationPhase::Succeeded {
            return Err(format!("sync {}", op.phase.as_str()));
        }
    }
    let sync_status = sync.map(|s| s.status).unwrap_or_default();
    let health = status.health.as_ref().map(|h| h.status).unwrap_or_default();
    if health != HealthCode::Healthy {
        return Err(health.to_string());
    }
    if sync_status != SyncCode::Synced {
        return Err(sync_status.to_string());
    }
    Ok(())
}

/// A cycle reachable from `app` through `dependsOn` (`a -> b -> c -> a`), if any.
pub fn find_cycle(app: &Application, lookup: &dyn Fn(&str) -> Option<Application>) -> Option<Vec<String>> {
    fn walk(
        name: &str,
        deps: Vec<String>,
        lookup: &dyn Fn(&str) -> Option<Application>,
        path: &mut Vec<String>,
        done: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        path.push(name.to_string());
        for dep in deps {
            if let Some(at) = path.iter().position(|p| *p == dep) {
                let mut cycle = path[at..].to_vec();
                cycle.push(dep);
                return Some(cycle);
            }
            if done.contains(&dep) {
                continue;
            }
            if let Some(next) = lookup(&dep)
                && let Some(cycle) = walk(&dep, names(&next), lookup, path, done)
            {
                return Some(cycle);
            }
        }
        path.pop();
        done.push(name.to_string());
        None
    }
    walk(&app.name_any(), names(app), lookup, &mut Vec::new(), &mut Vec::new())
}

/// The Applications among `apps` that depend on `name` (same namespace `namespace`).
pub fn dependents<'a>(name: &str, namespace: &str, apps: impl IntoIterator<Item = &'a Application>) -> Vec<String> {
    let mut found: Vec<String> = apps
        .into_iter()
        .filter(|a| a.namespace().as_deref().unwrap_or_default() == namespace)
        .filter(|a| names(a).iter().any(|d| d == name))
        .map(|a| a.name_any())
        .collect();
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_api::application::{ApplicationStatus, HealthStatus, OperationState, SyncStatus};

    fn app(name: &str, deps: &[&str]) -> Application {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
            "metadata": {"name": name, "namespace": "capstan"},
            "spec": {
                "source": {"repoURL": "file:///repo", "path": "."},
                "destination": {"server": "https://kubernetes.default.svc", "namespace": "n"},
                "dependsOn": deps.iter().map(|d| serde_json::json!({"name": d})).collect::<Vec<_>>(),
            },
        }))
        .expect("application")
    }

    fn with_status(
        mut a: Application,
        sync: &str,
        health: &str,
        revision: &str,
        op: Option<(OperationPhase, &str)>,
    ) -> Application {
        a.status = Some(ApplicationStatus {
            sync: Some(SyncStatus {
                status: SyncCode::parse(sync).expect("a sync code"),
                revision: revision.into(),
                revisions: vec![],
            }),
            health: Some(HealthStatus {
                status: HealthCode::parse(health).expect("a health code"),
                message: String::new(),
            }),
            operation_state: op.map(|(phase, rev)| OperationState {
                phase,
                revision: rev.into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        a
    }

    fn lookup(apps: Vec<Application>) -> impl Fn(&str) -> Option<Application> {
        move |n| apps.iter().find(|a| a.name_any() == n).cloned()
    }

    #[test]
    fn a_dependency_must_be_synced_and_healthy_at_its_current_revision() {
        let b = app("b", &["a"]);
        let known = |_: &Application| Some("new".to_string());
        let ready_a = with_status(
            app("a", &[]),
            "Synced",
            "Healthy",
            "new",
            Some((OperationPhase::Succeeded, "new")),
        );
        assert_eq!(gate(&b, &lookup(vec![ready_a.clone()]), &known), Gate::Ready);
        let old = with_status(
            app("a", &[]),
            "Synced",
            "Healthy",
            "old",
            Some((OperationPhase::Succeeded, "old")),
        );
        let g = gate(&b, &lookup(vec![old]), &known);
        assert!(
            matches!(&g, Gate::Waiting(w) if w[0].state.contains("current revision")),
            "{g:?}"
        );
        let progressing = with_status(
            app("a", &[]),
            "Synced",
            "Progressing",
            "new",
            Some((OperationPhase::Succeeded, "new")),
        );
        let g = gate(&b, &lookup(vec![progressing]), &known);
        assert_eq!(g.to_string(), "waiting for a (Progressing)");
        let failed = with_status(
            app("a", &[]),
            "Synced",
            "Healthy",
            "new",
            Some((OperationPhase::Failed, "new")),
        );
        assert_eq!(
            gate(&b, &lookup(vec![failed]), &known).to_string(),
            "waiting for a (sync Failed)"
        );
        let running = with_status(
            app("a", &[]),
            "OutOfSync",
            "Healthy",
            "new",
            Some((OperationPhase::Running, "new")),
        );
        assert_eq!(
            gate(&b, &lookup(vec![running]), &known).to_string(),
            "waiting for a (Running)"
        );
        let out = with_status(
            app("a", &[]),
            "OutOfSync",
            "Healthy",
            "new",
            Some((OperationPhase::Succeeded, "old")),
        );
        assert_eq!(
            gate(&b, &lookup(vec![out]), &known).to_string(),
            "waiting for a (OutOfSync)"
        );
        // Synced at its revision without a sync of it (nothing changed for it): ready.
        let untouched = with_status(
            app("a", &[]),
            "Synced",
            "Healthy",
            "new",
            Some((OperationPhase::Succeeded, "old")),
        );
        assert_eq!(gate(&b, &lookup(vec![untouched]), &known), Gate::Ready);
        assert_eq!(gate(&app("solo", &[]), &lookup(vec![]), &known), Gate::Ready);
        assert_eq!(
            gate(&b, &lookup(vec![ready_a]), &|_| None),
            Gate::Ready,
            "revision unknown: status as it stands"
        );
    }

    #[test]
    fn missing_dependencies_and_cycles_are_named() {
        let b = app("b", &["a", "ghost"]);
        let a = with_status(app("a", &[]), "Synced", "Healthy", "r", None);
        let g = gate(&b, &lookup(vec![a, b.clone()]), &|_| None);
        assert_eq!(g, Gate::Missing(vec!["ghost".into()]));
        assert!(g.to_string().contains("ghost"));
        let (x, y, z) = (app("x", &["y"]), app("y", &["z"]), app("z", &["x"]));
        let all = lookup(vec![x.clone(), y.clone(), z.clone()]);
        assert_eq!(
            gate(&x, &all, &|_| None).to_string(),
            "dependency cycle: x -> y -> z -> x"
        );
        assert_eq!(
            gate(&y, &all, &|_| None).to_string(),
            "dependency cycle: y -> z -> x -> y"
        );
        // One that depends on a cycle reports it too (it could never sync).
        let w = app("w", &["x"]);
        assert_eq!(
            find_cycle(&w, &all),
            Some(vec!["x".into(), "y".into(), "z".into(), "x".into()])
        );
        let me = app("me", &["me"]);
        assert_eq!(
            gate(&me, &lookup(vec![me.clone()]), &|_| None),
            Gate::Cycle(vec!["me".into(), "me".into()])
        );
        // A diamond is not a cycle.
        let (d1, d2, d3, d4) = (
            app("d1", &["d2", "d3"]),
            app("d2", &["d4"]),
            app("d3", &["d4"]),
            app("d4", &[]),
        );
        assert_eq!(find_cycle(&d1, &lookup(vec![d1.clone(), d2, d3, d4])), None);
    }

    #[test]
    fn dependents_are_found_in_the_same_namespace() {
        let apps = [app("b", &["a"]), app("c", &["b", "a"]), app("d", &[])];
        assert_eq!(
            dependents("a", "capstan", &apps),
            vec!["b".to_string(), "c".to_string()]
        );
        assert_eq!(dependents("a", "other", &apps), Vec::<String>::new());
    }
}

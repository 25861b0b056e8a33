//! Bringing the owned Applications in step with the generated ones: create, update (server-side
//! apply, after the owner check), delete, and the syncs a rollout asks for.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use capstan_api::applicationset::{ApplicationSetApplicationStatus, ApplicationsSyncPolicy};
use capstan_api::labels::ALLOW_DELETIONS_ANNOTATION;
use capstan_api::operation::{Operation, SyncOperation};
use capstan_api::{Application, ApplicationSet};
use capstan_kube::describe_kube_error;
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::*;
use crate::rollout::{self, AppView, Summary};

/// What one reconcile did to the Applications.
#[derive(Default)]
pub(super) struct Outcome {
    /// The generated Applications as they now are, by name (those that exist).
    pub(super) current: BTreeMap<String, Application>,
    /// Names of all generated Applications, in order.
    pub(super) names: Vec<String>,
    pub(super) created: usize,
    pub(super) updated: BTreeSet<String>,
    pub(super) deleted: usize,
    /// Generated Applications that differ from the template but `applicationsSync` keeps.
    pub(super) kept: Vec<String>,
    /// Owned Applications no longer generated that `applicationsSync` keeps.
    pub(super) orphans: Vec<String>,
    /// Why the Applications no longer generated were not deleted: more than the deletion budget
    /// allows, and no person confirmed.
    pub(super) held: Option<String>,
    /// Deletions above the budget were made on a person's confirmation (the annotation is spent).
    pub(super) confirmed: bool,
    /// Names generated that belong to someone else.
    pub(super) conflicts: Vec<String>,
    /// API errors, one per Application.
    pub(super) errors: Vec<String>,
    /// The rollout's plan, with RollingSync.
    pub(super) application_status: Vec<ApplicationSetApplicationStatus>,
    pub(super) rollout: Option<Summary>,
}

/// Whether a person confirmed deletions above the budget on `set`.
fn confirmed(set: &ApplicationSet) -> bool {
    set.annotations()
        .get(ALLOW_DELETIONS_ANNOTATION)
        .is_some_and(|v| v == "true")
}

/// Create, update and delete the owned Applications, then advance the rollout.
pub(super) async fn apply(
    ctx: &Ctx,
    set: &ApplicationSet,
    namespace: &str,
    generated: Vec<Application>,
) -> Result<Outcome, WriteError> {
    let set_name = set.name_any();
    let uid = set.uid().unwrap_or_default();
    let api: Api<Application> = Api::namespaced(ctx.client.clone(), namespace);
    let policy = policy(set);
    let steps = rolling_steps(set);
    tokio::time::timeout(Duration::from_secs(30), ctx.apps.wait_until_ready())
        .await
        .map_err(|_| WriteError::Waiting("generated Applications could not be listed within 30 s"))?
        .map_err(|_| WriteError::Waiting("the Application watch stopped"))?;
    let owned: BTreeMap<String, Arc<Application>> = ctx
        .apps
        .state()
        .into_iter()
        .filter(|a| a.namespace().as_deref() == Some(namespace) && is_owned(a, &uid))
        .map(|a| (a.name_any(), a))
        .collect();

    let mut out = Outcome::default();
    let mut prune: HashMap<String, bool> = HashMap::new();
    let mut work = Vec::with_capacity(generated.len());
    for app in generated {
        let name = app.name_any();
        out.names.push(name.clone());
        prune.insert(
            name.clone(),
            app.spec
                .sync_policy
                .as_ref()
                .and_then(|p| p.automated.as_ref())
                .is_some_and(|a| a.prune),
        );
        let desired = Desired::new(&app, set, steps.is_some());
        let cached = owned.get(&name).map(|live| (**live).clone());
        work.push((name, desired, cached));
    }
    // Reads and writes of different Applications are independent: a few at a time.
    let (api_ref, uid_ref) = (&api, uid.as_str());
    let results: Vec<(String, Change)> = futures::stream::iter(work)
        .map(|(name, desired, cached)| async move {
            let change = change(api_ref, uid_ref, policy, &name, &desired, cached).await;
            (name, change)
        })
        .buffer_unordered(WRITE_PARALLELISM)
        .collect()
        .await;
    for (name, change) in results {
        match change {
            Change::None(live) => {
                out.current.insert(name, live);
            }
            Change::Kept(live) => {
                out.kept.push(name.clone());
                out.current.insert(name, live);
            }
            Change::Created(app) => {
                out.created += 1;
                out.current.insert(name, app);
            }
            Change::Updated(app) => {
                out.updated.insert(name.clone());
                out.current.insert(name, app);
            }
            Change::Conflict => out.conflicts.push(name),
            Change::Failed(e) => out.errors.push(e),
        }
    }
    out.kept.sort();
    out.conflicts.sort();
    out.errors.sort();

    let generated_names: BTreeSet<&String> = out.names.iter().collect();
    let gone: Vec<(&String, &Arc<Application>)> = owned
        .iter()
        .filter(|(name, app)| !generated_names.contains(name) && app.metadata.deletion_timestamp.is_none())
        .collect();
    if policy.allows_delete()
        && let Some(over) = crate::budget::over_budget(set, gone.len(), owned.len())
    {
        if confirmed(set) {
            out.confirmed = true;
        } else {
            out.orphans.extend(gone.iter().map(|(name, _)| (*name).clone()));
            out.held = Some(over);
        }
    }
    for (name, app) in gone {
        if !policy.allows_delete() || out.held.is_some() {
            if !policy.allows_delete() {
                out.orphans.push(name.clone());
            }
            continue;
        }
        match delete_app(&api, app, preserve(set)).await {
            Ok(()) => out.deleted += 1,
            Err(e) => out.errors.push(format!("deleting Application {name}: {e}")),
        }
    }

    if let Some(steps) = steps {
        let views: Vec<AppView> = out
            .current
            .values()
            .map(|a| view(a, out.updated.contains(&a.name_any())))
            .collect();
        let previous = set
            .status
            .as_ref()
            .map(|s| s.application_status.clone())
            .unwrap_or_default();
        let mut plan = rollout::plan(steps, &views, &previous, k8s_openapi::jiff::Timestamp::now());
        for name in &plan.sync {
            let Some(app) = out.current.get(name) else { continue };
            let op = Operation {
                sync: Some(SyncOperation {
                    prune: prune.get(name).copied().unwrap_or(false),
                    ..Default::default()
                }),
                rollback: None,
                id: capstan_api::operation::new_request_id(),
                initiated_by: rollout::INITIATED_BY.into(),
            };
            match request_sync(&api, app, &op).await {
                Ok(()) => tracing::info!(set = %set_name, app = %name, "rollout requested a sync"),
                Err(e) => {
                    if let Some(s) = plan.statuses.iter_mut().find(|s| &s.application == name) {
                        s.status = capstan_api::status::RolloutStatus::Pending;
                        s.message = format!("requesting the sync failed: {e}");
                    }
                    out.errors.push(format!("requesting a sync of Application {name}: {e}"));
                }
            }
        }
        out.application_status = plan.statuses;
        out.rollout = Some(plan.summary);
    }
    Ok(out)
}

/// Applications read or written at once by one reconcile.
pub(super) const WRITE_PARALLELISM: usize = 16;

/// What happened to one generated Application.
pub(super) enum Change {
    /// Already as the template says (or being deleted).
    None(Application),
    /// Differs from the template, but `applicationsSync` does not allow updates.
    Kept(Application),
    Created(Application),
    Updated(Application),
    /// The name belongs to an Application the set does not own.
    Conflict,
    Failed(String),
}

/// Bring one generated Application in line with the template, as `policy` allows. `cached` is the
/// owned Application from the watch cache: when it is as the template says (or may not be updated),
/// nothing is written. Every write is decided on the object just read from the API server, since the
/// cache may lag: the name may be free, or belong to someone else by now.
pub(super) async fn change(
    api: &Api<Application>,
    uid: &str,
    policy: ApplicationsSyncPolicy,
    name: &str,
    desired: &Desired,
    cached: Option<Application>,
) -> Change {
    if let Some(live) = cached {
        if live.metadata.deletion_timestamp.is_some() || !desired.differs(&live) {
            return Change::None(live);
        }
        if !policy.allows_update() {
            return Change::Kept(live);
        }
    }
    match api.get_opt(name).await {
        Ok(Some(stored)) => update(api, uid, policy, name, desired, stored).await,
        Ok(None) => create(api, uid, policy, name, desired).await,
        Err(e) => Change::Failed(format!("reading Application {name}: {}", describe_kube_error(&e))),
    }
}

/// Create the Application with a plain create: if someone else created the name since it was found
/// free, the create fails (409) and their Application is left alone ([`Change::Conflict`]).
pub(super) async fn create(
    api: &Api<Application>,
    uid: &str,
    policy: ApplicationsSyncPolicy,
    name: &str,
    desired: &Desired,
) -> Change {
    let app: Application = match serde_json::from_value(desired.body.clone()) {
        Ok(app) => app,
        Err(e) => return Change::Failed(format!("creating Application {name}: {e}")),
    };
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    match api.create(&pp, &app).await {
        Ok(created) => match adopt_fields(api, created.clone()).await {
            Ok(adopted) => Change::Created(adopted),
            Err(e) => {
                // Created all the same; the next update takes the fields over (see `update`).
                let err = redact(&describe_kube_error(&e));
                tracing::warn!(app = %name, %err, "created an Application; its fields stay with the create for now");
                Change::Created(created)
            }
        },
        Err(kube::Error::Api(s)) if s.code == 409 => match api.get_opt(name).await {
            // Ours after all (created by an earlier attempt): an update at most. Someone else's: a conflict.
            Ok(Some(stored)) => update(api, uid, policy, name, desired, stored).await,
            Ok(None) => Change::Failed(format!(
                "creating Application {name}: it was created and deleted meanwhile; will retry"
            )),
            Err(e) => Change::Failed(format!("reading Application {name}: {}", describe_kube_error(&e))),
        },
        Err(e) => Change::Failed(format!("creating Application {name}: {}", describe_kube_error(&e))),
    }
}

/// Update `stored` (just read from the API server) to the template, if the set owns it: a forced
/// server-side apply whose body carries `stored`'s uid and resourceVersion as preconditions, so an
/// Application changed meanwhile (re-created by someone else, or disowned) is read again and checked
/// again rather than written.
pub(super) async fn update(
    api: &Api<Application>,
    uid: &str,
    policy: ApplicationsSyncPolicy,
    name: &str,
    desired: &Desired,
    mut stored: Application,
) -> Change {
    for _ in 0..3 {
        if !is_owned(&stored, uid) {
            return Change::Conflict;
        }
        if stored.metadata.deletion_timestamp.is_some() || !desired.differs(&stored) {
            return Change::None(stored);
        }
        if !policy.allows_update() {
            return Change::Kept(stored);
        }
        let result = match adopt_fields(api, stored).await {
            Ok(adopted) => {
                let mut body = desired.body.clone();
                body["metadata"]["uid"] = json!(adopted.uid());
                body["metadata"]["resourceVersion"] = json!(adopted.resource_version());
                api.patch(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&body))
                    .await
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(applied) => return Change::Updated(applied),
            // Changed since it was read: read it again.
            Err(kube::Error::Api(s)) if s.code == 409 => match api.get_opt(name).await {
                Ok(Some(again)) => stored = again,
                Ok(None) => {
                    return Change::Failed(format!(
                        "updating Application {name}: it was deleted meanwhile; will retry"
                    ));
                }
                Err(e) => {
                    return Change::Failed(format!("reading Application {name}: {}", describe_kube_error(&e)));
                }
            },
            Err(e) => return Change::Failed(format!("updating Application {name}: {}", describe_kube_error(&e))),
        }
    }
    Change::Failed(format!("updating Application {name}: it kept changing; will retry"))
}

/// Give the fields a create recorded for [`FIELD_MANAGER`] (an `Update` entry in `managedFields`) to
/// its server-side apply entry, as `kubectl` does when moving to server-side apply: otherwise both
/// entries would own them, and a later apply could not remove what the template no longer has. The
/// patch carries `app`'s uid and resourceVersion: a 409 means it changed since it was read.
pub(super) async fn adopt_fields(api: &Api<Application>, app: Application) -> Result<Application, kube::Error> {
    let Some(entries) = adopted_entries(&app) else {
        return Ok(app);
    };
    let patch = json!({"metadata": {
        "uid": app.uid(),
        "resourceVersion": app.resource_version(),
        "managedFields": entries,
    }});
    api.patch(&app.name_any(), &PatchParams::default(), &Patch::Merge(patch))
        .await
}

/// `app`'s managedFields with [`FIELD_MANAGER`]'s `Update` entries merged into its `Apply` entry, or
/// `None` when it has no such `Update` entry.
pub(super) fn adopted_entries(app: &Application) -> Option<Vec<ManagedFieldsEntry>> {
    let entries = app.metadata.managed_fields.as_ref()?;
    let ours_updated = |e: &ManagedFieldsEntry| {
        e.manager.as_deref() == Some(FIELD_MANAGER)
            && e.operation.as_deref() == Some("Update")
            && e.subresource.is_none()
    };
    if !entries.iter().any(ours_updated) {
        return None;
    }
    let mut out: Vec<ManagedFieldsEntry> = Vec::with_capacity(entries.len());
    let mut fields = Value::Object(Default::default());
    let mut apply: Option<ManagedFieldsEntry> = None;
    for e in entries {
        let ours_applied = e.manager.as_deref() == Some(FIELD_MANAGER) && e.operation.as_deref() == Some("Apply");
        if ours_updated(e) || ours_applied {
            if let Some(f) = &e.fields_v1 {
                merge_fields(&mut fields, &f.0);
            }
            if ours_applied || apply.is_none() {
                apply = Some(e.clone());
            }
        } else {
            out.push(e.clone());
        }
    }
    let mut apply = apply?;
    apply.operation = Some("Apply".into());
    apply.fields_type = Some("FieldsV1".into());
    apply.fields_v1 = Some(FieldsV1(fields));
    out.push(apply);
    Some(out)
}

/// The union of two managedFields field sets (`{"f:metadata": {"f:labels": {...}}, ...}`).
pub(super) fn merge_fields(into: &mut Value, from: &Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge_fields(
                    a.entry(k.clone()).or_insert_with(|| Value::Object(Default::default())),
                    v,
                );
            }
        }
        (into, from) => *into = from.clone(),
    }
}

#[cfg(test)]
mod tests {

    use std::time::Instant;

    use capstan_api::applicationset::ApplicationsSyncPolicy;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
    use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
    use serde_json::json;

    use super::*;

    use crate::controller::tests::{BASE, generated, set};

    #[test]
    fn a_creates_fields_are_handed_to_the_apply_entry() {
        let entry = |manager: &str, operation: &str, subresource: Option<&str>, fields: Value| ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            subresource: subresource.map(String::from),
            api_version: Some("capstan.dev/v1alpha1".into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(fields)),
            ..Default::default()
        };
        let mut app = Application::new("a", Default::default());
        app.metadata.managed_fields = Some(vec![
            entry(
                FIELD_MANAGER,
                "Apply",
                None,
                json!({"f:metadata": {"f:labels": {"f:team": {}}}}),
            ),
            entry(
                "capstan-controller",
                "Update",
                Some("status"),
                json!({"f:status": {"f:sync": {}}}),
            ),
        ]);
        assert!(adopted_entries(&app).is_none(), "nothing to adopt");
        app.metadata.managed_fields.as_mut().unwrap().push(entry(
            FIELD_MANAGER,
            "Update",
            None,
            json!({"f:metadata": {"f:labels": {"f:old": {}}}, "f:spec": {"f:project": {}}}),
        ));
        assert_eq!(
            managed_keys(&app, "f:labels"),
            ["team", "old"],
            "a create's labels count as ours"
        );
        let adopted = adopted_entries(&app).expect("adopted");
        assert_eq!(adopted.len(), 2, "{adopted:?}");
        assert_eq!(
            adopted[0].manager.as_deref(),
            Some("capstan-controller"),
            "others untouched"
        );
        let ours = &adopted[1];
        assert_eq!(
            (ours.manager.as_deref(), ours.operation.as_deref()),
            (Some(FIELD_MANAGER), Some("Apply"))
        );
        assert_eq!(
            ours.fields_v1.as_ref().unwrap().0,
            json!({"f:metadata": {"f:labels": {"f:team": {}, "f:old": {}}}, "f:spec": {"f:project": {}}})
        );
    }

    /// Against a real API server: creating never takes over an Application someone else created, and an
    /// update decided on a stale cache never writes an Application that is no longer the set's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_never_take_over_someone_elses_application() -> anyhow::Result<()> {
        capstan_testkit::init_logging();
        // The run's shared plane, in a namespace of this test's own (which no controller serves).
        let cluster = capstan_testkit::TestCluster::shared().await?;
        let client = cluster.client().await?;
        let namespace = capstan_testkit::capstan::unique_namespace();
        install_crds(&client, &namespace).await?;
        let sets: Api<ApplicationSet> = Api::namespaced(client.clone(), &namespace);
        let apps: Api<Application> = Api::namespaced(client.clone(), &namespace);
        let mut owner = set(BASE);
        owner.metadata.uid = None;
        owner.metadata.namespace = Some(namespace.clone());
        let owner = sets.create(&PostParams::default(), &owner).await?;
        let uid = owner.uid().expect("uid");
        let policy = ApplicationsSyncPolicy::Sync;
        let desired_for = |labels: Value, name: &str| {
            let mut s = owner.clone();
            s.spec.template.metadata.labels = serde_json::from_value(labels).unwrap();
            let mut app = generated(&s);
            app.metadata.name = Some(name.into());
            Desired::new(&app, &s, false)
        };
        let someone_elses = |name: &str| -> Application {
            serde_json::from_value(json!({
                "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"source": {"repoURL": "git://elsewhere/r", "path": "theirs"}, "destination": {"namespace": "theirs"}},
            }))
            .unwrap()
        };
        let theirs = |app: &Application| {
            app.owner_references().is_empty()
                && app.spec.source.path == "theirs"
                && !app.labels().contains_key(APPLICATIONSET_LABEL)
        };

        // The name was free when looked up, and someone created it before the set did.
        apps.create(&PostParams::default(), &someone_elses("a")).await?;
        let d = desired_for(json!({"team": "x"}), "a");
        assert!(matches!(create(&apps, &uid, policy, "a", &d).await, Change::Conflict));
        assert!(theirs(&apps.get("a").await?), "not taken over");

        // A created Application: its fields belong to the apply, so a label dropped from the template
        // is removed by the next update.
        let d = desired_for(json!({"team": "x", "tier": "web"}), "b");
        let Change::Created(b) = create(&apps, &uid, policy, "b", &d).await else {
            panic!("b not created");
        };
        assert!(is_owned(&b, &uid));
        let ours: Vec<_> = b
            .managed_fields()
            .iter()
            .filter(|e| e.manager.as_deref() == Some(FIELD_MANAGER))
            .map(|e| e.operation.clone().unwrap_or_default())
            .collect();
        assert_eq!(ours, ["Apply"], "{:?}", b.managed_fields());
        let d = desired_for(json!({"team": "x"}), "b");
        let Change::Updated(b) = change(&apps, &uid, policy, "b", &d, Some(b)).await else {
            panic!("b not updated");
        };
        assert_eq!(b.labels().get("tier"), None, "{:?}", b.labels());
        assert_eq!(b.labels().get("team").map(String::as_str), Some("x"));

        // The cache still shows the set's Application c, but it was deleted and someone else created c.
        let d = desired_for(json!({"team": "x"}), "c");
        let Change::Created(stale) = create(&apps, &uid, policy, "c", &d).await else {
            panic!("c not created");
        };
        let no_finalizers = json!({"metadata": {"finalizers": null}});
        apps.patch("c", &PatchParams::default(), &Patch::Merge(no_finalizers))
            .await?;
        apps.delete("c", &DeleteParams::default()).await?;
        while apps.get_opt("c").await?.is_some() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        apps.create(&PostParams::default(), &someone_elses("c")).await?;
        let d = desired_for(json!({"team": "changed"}), "c");
        assert!(matches!(
            change(&apps, &uid, policy, "c", &d, Some(stale.clone())).await,
            Change::Conflict
        ));
        assert!(theirs(&apps.get("c").await?), "not taken over");

        // Even when handed the stale object as if just read, the preconditions refuse the write.
        let outcome = update(&apps, &uid, policy, "c", &d, stale).await;
        assert!(matches!(outcome, Change::Conflict), "re-read and refused");
        assert!(theirs(&apps.get("c").await?), "not taken over");
        Ok(())
    }

    async fn install_crds(client: &Client, namespace: &str) -> anyhow::Result<()> {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let pp = PatchParams::apply("test").force();
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for (_, crd) in capstan_api::crd::all() {
            let name = crd.metadata.name.clone().unwrap_or_default();
            crds.patch(&name, &pp, &Patch::Apply(&crd)).await?;
            let deadline = Instant::now() + Duration::from_secs(30);
            while !crds
                .get(&name)
                .await?
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
            {
                anyhow::ensure!(Instant::now() < deadline, "CRD {name} not established");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        ns.patch(
            namespace,
            &pp,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})),
        )
        .await?;
        Ok(())
    }
}

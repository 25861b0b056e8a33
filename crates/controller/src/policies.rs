//! Policies as the controller reads them: a watched cache of the `Policy` objects of Capstan's
//! namespace (a direct list in the CLI), each compiled once per generation, their `Ready`
//! condition written on their status, and [`Policies::check`]: the verdicts of every policy in
//! scope on the objects a sync would apply and prune, evaluated off the async executor with a
//! wall-clock bound on top of the cost budget.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use capstan_api::Policy;
use capstan_api::policy::{PolicyStatus, PolicyVerdict};
use capstan_compare::ResourceState;
use capstan_policy::{Candidate, CompiledPolicy, Evaluation, Operation, Params, Resource, Scope, Verdict};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

use crate::clusters::Destination;

/// The longest one sync's policy evaluation may take before the sync is refused.
pub const EVALUATION_LIMIT: Duration = Duration::from_secs(10);
/// Verdicts kept on a policy's status.
pub const RECENT_VERDICTS: usize = 20;
/// Field manager of the controller's status writes on policies.
const MANAGER: &str = "capstan-policy";

/// Why the policies could not be evaluated (the sync is refused: fail closed).
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The policies could not be listed.
    #[error("the policies could not be read: {}", capstan_kube::describe_kube_error(.0))]
    List(#[source] kube::Error),
    /// The evaluation did not finish within [`EVALUATION_LIMIT`].
    #[error("the policies' evaluation did not finish within {} s", EVALUATION_LIMIT.as_secs())]
    TimedOut,
    /// The evaluation's thread failed.
    #[error("the policies' evaluation failed: {0}")]
    Failed(String),
}

/// The policies of one namespace.
pub struct Policies {
    client: kube::Client,
    namespace: String,
    store: OnceLock<Store<Policy>>,
    /// Whether the watch has listed once (a watch channel: kube-runtime's `Store::wait_until_ready`
    /// wakes only one of several waiters).
    listed: tokio::sync::watch::Sender<bool>,
    compiled: Mutex<HashMap<String, Compiled>>,
    /// The findings of the last audit of each Application, so an unchanged audit writes nothing.
    audited: Mutex<HashMap<String, Vec<Finding>>>,
}

/// One finding of an audit: policy, object, message.
type Finding = (String, String, String);

/// A policy compiled, with the generation and spec (as JSON text) it was compiled from.
struct Compiled {
    generation: Option<i64>,
    spec: String,
    policy: Arc<CompiledPolicy>,
}

/// What a sync is about to do, for the policies.
pub struct SyncScope<'a> {
    /// The Application (`NAMESPACE/NAME`).
    pub application: String,
    /// Its project.
    pub project: &'a str,
    /// Its destination.
    pub destination: &'a Destination,
    /// The destination's labels.
    pub cluster_labels: std::collections::BTreeMap<String, String>,
    /// Whether the sync prunes.
    pub prune: bool,
}

impl Policies {
    /// Policies of `namespace`, listed on each check until [`Policies::spawn`] starts a watch.
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        Self {
            client,
            namespace: namespace.to_string(),
            store: OnceLock::new(),
            listed: tokio::sync::watch::Sender::new(false),
            compiled: Mutex::new(HashMap::new()),
            audited: Mutex::new(HashMap::new()),
        }
    }

    /// Keep a watched cache of the namespace's policies, and write each one's `Ready` condition
    /// when its generation changes.
    pub fn spawn(self: &Arc<Self>) {
        let api: Api<Policy> = Api::namespaced(self.client.clone(), &self.namespace);
        let (reader, writer) = reflector::store();
        if self.store.set(reader).is_err() {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            let stream = reflector::reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::Apply(policy) | watcher::Event::InitApply(policy)) => this.report(&policy).await,
                    Ok(watcher::Event::InitDone) => {
                        this.listed.send_replace(true);
                    }
                    Ok(_) => {}
                    Err(err) => tracing::debug!(%err, "Policy watch error"),
                }
            }
        });
    }

    /// Write `policy`'s `Ready` condition if its generation is not described yet.
    async fn report(&self, policy: &Policy) {
        let generation = policy.metadata.generation;
        if policy.status.as_ref().and_then(|s| s.observed_generation) == generation {
            return;
        }
        let compiled = self.compiled(policy);
        let (status, reason, message) = if compiled.errors.is_empty() {
            ("True", "Compiled", "every expression compiled".to_string())
        } else {
            ("False", "InvalidPolicy", compiled.errors.join("; "))
        };
        let condition = Condition {
            type_: "Ready".into(),
            status: status.into(),
            reason: reason.into(),
            message,
            observed_generation: generation,
            last_transition_time: Time(Timestamp::now()),
        };
        let patch = json!({"status": {"observedGeneration": generation, "conditions": [condition]}});
        let api: Api<Policy> = Api::namespaced(self.client.clone(), &self.namespace);
        if let Err(err) = api
            .patch_status(&policy.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::debug!(%err, policy = %policy.name_any(), "Policy status not written");
        }
    }

    /// `policy` compiled (once per generation and spec).
    fn compiled(&self, policy: &Policy) -> Arc<CompiledPolicy> {
        let name = policy.name_any();
        let spec = serde_json::to_string(&policy.spec).unwrap_or_default();
        let mut cache = self.compiled.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = cache.get(&name)
            && known.generation == policy.metadata.generation
            && known.spec == spec
        {
            return known.policy.clone();
        }
        let compiled = Arc::new(capstan_policy::compile(policy));
        let known = Compiled {
            generation: policy.metadata.generation,
            spec,
            policy: compiled.clone(),
        };
        cache.insert(name, known);
        compiled
    }

    /// Whether any watched policy has the `Audit` action (false before the watch starts).
    pub fn audits(&self) -> bool {
        self.store.get().is_some_and(|store| {
            store.state().iter().any(|p| {
                p.spec
                    .validation_actions
                    .contains(&capstan_api::policy::ValidationAction::Audit)
            })
        })
    }

    /// Every policy, compiled.
    pub async fn current(&self) -> Result<Vec<Arc<CompiledPolicy>>, PolicyError> {
        let mut listed = self.listed.subscribe();
        let cached = match self.store.get() {
            Some(store) => tokio::time::timeout(Duration::from_secs(10), listed.wait_for(|l| *l))
                .await
                .is_ok_and(|r| r.is_ok())
                .then(|| store.state().iter().map(|p| (**p).clone()).collect::<Vec<Policy>>()),
            None => None,
        };
        let policies: Vec<Policy> = match cached {
            Some(policies) => policies,
            // No watch, or one that has not listed (an install without the Policy CRD: a Helm
            // upgrade does not install new CRDs): read them directly; no CRD means no policy.
            None => {
                let api: Api<Policy> = Api::namespaced(self.client.clone(), &self.namespace);
                match api.list(&Default::default()).await {
                    Ok(list) => list.items,
                    // No Policy CRD (an older install): no policy.
                    Err(kube::Error::Api(e)) if e.code == 404 => Vec::new(),
                    Err(e) => return Err(PolicyError::List(e)),
                }
            }
        };
        let mut compiled: Vec<_> = policies.iter().map(|p| self.compiled(p)).collect();
        compiled.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(compiled)
    }

    /// The verdicts of every policy in scope of `scope` on `resources` (the desired objects a sync
    /// applies; with `prune`, the objects it would prune as deletes).
    pub async fn check(&self, scope: &SyncScope<'_>, resources: &[ResourceState]) -> Result<Evaluation, PolicyError> {
        let policies = self.current().await?;
        let target = Scope {
            project: scope.project.to_string(),
            cluster: scope.destination.name.clone(),
            cluster_labels: scope.cluster_labels.clone(),
        };
        let policies: Vec<_> = policies.into_iter().filter(|p| p.in_scope(&target)).collect();
        if policies.is_empty() {
            return Ok(Evaluation::default());
        }
        let mut candidates: Vec<Candidate> = resources.iter().filter_map(|r| candidate(r, scope.prune)).collect();
        if policies.iter().any(|p| p.reads_namespaces()) {
            self.add_namespaces(scope.destination, &mut candidates).await?;
        }
        let params = self.params(&policies).await;
        let evaluation = tokio::task::spawn_blocking(move || timed(&policies, &target, &candidates, &params));
        match tokio::time::timeout(EVALUATION_LIMIT, evaluation).await {
            Ok(Ok(evaluation)) => Ok(evaluation),
            Ok(Err(e)) => Err(PolicyError::Failed(e.to_string())),
            Err(_) => Err(PolicyError::TimedOut),
        }
    }

    /// Each candidate's namespace object on the destination: the live one; for a namespace the
    /// sync creates, the rendered Namespace (or a bare one, for `CreateNamespace=true`) with the
    /// label the API server gives every namespace (`kubernetes.io/metadata.name`). A namespace that
    /// cannot be read is an error: the policies would otherwise skip what they should judge.
    async fn add_namespaces(&self, destination: &Destination, candidates: &mut [Candidate]) -> Result<(), PolicyError> {
        let rendered: HashMap<String, Value> = candidates
            .iter()
            .filter(|c| c.resource.group.is_empty() && c.resource.kind == "Namespace")
            .filter_map(|c| {
                Some((
                    c.object.as_ref()?.pointer("/metadata/name")?.as_str()?.to_string(),
                    c.object.clone()?,
                ))
            })
            .collect();
        let wanted: BTreeSet<String> = candidates
            .iter()
            .filter(|c| c.resource.namespaced)
            .filter_map(namespace_of)
            .collect();
        let api: Api<Namespace> = Api::all(destination.client.clone());
        let mut objects: HashMap<String, Value> = HashMap::new();
        for name in wanted {
            let live = api.get_opt(&name).await.map_err(|e| {
                PolicyError::Failed(format!(
                    "namespace {name} could not be read for the policies' namespaceSelector: {}",
                    capstan_kube::describe_kube_error(&e)
                ))
            })?;
            let mut object = match live {
                Some(ns) => serde_json::to_value(ns).unwrap_or_default(),
                None => rendered
                    .get(&name)
                    .cloned()
                    .unwrap_or_else(|| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})),
            };
            object["metadata"]["labels"]["kubernetes.io/metadata.name"] = Value::String(name.clone());
            objects.insert(name, object);
        }
        for c in candidates.iter_mut().filter(|c| c.resource.namespaced) {
            c.namespace_object = namespace_of(c).and_then(|n| objects.get(&n).cloned());
        }
        Ok(())
    }

    /// Each policy's `params`, read from Capstan's cluster in Capstan's namespace.
    async fn params(&self, policies: &[Arc<CompiledPolicy>]) -> HashMap<String, Params> {
        let mut out = HashMap::new();
        let discovery = capstan_kube::Discovery::new(self.client.clone());
        for policy in policies {
            let Some(source) = &policy.params else { continue };
            let found = match discovery.resolve(&source.api_version, &source.kind).await {
                Ok(Some(info)) => {
                    let api: Api<DynamicObject> = if info.namespaced {
                        Api::namespaced_with(self.client.clone(), &self.namespace, &info.resource)
                    } else {
                        Api::all_with(self.client.clone(), &info.resource)
                    };
                    match api.get_opt(&source.name).await {
                        Ok(Some(object)) => match serde_json::to_value(object) {
                            Ok(v) => Params::Found(v),
                            Err(e) => Params::Missing(e.to_string()),
                        },
                        Ok(None) => Params::Missing("not found".into()),
                        Err(e) => Params::Missing(capstan_kube::describe_kube_error(&e)),
                    }
                }
                Ok(None) => Params::Missing("the kind is not served".into()),
                Err(e) => Params::Missing(e.to_string()),
            };
            out.insert(policy.name.clone(), found);
        }
        out
    }

    /// The `Audit` policies' verdicts on the live objects of `resources` (judged as they are, an
    /// update of themselves), recorded on the policies' status when not recorded already. Nothing
    /// is blocked; errors are logged.
    pub async fn audit(&self, scope: &SyncScope<'_>, resources: &[ResourceState]) {
        let policies = match self.current().await {
            Ok(p) => p,
            Err(err) => {
                tracing::debug!(%err, "policies not audited");
                return;
            }
        };
        let target = Scope {
            project: scope.project.to_string(),
            cluster: scope.destination.name.clone(),
            cluster_labels: scope.cluster_labels.clone(),
        };
        let policies: Vec<_> = policies
            .into_iter()
            .filter(|p| p.actions.contains(&capstan_api::policy::ValidationAction::Audit) && p.in_scope(&target))
            .collect();
        if policies.is_empty() {
            return;
        }
        let mut candidates: Vec<Candidate> = resources
            .iter()
            .filter_map(|r| {
                // The live object as it is, not a sync's prediction.
                let mut live = r.clone();
                live.desired = r.live.clone();
                live.predicted = None;
                candidate(&live, false)
            })
            .collect();
        if policies.iter().any(|p| p.reads_namespaces())
            && let Err(err) = self.add_namespaces(scope.destination, &mut candidates).await
        {
            tracing::debug!(%err, "policies not audited");
            return;
        }
        let params = self.params(&policies).await;
        let evaluation = tokio::task::spawn_blocking(move || timed(&policies, &target, &candidates, &params));
        match tokio::time::timeout(EVALUATION_LIMIT, evaluation).await {
            Ok(Ok(evaluation)) => {
                let mut findings: Vec<Finding> = evaluation
                    .verdicts
                    .iter()
                    .map(|v| (v.policy.clone(), v.object.clone(), v.message.clone()))
                    .collect();
                findings.sort();
                let key = format!("{}@{}", scope.application, scope.destination.name);
                let changed = {
                    let mut audited = self.audited.lock().unwrap_or_else(|e| e.into_inner());
                    audited
                        .insert(key, findings.clone())
                        .is_none_or(|before| before != findings)
                };
                if changed && !evaluation.verdicts.is_empty() {
                    self.record_new(&scope.application, &scope.destination.name, &evaluation.verdicts, true)
                        .await;
                }
            }
            Ok(Err(err)) => tracing::debug!(%err, "audit failed"),
            Err(_) => tracing::warn!(app = %scope.application, "the audit of live objects did not finish in time"),
        }
    }

    /// Record `verdicts` of a sync of `application` to `cluster` on their policies' status (newest
    /// first, at most [`RECENT_VERDICTS`]). Best effort: a lost write loses only history.
    pub async fn record(&self, application: &str, cluster: &str, verdicts: &[Verdict]) {
        self.record_new(application, cluster, verdicts, false).await;
    }

    /// [`Policies::record`]; with `only_new`, a verdict already recorded (same Application, cluster,
    /// object and message) is not recorded again.
    async fn record_new(&self, application: &str, cluster: &str, verdicts: &[Verdict], only_new: bool) {
        let api: Api<Policy> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut by_policy: HashMap<&str, Vec<&Verdict>> = HashMap::new();
        for v in verdicts {
            by_policy.entry(v.policy.as_str()).or_default().push(v);
        }
        let now = crate::clock::now();
        for (policy, verdicts) in by_policy {
            let Ok(Some(current)) = api.get_opt(policy).await else {
                continue;
            };
            let known = current
                .status
                .as_ref()
                .map(|s| s.recent_verdicts.as_slice())
                .unwrap_or_default();
            let seen = |v: &Verdict| {
                known.iter().any(|k| {
                    k.application == application
                        && k.cluster == cluster
                        && k.object == v.object
                        && k.message == v.message
                })
            };
            let verdicts: Vec<&Verdict> = verdicts.iter().copied().filter(|v| !(only_new && seen(v))).collect();
            if verdicts.is_empty() {
                continue;
            }
            let mut recent: Vec<PolicyVerdict> = verdicts
                .iter()
                .map(|v| PolicyVerdict {
                    time: now.clone(),
                    application: application.to_string(),
                    cluster: cluster.to_string(),
                    object: v.object.clone(),
                    actions: v.actions.clone(),
                    message: v.message.clone(),
                })
                .collect();
            recent.extend(current.status.unwrap_or_default().recent_verdicts);
            recent.truncate(RECENT_VERDICTS);
            let status = PolicyStatus {
                recent_verdicts: recent,
                ..Default::default()
            };
            let patch = json!({
                "metadata": {"resourceVersion": current.metadata.resource_version},
                "status": {"recentVerdicts": status.recent_verdicts},
            });
            if let Err(err) = api
                .patch_status(policy, &PatchParams::apply(MANAGER), &Patch::Merge(&patch))
                .await
            {
                tracing::debug!(%err, %policy, "Policy verdicts not recorded");
            }
        }
    }
}

/// [`capstan_policy::evaluate`], its duration recorded in the metrics.
fn timed(
    policies: &[Arc<CompiledPolicy>],
    scope: &Scope,
    candidates: &[Candidate],
    params: &HashMap<String, Params>,
) -> Evaluation {
    let started = std::time::Instant::now();
    let evaluation = capstan_policy::evaluate(policies, scope, candidates, params);
    capstan_metrics::global().policy_evaluation(evaluation.evaluated, started.elapsed());
    evaluation
}

fn namespace_of(c: &Candidate) -> Option<String> {
    c.object
        .as_ref()
        .or(c.old_object.as_ref())?
        .pointer("/metadata/namespace")?
        .as_str()
        .map(str::to_string)
}

/// What the sync would do to `r`, for the policies: apply what Git has (create or update), and
/// with `prune`, delete what requires pruning.
fn candidate(r: &ResourceState, prune: bool) -> Option<Candidate> {
    let operation = match (&r.desired, &r.live) {
        (Some(_), None) => Operation::Create,
        (Some(_), Some(_)) => Operation::Update,
        (None, Some(_)) if prune && r.requires_pruning => Operation::Delete,
        _ => return None,
    };
    let resource: &ApiResource = &r.info.resource;
    // What the API server would judge: the object after the apply (the dry run's prediction; for an
    // object already as Git says, the live one), else the rendered object.
    let object = match operation {
        Operation::Delete => None,
        _ => r
            .predicted
            .clone()
            .or_else(|| {
                (r.sync == capstan_compare::SyncCode::Synced)
                    .then(|| r.live.clone())
                    .flatten()
            })
            .or_else(|| r.desired.clone()),
    };
    Some(Candidate {
        key: r.key.to_string(),
        resource: Resource {
            group: resource.group.clone(),
            version: resource.version.clone(),
            kind: resource.kind.clone(),
            resource: resource.plural.clone(),
            namespaced: r.info.namespaced,
        },
        operation,
        object,
        old_object: r.live.clone(),
        namespace_object: None,
    })
}

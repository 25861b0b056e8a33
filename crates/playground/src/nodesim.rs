//! The node simulator: a stand-in for kube-scheduler and kubelets (the idea of the Kubernetes `kwok`
//! project), so workloads reach real health through the real controller manager.
//!
//! It registers `nodes` Node objects, binds unscheduled Pods to them (honouring `nodeSelector` and
//! the DaemonSet controller's `metadata.name` node affinity), and moves bound Pods through their
//! lifecycle: `restartPolicy: Always` Pods become Running and Ready, others Succeed. The pod
//! annotation `capstan.dev/simulate` (comma separated) changes that:
//! - `fail`: Pods that would Succeed, and bare Pods, end `Failed`; controller-owned Pods that restart
//!   `Always` crash-loop instead (Running, not Ready, `CrashLoopBackOff`), as a real kubelet would.
//! - `never-ready`: Running but never Ready.
//! - `delay=<seconds>`: wait that long before the transition.
//!
//! Pods being deleted are removed at once (there are no containers to stop). Nothing it does sends
//! traffic anywhere but the API server: pod IPs are labels only.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::{Error, Result};

/// Node simulator settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// How many nodes to register.
    pub nodes: usize,
}

/// The simulated outcome of a Pod, decided from its spec and annotations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Running and Ready.
    Ready,
    /// Running, never Ready.
    NeverReady,
    /// Running, containers restarting (`CrashLoopBackOff`), not Ready.
    CrashLoop,
    /// Completed successfully.
    Succeeded,
    /// Completed with a failure.
    Failed,
}

/// What the simulator does next with a Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Nothing (already in its final state, or waiting).
    None,
    /// Remove a Pod that is being deleted.
    Delete,
    /// Bind an unscheduled Pod to this node.
    Bind(String),
    /// The Pod cannot be placed on any node.
    Unschedulable(String),
    /// Move a bound Pod to its outcome after a delay.
    Start { delay: Duration, outcome: Outcome },
}

/// Parsed `capstan.dev/simulate` annotation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Simulate {
    /// `fail` was given.
    pub fail: bool,
    /// `never-ready` was given.
    pub never_ready: bool,
    /// `delay=<seconds>`.
    pub delay: Duration,
}

impl Simulate {
    /// Parse the annotation value; unknown words are ignored (and logged by the caller).
    pub fn parse(value: &str) -> (Simulate, Vec<String>) {
        let mut sim = Simulate::default();
        let mut unknown = Vec::new();
        for word in value.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word {
                "fail" => sim.fail = true,
                "never-ready" => sim.never_ready = true,
                w => match w
                    .strip_prefix("delay=")
                    .and_then(|s| s.trim_end_matches('s').parse::<f64>().ok())
                {
                    Some(secs) if secs.is_finite() && secs >= 0.0 => {
                        sim.delay = Duration::from_secs_f64(secs.min(3600.0))
                    }
                    _ => unknown.push(w.to_string()),
                },
            }
        }
        (sim, unknown)
    }
}

/// Labels every simulated node carries.
pub fn node_labels(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), name.to_string()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), "amd64".to_string()),
        ("beta.kubernetes.io/os".to_string(), "linux".to_string()),
        ("beta.kubernetes.io/arch".to_string(), "amd64".to_string()),
        ("capstan.dev/simulated".to_string(), "true".to_string()),
    ])
}

/// Name of simulated node `i` (1-based).
pub fn node_name(i: usize) -> String {
    format!("capstan-node-{i}")
}

/// Decide the next action for `pod` given the simulated node names. `counter` spreads Pods over nodes.
pub fn plan(pod: &Pod, nodes: &[String], counter: usize) -> Action {
    let meta = &pod.metadata;
    if meta.deletion_timestamp.is_some() {
        return Action::Delete;
    }
    let Some(spec) = pod.spec.as_ref() else {
        return Action::None;
    };
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending");
    if spec.node_name.as_deref().unwrap_or("").is_empty() {
        if spec.scheduler_name.as_deref().is_some_and(|s| s != "default-scheduler") {
            return Action::None;
        }
        let candidates: Vec<&String> = nodes.iter().filter(|n| fits(pod, n)).collect();
        return match candidates.get(counter % candidates.len().max(1)) {
            Some(node) => Action::Bind((*node).clone()),
            None => Action::Unschedulable(format!(
                "0/{} nodes match the pod's node selector or affinity",
                nodes.len()
            )),
        };
    }
    if !nodes.iter().any(|n| Some(n.as_str()) == spec.node_name.as_deref()) || phase != "Pending" {
        return Action::None;
    }
    let annotation = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(SIMULATE_ANNOTATION))
        .map(String::as_str);
    let (sim, _) = Simulate::parse(annotation.unwrap_or(""));
    let restart_always = spec.restart_policy.as_deref().unwrap_or("Always") == "Always";
    let owned = meta
        .owner_references
        .as_ref()
        .is_some_and(|o| o.iter().any(|r| r.controller == Some(true)));
    let outcome = match (sim.fail, restart_always, owned) {
        (true, true, true) => Outcome::CrashLoop,
        (true, _, _) => Outcome::Failed,
        (false, true, _) if sim.never_ready => Outcome::NeverReady,
        (false, true, _) => Outcome::Ready,
        (false, false, _) => Outcome::Succeeded,
    };
    Action::Start {
        delay: sim.delay,
        outcome,
    }
}

/// The pod annotation read by the simulator.
pub const SIMULATE_ANNOTATION: &str = "capstan.dev/simulate";

/// Whether `pod` may run on `node` (node selector and required node affinity on `metadata.name`).
fn fits(pod: &Pod, node: &str) -> bool {
    let Some(spec) = pod.spec.as_ref() else { return false };
    let labels = node_labels(node);
    if let Some(selector) = &spec.node_selector
        && !selector.iter().all(|(k, v)| labels.get(k) == Some(v))
    {
        return false;
    }
    let terms = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or(&[]);
    if terms.is_empty() {
        return true;
    }
    // Terms are ORed; requirements inside a term are ANDed.
    terms.iter().any(|term| {
        let fields_ok = term.match_fields.iter().flatten().all(|req| {
            req.key != "metadata.name" || requirement_holds(&req.operator, req.values.as_deref(), Some(node))
        });
        let labels_ok = term.match_expressions.iter().flatten().all(|req| {
            requirement_holds(
                &req.operator,
                req.values.as_deref(),
                labels.get(&req.key).map(String::as_str),
            )
        });
        fields_ok && labels_ok
    })
}

fn requirement_holds(operator: &str, values: Option<&[String]>, actual: Option<&str>) -> bool {
    let values = values.unwrap_or(&[]);
    match operator {
        "In" => actual.is_some_and(|a| values.iter().any(|v| v == a)),
        "NotIn" => !actual.is_some_and(|a| values.iter().any(|v| v == a)),
        "Exists" => actual.is_some(),
        "DoesNotExist" => actual.is_none(),
        _ => false,
    }
}

/// The status a Pod gets for `outcome`.
pub fn status_patch(pod: &Pod, outcome: &Outcome, pod_ip: &str, now: &str) -> Value {
    let spec = pod.spec.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let (phase, ready) = match outcome {
        Outcome::Ready => ("Running", true),
        Outcome::NeverReady | Outcome::CrashLoop => ("Running", false),
        Outcome::Succeeded => ("Succeeded", false),
        Outcome::Failed => ("Failed", false),
    };
    let container_state = |name: &str| -> (Value, i32) {
        match outcome {
            Outcome::Ready | Outcome::NeverReady => (json!({"running": {"startedAt": now}}), 0),
            Outcome::CrashLoop => (
                json!({"waiting": {"reason": "CrashLoopBackOff",
                    "message": format!("back-off restarting failed container {name} (simulated)")}}),
                1,
            ),
            Outcome::Succeeded => (
                json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}}),
                0,
            ),
            Outcome::Failed => (
                json!({"terminated": {"exitCode": 1, "reason": "Error", "startedAt": now, "finishedAt": now,
                    "message": "simulated failure (capstan.dev/simulate: fail)"}}),
                0,
            ),
        }
    };
    let containers: Vec<Value> = spec
        .containers
        .iter()
        .map(|c| {
            let (state, restarts) = container_state(&c.name);
            json!({
                "name": c.name,
                "image": c.image.clone().unwrap_or_default(),
                "imageID": format!("capstan-sim://{}", c.image.clone().unwrap_or_default()),
                "containerID": format!("capstan-sim://{uid}/{}", c.name),
                "ready": ready,
                "started": matches!(outcome, Outcome::Ready | Outcome::NeverReady),
                "restartCount": restarts,
                "state": state,
            })
        })
        .collect();
    let init: Vec<Value> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| {
            json!({
                "name": c.name,
                "image": c.image.clone().unwrap_or_default(),
                "imageID": format!("capstan-sim://{}", c.image.clone().unwrap_or_default()),
                "containerID": format!("capstan-sim://{uid}/{}", c.name),
                "ready": true,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}},
            })
        })
        .collect();
    let cond = |t: &str, ok: bool, reason: Option<&str>| {
        let mut c = json!({"type": t, "status": if ok { "True" } else { "False" }, "lastTransitionTime": now, "lastProbeTime": null});
        if let Some(r) = reason {
            c["reason"] = json!(r);
        }
        c
    };
    let not_ready_reason = match outcome {
        Outcome::Succeeded | Outcome::Failed => Some("PodCompleted"),
        _ if !ready => Some("ContainersNotReady"),
        _ => None,
    };
    json!({"status": {
        "phase": phase,
        "hostIP": "127.0.0.1",
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": now,
        "conditions": [
            cond("Initialized", true, None),
            cond("Ready", ready, not_ready_reason),
            cond("ContainersReady", ready, not_ready_reason),
            cond("PodScheduled", true, None),
        ],
        "containerStatuses": containers,
        "initContainerStatuses": init,
    }})
}

fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

struct Shared {
    pods: Api<Pod>,
    client: Client,
    nodes: Vec<String>,
    in_flight: Mutex<HashSet<String>>,
    next_ip: std::sync::atomic::AtomicUsize,
    counter: std::sync::atomic::AtomicUsize,
}

/// Register the nodes, then simulate Pods until the watch ends or an unrecoverable error occurs.
pub async fn run(client: Client, opts: Options) -> Result<()> {
    let nodes: Vec<String> = (1..=opts.nodes.max(1)).map(node_name).collect();
    register_nodes(&client, &nodes).await?;
    let shared = Arc::new(Shared {
        pods: Api::all(client.clone()),
        client,
        nodes,
        in_flight: Mutex::new(HashSet::new()),
        next_ip: 0.into(),
        counter: 0.into(),
    });
    tracing::info!(nodes = shared.nodes.len(), "node simulator running");
    let stream = watcher(shared.pods.clone(), watcher::Config::default()).default_backoff();
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.try_next().await.map_err(|e| Error::Format {
        context: "watching pods".into(),
        message: e.to_string(),
    })? {
        let pod = match event {
            watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => pod,
            _ => continue,
        };
        handle(&shared, pod);
    }
    Ok(())
}

fn handle(shared: &Arc<Shared>, pod: Pod) {
    use std::sync::atomic::Ordering;
    let Some(uid) = pod.metadata.uid.clone() else { return };
    let counter = shared.counter.fetch_add(1, Ordering::Relaxed);
    let action = plan(&pod, &shared.nodes, counter);
    if action == Action::None {
        return;
    }
    let key = format!("{uid}/{}", action_kind(&action));
    {
        let Ok(mut in_flight) = shared.in_flight.lock() else {
            return;
        };
        if !in_flight.insert(key.clone()) {
            return;
        }
    }
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        if let Err(err) = act(&shared, &pod, action).await {
            tracing::debug!(pod = %format!("{ns}/{name}"), %err, "simulator action failed");
        }
        if let Ok(mut in_flight) = shared.in_flight.lock() {
            in_flight.remove(&key);
        }
    });
}

fn action_kind(action: &Action) -> &'static str {
    match action {
        Action::None => "none",
        Action::Delete => "delete",
        Action::Bind(_) => "bind",
        Action::Unschedulable(_) => "unschedulable",
        Action::Start { .. } => "start",
    }
}

async fn act(shared: &Shared, pod: &Pod, action: Action) -> std::result::Result<(), kube::Error> {
    use std::sync::atomic::Ordering;
    let name = pod.metadata.name.clone().unwrap_or_default();
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(shared.client.clone(), &ns);
    match action {
        Action::None => {}
        Action::Delete => {
            let dp = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: pod.metadata.uid.clone(),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match pods.delete(&name, &dp).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => return Err(e),
            }
        }
        Action::Bind(node) => {
            let binding = json!({
                "apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name, "uid": pod.metadata.uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            });
            let _: Value = pods
                .create_subresource("binding", &name, &PostParams::default(), &binding)
                .await?;
        }
        Action::Unschedulable(message) => {
            let already = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "PodScheduled" && c.status == "False"));
            if !already {
                let patch = json!({"status": {"conditions": [{"type": "PodScheduled", "status": "False",
                    "reason": "Unschedulable", "message": message, "lastTransitionTime": now_rfc3339(), "lastProbeTime": null}]}});
                pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await?;
            }
        }
        Action::Start { delay, outcome } => {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let n = shared.next_ip.fetch_add(1, Ordering::Relaxed);
            let ip = format!("10.244.{}.{}", (n / 250) % 256, n % 250 + 1);
            let patch = status_patch(pod, &outcome, &ip, &now_rfc3339());
            pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await?;
        }
    }
    Ok(())
}

async fn register_nodes(client: &Client, names: &[String]) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    for name in names {
        let node = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": node_labels(name)},
            "spec": {},
        });
        let node: Node = serde_json::from_value(node).map_err(|e| Error::Format {
            context: "building a Node".into(),
            message: e.to_string(),
        })?;
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => {
                return Err(Error::Kube {
                    context: format!("registering node {name}"),
                    source: e,
                });
            }
        }
        let now = now_rfc3339();
        let status = json!({"status": {
            "capacity": {"cpu": "32", "memory": "256Gi", "pods": "250", "ephemeral-storage": "1Ti"},
            "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "250", "ephemeral-storage": "1Ti"},
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "simulated by capstan",
                 "lastHeartbeatTime": now, "lastTransitionTime": now},
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
                 "lastHeartbeatTime": now, "lastTransitionTime": now},
                {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure",
                 "lastHeartbeatTime": now, "lastTransitionTime": now},
                {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID",
                 "lastHeartbeatTime": now, "lastTransitionTime": now},
            ],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {
                "machineID": name, "systemUUID": name, "bootID": name,
                "kernelVersion": "simulated", "osImage": "capstan node simulator",
                "containerRuntimeVersion": "capstan-sim://1", "kubeletVersion": "v1.20.2",
                "kubeProxyVersion": "v1.20.2", "operatingSystem": "linux", "architecture": "amd64",
            },
        }});
        nodes
            .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
            .await
            .map_err(|e| Error::Kube {
                context: format!("setting the status of node {name}"),
                source: e,
            })?;
        // The TaintNodesByCondition admission plugin marks new nodes `not-ready`; the node lifecycle
        // controller (not run here) would lift that once the node reports Ready, so we do.
        nodes
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"taints": null}})),
            )
            .await
            .map_err(|e| Error::Kube {
                context: format!("clearing the taints of node {name}"),
                source: e,
            })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        serde_saphyr::from_str(yaml).expect("pod yaml")
    }

    fn nodes() -> Vec<String> {
        (1..=3).map(node_name).collect()
    }

    #[test]
    fn parses_the_simulate_annotation() {
        let (sim, unknown) = Simulate::parse("fail, delay=2.5, bogus");
        assert!(sim.fail && !sim.never_ready);
        assert_eq!(sim.delay, Duration::from_millis(2500));
        assert_eq!(unknown, ["bogus"]);
        assert!(Simulate::parse("never-ready").0.never_ready);
    }

    #[test]
    fn unscheduled_pods_are_bound_respecting_selectors() {
        let p = pod("metadata: {name: a, uid: u}\nspec: {containers: [{name: c}]}");
        assert_eq!(plan(&p, &nodes(), 4), Action::Bind("capstan-node-2".into()));
        let ds = pod(r#"
metadata: {name: a, uid: u}
spec:
  containers: [{name: c}]
  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [
    {matchFields: [{key: metadata.name, operator: In, values: [capstan-node-3]}]}]}}}
"#);
        for i in 0..3 {
            assert_eq!(plan(&ds, &nodes(), i), Action::Bind("capstan-node-3".into()));
        }
        let gpu = pod("metadata: {name: a}\nspec: {containers: [{name: c}], nodeSelector: {gpu: 'yes'}}");
        assert!(matches!(plan(&gpu, &nodes(), 0), Action::Unschedulable(_)));
    }

    #[test]
    fn outcomes_follow_restart_policy_and_annotation() {
        let base = |extra: &str, ann: &str, owned: bool| {
            let owner = if owned {
                "ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: r, uid: x, controller: true}]"
            } else {
                ""
            };
            pod(&format!(
                "metadata: {{name: a, annotations: {{{ann}}}, {owner}}}\nspec: {{nodeName: capstan-node-1, containers: [{{name: c}}]{extra}}}"
            ))
        };
        let start = |p: &Pod| match plan(p, &nodes(), 0) {
            Action::Start { outcome, .. } => outcome,
            other => panic!("expected start, got {other:?}"),
        };
        assert_eq!(start(&base("", "", true)), Outcome::Ready);
        assert_eq!(start(&base(", restartPolicy: Never", "", false)), Outcome::Succeeded);
        assert_eq!(
            start(&base(
                ", restartPolicy: OnFailure",
                "'capstan.dev/simulate': fail",
                true
            )),
            Outcome::Failed
        );
        assert_eq!(start(&base("", "'capstan.dev/simulate': fail", false)), Outcome::Failed);
        assert_eq!(
            start(&base("", "'capstan.dev/simulate': fail", true)),
            Outcome::CrashLoop
        );
        assert_eq!(
            start(&base("", "'capstan.dev/simulate': never-ready", true)),
            Outcome::NeverReady
        );
        match plan(&base("", "'capstan.dev/simulate': 'delay=3'", true), &nodes(), 0) {
            Action::Start { delay, outcome } => {
                assert_eq!(delay, Duration::from_secs(3));
                assert_eq!(outcome, Outcome::Ready);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn pods_being_deleted_are_removed_and_finished_pods_left_alone() {
        let deleting = pod(
            "metadata: {name: a, deletionTimestamp: '2026-01-01T00:00:00Z'}\nspec: {nodeName: capstan-node-1, containers: [{name: c}]}",
        );
        assert_eq!(plan(&deleting, &nodes(), 0), Action::Delete);
        let running = pod(
            "metadata: {name: a}\nspec: {nodeName: capstan-node-1, containers: [{name: c}]}\nstatus: {phase: Running}",
        );
        assert_eq!(plan(&running, &nodes(), 0), Action::None);
        let foreign = pod("metadata: {name: a}\nspec: {nodeName: real-node, containers: [{name: c}]}");
        assert_eq!(plan(&foreign, &nodes(), 0), Action::None);
    }

    #[test]
    fn ready_status_marks_every_container_ready() {
        let p = pod("metadata: {name: a, uid: u}\nspec: {containers: [{name: c, image: nginx}, {name: d}]}");
        let s = status_patch(&p, &Outcome::Ready, "10.244.0.1", "2026-01-01T00:00:00Z");
        assert_eq!(s["status"]["phase"], "Running");
        assert_eq!(s["status"]["containerStatuses"].as_array().map(Vec::len), Some(2));
        assert!(
            s["status"]["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .all(|c| c["ready"] == true)
        );
        let ready = s["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Ready");
        assert_eq!(ready.map(|c| c["status"].clone()), Some(json!("True")));
        let failed = status_patch(&p, &Outcome::Failed, "10.244.0.1", "2026-01-01T00:00:00Z");
        assert_eq!(failed["status"]["phase"], "Failed");
        assert_eq!(
            failed["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
            1
        );
    }
}

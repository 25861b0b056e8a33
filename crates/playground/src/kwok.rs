//! Simulated nodes: the real `kwok` (sigs.k8s.io/kwok) plays the kubelets of Nodes the playground
//! registers, and the real kube-scheduler places Pods on them.
//!
//! This module owns what kwok is told: the Node objects (annotated `kwok.x-k8s.io/node: fake`, which
//! kwok is started to manage) and kwok's Stage configuration. The stages express the pod annotation
//! `capstan.dev/simulate` (comma separated) that tests and examples use to ask for an outcome:
//! - no annotation: a Pod with `restartPolicy: Always` becomes Running and Ready; others Succeed.
//! - `fail`: Pods that would Succeed, and bare Pods, end `Failed` (exit code 1); controller-owned Pods
//!   that restart `Always` crash-loop instead (Running, not Ready, `CrashLoopBackOff`), as with a
//!   real kubelet.
//! - `never-ready`: Running, never Ready.
//! - `delay=<seconds>`: the transition happens that long after the Pod is bound.
//!
//! Pods being deleted are removed at once (there are no containers to stop). Pod and node IPs are
//! status fields only: nothing sends traffic to them.
//!
//! Container logs: kwok's server plays the kubelets' API, and a `ClusterLogs` rule maps every
//! container's log to one file ([`PodLogs`], in the CRI log format a kubelet reads), so
//! `GET pods/NAME/log` through the API server answers real lines: what the playground and tests
//! append there ([`PodLogs::append`]). `previous=true` reads a second file.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use crate::{Error, Result};

/// The pod annotation the stages read.
pub const SIMULATE_ANNOTATION: &str = "capstan.dev/simulate";
/// The annotation that makes kwok manage a Node.
pub const MANAGED_ANNOTATION: &str = "kwok.x-k8s.io/node";
/// Its value.
pub const MANAGED_VALUE: &str = "fake";

/// Name of simulated node `i` (1-based).
pub fn node_name(i: usize) -> String {
    format!("capstan-node-{i}")
}

/// Labels every simulated node carries.
pub fn node_labels(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), name.to_string()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), "amd64".to_string()),
        ("type".to_string(), "kwok".to_string()),
        ("capstan.dev/simulated".to_string(), "true".to_string()),
    ])
}

/// The Node object registered for `name`; kwok's `node-initialize` stage makes it Ready.
pub fn node(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels(name),
            "annotations": {MANAGED_ANNOTATION: MANAGED_VALUE, "node.alpha.kubernetes.io/ttl": "0"},
        },
        "status": {
            "capacity": {"cpu": "64", "memory": "256Gi", "pods": "500"},
            "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "500"},
        },
    })
}

/// Register nodes `capstan-node-1..=count` (those already there are kept).
pub async fn register_nodes(client: &kube::Client, count: usize) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    for i in 1..=count.max(1) {
        let name = node_name(i);
        let object: Node = serde_json::from_value(node(&name)).map_err(|e| Error::Format {
            context: format!("building node {name}"),
            message: e.to_string(),
        })?;
        match nodes.create(&PostParams::default(), &object).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(Error::kube(format!("registering node {name}"))(e)),
        }
    }
    Ok(())
}

/// What a bound Pod becomes, computed by kwok (a jq expression) from the Pod itself. Each Pod stage
/// below selects exactly one of these values, so exactly one stage applies to a Pod.
const OUTCOME: &str = r#"(.metadata.annotations["capstan.dev/simulate"] // "" | split(",") | map(gsub("^\\s+|\\s+$"; ""))) as $sim
| ((.spec.restartPolicy // "Always") == "Always") as $always
| ([.metadata.ownerReferences[]? | select(.controller == true)] | length > 0) as $owned
| if ($sim | index(["fail"])) != null then (if $always and $owned then "crash-loop" else "failed" end)
  elif $always then (if ($sim | index(["never-ready"])) != null then "never-ready" else "ready" end)
  else "succeeded" end"#;

/// The `delay=<seconds>` of the annotation as a Go duration ("5s"); no output means no delay.
const DELAY: &str =
    r#".metadata.annotations["capstan.dev/simulate"] // "" | first(scan("delay=([0-9]+(?:\\.[0-9]+)?)")) | .[0] + "s""#;

/// Container statuses and conditions, by outcome: (phase, ready, container state template).
fn outcome_status(outcome: &str) -> (&'static str, bool, &'static str, u32) {
    match outcome {
        "ready" => ("Running", true, "running:\n      startedAt: {{ $now | Quote }}", 0),
        "never-ready" => ("Running", false, "running:\n      startedAt: {{ $now | Quote }}", 0),
        "crash-loop" => (
            "Running",
            false,
            "waiting:\n      reason: CrashLoopBackOff\n      message: {{ printf \"back-off restarting failed container %s (simulated)\" .name | Quote }}",
            1,
        ),
        "succeeded" => (
            "Succeeded",
            false,
            "terminated:\n      exitCode: 0\n      reason: Completed\n      startedAt: {{ $now | Quote }}\n      finishedAt: {{ $now | Quote }}",
            0,
        ),
        _ => (
            "Failed",
            false,
            "terminated:\n      exitCode: 1\n      reason: Error\n      message: \"simulated failure (capstan.dev/simulate: fail)\"\n      startedAt: {{ $now | Quote }}\n      finishedAt: {{ $now | Quote }}",
            0,
        ),
    }
}

/// The status kwok writes for `outcome` (a Go template over the Pod, as in kwok's own stages).
fn status_template(outcome: &str) -> String {
    let (phase, ready, state, restarts) = outcome_status(outcome);
    let finished = matches!(phase, "Succeeded" | "Failed"); // vocabulary: Pod phases
    let not_ready_reason = if finished {
        "\n  reason: PodCompleted"
    } else if !ready {
        "\n  reason: ContainersNotReady"
    } else {
        ""
    };
    let status = if ready { "True" } else { "False" };
    let started = matches!(outcome, "ready" | "never-ready");
    format!(
        r#"{{{{ $now := Now }}}}
conditions:
- lastTransitionTime: {{{{ $now | Quote }}}}
  status: "True"
  type: Initialized
- lastTransitionTime: {{{{ $now | Quote }}}}
  status: "{status}"
  type: Ready{not_ready_reason}
- lastTransitionTime: {{{{ $now | Quote }}}}
  status: "{status}"
  type: ContainersReady{not_ready_reason}
- lastTransitionTime: {{{{ $now | Quote }}}}
  status: "True"
  type: PodScheduled
containerStatuses:
{{{{ range .spec.containers }}}}
- image: {{{{ .image | Quote }}}}
  name: {{{{ .name | Quote }}}}
  ready: {ready}
  started: {started}
  restartCount: {restarts}
  state:
    {state}
{{{{ end }}}}
initContainerStatuses:
{{{{ range .spec.initContainers }}}}
- image: {{{{ .image | Quote }}}}
  name: {{{{ .name | Quote }}}}
  ready: true
  restartCount: 0
  state:
    terminated:
      exitCode: 0
      finishedAt: {{{{ $now | Quote }}}}
      reason: Completed
      startedAt: {{{{ $now | Quote }}}}
{{{{ end }}}}
{{{{ $hostIPs := NodeIPsWith .spec.nodeName }}}}
{{{{ with $hostIPs }}}}
hostIP: {{{{ index . 0 | Quote }}}}
hostIPs:
{{{{ range . }}}}
- ip: {{{{ . | Quote }}}}
{{{{ end }}}}
{{{{ end }}}}
{{{{ $podIPs := PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}}}
{{{{ with $podIPs }}}}
podIP: {{{{ index . 0 | Quote }}}}
podIPs:
{{{{ range . }}}}
- ip: {{{{ . | Quote }}}}
{{{{ end }}}}
{{{{ end }}}}
phase: {phase}
startTime: {{{{ $now | Quote }}}}
"#
    )
}

/// A Pod stage moving bound, pending Pods whose outcome is `outcome` to it.
fn pod_stage(outcome: &str) -> Value {
    json!({
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": format!("capstan-pod-{outcome}")},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {"matchExpressions": [
                {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                {"key": ".spec.nodeName", "operator": "Exists"},
                {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
                {"key": OUTCOME, "operator": "In", "values": [outcome]},
            ]},
            "delay": {"durationMilliseconds": 0, "durationFrom": {"expressionFrom": DELAY}},
            "next": {"statusTemplate": status_template(outcome)},
        },
    })
}

/// The files every simulated container's log is read from.
#[derive(Debug, Clone)]
pub struct PodLogs {
    /// The running container's log.
    pub current: std::path::PathBuf,
    /// The previous (restarted) container's log.
    pub previous: std::path::PathBuf,
}

impl PodLogs {
    /// The files of the playground in `dir`.
    pub fn under(dir: &std::path::Path) -> PodLogs {
        let d = dir.join("pod-logs");
        PodLogs {
            current: d.join("current.log"),
            previous: d.join("previous.log"),
        }
    }

    /// Create both files with a first line each, if they do not exist.
    pub fn create(&self) -> Result<()> {
        for (path, line) in [
            (&self.current, "simulated container started"),
            (&self.previous, "simulated container before its restart"),
        ] {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(Error::io(format!("creating {}", parent.display())))?;
            }
            if !path.exists() {
                std::fs::write(path, cri_line(line)).map_err(Error::io(format!("writing {}", path.display())))?;
            }
        }
        Ok(())
    }

    /// Append `lines` to the running containers' log (every simulated container shows them).
    pub fn append(&self, lines: &[&str]) -> Result<()> {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&self.current)
            .map_err(Error::io(format!("opening {}", self.current.display())))?;
        let text: String = lines.iter().map(|l| cri_line(l)).collect();
        file.write_all(text.as_bytes())
            .map_err(Error::io(format!("writing {}", self.current.display())))
    }
}

/// One line in the CRI log format (`TIME STREAM F TEXT`), stamped now.
fn cri_line(text: &str) -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    format!("{now} stdout F {}\n", text.replace(['\n', '\r'], " "))
}

/// kwok's configuration: every stage, as YAML documents (JSON is YAML), and the log rule.
pub fn stages_config(logs: &PodLogs) -> String {
    let node_initialize = json!({
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": "capstan-node-initialize"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Node"},
            "selector": {"matchExpressions": [
                {"key": ".status.conditions.[] | select( .type == \"Ready\" ) | .status", "operator": "NotIn", "values": ["True"]},
            ]},
            "next": {"statusTemplate": NODE_STATUS},
        },
    });
    let pod_delete = json!({
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": "capstan-pod-delete"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {"matchExpressions": [
                {"key": ".metadata.deletionTimestamp", "operator": "Exists"},
            ]},
            "next": {"delete": true},
        },
    });
    let cluster_logs = json!({
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "ClusterLogs",
        "metadata": {"name": "capstan-pod-logs"},
        "spec": {"logs": [{
            "logsFile": logs.current.display().to_string(),
            "previousLogsFile": logs.previous.display().to_string(),
            "follow": true,
        }]},
    });
    let mut docs = vec![node_initialize, pod_delete, cluster_logs];
    docs.extend(OUTCOMES.iter().map(|o| pod_stage(o)));
    docs.iter().map(Value::to_string).collect::<Vec<_>>().join("\n---\n") + "\n"
}

/// Every outcome a Pod stage exists for.
pub const OUTCOMES: [&str; 5] = ["ready", "never-ready", "crash-loop", "succeeded", "failed"];

/// The status of an initialized node (kwok's own `node-initialize` template, trimmed).
const NODE_STATUS: &str = r#"{{ $now := Now }}
{{ $lastTransitionTime := or .metadata.creationTimestamp $now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $lastTransitionTime | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
addresses:
{{ with NodeIP }}
- address: {{ . | Quote }}
  type: InternalIP
{{ end }}
{{ with NodeName }}
- address: {{ . | Quote }}
  type: Hostname
{{ end }}
{{ with NodePort }}
daemonEndpoints:
  kubeletEndpoint:
    Port: {{ . }}
{{ end }}
allocatable:
{{ with .status.allocatable }}
{{ YAML . 1 }}
{{ end }}
capacity:
{{ with .status.capacity }}
{{ YAML . 1 }}
{{ end }}
{{ $nodeInfo := .status.nodeInfo }}
{{ $kwokVersion := printf "kwok-%s" Version }}
nodeInfo:
  architecture: {{ or $nodeInfo.architecture "amd64" }}
  bootID: {{ or $nodeInfo.bootID `""` }}
  containerRuntimeVersion: {{ or $nodeInfo.containerRuntimeVersion $kwokVersion }}
  kernelVersion: {{ or $nodeInfo.kernelVersion $kwokVersion }}
  kubeProxyVersion: {{ or $nodeInfo.kubeProxyVersion $kwokVersion }}
  kubeletVersion: {{ or $nodeInfo.kubeletVersion $kwokVersion }}
  machineID: {{ or $nodeInfo.machineID `""` }}
  operatingSystem: {{ or $nodeInfo.operatingSystem "linux" }}
  osImage: {{ or $nodeInfo.osImage `""` }}
  systemUUID: {{ or $nodeInfo.systemUUID `""` }}
phase: Running
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_pod_stage_per_outcome_and_each_template_sets_its_phase() {
        let config = stages_config(&PodLogs::under(std::path::Path::new("/pg")));
        let docs: Vec<Value> = config
            .split("\n---\n")
            .map(|d| serde_json::from_str(d).expect("each document is JSON"))
            .collect();
        assert_eq!(docs.len(), 3 + OUTCOMES.len());
        assert_eq!(docs[2]["spec"]["logs"][0]["logsFile"], "/pg/pod-logs/current.log");
        for (outcome, phase) in [
            ("ready", "Running"),
            ("never-ready", "Running"),
            ("crash-loop", "Running"),
            ("succeeded", "Succeeded"),
            ("failed", "Failed"),
        ] {
            let stage = docs
                .iter()
                .find(|d| d["metadata"]["name"] == format!("capstan-pod-{outcome}"))
                .expect("stage");
            let template = stage["spec"]["next"]["statusTemplate"].as_str().unwrap_or("");
            assert!(template.contains(&format!("phase: {phase}")), "{outcome}: {template}");
            let values = &stage["spec"]["selector"]["matchExpressions"][3]["values"];
            assert_eq!(values, &json!([outcome]));
        }
    }

    #[test]
    fn nodes_are_managed_by_kwok() {
        let n = node(&node_name(2));
        assert_eq!(n["metadata"]["name"], "capstan-node-2");
        assert_eq!(n["metadata"]["annotations"][MANAGED_ANNOTATION], MANAGED_VALUE);
        assert_eq!(n["metadata"]["labels"]["kubernetes.io/hostname"], "capstan-node-2");
    }
}

//! Property tests over random and mutated objects: every rule, fed every kind of malformed or huge
//! input, returns a verdict without panicking, deterministically, with a bounded message; and every
//! custom-kind rule reports a status that is not an object as Unknown. A small deterministic
//! generator (xorshift) keeps the runs reproducible without a property-testing dependency.

use serde_json::{Map, Value, json};

use crate::{Context, HealthCode, MAX_MESSAGE_BYTES, StatusSubresource, assess, assess_with};

/// Every kind with a built-in rule for custom resources, with an apiVersion of its group.
const CUSTOM_KINDS: &[(&str, &str)] = &[
    ("pkg.crossplane.io/v1", "Provider"),
    ("pkg.crossplane.io/v1", "Function"),
    ("pkg.crossplane.io/v1", "Configuration"),
    ("pkg.crossplane.io/v1", "ProviderRevision"),
    ("pkg.crossplane.io/v1", "FunctionRevision"),
    ("pkg.crossplane.io/v1", "ConfigurationRevision"),
    ("apiextensions.crossplane.io/v1", "CompositeResourceDefinition"),
    ("s3.aws.crossplane.io/v1beta1", "Bucket"),
    ("rds.aws.upbound.io/v1beta1", "Instance"),
    ("cert-manager.io/v1", "Certificate"),
    ("cert-manager.io/v1", "CertificateRequest"),
    ("cert-manager.io/v1", "Issuer"),
    ("cert-manager.io/v1", "ClusterIssuer"),
    ("external-secrets.io/v1", "ExternalSecret"),
    ("external-secrets.io/v1", "ClusterExternalSecret"),
    ("external-secrets.io/v1", "SecretStore"),
    ("external-secrets.io/v1", "ClusterSecretStore"),
    ("external-secrets.io/v1alpha1", "PushSecret"),
    ("cluster.x-k8s.io/v1beta1", "Cluster"),
    ("cluster.x-k8s.io/v1beta1", "Machine"),
    ("cluster.x-k8s.io/v1beta1", "MachineDeployment"),
    ("cluster.x-k8s.io/v1beta1", "MachinePool"),
    ("cluster.x-k8s.io/v1beta1", "MachineHealthCheck"),
    ("addons.cluster.x-k8s.io/v1beta1", "ClusterResourceSet"),
    ("controlplane.cluster.x-k8s.io/v1beta1", "KubeadmControlPlane"),
    ("controlplane.cluster.x-k8s.io/v1beta2", "AWSManagedControlPlane"),
    ("kustomize.toolkit.fluxcd.io/v1", "Kustomization"),
    ("helm.toolkit.fluxcd.io/v2", "HelmRelease"),
    ("source.toolkit.fluxcd.io/v1", "GitRepository"),
    ("source.toolkit.fluxcd.io/v1", "HelmRepository"),
    ("source.toolkit.fluxcd.io/v1beta2", "OCIRepository"),
    ("source.toolkit.fluxcd.io/v1", "Bucket"),
    ("source.toolkit.fluxcd.io/v1", "HelmChart"),
    ("image.toolkit.fluxcd.io/v1beta2", "ImagePolicy"),
    ("monitoring.coreos.com/v1", "Prometheus"),
    ("monitoring.coreos.com/v1", "Alertmanager"),
    ("monitoring.coreos.com/v1", "ThanosRuler"),
    ("keda.sh/v1alpha1", "ScaledObject"),
    ("keda.sh/v1alpha1", "ScaledJob"),
    ("argoproj.io/v1alpha1", "Rollout"),
    ("argoproj.io/v1alpha1", "AnalysisRun"),
    ("argoproj.io/v1alpha1", "Experiment"),
    ("argoproj.io/v1alpha1", "Workflow"),
    ("kafka.strimzi.io/v1beta2", "Kafka"),
    ("kafka.strimzi.io/v1beta2", "KafkaTopic"),
    ("kafka.strimzi.io/v1beta2", "KafkaUser"),
    ("kafka.strimzi.io/v1beta2", "KafkaConnect"),
    ("kafka.strimzi.io/v1beta2", "KafkaConnector"),
    ("kafka.strimzi.io/v1beta2", "KafkaBridge"),
    ("gateway.networking.k8s.io/v1", "GatewayClass"),
    ("gateway.networking.k8s.io/v1", "Gateway"),
    ("gateway.networking.k8s.io/v1", "HTTPRoute"),
    ("gateway.networking.k8s.io/v1", "GRPCRoute"),
    ("gateway.networking.k8s.io/v1alpha2", "TLSRoute"),
    ("gateway.networking.k8s.io/v1alpha2", "TCPRoute"),
    ("gateway.networking.k8s.io/v1alpha2", "UDPRoute"),
    ("install.istio.io/v1alpha1", "IstioOperator"),
    ("serving.knative.dev/v1", "Service"),
    // A shape-recognised Crossplane claim and a kind for the kstatus fallback.
    ("platform.example.org/v1alpha1", "PostgreSQLInstance"),
    ("example.com/v1", "Widget"),
];

/// Built-in core kinds, fuzzed too (their rules predate this generator).
const CORE_KINDS: &[(&str, &str)] = &[
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
    ("apps/v1", "DaemonSet"),
    ("apps/v1", "ReplicaSet"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
    ("v1", "Pod"),
    ("batch/v1", "Job"),
    ("batch/v1", "CronJob"),
    ("policy/v1", "PodDisruptionBudget"),
    ("v1", "PersistentVolumeClaim"),
    ("v1", "Service"),
    ("networking.k8s.io/v1", "Ingress"),
    ("apiregistration.k8s.io/v1", "APIService"),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
    ("capstan.dev/v1alpha1", "Application"),
];

/// Field names the rules read, so random objects often hit them.
const KEYS: &[&str] = &[
    "conditions",
    "type",
    "status",
    "reason",
    "message",
    "observedGeneration",
    "lastTransitionTime",
    "phase",
    "replicas",
    "updatedReplicas",
    "readyReplicas",
    "availableReplicas",
    "currentPodHash",
    "stableRS",
    "pauseConditions",
    "blueGreen",
    "activeSelector",
    "parents",
    "parentRef",
    "name",
    "listeners",
    "v1beta2",
    "users",
    "refreshTime",
    "severity",
    "failureMessage",
    "currentHealthy",
    "expectedMachines",
    "ready",
    "suspend",
    "paused",
    "forProvider",
    "compositionRef",
    "resourceRef",
    "strategy",
    "canary",
    "refreshPolicy",
    "health",
    "sync",
];

/// String values the rules compare against, plus odd ones.
const WORDS: &[&str] = &[
    "True",
    "False",
    "Unknown",
    "Ready",
    "Synced",
    "Healthy",
    "Installed",
    "Available",
    "Reconciling",
    "Stalled",
    "Issuing",
    "Denied",
    "NotReady",
    "Accepted",
    "ResolvedRefs",
    "Programmed",
    "Released",
    "ArtifactInStorage",
    "Paused",
    "Fallback",
    "Running",
    "Failed",
    "Succeeded",
    "Successful",
    "Provisioned",
    "Pending",
    "Creating",
    "HEALTHY",
    "ERROR",
    "OnChange",
    "Error",
    "",
    "é漢字🙂",
    "4",
    "2024-05-01T10:00:00Z",
];

/// xorshift64: small, deterministic, good enough to explore shapes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n as u64).unwrap_or(0)
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    fn value(&mut self, depth: usize) -> Value {
        let leaf = depth == 0 || self.below(3) == 0;
        match (leaf, self.below(10)) {
            (_, 0) => Value::Null,
            (_, 1) => Value::Bool(self.below(2) == 0),
            (_, 2) => json!([i64::MIN, -1, 0, 1, 2, 3, i64::MAX][self.below(7)]),
            (_, 3) => json!([u64::MAX as f64, -0.5, 1e308, 2.5][self.below(4)]),
            (true, _) | (false, 4..=5) => Value::String(self.pick(WORDS).to_owned()),
            (false, 6..=7) => Value::Array((0..self.below(5)).map(|_| self.value(depth - 1)).collect()),
            (false, _) => Value::Object(self.object(depth - 1)),
        }
    }

    fn object(&mut self, depth: usize) -> Map<String, Value> {
        (0..self.below(6))
            .map(|_| (self.pick(KEYS).to_owned(), self.value(depth)))
            .collect()
    }

    /// A plausible condition with random fields.
    fn condition(&mut self) -> Value {
        let mut c = self.object(1);
        c.insert("type".into(), json!(self.pick(WORDS)));
        c.insert("status".into(), json!(self.pick(&["True", "False", "Unknown", ""])));
        Value::Object(c)
    }
}

fn object_of(api_version: &str, kind: &str, spec: Value, status: Value) -> Value {
    json!({
        "apiVersion": api_version, "kind": kind,
        "metadata": {"name": "x", "namespace": "y", "generation": 2},
        "spec": spec, "status": status
    })
}

/// Assess `obj` under every context; the verdict must be deterministic and its message bounded.
fn check(obj: &Value) {
    let first = assess(obj);
    assert_eq!(assess(obj), first, "not deterministic for {obj}");
    assert!(
        first.message.len() <= MAX_MESSAGE_BYTES + '…'.len_utf8(),
        "message too long for {obj}"
    );
    for status_subresource in [StatusSubresource::Present, StatusSubresource::Absent] {
        let h = assess_with(obj, &Context { status_subresource });
        assert!(HealthCode::ALL.contains(&h.code));
    }
}

#[test]
fn random_objects_never_panic() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for (api_version, kind) in CUSTOM_KINDS.iter().chain(CORE_KINDS) {
        for _ in 0..300 {
            let spec = rng.value(3);
            let mut status = rng.object(3);
            if rng.below(2) == 0 {
                let conditions = (0..rng.below(6)).map(|_| rng.condition()).collect();
                status.insert("conditions".into(), Value::Array(conditions));
            }
            check(&object_of(api_version, kind, spec, Value::Object(status)));
            check(&object_of(api_version, kind, rng.value(2), rng.value(2)));
        }
    }
}

#[test]
fn mutated_fields_never_panic() {
    let mut rng = Rng(42);
    let base = |api_version: &str, kind: &str| {
        object_of(
            api_version,
            kind,
            json!({"replicas": 3, "strategy": {"canary": {}}}),
            json!({
                "observedGeneration": 2, "phase": "Running", "replicas": 3,
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "Synced", "status": "True"}],
                "parents": [{"parentRef": {"name": "gw"}, "conditions": [{"type": "Accepted", "status": "True"}]}],
                "listeners": [{"conditions": [{"type": "Programmed", "status": "True"}]}]
            }),
        )
    };
    let paths: &[&[&str]] = &[
        &["status"],
        &["status", "conditions"],
        &["status", "parents"],
        &["status", "listeners"],
        &["status", "observedGeneration"],
        &["status", "phase"],
        &["spec"],
        &["spec", "strategy"],
        &["metadata"],
        &["metadata", "generation"],
        &["kind"],
        &["apiVersion"],
    ];
    for (api_version, kind) in CUSTOM_KINDS.iter().chain(CORE_KINDS) {
        for path in paths {
            for _ in 0..20 {
                let mut obj = base(api_version, kind);
                let Some((last, parents)) = path.split_last() else {
                    continue;
                };
                let target = parents.iter().try_fold(&mut obj, |v, k| v.get_mut(*k));
                if let Some(Value::Object(map)) = target {
                    map.insert((*last).to_owned(), rng.value(3));
                }
                check(&obj);
            }
        }
    }
}

#[test]
fn huge_status_is_bounded() {
    let conditions: Vec<Value> = (0..5_000)
        .map(|i| json!({"type": format!("Cond{i}"), "status": "False", "reason": "R", "message": "x".repeat(50)}))
        .collect();
    let mut nested = json!("bottom");
    for _ in 0..100 {
        nested = json!({"conditions": [nested]});
    }
    for (api_version, kind) in CUSTOM_KINDS.iter().chain(CORE_KINDS) {
        let obj = object_of(
            api_version,
            kind,
            json!({}),
            json!({
                "conditions": conditions, "nested": nested, "message": "m".repeat(100_000)
            }),
        );
        check(&obj);
    }
}

#[test]
fn every_custom_rule_reports_a_non_object_status_as_unknown() {
    for (api_version, kind) in CUSTOM_KINDS {
        for status in [
            json!("Ready"),
            json!(3),
            json!([{"type": "Ready", "status": "True"}]),
            json!(true),
        ] {
            let obj = object_of(api_version, kind, json!({"forProvider": {}}), status);
            assert_eq!(
                assess(&obj).code,
                HealthCode::Unknown,
                "{kind} with status {}",
                obj["status"]
            );
        }
        let obj = object_of(
            api_version,
            kind,
            json!({"forProvider": {}}),
            json!({"conditions": "Ready"}),
        );
        let code = assess(&obj).code;
        // Rules that read no conditions (phase- or count-based) may still decide; the others say Unknown.
        let reads_no_conditions = matches!(
            *kind,
            "MachineDeployment"
                | "MachineHealthCheck"
                | "AnalysisRun"
                | "Experiment"
                | "Workflow"
                | "IstioOperator"
                | "HTTPRoute"
                | "GRPCRoute"
                | "TLSRoute"
                | "TCPRoute"
                | "UDPRoute"
        );
        if !reads_no_conditions {
            assert_eq!(code, HealthCode::Unknown, "{kind} with conditions that are not a list");
        }
    }
}

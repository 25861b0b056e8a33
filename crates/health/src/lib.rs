//! Health assessment of live Kubernetes objects.
//!
//! This crate owns the answer to "is this object healthy?": [`assess`] takes an object's JSON exactly as
//! the API server returns it and yields a [`Health`] (a [`HealthCode`] and a short human-readable
//! message), and [`worst`] aggregates codes, e.g. over all the objects of an Application or a sync wave.
//! The rules follow Argo CD's gitops-engine `pkg/health`, so users see the same verdicts they are used
//! to. Everything here is a pure function over `serde_json::Value`: no network access, no client types,
//! and odd input (missing fields, wrong types, negative numbers) never panics.
//!
//! Custom kinds that platforms run have built-in rules, one module per family, each mirroring the
//! Argo CD `resource_customizations/<group>/<kind>/health.lua` check Argo CD users get: Crossplane,
//! cert-manager, External Secrets, Cluster API, Flux, Prometheus Operator, KEDA, Argo Rollouts and
//! Workflows, Strimzi, Gateway API, Istio and Knative. [`assess_with`] dispatches on API group and kind
//! in one place; kinds without a rule follow kstatus conventions (module `generic`). docs/health.md
//! lists every rule.

mod apis;
mod application;
mod batch;
mod certmanager;
mod clusterapi;
mod crossplane;
mod externalsecrets;
mod flux;
mod gatewayapi;
mod generic;
mod istio;
mod json;
mod keda;
mod knative;
mod pod;
mod policy;
mod prometheus;
mod rollouts;
mod services;
mod storage;
mod strimzi;
mod verdicts;
mod workflows;
mod workloads;

#[cfg(test)]
mod fuzz;

use serde_json::Value;

/// The health of an object, from best to worst: Healthy, Suspended, Progressing, Missing, Degraded,
/// Unknown. Owned by `capstan-api` (it is the type of `status.health.status`); re-exported here, where
/// objects are assessed.
pub use capstan_api::status::HealthCode;

/// Position of `code` in the best-to-worst order of [`HealthCode::ALL`]: 0 is Healthy, 5 is Unknown.
fn severity(code: HealthCode) -> usize {
    HealthCode::ALL
        .iter()
        .position(|&c| c == code)
        .unwrap_or(HealthCode::ALL.len())
}

/// The outcome of assessing one object: a code and a short message (possibly empty) explaining it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// The verdict.
    pub code: HealthCode,
    /// Why, for people: counts, a condition's message, a container's failure. Empty when nothing to add.
    pub message: String,
}

impl Health {
    /// A health with the given code and message.
    pub fn new(code: HealthCode, message: impl Into<String>) -> Health {
        Health {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn healthy(message: impl Into<String>) -> Health {
        Health::new(HealthCode::Healthy, message)
    }

    pub(crate) fn suspended(message: impl Into<String>) -> Health {
        Health::new(HealthCode::Suspended, message)
    }

    pub(crate) fn progressing(message: impl Into<String>) -> Health {
        Health::new(HealthCode::Progressing, message)
    }

    pub(crate) fn degraded(message: impl Into<String>) -> Health {
        Health::new(HealthCode::Degraded, message)
    }

    pub(crate) fn unknown(message: impl Into<String>) -> Health {
        Health::new(HealthCode::Unknown, message)
    }
}

/// Whether the CustomResourceDefinition of an object's kind declares the status subresource
/// (`spec.versions[].subresources.status`). The crate never reads the cluster, so the caller says what
/// it knows; it only matters for kinds without a built-in rule that have no status at all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum StatusSubresource {
    /// Not known (or not a custom resource): an object without status is Healthy, as before.
    #[default]
    Unspecified,
    /// The CRD has a status subresource, so a controller is expected to write one: an object without
    /// status is Progressing until it does.
    Present,
    /// The CRD has no status subresource: the object is configuration, Healthy once it exists.
    Absent,
}

/// What the caller knows about an object beyond its JSON. [`Context::default`] gives the verdicts of
/// [`assess`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Context {
    /// Whether the object's CRD has a status subresource.
    pub status_subresource: StatusSubresource,
}

impl Context {
    /// What discovery says about a kind: `group` is its API group, `status_subresource` whether it has
    /// a status subresource (`None` when not known). Only custom kinds use it: built-in groups (no dot
    /// in the name, or ending in `.k8s.io`) have rules or are configuration, and some of them declare a
    /// status subresource their objects may never fill.
    pub fn for_kind(group: &str, status_subresource: Option<bool>) -> Context {
        let custom = group.contains('.') && !group.ends_with(".k8s.io");
        let status_subresource = match status_subresource {
            Some(true) if custom => StatusSubresource::Present,
            Some(false) if custom => StatusSubresource::Absent,
            _ => StatusSubresource::Unspecified,
        };
        Context { status_subresource }
    }
}

/// Health of one live object. `obj` is the full object JSON (apiVersion, kind, metadata, spec, status).
/// The same as [`assess_with`] with [`Context::default`].
pub fn assess(obj: &Value) -> Health {
    assess_with(obj, &Context::default())
}

/// Health of one live object, knowing `ctx` about it.
///
/// Objects being deleted are Progressing. Built-in kinds are recognised by API group and kind (an object
/// without `apiVersion` is matched on kind alone among the core kinds); Capstan and Argo CD Applications
/// report their own recorded health and sync state; the custom kinds of the families listed in the crate
/// documentation follow their Argo CD checks; Crossplane managed resources, claims and composite
/// resources are recognised by shape in any group; any other kind follows the kstatus fallback. A value
/// that is not a JSON object, and a status or condition list of the wrong type, are Unknown.
pub fn assess_with(obj: &Value, ctx: &Context) -> Health {
    if !obj.is_object() {
        return Health::unknown("not a Kubernetes object");
    }
    if let Some(deleting) = deletion_health(obj) {
        return deleting;
    }
    let kind = json::str_at(obj, &["kind"]).unwrap_or("");
    let group = json::str_at(obj, &["apiVersion"]).map(api_group);
    bounded(dispatch(obj, group, kind, ctx).unwrap_or_else(Health::from))
}

/// The health of an object being deleted (Progressing), or `None` when it is not being deleted. Checked
/// before any rule, built-in or custom, as Argo CD does.
pub fn deletion_health(obj: &Value) -> Option<Health> {
    if !is_being_deleted(obj) {
        return None;
    }
    let kind = json::str_at(obj, &["kind"]).unwrap_or("");
    let group = json::str_at(obj, &["apiVersion"]).map(api_group);
    Some(if kind == "Pod" && group.is_none_or(|g| g.is_empty()) {
        Health::progressing("Pod is terminating")
    } else {
        Health::progressing("Resource is being deleted")
    })
}

/// The longest message kept, in bytes: a verdict is shown in Application status, and some rules join
/// the messages of every condition, which a huge or hostile status could make arbitrarily long.
pub const MAX_MESSAGE_BYTES: usize = 2048;

/// `h` with its message cut to [`MAX_MESSAGE_BYTES`] (on a character boundary) and marked with "…".
pub fn bounded(mut h: Health) -> Health {
    if h.message.len() > MAX_MESSAGE_BYTES {
        let mut end = MAX_MESSAGE_BYTES;
        while !h.message.is_char_boundary(end) {
            end -= 1;
        }
        h.message.truncate(end);
        h.message.push('…');
    }
    h
}

/// The one place where a group and kind choose their rule.
fn dispatch(obj: &Value, group: Option<&str>, kind: &str, ctx: &Context) -> json::Verdict {
    use crossplane::{Flavour, Package};
    use externalsecrets::StoreKind;
    use flux::FluxKind;
    use gatewayapi::RouteKind;
    use keda::KedaKind;
    use strimzi::StrimziKind;

    let in_group = |groups: &[&str]| group.is_none_or(|g| groups.contains(&g));
    let core: Option<fn(&Value) -> Health> = match kind {
        "Deployment" if in_group(&["apps", "extensions"]) => Some(workloads::deployment),
        "StatefulSet" if in_group(&["apps"]) => Some(workloads::stateful_set),
        "DaemonSet" if in_group(&["apps", "extensions"]) => Some(workloads::daemon_set),
        "ReplicaSet" if in_group(&["apps", "extensions"]) => Some(workloads::replica_set),
        "HorizontalPodAutoscaler" if in_group(&["autoscaling"]) => Some(workloads::horizontal_pod_autoscaler),
        "Pod" if in_group(&[""]) => Some(pod::pod),
        "Job" if in_group(&["batch"]) => Some(batch::job),
        "CronJob" if in_group(&["batch"]) => Some(batch::cron_job),
        "PodDisruptionBudget" if in_group(&["policy"]) => Some(policy::pod_disruption_budget),
        "PersistentVolumeClaim" if in_group(&[""]) => Some(storage::persistent_volume_claim),
        "Service" if in_group(&[""]) => Some(services::service),
        "Ingress" if in_group(&["networking.k8s.io", "extensions"]) => Some(services::ingress),
        "APIService" if in_group(&["apiregistration.k8s.io"]) => Some(apis::api_service),
        "CustomResourceDefinition" if in_group(&["apiextensions.k8s.io"]) => Some(apis::custom_resource_definition),
        "Application" if in_group(&["capstan.dev", "argoproj.io"]) => Some(application::application),
        _ => None,
    };
    if let Some(check) = core {
        return Ok(check(obj));
    }
    let Some(group) = group else {
        return generic::generic(obj, ctx);
    };
    match (group, kind) {
        ("pkg.crossplane.io", "Provider") => crossplane::package(obj, Package::Provider),
        ("pkg.crossplane.io", "Function") => crossplane::package(obj, Package::Function),
        ("pkg.crossplane.io", "Configuration") => crossplane::package(obj, Package::Configuration),
        ("pkg.crossplane.io", "ProviderRevision") => crossplane::package_revision(obj, Package::Provider),
        ("pkg.crossplane.io", "FunctionRevision") => crossplane::package_revision(obj, Package::Function),
        ("pkg.crossplane.io", "ConfigurationRevision") => crossplane::package_revision(obj, Package::Configuration),

        ("cert-manager.io", "Certificate") => certmanager::certificate(obj),
        ("cert-manager.io", "CertificateRequest") => certmanager::certificate_request(obj),
        ("cert-manager.io", "Issuer") => certmanager::issuer(obj),
        ("cert-manager.io", "ClusterIssuer") => certmanager::cluster_issuer(obj),

        ("external-secrets.io", "ExternalSecret") => externalsecrets::external_secret(obj),
        ("external-secrets.io", "ClusterExternalSecret") => externalsecrets::cluster_external_secret(obj),
        ("external-secrets.io", "SecretStore") => externalsecrets::by_ready(obj, StoreKind::SecretStore),
        ("external-secrets.io", "ClusterSecretStore") => externalsecrets::by_ready(obj, StoreKind::ClusterSecretStore),
        ("external-secrets.io", "PushSecret") => externalsecrets::by_ready(obj, StoreKind::PushSecret),

        ("cluster.x-k8s.io", "Cluster") => clusterapi::cluster(obj),
        ("cluster.x-k8s.io", "Machine") => clusterapi::machine(obj),
        ("cluster.x-k8s.io", "MachineDeployment") => clusterapi::machine_deployment(obj),
        ("cluster.x-k8s.io", "MachinePool") => clusterapi::machine_pool(obj),
        ("cluster.x-k8s.io", "MachineHealthCheck") => clusterapi::machine_health_check(obj),
        ("addons.cluster.x-k8s.io", "ClusterResourceSet") => clusterapi::cluster_resource_set(obj),
        ("controlplane.cluster.x-k8s.io", "KubeadmControlPlane") => clusterapi::kubeadm_control_plane(obj),
        ("controlplane.cluster.x-k8s.io", "AWSManagedControlPlane") => clusterapi::aws_managed_control_plane(obj),

        ("kustomize.toolkit.fluxcd.io", "Kustomization") => flux::flux(obj, FluxKind::Kustomization),
        ("helm.toolkit.fluxcd.io", "HelmRelease") => flux::flux(obj, FluxKind::HelmRelease),
        ("source.toolkit.fluxcd.io", "GitRepository" | "HelmRepository" | "OCIRepository" | "Bucket" | "HelmChart") => {
            flux::flux(obj, FluxKind::Source)
        }
        ("image.toolkit.fluxcd.io", "ImagePolicy") => flux::flux(obj, FluxKind::ImagePolicy),

        ("monitoring.coreos.com", "Prometheus" | "Alertmanager" | "ThanosRuler") => prometheus::prometheus(obj),
        ("keda.sh", "ScaledObject") => keda::keda(obj, KedaKind::ScaledObject),
        ("keda.sh", "ScaledJob") => keda::keda(obj, KedaKind::ScaledJob),

        ("argoproj.io", "Rollout") => rollouts::rollout(obj),
        ("argoproj.io", "AnalysisRun") => rollouts::analysis_run(obj),
        ("argoproj.io", "Experiment") => rollouts::experiment(obj),
        ("argoproj.io", "Workflow") => workflows::workflow(obj),

        ("kafka.strimzi.io", "Kafka") => strimzi::strimzi(obj, StrimziKind::Kafka),
        ("kafka.strimzi.io", "KafkaTopic") => strimzi::strimzi(obj, StrimziKind::KafkaTopic),
        ("kafka.strimzi.io", "KafkaUser") => strimzi::strimzi(obj, StrimziKind::KafkaUser),
        ("kafka.strimzi.io", "KafkaConnect") => strimzi::strimzi(obj, StrimziKind::KafkaConnect),
        ("kafka.strimzi.io", "KafkaConnector") => strimzi::strimzi(obj, StrimziKind::KafkaConnector),
        ("kafka.strimzi.io", "KafkaBridge") => strimzi::strimzi(obj, StrimziKind::KafkaBridge),

        ("gateway.networking.k8s.io", "GatewayClass") => gatewayapi::gateway_class(obj),
        ("gateway.networking.k8s.io", "Gateway") => gatewayapi::gateway(obj),
        ("gateway.networking.k8s.io", "HTTPRoute") => gatewayapi::route(obj, RouteKind::Http),
        ("gateway.networking.k8s.io", "GRPCRoute") => gatewayapi::route(obj, RouteKind::Grpc),
        ("gateway.networking.k8s.io", "TLSRoute") => gatewayapi::route(obj, RouteKind::Tls),
        ("gateway.networking.k8s.io", "TCPRoute") => gatewayapi::route(obj, RouteKind::Tcp),
        ("gateway.networking.k8s.io", "UDPRoute") => gatewayapi::route(obj, RouteKind::Udp),

        ("install.istio.io", "IstioOperator") => istio::istio_operator(obj),
        ("serving.knative.dev", "Service") => knative::service(obj),

        _ => match crossplane::flavour_of_group(group) {
            Some(flavour) => crossplane::resource(obj, flavour),
            None if is_custom_group(group) && crossplane::looks_like_crossplane(obj) => {
                crossplane::resource(obj, Flavour::Crossplane)
            }
            None => generic::generic(obj, ctx),
        },
    }
}

/// Whether `group` can hold custom resources: not the core group, and not a built-in Kubernetes group
/// (single-word groups like `apps`, and `*.k8s.io` groups).
fn is_custom_group(group: &str) -> bool {
    group.contains('.') && !group.ends_with(".k8s.io")
}

/// Aggregate: the worst of the given codes, order from best to worst:
/// Healthy > Suspended > Progressing > Missing > Degraded > Unknown (Unknown is worst). Empty -> Healthy.
pub fn worst<I: IntoIterator<Item = HealthCode>>(codes: I) -> HealthCode {
    codes
        .into_iter()
        .max_by_key(|&code| severity(code))
        .unwrap_or(HealthCode::Healthy)
}

/// The API group of an `apiVersion`: `"apps"` for `"apps/v1"`, `""` (core) for `"v1"`.
/// The API group of an `apiVersion` (`apps/v1` → `apps`, `v1` → the core group, empty).
pub fn api_group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

/// Whether `metadata.deletionTimestamp` is set (a non-empty string; `null` counts as unset).
fn is_being_deleted(obj: &Value) -> bool {
    json::str_at(obj, &["metadata", "deletionTimestamp"]).is_some_and(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use HealthCode::*;

    #[test]
    fn as_str_parse_and_display_round_trip() {
        for code in HealthCode::ALL {
            assert_eq!(HealthCode::parse(code.as_str()), Some(code));
            assert_eq!(code.to_string(), code.as_str());
        }
        assert_eq!(HealthCode::parse("Progressing"), Some(Progressing));
        assert_eq!(HealthCode::parse("healthy"), None);
        assert_eq!(HealthCode::parse(""), None);
    }

    #[test]
    fn serde_uses_the_argo_strings() {
        assert_eq!(serde_json::to_value(Degraded).unwrap(), json!("Degraded"));
        let code: HealthCode = serde_json::from_value(json!("Suspended")).unwrap();
        assert_eq!(code, Suspended);
        // A word another version wrote reads as Unknown (capstan_api::status explains why).
        assert_eq!(serde_json::from_value::<HealthCode>(json!("Broken")).unwrap(), Unknown);
    }

    #[test]
    fn worst_follows_argo_order() {
        assert_eq!(worst([Healthy, Missing, Progressing]), Missing);
        assert_eq!(worst([Degraded, Unknown]), Unknown);
        assert_eq!(worst([Unknown, Degraded]), Unknown);
        assert_eq!(worst([Healthy, Suspended]), Suspended);
        assert_eq!(worst([Suspended, Progressing, Healthy]), Progressing);
        assert_eq!(worst([Missing, Degraded, Healthy]), Degraded);
        assert_eq!(worst([Healthy, Healthy]), Healthy);
        assert_eq!(worst(Vec::new()), Healthy);
        assert_eq!(worst(HealthCode::ALL), Unknown);
    }

    #[test]
    fn all_is_ordered_best_to_worst() {
        for pair in HealthCode::ALL.windows(2) {
            assert_eq!(worst([pair[0], pair[1]]), pair[1]);
            assert_eq!(worst([pair[1], pair[0]]), pair[1]);
        }
    }

    #[test]
    fn api_group_of_core_and_named_groups() {
        assert_eq!(api_group("v1"), "");
        assert_eq!(api_group("apps/v1"), "apps");
        assert_eq!(api_group("networking.k8s.io/v1"), "networking.k8s.io");
    }

    #[test]
    fn deleting_pod_is_terminating() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "deletionTimestamp": "2024-05-01T10:00:00Z"},
            "spec": {"restartPolicy": "Always"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        });
        assert_eq!(assess(&pod), Health::new(Progressing, "Pod is terminating"));
    }

    #[test]
    fn deleting_object_of_any_kind_is_progressing() {
        let cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cfg", "deletionTimestamp": "2024-05-01T10:00:00Z", "finalizers": ["x/y"]},
            "data": {"a": "b"}
        });
        assert_eq!(assess(&cm), Health::new(Progressing, "Resource is being deleted"));
        let deploy = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "deletionTimestamp": "2024-05-01T10:00:00Z"},
            "spec": {"paused": true}
        });
        assert_eq!(assess(&deploy).code, Progressing);
    }

    #[test]
    fn null_deletion_timestamp_is_not_deleting() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "deletionTimestamp": null}});
        assert_eq!(assess(&cm).code, Healthy);
    }

    #[test]
    fn non_objects_are_unknown() {
        assert_eq!(assess(&json!(null)).code, Unknown);
        assert_eq!(assess(&json!([1, 2])).code, Unknown);
        assert_eq!(assess(&json!("Deployment")).code, Unknown);
    }

    #[test]
    fn empty_object_is_healthy() {
        assert_eq!(assess(&json!({})).code, Healthy);
    }

    #[test]
    fn built_in_kind_in_foreign_group_is_generic() {
        // A CRD that happens to be called Deployment must not be judged by replica counts.
        let obj = json!({
            "apiVersion": "example.com/v1", "kind": "Deployment",
            "metadata": {"name": "x", "generation": 1},
            "spec": {"replicas": 3},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        });
        assert_eq!(assess(&obj).code, Healthy);
    }

    #[test]
    fn missing_api_version_dispatches_on_kind() {
        let pvc = json!({"kind": "PersistentVolumeClaim", "metadata": {"name": "data"}, "status": {"phase": "Lost"}});
        assert_eq!(assess(&pvc).code, Degraded);
    }

    #[test]
    fn wrong_types_everywhere_do_not_panic() {
        let kinds = [
            ("apps/v1", "Deployment"),
            ("apps/v1", "StatefulSet"),
            ("apps/v1", "DaemonSet"),
            ("apps/v1", "ReplicaSet"),
            ("autoscaling/v2", "HorizontalPodAutoscaler"),
            ("v1", "Pod"),
            ("batch/v1", "Job"),
            ("batch/v1", "CronJob"),
            ("v1", "PersistentVolumeClaim"),
            ("v1", "Service"),
            ("networking.k8s.io/v1", "Ingress"),
            ("apiregistration.k8s.io/v1", "APIService"),
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
            ("capstan.dev/v1alpha1", "Application"),
            ("example.com/v1", "Widget"),
        ];
        let junk = [
            json!(null),
            json!(7),
            json!("x"),
            json!([1, {"type": 3}]),
            json!({"a": -1}),
        ];
        for (api_version, kind) in kinds {
            for j in &junk {
                let obj = json!({
                    "apiVersion": api_version, "kind": kind,
                    "metadata": {"name": j, "generation": j, "deletionTimestamp": j},
                    "spec": {
                        "replicas": j, "paused": j, "suspend": j, "type": j, "restartPolicy": j,
                        "updateStrategy": {"type": j, "rollingUpdate": {"partition": j}}
                    },
                    "status": {
                        "phase": j, "conditions": j, "containerStatuses": j, "replicas": j,
                        "observedGeneration": j, "loadBalancer": {"ingress": j}, "health": j, "sync": j
                    }
                });
                let _ = assess(&obj);
                let bare = json!({"apiVersion": api_version, "kind": kind, "metadata": j, "spec": j, "status": j});
                let _ = assess(&bare);
            }
        }
    }

    #[test]
    fn extreme_numbers_do_not_overflow() {
        let deploy = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "generation": i64::MIN},
            "spec": {"replicas": i64::MIN},
            "status": {"replicas": i64::MAX, "updatedReplicas": i64::MIN, "availableReplicas": u64::MAX}
        });
        assert_eq!(assess(&deploy).code, Progressing);
        let sts = json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "generation": 1},
            "spec": {"replicas": i64::MAX, "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": i64::MIN}}},
            "status": {"observedGeneration": 1, "readyReplicas": i64::MIN}
        });
        assert_eq!(assess(&sts).code, Progressing);
    }
}

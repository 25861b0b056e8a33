//! Fixture tests of the Cluster API rules: provisioned, paused, rolling out, failed, scaling and malformed objects.

use serde_json::{Value, json};

use crate::{Health, HealthCode::*, assess};

fn capi(api_version: &str, kind: &str, spec: Value, status: Value) -> Value {
    json!({
        "apiVersion": api_version, "kind": kind,
        "metadata": {"name": "spoke-1", "namespace": "clusters", "generation": 2},
        "spec": spec, "status": status
    })
}

fn cluster(spec: Value, status: Value) -> Value {
    capi("cluster.x-k8s.io/v1beta1", "Cluster", spec, status)
}

fn cond(type_: &str, status: &str, message: &str) -> Value {
    json!({"type": type_, "status": status, "message": message})
}

#[test]
fn cluster_provisioned_is_healthy() {
    let c = cluster(
        json!({}),
        json!({"phase": "Provisioned", "conditions": [
            cond("Ready", "True", ""), cond("ControlPlaneInitialized", "True", ""), cond("InfrastructureReady", "True", "")
        ]}),
    );
    assert_eq!(assess(&c), Health::new(Healthy, "Cluster is running"));
}

#[test]
fn cluster_paused_is_suspended() {
    let c = cluster(json!({"paused": true}), json!({"phase": "Failed"}));
    assert_eq!(assess(&c), Health::new(Suspended, "Cluster is paused"));
}

#[test]
fn cluster_failed_or_mandatory_condition_false_is_degraded() {
    let c = cluster(
        json!({}),
        json!({"phase": "Provisioned", "conditions": [
            cond("Ready", "False", "thumbprint does not match")
        ]}),
    );
    assert_eq!(assess(&c), Health::new(Degraded, "thumbprint does not match"));
    let failed = cluster(
        json!({}),
        json!({"phase": "Failed", "failureMessage": "infrastructure is gone"}),
    );
    assert_eq!(assess(&failed), Health::new(Degraded, "infrastructure is gone"));
}

#[test]
fn cluster_rolling_out_is_progressing_from_v1beta2_conditions() {
    let c = cluster(
        json!({}),
        json!({
            "phase": "Provisioned",
            "conditions": [cond("Ready", "False", "legacy conditions are ignored when v1beta2 ones exist")],
            "v1beta2": {"conditions": [
                cond("Available", "True", ""),
                cond("RollingOut", "True", "Rolling out 2 not up-to-date replicas"),
            ]}
        }),
    );
    assert_eq!(
        assess(&c),
        Health::new(Progressing, "Rolling out 2 not up-to-date replicas")
    );
    let updating = cluster(
        json!({}),
        json!({"phase": "Provisioned", "v1beta2": {"conditions": [
            cond("ControlPlaneMachinesUpToDate", "False", "Control plane is upgrading to version v1.34.2")
        ]}}),
    );
    assert_eq!(assess(&updating).code, Progressing);
}

#[test]
fn cluster_without_status_is_progressing() {
    assert_eq!(
        assess(&cluster(json!({}), json!(null))),
        Health::new(Progressing, "Waiting for Cluster")
    );
    assert_eq!(
        assess(&cluster(json!({}), json!({"phase": "Provisioning"}))).code,
        Progressing
    );
}

#[test]
fn machine_by_phase() {
    let m = |status: Value| {
        capi(
            "cluster.x-k8s.io/v1beta1",
            "Machine",
            json!({"clusterName": "spoke-1"}),
            status,
        )
    };
    assert_eq!(
        assess(&m(json!({"phase": "Running"}))),
        Health::new(Healthy, "Machine is running")
    );
    assert_eq!(
        assess(&m(
            json!({"phase": "Provisioning", "conditions": [cond("Ready", "False", "1 of 2 completed")]})
        )),
        Health::new(Progressing, "1 of 2 completed")
    );
    assert_eq!(
        assess(&m(json!({"phase": "Failed"}))),
        Health::new(Degraded, "Condition is unknown")
    );
    assert_eq!(assess(&m(json!(null))).code, Progressing);
}

#[test]
fn machine_deployment_states() {
    let md = |spec: Value, status: Value| capi("cluster.x-k8s.io/v1beta1", "MachineDeployment", spec, status);
    let running = json!({"phase": "Running", "replicas": 3, "updatedReplicas": 3, "readyReplicas": 3});
    assert_eq!(assess(&md(json!({}), running.clone())).code, Healthy);
    assert_eq!(assess(&md(json!({"paused": true}), running)).code, Suspended);
    let rolling = json!({"phase": "Running", "replicas": 3, "updatedReplicas": 2, "readyReplicas": 3});
    assert_eq!(assess(&md(json!({}), rolling)).code, Progressing);
    assert_eq!(
        assess(&md(json!({}), json!({"phase": "ScalingUp"}))),
        Health::new(Progressing, "Cluster is spawning machines")
    );
    assert_eq!(assess(&md(json!({}), json!({"phase": "Failed"}))).code, Degraded);
    assert_eq!(
        assess(&md(json!({}), json!(null))),
        Health::new(Progressing, "Waiting for machines")
    );
}

#[test]
fn machine_pool_states() {
    let mp = |status: Value| capi("cluster.x-k8s.io/v1beta1", "MachinePool", json!({}), status);
    assert_eq!(
        assess(&mp(json!({"phase": "Running"}))),
        Health::new(Healthy, "MachinePool is Running")
    );
    assert_eq!(assess(&mp(json!({"phase": "Scaling"}))).code, Healthy);
    assert_eq!(
        assess(&mp(json!({"phase": "Provisioning", "conditions": [
            {"type": "InfrastructureReady", "status": "False", "reason": "WaitingForInfrastructure"},
            {"type": "Ready", "status": "False"}
        ]}))),
        Health::new(
            Progressing,
            "MachinePool is Provisioning: Not InfrastructureReady (WaitingForInfrastructure), Not Ready"
        )
    );
    assert_eq!(assess(&mp(json!({"phase": "Failed"}))).code, Degraded);
    assert_eq!(assess(&mp(json!({"phase": "Unknown"}))).code, Degraded);
    assert_eq!(assess(&mp(json!(null))).code, Progressing);
}

#[test]
fn machine_health_check_counts() {
    let mhc = |status: Value| capi("cluster.x-k8s.io/v1beta1", "MachineHealthCheck", json!({}), status);
    assert_eq!(
        assess(&mhc(json!({"expectedMachines": 3, "currentHealthy": 3}))).code,
        Healthy
    );
    assert_eq!(
        assess(&mhc(json!({"expectedMachines": 3, "currentHealthy": 1}))),
        Health::new(Degraded, "1 of 3 expected machines are healthy")
    );
    assert_eq!(assess(&mhc(json!({"expectedMachines": 3}))).code, Progressing);
}

#[test]
fn cluster_resource_set_by_resources_applied() {
    let crs = |status: Value| {
        capi(
            "addons.cluster.x-k8s.io/v1beta1",
            "ClusterResourceSet",
            json!({}),
            status,
        )
    };
    assert_eq!(
        assess(&crs(json!({"conditions": [cond("ResourcesApplied", "True", "")]}))).code,
        Healthy
    );
    assert_eq!(
        assess(&crs(
            json!({"conditions": [cond("ResourcesApplied", "False", "failed to create ConfigMap")]})
        )),
        Health::new(Degraded, "failed to create ConfigMap")
    );
    assert_eq!(
        assess(&crs(json!(null))),
        Health::new(Progressing, "Initializing cluster resource set")
    );
}

fn kcp(status: Value) -> Value {
    capi(
        "controlplane.cluster.x-k8s.io/v1beta1",
        "KubeadmControlPlane",
        json!({"replicas": 3}),
        status,
    )
}

#[test]
fn kubeadm_control_plane_states() {
    let healthy = kcp(
        json!({"replicas": 3, "updatedReplicas": 3, "readyReplicas": 3, "conditions": [
            cond("Ready", "True", ""), cond("EtcdClusterHealthy", "True", ""), cond("ControlPlaneComponentsHealthy", "True", "")
        ]}),
    );
    assert_eq!(assess(&healthy), Health::new(Healthy, "Control plane is healthy"));
    let etcd = kcp(
        json!({"replicas": 3, "readyReplicas": 3, "updatedReplicas": 3, "conditions": [cond("EtcdClusterHealthy", "False", "")]}),
    );
    assert_eq!(assess(&etcd), Health::new(Degraded, "Etcd cluster is unhealthy"));
    let rolling = kcp(json!({"replicas": 3, "updatedReplicas": 1, "readyReplicas": 3}));
    assert_eq!(
        assess(&rolling),
        Health::new(Progressing, "Updating: 1/3 updated, 3 ready")
    );
    let not_ready = kcp(json!({"replicas": 3, "updatedReplicas": 3, "readyReplicas": 2}));
    assert_eq!(assess(&not_ready), Health::new(Progressing, "2/3 ready"));
    let machines = kcp(json!({"v1beta2": {"conditions": [cond("MachinesReady", "False", "")]}}));
    assert_eq!(assess(&machines), Health::new(Progressing, "Machines not ready"));
    assert_eq!(
        assess(&kcp(json!(null))),
        Health::new(Progressing, "Waiting for KubeadmControlPlane status")
    );
}

#[test]
fn aws_managed_control_plane_states() {
    let amcp = |status: Value| {
        capi(
            "controlplane.cluster.x-k8s.io/v1beta2",
            "AWSManagedControlPlane",
            json!({}),
            status,
        )
    };
    assert_eq!(
        assess(&amcp(json!({"ready": true, "conditions": [cond("Ready", "True", "")]}))).code,
        Healthy
    );
    let updating =
        amcp(json!({"conditions": [cond("Ready", "True", ""), cond("EKSControlPlaneUpdating", "True", "")]}));
    assert_eq!(
        assess(&updating),
        Health::new(Progressing, "EKS control plane is updating")
    );
    let error = amcp(
        json!({"conditions": [{"type": "EKSControlPlaneReady", "status": "False", "severity": "Error", "message": "cluster creation failed"}]}),
    );
    assert_eq!(assess(&error), Health::new(Degraded, "cluster creation failed"));
    let failure = amcp(json!({"failureMessage": "EKS cluster in FAILED state", "conditions": []}));
    assert_eq!(assess(&failure).code, Degraded);
    let waiting =
        amcp(json!({"ready": false, "conditions": [{"type": "Ready", "status": "False", "severity": "Warning"}]}));
    assert_eq!(assess(&waiting).code, Progressing);
    assert_eq!(assess(&amcp(json!(null))), Health::new(Progressing, "Provisioning..."));
}

#[test]
fn malformed_status_is_unknown() {
    assert_eq!(assess(&cluster(json!({}), json!("Provisioned"))).code, Unknown);
    assert_eq!(
        assess(&cluster(json!({}), json!({"v1beta2": {"conditions": "x"}}))).code,
        Unknown
    );
    assert_eq!(assess(&kcp(json!({"conditions": 5}))).code, Unknown);
    for kind in ["Machine", "MachineDeployment", "MachinePool", "MachineHealthCheck"] {
        let obj = capi("cluster.x-k8s.io/v1beta1", kind, json!({}), json!([]));
        assert_eq!(assess(&obj).code, Unknown, "{kind}");
    }
}

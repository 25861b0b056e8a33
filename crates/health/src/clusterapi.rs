//! Health of Cluster API objects: Cluster, Machine, MachineDeployment, MachinePool and
//! MachineHealthCheck (`cluster.x-k8s.io`), ClusterResourceSet (`addons.cluster.x-k8s.io`) and the
//! control planes KubeadmControlPlane and AWSManagedControlPlane (`controlplane.cluster.x-k8s.io`).
//!
//! Upstream rules followed: Argo CD `resource_customizations/cluster.x-k8s.io/<Kind>/health.lua` for
//! the five core kinds (the Cluster check is the version that reads `status.v1beta2.conditions`),
//! `resource_customizations/addons.cluster.x-k8s.io/ClusterResourceSet/health.lua` and
//! `resource_customizations/controlplane.cluster.x-k8s.io/{KubeadmControlPlane,AWSManagedControlPlane}/health.lua`.
//! Other control-plane kinds use the kstatus fallback.

use serde_json::Value;

use crate::Health;
use crate::json::{Condition, Verdict, conditions_in, find, int_at, is_true, status_conditions, status_object, str_at};

/// Cluster conditions that make the cluster Degraded unless True.
const CLUSTER_MANDATORY: [&str; 8] = [
    "Available",
    "Ready",
    "RemoteConnectionProbe",
    "InfrastructureReady",
    "ControlPlaneInitialized",
    "ControlPlaneAvailable",
    "WorkersAvailable",
    "ControlPlaneMachinesReady",
];
/// Cluster conditions that mean work in progress unless False.
const CLUSTER_ACTIVE: [&str; 5] = ["RollingOut", "Remediating", "ScalingDown", "ScalingUp", "Deleting"];
/// Cluster conditions that mean work in progress unless True.
const CLUSTER_CONVERGING: [&str; 4] = [
    "WorkerMachinesReady",
    "ControlPlaneMachinesUpToDate",
    "WorkerMachinesUpToDate",
    "TopologyReconciled",
];

/// The v1beta2 conditions when present (`status.v1beta2.conditions`), else `status.conditions`.
fn capi_conditions(obj: &Value) -> Result<Option<Vec<Condition<'_>>>, crate::json::Malformed> {
    let Some(status) = status_object(obj)? else {
        return Ok(None);
    };
    match status.get("v1beta2").and_then(|v| v.get("conditions")) {
        Some(v1beta2) if !v1beta2.is_null() => conditions_in(Some(v1beta2), "status.v1beta2.conditions"),
        _ => status_conditions(obj),
    }
}

/// cluster.x-k8s.io Cluster: paused is Suspended; then the first decisive condition in list order;
/// then the phase (Provisioned is Healthy, Failed Degraded); else Progressing.
pub(crate) fn cluster(obj: &Value) -> Verdict {
    if is_true(obj, &["spec", "paused"]) {
        return Ok(Health::suspended("Cluster is paused"));
    }
    for c in capi_conditions(obj)?.unwrap_or_default() {
        if CLUSTER_MANDATORY.contains(&c.type_) && !c.is_true() {
            return Ok(Health::degraded(c.describe(|| format!("{} is not True", c.type_))));
        }
        if (CLUSTER_ACTIVE.contains(&c.type_) && !c.is_false())
            || (CLUSTER_CONVERGING.contains(&c.type_) && !c.is_true())
        {
            return Ok(Health::progressing(c.message_or("Waiting for Cluster")));
        }
    }
    Ok(match str_at(obj, &["status", "phase"]) {
        Some("Provisioned") => Health::healthy("Cluster is running"),
        // vocabulary: Cluster API phases
        Some("Failed") => Health::degraded(str_at(obj, &["status", "failureMessage"]).unwrap_or("Cluster failed")),
        _ => Health::progressing("Waiting for Cluster"),
    })
}

/// cluster.x-k8s.io Machine: by phase (Running is Healthy, Failed Degraded, else Progressing); when
/// not Healthy the message is the first False Ready condition's.
pub(crate) fn machine(obj: &Value) -> Verdict {
    let conditions = status_conditions(obj)?.unwrap_or_default();
    let why = || {
        conditions
            .iter()
            .find(|c| c.type_ == "Ready" && c.is_false())
            .map_or_else(|| "Condition is unknown".to_owned(), |c| c.message.to_owned())
    };
    Ok(match str_at(obj, &["status", "phase"]) {
        Some("Running") => Health::healthy("Machine is running"), // vocabulary: Cluster API phases
        Some("Failed") => Health::degraded(why()),                // vocabulary: Cluster API phases
        _ => Health::progressing(why()),
    })
}

/// cluster.x-k8s.io MachineDeployment: paused is Suspended; phase Running with every replica updated
/// and ready is Healthy; ScalingUp, ScalingDown and anything else Progressing; Failed Degraded.
pub(crate) fn machine_deployment(obj: &Value) -> Verdict {
    if is_true(obj, &["spec", "paused"]) {
        return Ok(Health::suspended("MachineDeployment is paused"));
    }
    status_object(obj)?;
    let count = |field: &str| int_at(obj, &["status", field]);
    Ok(match str_at(obj, &["status", "phase"]) {
        Some("Running")
            if count("replicas") == count("updatedReplicas") && count("replicas") == count("readyReplicas") =>
        {
            Health::healthy("Machines are running under this deployment")
        }
        Some("ScalingUp") => Health::progressing("Cluster is spawning machines"),
        Some("ScalingDown") => Health::progressing("Cluster is stopping machines"),
        Some("Failed") => Health::degraded("MachineDeployment is failed"), // vocabulary: Cluster API phases
        _ => Health::progressing("Waiting for machines"),
    })
}

/// cluster.x-k8s.io MachinePool: Running or Scaling is Healthy, Failed or Unknown Degraded, else
/// Progressing; the message names the phase and every False condition with its reason.
pub(crate) fn machine_pool(obj: &Value) -> Verdict {
    let conditions = status_conditions(obj)?.unwrap_or_default();
    let phase = str_at(obj, &["status", "phase"]);
    let mut message = phase.map_or_else(String::new, |p| format!("MachinePool is {p}"));
    let not_true: Vec<String> = conditions
        .iter()
        .filter(|c| c.is_false())
        .map(|c| {
            if c.reason.is_empty() {
                format!("Not {}", c.type_)
            } else {
                format!("Not {} ({})", c.type_, c.reason)
            }
        })
        .collect();
    if !not_true.is_empty() {
        message = format!("{message}: {}", not_true.join(", "));
    }
    Ok(match phase {
        Some("Running" | "Scaling") => Health::healthy(message), // vocabulary: Cluster API phases
        Some("Failed" | "Unknown") => Health::degraded(message), // vocabulary: Cluster API phases
        _ => Health::progressing(message),
    })
}

/// cluster.x-k8s.io MachineHealthCheck: once `currentHealthy` is reported, Healthy when it equals
/// `expectedMachines` and Degraded otherwise.
pub(crate) fn machine_health_check(obj: &Value) -> Verdict {
    status_object(obj)?;
    let Some(healthy) = int_at(obj, &["status", "currentHealthy"]) else {
        return Ok(Health::progressing(""));
    };
    let expected = int_at(obj, &["status", "expectedMachines"]);
    Ok(if expected == Some(healthy) {
        Health::healthy(format!("{healthy} machines are healthy"))
    } else {
        Health::degraded(format!(
            "{healthy} of {} expected machines are healthy",
            expected.map_or_else(|| "?".to_owned(), |e| e.to_string())
        ))
    })
}

/// addons.cluster.x-k8s.io ClusterResourceSet: by the first `ResourcesApplied` condition.
pub(crate) fn cluster_resource_set(obj: &Value) -> Verdict {
    let conditions = status_conditions(obj)?.unwrap_or_default();
    Ok(match find(&conditions, "ResourcesApplied") {
        Some(c) if c.is_true() => Health::healthy("cluster resource set is applied"),
        Some(c) if c.is_false() => Health::degraded(c.describe(|| "Resources are not applied".to_owned())),
        _ => Health::progressing("Initializing cluster resource set"),
    })
}

/// controlplane.cluster.x-k8s.io KubeadmControlPlane: unhealthy etcd is Degraded; machines not ready
/// or not up to date, unhealthy components, a roll-out or replicas not all updated and ready are
/// Progressing; else Healthy.
pub(crate) fn kubeadm_control_plane(obj: &Value) -> Verdict {
    let Some(status) = status_object(obj)? else {
        return Ok(Health::progressing("Waiting for KubeadmControlPlane status"));
    };
    let legacy = status_conditions(obj)?.unwrap_or_default();
    let v1beta2 = conditions_in(
        status.get("v1beta2").and_then(|v| v.get("conditions")),
        "status.v1beta2.conditions",
    )?
    .unwrap_or_default();
    if find(&legacy, "EtcdClusterHealthy").is_some_and(|c| !c.is_true()) {
        return Ok(Health::degraded("Etcd cluster is unhealthy"));
    }
    let checks: [(&[Condition<'_>], &str, &str); 3] = [
        (&v1beta2, "MachinesReady", "Machines not ready"),
        (&v1beta2, "MachinesUpToDate", "Updating machines"),
        (
            &legacy,
            "ControlPlaneComponentsHealthy",
            "Control plane components unhealthy",
        ),
    ];
    for (list, type_, message) in checks {
        if find(list, type_).is_some_and(|c| !c.is_true()) {
            return Ok(Health::progressing(message));
        }
    }
    if find(&v1beta2, "RollingOut").is_some_and(|c| c.is_true()) {
        return Ok(Health::progressing("Rolling out"));
    }
    let count = |field: &str| int_at(obj, &["status", field]).unwrap_or(0);
    let (replicas, updated, ready) = (count("replicas"), count("updatedReplicas"), count("readyReplicas"));
    if replicas > 0 && updated < replicas {
        return Ok(Health::progressing(format!(
            "Updating: {updated}/{replicas} updated, {ready} ready"
        )));
    }
    if replicas != ready {
        return Ok(Health::progressing(format!("{ready}/{replicas} ready")));
    }
    Ok(Health::healthy("Control plane is healthy"))
}

/// controlplane.cluster.x-k8s.io AWSManagedControlPlane: a failure message is Degraded, an EKS update
/// in flight Progressing, Ready True Healthy, a False condition of severity Error Degraded.
pub(crate) fn aws_managed_control_plane(obj: &Value) -> Verdict {
    let Some(conditions) = status_conditions(obj)? else {
        return Ok(Health::progressing("Provisioning..."));
    };
    if let Some(failure) = str_at(obj, &["status", "failureMessage"]).filter(|m| !m.is_empty()) {
        return Ok(Health::degraded(failure));
    }
    if conditions
        .iter()
        .any(|c| c.type_ == "EKSControlPlaneUpdating" && c.is_true())
    {
        return Ok(Health::progressing("EKS control plane is updating"));
    }
    let mut errors = Vec::new();
    for c in &conditions {
        if c.type_ == "Ready" && c.is_true() {
            return Ok(Health::healthy("Control plane is ready"));
        }
        // vocabulary: Cluster API severities
        if c.is_false() && c.severity == "Error" {
            errors.push(c.message);
        }
    }
    if !errors.is_empty() {
        return Ok(Health::degraded(errors.join(" ")));
    }
    if obj.get("status").and_then(|s| s.get("ready")).and_then(Value::as_bool) == Some(false) {
        return Ok(Health::progressing(
            "Control plane is not ready (.status.ready is false)",
        ));
    }
    Ok(Health::progressing("Control plane is not ready"))
}

#[cfg(test)]
mod tests;

//! Kubernetes API versions that current clusters no longer serve, and what replaced them (the
//! Kubernetes deprecated-API migration guide), so that a manifest using one gets a message a person
//! can act on instead of a bare "unknown kind".

/// One removed API version: which kinds (empty: every kind of it), the release that removed it and
/// the apiVersion to use instead.
struct Removed {
    api_version: &'static str,
    kinds: &'static [&'static str],
    removed_in: &'static str,
    replacement: &'static str,
}

const WORKLOADS: &[&str] = &["Deployment", "DaemonSet", "ReplicaSet", "StatefulSet"];

const REMOVED: &[Removed] = &[
    Removed {
        api_version: "extensions/v1beta1",
        kinds: WORKLOADS,
        removed_in: "1.16",
        replacement: "apps/v1",
    },
    Removed {
        api_version: "apps/v1beta1",
        kinds: &[],
        removed_in: "1.16",
        replacement: "apps/v1",
    },
    Removed {
        api_version: "apps/v1beta2",
        kinds: &[],
        removed_in: "1.16",
        replacement: "apps/v1",
    },
    Removed {
        api_version: "extensions/v1beta1",
        kinds: &["NetworkPolicy"],
        removed_in: "1.16",
        replacement: "networking.k8s.io/v1",
    },
    Removed {
        api_version: "extensions/v1beta1",
        kinds: &["Ingress"],
        removed_in: "1.22",
        replacement: "networking.k8s.io/v1",
    },
    Removed {
        api_version: "networking.k8s.io/v1beta1",
        kinds: &[],
        removed_in: "1.22",
        replacement: "networking.k8s.io/v1",
    },
    Removed {
        api_version: "apiextensions.k8s.io/v1beta1",
        kinds: &[],
        removed_in: "1.22",
        replacement: "apiextensions.k8s.io/v1",
    },
    Removed {
        api_version: "admissionregistration.k8s.io/v1beta1",
        kinds: &["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"],
        removed_in: "1.22",
        replacement: "admissionregistration.k8s.io/v1",
    },
    Removed {
        api_version: "apiregistration.k8s.io/v1beta1",
        kinds: &[],
        removed_in: "1.22",
        replacement: "apiregistration.k8s.io/v1",
    },
    Removed {
        api_version: "rbac.authorization.k8s.io/v1beta1",
        kinds: &[],
        removed_in: "1.22",
        replacement: "rbac.authorization.k8s.io/v1",
    },
    Removed {
        api_version: "scheduling.k8s.io/v1beta1",
        kinds: &[],
        removed_in: "1.22",
        replacement: "scheduling.k8s.io/v1",
    },
    Removed {
        api_version: "storage.k8s.io/v1beta1",
        kinds: &["CSIDriver", "CSINode", "StorageClass", "VolumeAttachment"],
        removed_in: "1.22",
        replacement: "storage.k8s.io/v1",
    },
    Removed {
        api_version: "coordination.k8s.io/v1beta1",
        kinds: &[],
        removed_in: "1.22",
        replacement: "coordination.k8s.io/v1",
    },
    Removed {
        api_version: "certificates.k8s.io/v1beta1",
        kinds: &[],
        removed_in: "1.22",
        replacement: "certificates.k8s.io/v1",
    },
    Removed {
        api_version: "batch/v1beta1",
        kinds: &["CronJob"],
        removed_in: "1.25",
        replacement: "batch/v1",
    },
    Removed {
        api_version: "discovery.k8s.io/v1beta1",
        kinds: &[],
        removed_in: "1.25",
        replacement: "discovery.k8s.io/v1",
    },
    Removed {
        api_version: "events.k8s.io/v1beta1",
        kinds: &[],
        removed_in: "1.25",
        replacement: "events.k8s.io/v1",
    },
    Removed {
        api_version: "autoscaling/v2beta1",
        kinds: &[],
        removed_in: "1.25",
        replacement: "autoscaling/v2",
    },
    Removed {
        api_version: "policy/v1beta1",
        kinds: &["PodDisruptionBudget"],
        removed_in: "1.25",
        replacement: "policy/v1",
    },
    Removed {
        api_version: "node.k8s.io/v1beta1",
        kinds: &[],
        removed_in: "1.25",
        replacement: "node.k8s.io/v1",
    },
    Removed {
        api_version: "autoscaling/v2beta2",
        kinds: &[],
        removed_in: "1.26",
        replacement: "autoscaling/v2",
    },
    Removed {
        api_version: "storage.k8s.io/v1beta1",
        kinds: &["CSIStorageCapacity"],
        removed_in: "1.27",
        replacement: "storage.k8s.io/v1",
    },
    Removed {
        api_version: "flowcontrol.apiserver.k8s.io/v1beta1",
        kinds: &[],
        removed_in: "1.26",
        replacement: "flowcontrol.apiserver.k8s.io/v1",
    },
    Removed {
        api_version: "flowcontrol.apiserver.k8s.io/v1beta2",
        kinds: &[],
        removed_in: "1.29",
        replacement: "flowcontrol.apiserver.k8s.io/v1",
    },
    Removed {
        api_version: "flowcontrol.apiserver.k8s.io/v1beta3",
        kinds: &[],
        removed_in: "1.32",
        replacement: "flowcontrol.apiserver.k8s.io/v1",
    },
];

/// "removed in Kubernetes 1.22; use networking.k8s.io/v1" for an apiVersion and kind that current
/// releases no longer serve, or `None` when the pair is not a known removal.
pub fn removal_hint(api_version: &str, kind: &str) -> Option<String> {
    if api_version == "policy/v1beta1" && kind == "PodSecurityPolicy" {
        return Some("removed in Kubernetes 1.25 without a replacement kind; use Pod Security Admission".into());
    }
    REMOVED
        .iter()
        .find(|r| r.api_version == api_version && (r.kinds.is_empty() || r.kinds.contains(&kind)))
        .map(|r| format!("removed in Kubernetes {}; use {}", r.removed_in, r.replacement))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removed_beta_apis_name_their_replacement() {
        assert_eq!(
            removal_hint("extensions/v1beta1", "Ingress").as_deref(),
            Some("removed in Kubernetes 1.22; use networking.k8s.io/v1")
        );
        assert_eq!(
            removal_hint("extensions/v1beta1", "Deployment").as_deref(),
            Some("removed in Kubernetes 1.16; use apps/v1")
        );
        assert_eq!(
            removal_hint("batch/v1beta1", "CronJob").as_deref(),
            Some("removed in Kubernetes 1.25; use batch/v1")
        );
        assert_eq!(
            removal_hint("policy/v1beta1", "PodDisruptionBudget").as_deref(),
            Some("removed in Kubernetes 1.25; use policy/v1")
        );
        assert!(removal_hint("policy/v1beta1", "PodSecurityPolicy").is_some_and(|h| h.contains("1.25")));
    }

    #[test]
    fn served_apis_and_custom_kinds_have_no_hint() {
        assert_eq!(removal_hint("networking.k8s.io/v1", "Ingress"), None);
        assert_eq!(removal_hint("apps/v1", "Deployment"), None);
        assert_eq!(removal_hint("example.com/v1beta1", "Widget"), None);
        assert_eq!(removal_hint("extensions/v1beta1", "Widget"), None);
    }
}

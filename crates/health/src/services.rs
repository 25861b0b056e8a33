//! Health of traffic-routing objects: a LoadBalancer Service and an Ingress are Healthy once the cloud
//! (or ingress controller) has published an address in `status.loadBalancer.ingress`.

use serde_json::Value;

use crate::Health;
use crate::json::{array_at, str_at};

/// Whether `status.loadBalancer.ingress` has at least one entry.
fn has_load_balancer_address(obj: &Value) -> bool {
    !array_at(obj, &["status", "loadBalancer", "ingress"]).is_empty()
}

/// core/v1 Service: a LoadBalancer waits for its address; every other type is Healthy on creation.
pub(crate) fn service(obj: &Value) -> Health {
    if str_at(obj, &["spec", "type"]) == Some("LoadBalancer") && !has_load_balancer_address(obj) {
        return Health::progressing("Waiting for the load balancer to be provisioned");
    }
    Health::healthy("")
}

/// networking.k8s.io/v1 (or extensions/v1beta1) Ingress.
pub(crate) fn ingress(obj: &Value) -> Health {
    if has_load_balancer_address(obj) {
        Health::healthy("")
    } else {
        Health::progressing("Waiting for the ingress controller to publish an address")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::{HealthCode::*, assess};

    fn service(type_: &str, status: Value) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"type": type_, "selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
            "status": status
        })
    }

    #[test]
    fn load_balancer_without_ingress_is_progressing() {
        assert_eq!(
            assess(&service("LoadBalancer", json!({"loadBalancer": {}}))).code,
            Progressing
        );
        assert_eq!(
            assess(&service("LoadBalancer", json!({"loadBalancer": {"ingress": []}}))).code,
            Progressing
        );
        assert_eq!(assess(&service("LoadBalancer", json!(null))).code, Progressing);
    }

    #[test]
    fn load_balancer_with_ingress_is_healthy() {
        let s = service(
            "LoadBalancer",
            json!({"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}),
        );
        assert_eq!(assess(&s).code, Healthy);
        let s = service(
            "LoadBalancer",
            json!({"loadBalancer": {"ingress": [{"hostname": "a1b2.elb.example.com"}]}}),
        );
        assert_eq!(assess(&s).code, Healthy);
    }

    #[test]
    fn other_service_types_are_healthy() {
        for type_ in ["ClusterIP", "NodePort", "ExternalName"] {
            assert_eq!(
                assess(&service(type_, json!({"loadBalancer": {}}))).code,
                Healthy,
                "{type_}"
            );
        }
        let mut untyped = service("ClusterIP", json!({}));
        untyped["spec"].as_object_mut().unwrap().remove("type");
        assert_eq!(assess(&untyped).code, Healthy);
    }

    fn ingress(api_version: &str, status: Value) -> Value {
        json!({
            "apiVersion": api_version,
            "kind": "Ingress",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"ingressClassName": "nginx", "rules": [{"host": "shop.example.com"}]},
            "status": status
        })
    }

    #[test]
    fn ingress_with_address_is_healthy() {
        let status = json!({"loadBalancer": {"ingress": [{"ip": "198.51.100.7"}]}});
        assert_eq!(assess(&ingress("networking.k8s.io/v1", status.clone())).code, Healthy);
        assert_eq!(assess(&ingress("extensions/v1beta1", status)).code, Healthy);
    }

    #[test]
    fn ingress_without_address_is_progressing() {
        assert_eq!(
            assess(&ingress("networking.k8s.io/v1", json!({"loadBalancer": {}}))).code,
            Progressing
        );
        assert_eq!(assess(&ingress("extensions/v1beta1", json!(null))).code, Progressing);
    }
}

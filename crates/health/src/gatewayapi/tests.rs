//! Fixture tests of the Gateway API rules: accepted, programming, refused, stale and malformed objects.

use serde_json::{Value, json};

use crate::{Health, HealthCode::*, assess};

fn gw(kind: &str, generation: i64, status: Value) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": kind,
        "metadata": {"name": "web", "namespace": "shop", "generation": generation},
        "spec": {}, "status": status
    })
}

fn cond(type_: &str, status: &str, message: &str, observed: i64) -> Value {
    json!({"type": type_, "status": status, "message": message, "observedGeneration": observed})
}

#[test]
fn gateway_class_accepted() {
    let ok = gw(
        "GatewayClass",
        1,
        json!({"conditions": [cond("Accepted", "True", "Handled by envoy", 1)]}),
    );
    assert_eq!(assess(&ok), Health::new(Healthy, "Handled by envoy"));
    let no = gw(
        "GatewayClass",
        1,
        json!({"conditions": [cond("Accepted", "False", "", 1)]}),
    );
    assert_eq!(assess(&no), Health::new(Degraded, "GatewayClass is not accepted"));
    let stale = gw(
        "GatewayClass",
        2,
        json!({"conditions": [cond("Accepted", "False", "old", 1)]}),
    );
    assert_eq!(
        assess(&stale),
        Health::new(Progressing, "Waiting for GatewayClass status")
    );
    let pending = gw(
        "GatewayClass",
        1,
        json!({"conditions": [cond("Accepted", "Unknown", "Waiting for controller", 1)]}),
    );
    assert_eq!(assess(&pending).code, Progressing);
}

#[test]
fn gateway_states() {
    let ok = gw(
        "Gateway",
        1,
        json!({"conditions": [cond("Accepted", "True", "", 1), cond("Programmed", "True", "", 1)],
        "listeners": [{"name": "http", "conditions": [cond("Programmed", "True", "", 1)]}]}),
    );
    assert_eq!(assess(&ok), Health::new(Healthy, "Gateway is healthy"));
    let programming = gw(
        "Gateway",
        1,
        json!({"conditions": [cond("Accepted", "True", "", 1), cond("Programmed", "Unknown", "Waiting for controller", 1)]}),
    );
    assert_eq!(assess(&programming), Health::new(Progressing, "Waiting for controller"));
    let bad_ref = gw(
        "Gateway",
        1,
        json!({"conditions": [cond("Accepted", "True", "", 1)],
        "listeners": [{"name": "https", "conditions": [cond("ResolvedRefs", "False", "secret web-tls not found", 1)]}]}),
    );
    assert_eq!(
        assess(&bad_ref),
        Health::new(Degraded, "Listener: secret web-tls not found")
    );
    let refused = gw("Gateway", 1, json!({"conditions": [cond("Accepted", "False", "", 1)]}));
    assert_eq!(assess(&refused), Health::new(Degraded, "Failed condition: Accepted"));
    assert_eq!(
        assess(&gw("Gateway", 1, json!(null))),
        Health::new(Progressing, "Waiting for Gateway status")
    );
    assert_eq!(assess(&gw("Gateway", 1, json!({}))).code, Progressing);
}

fn parent(name: &str, conditions: Value) -> Value {
    json!({"parentRef": {"name": name}, "controllerName": "example.com/gateway", "conditions": conditions})
}

#[test]
fn http_and_grpc_routes() {
    for kind in ["HTTPRoute", "GRPCRoute", "TCPRoute", "UDPRoute"] {
        let ok = gw(
            kind,
            2,
            json!({"parents": [parent("web", json!([cond("Accepted", "True", "", 2), cond("ResolvedRefs", "True", "", 2)]))]}),
        );
        assert_eq!(
            assess(&ok),
            Health::new(Healthy, format!("{kind} is healthy")),
            "{kind}"
        );
        let bad = gw(
            kind,
            2,
            json!({"parents": [parent("web", json!([cond("Accepted", "True", "", 2), cond("ResolvedRefs", "False", "service api not found", 2)]))]}),
        );
        assert_eq!(
            assess(&bad),
            Health::new(Degraded, "Parent web: service api not found"),
            "{kind}"
        );
        let stale = gw(
            kind,
            2,
            json!({"parents": [parent("web", json!([cond("Accepted", "False", "old", 1)]))]}),
        );
        assert_eq!(
            assess(&stale),
            Health::new(Progressing, format!("Waiting for {kind} status")),
            "{kind}"
        );
        let programming = gw(
            kind,
            2,
            json!({"parents": [parent("web", json!([cond("Accepted", "True", "", 2), cond("Programmed", "False", "", 2)]))]}),
        );
        assert_eq!(
            assess(&programming),
            Health::new(Progressing, "Parent web: Route is still being programmed"),
            "{kind}"
        );
        assert_eq!(assess(&gw(kind, 2, json!(null))).code, Progressing, "{kind}");
        assert_eq!(assess(&gw(kind, 2, json!({"parents": []}))).code, Progressing, "{kind}");
    }
}

#[test]
fn tls_route_needs_accepted_and_resolved_refs() {
    let ok = gw(
        "TLSRoute",
        1,
        json!({"parents": [parent("edge", json!([cond("Accepted", "True", "", 1), cond("ResolvedRefs", "True", "", 1)]))]}),
    );
    assert_eq!(assess(&ok), Health::new(Healthy, "TLSRoute is healthy"));
    let half = gw(
        "TLSRoute",
        1,
        json!({"parents": [parent("edge", json!([cond("Accepted", "True", "", 1)]))]}),
    );
    assert_eq!(
        assess(&half),
        Health::new(Progressing, "Parent edge: Waiting for TLSRoute conditions")
    );
    let refused = gw(
        "TLSRoute",
        1,
        json!({"parents": [parent("edge", json!([cond("Accepted", "False", "no matching listener", 1)]))]}),
    );
    assert_eq!(
        assess(&refused),
        Health::new(Degraded, "Parent edge: no matching listener")
    );
    let stale = gw(
        "TLSRoute",
        2,
        json!({"parents": [parent("edge", json!([cond("Accepted", "True", "", 2), cond("ResolvedRefs", "False", "old", 1)]))]}),
    );
    assert_eq!(assess(&stale).code, Progressing);
}

#[test]
fn malformed_is_unknown() {
    assert_eq!(
        assess(&gw("HTTPRoute", 1, json!({"parents": {"name": "web"}}))).code,
        Unknown
    );
    assert_eq!(
        assess(&gw("HTTPRoute", 1, json!({"parents": [{"conditions": "Accepted"}]}))).code,
        Unknown
    );
    assert_eq!(assess(&gw("Gateway", 1, json!({"listeners": 3}))).code, Unknown);
    assert_eq!(assess(&gw("Gateway", 1, json!("Programmed"))).code, Unknown);
    assert_eq!(assess(&gw("GatewayClass", 1, json!({"conditions": {}}))).code, Unknown);
}

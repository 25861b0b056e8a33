//! Fixture tests of the cert-manager rules: issued, renewing, failing, pending, denied and malformed objects.

use serde_json::{Value, json};

use crate::{Health, HealthCode::*, assess};

fn object(kind: &str, status: Value) -> Value {
    json!({
        "apiVersion": "cert-manager.io/v1", "kind": kind,
        "metadata": {"name": "web-tls", "namespace": "shop", "generation": 1},
        "spec": {"secretName": "web-tls", "issuerRef": {"name": "letsencrypt", "kind": "ClusterIssuer"}},
        "status": status
    })
}

fn cond(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": message})
}

#[test]
fn certificate_issued_is_healthy() {
    let c = object(
        "Certificate",
        json!({"conditions": [
            cond("Ready", "True", "Ready", "Certificate is up to date and has not expired")
        ]}),
    );
    assert_eq!(
        assess(&c),
        Health::new(Healthy, "Certificate is up to date and has not expired")
    );
}

#[test]
fn certificate_issuing_is_progressing_even_when_ready() {
    let renewing = object(
        "Certificate",
        json!({"conditions": [
            cond("Ready", "True", "Ready", "Certificate is up to date and has not expired"),
            cond("Issuing", "True", "Renewing", "Renewing certificate as renewal was scheduled at 2024-05-01")
        ]}),
    );
    assert_eq!(
        assess(&renewing),
        Health::new(
            Progressing,
            "Renewing certificate as renewal was scheduled at 2024-05-01"
        )
    );
    let first = object(
        "Certificate",
        json!({"conditions": [
            cond("Ready", "False", "DoesNotExist", "Issuing certificate as Secret does not exist"),
            cond("Issuing", "True", "DoesNotExist", "")
        ]}),
    );
    assert_eq!(assess(&first), Health::new(Progressing, "Issuing certificate"));
}

#[test]
fn certificate_not_ready_is_degraded() {
    let c = object(
        "Certificate",
        json!({"conditions": [
            cond("Ready", "False", "IncorrectIssuer", "Issuer letsencrypt not found")
        ]}),
    );
    assert_eq!(assess(&c), Health::new(Degraded, "Issuer letsencrypt not found"));
}

#[test]
fn certificate_without_status_is_progressing() {
    assert_eq!(
        assess(&object("Certificate", json!(null))),
        Health::new(Progressing, "Waiting for certificate")
    );
    // Ready Unknown decides nothing.
    let c = object("Certificate", json!({"conditions": [cond("Ready", "Unknown", "", "")]}));
    assert_eq!(assess(&c).code, Progressing);
}

#[test]
fn certificate_request_states() {
    let issued = object(
        "CertificateRequest",
        json!({"conditions": [
            cond("Approved", "True", "cert-manager.io", ""),
            cond("Ready", "True", "Issued", "Certificate fetched from issuer successfully")
        ]}),
    );
    assert_eq!(
        assess(&issued),
        Health::new(Healthy, "Certificate fetched from issuer successfully")
    );
    let pending = object(
        "CertificateRequest",
        json!({"conditions": [
            cond("Ready", "False", "Pending", "Waiting on certificate issuance from order shop/web-tls-1")
        ]}),
    );
    assert_eq!(assess(&pending).code, Progressing);
    let failed = object(
        "CertificateRequest",
        json!({"conditions": [
            cond("Ready", "False", "Failed", "The CSR PEM requests a commonName that is not present in the list of dnsNames")
        ]}),
    );
    assert_eq!(assess(&failed).code, Degraded);
    let denied = object(
        "CertificateRequest",
        json!({"conditions": [
            cond("Ready", "False", "Pending", ""),
            cond("Denied", "True", "policy.cert-manager.io", "Denied by policy: commonName not allowed")
        ]}),
    );
    assert_eq!(
        assess(&denied),
        Health::new(Degraded, "Denied by policy: commonName not allowed")
    );
    let invalid = object(
        "CertificateRequest",
        json!({"conditions": [cond("InvalidRequest", "True", "BadConfig", "")]}),
    );
    assert_eq!(assess(&invalid), Health::new(Degraded, "BadConfig"));
    assert_eq!(
        assess(&object("CertificateRequest", json!({}))),
        Health::new(Progressing, "Waiting for certificate request")
    );
}

#[test]
fn issuers_follow_ready() {
    for (kind, waiting) in [
        ("Issuer", "Initializing issuer"),
        ("ClusterIssuer", "Initializing ClusterIssuer"),
    ] {
        let ready = object(
            kind,
            json!({"acme": {"uri": "acct"}, "conditions": [
                cond("Ready", "True", "ACMEAccountRegistered", "The ACME account was registered with the ACME server")
            ]}),
        );
        assert_eq!(assess(&ready).code, Healthy, "{kind}");
        let failed = object(
            kind,
            json!({"conditions": [
                cond("Ready", "False", "ErrRegisterACMEAccount", "Failed to register ACME account: 400 urn:ietf:params:acme:error:invalidEmail")
            ]}),
        );
        assert_eq!(assess(&failed).code, Degraded, "{kind}");
        assert_eq!(
            assess(&object(kind, json!(null))),
            Health::new(Progressing, waiting),
            "{kind}"
        );
    }
}

#[test]
fn malformed_status_is_unknown() {
    for kind in ["Certificate", "CertificateRequest", "Issuer", "ClusterIssuer"] {
        assert_eq!(assess(&object(kind, json!("Ready"))).code, Unknown, "{kind}");
        assert_eq!(
            assess(&object(kind, json!({"conditions": "Ready=True"}))).code,
            Unknown,
            "{kind}"
        );
    }
}

#[test]
fn same_kind_in_another_group_is_not_cert_manager() {
    let other = json!({"apiVersion": "example.com/v1", "kind": "Certificate", "metadata": {"name": "x"}});
    assert_eq!(assess(&other).code, Healthy);
}

//! What only a current Kubernetes release does, seen through Capstan: a CRD's CEL validation rule
//! (`x-kubernetes-validations`, 1.25+) refuses an object at sync time with the API server's message,
//! and an API version current clusters no longer serve (`extensions/v1beta1` Ingress, removed in 1.22)
//! is named in a clear condition while nothing of that sync is applied.
//!
//! Both tests first check that the API server runs the release `CAPSTAN_KUBE_VERSION` selects. On
//! the older release (the compatibility smoke run) they assert what that release does instead: it
//! ignores the CEL rule and still serves the beta Ingress — exactly what the suite could not see
//! while it ran only there.

mod support;

use std::time::Duration;

use capstan_playground::KubeVersion;
use support::*;

/// A CRD whose CEL rule ties two fields together.
const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.cel.test.capstan.dev}
spec:
  group: cel.test.capstan.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              minReplicas: {type: integer}
              maxReplicas: {type: integer}
            x-kubernetes-validations:
            - rule: "self.minReplicas <= self.maxReplicas"
              message: "minReplicas must not exceed maxReplicas"
"#;

fn widget(min: u32, max: u32) -> String {
    format!(
        "apiVersion: cel.test.capstan.dev/v1\nkind: Widget\nmetadata: {{name: sizes}}\nspec: {{minReplicas: {min}, maxReplicas: {max}}}\n"
    )
}

fn finished_at<'a>(sha: &'a str, phase: &'a str) -> impl Fn(&capstan_api::Application) -> bool + 'a {
    move |a| {
        a.status.as_ref().is_some_and(|s| {
            s.operation_state
                .as_ref()
                .is_some_and(|o| o.phase == phase && o.revision == sha)
        })
    }
}

/// The release under test must be the current one unless the older route was chosen on purpose.
fn assert_release(server: &str) {
    let selected = KubeVersion::selected().expect("CAPSTAN_KUBE_VERSION is a pinned release");
    assert_eq!(server, selected.tag, "the API server runs the selected release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cel_rule_of_a_crd_from_git_refuses_an_invalid_object_and_accepts_a_valid_one() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    let version = env.client.apiserver_version().await?;
    assert_release(&version.git_version);
    let enforces_cel = KubeVersion::selected()?.minor >= 25;
    env.git.create_repo("cel")?;
    let valid = env.git.commit(
        "cel",
        "main",
        &[("app/crd.yaml", Some(CRD)), ("app/widget.yaml", Some(&widget(1, 3)))],
        "a CRD and a valid widget",
    )?;
    env.create_app(app("cel", &env.git.git_url("cel"), "app", "cel", false))
        .await?;
    env.wait_app("cel", "OutOfSync", Duration::from_secs(60), |a| {
        sync_of(a) == "OutOfSync"
    })
    .await?;
    env.request(
        "cel",
        serde_json::json!({"sync": {}, "initiatedBy": "test", "id": "valid"}),
    )
    .await?;
    if !enforces_cel {
        // Before 1.25 the API server does not know the field: server-side apply refuses the CRD.
        let failed = env
            .wait_app(
                "cel",
                "the CRD is refused",
                Duration::from_secs(90),
                finished_at(&valid, "Failed"),
            )
            .await?;
        let message = op_message(&failed);
        assert!(
            message.contains("x-kubernetes-validations") && message.contains("widgets.cel.test.capstan.dev"),
            "{message}"
        );
        return Ok(());
    }
    env.wait_app(
        "cel",
        "the valid widget synced",
        Duration::from_secs(90),
        finished_at(&valid, "Succeeded"),
    )
    .await?;
    let widgets = ("cel.test.capstan.dev/v1", "Widget", "widgets");
    let before = env
        .get(widgets.0, widgets.1, widgets.2, "cel", "sizes")
        .await?
        .expect("the valid widget was created");
    assert_eq!(before.pointer("/spec/maxReplicas"), Some(&serde_json::json!(3)));

    // A commit breaking the rule: the sync fails with the API server's CEL message.
    let invalid = env.git.commit(
        "cel",
        "main",
        &[("app/widget.yaml", Some(&widget(5, 2)))],
        "an invalid widget",
    )?;
    env.refresh("cel").await?;
    env.wait_app("cel", "OutOfSync at the invalid commit", Duration::from_secs(60), |a| {
        sync_of(a) == "OutOfSync"
            && a.status
                .as_ref()
                .and_then(|s| s.sync.as_ref())
                .is_some_and(|s| s.revision == invalid)
    })
    .await?;
    env.request(
        "cel",
        serde_json::json!({"sync": {}, "initiatedBy": "test", "id": "invalid"}),
    )
    .await?;
    let failed = env
        .wait_app(
            "cel",
            "the invalid widget is refused",
            Duration::from_secs(60),
            finished_at(&invalid, "Failed"),
        )
        .await?;
    let message = op_message(&failed);
    assert!(
        message.contains("minReplicas must not exceed maxReplicas") && message.contains("sizes"),
        "the failure carries the CEL rule's message and names the object: {message}"
    );
    let after = env
        .get(widgets.0, widgets.1, widgets.2, "cel", "sizes")
        .await?
        .expect("the widget is still there");
    assert_eq!(
        after.pointer("/spec"),
        before.pointer("/spec"),
        "the live widget is unchanged"
    );
    Ok(())
}

const INGRESS_BETA: &str = r#"apiVersion: extensions/v1beta1
kind: Ingress
metadata: {name: web}
spec:
  backend: {serviceName: web, servicePort: 80}
"#;

const INGRESS_V1: &str = r#"apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web}
spec:
  defaultBackend:
    service: {name: web, port: {number: 80}}
"#;

const SETTINGS: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: blue}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_removed_beta_api_is_named_in_a_condition_and_nothing_of_the_sync_is_applied() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    let version = env.client.apiserver_version().await?;
    assert_release(&version.git_version);
    let serves_beta_ingress = KubeVersion::selected()?.minor < 22;
    env.git.create_repo("beta")?;
    env.git.commit(
        "beta",
        "main",
        &[
            ("app/settings.yaml", Some(SETTINGS)),
            ("app/ingress.yaml", Some(INGRESS_BETA)),
        ],
        "an Ingress of a removed API version",
    )?;
    // Automated: the controller would sync at once if it could.
    env.create_app(app("beta", &env.git.git_url("beta"), "app", "beta", true))
        .await?;
    if serves_beta_ingress {
        // Before 1.22 the beta Ingress is served: a manifest every current cluster refuses syncs.
        env.wait_app("beta", "Synced with the beta Ingress", Duration::from_secs(90), |a| {
            sync_of(a) == "Synced"
        })
        .await?;
        let ingress = env
            .get("extensions/v1beta1", "Ingress", "ingresses", "beta", "web")
            .await?;
        assert!(ingress.is_some(), "the beta Ingress was applied");
        return Ok(());
    }
    let refused = env
        .wait_app("beta", "a ComparisonError", Duration::from_secs(60), |a| {
            condition(a, "ComparisonError").is_some()
        })
        .await?;
    let message = condition(&refused, "ComparisonError").unwrap_or_default();
    for expected in [
        "Ingress",
        "\"web\"",
        "extensions/v1beta1",
        "removed in Kubernetes 1.22",
        "networking.k8s.io/v1",
    ] {
        assert!(message.contains(expected), "the condition names {expected}: {message}");
    }
    assert!(
        !message.contains("settings"),
        "only the object of the removed version is named: {message}"
    );
    // The controller looked (the condition above) and applied nothing: not the ConfigMap, not even
    // the namespace CreateNamespace would make.
    let namespaces = env.api("v1", "Namespace", "namespaces", None);
    assert!(namespaces.get_opt("beta").await?.is_none(), "no namespace was created");
    assert!(
        op_phase(&refused).is_empty(),
        "no operation started: {:?}",
        refused.status.as_ref().and_then(|s| s.operation_state.as_ref())
    );

    // The fix: the same Ingress in networking.k8s.io/v1 syncs, with the rest of the commit.
    let fixed = env.git.commit(
        "beta",
        "main",
        &[("app/ingress.yaml", Some(INGRESS_V1))],
        "Ingress in networking.k8s.io/v1",
    )?;
    env.refresh("beta").await?;
    env.wait_app("beta", "Synced at the fix", Duration::from_secs(90), |a| {
        sync_of(a) == "Synced"
            && a.status
                .as_ref()
                .and_then(|s| s.sync.as_ref())
                .is_some_and(|s| s.revision == fixed)
            && condition(a, "ComparisonError").is_none()
    })
    .await?;
    let (v, k, p) = CM_API;
    assert!(env.get(v, k, p, "beta", "settings").await?.is_some());
    assert!(
        env.get("networking.k8s.io/v1", "Ingress", "ingresses", "beta", "web")
            .await?
            .is_some()
    );
    Ok(())
}

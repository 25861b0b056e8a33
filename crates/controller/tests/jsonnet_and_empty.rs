//! End to end: a Jsonnet directory in a real git repository syncs to what it declares, and a source
//! that became empty is a `ComparisonError` that leaves what runs alone — unless the Application says
//! "empty on purpose" with `syncPolicy.automated.allowEmpty`. Jsonnet runs in the `capstan` binary's
//! worker (built with the workspace), as the controller does in production.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use support::*;

/// `examples/jsonnet-guestbook-tla/guestbook-ui.jsonnet`.
fn guestbook_tla() -> String {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/jsonnet-guestbook-tla/guestbook-ui.jsonnet");
    std::fs::read_to_string(file).expect("the example exists")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jsonnet_directory_syncs_to_a_service_and_a_deployment() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    let ns = "jsonnet-guestbook-e2e";
    env.git.create_repo("jsonnet")?;
    let program = guestbook_tla();
    env.git.commit(
        "jsonnet",
        "main",
        &[("guestbook/guestbook-ui.jsonnet", Some(program.as_str()))],
        "jsonnet guestbook",
    )?;
    let mut manifest = app("jsonnet-guestbook", &env.git.git_url("jsonnet"), "guestbook", ns, true);
    manifest["spec"]["source"]["directory"] = json!({"jsonnet": {"tlas": [
        {"name": "name", "value": "guestbook-ui"},
        {"name": "type", "value": "ClusterIP"},
        {"name": "replicas", "value": "2", "code": true},
    ]}});
    env.create_app(manifest).await?;
    let app = env
        .wait_app(
            "jsonnet-guestbook",
            "Synced and Healthy",
            Duration::from_secs(90),
            synced_healthy,
        )
        .await?;
    let resources: Vec<String> = app
        .status
        .as_ref()
        .map(|s| s.resources.iter().map(|r| format!("{}/{}", r.kind, r.name)).collect())
        .unwrap_or_default();
    assert_eq!(resources.len(), 2, "{resources:?}");
    assert!(resources.contains(&"Service/guestbook-ui".to_string()), "{resources:?}");
    assert!(
        resources.contains(&"Deployment/guestbook-ui".to_string()),
        "{resources:?}"
    );
    let (v, k, p) = DEPLOY_API;
    let deploy = env
        .get(v, k, p, ns, "guestbook-ui")
        .await?
        .expect("the Deployment exists");
    assert_eq!(deploy.pointer("/spec/replicas"), Some(&json!(2)), "the TLA reached it");
    let svc = env
        .get("v1", "Service", "services", ns, "guestbook-ui")
        .await?
        .expect("the Service exists");
    assert_eq!(svc.pointer("/spec/type"), Some(&json!("ClusterIP")));
    Ok(())
}

const SETTINGS: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: blue}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_that_became_empty_keeps_its_resources_unless_allow_empty() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    let ns = "empty-source-e2e";
    env.git.create_repo("emptied")?;
    env.git.commit(
        "emptied",
        "main",
        &[("app/settings.yaml", Some(SETTINGS))],
        "one ConfigMap",
    )?;
    env.create_app(app("emptied", &env.git.git_url("emptied"), "app", ns, true))
        .await?;
    env.wait_app("emptied", "Synced and Healthy", Duration::from_secs(90), synced_healthy)
        .await?;
    let (cv, ck, cp) = CM_API;

    // A commit deletes every manifest and leaves a README: a ComparisonError naming the path and the
    // skipped file; the ConfigMap stays.
    let emptied = env.git.commit(
        "emptied",
        "main",
        &[
            ("app/settings.yaml", None),
            ("app/README.md", Some("# moved elsewhere\n")),
        ],
        "delete the manifests",
    )?;
    env.refresh("emptied").await?;
    let app = env
        .wait_app(
            "emptied",
            "ComparisonError for an empty source",
            Duration::from_secs(30),
            |a| condition(a, "ComparisonError").is_some_and(|m| m.contains("rendered no objects")),
        )
        .await?;
    let message = condition(&app, "ComparisonError").unwrap_or_default();
    assert!(
        message.contains("path 'app'") && message.contains("README.md") && message.contains("allowEmpty"),
        "{message}"
    );
    assert!(
        env.get(cv, ck, cp, ns, "settings").await?.is_some(),
        "nothing is pruned from an empty render"
    );
    assert_ne!(sync_of(&app), "Synced", "an empty render is not reported as in sync");

    // Empty on purpose: the automated sync prunes it, as before.
    let mut manifest = app_manifest("emptied", &env);
    manifest["spec"]["syncPolicy"]["automated"]["allowEmpty"] = json!(true);
    env.create_app(manifest).await?;
    env.wait_app(
        "emptied",
        "Synced at the empty revision",
        Duration::from_secs(60),
        |a| {
            sync_of(a) == "Synced"
                && a.status
                    .as_ref()
                    .and_then(|s| s.sync.as_ref())
                    .is_some_and(|s| s.revision == emptied)
                && condition(a, "ComparisonError").is_none()
        },
    )
    .await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while env.get(cv, ck, cp, ns, "settings").await?.is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "the ConfigMap is pruned with allowEmpty"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

fn app_manifest(name: &str, env: &Env) -> serde_json::Value {
    app(name, &env.git.git_url(name), "app", "empty-source-e2e", true)
}

//! End to end: a field Capstan accepts in its schema (for Argo CD compatibility) but does not support
//! is reported on the Application using it, as an `InvalidSpecError` naming the field, and is never
//! fatal to others: an app-of-apps parent rendering such a child still syncs it and its other children.
//! `ignoreDifferences.jqPathExpressions` and Application sync options Capstan cannot honour
//! (`Validate=false`) are refused the same way, never accepted and ignored.

mod support;

use std::time::Duration;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_child_with_a_plugin_source_is_refused_and_its_siblings_sync() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("plugins")?;
    let url = env.git.git_url("plugins");
    let ns = &env.ns;
    let child = |name: &str, extra: &str| {
        format!(
            "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  source: {{repoURL: '{url}', targetRevision: main, path: {name}{extra}}}\n  destination: {{server: 'https://kubernetes.default.svc', namespace: {name}}}\n  syncPolicy: {{automated: {{prune: true, selfHeal: true}}, syncOptions: [CreateNamespace=true]}}\n"
        )
    };
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {a: b}\n";
    env.git.commit(
        "plugins",
        "main",
        &[
            ("root/good.yaml", Some(&child("plugin-good", ""))),
            (
                "root/bad.yaml",
                Some(&child(
                    "plugin-bad",
                    ", plugin: {name: vault-injector, env: [{name: A, value: b}]}",
                )),
            ),
            ("plugin-good/cm.yaml", Some(cm)),
            ("plugin-bad/cm.yaml", Some(cm)),
        ],
        "apps",
    )?;
    env.create_app(app("plugin-root", &url, "root", &env.ns, true)).await?;

    let root = env
        .wait_app("plugin-root", "parent synced", Duration::from_secs(90), |a| {
            op_phase(a) == "Succeeded" && sync_of(a) == "Synced"
        })
        .await?;
    assert_eq!(condition(&root, "InvalidSpecError"), None);
    env.wait_app(
        "plugin-good",
        "good child synced",
        Duration::from_secs(90),
        synced_healthy,
    )
    .await?;
    let (v, k, p) = CM_API;
    assert!(env.get(v, k, p, "plugin-good", "settings").await?.is_some());

    let bad = env
        .wait_app("plugin-bad", "bad child refused", Duration::from_secs(60), |a| {
            condition(a, "InvalidSpecError").is_some()
        })
        .await?;
    let message = condition(&bad, "InvalidSpecError").unwrap_or_default();
    assert!(
        message.contains("spec.source.plugin is not supported by Capstan"),
        "{message}"
    );
    // The field was kept by the schema (not pruned), and nothing of the bad child was deployed.
    let spec_plugin = bad.spec.source.plugin.clone();
    assert!(spec_plugin.is_some(), "the API server kept spec.source.plugin");
    assert!(env.get(v, k, p, "plugin-bad", "settings").await?.is_none());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn jq_path_expressions_are_refused_not_ignored() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("ignores")?;
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {a: b}\n";
    env.git.commit("ignores", "main", &[("app/cm.yaml", Some(cm))], "cm")?;
    let url = env.git.git_url("ignores");
    for (name, field, rule) in [(
        "ignore-jq",
        "spec.ignoreDifferences[0].jqPathExpressions",
        serde_json::json!({"group": "apps", "kind": "Deployment", "jqPathExpressions": [".spec.replicas"]}),
    )] {
        let mut manifest = app(name, &url, "app", name, true);
        manifest["spec"]["ignoreDifferences"] = serde_json::json!([rule]);
        env.create_app(manifest).await?;
        let refused = env
            .wait_app(name, "refused", Duration::from_secs(60), |a| {
                condition(a, "InvalidSpecError").is_some()
            })
            .await?;
        let message = condition(&refused, "InvalidSpecError").unwrap_or_default();
        assert!(
            message.contains(&format!("{field} is not supported by Capstan")),
            "{message}"
        );
        let (v, k, p) = CM_API;
        assert!(
            env.get(v, k, p, name, "settings").await?.is_none(),
            "{name} was not synced"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sync_option_capstan_cannot_honour_is_refused_not_ignored() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("options")?;
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {a: b}\n";
    env.git.commit("options", "main", &[("app/cm.yaml", Some(cm))], "cm")?;
    let mut manifest = app("options", &env.git.git_url("options"), "app", "options", true);
    manifest["spec"]["syncPolicy"]["syncOptions"] = serde_json::json!(["CreateNamespace=true", "Validate=false"]);
    env.create_app(manifest).await?;
    let refused = env
        .wait_app("options", "refused", Duration::from_secs(60), |a| {
            condition(a, "InvalidSpecError").is_some()
        })
        .await?;
    let message = condition(&refused, "InvalidSpecError").unwrap_or_default();
    assert!(
        message.contains("spec.syncPolicy.syncOptions[1] \"Validate=false\" is not supported by Capstan"),
        "{message}"
    );
    let (v, k, p) = CM_API;
    assert!(env.get(v, k, p, "options", "settings").await?.is_none());
    Ok(())
}

//! A commit that changes what runs and adds an object the API server rejects: nothing is applied,
//! the SyncFail hooks run, and the failure names the rejected object. A field the kind's schema does
//! not declare (a typo, an Argo CD field Capstan's Application lacks) is refused naming it, never
//! dropped.

mod support;

use std::time::Duration;

use support::*;

const KEEP_V1: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: keep}\ndata: {version: one}\n";
const KEEP_V2: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: keep}\ndata: {version: two}\n";
const FRESH: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: fresh}\ndata: {a: b}\n";
/// A number where the API server wants a string: refused (400) when the object is created.
const BAD: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bad}\ndata: {count: 5}\n";
const ON_FAILURE: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: sync-failed\n  annotations: {capstan.dev/hook: SyncFail}\ndata: {note: cleanup ran}\n";

fn synced_at(sha: &str) -> impl Fn(&capstan_api::Application) -> bool + '_ {
    move |a| {
        a.status.as_ref().is_some_and(|s| {
            s.operation_state
                .as_ref()
                .is_some_and(|o| o.phase == "Succeeded" && o.revision == sha)
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rejected_new_object_stops_the_sync_before_anything_running_changes() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("validate")?;
    let first = env.git.commit(
        "validate",
        "main",
        &[
            ("app/keep.yaml", Some(KEEP_V1)),
            ("app/on-failure.yaml", Some(ON_FAILURE)),
        ],
        "v1",
    )?;
    env.create_app(app("validate", &env.git.git_url("validate"), "app", "validate", false))
        .await?;
    env.wait_app("validate", "OutOfSync", Duration::from_secs(60), |a| {
        sync_of(a) == "OutOfSync"
    })
    .await?;
    env.request(
        "validate",
        serde_json::json!({"sync": {}, "initiatedBy": "test", "id": "first"}),
    )
    .await?;
    env.wait_app("validate", "first sync", Duration::from_secs(60), synced_at(&first))
        .await?;
    let (v, k, p) = CM_API;
    let before = env.get(v, k, p, "validate", "keep").await?.expect("keep exists");

    // One commit changes `keep`, adds a good object and one the API server refuses.
    let second = env.git.commit(
        "validate",
        "main",
        &[
            ("app/keep.yaml", Some(KEEP_V2)),
            ("app/fresh.yaml", Some(FRESH)),
            ("app/bad.yaml", Some(BAD)),
        ],
        "v2 with a bad object",
    )?;
    env.refresh("validate").await?;
    env.wait_app(
        "validate",
        "OutOfSync at the second commit",
        Duration::from_secs(60),
        |a| {
            sync_of(a) == "OutOfSync"
                && a.status
                    .as_ref()
                    .and_then(|s| s.sync.as_ref())
                    .is_some_and(|s| s.revision == second)
        },
    )
    .await?;
    env.request(
        "validate",
        serde_json::json!({"sync": {}, "initiatedBy": "test", "id": "second"}),
    )
    .await?;
    let failed = env
        .wait_app("validate", "the sync fails", Duration::from_secs(60), |a| {
            op_phase(a) == "Failed"
                && a.status
                    .as_ref()
                    .and_then(|s| s.operation_state.as_ref())
                    .is_some_and(|o| o.revision == second)
        })
        .await?;
    let message = op_message(&failed);
    assert!(
        message.contains("ConfigMap") && message.contains("bad"),
        "names the object: {message}"
    );

    // Nothing that ran was changed, nothing new was created, and the SyncFail hook ran.
    let after = env.get(v, k, p, "validate", "keep").await?.expect("keep still exists");
    assert_eq!(
        after.pointer("/data/version"),
        Some(&serde_json::json!("one")),
        "keep unchanged"
    );
    assert_eq!(
        after.pointer("/metadata/resourceVersion"),
        before.pointer("/metadata/resourceVersion"),
        "keep was not written"
    );
    assert!(
        env.get(v, k, p, "validate", "fresh").await?.is_none(),
        "no new object was created"
    );
    assert!(env.get(v, k, p, "validate", "bad").await?.is_none());
    let hook = env.get(v, k, p, "validate", "sync-failed").await?;
    assert!(
        hook.is_some(),
        "the SyncFail hook ran for a sync refused before applying"
    );
    Ok(())
}

/// A Deployment with a misspelt field (`replica`) and a child Application with an Argo CD field
/// Capstan's Application does not have (`helm.skipCrds`).
const TYPO: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: typo}\nspec:\n  replica: 3\n  selector: {matchLabels: {app: typo}}\n  template:\n    metadata: {labels: {app: typo}}\n    spec: {containers: [{name: c, image: busybox}]}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unknown_fields_are_refused_naming_them_not_dropped() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("unknown-fields")?;
    let url = env.git.git_url("unknown-fields");
    let child = format!(
        "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata: {{name: skip-crds, namespace: {ns}}}\nspec:\n  source: {{repoURL: '{url}', targetRevision: main, path: chart, helm: {{skipCrds: true}}}}\n  destination: {{server: 'https://kubernetes.default.svc', namespace: skip-crds}}\n",
        ns = env.ns
    );
    env.git.commit(
        "unknown-fields",
        "main",
        &[("typo/deploy.yaml", Some(TYPO)), ("parent/child.yaml", Some(&child))],
        "unknown fields",
    )?;
    // The refusal comes from the comparison's dry run (an object that exists) or from the apply (a new
    // one); either way it names the field, and the object is not written without it.
    let refusal = |a: &capstan_api::Application| {
        condition(a, "ComparisonError").or_else(|| (op_phase(a) == "Failed").then(|| op_message(a)))
    };
    for (name, path, field) in [
        ("typo", "typo", ".spec.replica"),
        ("parent-of-skip-crds", "parent", "spec.source.helm.skipCrds"),
    ] {
        env.create_app(app(name, &url, path, "unknown-fields", true)).await?;
        let refused = env
            .wait_app(name, "refused naming the field", Duration::from_secs(60), |a| {
                refusal(a).is_some()
            })
            .await?;
        let message = refusal(&refused).unwrap_or_default();
        assert!(message.contains(field), "{name}: {message}");
    }
    let (v, k, p) = DEPLOY_API;
    assert!(env.get(v, k, p, "unknown-fields", "typo").await?.is_none());
    // Never created with the field dropped (server-side apply with strict field validation).
    assert!(
        env.get(
            "capstan.dev/v1alpha1",
            "Application",
            "applications",
            &env.ns,
            "skip-crds"
        )
        .await?
        .is_none(),
        "the child Application was created with its unknown field dropped"
    );
    Ok(())
}

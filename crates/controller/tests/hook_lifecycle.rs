//! End to end: hooks as production charts use them. A PreSync Job hook runs as a ServiceAccount that
//! is itself a PreSync hook of a lower weight, both `HookSucceeded`: the ServiceAccount (and its Role
//! and RoleBinding) must outlive the Job, so hooks are deleted only once the operation has succeeded.
//! A hook whose Pods the API server refuses says why in the operation's message, and an operation
//! longer than `spec.syncPolicy.syncTimeout` fails (and is retried per `retry`).

mod support;

use std::time::Duration;

use capstan_api::status::ResultCode;
use support::*;

const SA_API: (&str, &str, &str) = ("v1", "ServiceAccount", "serviceaccounts");

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hook_succeeded_rbac_hooks_outlive_the_job_that_runs_as_them() -> anyhow::Result<()> {
    // Before the fix the ServiceAccount was deleted as soon as it was applied and the Job's Pods were
    // refused until the wave timed out.
    let env = Env::shared_with(Duration::from_secs(60)).await?;
    env.git.create_repo("hookrbac")?;
    let hook =
        "{capstan.dev/hook: PreSync, capstan.dev/hook-delete-policy: HookSucceeded, capstan.dev/sync-wave: \"-1\"}";
    let manifests = format!(
        r#"
apiVersion: v1
kind: ServiceAccount
metadata: {{name: runner, annotations: {hook}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: runner, annotations: {hook}}}
rules: [{{apiGroups: [""], resources: [configmaps], verbs: [get]}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: runner, annotations: {hook}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: runner}}
subjects: [{{kind: ServiceAccount, name: runner}}]
---
apiVersion: batch/v1
kind: Job
metadata:
  name: certgen
  annotations: {{capstan.dev/hook: PreSync, argocd.argoproj.io/hook-delete-policy: HookSucceeded}}
spec:
  backoffLimit: 0
  template:
    spec: {{serviceAccountName: runner, restartPolicy: Never, containers: [{{name: c, image: x}}]}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: settings}}
data: {{a: b}}
"#
    );
    env.git
        .commit("hookrbac", "main", &[("app/all.yaml", Some(&manifests))], "hooks")?;
    env.create_app(app("hookrbac", &env.git.git_url("hookrbac"), "app", "hookrbac", true))
        .await?;
    let done = env
        .wait_app("hookrbac", "operation ended", Duration::from_secs(120), |a| {
            matches!(op_phase(a).as_str(), "Succeeded" | "Failed" | "Error")
        })
        .await?;
    assert_eq!(op_phase(&done), "Succeeded", "{}", op_message(&done));
    let (v, k, p) = CM_API;
    assert!(env.get(v, k, p, "hookrbac", "settings").await?.is_some());
    let results = done
        .status
        .and_then(|s| s.operation_state)
        .map(|o| o.resources)
        .unwrap_or_default();
    for kind in ["ServiceAccount", "Role", "RoleBinding", "Job"] {
        assert!(
            results
                .iter()
                .any(|r| r.kind == kind && r.sync_phase == "PreSync" && r.status == ResultCode::Synced),
            "{kind} hook completed: {results:?}"
        );
    }
    // The operation succeeded: now every HookSucceeded hook is deleted.
    let (v, k, p) = SA_API;
    let sa = env.api(v, k, p, Some("hookrbac"));
    let (v, k, p) = JOB_API;
    let jobs = env.api(v, k, p, Some("hookrbac"));
    eventually("the hooks are deleted", Duration::from_secs(30), || async {
        let job_gone = match jobs.get_opt("certgen").await? {
            None => true,
            Some(job) => job.metadata.deletion_timestamp.is_some(),
        };
        Ok(job_gone && sa.get_opt("runner").await?.is_none())
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hook_whose_pods_are_refused_says_why() -> anyhow::Result<()> {
    let env = Env::shared_with(Duration::from_secs(20)).await?;
    env.git.create_repo("hookwhy")?;
    let manifests = r#"
apiVersion: batch/v1
kind: Job
metadata: {name: migrate, annotations: {capstan.dev/hook: PreSync}}
spec:
  backoffLimit: 0
  template:
    spec: {serviceAccountName: nobody, restartPolicy: Never, containers: [{name: c, image: x}]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {a: b}
"#;
    env.git
        .commit("hookwhy", "main", &[("app/all.yaml", Some(manifests))], "hooks")?;
    env.create_app(app("hookwhy", &env.git.git_url("hookwhy"), "app", "hookwhy", false))
        .await?;
    env.request("hookwhy", serde_json::json!({"sync": {}})).await?;
    let failed = env
        .wait_app("hookwhy", "operation failed", Duration::from_secs(90), |a| {
            op_phase(a) == "Failed"
        })
        .await?;
    let message = op_message(&failed);
    assert!(message.contains("did not complete within 20 s"), "{message}");
    assert!(
        message.contains("FailedCreate") && message.contains("serviceaccount \"nobody\" not found"),
        "{message}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operation_longer_than_sync_timeout_fails_and_is_retried() -> anyhow::Result<()> {
    // The wave timeout (120 s) would end it much later: only syncTimeout stops it within the test.
    let env = Env::shared_with(Duration::from_secs(120)).await?;
    env.git.create_repo("synctimeout")?;
    let manifests = r#"
apiVersion: batch/v1
kind: Job
metadata: {name: stuck, annotations: {capstan.dev/hook: PreSync}}
spec:
  backoffLimit: 0
  template:
    spec: {serviceAccountName: nobody, restartPolicy: Never, containers: [{name: c, image: x}]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {a: b}
"#;
    env.git
        .commit("synctimeout", "main", &[("app/all.yaml", Some(manifests))], "hooks")?;
    let mut manifest = app(
        "synctimeout",
        &env.git.git_url("synctimeout"),
        "app",
        "synctimeout",
        true,
    );
    manifest["spec"]["syncPolicy"]["syncTimeout"] = serde_json::json!("6s");
    manifest["spec"]["syncPolicy"]["retry"] = serde_json::json!({"limit": 1, "backoff": {"duration": "1s"}});
    env.create_app(manifest).await?;
    let retried = env
        .wait_app(
            "synctimeout",
            "retried operation failed",
            Duration::from_secs(60),
            |a| {
                op_phase(a) == "Failed"
                    && a.status
                        .as_ref()
                        .and_then(|s| s.operation_state.as_ref())
                        .is_some_and(|o| o.retry_count >= 1)
            },
        )
        .await?;
    let message = op_message(&retried);
    assert!(
        message.contains("operation timed out after 6s (spec.syncPolicy.syncTimeout)"),
        "{message}"
    );
    assert!(message.contains("stuck"), "names what it was waiting for: {message}");
    let (v, k, p) = CM_API;
    assert!(env.get(v, k, p, "synctimeout", "settings").await?.is_none());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sync_timeout_that_is_not_a_duration_is_refused() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("badtimeout")?;
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {a: b}\n";
    env.git
        .commit("badtimeout", "main", &[("app/cm.yaml", Some(cm))], "cm")?;
    let mut manifest = app("badtimeout", &env.git.git_url("badtimeout"), "app", "badtimeout", true);
    manifest["spec"]["syncPolicy"]["syncTimeout"] = serde_json::json!("soon");
    env.create_app(manifest).await?;
    let refused = env
        .wait_app("badtimeout", "refused", Duration::from_secs(60), |a| {
            condition(a, "InvalidSpecError").is_some()
        })
        .await?;
    let message = condition(&refused, "InvalidSpecError").unwrap_or_default();
    assert!(
        message.contains("spec.syncPolicy.syncTimeout \"soon\" is not a duration"),
        "{message}"
    );
    Ok(())
}

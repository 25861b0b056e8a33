//! End to end: multi-source Applications (`spec.sources`) — a chart in one Git repository with its
//! values in another (`ref` + `$ref/…` value files), each source's revision reported and recorded in
//! history, a rollback to an entry restoring every source, and a `$ref` naming no source refused
//! without touching the cluster.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;

const CHART: &str = "apiVersion: v2\nname: hello\nversion: 0.1.0\n";
const TEMPLATE: &str = r#"apiVersion: v1
kind: ConfigMap
metadata: {name: {{ .Release.Name }}-config}
data:
  message: {{ .Values.message | quote }}
  size: {{ .Values.size | quote }}
"#;

fn multi_source_app(name: &str, chart_repo: &str, values_repo: &str, value_file: &str, namespace: &str) -> Value {
    json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": "capstan"},
        "spec": {
            "sources": [
                {"repoURL": chart_repo, "targetRevision": "main", "path": "hello",
                 "helm": {"valueFiles": ["values-small.yaml", value_file]}},
                {"repoURL": values_repo, "targetRevision": "main", "ref": "values"},
            ],
            "destination": {"server": "https://kubernetes.default.svc", "namespace": namespace},
            "syncPolicy": {"syncOptions": ["CreateNamespace=true"]},
        }
    })
}

fn revisions(app: &capstan_api::Application) -> Vec<String> {
    app.status
        .as_ref()
        .and_then(|s| s.sync.as_ref())
        .map(|s| s.revisions.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_chart_with_values_from_another_repository_syncs_records_both_revisions_and_rolls_back() -> anyhow::Result<()>
{
    let env = Env::shared().await?;
    env.git.create_repo("ms-chart")?;
    env.git.create_repo("ms-values")?;
    let chart_sha = env.git.commit(
        "ms-chart",
        "main",
        &[
            ("hello/Chart.yaml", Some(CHART)),
            ("hello/values.yaml", Some("message: chart default\nsize: large\n")),
            ("hello/values-small.yaml", Some("size: small\n")),
            ("hello/templates/cm.yaml", Some(TEMPLATE)),
        ],
        "chart",
    )?;
    let v1 = env.git.commit(
        "ms-values",
        "main",
        &[("envs/prod/values.yaml", Some("message: from the values repository\n"))],
        "v1",
    )?;
    let (chart_url, values_url) = (env.git.git_url("ms-chart"), env.git.git_url("ms-values"));
    env.create_app(multi_source_app(
        "multi",
        &chart_url,
        &values_url,
        "$values/envs/prod/values.yaml",
        "multi",
    ))
    .await?;

    // Compared at both sources' revisions, each reported in order; the combined revision names both.
    let compared = env
        .wait_app("multi", "OutOfSync at both revisions", Duration::from_secs(60), |a| {
            sync_of(a) == "OutOfSync" && revisions(a).len() == 2
        })
        .await?;
    assert_eq!(revisions(&compared), vec![chart_sha.clone(), v1.clone()]);
    assert_eq!(
        compared
            .status
            .as_ref()
            .and_then(|s| s.sync.as_ref())
            .map(|s| s.revision.clone()),
        Some(format!("{chart_sha},{v1}"))
    );

    env.request("multi", json!({"sync": {}, "initiatedBy": "test"})).await?;
    let synced = env
        .wait_app("multi", "synced", Duration::from_secs(90), |a| {
            synced_healthy(a) && op_phase(a) == "Succeeded"
        })
        .await?;
    let (cv, ck, cp) = CM_API;
    let cm = env.get(cv, ck, cp, "multi", "multi-config").await?.expect("configmap");
    assert_eq!(
        cm.pointer("/data/message"),
        Some(&json!("from the values repository")),
        "$values/… read from the ref source: {cm}"
    );
    assert_eq!(
        cm.pointer("/data/size"),
        Some(&json!("small")),
        "a plain value file still comes from the chart's repository"
    );
    let op = synced
        .status
        .as_ref()
        .and_then(|s| s.operation_state.as_ref())
        .expect("operation");
    assert_eq!(
        op.revisions,
        vec![chart_sha.clone(), v1.clone()],
        "the operation records each source"
    );

    // A commit to the values repository alone is a new revision of the Application.
    let v2 = env.git.commit(
        "ms-values",
        "main",
        &[("envs/prod/values.yaml", Some("message: second values\n"))],
        "v2",
    )?;
    env.refresh("multi").await?;
    env.wait_app("multi", "OutOfSync at the new values", Duration::from_secs(30), |a| {
        sync_of(a) == "OutOfSync" && revisions(a) == vec![chart_sha.clone(), v2.clone()]
    })
    .await?;
    env.request("multi", json!({"sync": {}, "initiatedBy": "test-2"}))
        .await?;
    let synced = env
        .wait_app("multi", "synced v2", Duration::from_secs(60), |a| {
            synced_healthy(a) && a.status.as_ref().is_some_and(|s| s.history.len() == 2)
        })
        .await?;
    let cm = env.get(cv, ck, cp, "multi", "multi-config").await?.expect("configmap");
    assert_eq!(cm.pointer("/data/message"), Some(&json!("second values")));
    let history = synced.status.map(|s| s.history).unwrap_or_default();
    assert_eq!(history[0].revisions, vec![chart_sha.clone(), v1.clone()]);
    assert_eq!(history[1].revisions, vec![chart_sha.clone(), v2.clone()]);
    assert_eq!(history[1].sources.len(), 2, "history keeps every source");
    assert_eq!(history[1].sources[1].ref_name, "values");

    // A rollback to the first entry resolves every source at its recorded revision.
    env.request(
        "multi",
        json!({"rollback": {"id": history[0].id}, "initiatedBy": "test-3"}),
    )
    .await?;
    env.wait_app("multi", "rolled back", Duration::from_secs(60), |a| {
        op_phase(a) == "Succeeded" && a.status.as_ref().is_some_and(|s| s.history.len() == 3)
    })
    .await?;
    let cm = env.get(cv, ck, cp, "multi", "multi-config").await?.expect("configmap");
    assert_eq!(
        cm.pointer("/data/message"),
        Some(&json!("from the values repository")),
        "the rollback restored the values of v1"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_value_file_naming_no_source_is_a_comparison_error_and_changes_nothing() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("ms-bad-chart")?;
    env.git.create_repo("ms-bad-values")?;
    env.git.commit(
        "ms-bad-chart",
        "main",
        &[
            ("hello/Chart.yaml", Some(CHART)),
            ("hello/values.yaml", Some("message: default\nsize: large\n")),
            ("hello/values-small.yaml", Some("size: small\n")),
            ("hello/templates/cm.yaml", Some(TEMPLATE)),
        ],
        "chart",
    )?;
    env.git
        .commit("ms-bad-values", "main", &[("prod.yaml", Some("message: x\n"))], "v")?;
    let (chart_url, values_url) = (env.git.git_url("ms-bad-chart"), env.git.git_url("ms-bad-values"));

    // Synced once with good values, so there is something on the cluster that must stay.
    let mut good = multi_source_app("badref", &chart_url, &values_url, "$values/prod.yaml", "badref");
    good["spec"]["syncPolicy"]["automated"] = json!({"prune": true, "selfHeal": true});
    env.create_app(good.clone()).await?;
    env.wait_app("badref", "synced", Duration::from_secs(90), synced_healthy)
        .await?;

    let mut bad = good.clone();
    bad["spec"]["sources"][0]["helm"]["valueFiles"] = json!(["$nosuch/prod.yaml"]);
    env.create_app(bad).await?;
    let refused = env
        .wait_app("badref", "comparison error", Duration::from_secs(30), |a| {
            condition(a, "ComparisonError").is_some()
        })
        .await?;
    let message = condition(&refused, "ComparisonError").unwrap_or_default();
    assert!(
        message.contains("$nosuch/prod.yaml") && message.contains("ref: nosuch") && message.contains("spec.sources[0]"),
        "the message names the entry, the missing ref and the source: {message}"
    );
    // The positive signal that the controller looked at the broken spec, then: nothing changed.
    let looked = env.refresh_and_wait("badref").await?;
    assert!(condition(&looked, "ComparisonError").is_some());
    let (cv, ck, cp) = CM_API;
    let cm = env.get(cv, ck, cp, "badref", "badref-config").await?;
    assert_eq!(
        cm.and_then(|c| c.pointer("/data/message").cloned()),
        Some(json!("x")),
        "the running ConfigMap is neither pruned nor changed"
    );
    Ok(())
}

/// A source with `ref` and neither `path` nor `chart` is not rendered. Where that leaves nothing to
/// render (a single `spec.source` given a `ref`, or every source a ref source), the Application is
/// refused by name instead of compared against nothing — which would make every deployed object one
/// to prune. Two sources with the same `ref` are refused too (`$NAME/…` would be ambiguous).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sources_that_render_nothing_or_share_a_ref_are_refused_and_change_nothing() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("ms-only-ref")?;
    env.git.commit(
        "ms-only-ref",
        "main",
        &[(
            "cm.yaml",
            Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kept}\ndata: {a: b}\n"),
        )],
        "one ConfigMap at the root",
    )?;
    let url = env.git.git_url("ms-only-ref");
    let mut app = json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
        "metadata": {"name": "onlyref", "namespace": "capstan"},
        "spec": {
            "source": {"repoURL": url, "targetRevision": "main"},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": "onlyref"},
            "syncPolicy": {"syncOptions": ["CreateNamespace=true"],
                           "automated": {"prune": true, "selfHeal": true, "allowEmpty": true}},
        }
    });
    env.create_app(app.clone()).await?;
    env.wait_app("onlyref", "synced", Duration::from_secs(90), synced_healthy)
        .await?;

    app["spec"]["source"]["ref"] = json!("values");
    env.create_app(app.clone()).await?;
    let refused = env
        .wait_app("onlyref", "invalid spec", Duration::from_secs(30), |a| {
            condition(a, "InvalidSpecError").is_some()
        })
        .await?;
    let message = condition(&refused, "InvalidSpecError").unwrap_or_default();
    assert!(
        message.contains("spec.source") && message.contains("ref"),
        "the message names the source and its ref: {message}"
    );

    if let Some(spec) = app["spec"].as_object_mut() {
        // Left out of the apply, so the field manager's spec.source goes.
        spec.remove("source");
    }
    app["spec"]["sources"] = json!([
        {"repoURL": url, "targetRevision": "main", "path": ".", "helm": {"valueFiles": ["$v/x.yaml"]}},
        {"repoURL": url, "targetRevision": "main", "ref": "v"},
        {"repoURL": url, "targetRevision": "main", "ref": "v"},
    ]);
    env.create_app(app.clone()).await?;
    let refused = env
        .wait_app("onlyref", "duplicate ref", Duration::from_secs(30), |a| {
            condition(a, "InvalidSpecError").is_some_and(|m| m.contains("spec.sources[2]"))
        })
        .await?;
    let message = condition(&refused, "InvalidSpecError").unwrap_or_default();
    assert!(message.contains("spec.sources[1]"), "both sources are named: {message}");

    // A ref that a `$NAME/…` value file could not name plainly.
    app["spec"]["sources"] = json!([
        {"repoURL": url, "targetRevision": "main", "path": "."},
        {"repoURL": url, "targetRevision": "main", "ref": "v/../x"},
    ]);
    env.create_app(app.clone()).await?;
    let refused = env
        .wait_app("onlyref", "bad ref", Duration::from_secs(30), |a| {
            condition(a, "InvalidSpecError").is_some_and(|m| m.contains("not a plain name"))
        })
        .await?;
    let message = condition(&refused, "InvalidSpecError").unwrap_or_default();
    assert!(message.contains("spec.sources[1].ref"), "names the source: {message}");

    // More sources than one Application may fetch on every pass.
    let many: Vec<_> = (0..21)
        .map(|_| json!({"repoURL": url, "targetRevision": "main", "path": "."}))
        .collect();
    app["spec"]["sources"] = json!(many);
    env.create_app(app).await?;
    let refused = env
        .wait_app("onlyref", "too many sources", Duration::from_secs(30), |a| {
            condition(a, "InvalidSpecError").is_some_and(|m| m.contains("21 entries"))
        })
        .await?;
    let message = condition(&refused, "InvalidSpecError").unwrap_or_default();
    assert!(message.contains("at most 20"), "{message}");

    let (cv, ck, cp) = CM_API;
    assert!(
        env.get(cv, ck, cp, "onlyref", "kept").await?.is_some(),
        "the deployed ConfigMap is not pruned"
    );
    Ok(())
}

/// A rollback checks the sources of its history entry against the project as it is now: an entry
/// whose ref source's repository the project no longer permits is refused by name, and the cluster
/// keeps what the newer sync deployed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rollback_to_sources_the_project_no_longer_permits_is_refused() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("ms-rb-chart")?;
    env.git.create_repo("ms-rb-values")?;
    env.git.commit(
        "ms-rb-chart",
        "main",
        &[
            ("hello/Chart.yaml", Some(CHART)),
            ("hello/values.yaml", Some("message: chart default\nsize: large\n")),
            ("hello/values-small.yaml", Some("size: small\n")),
            ("hello/templates/cm.yaml", Some(TEMPLATE)),
        ],
        "chart",
    )?;
    env.git.commit(
        "ms-rb-values",
        "main",
        &[("prod.yaml", Some("message: team-b values\n"))],
        "v",
    )?;
    let (chart_url, values_url) = (env.git.git_url("ms-rb-chart"), env.git.git_url("ms-rb-values"));
    let ns = env.ns.clone();
    let project = |repos: Vec<&str>| json!({"sourceRepos": repos, "destinations": [{"server": "*", "namespace": ns}]});
    env.apply_project("ms-rb", project(vec![&chart_url, &values_url]))
        .await?;

    let mut app = multi_source_app("rb", &chart_url, &values_url, "$values/prod.yaml", &env.ns);
    app["spec"]["project"] = json!("ms-rb");
    app["spec"]["syncPolicy"] = json!({});
    env.create_app(app.clone()).await?;
    env.wait_app("rb", "compared", Duration::from_secs(60), |a| revisions(a).len() == 2)
        .await?;
    env.request("rb", json!({"sync": {}, "initiatedBy": "test"})).await?;
    env.wait_app("rb", "synced from both", Duration::from_secs(90), |a| {
        op_phase(a) == "Succeeded" && a.status.as_ref().is_some_and(|s| s.history.len() == 1)
    })
    .await?;

    // The values move into the chart's repository; the project then stops permitting the other one.
    app["spec"]["sources"] = json!([{"repoURL": chart_url, "targetRevision": "main", "path": "hello"}]);
    env.create_app(app).await?;
    env.wait_app("rb", "compared with one source", Duration::from_secs(60), |a| {
        revisions(a).len() == 1 && sync_of(a) == "OutOfSync"
    })
    .await?;
    env.request("rb", json!({"sync": {}, "initiatedBy": "test-2"})).await?;
    let synced = env
        .wait_app("rb", "synced from one", Duration::from_secs(60), |a| {
            op_phase(a) == "Succeeded" && a.status.as_ref().is_some_and(|s| s.history.len() == 2)
        })
        .await?;
    env.apply_project("ms-rb", project(vec![&chart_url])).await?;

    let first = synced.status.map(|s| s.history[0].id).unwrap_or_default();
    env.request("rb", json!({"rollback": {"id": first}, "initiatedBy": "test-3"}))
        .await?;
    let refused = env
        .wait_app("rb", "rollback refused", Duration::from_secs(60), |a| {
            op_phase(a) == "Failed" || op_phase(a) == "Error"
        })
        .await?;
    let message = op_message(&refused);
    assert!(
        message.contains(&values_url) && message.contains("not permitted"),
        "the refusal names the repository: {message}"
    );
    let (cv, ck, cp) = CM_API;
    let cm = env.get(cv, ck, cp, &env.ns, "rb-config").await?.expect("configmap");
    assert_eq!(
        cm.pointer("/data/message"),
        Some(&json!("chart default")),
        "the newer sync's values stay: {cm}"
    );
    Ok(())
}

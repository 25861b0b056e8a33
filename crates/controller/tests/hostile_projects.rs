//! Reads across projects, end to end: an object a team's repository names but its project denies (a
//! ConfigMap in kube-system) is never read from the cluster, so its live state — or even whether it
//! matches — never reaches the Application's status, and the sync is refused.

mod support;

use std::time::Duration;

use capstan_api::status::SyncCode;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use support::*;

/// The cluster's own ConfigMap, exactly as it is live, named in a team's repository, beside the
/// team's own ConfigMap.
const PROBE: &str = r#"apiVersion: v1
kind: ConfigMap
metadata: {name: kubeadm-config, namespace: kube-system}
data: {ClusterConfiguration: "secret-cluster-settings"}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: mine}
data: {a: b}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_object_the_project_denies_is_never_read_from_the_cluster() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    // The cluster's ConfigMap, equal to what the repository says.
    let (v, k, p) = CM_API;
    env.api(v, k, p, Some("kube-system"))
        .patch(
            "kubeadm-config",
            &PatchParams::apply("cluster-admin").force(),
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "kubeadm-config", "namespace": "kube-system"},
                "data": {"ClusterConfiguration": "secret-cluster-settings"},
            })),
        )
        .await?;
    env.apply_project(
        "team-a",
        json!({"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "team-a"}]}),
    )
    .await?;
    env.git.create_repo("probe")?;
    env.git
        .commit("probe", "main", &[("app/all.yaml", Some(PROBE))], "probe")?;
    let mut application = app("probe", &env.git.git_url("probe"), "app", "team-a", false);
    application["spec"]["project"] = json!("team-a");
    env.create_app(application).await?;

    // The controller compared (a positive signal: the resource list names both objects) ...
    let compared = env
        .wait_app("probe", "the comparison", Duration::from_secs(60), |a| {
            a.status.as_ref().is_some_and(|s| {
                s.resources.iter().any(|r| r.name == "kubeadm-config") && s.resources.iter().any(|r| r.name == "mine")
            })
        })
        .await?;
    let status = compared.status.clone().unwrap_or_default();
    let probe = status
        .resources
        .iter()
        .find(|r| r.name == "kubeadm-config")
        .expect("listed");
    // ... without reading the denied object: it is not reported as matching the live one (which
    // it does), nor as healthy.
    assert_eq!(probe.status, SyncCode::OutOfSync, "{probe:?}");
    assert_eq!(
        probe.health.as_ref().map(|h| h.status.as_str()),
        Some("Missing"),
        "the live object was not read: {probe:?}"
    );

    // A sync is refused, naming the rule, and changes nothing.
    env.request("probe", json!({"sync": {}, "initiatedBy": "test", "id": "probe"}))
        .await?;
    let refused = env
        .wait_app("probe", "the sync is refused", Duration::from_secs(60), |a| {
            op_phase(a) == "Failed"
        })
        .await?;
    let message = op_message(&refused);
    assert!(
        message.contains("kubeadm-config") && message.contains("destinations"),
        "{message}"
    );
    let live = env
        .get(v, k, p, "kube-system", "kubeadm-config")
        .await?
        .expect("still there");
    assert!(
        live.pointer("/metadata/labels/capstan.dev~1instance").is_none(),
        "not taken over"
    );
    Ok(())
}

/// A team's repository writing Capstan's RBAC policy (in Capstan's namespace, `capstan` here, the
/// test's own in the test) and creating an Application in a more powerful project.
const ESCALATE: &str = r#"apiVersion: v1
kind: ConfigMap
metadata: {name: capstan-rbac, namespace: capstan}
data:
  policy.yaml: |
    grants: [{role: admin, projects: ["*"], users: [attacker]}]
---
apiVersion: capstan.dev/v1alpha1
kind: Application
metadata: {name: escalate, namespace: team-a}
spec:
  project: platform
  source: {repoURL: 'git://127.0.0.1:9/x.git', path: .}
  destination: {server: 'https://kubernetes.default.svc', namespace: kube-system}
---
apiVersion: capstan.dev/v1alpha1
kind: AppProject
metadata: {name: team-a-unbounded, namespace: team-a}
spec: {sourceRepos: ["*"], destinations: [{server: "*", namespace: "*"}]}
"#;

/// [`ESCALATE`] against the Capstan namespace `ns`.
fn escalate(ns: &str) -> String {
    ESCALATE.replace("namespace: capstan}", &format!("namespace: {ns}}}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wildcards_never_grant_capstans_namespace_or_other_projects() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    for (name, spec) in [
        // As wide as wildcards go.
        (
            "team-a",
            json!({"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}],
                   "clusterResourceWhitelist": [{"group": "*", "kind": "*"}],
                   "namespaceResourceWhitelist": [{"group": "*", "kind": "*"}]}),
        ),
        (
            "platform",
            json!({"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}]}),
        ),
    ] {
        env.apply_project(name, spec).await?;
    }
    env.git.create_repo("escalate")?;
    env.git.commit(
        "escalate",
        "main",
        &[("app/all.yaml", Some(&escalate(&env.ns)))],
        "escalate",
    )?;
    let mut application = app("escalate-root", &env.git.git_url("escalate"), "app", "team-a", true);
    application["spec"]["project"] = json!("team-a");
    env.create_app(application).await?;
    let refused = env
        .wait_app("escalate-root", "the sync is refused", Duration::from_secs(60), |a| {
            op_phase(a) == "Failed"
        })
        .await?;
    let message = op_message(&refused);
    assert!(
        message.contains("ConfigMap/capstan-rbac") && message.contains("Capstan's own"),
        "Capstan's namespace is refused: {message}"
    );
    assert!(
        message.contains("capstan.dev/Application") || message.contains("names project \"platform\""),
        "the child Application is refused: {message}"
    );
    let (v, k, p) = CM_API;
    assert!(
        env.get(v, k, p, &env.ns, "capstan-rbac").await?.is_none(),
        "no policy written"
    );
    let apps_in_team = env.api("capstan.dev/v1alpha1", "Application", "applications", Some("team-a"));
    assert!(
        apps_in_team.get_opt("escalate").await?.is_none(),
        "no Application created"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_can_make_the_implicit_default_project_deny_everything() -> anyhow::Result<()> {
    let mut env = Env::shared().await?;
    env.kill_controller().await;
    env.deny_implicit_default_project = true;
    env.start_controller();
    env.git.create_repo("plain")?;
    env.git.commit(
        "plain",
        "main",
        &[(
            "app/cm.yaml",
            Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {a: b}\n"),
        )],
        "v1",
    )?;
    // No AppProject named default exists: the Application's project permits nothing.
    env.create_app(app("plain", &env.git.git_url("plain"), "app", "plain", true))
        .await?;
    let refused = env
        .wait_app("plain", "a condition", Duration::from_secs(60), |a| {
            condition(a, "InvalidSpecError").is_some() || condition(a, "ComparisonError").is_some()
        })
        .await?;
    let message = condition(&refused, "InvalidSpecError")
        .or_else(|| condition(&refused, "ComparisonError"))
        .unwrap_or_default();
    assert!(
        message.contains("project \"default\"") && message.contains("sourceRepos"),
        "{message}"
    );
    let namespaces = env.api("v1", "Namespace", "namespaces", None);
    assert!(namespaces.get_opt("plain").await?.is_none(), "nothing was applied");
    Ok(())
}

/// An ImageUpdater and a PromotionPipeline a team's repository renders: `PROJECT` is replaced by
/// the project they claim, `NS` by Capstan's namespace.
const WRITERS: &str = r#"apiVersion: capstan.dev/v1alpha1
kind: ImageUpdater
metadata: {name: NAME, namespace: NS}
spec:
  project: PROJECT
  image: 127.0.0.1:9/team-b/api
  policy: {semver: {range: ^1}}
  write: {repoURL: 'git://127.0.0.1:9/team-b.git', path: api.yaml, key: imageTag}
---
apiVersion: capstan.dev/v1alpha1
kind: PromotionPipeline
metadata: {name: NAME, namespace: NS}
spec:
  project: PROJECT
  repoURL: 'git://127.0.0.1:9/team-b.git'
  path: '{service}/{env}.yaml'
  environments: [{name: staging}, {name: production}]
"#;

/// Issue 27: a team granted Capstan's writer kinds in its own namespace may render ImageUpdaters
/// and PromotionPipelines of its own project only — one claiming another team's project (to commit
/// with that project's write permissions) is refused like an Application of another project, and
/// nothing is created; the same objects claiming the team's own project are created.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_team_cannot_render_writers_of_another_project() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    let writers = json!([
        {"group": "capstan.dev", "kind": "ImageUpdater"},
        {"group": "capstan.dev", "kind": "PromotionPipeline"},
    ]);
    env.apply_project(
        "team-a",
        json!({"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": env.ns}],
               "namespaceResourceWhitelist": writers}),
    )
    .await?;
    env.apply_project(
        "team-b",
        json!({"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "team-b"}]}),
    )
    .await?;
    let render = |name: &str, project: &str| {
        WRITERS
            .replace("NAME", name)
            .replace("NS", &env.ns)
            .replace("PROJECT", project)
    };
    env.git.create_repo("writers")?;
    env.git.commit(
        "writers",
        "main",
        &[
            ("theirs/all.yaml", Some(&render("steal", "team-b"))),
            ("ours/all.yaml", Some(&render("own", "team-a"))),
        ],
        "writers",
    )?;
    for (name, path) in [("writers-theirs", "theirs"), ("writers-ours", "ours")] {
        let mut application = app(name, &env.git.git_url("writers"), path, &env.ns, true);
        application["spec"]["project"] = json!("team-a");
        application["spec"]["syncPolicy"]["syncOptions"] = json!([]);
        env.create_app(application).await?;
    }
    let refused = env
        .wait_app("writers-theirs", "the sync is refused", Duration::from_secs(60), |a| {
            op_phase(a) == "Failed"
        })
        .await?;
    let message = op_message(&refused);
    assert!(
        message.contains("ImageUpdater/steal names project \"team-b\"")
            && message.contains("PromotionPipeline/steal names project \"team-b\""),
        "both writers are refused by name: {message}"
    );
    env.wait_app("writers-ours", "synced", Duration::from_secs(60), |a| {
        op_phase(a) == "Succeeded"
    })
    .await?;
    let updaters = env.api("capstan.dev/v1alpha1", "ImageUpdater", "imageupdaters", Some(&env.ns));
    let pipelines = env.api(
        "capstan.dev/v1alpha1",
        "PromotionPipeline",
        "promotionpipelines",
        Some(&env.ns),
    );
    assert!(
        updaters.get_opt("own").await?.is_some(),
        "the team's own updater is created"
    );
    assert!(
        pipelines.get_opt("own").await?.is_some(),
        "the team's own pipeline is created"
    );
    assert!(
        updaters.get_opt("steal").await?.is_none(),
        "no updater of team-b created"
    );
    assert!(
        pipelines.get_opt("steal").await?.is_none(),
        "no pipeline of team-b created"
    );
    Ok(())
}

//! End to end: AppProject rules. A project limits the repositories, destinations and kinds of object
//! its Applications may use; a sync that would break a rule is refused before anything is applied.

mod support;

use std::time::Duration;

use serde_json::json;
use support::*;

const MIXED: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {color: blue}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: team-a-extra}
rules: [{apiGroups: [""], resources: [pods], verbs: [get]}]
"#;

const ESCAPE: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: sneaky, namespace: kube-system}\ndata: {a: b}\n";

const PLAIN: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain}\ndata: {a: b}\n";

fn in_project(mut app: serde_json::Value, project: &str) -> serde_json::Value {
    app["spec"]["project"] = json!(project);
    app
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn project_rules_are_enforced_before_anything_is_applied() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("team")?;
    env.git.create_repo("elsewhere")?;
    env.git.commit(
        "team",
        "main",
        &[
            ("mixed/all.yaml", Some(MIXED)),
            ("plain/all.yaml", Some(PLAIN)),
            ("escape/all.yaml", Some(ESCAPE)),
        ],
        "v1",
    )?;
    env.git
        .commit("elsewhere", "main", &[("plain/all.yaml", Some(PLAIN))], "v1")?;
    let projects = env.api("capstan.dev/v1alpha1", "AppProject", "appprojects", Some(&env.ns));
    let project = json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "AppProject",
        "metadata": {"name": "team-a", "namespace": env.ns},
        "spec": {
            "sourceRepos": [env.git.git_url("team")],
            "destinations": [{"server": "https://kubernetes.default.svc", "namespace": "team-a-*"}],
            "clusterResourceWhitelist": [{"group": "", "kind": "Namespace"}],
            "namespaceResourceBlacklist": [{"group": "", "kind": "Secret"}],
        },
    });
    projects
        .patch(
            "team-a",
            &kube::api::PatchParams::apply("test"),
            &kube::api::Patch::Apply(project),
        )
        .await?;

    // A cluster-scoped kind outside clusterResourceWhitelist: the sync is refused and nothing of it,
    // not even the permitted ConfigMap, is applied.
    env.create_app(in_project(
        app("mixed", &env.git.git_url("team"), "mixed", "team-a-one", false),
        "team-a",
    ))
    .await?;
    let a = env
        .wait_app("mixed", "the violation reported", Duration::from_secs(60), |a| {
            condition(a, "ProjectViolation").is_some()
        })
        .await?;
    let violation = condition(&a, "ProjectViolation").unwrap_or_default();
    assert!(
        violation.contains("ClusterRole/team-a-extra") && violation.contains("clusterResourceWhitelist"),
        "{violation}"
    );
    env.request("mixed", json!({"sync": {"prune": false}})).await?;
    let a = env
        .wait_app("mixed", "the sync refused", Duration::from_secs(60), |a| {
            op_phase(a) == "Failed"
        })
        .await?;
    let message = op_message(&a);
    assert!(
        message.contains("project \"team-a\"") && message.contains("ClusterRole/team-a-extra"),
        "{message}"
    );
    let cm = env
        .get("v1", "ConfigMap", "configmaps", "team-a-one", "settings")
        .await?;
    assert!(
        cm.is_none(),
        "nothing is applied when the project refuses part of a sync"
    );

    // The same project permits a plain ConfigMap in a matching namespace.
    env.create_app(in_project(
        app("plain", &env.git.git_url("team"), "plain", "team-a-two", true),
        "team-a",
    ))
    .await?;
    env.wait_app("plain", "Synced and Healthy", Duration::from_secs(60), synced_healthy)
        .await?;

    // An object naming a namespace outside the project's destinations is refused like the
    // destination itself would be.
    env.create_app(in_project(
        app("escape", &env.git.git_url("team"), "escape", "team-a-five", true),
        "team-a",
    ))
    .await?;
    let a = env
        .wait_app("escape", "the violation reported", Duration::from_secs(60), |a| {
            condition(a, "ProjectViolation").is_some()
        })
        .await?;
    let violation = condition(&a, "ProjectViolation").unwrap_or_default();
    assert!(
        violation.contains("ConfigMap/sneaky") && violation.contains("kube-system"),
        "{violation}"
    );
    assert!(
        env.get("v1", "ConfigMap", "configmaps", "kube-system", "sneaky")
            .await?
            .is_none(),
        "nothing is applied outside the project's namespaces"
    );

    // A destination namespace outside the project's destinations.
    env.create_app(in_project(
        app("wrong-ns", &env.git.git_url("team"), "plain", "kube-system", true),
        "team-a",
    ))
    .await?;
    let a = env
        .wait_app("wrong-ns", "InvalidSpecError", Duration::from_secs(60), |a| {
            condition(a, "InvalidSpecError").is_some()
        })
        .await?;
    let message = condition(&a, "InvalidSpecError").unwrap_or_default();
    assert!(
        message.contains("destinations") && message.contains("kube-system"),
        "{message}"
    );

    // A repository outside sourceRepos.
    env.create_app(in_project(
        app(
            "wrong-repo",
            &env.git.git_url("elsewhere"),
            "plain",
            "team-a-three",
            true,
        ),
        "team-a",
    ))
    .await?;
    let a = env
        .wait_app("wrong-repo", "InvalidSpecError", Duration::from_secs(60), |a| {
            condition(a, "InvalidSpecError").is_some()
        })
        .await?;
    let message = condition(&a, "InvalidSpecError").unwrap_or_default();
    assert!(message.contains("sourceRepos"), "{message}");
    assert!(
        env.api("v1", "Namespace", "namespaces", None)
            .get_opt("team-a-three")
            .await?
            .is_none(),
        "nothing is created for an Application whose repository the project refuses"
    );

    // A project that does not exist.
    env.create_app(in_project(
        app("no-project", &env.git.git_url("team"), "plain", "team-a-four", true),
        "nope",
    ))
    .await?;
    let a = env
        .wait_app("no-project", "InvalidSpecError", Duration::from_secs(60), |a| {
            condition(a, "InvalidSpecError").is_some()
        })
        .await?;
    let message = condition(&a, "InvalidSpecError").unwrap_or_default();
    assert!(message.contains("\"nope\" does not exist"), "{message}");
    Ok(())
}

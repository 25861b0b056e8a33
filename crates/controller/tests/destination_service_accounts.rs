//! End to end: an AppProject's `destinationServiceAccounts` (Argo CD's destination service
//! accounts). The syncs and deletions of the project's Applications act as the named ServiceAccount,
//! so the destination's API server — not Capstan — refuses what that account may not do; a
//! destination no entry names gets no sync at all.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use support::*;

const HUB: &str = "https://kubernetes.default.svc";

const SETTINGS: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: blue}\n";

const WITH_SECRET: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: plain}
data: {a: b}
---
apiVersion: v1
kind: Secret
metadata: {name: token}
stringData: {token: not-for-this-account}
"#;

/// An Application of project `team` deploying `path` to `namespace`, without `CreateNamespace` (the
/// account may not read namespaces).
fn team_app(name: &str, repo: &str, path: &str, namespace: &str) -> serde_json::Value {
    json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
        "metadata": {"name": name},
        "spec": {
            "project": "team",
            "source": {"repoURL": repo, "targetRevision": "main", "path": path},
            "destination": {"server": HUB, "namespace": namespace},
        },
    })
}

/// A namespace holding ServiceAccount `deployer`, which may manage ConfigMaps there and, when
/// `delete` is false, not delete them.
async fn team_namespace(client: &kube::Client, namespace: &str, delete: bool) -> anyhow::Result<()> {
    let pp = PatchParams::apply("test").force();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .patch(
            namespace,
            &pp,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})),
        )
        .await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    if accounts.get_opt("deployer").await?.is_none() {
        let account = serde_json::from_value(json!({"metadata": {"name": "deployer"}}))?;
        accounts.create(&PostParams::default(), &account).await?;
    }
    role(client, namespace, delete).await?;
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), namespace);
    bindings
        .patch(
            "deployer",
            &pp,
            &Patch::Apply(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "deployer"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "deployer"},
                "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": namespace}],
            })),
        )
        .await?;
    Ok(())
}

async fn role(client: &kube::Client, namespace: &str, delete: bool) -> anyhow::Result<()> {
    let mut verbs = vec!["get", "list", "watch", "create", "update", "patch"];
    if delete {
        verbs.push("delete");
    }
    let roles: Api<Role> = Api::namespaced(client.clone(), namespace);
    roles
        .patch(
            "deployer",
            &PatchParams::apply("test").force(),
            &Patch::Apply(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "deployer"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": verbs}],
            })),
        )
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn syncs_and_deletions_act_as_the_projects_service_account() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    let team_ns = format!("{}-team", env.ns);
    let other_ns = format!("{}-other", env.ns);
    team_namespace(&env.client, &team_ns, false).await?;
    env.git.create_repo("team")?;
    env.git.commit(
        "team",
        "main",
        &[
            ("settings/cm.yaml", Some(SETTINGS)),
            ("secret/all.yaml", Some(WITH_SECRET)),
        ],
        "v1",
    )?;
    let repo = env.git.git_url("team");
    env.apply_project(
        "team",
        json!({
            "sourceRepos": ["*"],
            "destinations": [{"server": HUB, "namespace": "*"}],
            "destinationServiceAccounts": [
                {"server": "https://elsewhere.example", "namespace": "*", "defaultServiceAccount": "nobody"},
                {"server": HUB, "namespace": team_ns, "defaultServiceAccount": "deployer"},
            ],
        }),
    )
    .await?;

    // What the account may do is done.
    env.create_app(team_app("settings", &repo, "settings", &team_ns))
        .await?;
    env.request("settings", json!({"sync": {}})).await?;
    env.wait_app("settings", "synced as the account", Duration::from_secs(60), |a| {
        op_phase(a) == "Succeeded" && sync_of(a) == "Synced"
    })
    .await?;
    assert!(
        env.get("v1", "ConfigMap", "configmaps", &team_ns, "settings")
            .await?
            .is_some()
    );

    // What it may not do is refused by the API server, naming the account: the project itself
    // permits Secrets, so the refusal cannot be Capstan's.
    env.create_app(team_app("secret", &repo, "secret", &team_ns)).await?;
    env.wait_app("secret", "compared", Duration::from_secs(60), |a| {
        sync_of(a) == "OutOfSync"
    })
    .await?;
    assert_eq!(condition(&env.app("secret").await?, "ProjectViolation"), None);
    env.request("secret", json!({"sync": {}})).await?;
    let failed = env
        .wait_app("secret", "the sync failed", Duration::from_secs(60), |a| {
            op_phase(a) == "Failed"
        })
        .await?;
    let message = op_message(&failed);
    assert!(
        message.contains(&format!("system:serviceaccount:{team_ns}:deployer")) && message.contains("secrets"),
        "the API server's refusal names the account and the kind: {message}"
    );
    assert!(
        env.get("v1", "Secret", "secrets", &team_ns, "token").await?.is_none(),
        "the account may not create Secrets"
    );

    // A destination no entry names: no sync, and a condition that says so.
    env.create_app(team_app("unnamed", &repo, "settings", &other_ns))
        .await?;
    let refused = env
        .wait_app("unnamed", "the violation reported", Duration::from_secs(60), |a| {
            condition(a, "ProjectViolation").is_some()
        })
        .await?;
    let violation = condition(&refused, "ProjectViolation").unwrap_or_default();
    assert!(
        violation.contains("destinationServiceAccounts") && violation.contains(&other_ns),
        "{violation}"
    );
    env.request("unnamed", json!({"sync": {}})).await?;
    let failed = env
        .wait_app("unnamed", "the sync refused", Duration::from_secs(60), |a| {
            op_phase(a) == "Failed"
        })
        .await?;
    assert!(
        op_message(&failed).contains("destinationServiceAccounts"),
        "{}",
        op_message(&failed)
    );
    assert!(
        env.get("v1", "ConfigMap", "configmaps", &other_ns, "settings")
            .await?
            .is_none(),
        "nothing is applied where no account is named"
    );

    // Deleting the Application deletes its objects as the account: refused while the account may
    // not delete ConfigMaps (the finalizer stays and says why), done once it may.
    env.apps
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["capstan.dev/resources-finalizer"]}})),
        )
        .await?;
    env.apps.delete("settings", &Default::default()).await?;
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(env.client.clone(), &env.ns);
    eventually(
        "the deletion refused as the account",
        Duration::from_secs(60),
        || async {
            let refused = events.list(&Default::default()).await?.items.into_iter().any(|e| {
                e.involved_object.name.as_deref() == Some("settings")
                    && e.message.as_deref().is_some_and(|m| {
                        m.contains(&format!("system:serviceaccount:{team_ns}:deployer")) && m.contains("delete")
                    })
            });
            Ok(refused)
        },
    )
    .await?;
    assert!(
        env.apps.get_opt("settings").await?.is_some(),
        "the finalizer holds the Application"
    );
    assert!(
        env.get("v1", "ConfigMap", "configmaps", &team_ns, "settings")
            .await?
            .is_some()
    );
    role(&env.client, &team_ns, true).await?;
    eventually(
        "the Application and its objects deleted",
        Duration::from_secs(90),
        || async {
            Ok(env.apps.get_opt("settings").await?.is_none()
                && env
                    .get("v1", "ConfigMap", "configmaps", &team_ns, "settings")
                    .await?
                    .is_none())
        },
    )
    .await?;
    Ok(())
}

//! End to end: SOPS files decrypted at render time (`spec.decryption`), encrypted by the real `sops`
//! with age keys: a Secret committed encrypted reaches the cluster decrypted; a file the key cannot
//! open is a ComparisonError naming the file and changes nothing of the sync (the Secret keeps its
//! value, the other objects theirs); a key Secret the project does not list is refused; the value
//! appears nowhere in the Application.

mod support;

use std::time::Duration;

use capstan_testkit::sops::{AgeKey, encrypt};
use k8s_openapi::api::core::v1::Secret;
use serde_json::{Value, json};
use support::*;

const SECRET: &str = "sops-plaintext-0d9f3c1e";

fn secret_manifest(value: &str) -> String {
    format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\ntype: Opaque\nstringData:\n  password: {value}\n")
}

fn configmap(value: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  level: {value}\n")
}

async fn key_secret(env: &Env, name: &str, key: &AgeKey) -> anyhow::Result<()> {
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": env.ns, "labels": {"capstan.dev/secret-type": "decryption"}},
        "stringData": {"age.agekey": key.identity},
    }))?;
    kube::Api::<Secret>::namespaced(env.client.clone(), &env.ns)
        .create(&Default::default(), &secret)
        .await?;
    Ok(())
}

fn sops_app(name: &str, repo: &str, namespace: &str, key_secret: &str, project: &str) -> Value {
    let mut app = app(name, repo, "app", namespace, true);
    app["spec"]["decryption"] = json!({"provider": "sops", "secretRef": {"name": key_secret}});
    app["spec"]["project"] = json!(project);
    app
}

async fn password(env: &Env, namespace: &str) -> anyhow::Result<Option<String>> {
    let secret = kube::Api::<Secret>::namespaced(env.client.clone(), namespace)
        .get_opt("db")
        .await?;
    Ok(secret
        .and_then(|s| s.data)
        .and_then(|d| d.get("password").map(|v| String::from_utf8_lossy(&v.0).into_owned())))
}

async fn level(env: &Env, namespace: &str) -> anyhow::Result<Option<Value>> {
    let (cv, ck, cp) = CM_API;
    Ok(env
        .get(cv, ck, cp, namespace, "settings")
        .await?
        .and_then(|cm| cm.pointer("/data/level").cloned()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sops_encrypted_secret_is_applied_decrypted_and_a_bad_file_changes_nothing() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    let key = AgeKey::generate();
    let stranger = AgeKey::generate();
    key_secret(&env, "team-age", &key).await?;
    env.git.create_repo("sops-app")?;
    let encrypted = encrypt(
        "secret.yaml",
        &secret_manifest(SECRET),
        &[&key],
        &["--encrypted-regex", "^(data|stringData)$"],
    )?;
    env.git.commit(
        "sops-app",
        "main",
        &[
            ("app/secret.yaml", Some(&encrypted)),
            ("app/settings.yaml", Some(&configmap("info"))),
        ],
        "encrypted secret",
    )?;
    env.create_app(sops_app(
        "sops",
        &env.git.git_url("sops-app"),
        "sops-ns",
        "team-age",
        "default",
    ))
    .await?;
    let synced = env
        .wait_app("sops", "synced", Duration::from_secs(90), synced_healthy)
        .await?;
    assert_eq!(password(&env, "sops-ns").await?.as_deref(), Some(SECRET));
    assert!(
        !serde_json::to_string(&synced)?.contains(SECRET),
        "the value is nowhere in the Application"
    );

    // A commit that changes the ConfigMap and re-encrypts the Secret for a key Capstan does not
    // hold: refused as a whole, naming the file; the cluster keeps both objects as they were.
    let foreign = encrypt("secret.yaml", &secret_manifest("rotated-value"), &[&stranger], &[])?;
    env.git.commit(
        "sops-app",
        "main",
        &[
            ("app/secret.yaml", Some(&foreign)),
            ("app/settings.yaml", Some(&configmap("debug"))),
        ],
        "a key we do not hold",
    )?;
    env.refresh("sops").await?;
    let refused = env
        .wait_app("sops", "comparison error", Duration::from_secs(60), |a| {
            condition(a, "ComparisonError").is_some()
        })
        .await?;
    let message = condition(&refused, "ComparisonError").unwrap_or_default();
    assert!(
        message.contains("app/secret.yaml") && message.contains(&stranger.recipient),
        "names the file and its recipients: {message}"
    );
    assert!(!message.contains("AGE-SECRET-KEY"), "{message}");
    assert_eq!(
        password(&env, "sops-ns").await?.as_deref(),
        Some(SECRET),
        "the Secret keeps its value"
    );
    assert_eq!(
        level(&env, "sops-ns").await?,
        Some(json!("info")),
        "nothing else of the sync changed"
    );
    assert!(!serde_json::to_string(&refused)?.contains(SECRET));

    // A key Secret that does not exist: named in the condition.
    env.create_app(sops_app(
        "sops-nokey",
        &env.git.git_url("sops-app"),
        "sops-nokey-ns",
        "no-such-keys",
        "default",
    ))
    .await?;
    let refused = env
        .wait_app("sops-nokey", "comparison error", Duration::from_secs(60), |a| {
            condition(a, "ComparisonError").is_some()
        })
        .await?;
    let message = condition(&refused, "ComparisonError").unwrap_or_default();
    assert!(
        message.contains("spec.decryption") && message.contains("\"no-such-keys\" not found"),
        "{message}"
    );

    // The project decides which key Secrets its Applications may use.
    env.apply_project(
        "sops-team",
        json!({"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}],
               "decryptionSecrets": ["another-teams-keys"]}),
    )
    .await?;
    env.create_app(sops_app(
        "sops-other",
        &env.git.git_url("sops-app"),
        "sops-other-ns",
        "team-age",
        "sops-team",
    ))
    .await?;
    let refused = env
        .wait_app("sops-other", "invalid spec", Duration::from_secs(60), |a| {
            condition(a, "InvalidSpecError").is_some()
        })
        .await?;
    let message = condition(&refused, "InvalidSpecError").unwrap_or_default();
    assert!(
        message.contains("decryptionSecrets") && message.contains("team-age"),
        "names the rule and the Secret: {message}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tool_error_quoting_a_decrypted_value_reaches_no_status_or_event() -> anyhow::Result<()> {
    // A chart whose template fails with a value of an encrypted value file: helm's own error message
    // quotes the plaintext. The condition says what failed, with the value scrubbed.
    const LEAKED: &str = "sops-quoted-9c2b7e41";
    let env = Env::shared().await?;
    let key = AgeKey::generate();
    key_secret(&env, "leak-age", &key).await?;
    env.git.create_repo("sops-leak")?;
    let values = encrypt("secrets.yaml", &format!("token: {LEAKED}\n"), &[&key], &[])?;
    env.git.commit(
        "sops-leak",
        "main",
        &[
            ("app/Chart.yaml", Some("apiVersion: v2\nname: leak\nversion: 0.1.0\n")),
            (
                "app/templates/cm.yaml",
                Some("{{ fail (printf \"bad token %s\" .Values.token) }}\n"),
            ),
            ("app/secrets.yaml", Some(&values)),
        ],
        "a chart that quotes its secret",
    )?;
    let mut app = sops_app(
        "sops-leak",
        &env.git.git_url("sops-leak"),
        "sops-leak-ns",
        "leak-age",
        "default",
    );
    app["spec"]["source"]["helm"] = json!({"valueFiles": ["secrets.yaml"]});
    env.create_app(app).await?;
    let failed = env
        .wait_app("sops-leak", "comparison error", Duration::from_secs(90), |a| {
            condition(a, "ComparisonError").is_some()
        })
        .await?;
    let message = condition(&failed, "ComparisonError").unwrap_or_default();
    assert!(
        message.contains("bad token ***"),
        "the tool's message, scrubbed: {message}"
    );
    assert!(!serde_json::to_string(&failed)?.contains(LEAKED), "{message}");
    let events = kube::Api::<k8s_openapi::api::events::v1::Event>::namespaced(env.client.clone(), &env.ns)
        .list(&Default::default())
        .await?;
    assert!(
        !serde_json::to_string(&events.items)?.contains(LEAKED),
        "no event quotes the value"
    );
    Ok(())
}

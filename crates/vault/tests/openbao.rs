//! capstan-vault against a real OpenBao (`bao server -dev`, installed by `bash scripts/setup.sh`)
//! and, for Kubernetes auth, a real API server reviewing service-account tokens (TokenReview).
//! Nothing is mocked; without the `bao` binary these tests fail, naming the setup script.

use capstan_testkit::openbao::{bind_auth_delegator, random_token, service_account_token};
use capstan_testkit::{OpenBao, TestCluster};
use capstan_vault::{Auth, KvPath, StoreConfig, VaultClient, VaultError};

/// A policy reading `secret/payments` only.
const READ_PAYMENTS: &str = r#"path "secret/data/payments" { capabilities = ["read"] }"#;
/// A policy reading `secret/other` only.
const READ_OTHER: &str = r#"path "secret/data/other" { capabilities = ["read"] }"#;

fn path(reference: &str) -> KvPath {
    KvPath::parse(reference).expect("a valid reference")
}

/// `text` (what is shown of `what`) contains none of `secrets`.
fn assert_clean(what: &str, text: &str, secrets: &[&str]) {
    for secret in secrets {
        assert!(!secret.is_empty());
        assert!(!text.contains(secret), "{what} shows a secret: {text}");
    }
}

/// `jwt` with one character in the middle of its signature changed (not the last one: its low bits
/// may be padding, leaving the signature as it was).
fn forge(jwt: &str) -> String {
    let signature = jwt.rfind('.').expect("a JWT has three parts") + 1;
    let at = signature + (jwt.len() - signature) / 2;
    let changed = if &jwt[at..=at] == "A" { "B" } else { "A" };
    format!("{}{changed}{}", &jwt[..at], &jwt[at + 1..])
}

/// An error's Display, alternate Display, Debug and pretty Debug, and its sources' Display.
fn shown(err: &VaultError) -> String {
    let mut text = format!("{err}\n{err:#}\n{err:?}\n{err:#?}");
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        text.push_str(&format!("\n{s}\n{s:?}"));
        source = s.source();
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_auth_reads_a_key_and_the_next_read_sees_a_rotated_value() -> anyhow::Result<()> {
    capstan_testkit::init_logging();
    let bao = OpenBao::start()?;
    let first = format!("s3cr3t-{}", random_token(12));
    bao.put_kv("secret/payments", &[("apiKey", &first), ("region", "eu")])?;
    bao.write_policy("read-payments", READ_PAYMENTS)?;
    let token = bao.create_token(&["read-payments"])?;

    let config = StoreConfig::new(bao.address(), Auth::token(token.clone()));
    let client = VaultClient::new(config.clone())?;
    let reference = path("secret/payments#apiKey");
    let secret = client.read_kv(&reference).await?;
    assert_eq!(secret.get("apiKey")?.expose(), first);
    assert_eq!(secret.version(), 1);
    assert_eq!(secret.keys().collect::<Vec<_>>(), ["apiKey", "region"]);

    let rotated = format!("s3cr3t-{}", random_token(12));
    bao.put_kv("secret/payments", &[("apiKey", &rotated)])?;
    let value = client.read_value(&reference).await?;
    assert_eq!(value.expose(), rotated);
    assert_eq!(client.read_kv(&reference).await?.version(), 2);

    let secrets = [first.as_str(), rotated.as_str(), token.as_str(), bao.root_token()];
    assert_clean("client", &format!("{client:?} {client:#?}"), &secrets);
    assert_clean("config", &format!("{config:?} {config:#?}"), &secrets);
    assert_clean("secret", &format!("{secret:?} {secret:#?} {value} {value:?}"), &secrets);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_name_path_key_and_address_and_never_a_secret() -> anyhow::Result<()> {
    capstan_testkit::init_logging();
    let mut bao = OpenBao::start()?;
    let value = format!("s3cr3t-{}", random_token(12));
    bao.put_kv("secret/payments", &[("apiKey", &value)])?;
    bao.put_kv("secret/gone", &[("apiKey", &value)])?;
    bao.write_policy("read-payments", READ_PAYMENTS)?;
    bao.write_policy("read-all", r#"path "secret/data/*" { capabilities = ["read"] }"#)?;
    let payments_token = bao.create_token(&["read-payments"])?;
    let all_token = bao.create_token(&["read-all"])?;
    let root = bao.root_token().to_string();
    let secrets = [
        value.as_str(),
        payments_token.as_str(),
        all_token.as_str(),
        root.as_str(),
    ];
    let mut errors = Vec::new();

    let all = VaultClient::new(StoreConfig::new(bao.address(), Auth::token(all_token.clone())))?;
    // Missing path.
    let err = all.read_kv(&path("secret/nothing/here#apiKey")).await.unwrap_err();
    assert!(
        matches!(&err, VaultError::NotFound { path } if path == "secret/nothing/here"),
        "{err:?}"
    );
    assert!(err.to_string().contains("secret/nothing/here"), "{err}");
    errors.push(err);
    // Deleted current version.
    bao.delete_kv("secret/gone")?;
    let err = all.read_kv(&path("secret/gone#apiKey")).await.unwrap_err();
    assert!(
        matches!(&err, VaultError::NotFound { path } if path == "secret/gone"),
        "{err:?}"
    );
    errors.push(err);
    // Missing key.
    let err = all.read_value(&path("secret/payments#apikey")).await.unwrap_err();
    assert!(
        matches!(&err, VaultError::MissingKey { path, key } if path == "secret/payments" && key == "apikey"),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("secret/payments") && err.to_string().contains("apikey"),
        "{err}"
    );
    errors.push(err);

    // A policy that does not allow the path.
    let payments = VaultClient::new(StoreConfig::new(bao.address(), Auth::token(payments_token.clone())))?;
    assert_eq!(
        payments.read_value(&path("secret/payments#apiKey")).await?.expose(),
        value
    );
    let err = payments.read_kv(&path("secret/other#apiKey")).await.unwrap_err();
    assert!(
        matches!(&err, VaultError::PermissionDenied { path } if path == "secret/other"),
        "{err:?}"
    );
    assert!(err.to_string().contains("secret/other"), "{err}");
    errors.push(err);
    // A token the store does not know.
    let unknown = VaultClient::new(StoreConfig::new(bao.address(), Auth::token("s.not-a-token")))?;
    let err = unknown.read_kv(&path("secret/payments#apiKey")).await.unwrap_err();
    assert!(matches!(&err, VaultError::PermissionDenied { .. }), "{err:?}");
    errors.push(err);

    // Sealed.
    bao.seal()?;
    let err = all.read_kv(&path("secret/payments#apiKey")).await.unwrap_err();
    assert!(
        matches!(&err, VaultError::Sealed { address } if *address == bao.address()),
        "{err:?}"
    );
    errors.push(err);

    // Stopped: its port refuses connections.
    let address = bao.address();
    bao.stop();
    let err = all.read_kv(&path("secret/payments#apiKey")).await.unwrap_err();
    assert!(
        matches!(&err, VaultError::Unreachable { address: a, .. } if *a == address),
        "{err:?}"
    );
    assert!(err.to_string().contains(&address), "{err}");
    errors.push(err);
    // A port nothing listens on.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        format!("http://127.0.0.1:{}", listener.local_addr()?.port())
    };
    let nowhere = VaultClient::new(StoreConfig::new(closed.clone(), Auth::token(all_token.clone())))?;
    let err = nowhere.read_kv(&path("secret/payments#apiKey")).await.unwrap_err();
    assert!(
        matches!(&err, VaultError::Unreachable { address, .. } if *address == closed),
        "{err:?}"
    );
    errors.push(err);

    for err in &errors {
        assert_clean("error", &shown(err), &secrets);
    }
    assert_clean(
        "client",
        &format!("{all:?} {payments:?} {unknown:?} {nowhere:?}"),
        &secrets,
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_auth_with_a_real_api_server() -> anyhow::Result<()> {
    capstan_testkit::init_logging();
    let cluster = TestCluster::shared().await?;
    let kube = cluster.client().await?;
    let ns = "capstan-vault-auth";
    let reviewer = service_account_token(&kube, ns, "openbao-reviewer").await?;
    bind_auth_delegator(&kube, ns, "openbao-reviewer").await?;
    let controller_jwt = service_account_token(&kube, ns, "capstan-controller").await?;
    let stranger_jwt = service_account_token(&kube, ns, "stranger").await?;

    let bao = OpenBao::start()?;
    let value = format!("s3cr3t-{}", random_token(12));
    bao.put_kv("secret/payments", &[("apiKey", &value)])?;
    bao.write_policy("read-payments", READ_PAYMENTS)?;
    bao.write_policy("read-other", READ_OTHER)?;
    bao.enable_kubernetes_auth(cluster.server(), &cluster.ca_pem()?, Some(&reviewer))?;
    bao.create_kubernetes_role("capstan", &["capstan-controller"], &[ns], &["read-payments"])?;
    bao.create_kubernetes_role("capstan-other", &["capstan-controller"], &[ns], &["read-other"])?;
    let secrets = [
        value.as_str(),
        reviewer.as_str(),
        controller_jwt.as_str(),
        stranger_jwt.as_str(),
        bao.root_token(),
    ];
    let mut errors = Vec::new();

    // The bound service account logs in and reads.
    let reference = path("secret/payments#apiKey");
    let config = StoreConfig::new(bao.address(), Auth::kubernetes("capstan", controller_jwt.clone()));
    let client = VaultClient::new(config.clone())?;
    assert_eq!(client.read_value(&reference).await?.expose(), value);
    // The cached client token is revoked: the 403 is followed by one new login.
    bao.api("PUT", "sys/leases/revoke-prefix/auth/kubernetes/login", None)?;
    assert_eq!(client.read_value(&reference).await?.expose(), value);

    // A service account the role does not name.
    let stranger = VaultClient::new(StoreConfig::new(
        bao.address(),
        Auth::kubernetes("capstan", stranger_jwt.clone()),
    ))?;
    let err = stranger.read_kv(&reference).await.unwrap_err();
    assert!(
        matches!(&err, VaultError::LoginFailed { mount, role, .. } if mount == "kubernetes" && role == "capstan"),
        "{err:?}"
    );
    errors.push(err);
    // A JWT the API server does not accept.
    let forged = VaultClient::new(StoreConfig::new(
        bao.address(),
        Auth::kubernetes("capstan", forge(&controller_jwt)),
    ))?;
    let err = forged.read_kv(&reference).await.unwrap_err();
    assert!(matches!(&err, VaultError::LoginFailed { .. }), "{err:?}");
    errors.push(err);
    // A role whose policy does not allow the path.
    let other = VaultClient::new(StoreConfig::new(
        bao.address(),
        Auth::kubernetes("capstan-other", controller_jwt.clone()),
    ))?;
    let err = other.read_kv(&reference).await.unwrap_err();
    assert!(
        matches!(&err, VaultError::PermissionDenied { path } if path == "secret/payments"),
        "{err:?}"
    );
    assert!(err.to_string().contains("secret/payments"), "{err}");
    errors.push(err);
    // Sealed: the login says so.
    bao.seal()?;
    let fresh = VaultClient::new(config.clone())?;
    let err = fresh.read_kv(&reference).await.unwrap_err();
    assert!(matches!(&err, VaultError::Sealed { .. }), "{err:?}");
    errors.push(err);

    for err in &errors {
        assert_clean("error", &shown(err), &secrets);
    }
    assert_clean(
        "client and config",
        &format!("{client:?} {client:#?} {config:?} {config:#?} {stranger:?} {other:?}"),
        &secrets,
    );
    Ok(())
}

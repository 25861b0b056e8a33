//! Preparing a cluster to be managed, from an admin kubeconfig (what `capstan cluster add` does):
//! read the server and CA from the kubeconfig, then either create a `capstan-manager` service
//! account with cluster-admin-like rights and use its token (the default, as `argocd cluster add`),
//! or reuse the kubeconfig's own credentials.

use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use capstan_api::cluster::ClusterConfig;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, Patch, PatchParams};
use kube::config::{Kubeconfig, NamedContext};
use serde_json::json;

use crate::ClusterError;

/// Namespace of the service account Capstan uses on managed clusters.
pub const MANAGER_NAMESPACE: &str = "kube-system";
/// Name of that service account, its ClusterRole and ClusterRoleBinding.
pub const MANAGER_NAME: &str = "capstan-manager";

/// What a kubeconfig says about one context: where the cluster is and how to trust and log in to it.
#[derive(Debug, Clone)]
pub struct KubeconfigCluster {
    /// The context used.
    pub context: String,
    /// API server URL.
    pub server: String,
    /// TLS settings and the kubeconfig user's credentials.
    pub config: ClusterConfig,
}

/// Read `context` (default: the current one) of the kubeconfig at `path`.
pub fn read_kubeconfig(path: &Path, context: Option<&str>) -> Result<KubeconfigCluster, ClusterError> {
    let err = |m: String| ClusterError::Kubeconfig(format!("{}: {m}", path.display()));
    let kc = Kubeconfig::read_from(path).map_err(|e| err(e.to_string()))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let wanted = context
        .map(String::from)
        .or_else(|| kc.current_context.clone())
        .ok_or_else(|| err("no context given and no current-context set".into()))?;
    let NamedContext { name, context, .. } = kc
        .contexts
        .iter()
        .find(|c| c.name == wanted)
        .cloned()
        .ok_or_else(|| err(format!("context {wanted:?} not found")))?;
    let ctx = context.ok_or_else(|| err(format!("context {name:?} is empty")))?;
    let cluster = kc
        .clusters
        .iter()
        .find(|c| c.name == ctx.cluster)
        .and_then(|c| c.cluster.clone())
        .ok_or_else(|| err(format!("cluster {:?} of context {name:?} not found", ctx.cluster)))?;
    let server = cluster
        .server
        .clone()
        .ok_or_else(|| err(format!("cluster {:?} has no server", ctx.cluster)))?;
    let read_b64 = |data: Option<String>, file: Option<String>| -> Result<String, ClusterError> {
        match (data, file) {
            (Some(d), _) => Ok(d),
            (None, Some(f)) => {
                let p = base.join(f);
                std::fs::read(&p)
                    .map(|b| STANDARD.encode(b))
                    .map_err(|e| err(format!("reading {}: {e}", p.display())))
            }
            (None, None) => Ok(String::new()),
        }
    };
    let mut config = ClusterConfig::default();
    config.tls_client_config.insecure = cluster.insecure_skip_tls_verify.unwrap_or(false);
    config.tls_client_config.ca_data = read_b64(
        cluster.certificate_authority_data.clone(),
        cluster.certificate_authority.clone(),
    )?;
    if let Some(user) = ctx
        .user
        .as_ref()
        .and_then(|u| kc.auth_infos.iter().find(|a| &a.name == u))
        .and_then(|a| a.auth_info.clone())
    {
        use kube::config::AuthInfo;
        let AuthInfo {
            username,
            password,
            token,
            token_file,
            client_certificate,
            client_certificate_data,
            client_key,
            client_key_data,
            ..
        } = user;
        use secrecy::ExposeSecret;
        config.username = username.unwrap_or_default();
        config.password = password.map(|p| p.expose_secret().to_string()).unwrap_or_default();
        config.bearer_token = match (token, token_file) {
            (Some(t), _) => t.expose_secret().to_string(),
            (None, Some(f)) => std::fs::read_to_string(base.join(&f))
                .map(|t| t.trim().to_string())
                .map_err(|e| err(format!("reading token file {f}: {e}")))?,
            (None, None) => String::new(),
        };
        config.tls_client_config.cert_data = read_b64(client_certificate_data, client_certificate)?;
        config.tls_client_config.key_data =
            read_b64(client_key_data.map(|k| k.expose_secret().to_string()), client_key)?;
    }
    Ok(KubeconfigCluster {
        context: name,
        server: server.trim_end_matches('/').to_string(),
        config,
    })
}

/// Create (or update) the `capstan-manager` service account on the cluster `admin` talks to, with
/// full rights, and return its long-lived token.
pub async fn create_manager(admin: &kube::Client, timeout: Duration) -> Result<String, ClusterError> {
    let api_err = |what: &str, e: kube::Error| ClusterError::Api(format!("{what}: {e}"));
    let pp = PatchParams::apply("capstan").force();
    let sa: Api<ServiceAccount> = Api::namespaced(admin.clone(), MANAGER_NAMESPACE);
    sa.patch(
        MANAGER_NAME,
        &pp,
        &Patch::Apply(json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": MANAGER_NAME, "namespace": MANAGER_NAMESPACE},
        })),
    )
    .await
    .map_err(|e| api_err("creating service account kube-system/capstan-manager", e))?;
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    roles
        .patch(
            MANAGER_NAME,
            &pp,
            &Patch::Apply(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": MANAGER_NAME},
                "rules": [
                    {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                    {"nonResourceURLs": ["*"], "verbs": ["*"]},
                ],
            })),
        )
        .await
        .map_err(|e| api_err("creating ClusterRole capstan-manager", e))?;
    let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    bindings
        .patch(
            MANAGER_NAME,
            &pp,
            &Patch::Apply(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": MANAGER_NAME},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": MANAGER_NAME},
                "subjects": [{"kind": "ServiceAccount", "name": MANAGER_NAME, "namespace": MANAGER_NAMESPACE}],
            })),
        )
        .await
        .map_err(|e| api_err("creating ClusterRoleBinding capstan-manager", e))?;
    // A long-lived token Secret, filled in by the cluster's token controller.
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), MANAGER_NAMESPACE);
    let token_secret = format!("{MANAGER_NAME}-token");
    secrets
        .patch(
            &token_secret,
            &pp,
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
                "metadata": {
                    "name": token_secret, "namespace": MANAGER_NAMESPACE,
                    "annotations": {"kubernetes.io/service-account.name": MANAGER_NAME},
                },
            })),
        )
        .await
        .map_err(|e| api_err("creating the service account token Secret", e))?;
    let deadline = Instant::now() + timeout;
    loop {
        let secret = secrets
            .get(&token_secret)
            .await
            .map_err(|e| api_err("reading the service account token", e))?;
        let token = secret
            .data
            .as_ref()
            .and_then(|d| d.get("token"))
            .and_then(|t| String::from_utf8(t.0.clone()).ok())
            .filter(|t| !t.is_empty());
        if let Some(token) = token {
            return Ok(token);
        }
        if Instant::now() >= deadline {
            return Err(ClusterError::Api(format!(
                "the cluster did not issue a token for kube-system/{MANAGER_NAME} within {}s (is its \
                 controller-manager running?); use --use-kubeconfig-credentials instead",
                timeout.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Remove what [`create_manager`] created, which revokes its token (`capstan cluster rm --revoke-with`).
pub async fn remove_manager(admin: &kube::Client) -> Result<(), ClusterError> {
    let dp = kube::api::DeleteParams::default();
    let ignore_missing = |r: Result<(), kube::Error>, what: &str| match r {
        Ok(()) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(ClusterError::Api(format!("deleting {what}: {e}"))),
    };
    let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    ignore_missing(
        bindings.delete(MANAGER_NAME, &dp).await.map(|_| ()),
        "ClusterRoleBinding",
    )?;
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    ignore_missing(roles.delete(MANAGER_NAME, &dp).await.map(|_| ()), "ClusterRole")?;
    let sa: Api<ServiceAccount> = Api::namespaced(admin.clone(), MANAGER_NAMESPACE);
    ignore_missing(sa.delete(MANAGER_NAME, &dp).await.map(|_| ()), "ServiceAccount")?;
    Ok(())
}

//! `capstan install`: apply Capstan's CRDs, Capstan's namespace (`capstan` unless `-n` names another)
//! and the controller's RBAC with server-side apply (idempotent), then wait for the CRDs to be
//! established.

use crate::output::outln;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use capstan_api::NAMESPACE;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource};
use serde_json::json;

use crate::kube_client::{KubeArgs, describe};

/// Field manager of everything `capstan install` applies.
const MANAGER: &str = "capstan-install";
/// Name of the controller's service account, cluster role and binding.
const CONTROLLER: &str = "capstan-controller";

/// Arguments of `capstan install`.
#[derive(Debug, clap::Args)]
pub struct InstallArgs {
    #[command(flatten)]
    kube: KubeArgs,
    /// Namespace Capstan runs in: its Applications, the server's Secret and the controller's
    /// service account.
    #[arg(long, short = 'n', default_value = NAMESPACE)]
    namespace: String,
}

/// Name of the binding that grants the controller's service account in `namespace` its cluster
/// role: `capstan-controller` for the default namespace, suffixed with the namespace for any other,
/// so that installs into several namespaces of one cluster do not take the binding from each other.
fn binding_name(namespace: &str) -> String {
    if namespace == NAMESPACE {
        CONTROLLER.to_string()
    } else {
        format!("{CONTROLLER}-{namespace}")
    }
}

/// Install into the selected cluster.
pub async fn run(args: InstallArgs) -> anyhow::Result<ExitCode> {
    let client = args.kube.client().await?;
    let pp = PatchParams::apply(MANAGER).force();
    let namespace = args.namespace.as_str();

    let ns: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": namespace, "labels": {"app.kubernetes.io/part-of": "capstan"}},
    }))?;
    apply(&Api::<Namespace>::all(client.clone()), &ns, &pp).await?;

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    for (_, crd) in capstan_api::crd::all() {
        apply(&crds, &crd, &pp).await?;
        names.push(crd.metadata.name.clone().unwrap_or_default());
    }

    let sa: ServiceAccount = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": CONTROLLER, "namespace": namespace},
    }))?;
    apply(&Api::<ServiceAccount>::namespaced(client.clone(), namespace), &sa, &pp).await?;
    // Like Argo CD's application controller, Capstan manages arbitrary kinds in its own cluster.
    let role: ClusterRole = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": CONTROLLER},
        "rules": [
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
            {"nonResourceURLs": ["*"], "verbs": ["*"]},
        ],
    }))?;
    apply(&Api::<ClusterRole>::all(client.clone()), &role, &pp).await?;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": binding_name(namespace)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CONTROLLER},
        "subjects": [{"kind": "ServiceAccount", "name": CONTROLLER, "namespace": namespace}],
    }))?;
    apply(&Api::<ClusterRoleBinding>::all(client.clone()), &binding, &pp).await?;

    for name in &names {
        wait_established(&crds, name, Duration::from_secs(60)).await?;
    }
    server_secret(&client, namespace).await?;
    outln!("Capstan installed (namespace {namespace}, {} CRDs)", names.len());
    Ok(ExitCode::SUCCESS)
}

async fn apply<K>(api: &Api<K>, obj: &K, pp: &PatchParams) -> anyhow::Result<()>
where
    K: Resource<DynamicType = ()> + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    let what = format!("{} {name}", K::kind(&()));
    api.patch(&name, pp, &Patch::Apply(obj))
        .await
        .map_err(|e| anyhow::anyhow!("{}", describe(&e)))
        .with_context(|| format!("applying {what}"))?;
    outln!("{what} applied");
    Ok(())
}

async fn wait_established(crds: &Api<CustomResourceDefinition>, name: &str, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let crd = crds.get(name).await.map_err(|e| anyhow::anyhow!("{}", describe(&e)))?;
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "CustomResourceDefinition {name} was not established within {} s",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Create the HTTP server's Secret with a random admin password and session key, unless it exists;
/// a missing session key is added. The password is printed once: only its hash is stored.
async fn server_secret(client: &kube::Client, namespace: &str) -> anyhow::Result<()> {
    use base64::Engine;
    use capstan_server::auth::{self, password};
    use capstan_server::state::SECRET;
    use k8s_openapi::api::core::v1::Secret;
    let b64 = |v: &str| base64::engine::general_purpose::STANDARD.encode(v);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let existing = secrets
        .get_opt(SECRET)
        .await
        .map_err(|e| anyhow::anyhow!("{}", describe(&e)))
        .with_context(|| format!("reading Secret {SECRET}"))?;
    match existing {
        Some(secret) => {
            let data = secret.data.unwrap_or_default();
            if !data.contains_key(auth::SESSION_KEY) {
                let patch = json!({"data": {auth::SESSION_KEY: b64(&password::random_secret(32))}});
                secrets
                    .patch(SECRET, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .map_err(|e| anyhow::anyhow!("{}", describe(&e)))
                    .with_context(|| format!("updating Secret {SECRET}"))?;
            }
            outln!("Secret {SECRET} kept (admin password unchanged)");
        }
        None => {
            let admin_password = password::random_secret(12);
            let secret: Secret = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": SECRET, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "capstan"}},
                "data": {
                    auth::ADMIN_PASSWORD: b64(&password::hash(&admin_password)),
                    auth::SESSION_KEY: b64(&password::random_secret(32)),
                },
            }))?;
            secrets
                .create(&Default::default(), &secret)
                .await
                .map_err(|e| anyhow::anyhow!("{}", describe(&e)))
                .with_context(|| format!("creating Secret {SECRET}"))?;
            outln!("Secret {SECRET} created");
            outln!(
                "admin password (shown only now; change it with `capstan account set-password admin`): {admin_password}"
            );
        }
    }
    Ok(())
}

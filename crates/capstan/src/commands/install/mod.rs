//! `capstan install`: apply Capstan's install source — the objects of [`objects::all`]: the
//! `capstan` namespace, the CRDs, the ServiceAccounts, roles and bindings, and the controller's and
//! the server's Deployments with their Service, PodDisruptionBudget and NetworkPolicies — with
//! server-side apply (idempotent), wait for the CRDs to be established, and create the server's
//! Secret. `--print` writes the objects instead (`deploy/install.yaml` is that output).

pub mod objects;

use crate::output::{out, outln};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use capstan_api::NAMESPACE;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Scope};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::kube_client::{KubeArgs, describe};

/// Field manager of everything `capstan install` applies.
const MANAGER: &str = "capstan-install";

/// Arguments of `capstan install`.
#[derive(Debug, clap::Args)]
pub struct InstallArgs {
    #[command(flatten)]
    kube: KubeArgs,
    /// Namespace Capstan runs in: its Applications, Secrets and workloads. Installations into
    /// several namespaces of one cluster share the CRDs and the ClusterRoles.
    #[arg(long, short = 'n', default_value = NAMESPACE)]
    namespace: String,
    /// Write the objects to stdout as YAML instead of applying them (no cluster is contacted).
    #[arg(long)]
    print: bool,
    /// The image the controller and the server run.
    #[arg(long)]
    image: Option<String>,
    /// Replicas of the server.
    #[arg(long, default_value_t = 2)]
    server_replicas: u32,
    /// Replicas of the controller (they share the Applications through Leases).
    #[arg(long, default_value_t = 1)]
    controller_replicas: u32,
}

/// Install into the selected cluster, or print what would be installed.
pub async fn run(args: InstallArgs) -> anyhow::Result<ExitCode> {
    let defaults = objects::Values::default();
    let values = objects::Values {
        namespace: args.namespace,
        image: args.image.unwrap_or(defaults.image),
        server_replicas: args.server_replicas,
        controller_replicas: args.controller_replicas,
    };
    let objects = objects::all(&values);
    if args.print {
        out!("{}", objects::to_yaml(&objects).context("writing the objects as YAML")?);
        return Ok(ExitCode::SUCCESS);
    }
    let client = args.kube.client().await?;
    install(&client, &values.namespace, &objects, MANAGER).await?;
    Ok(ExitCode::SUCCESS)
}

/// Apply `objects` (the install source for `namespace`) as field manager `manager`, wait for their
/// CRDs and create the server's Secret: what `capstan install` and `capstan bootstrap` do to a
/// cluster.
pub async fn install(client: &Client, namespace: &str, objects: &[Value], manager: &str) -> anyhow::Result<()> {
    let pp = PatchParams::apply(manager).force();
    let mut crds = Vec::new();
    for object in objects {
        let gvk = gvk_of(object)?;
        if gvk.kind == "CustomResourceDefinition" {
            crds.push(name_of(object));
        }
        apply(client, &gvk, object, &pp).await?;
    }
    let crd_api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in &crds {
        wait_established(&crd_api, name, Duration::from_secs(60)).await?;
    }
    server_secret(client, namespace).await?;
    outln!("Capstan installed (namespace {namespace}, {} CRDs)", crds.len());
    Ok(())
}

pub(crate) fn gvk_of(object: &Value) -> anyhow::Result<GroupVersionKind> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    if kind.is_empty() || version.is_empty() {
        bail!("an install object has no apiVersion or kind: {object}");
    }
    Ok(GroupVersionKind::gvk(group, version, kind))
}

fn name_of(object: &Value) -> String {
    object["metadata"]["name"].as_str().unwrap_or_default().to_string()
}

/// Apply `object` of kind `gvk`. A PodDisruptionBudget is skipped, with a note, where `policy/v1`
/// is not served (Kubernetes before 1.21); any other kind not served is an error.
pub(crate) async fn apply(
    client: &Client,
    gvk: &GroupVersionKind,
    object: &Value,
    pp: &PatchParams,
) -> anyhow::Result<()> {
    let name = name_of(object);
    let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
    let what = format!("{} {name}", gvk.kind);
    let found = kube::discovery::pinned_kind(client, gvk).await;
    let (resource, caps): (ApiResource, ApiCapabilities) = match found {
        Ok(found) => found,
        Err(_) if gvk.kind == "PodDisruptionBudget" => {
            outln!(
                "{what} skipped: {}/{} is not served by this cluster",
                gvk.group,
                gvk.version
            );
            return Ok(());
        }
        Err(e) => {
            return Err(anyhow::anyhow!("{}", describe(&e)))
                .with_context(|| format!("finding the API of {what} ({}/{})", gvk.group, gvk.version));
        }
    };
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Namespaced => Api::namespaced_with(client.clone(), namespace, &resource),
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    api.patch(&name, pp, &Patch::Apply(object))
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

//! `capstan cluster …`: register destination clusters and inspect them. A cluster is a Secret in
//! Capstan's namespace on the hub (the cluster Capstan runs in); its labels are what ApplicationSet
//! cluster generators select on. Connection state comes from the controller's probes. Logged in to
//! a server (`capstan login`), `list` and `get` ask it (`GET /api/clusters`) and print the same.

use crate::output::{out, outln};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use capstan_api::cluster::{CLUSTER_SECRET_TYPE, IN_CLUSTER_NAME, IN_CLUSTER_SERVER};
use capstan_api::labels::SECRET_TYPE_LABEL;
use capstan_cluster::ClusterSecret;
use capstan_cluster::register;
use capstan_cluster::secret::secret_name_for;
use capstan_cluster::status::{ConnectionState, STATUS_CONFIGMAP, key_for};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::commands::app::print_table;
use crate::kube_client::{KubeArgs, describe};
use crate::remote::Remote;

/// `capstan cluster` and its subcommands.
#[derive(Debug, clap::Args)]
pub struct ClusterArgs {
    /// Namespace Capstan runs in on the hub (where cluster Secrets live).
    #[arg(long = "namespace", short = 'n', global = true, default_value = capstan_api::NAMESPACE,
          alias = "capstan-namespace")]
    namespace: String,
    #[command(subcommand)]
    command: ClusterCommand,
}

/// Output format.
#[derive(Debug, Clone, Copy, clap::ValueEnum, PartialEq, Eq)]
enum Output {
    Table,
    Yaml,
    Json,
}

#[derive(Debug, clap::Subcommand)]
enum ClusterCommand {
    /// Register a cluster: create a `capstan-manager` service account on it (or reuse the
    /// kubeconfig's credentials) and store the connection in a cluster Secret on the hub.
    Add(AddArgs),
    /// List registered clusters with their connection state.
    List {
        #[command(flatten)]
        hub: KubeArgs,
        /// Output format: table, yaml or json.
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
    /// Show one cluster (never its credentials).
    Get {
        /// Cluster name or server URL.
        name: String,
        #[command(flatten)]
        hub: KubeArgs,
        /// Output format: table, yaml or json.
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
    /// Set (`k=v`) or remove (`k-`) labels of a cluster.
    Label {
        /// Cluster name or server URL.
        name: String,
        /// `key=value` to set, `key-` to remove.
        #[arg(required = true)]
        labels: Vec<String>,
        #[command(flatten)]
        hub: KubeArgs,
    },
    /// Unregister a cluster (its Applications report it as unknown; nothing on it is deleted).
    /// With `--revoke-with K`, also delete the `capstan-manager` service account (and so its token)
    /// from the cluster, using the admin kubeconfig K.
    Rm {
        /// Cluster name or server URL.
        name: String,
        /// Admin kubeconfig of the cluster, to revoke Capstan's access there too.
        #[arg(long)]
        revoke_with: Option<PathBuf>,
        #[command(flatten)]
        hub: KubeArgs,
    },
}

/// Arguments of `capstan cluster add`.
#[derive(Debug, clap::Args)]
struct AddArgs {
    /// Name of the cluster (what `destination.name` and `{{name}}` refer to).
    name: String,
    /// Kubeconfig with admin access to the cluster being added.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Context in that kubeconfig (default: its current context).
    #[arg(long)]
    context: Option<String>,
    /// Label of the cluster, `key=value` (repeatable).
    #[arg(long = "label", short = 'l')]
    labels: Vec<String>,
    /// Annotation of the cluster, `key=value` (repeatable).
    #[arg(long = "annotation")]
    annotations: Vec<String>,
    /// Manage only these namespaces on the cluster (repeatable; default: all). Argo CD's `cluster add`
    /// calls it `--namespace`; here `-n/--namespace` is, as in every command, where Capstan's objects are.
    #[arg(long = "managed-namespace")]
    namespaces: Vec<String>,
    /// With `--namespace`: also allow cluster-scoped objects.
    #[arg(long)]
    cluster_resources: bool,
    /// Store the kubeconfig's own credentials instead of creating a service account.
    #[arg(long)]
    use_kubeconfig_credentials: bool,
    /// Server URL to store instead of the kubeconfig's (when the hub reaches the cluster by
    /// another address).
    #[arg(long)]
    server: Option<String>,
    /// Replace an existing registration of the same name.
    #[arg(long)]
    upsert: bool,
    /// Kubeconfig of the hub (default: $KUBECONFIG, ~/.kube/config, or in-cluster).
    #[arg(long, env = "KUBECONFIG")]
    hub_kubeconfig: Option<PathBuf>,
    /// Context of the hub kubeconfig.
    #[arg(long)]
    hub_context: Option<String>,
}

/// Run `capstan cluster …`.
pub async fn run(args: ClusterArgs) -> anyhow::Result<ExitCode> {
    let ns = args.namespace;
    let remote = Remote::current()?;
    match (args.command, remote) {
        (ClusterCommand::List { output, .. }, Some(remote)) => print_list(&all_remote(&remote).await?, output),
        (ClusterCommand::Get { name, output, .. }, Some(remote)) => {
            print_one(&pick(all_remote(&remote).await?, &name)?, output)
        }
        (_, Some(remote)) => bail!(
            "changing clusters is not available through the server {}: use the hub's kubeconfig (`capstan context --none`)",
            remote.server
        ),
        (command, None) => run_kube(command, &ns).await,
    }
}

/// Run `command` with the hub's kubeconfig.
async fn run_kube(command: ClusterCommand, ns: &str) -> anyhow::Result<ExitCode> {
    match command {
        ClusterCommand::Add(add_args) => add(add_args, ns).await,
        ClusterCommand::List { hub, output } => print_list(&all(&hub.client().await?, ns).await?, output),
        ClusterCommand::Get { name, hub, output } => {
            let hub = hub.client().await?;
            print_one(&pick(all(&hub, ns).await?, &name)?, output)
        }
        ClusterCommand::Label { name, labels, hub } => label(&hub.client().await?, ns, &name, &labels).await,
        ClusterCommand::Rm { name, revoke_with, hub } => rm(&hub.client().await?, ns, &name, revoke_with).await,
    }
}

async fn add(args: AddArgs, ns: &str) -> anyhow::Result<ExitCode> {
    if args.name.trim().is_empty() || args.name == IN_CLUSTER_NAME {
        bail!("cluster name {:?} is reserved or empty", args.name);
    }
    let labels = parse_pairs(&args.labels, "--label")?;
    let annotations = parse_pairs(&args.annotations, "--annotation")?;
    let target = register::read_kubeconfig(&args.kubeconfig, args.context.as_deref())?;
    let hub = KubeArgs {
        kubeconfig: args.hub_kubeconfig.clone(),
        context: args.hub_context.clone(),
    }
    .client()
    .await
    .context("connecting to the hub")?;

    // Refuse conflicts before anything is created on the cluster being added.
    let secret_name = secret_name_for(&args.name);
    let server = args
        .server
        .clone()
        .unwrap_or(target.server.clone())
        .trim_end_matches('/')
        .to_string();
    for other in registered(&hub, ns).await? {
        if other.secret_name != secret_name && (other.server == server || other.name == args.name) {
            bail!(
                "cluster {:?} ({}) is already registered in Secret {}; remove it first",
                other.name,
                other.server,
                other.secret_name
            );
        }
        if other.secret_name == secret_name && !args.upsert {
            bail!(
                "cluster {:?} is already registered (Secret {ns}/{secret_name}); pass --upsert to replace it",
                args.name
            );
        }
    }

    let mut config = target.config.clone();
    if !args.use_kubeconfig_credentials {
        let admin = KubeArgs {
            kubeconfig: Some(args.kubeconfig.clone()),
            context: args.context.clone(),
        }
        .client()
        .await
        .with_context(|| {
            format!(
                "connecting to cluster {:?} with {}",
                args.name,
                args.kubeconfig.display()
            )
        })?;
        let token = register::create_manager(&admin, Duration::from_secs(30))
            .await
            .with_context(|| format!("preparing cluster {:?}", args.name))?;
        config.bearer_token = token;
        config.username.clear();
        config.password.clear();
        config.tls_client_config.cert_data.clear();
        config.tls_client_config.key_data.clear();
    }
    let cluster = ClusterSecret {
        secret_name,
        name: args.name.clone(),
        server,
        config,
        namespaces: args.namespaces.clone(),
        cluster_resources: args.cluster_resources,
        labels,
        annotations,
    };
    // The stored credentials must work before they are stored.
    let check = capstan_cluster::connect::client(&cluster).await?;
    let version = check
        .apiserver_version()
        .await
        .map_err(|e| anyhow!("{}", describe(&e)))
        .with_context(|| format!("the stored credentials cannot reach {}", cluster.server))?;

    let secrets: Api<Secret> = Api::namespaced(hub.clone(), ns);
    let secret = cluster.to_secret(ns);
    match secrets.create(&PostParams::default(), &secret).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {
            if !args.upsert {
                bail!(
                    "cluster {:?} is already registered (Secret {}/{}); pass --upsert to replace it",
                    args.name,
                    ns,
                    cluster.secret_name
                );
            }
            let existing = secrets
                .get(&cluster.secret_name)
                .await
                .map_err(|e| anyhow!("{}", describe(&e)))?;
            let mut replacement = secret.clone();
            replacement.metadata.resource_version = existing.metadata.resource_version;
            secrets
                .replace(&cluster.secret_name, &PostParams::default(), &replacement)
                .await
                .map_err(|e| anyhow!("{}", describe(&e)))
                .context("replacing the cluster Secret")?;
        }
        Err(e) => return Err(anyhow!("{}", describe(&e)).context("writing the cluster Secret on the hub")),
    }
    outln!(
        "cluster {:?} added: {} ({}), Secret {}/{}",
        cluster.name,
        cluster.server,
        version.git_version,
        ns,
        cluster.secret_name
    );
    Ok(ExitCode::SUCCESS)
}

/// Every valid cluster Secret on the hub.
async fn registered(hub: &kube::Client, ns: &str) -> anyhow::Result<Vec<ClusterSecret>> {
    let secrets: Api<Secret> = Api::namespaced(hub.clone(), ns);
    let list = secrets
        .list(&ListParams::default().labels(&format!("{SECRET_TYPE_LABEL}={CLUSTER_SECRET_TYPE}")))
        .await
        .map_err(|e| anyhow!("{}", describe(&e)))
        .context("listing cluster Secrets")?;
    Ok(list
        .items
        .iter()
        .filter_map(|s| match ClusterSecret::from_secret(s) {
            Ok(c) => Some(c),
            Err(err) => {
                eprintln!("warning: {err}");
                None
            }
        })
        .collect())
}

async fn find(hub: &kube::Client, ns: &str, name: &str) -> anyhow::Result<ClusterSecret> {
    let wanted = name.trim_end_matches('/');
    registered(hub, ns)
        .await?
        .into_iter()
        .find(|c| c.name == wanted || c.server == wanted || c.secret_name == wanted)
        .ok_or_else(|| anyhow!("cluster {name:?} is not registered (see `capstan cluster list`)"))
}

async fn states(hub: &kube::Client, ns: &str) -> BTreeMap<String, String> {
    let maps: Api<ConfigMap> = Api::namespaced(hub.clone(), ns);
    maps.get_opt(STATUS_CONFIGMAP)
        .await
        .ok()
        .flatten()
        .and_then(|m| m.data)
        .unwrap_or_default()
}

/// A cluster as `list` and `get` show it: the same whether read from the hub's Secrets or answered
/// by the server (`GET /api/clusters`).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Shown {
    name: String,
    server: String,
    secret: String,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    namespaces: Vec<String>,
    #[serde(rename = "state")]
    status: capstan_api::status::ConnectionStatus,
    #[serde(rename = "version")]
    server_version: String,
    message: String,
    checked_at: String,
}

impl Shown {
    fn of_secret(c: &ClusterSecret, states: &BTreeMap<String, String>) -> Shown {
        let state = states
            .get(&key_for(&c.name))
            .map(|s| ConnectionState::from_json(s))
            .unwrap_or_else(|| ConnectionState::from_json(""));
        Shown {
            name: c.name.clone(),
            server: c.server.clone(),
            secret: c.secret_name.clone(),
            labels: c.labels.clone(),
            annotations: c.shown_annotations(),
            namespaces: c.namespaces.clone(),
            status: state.status,
            server_version: state.server_version,
            message: state.message,
            checked_at: state.checked_at,
        }
    }

    /// Its JSON form (`-o json|yaml`).
    fn json(&self) -> serde_json::Value {
        json!({
            "name": self.name,
            "server": self.server,
            "secret": self.secret,
            "labels": self.labels,
            "annotations": self.annotations,
            "namespaces": self.namespaces,
            "connectionState": {
                "status": self.status,
                "message": self.message,
                "serverVersion": self.server_version,
                "checkedAt": self.checked_at,
            },
        })
    }
}

fn in_cluster() -> ClusterSecret {
    ClusterSecret {
        name: IN_CLUSTER_NAME.into(),
        server: IN_CLUSTER_SERVER.into(),
        ..Default::default()
    }
}

/// Every cluster as the hub's Secrets have them, `in-cluster` first unless it has a Secret.
async fn all(hub: &kube::Client, ns: &str) -> anyhow::Result<Vec<Shown>> {
    let mut clusters = registered(hub, ns).await?;
    if !clusters.iter().any(|c| c.is_in_cluster()) {
        clusters.insert(0, in_cluster());
    }
    let states = states(hub, ns).await;
    Ok(clusters.iter().map(|c| Shown::of_secret(c, &states)).collect())
}

/// Every cluster as the server answers them, in the same order as [`all`].
async fn all_remote(remote: &Remote) -> anyhow::Result<Vec<Shown>> {
    let answer: crate::remote::client::Items<Shown> = remote.get("/api/clusters").await?;
    let mut clusters = answer.items;
    clusters.sort_by(|a, b| (!a.secret.is_empty(), &a.secret).cmp(&(!b.secret.is_empty(), &b.secret)));
    Ok(clusters)
}

fn print_list(clusters: &[Shown], output: Output) -> anyhow::Result<ExitCode> {
    let rows: Vec<serde_json::Value> = clusters.iter().map(Shown::json).collect();
    match output {
        Output::Json => outln!("{}", serde_json::to_string_pretty(&rows)?),
        Output::Yaml => out!("{}", serde_saphyr::to_string(&rows)?),
        Output::Table => {
            let mut table = vec![
                ["NAME", "SERVER", "VERSION", "STATUS", "LABELS", "MESSAGE"]
                    .map(String::from)
                    .to_vec(),
            ];
            for c in clusters {
                table.push(vec![
                    c.name.clone(),
                    c.server.clone(),
                    c.server_version.clone(),
                    c.status.to_string(),
                    c.labels
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(","),
                    c.message.clone(),
                ]);
            }
            print_table(&table);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The cluster `name` (its name, server URL or Secret name) among `clusters`; `in-cluster` is
/// always known.
fn pick(clusters: Vec<Shown>, name: &str) -> anyhow::Result<Shown> {
    let wanted = name.trim_end_matches('/');
    let local = wanted == IN_CLUSTER_NAME || wanted == IN_CLUSTER_SERVER;
    clusters
        .into_iter()
        .find(|c| c.name == wanted || c.server == wanted || (!c.secret.is_empty() && c.secret == wanted))
        .or_else(|| local.then(|| Shown::of_secret(&in_cluster(), &BTreeMap::new())))
        .ok_or_else(|| anyhow!("cluster {name:?} is not registered (see `capstan cluster list`)"))
}

fn print_one(cluster: &Shown, output: Output) -> anyhow::Result<ExitCode> {
    let row = cluster.json();
    match output {
        Output::Json => outln!("{}", serde_json::to_string_pretty(&row)?),
        Output::Yaml | Output::Table => out!("{}", serde_saphyr::to_string(&row)?),
    }
    Ok(ExitCode::SUCCESS)
}

async fn label(hub: &kube::Client, ns: &str, name: &str, changes: &[String]) -> anyhow::Result<ExitCode> {
    let cluster = find(hub, ns, name).await?;
    let mut labels = serde_json::Map::new();
    for change in changes {
        if let Some(key) = change.strip_suffix('-').filter(|k| !k.contains('=')) {
            labels.insert(key.to_string(), serde_json::Value::Null);
        } else {
            let (k, v) = split_pair(change, "label")?;
            labels.insert(k, json!(v));
        }
    }
    if labels.contains_key(SECRET_TYPE_LABEL) {
        bail!("label {SECRET_TYPE_LABEL} is Capstan's own and cannot be changed");
    }
    let secrets: Api<Secret> = Api::namespaced(hub.clone(), ns);
    secrets
        .patch(
            &cluster.secret_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": labels}})),
        )
        .await
        .map_err(|e| anyhow!("{}", describe(&e)))
        .with_context(|| format!("labelling cluster {name:?}"))?;
    outln!("cluster {:?} labelled", cluster.name);
    Ok(ExitCode::SUCCESS)
}

async fn rm(hub: &kube::Client, ns: &str, name: &str, revoke_with: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    if name == IN_CLUSTER_NAME {
        bail!("in-cluster is the cluster Capstan runs in and cannot be removed");
    }
    let cluster = find(hub, ns, name).await?;
    if let Some(kubeconfig) = revoke_with {
        let admin = KubeArgs {
            kubeconfig: Some(kubeconfig.clone()),
            context: None,
        }
        .client()
        .await
        .with_context(|| format!("connecting to cluster {name:?} with {}", kubeconfig.display()))?;
        register::remove_manager(&admin).await?;
        outln!(
            "revoked: kube-system/capstan-manager deleted from cluster {:?}",
            cluster.name
        );
    } else if cluster.config.bearer_token.is_empty() {
        // Kubeconfig credentials: nothing of Capstan's lives on the cluster.
    } else {
        eprintln!(
            "note: the capstan-manager service account on {} keeps working; pass --revoke-with KUBECONFIG to delete it",
            cluster.server
        );
    }
    let secrets: Api<Secret> = Api::namespaced(hub.clone(), ns);
    secrets
        .delete(&cluster.secret_name, &DeleteParams::default())
        .await
        .map_err(|e| anyhow!("{}", describe(&e)))
        .with_context(|| format!("removing cluster {name:?}"))?;
    outln!("cluster {:?} removed", cluster.name);
    Ok(ExitCode::SUCCESS)
}

fn parse_pairs(pairs: &[String], flag: &str) -> anyhow::Result<BTreeMap<String, String>> {
    pairs.iter().map(|p| split_pair(p, flag)).collect()
}

fn split_pair(pair: &str, what: &str) -> anyhow::Result<(String, String)> {
    match pair.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.trim().to_string())),
        _ => bail!("invalid {what} {pair:?}: use key=value"),
    }
}

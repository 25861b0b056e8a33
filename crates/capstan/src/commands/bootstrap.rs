//! `capstan bootstrap`: a cluster without Capstan becomes a hub that manages itself from Git (Flux's
//! `bootstrap`, Argo CD Autopilot's idea). In order, so that a refusal changes nothing:
//!
//! 1. checks: the path stays inside the repository, the URL is one Capstan reads, no other Capstan
//!    runs in the cluster, and the image resolves to a digest (the install is pinned to it);
//! 2. commits, through the Git writer (no force push), the files the branch does not have yet under
//!    `PATH`: `capstan/install.yaml` (Capstan's install source, `capstan install --print`, pinned,
//!    without the namespace, which no Application may manage),
//!    `capstan/applications.yaml` (the Applications `capstan` and `root`) and `apps/hub.yaml` (a
//!    ConfigMap, so that `root` has something to apply on a new hub); files
//!    already there are left as they are — the repository is the truth;
//! 3. installs Capstan from the same objects, stores the Git credentials given as a repository Secret,
//!    and applies the two Applications: `capstan` (Capstan's own installation, from `PATH/capstan`)
//!    and `root` (app-of-apps over `PATH/apps`).
//!
//! Running it again changes nothing: when the branch holds the files already, the cluster is not
//! touched (Git is the truth; a cluster without Capstan is refused, with how to install from Git).
//! Upgrading is then a commit changing the image in `PATH/capstan/install.yaml`. `--dry-run`
//! prints the plan and writes nothing.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use capstan_api::NAMESPACE;
use capstan_api::labels::SECRET_TYPE_LABEL;
use capstan_gitwrite::{Change, Edit, GitWriter, WriteOutcome, WriteRequest, WriterConfig};
use capstan_source::Credentials;
use capstan_source::{ImageClient, ImageRepository};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::commands::install::{self, objects};
use crate::kube_client::{KubeArgs, describe};
use crate::output::outln;

/// Field manager of the Applications and the Secret bootstrap applies.
const MANAGER: &str = "capstan-bootstrap";
/// The repository Secret holding the credentials given to bootstrap.
const REPO_SECRET: &str = "capstan-bootstrap-repository";

/// Arguments of `capstan bootstrap`.
#[derive(Debug, clap::Args)]
pub struct BootstrapArgs {
    #[command(flatten)]
    kube: KubeArgs,
    /// The Git repository Capstan manages the hub from (it needs write access once, for the first
    /// commit).
    #[arg(long)]
    repo: String,
    /// The directory of the repository for this hub (`clusters/hub`): Capstan's installation goes to
    /// `PATH/capstan`, the Applications of the hub to `PATH/apps`.
    #[arg(long)]
    path: String,
    /// The branch to commit to and follow.
    #[arg(long, default_value = "main")]
    revision: String,
    /// Namespace Capstan runs in.
    #[arg(long, short = 'n', default_value = NAMESPACE)]
    namespace: String,
    /// The image the controller and the server run, `REGISTRY/REPOSITORY:TAG` (resolved to its
    /// digest, which the installation is pinned to) or `REGISTRY/REPOSITORY[:TAG]@sha256:DIGEST`.
    #[arg(long)]
    image: String,
    /// Speak plain HTTP to the image's registry (a registry on loopback, say).
    #[arg(long)]
    plain_http: bool,
    /// Replicas of the server.
    #[arg(long, default_value_t = 2)]
    server_replicas: u32,
    /// Replicas of the controller (they share the Applications through Leases).
    #[arg(long, default_value_t = 1)]
    controller_replicas: u32,
    /// User name for the Git repository (with --password-file); stored as a repository Secret so
    /// the controller reads the repository with it too. Without it, a repository Secret already in
    /// the namespace is used, or none.
    #[arg(long, requires = "password_file")]
    username: Option<String>,
    /// File holding the password or token for the Git repository (never on the command line).
    #[arg(long, requires = "username")]
    password_file: Option<PathBuf>,
    /// Print what would be done; commit, install and apply nothing.
    #[arg(long)]
    dry_run: bool,
}

/// The files bootstrap commits, each as the repository-relative path and its content.
struct Files {
    install: (String, String),
    applications: (String, String),
    marker: (String, String),
}

impl Files {
    fn all(&self) -> [&(String, String); 3] {
        [&self.install, &self.applications, &self.marker]
    }
}

/// Bootstrap the selected cluster from `--repo` at `--path`.
pub async fn run(args: BootstrapArgs) -> anyhow::Result<ExitCode> {
    let path = clean_path(&args.path)?;
    capstan_source::check_url(&args.repo, false).map_err(|e| anyhow::anyhow!("--repo: {e}"))?;
    let client = args.kube.client().await?;
    refuse_other_installation(&client, &args.namespace).await?;
    let image = pinned_image(&args.image, args.plain_http).await?;
    let values = objects::Values {
        namespace: args.namespace.clone(),
        image: image.clone(),
        server_replicas: args.server_replicas,
        controller_replicas: args.controller_replicas,
    };
    let install_objects = objects::all(&values);
    // Capstan's namespace is protected from every Application (none may create, adopt or delete
    // it), its own included: bootstrap creates it, Git holds the rest.
    let managed: Vec<Value> = install_objects
        .iter()
        .filter(|o| o["kind"] != "Namespace")
        .cloned()
        .collect();
    let applications = applications(&args.repo, &path, &args.revision, &args.namespace);
    let files = Files {
        install: (
            format!("{path}/capstan/install.yaml"),
            format!(
                "# Capstan's installation, managed by the Application `capstan` (written by `capstan bootstrap`).\n# Upgrade by changing the image below; see docs/install.md.\n{}",
                objects::to_yaml(&managed).context("writing the install objects as YAML")?
            ),
        ),
        applications: (
            format!("{path}/capstan/applications.yaml"),
            format!(
                "# The hub's own Applications (written by `capstan bootstrap`): `capstan` manages Capstan\n# from this directory, `root` every Application under {path}/apps.\n{}",
                objects::to_yaml(&applications).context("writing the Applications as YAML")?
            ),
        ),
        marker: (
            format!("{path}/apps/hub.yaml"),
            format!(
                "# Every manifest in this directory is applied by the Application `root` (app-of-apps): add\n\
                 # the hub's Applications here. This ConfigMap keeps the directory from rendering nothing on a\n\
                 # new hub; a commit that empties the directory is refused by `root` (no allowEmpty), never\n\
                 # taken as a reason to delete every Application.\n\
                 apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: capstan-hub\n  namespace: {}\ndata:\n  apps: {path}/apps\n",
                args.namespace
            ),
        ),
    };
    if args.dry_run {
        outln!("Dry run: nothing is committed, installed or applied.");
        outln!("Image: {image}");
        outln!(
            "Would commit to {} (branch {}), unless the branch has them already:",
            shown(&args.repo),
            args.revision
        );
        for (file, content) in files.all() {
            outln!("  {file} ({} bytes)", content.len());
        }
        outln!(
            "Would install Capstan in namespace {} ({} objects) and apply the Applications capstan and root",
            args.namespace,
            install_objects.len()
        );
        return Ok(ExitCode::SUCCESS);
    }

    // Git first: a repository Capstan cannot write to refuses the bootstrap before the cluster changes.
    let credentials = credentials(&args, &client).await?;
    let outcome = commit(&args, &files, credentials.clone()).await?;
    match &outcome {
        WriteOutcome::Committed { sha, .. } => outln!("Git: committed {sha} to {}", args.revision),
        WriteOutcome::Unchanged => {
            // Git is the truth: the CLI's objects (another image, another version's objects)
            // never overwrite what the repository holds.
            outln!(
                "Git: the branch {} has the files already; left as they are",
                args.revision
            );
            if installed(&client, &args.namespace).await? {
                outln!(
                    "Capstan is installed in namespace {} and manages itself from Git: nothing to do (upgrade by a commit to {})",
                    args.namespace,
                    files.install.0
                );
                return Ok(ExitCode::SUCCESS);
            }
            bail!(
                "the repository already holds {} but this cluster has no Capstan in namespace {}: install it from that file \
                 (kubectl apply --server-side -f it, then kubectl apply -f {}), or bootstrap another --path",
                files.install.0,
                args.namespace,
                files.applications.0
            );
        }
    }
    install::install(
        &client,
        &args.namespace,
        &install_objects,
        capstan_compare::FIELD_MANAGER,
    )
    .await?;
    if let (Some(username), Some(password)) = (&args.username, &credentials.password) {
        store_credentials(&client, &args.namespace, &args.repo, username, password).await?;
    }
    warn_about_default_project(&client, &args.namespace).await;
    let pp = PatchParams::apply(capstan_compare::FIELD_MANAGER).force();
    let apps: Api<capstan_api::Application> = Api::namespaced(client.clone(), &args.namespace);
    for application in &applications {
        let name = application["metadata"]["name"].as_str().unwrap_or_default();
        apps.patch(name, &pp, &Patch::Apply(application))
            .await
            .map_err(|e| anyhow::anyhow!("{}", describe(&e)))
            .with_context(|| format!("applying Application {name}"))?;
        outln!("Application {name} applied");
    }
    outln!(
        "Bootstrapped: Capstan manages itself from {} at {path}/capstan; add Applications under {path}/apps",
        shown(&args.repo)
    );
    Ok(ExitCode::SUCCESS)
}

/// `path` as a clean repository-relative directory: no leading or trailing `/`, no `.` or `..`
/// segment, nothing under `.git`.
fn clean_path(path: &str) -> anyhow::Result<String> {
    let trimmed = path.trim_end_matches('/');
    let refuse = |why: &str| anyhow::anyhow!("--path {path:?}: {why}");
    if trimmed.is_empty() {
        return Err(refuse("name a directory of the repository, e.g. clusters/hub"));
    }
    if trimmed.starts_with('/') {
        return Err(refuse("must be relative to the repository's root"));
    }
    for segment in trimmed.split('/') {
        match segment {
            "" => return Err(refuse("has an empty segment")),
            "." | ".." => return Err(refuse("must stay inside the repository (no `.` or `..`)")),
            ".git" => return Err(refuse("must not be under .git")),
            s if s.chars().any(|c| c.is_control() || c == '\\') => {
                return Err(refuse("has a control character or a backslash"));
            }
            _ => {}
        }
    }
    Ok(trimmed.to_string())
}

/// Refuse a cluster where a Capstan controller runs in another namespace than `namespace`: two
/// installations would both claim the cluster's Applications (installing into several namespaces
/// on purpose is `capstan install -n`).
async fn refuse_other_installation(client: &Client, namespace: &str) -> anyhow::Result<()> {
    let deployments: Api<Deployment> = Api::all(client.clone());
    let selector = format!(
        "app.kubernetes.io/name={},app.kubernetes.io/part-of=capstan",
        objects::CONTROLLER
    );
    let found = deployments
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| anyhow::anyhow!("{}", describe(&e)))
        .context("looking for a Capstan already installed")?;
    if let Some(other) = found.items.iter().find(|d| d.namespace().as_deref() != Some(namespace)) {
        bail!(
            "another Capstan is installed in this cluster: Deployment {}/{}; bootstrap it there with -n {} or remove it first",
            other.namespace().unwrap_or_default(),
            other.name_any(),
            other.namespace().unwrap_or_default()
        );
    }
    Ok(())
}

/// Whether a Capstan controller is installed in `namespace`.
async fn installed(client: &Client, namespace: &str) -> anyhow::Result<bool> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    Ok(deployments
        .get_opt(objects::CONTROLLER)
        .await
        .map_err(|e| anyhow::anyhow!("{}", describe(&e)))
        .context("looking for Capstan's controller")?
        .is_some())
}

/// The Applications `capstan` and `root` belong to project `default`: say so when an AppProject of
/// that name exists, since it must then permit them (Capstan's namespace and `capstan.dev` kinds
/// named literally, every cluster-scoped kind of the install source); a controller started with
/// `--deny-implicit-default-project` needs that AppProject too.
async fn warn_about_default_project(client: &Client, namespace: &str) {
    let projects: Api<capstan_api::AppProject> = Api::namespaced(client.clone(), namespace);
    if let Ok(Some(_)) = projects.get_opt(capstan_api::project::DEFAULT_PROJECT).await {
        outln!(
            "note: AppProject {namespace}/default exists; it must permit the Applications capstan and root \
             (destination namespace {namespace} and group capstan.dev named literally, cluster-scoped kinds) or they will not sync"
        );
    }
}

/// `image` pinned to its digest: kept when it has one, else its tag resolved at the registry.
async fn pinned_image(image: &str, plain_http: bool) -> anyhow::Result<String> {
    let refuse = |why: String| anyhow::anyhow!("--image {image:?}: {why}");
    let (name, digest) = match image.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (image, None),
    };
    let (repository, tag) = match name.rsplit_once(':').filter(|(_, t)| !t.contains('/')) {
        Some((repository, tag)) => (repository, Some(tag)),
        None => (name, None),
    };
    let repo = ImageRepository::parse(repository)
        .map_err(|e| refuse(e.to_string()))?
        .with_plain_http(plain_http);
    if let Some(digest) = digest {
        let hex = digest.strip_prefix("sha256:").unwrap_or_default();
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            return Err(refuse("the digest must be sha256: and 64 lower-case hex digits".into()));
        }
        return Ok(image.to_string());
    }
    let Some(tag) = tag else {
        return Err(refuse("name a tag (REPOSITORY:TAG) or a digest (@sha256:…)".into()));
    };
    let client = ImageClient::new(std::time::Duration::from_secs(30));
    let digest = client
        .digest(&repo, tag, &Credentials::none())
        .await
        .map_err(|e| refuse(format!("cannot resolve the tag to a digest: {e}")))?;
    Ok(format!("{repository}:{tag}@{digest}"))
}

/// The Applications `capstan` (Capstan's own installation) and `root` (app-of-apps over `apps`).
fn applications(repo: &str, path: &str, revision: &str, namespace: &str) -> Vec<Value> {
    let application = |name: &str, dir: &str, automated: Value| {
        json!({
            "apiVersion": "capstan.dev/v1alpha1",
            "kind": "Application",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "capstan"}},
            "spec": {
                "project": "default",
                "source": {"repoURL": repo, "targetRevision": revision, "path": format!("{path}/{dir}")},
                "destination": {"server": capstan_api::cluster::IN_CLUSTER_SERVER, "namespace": namespace},
                "syncPolicy": {"automated": automated},
            },
        })
    };
    vec![
        // Never prunes: an object dropped from install.yaml by mistake (a CRD, with every
        // Application in it) stays until a person deletes it.
        application("capstan", "capstan", json!({"prune": false, "selfHeal": true})),
        // No `allowEmpty`: a commit that empties `apps` is an error shown on `root`, not the
        // deletion of every Application of the hub.
        application("root", "apps", json!({"prune": true, "selfHeal": true})),
    ]
}

/// The credentials of the first commit: those given (`--username`, `--password-file`), else the
/// repository Secret for the URL in the namespace (when it exists), else none.
async fn credentials(args: &BootstrapArgs, client: &Client) -> anyhow::Result<Credentials> {
    if let (Some(username), Some(file)) = (&args.username, &args.password_file) {
        let password =
            std::fs::read_to_string(file).with_context(|| format!("reading --password-file {}", file.display()))?;
        let password = password.trim_end_matches(['\r', '\n']).to_string();
        if password.is_empty() {
            bail!("--password-file {} is empty", file.display());
        }
        return Ok(Credentials {
            username: Some(username.clone()),
            password: Some(password),
            ..Credentials::none()
        });
    }
    Ok(
        capstan_cluster::repository::for_repo(client, &args.namespace, &args.repo)
            .await
            .unwrap_or_else(Credentials::none),
    )
}

/// Commit the files the branch does not have.
async fn commit(args: &BootstrapArgs, files: &Files, credentials: Credentials) -> anyhow::Result<WriteOutcome> {
    let edits = files
        .all()
        .into_iter()
        .map(|(path, content)| Edit {
            path: path.clone(),
            change: Change::CreateFile {
                content: content.clone(),
            },
        })
        .collect();
    GitWriter::new(WriterConfig::new("Capstan bootstrap", "bootstrap@capstan.invalid"))
        .commit(WriteRequest {
            repo_url: args.repo.clone(),
            credentials,
            branch: args.revision.clone(),
            push_branch: None,
            message: format!(
                "capstan bootstrap: Capstan's installation and the hub's Applications under {}",
                args.path.trim_end_matches('/')
            ),
            edits,
        })
        .await
        .with_context(|| format!("committing to {}", shown(&args.repo)))
}

/// Store the credentials given to bootstrap as a repository Secret, so the controller reads the
/// repository with them.
async fn store_credentials(
    client: &Client,
    namespace: &str,
    repo: &str,
    username: &str,
    password: &str,
) -> anyhow::Result<()> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": REPO_SECRET, "namespace": namespace, "labels": {SECRET_TYPE_LABEL: "repository"}},
        "type": "Opaque",
        "stringData": {"url": repo, "username": username, "password": password},
    });
    secrets
        .patch(REPO_SECRET, &PatchParams::apply(MANAGER).force(), &Patch::Apply(secret))
        .await
        .map_err(|e| anyhow::anyhow!("{}", describe(&e)))
        .with_context(|| format!("storing the repository credentials in Secret {REPO_SECRET}"))?;
    outln!("Secret {REPO_SECRET} applied (the repository's credentials)");
    Ok(())
}

/// `url` as it may be shown: any password in it masked.
fn shown(url: &str) -> String {
    capstan_source::redact(url, &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_repository() {
        assert_eq!(clean_path("clusters/hub").unwrap(), "clusters/hub");
        assert_eq!(clean_path("clusters/hub/").unwrap(), "clusters/hub");
        for bad in [
            "",
            "/",
            "/etc",
            "../x",
            "a/../../b",
            "a/./b",
            ".git/hooks",
            "a//b",
            "a\\b",
            "a\nb",
        ] {
            assert!(clean_path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_capstan_application_never_prunes_and_root_never_syncs_an_empty_directory() {
        let apps = applications("https://git.example/hub.git", "clusters/hub", "main", "capstan");
        assert_eq!(apps[0]["metadata"]["name"], "capstan");
        assert_eq!(apps[0]["spec"]["source"]["path"], "clusters/hub/capstan");
        assert_eq!(apps[0]["spec"]["syncPolicy"]["automated"]["prune"], false);
        assert_eq!(apps[1]["spec"]["source"]["path"], "clusters/hub/apps");
        assert_eq!(apps[1]["spec"]["syncPolicy"]["automated"].get("allowEmpty"), None);
    }
}

//! `capstan appset generate FILE`: the Applications an ApplicationSet manifest would produce, without
//! a Kubernetes cluster — the tool for reviewing ApplicationSet changes in pull requests.
//!
//! Git generators read their repositories through a throwaway `capstan_source::RepoCache` (public,
//! `file://`, `git://` and `http(s)://` URLs, no credentials); the clusters generator sees `in-cluster`
//! plus the clusters of `--clusters FILE`. Generation itself is `capstan_appset::generate`, the code the
//! ApplicationSet controller runs, so the output is what the controller would create.

use crate::output::out;
use std::collections::HashSet;
use std::collections::hash_map::Entry;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use capstan_api::{Application, ApplicationSet};
use capstan_appset::{ClusterInfo, GitSource, Inputs};
use capstan_source::{Credentials, RepoCache};
use serde_json::Value;

/// Print the Applications an ApplicationSet manifest would produce, without a cluster (for review).
#[derive(Debug, clap::Args)]
pub struct GenerateArgs {
    /// ApplicationSet manifest (YAML or JSON, one or more documents); `-` reads standard input.
    #[arg(value_name = "FILE")]
    pub file: String,
    /// YAML (or JSON) list of clusters the clusters generator sees besides `in-cluster`:
    /// `[{name, server, labels: {..}, annotations: {..}}]`.
    #[arg(long, value_name = "FILE")]
    pub clusters: Option<PathBuf>,
    /// Output format: a multi-document YAML stream, or a JSON list.
    #[arg(short, long, value_enum, default_value = "yaml")]
    pub output: GenerateOutput,
    /// Time limit of each git operation, in seconds.
    #[arg(long, default_value = "120", value_name = "SECONDS", value_parser = super::seconds)]
    pub git_timeout: u64,
}

/// Output format of `appset generate`.
#[derive(Debug, Clone, Copy, clap::ValueEnum, PartialEq, Eq)]
pub enum GenerateOutput {
    /// Multi-document YAML stream.
    Yaml,
    /// JSON list.
    Json,
}

/// Run `capstan appset generate`: print the Applications, or `error: FILE: WHAT` and exit 1.
pub async fn run(args: GenerateArgs) -> anyhow::Result<ExitCode> {
    match generate(&args).await {
        Ok(apps) => {
            let text = match args.output {
                GenerateOutput::Json => format!("{}\n", serde_json::to_string_pretty(&apps)?),
                GenerateOutput::Yaml => {
                    let mut out = String::new();
                    for app in &apps {
                        out.push_str("---\n");
                        out.push_str(&serde_saphyr::to_string(app)?);
                    }
                    out
                }
            };
            out!("{text}");
            if apps.is_empty() {
                eprintln!("{}: the generators produce no Application", display(&args.file));
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(message) => {
            eprintln!("error: {message}");
            Ok(ExitCode::from(1))
        }
    }
}

fn display(file: &str) -> String {
    if file == "-" {
        "<stdin>".into()
    } else {
        file.to_string()
    }
}

/// Everything the command does except printing; the error is `FILE: what and where`.
async fn generate(args: &GenerateArgs) -> Result<Vec<Application>, String> {
    let name = display(&args.file);
    let text = if args.file == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| format!("{name}: cannot read: {e}"))?;
        text
    } else {
        std::fs::read_to_string(&args.file).map_err(|e| format!("{name}: cannot read: {e}"))?
    };
    let sets = parse_sets(&text).map_err(|e| format!("{name}: {e}"))?;
    let clusters = match &args.clusters {
        Some(path) => read_clusters(path).map_err(|e| format!("{}: {e}", path.display()))?,
        None => Vec::new(),
    };

    let cache_dir = TempDir::new().map_err(|e| format!("cannot create a temporary directory: {e}"))?;
    // This command runs as its user, on their machine, with their own rights: local repositories are
    // theirs to read (unlike in the shared controller, where they are off by default).
    let cache = RepoCache::new(
        cache_dir.path(),
        Duration::from_secs(args.git_timeout.max(1)),
        Duration::from_secs(3600),
    )
    .with_local_repositories(true);
    let mut inputs = Inputs {
        clusters,
        ..Default::default()
    };
    let several = sets.len() > 1;
    // Checkouts stay on disk while generators read them.
    let mut leases = Vec::new();
    let mut apps = Vec::new();
    for set in &sets {
        let whose = match (several, set.metadata.name.as_deref()) {
            (true, Some(set_name)) => format!("{name}: ApplicationSet {set_name:?}"),
            _ => name.clone(),
        };
        let sources = capstan_appset::git_sources(&set.spec).map_err(|e| format!("{whose}: {e}"))?;
        for source in sources {
            if let Entry::Vacant(slot) = inputs.checkouts.entry(source) {
                let tree = fetch(&cache, slot.key()).await.map_err(|e| format!("{whose}: {e}"))?;
                slot.insert(tree.to_path_buf());
                leases.push(tree);
            }
        }
        // Sources known only during generation (a matrix child using the other child's
        // parameters in its repoURL or revision) are reported missing one at a time.
        let mut tried = HashSet::new();
        let generated = loop {
            match capstan_appset::generate(set, &inputs) {
                Err(err) => match err.missing_git_source() {
                    Some(source) if !inputs.checkouts.contains_key(source) && tried.insert(source.clone()) => {
                        let source = source.clone();
                        let tree = fetch(&cache, &source).await.map_err(|e| format!("{whose}: {e}"))?;
                        inputs.checkouts.insert(source, tree.to_path_buf());
                        leases.push(tree);
                    }
                    _ => break Err(format!("{whose}: {err}")),
                },
                Ok(generated) => break Ok(generated),
            }
        }?;
        apps.extend(generated);
    }
    Ok(apps)
}

/// Resolve and check out one source.
async fn fetch(cache: &RepoCache, source: &GitSource) -> Result<capstan_source::Checkout, String> {
    let place = format!("repository {} at revision {}", source.repo_url, source.revision);
    let resolved = cache
        .resolve(&source.repo_url, &source.revision, &Credentials::none(), false)
        .await
        .map_err(|e| format!("{place}: {e}"))?;
    cache
        .checkout(&source.repo_url, &resolved.sha)
        .await
        .map_err(|e| format!("{place}: {e}"))
}

fn yaml_options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    options.legacy_octal_numbers = true;
    options.with_snippet = false;
    options
}

fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The ApplicationSets of a YAML/JSON stream (`argoproj.io` manifests are accepted as they are).
fn parse_sets(text: &str) -> Result<Vec<ApplicationSet>, String> {
    let docs: Vec<Value> = serde_saphyr::from_str_multiple_with_options(text, yaml_options())
        .map_err(|e| format!("not valid YAML or JSON: {}", one_line(&e.to_string())))?;
    let mut sets = Vec::new();
    for (i, mut doc) in docs.into_iter().enumerate().filter(|(_, d)| !d.is_null()) {
        let at = format!("document {}", i + 1);
        let Some(map) = doc.as_object_mut() else {
            return Err(format!("{at}: not an object"));
        };
        match map.get("kind").and_then(Value::as_str) {
            Some("ApplicationSet") => {}
            Some(kind) => return Err(format!("{at}: kind {kind:?} is not ApplicationSet")),
            None => return Err(format!("{at}: no kind (expected ApplicationSet)")),
        }
        let api_version = format!("{}/{}", capstan_api::GROUP, capstan_api::VERSION);
        map.insert("apiVersion".into(), Value::String(api_version));
        let set: ApplicationSet =
            serde_json::from_value(doc).map_err(|e| format!("{at}: not a valid ApplicationSet: {e}"))?;
        sets.push(set);
    }
    if sets.is_empty() {
        return Err("no ApplicationSet in the file".into());
    }
    Ok(sets)
}

/// The `--clusters` file: a list of `{name, server, labels, annotations}`.
fn read_clusters(path: &Path) -> Result<Vec<ClusterInfo>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    let docs: Vec<Value> = serde_saphyr::from_str_multiple_with_options(&text, yaml_options())
        .map_err(|e| format!("not valid YAML or JSON: {}", one_line(&e.to_string())))?;
    let list = match docs.into_iter().filter(|d| !d.is_null()).collect::<Vec<_>>().as_slice() {
        [] => return Ok(Vec::new()),
        [Value::Array(items)] => items.clone(),
        _ => return Err("expected one list of clusters ({name, server, labels, annotations})".into()),
    };
    let mut clusters = Vec::new();
    for (i, item) in list.into_iter().enumerate() {
        let cluster: ClusterInfo =
            serde_json::from_value(item).map_err(|e| format!("cluster {i}: not a valid cluster: {e}"))?;
        if cluster.name.trim().is_empty() {
            return Err(format!("cluster {i}: name is empty"));
        }
        if clusters.iter().any(|c: &ClusterInfo| c.name == cluster.name) {
            return Err(format!("cluster {i}: name {:?} is listed twice", cluster.name));
        }
        clusters.push(cluster);
    }
    Ok(clusters)
}

/// A directory removed when dropped (the git cache of one run).
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> std::io::Result<Self> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let path = std::env::temp_dir().join(format!("capstan-appset-generate-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path)?;
        Ok(Self(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

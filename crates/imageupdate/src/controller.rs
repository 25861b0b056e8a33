//! The image update loop. It watches the `ImageUpdater`s of Capstan's namespace (a kube-runtime
//! reflector, as the Application and ApplicationSet controllers do) and checks those that are due:
//! their interval has passed since this process last checked them, or their `capstan.dev/check`
//! annotation (set by a registry notification) changed — a change the watch delivers at once. It
//! sleeps until the next updater is due or the watch says something changed, never less than
//! [`Config::tick`] between two rounds. For each due updater, the registry's newest tag by policy is
//! compared with the value the file holds at the branch head; the changes of one round are committed
//! together, one commit per repository and branch, through the Git writer (credentials from the
//! repository Secret, bounded retries, never a force-push), and the Applications and
//! ApplicationSets reading that repository are refreshed at once. An updater whose file cannot be
//! edited is left out of its batch with its own error, and the others are committed without it.
//! Status says what was chosen, skipped, committed, or why not.
//!
//! Every updater belongs to an AppProject (`spec.project`, required unless `default` is the
//! implicit project that allows everything): the project's `sourceRepos` must permit the repository
//! and one of its `sourceRepoPaths` entries the file and the branch pushed to, checked before the
//! registry or the repository is read.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use capstan_api::RepoUrl;
use capstan_api::image_updater::{CHECK_ANNOTATION, ImageUpdater, ImageUpdaterStatus};
use capstan_api::project::DEFAULT_PROJECT;
use capstan_gitwrite::{Change, Edit, GitWriter, KeyPath, WriteOutcome, WriteRequest, WriterConfig};
use capstan_source::{ImageClient, RepoCache};
use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::UpdateError;
use crate::check::{self, Checked};
use crate::current::{self, Target};

/// How the loop runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Capstan's namespace: updaters, repository Secrets and AppProjects.
    pub namespace: String,
    /// Where the Git cache of the loop lives.
    pub cache_dir: PathBuf,
    /// The commits' author.
    pub author_name: String,
    /// The commits' author's email.
    pub author_email: String,
    /// The shortest pause between two rounds, so that changes arriving together (a notification
    /// for several updaters) are checked in one round.
    pub tick: Duration,
    /// The interval of an updater that sets none.
    pub default_interval: Duration,
    /// Whether `file://` repositories may be written (tests and local playgrounds only).
    pub allow_local_repositories: bool,
    /// Without an AppProject named `default`, the `default` project permits nothing (the operator's
    /// `--deny-implicit-default-project`): every updater must then name a project an operator
    /// created.
    pub deny_implicit_default_project: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            namespace: capstan_api::NAMESPACE.to_string(),
            cache_dir: std::env::temp_dir().join("capstan-imageupdate"),
            author_name: "Capstan".into(),
            author_email: "capstan@localhost".into(),
            tick: Duration::from_secs(1),
            default_interval: Duration::from_secs(60),
            allow_local_repositories: false,
            deny_implicit_default_project: false,
        }
    }
}

/// What a round asks once, however many updaters need it: branch heads and AppProjects.
#[derive(Default)]
struct RoundCache {
    heads: HashMap<(String, String), String>,
    projects: HashMap<String, capstan_api::AppProjectSpec>,
}

/// One updater's planned write.
struct Planned {
    name: String,
    checked: Checked,
    request: Option<WriteRequest>,
}

/// When this process last checked an updater, and the `capstan.dev/check` value it answered then
/// (the watch may deliver the updater again before the status saying so).
#[derive(Debug, Clone)]
struct LastCheck {
    at: Instant,
    check: String,
}

/// Run the loop until `shutdown` resolves.
pub async fn run(
    client: Client,
    config: Config,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), UpdateError> {
    let api: Api<ImageUpdater> = Api::namespaced(client.clone(), &config.namespace);
    let repos = RepoCache::new(
        config.cache_dir.join("imageupdate"),
        Duration::from_secs(120),
        Duration::ZERO,
    )
    .with_local_repositories(config.allow_local_repositories);
    let mut writer_config = WriterConfig::new(config.author_name.clone(), config.author_email.clone());
    writer_config.allow_local = config.allow_local_repositories;
    let writer = GitWriter::new(writer_config);
    let images = check::client();
    let mut last_checked: HashMap<String, LastCheck> = HashMap::new();

    let (store, store_writer) = reflector::store();
    // The watcher retries with backoff on its own (the CRD not installed yet, the API server away);
    // the loop says so once, not at every retry.
    let mut events =
        std::pin::pin!(reflector(store_writer, watcher(api.clone(), watcher::Config::default())).default_backoff());
    let mut failing = false;
    let mut last_round: Option<Instant> = None;
    tokio::pin!(shutdown);
    loop {
        let updaters = store.state();
        // Forget updaters that are gone (one set per round: the loop runs on every watch event).
        let present: std::collections::HashSet<String> = updaters.iter().map(|u| u.name_any()).collect();
        last_checked.retain(|name, _| present.contains(name));
        let now = Instant::now();
        let rested = last_round.is_none_or(|t| now.duration_since(t) >= config.tick);
        let due: Vec<ImageUpdater> = updaters
            .iter()
            .filter(|u| is_due(u, last_checked.get(&u.name_any()), config.default_interval, now))
            .map(|u| (**u).clone())
            .collect();
        if !due.is_empty() && rested {
            for u in &due {
                let check = u.annotations().get(CHECK_ANNOTATION).cloned().unwrap_or_default();
                last_checked.insert(
                    u.name_any(),
                    LastCheck {
                        at: Instant::now(),
                        check,
                    },
                );
            }
            round(&client, &config, &api, &repos, &writer, &images, due).await;
            last_round = Some(Instant::now());
            continue;
        }
        // Nothing to do before the next updater is due (or the pause between rounds ends), unless the
        // watch brings a change first.
        let wake = if due.is_empty() {
            updaters
                .iter()
                .filter_map(|u| next_due(u, last_checked.get(&u.name_any()), config.default_interval))
                .min()
        } else {
            last_round.map(|t| t + config.tick)
        };
        let sleep = tokio::time::sleep_until(wake.unwrap_or(now + Duration::from_secs(3600)).into());
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            _ = sleep => {}
            event = events.next() => match event {
                Some(Ok(_)) => {
                    if failing {
                        tracing::info!("watching ImageUpdaters works again");
                    }
                    failing = false;
                }
                Some(Err(e)) => {
                    if !failing {
                        tracing::warn!(error = %e, "cannot watch ImageUpdaters (is the CRD installed? run `capstan install`)");
                    }
                    failing = true;
                }
                None => return Ok(()),
            },
        }
    }
}

/// The updater's interval (at least 5 s).
fn interval(u: &ImageUpdater, default_interval: Duration) -> Duration {
    u.spec
        .interval_seconds
        .map(|s| Duration::from_secs(s.max(5)))
        .unwrap_or(default_interval)
}

/// Whether `u` must be checked now: never checked by this process, its interval passed, or a
/// registry notification asked (a `capstan.dev/check` value neither its status nor this process has
/// answered).
fn is_due(u: &ImageUpdater, last: Option<&LastCheck>, default_interval: Duration, now: Instant) -> bool {
    let check = u.annotations().get(CHECK_ANNOTATION).cloned().unwrap_or_default();
    let observed = u.status.as_ref().map(|s| s.observed_check.as_str()).unwrap_or_default();
    if !check.is_empty() && check != observed && last.is_none_or(|l| l.check != check) {
        return true;
    }
    last.is_none_or(|l| now.duration_since(l.at) >= interval(u, default_interval))
}

/// When `u`'s interval next ends (None when it was never checked: it is due now).
fn next_due(u: &ImageUpdater, last: Option<&LastCheck>, default_interval: Duration) -> Option<Instant> {
    last.map(|l| l.at + interval(u, default_interval))
}

/// Check every due updater, commit the changes per repository and branch, record status.
async fn round(
    client: &Client,
    config: &Config,
    api: &Api<ImageUpdater>,
    repos: &RepoCache,
    writer: &GitWriter,
    images: &ImageClient,
    due: Vec<ImageUpdater>,
) {
    let mut statuses: BTreeMap<String, ImageUpdaterStatus> = BTreeMap::new();
    let mut cache = RoundCache::default();
    let mut groups: BTreeMap<(String, String, String), Vec<Planned>> = BTreeMap::new();
    for u in &due {
        let name = u.name_any();
        let mut status = u.status.clone().unwrap_or_default();
        status.last_checked = k8s_openapi::jiff::Timestamp::now().to_string();
        status.observed_check = u.annotations().get(CHECK_ANNOTATION).cloned().unwrap_or_default();
        match plan(client, config, repos, images, &mut cache, u).await {
            Ok(planned) => {
                status.latest_tag = planned.checked.tag.clone();
                status.skipped = planned.checked.skipped.clone();
                status.error.clear();
                if let Some(request) = &planned.request {
                    let key = (
                        request.repo_url.clone(),
                        request.branch.clone(),
                        request.push_branch.clone().unwrap_or_default(),
                    );
                    groups.entry(key).or_default().push(planned);
                }
            }
            Err(e) => {
                tracing::info!(updater = %name, error = %e, "image update check failed");
                status.error = e.to_string();
            }
        }
        statuses.insert(name, status);
    }
    for ((repo, branch, _), planned) in groups {
        let (outcome, refused) = commit_isolated(writer, &planned).await;
        // The writer accepted the URL, so it parses.
        if let Some(Ok(WriteOutcome::Committed { .. })) = &outcome
            && let Ok(url) = RepoUrl::parse(&repo)
        {
            capstan_kube::refresh_readers(client, &config.namespace, &url).await;
        }
        for p in &planned {
            let Some(status) = statuses.get_mut(&p.name) else {
                continue;
            };
            if let Some(error) = refused.get(&p.name) {
                tracing::info!(updater = %p.name, %repo, %branch, %error, "image update not committed");
                status.error = format!("writing to Git: {error}");
                continue;
            }
            match &outcome {
                Some(Ok(WriteOutcome::Committed { sha, .. })) => {
                    tracing::info!(updater = %p.name, %repo, %branch, commit = %sha, value = %p.checked.value, "image update committed");
                    status.last_commit = sha.clone();
                }
                Some(Ok(WriteOutcome::Unchanged)) | None => {}
                Some(Err(e)) => status.error = format!("writing to Git: {e}"),
            }
        }
    }
    for (name, status) in statuses {
        // Every field, empty ones as null: a merge patch would otherwise keep an old error.
        let empty_as_null = |s: &str| {
            if s.is_empty() {
                serde_json::Value::Null
            } else {
                json!(s)
            }
        };
        let patch = json!({"status": {
            "latestTag": empty_as_null(&status.latest_tag),
            "lastCommit": empty_as_null(&status.last_commit),
            "lastChecked": empty_as_null(&status.last_checked),
            "observedCheck": empty_as_null(&status.observed_check),
            "skipped": if status.skipped.is_empty() { serde_json::Value::Null } else { json!(status.skipped) },
            "error": empty_as_null(&status.error),
        }});
        if let Err(e) = api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(updater = %name, error = %e, "recording ImageUpdater status");
        }
    }
}

/// Commit the planned writes of one repository and branch as one commit, isolating the updaters
/// whose file cannot be edited: when the commit fails on one file (it cannot be edited, a key or
/// the file is missing, an unsafe path), the updaters writing that file are left out with that
/// error and the others are committed together again — one team's file never fails another
/// team's update. Returns the outcome of the last commit tried (`None` when every updater was left
/// out) and the errors of those left out, by updater.
async fn commit_isolated(
    writer: &GitWriter,
    planned: &[Planned],
) -> (
    Option<Result<WriteOutcome, capstan_gitwrite::WriteError>>,
    HashMap<String, String>,
) {
    let mut pending: Vec<&Planned> = planned.iter().filter(|p| p.request.is_some()).collect();
    let mut refused = HashMap::new();
    // Every pass leaves at least one updater out, or ends.
    loop {
        let mut requests: Vec<WriteRequest> = pending.iter().filter_map(|p| p.request.clone()).collect();
        let outcome = match (requests.pop(), requests.is_empty()) {
            (Some(only), true) => writer.commit(only).await,
            (Some(last), false) => {
                requests.push(last);
                writer.commit_batch(requests).await
            }
            (None, _) => return (None, refused),
        };
        let path = match &outcome {
            Err(error) if pending.len() > 1 => failed_file(error).map(str::to_string),
            _ => None,
        };
        let writes = |p: &Planned, path: &str| {
            p.request
                .as_ref()
                .is_some_and(|r| r.edits.iter().any(|e| e.path == path))
        };
        let Some(path) = path.filter(|path| pending.iter().any(|p| writes(p, path))) else {
            return (Some(outcome), refused);
        };
        let message = outcome.err().map(|e| e.to_string()).unwrap_or_default();
        let (out, keep): (Vec<&Planned>, Vec<&Planned>) = pending.into_iter().partition(|p| writes(p, &path));
        for p in out {
            refused.insert(p.name.clone(), message.clone());
        }
        pending = keep;
    }
}

/// The file a write error is about, when it is one file's fault (the others can still be written).
fn failed_file(error: &capstan_gitwrite::WriteError) -> Option<&str> {
    use capstan_gitwrite::WriteError as E;
    match error {
        E::UnsafePath { path, .. }
        | E::MissingFile { path }
        | E::MissingKey { path, .. }
        | E::CannotEdit { path, .. } => Some(path),
        _ => None,
    }
}

/// Check one updater and, if the file holds another value, the write that would change it.
async fn plan(
    client: &Client,
    config: &Config,
    repos: &RepoCache,
    images: &ImageClient,
    cache: &mut RoundCache,
    u: &ImageUpdater,
) -> Result<Planned, UpdateError> {
    let spec = &u.spec;
    let write = &spec.write;
    let target = match (write.key.is_empty(), write.kustomize_image.is_empty()) {
        (false, true) => {
            let key: KeyPath = write
                .key
                .parse()
                .map_err(|e: capstan_gitwrite::WriteError| UpdateError::Spec(format!("spec.write.key: {e}")))?;
            Target::Key(key)
        }
        (true, false) => Target::KustomizeImage(write.kustomize_image.clone()),
        _ => {
            return Err(UpdateError::Spec(
                "spec.write must set exactly one of key and kustomizeImage".into(),
            ));
        }
    };
    let branch = if write.branch.is_empty() { "main" } else { &write.branch };
    // The project decides which repository, file and branch the updater may write.
    let project_name = if spec.project.is_empty() {
        DEFAULT_PROJECT
    } else {
        &spec.project
    };
    if !cache.projects.contains_key(project_name) {
        let found = project_spec(client, &config.namespace, project_name).await?;
        let (_, rules) = capstan_project::resolve(project_name, found, config.deny_implicit_default_project)
            .map_err(|e| UpdateError::Spec(format!("spec.project: {e} in namespace {:?}", config.namespace)))?;
        cache.projects.insert(project_name.to_string(), rules);
    }
    let Some(project) = cache.projects.get(project_name) else {
        return Err(UpdateError::Spec(format!(
            "spec.project: AppProject {project_name:?} not read"
        )));
    };
    if spec.project.is_empty() && !capstan_project::is_implicit_default(project_name, project) {
        return Err(UpdateError::Spec(
            "spec.project is required: the `default` project is not the implicit one that allows everything (an \
             AppProject named default exists, or the operator denies the implicit one), so every ImageUpdater must \
             name the AppProject it belongs to"
                .into(),
        ));
    }
    let pushed = if write.push_branch.is_empty() {
        branch
    } else {
        &write.push_branch
    };
    capstan_project::check_write(
        project_name,
        project,
        &capstan_project::WriteTarget {
            repo_url: &write.repo_url,
            path: &write.path,
            branch: pushed,
        },
    )?;
    let checked = check::check(client, &config.namespace, images, spec).await?;
    let creds = capstan_cluster::repository::for_repo(client, &config.namespace, &write.repo_url)
        .await
        .unwrap_or_default();
    let head_key = (write.repo_url.clone(), branch.to_string());
    let sha = match cache.heads.get(&head_key) {
        Some(sha) => sha.clone(),
        None => {
            let sha = current::head(repos, &write.repo_url, branch, &creds).await?;
            cache.heads.insert(head_key, sha.clone());
            sha
        }
    };
    let now = current::value(repos, &write.repo_url, &sha, &write.path, &target).await?;
    let request = (now.as_deref() != Some(checked.value.as_str())).then(|| {
        let change = match &target {
            Target::Key(key) => Change::SetKey {
                key: key.clone(),
                value: checked.value.clone(),
            },
            Target::KustomizeImage(name) => Change::KustomizeImage {
                name: name.clone(),
                new_tag: checked.value.clone(),
            },
        };
        WriteRequest {
            repo_url: write.repo_url.clone(),
            credentials: creds.clone(),
            branch: branch.to_string(),
            push_branch: (!write.push_branch.is_empty()).then(|| write.push_branch.clone()),
            message: format!(
                "Update image {}: {} → {}",
                spec.image,
                now.as_deref().unwrap_or("(none)"),
                checked.value
            ),
            edits: vec![Edit {
                path: write.path.clone(),
                change,
            }],
        }
    });
    Ok(Planned {
        name: u.name_any(),
        checked,
        request,
    })
}

/// The stored AppProject `name`, if there is one.
async fn project_spec(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<capstan_api::AppProjectSpec>, UpdateError> {
    let api: Api<capstan_api::AppProject> = Api::namespaced(client.clone(), namespace);
    match api.get_opt(name).await {
        Ok(found) => Ok(found.map(|p| p.spec)),
        Err(e) => Err(UpdateError::Spec(format!(
            "reading AppProject {name:?}: {}",
            capstan_kube::describe_kube_error(&e)
        ))),
    }
}

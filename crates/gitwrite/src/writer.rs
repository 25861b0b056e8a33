//! The one component every write to Git goes through: clone, apply the edits, commit, push (never
//! forced); on a rejection fetch the new head, apply the same edits to it and push again, a bounded
//! number of times. Writes to one repository branch are serialized.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use capstan_source::{Credentials, GitCommand, SourceError};
use tracing::{debug, info, warn};

use crate::request::{Change, Edit, WriteOutcome, WriteRequest};
use crate::{WriteError, edit, paths};

/// Called before each push with the attempt number (from 1): lets tests change the remote between
/// the writer's fetch and its push.
pub type BeforePush = Arc<dyn Fn(u32) + Send + Sync>;

/// Held while writing to one repository branch, keyed by (URL, branch).
type BranchLock = Arc<tokio::sync::Mutex<()>>;

/// How a [`GitWriter`] commits and pushes.
#[derive(Clone)]
pub struct WriterConfig {
    /// Author (and committer) name of the commits.
    pub author_name: String,
    /// Author (and committer) e-mail of the commits.
    pub author_email: String,
    /// Push attempts before giving up with [`WriteError::PushRejected`] (at least 1).
    pub max_attempts: u32,
    /// Wait after the first rejection; doubled after each further one.
    pub initial_backoff: Duration,
    /// The longest wait between attempts.
    pub max_backoff: Duration,
    /// Limit for each git command (clone, fetch, push ...).
    pub timeout: Duration,
    /// Whether `file://` repositories may be written (tests and labs).
    pub allow_local: bool,
    /// Test hook, see [`BeforePush`].
    pub before_push: Option<BeforePush>,
}

impl WriterConfig {
    /// The defaults: 5 attempts, 200 ms backoff doubling up to 5 s, 60 s per git command.
    pub fn new(author_name: impl Into<String>, author_email: impl Into<String>) -> Self {
        WriterConfig {
            author_name: author_name.into(),
            author_email: author_email.into(),
            max_attempts: 5,
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
            timeout: Duration::from_secs(60),
            allow_local: false,
            before_push: None,
        }
    }
}

impl fmt::Debug for WriterConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriterConfig")
            .field("author_name", &self.author_name)
            .field("author_email", &self.author_email)
            .field("max_attempts", &self.max_attempts)
            .field("initial_backoff", &self.initial_backoff)
            .field("max_backoff", &self.max_backoff)
            .field("timeout", &self.timeout)
            .field("allow_local", &self.allow_local)
            .field("before_push", &self.before_push.is_some())
            .finish()
    }
}

/// Commits edits to Git repositories. One writer serves any number of requests; requests for the
/// same repository and target branch wait for each other.
#[derive(Debug)]
pub struct GitWriter {
    config: WriterConfig,
    locks: std::sync::Mutex<HashMap<(String, String), BranchLock>>,
}

impl GitWriter {
    /// A writer with `config`.
    pub fn new(config: WriterConfig) -> Self {
        GitWriter {
            config,
            locks: Default::default(),
        }
    }

    /// Apply `request.edits` to `request.branch` and push one commit (to `push_branch` if set).
    pub async fn commit(&self, request: WriteRequest) -> Result<WriteOutcome, WriteError> {
        self.validate(&request)?;
        let lock = self.lock_for(&request.repo_url, request.target_branch());
        let _serialized = lock.lock().await;
        self.write(&request, &request.message, &request.edits).await
    }

    /// Several requests for one repository (same URL, credentials, branch and push branch) as one
    /// commit whose message lists each of them and its changes.
    pub async fn commit_batch(&self, requests: Vec<WriteRequest>) -> Result<WriteOutcome, WriteError> {
        let Some(first) = requests.first() else {
            return Err(WriteError::InvalidRequest("an empty batch".into()));
        };
        for request in &requests {
            self.validate(request)?;
            let same = request.repo_url == first.repo_url
                && request.credentials == first.credentials
                && request.branch == first.branch
                && request.push_branch == first.push_branch;
            if !same {
                return Err(WriteError::InvalidRequest(
                    "a batch must be for one repository, branch and push branch".into(),
                ));
            }
        }
        let message = batch_message(&requests);
        let edits: Vec<Edit> = requests.iter().flat_map(|r| r.edits.iter().cloned()).collect();
        let lock = self.lock_for(&first.repo_url, first.target_branch());
        let _serialized = lock.lock().await;
        self.write(first, &message, &edits).await
    }

    /// The configuration it commits with.
    pub(crate) fn config(&self) -> &WriterConfig {
        &self.config
    }

    fn validate(&self, request: &WriteRequest) -> Result<(), WriteError> {
        validate_identity(&self.config)?;
        capstan_source::check_url(&request.repo_url, self.config.allow_local)?;
        for branch in std::iter::once(&request.branch).chain(&request.push_branch) {
            if !valid_branch(branch) {
                return Err(WriteError::InvalidRequest(format!("{branch:?} is not a branch name")));
            }
        }
        if request.message.trim().is_empty() {
            return Err(WriteError::InvalidRequest("the commit message is empty".into()));
        }
        if request.edits.is_empty() {
            return Err(WriteError::InvalidRequest("no edits".into()));
        }
        Ok(())
    }

    /// The lock for one repository branch (entries nobody holds are dropped on the way).
    pub(crate) fn lock_for(&self, url: &str, branch: &str) -> BranchLock {
        let mut locks = self.locks.lock().unwrap_or_else(PoisonError::into_inner);
        locks.retain(|_, lock| Arc::strong_count(lock) > 1);
        locks.entry((url.to_string(), branch.to_string())).or_default().clone()
    }

    async fn write(&self, request: &WriteRequest, message: &str, edits: &[Edit]) -> Result<WriteOutcome, WriteError> {
        let config = &self.config;
        let target = request.target_branch();
        let dir = tempfile::Builder::new()
            .prefix("capstan-gitwrite-")
            .tempdir()
            .map_err(WriteError::io("creating a checkout directory"))?;
        let repo = Repo {
            dir: dir.path(),
            url: &request.repo_url,
            credentials: &request.credentials,
            config,
        };
        repo.git("preparing a checkout of", &["init", "--quiet"]).await?;
        repo.git(
            "preparing a checkout of",
            &["remote", "add", "origin", &request.repo_url],
        )
        .await?;
        let max_attempts = config.max_attempts.max(1);
        let mut backoff = config.initial_backoff;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let base = if target != request.branch && repo.has_branch(target).await? {
                target
            } else {
                &request.branch
            };
            let head = format!("refs/heads/{base}");
            repo.git(
                "fetching",
                &["fetch", "--quiet", "--no-tags", "--depth", "1", "origin", &head],
            )
            .await?;
            repo.git(
                "checking out",
                &["checkout", "--quiet", "--force", "-B", "capstan-write", "FETCH_HEAD"],
            )
            .await?;
            let (changed, created) = apply_edits(repo.dir, edits)?;
            if !changed {
                info!(url = %request.repo_url, branch = target, "nothing to commit: the files hold the values already");
                return Ok(WriteOutcome::Unchanged);
            }
            if !created.is_empty() {
                // New files are not tracked yet (`commit -a` takes only tracked ones). Their paths
                // are literal (no pathspec magic such as `:(exclude)`), and added even where a
                // .gitignore would skip them.
                let mut add = vec!["--literal-pathspecs", "add", "--force", "--"];
                add.extend(created.iter().map(String::as_str));
                repo.git("committing to", &add).await?;
            }
            let name = format!("user.name={}", config.author_name);
            let email = format!("user.email={}", config.author_email);
            repo.git(
                "committing to",
                &[
                    "-c",
                    &name,
                    "-c",
                    &email,
                    "-c",
                    "commit.gpgsign=false",
                    "commit",
                    "--quiet",
                    "--no-verify",
                    "-a",
                    "-m",
                    message,
                ],
            )
            .await?;
            let sha = repo.git("committing to", &["rev-parse", "HEAD"]).await?;
            if let Some(hook) = &config.before_push {
                hook(attempt);
            }
            let refspec = format!("HEAD:refs/heads/{target}");
            match repo
                .git("pushing to", &["push", "--no-verify", "origin", &refspec])
                .await
            {
                Ok(_) => {
                    info!(url = %request.repo_url, branch = target, %sha, attempt, "pushed");
                    return Ok(WriteOutcome::Committed {
                        sha,
                        attempts: attempt,
                        branch: target.to_string(),
                    });
                }
                Err(err) => {
                    let Some(reason) = rejection(&err) else {
                        return Err(err.into());
                    };
                    if attempt >= max_attempts {
                        warn!(url = %request.repo_url, branch = target, attempt, %reason, "push rejected; giving up");
                        return Err(WriteError::PushRejected {
                            attempts: attempt,
                            last_reason: reason,
                        });
                    }
                    warn!(url = %request.repo_url, branch = target, attempt, %reason, "push rejected; retrying on the new head");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(config.max_backoff);
                }
            }
        }
    }
}

/// Refuse an author name or e-mail that is empty, spans lines or holds `<`/`>`.
pub(crate) fn validate_identity(config: &WriterConfig) -> Result<(), WriteError> {
    let identity = [&config.author_name, &config.author_email];
    if identity
        .iter()
        .any(|v| v.trim().is_empty() || v.contains(|c: char| c.is_control() || c == '<' || c == '>'))
    {
        return Err(WriteError::InvalidRequest(
            "the writer's author name and e-mail must be set, on one line, without < or >".into(),
        ));
    }
    Ok(())
}

/// A checkout and how to run git in it.
pub(crate) struct Repo<'a> {
    pub(crate) dir: &'a Path,
    pub(crate) url: &'a str,
    pub(crate) credentials: &'a Credentials,
    pub(crate) config: &'a WriterConfig,
}

impl Repo<'_> {
    pub(crate) async fn git(&self, operation: &str, args: &[&str]) -> Result<String, SourceError> {
        debug!(url = self.url, ?args, "git");
        let command = GitCommand {
            url: self.url,
            credentials: self.credentials,
            timeout: self.config.timeout,
            operation,
            allow_local: self.config.allow_local,
        };
        let out = command.run(Some(self.dir), args).await?;
        Ok(String::from_utf8_lossy(&out).trim().to_string())
    }

    pub(crate) async fn has_branch(&self, branch: &str) -> Result<bool, SourceError> {
        let head = format!("refs/heads/{branch}");
        let out = self
            .git("listing branches of", &["ls-remote", "--heads", "origin", &head])
            .await?;
        Ok(!out.is_empty())
    }
}

/// Apply `edits` to the checkout at `root`; whether any file changed.
fn apply_edits(root: &Path, edits: &[Edit]) -> Result<(bool, Vec<String>), WriteError> {
    // Several edits to one file compose: each sees the result of the previous ones.
    let mut files: Vec<(PathBuf, String, bool)> = Vec::new();
    let mut created = Vec::new();
    for e in edits {
        if let Change::CreateFile { content } = &e.change {
            if paths::create(root, &e.path, content)? {
                created.push(e.path.clone());
            }
            continue;
        }
        let file = paths::resolve(root, &e.path)?;
        let index = match files.iter().position(|(f, _, _)| *f == file) {
            Some(i) => i,
            None => {
                let size = std::fs::metadata(&file)
                    .map_err(WriteError::io(format!("reading {}", e.path)))?
                    .len();
                if size > paths::MAX_FILE_BYTES {
                    return Err(WriteError::CannotEdit {
                        path: e.path.clone(),
                        key: e.change.target(),
                        reason: format!("the file is larger than {} MiB", paths::MAX_FILE_BYTES / 1024 / 1024),
                    });
                }
                let bytes = std::fs::read(&file).map_err(WriteError::io(format!("reading {}", e.path)))?;
                let text = String::from_utf8(bytes).map_err(|_| WriteError::CannotEdit {
                    path: e.path.clone(),
                    key: e.change.target(),
                    reason: "the file is not UTF-8 text".into(),
                })?;
                files.push((file, text, false));
                files.len() - 1
            }
        };
        let (_, text, changed) = &mut files[index];
        if let Some(new) = edit::apply(&e.path, text, &e.change)? {
            *text = new;
            *changed = true;
        }
    }
    let mut any = !created.is_empty();
    for (file, text, changed) in files.iter().filter(|(_, _, changed)| *changed) {
        std::fs::write(file, text).map_err(WriteError::io(format!("writing {}", file.display())))?;
        any |= changed;
    }
    Ok((any, created))
}

/// git's message if `err` is a push the server refused (not up to date, or a hook's refusal), which
/// another attempt on a fresh head may get through.
pub(crate) fn rejection(err: &SourceError) -> Option<String> {
    match err {
        SourceError::Git { message, .. } if message.contains("[rejected]") || message.contains("[remote rejected]") => {
            Some(message.clone())
        }
        _ => None,
    }
}

/// A commit message for a batch: a subject, then each request's message and changes.
fn batch_message(requests: &[WriteRequest]) -> String {
    if let [only] = requests {
        return only.message.clone();
    }
    let count: usize = requests.iter().map(|r| r.edits.len()).sum();
    let mut message = format!("Update {count} values in {} changes\n", requests.len());
    for request in requests {
        message.push_str(&format!("\n- {}\n", request.message.trim()));
        for e in &request.edits {
            message.push_str(&format!("  {e}\n"));
        }
    }
    message
}

/// Whether `name` is a branch name git accepts (the rules of `git check-ref-format`, checked here to
/// refuse bad names before any git command sees them).
pub(crate) fn valid_branch(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(['-', '/', '.'])
        && !name.ends_with(['/', '.'])
        && !name.ends_with(".lock")
        && !name.contains("..")
        && !name.contains("//")
        && !name.contains("@{")
        && !name.contains("/.")
        && name != "@"
        && !name
            .chars()
            .any(|c| c.is_control() || c.is_whitespace() || "~^:?*[\\".contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(message: &str, edits: usize) -> WriteRequest {
        WriteRequest {
            repo_url: "https://git.example/r.git".into(),
            credentials: Credentials::none(),
            branch: "main".into(),
            push_branch: None,
            message: message.into(),
            edits: (0..edits)
                .map(|i| Edit {
                    path: "values.yaml".into(),
                    change: crate::Change::SetKey {
                        key: format!("k{i}").parse().expect("key"),
                        value: format!("v{i}"),
                    },
                })
                .collect(),
        }
    }

    #[test]
    fn a_batch_message_lists_every_change() {
        assert_eq!(batch_message(&[request("only", 1)]), "only");
        let message = batch_message(&[request("web: 1.2", 1), request("api: 2.0\n\nbody", 2)]);
        assert!(
            message.starts_with("Update 3 values in 2 changes\n\n- web: 1.2\n  values.yaml: k0 = v0\n"),
            "{message}"
        );
        assert!(
            message.contains("- api: 2.0\n\nbody\n  values.yaml: k0 = v0\n  values.yaml: k1 = v1\n"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn requests_are_validated_before_any_git_command() {
        let writer = GitWriter::new(WriterConfig::new("Bot", "bot@example.invalid"));
        let invalid = |r: Result<WriteOutcome, WriteError>| matches!(r, Err(WriteError::InvalidRequest(_)));
        let mut r = request("m", 1);
        r.branch = "a..b".into();
        assert!(invalid(writer.commit(r).await));
        let mut r = request("m", 1);
        r.push_branch = Some("-f".into());
        assert!(invalid(writer.commit(r).await));
        assert!(invalid(writer.commit(request(" ", 1)).await));
        assert!(invalid(writer.commit(request("m", 0)).await));
        assert!(invalid(writer.commit_batch(vec![]).await));
        let mut other = request("m", 1);
        other.repo_url = "https://git.example/other.git".into();
        assert!(invalid(writer.commit_batch(vec![request("m", 1), other]).await));
        let mut r = request("m", 1);
        r.repo_url = "https://user:pw@git.example/r.git".into();
        assert!(matches!(writer.commit(r).await, Err(WriteError::Git(_))));
        let bad_author = GitWriter::new(WriterConfig::new("Bot\nInjected", "bot@example.invalid"));
        assert!(invalid(bad_author.commit(request("m", 1)).await));
    }

    #[test]
    fn branch_names() {
        for ok in ["main", "release/1.2", "capstan/update-image"] {
            assert!(valid_branch(ok), "{ok}");
        }
        for bad in ["", "-f", "a..b", "a b", "x.lock", "a:b", "/x", "x/", "@"] {
            assert!(!valid_branch(bad), "{bad}");
        }
    }
}

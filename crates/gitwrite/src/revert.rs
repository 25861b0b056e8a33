//! Rollback by Git revert: on an Application's branch, one commit reverting — newest first — the
//! commits after a deployed revision that touch the Application's paths, pushed without force and
//! redone on the new head when the push is rejected. Refusals (a conflict, a merge commit in the
//! range, a revision not on the branch, nothing to revert) are [`RevertError`]s and push nothing.

use std::fmt;

use capstan_source::{Credentials, SourceError};
use tracing::{info, warn};

use crate::writer::{GitWriter, Repo, rejection, valid_branch};
use crate::{WriteError, WriterConfig};

/// The longest reason accepted, in characters.
pub const MAX_REASON_CHARS: usize = 1000;

/// The most commits one revert may undo: a longer range is more than a rollback (and more than
/// one command line should carry).
pub const MAX_COMMITS: usize = 200;

/// One revert to make.
#[derive(Debug, Clone)]
pub struct RevertRequest {
    /// The repository.
    pub repo_url: String,
    /// Credentials for it (they need write access).
    pub credentials: Credentials,
    /// The branch to revert on; `HEAD` or empty: the repository's default branch.
    pub branch: String,
    /// Repository-relative paths whose commits are reverted (`""` or `.`: the whole repository).
    pub paths: Vec<String>,
    /// The revision to go back to (a full commit id, 40 or 64 hex digits): commits after it are
    /// reverted, it stays.
    pub base: String,
    /// The Application, for the commit message.
    pub app: String,
    /// The history entry of `base`, for the commit message.
    pub history_id: i64,
    /// Why (the commit message's body; may be empty).
    pub reason: String,
    /// The commit the branch must still point at (an automatic revert of a revision: never also
    /// undo what was pushed after it, a fix perhaps); `None`: every commit after `base`.
    pub expected_head: Option<String>,
}

/// A revert pushed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reverted {
    /// The new commit.
    pub sha: String,
    /// The commits it reverts, newest first.
    pub reverted: Vec<String>,
    /// The branch it was pushed to.
    pub branch: String,
    /// Push attempts it took.
    pub attempts: u32,
}

/// How a [`RevertError`] should be answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevertErrorKind {
    /// The request is unusable (bad commit id, path, reason).
    BadRequest,
    /// The branch's content prevents it: a conflict, or every push rejected.
    Conflict,
    /// Capstan will not revert this (a chart source, several repositories, a merge commit, a
    /// revision not on the branch, nothing to revert).
    Refused,
    /// Git or the filesystem failed.
    Failed,
}

/// Why a revert was not pushed. Nothing is pushed when any of these is returned.
#[derive(Debug, thiserror::Error)]
pub enum RevertError {
    /// The request is unusable.
    #[error("invalid revert request: {0}")]
    InvalidRequest(String),
    /// The branch moved past the commit an automatic revert was decided for.
    #[error("branch {branch} moved to {found} since {expected} was judged: not reverting commits nobody judged")]
    BranchMoved {
        /// The branch.
        branch: String,
        /// The commit the revert was decided for.
        expected: String,
        /// Its head now.
        found: String,
    },
    /// The Application deploys a Helm chart from a chart repository: there is no Git path to revert.
    #[error(
        "the Application's source is the Helm chart {chart:?} (a chart version, not a Git path): roll back without --revert"
    )]
    ChartSource {
        /// The chart.
        chart: String,
    },
    /// The Application's sources come from several repositories: one revert commit cannot cover them.
    #[error(
        "the Application's sources come from several repositories ({repos}): a revert commit can only be made in one"
    )]
    SeveralRepositories {
        /// The repositories, redacted, comma-separated.
        repos: String,
    },
    /// The branch's target revision is not a branch (a tag or a commit): nothing can be pushed to it.
    #[error("target revision {revision:?} is not a branch of the repository")]
    NotABranch {
        /// The target revision.
        revision: String,
    },
    /// The history entry's revision is not an ancestor of the branch head.
    #[error("revision {base} is not an ancestor of the head of branch {branch}: it cannot be returned to by reverting")]
    NotAncestor {
        /// The revision.
        base: String,
        /// The branch.
        branch: String,
    },
    /// A merge commit is in the range: the order to revert in is not known.
    #[error("merge commit(s) {} between {base} and the head of {branch}: Capstan cannot know the order to revert them in", .commits.join(", "))]
    MergeInRange {
        /// The revision.
        base: String,
        /// The branch.
        branch: String,
        /// The merge commits (short ids).
        commits: Vec<String>,
    },
    /// No commit after the revision touches the Application's paths (or their changes are undone).
    #[error("nothing to revert: after {base} on {branch}, no commit changes {} (or their changes cancel out)", .paths.join(", "))]
    NothingToRevert {
        /// The revision.
        base: String,
        /// The branch.
        branch: String,
        /// The paths.
        paths: Vec<String>,
    },
    /// More than [`MAX_COMMITS`] commits would be reverted.
    #[error("{count} commits after {base} change the Application's paths: more than the {max} one revert undoes")]
    TooManyCommits {
        /// The revision.
        base: String,
        /// How many.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A commit to revert also changes files outside the Application's paths: reverting it whole
    /// would undo changes that are not the Application's (another team's, in a shared repository).
    #[error("commit {commit} also changes files outside the Application's paths ({}): revert it by hand", .files.join(", "))]
    OutsidePaths {
        /// The commit (short id).
        commit: String,
        /// The files outside (at most 10).
        files: Vec<String>,
    },
    /// Reverting conflicts with later changes.
    #[error("reverting {} conflicts with later changes in: {}", .commits.join(", "), .files.join(", "))]
    Conflict {
        /// The commits being reverted (short ids).
        commits: Vec<String>,
        /// The conflicting files.
        files: Vec<String>,
    },
    /// Git, the push (rejected every time) or a local file failed.
    #[error(transparent)]
    Write(#[from] WriteError),
}

impl From<SourceError> for RevertError {
    fn from(err: SourceError) -> Self {
        RevertError::Write(WriteError::Git(err))
    }
}

impl RevertError {
    /// How to answer it.
    pub fn kind(&self) -> RevertErrorKind {
        match self {
            RevertError::InvalidRequest(_) | RevertError::Write(WriteError::InvalidRequest(_)) => {
                RevertErrorKind::BadRequest
            }
            RevertError::Conflict { .. } | RevertError::Write(WriteError::PushRejected { .. }) => {
                RevertErrorKind::Conflict
            }
            RevertError::ChartSource { .. }
            | RevertError::SeveralRepositories { .. }
            | RevertError::NotABranch { .. }
            | RevertError::NotAncestor { .. }
            | RevertError::BranchMoved { .. }
            | RevertError::MergeInRange { .. }
            | RevertError::TooManyCommits { .. }
            | RevertError::OutsidePaths { .. }
            | RevertError::NothingToRevert { .. } => RevertErrorKind::Refused,
            RevertError::Write(_) => RevertErrorKind::Failed,
        }
    }
}

/// Whether repository file `file` is `path` or under it (`.` is the whole repository).
fn under(file: &str, path: &str) -> bool {
    let path = path.trim_matches('/');
    path.is_empty() || path == "." || file == path || file.strip_prefix(path).is_some_and(|rest| rest.starts_with('/'))
}

/// Whether `id` is a full commit id (SHA-1 or SHA-256, lower-case hex).
pub fn is_commit_id(id: &str) -> bool {
    matches!(id.len(), 40 | 64) && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The first 12 characters of a commit id.
pub fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

/// `path` as a literal pathspec: `/`-separated, relative, without `..`; `.` for the whole repository.
fn pathspec(path: &str) -> Result<String, RevertError> {
    let trimmed = path.trim().trim_start_matches("./").trim_end_matches('/');
    if trimmed.is_empty() || trimmed == "." {
        return Ok(".".into());
    }
    let bad = |why: &str| RevertError::InvalidRequest(format!("path {path:?}: {why}"));
    if trimmed.starts_with('/') || trimmed.contains('\\') {
        return Err(bad("must be relative to the repository, with /"));
    }
    if trimmed.chars().any(char::is_control) {
        return Err(bad("control characters are not allowed"));
    }
    if trimmed
        .split('/')
        .any(|s| s.is_empty() || s == "." || s == ".." || s == ".git")
    {
        return Err(bad("empty, `.`, `..` and `.git` segments are not allowed"));
    }
    Ok(trimmed.to_string())
}

/// `Revert APP to REV (history N)`, the reason, and the reverted commits.
pub fn message(app: &str, base: &str, history_id: i64, reason: &str, reverted: &[(String, String)]) -> String {
    let mut message = format!("Revert {app} to {} (history {history_id})\n", short(base));
    let reason = reason.trim();
    if !reason.is_empty() {
        message.push_str(&format!("\n{reason}\n"));
    }
    message.push_str("\nReverts:\n");
    for (sha, subject) in reverted {
        message.push_str(&format!("- {} {subject}\n", short(sha)));
    }
    message
}

impl fmt::Display for RevertRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "revert {} to {} (history {})",
            self.app,
            short(&self.base),
            self.history_id
        )
    }
}

impl RevertRequest {
    fn validate(&self, config: &WriterConfig) -> Result<Vec<String>, RevertError> {
        crate::writer::validate_identity(config)?;
        capstan_source::check_url(&self.repo_url, config.allow_local)?;
        if !is_commit_id(&self.base) {
            return Err(RevertError::InvalidRequest(format!(
                "revision {:?} is not a full commit id (40 or 64 hex digits)",
                self.base
            )));
        }
        if !self.branch.is_empty() && self.branch != "HEAD" && !valid_branch(&self.branch) {
            return Err(RevertError::NotABranch {
                revision: self.branch.clone(),
            });
        }
        if self.reason.chars().count() > MAX_REASON_CHARS {
            return Err(RevertError::InvalidRequest(format!(
                "the reason is longer than {MAX_REASON_CHARS} characters"
            )));
        }
        if self.reason.chars().any(|c| c.is_control() && c != '\n') {
            return Err(RevertError::InvalidRequest(
                "the reason holds control characters".into(),
            ));
        }
        if self.app.trim().is_empty() || self.app.chars().any(char::is_control) {
            return Err(RevertError::InvalidRequest(
                "the Application name is empty or not one line".into(),
            ));
        }
        if self.paths.is_empty() {
            return Err(RevertError::InvalidRequest("no paths".into()));
        }
        let mut specs: Vec<String> = self.paths.iter().map(|p| pathspec(p)).collect::<Result<_, _>>()?;
        specs.sort();
        specs.dedup();
        if specs.iter().any(|s| s == ".") {
            specs = vec![".".into()];
        }
        Ok(specs)
    }
}

impl GitWriter {
    /// Revert, as one commit authored by the writer's author, the commits of `request.branch` after
    /// `request.base` that touch `request.paths`, newest first; push it without force, and on a
    /// rejection redo it on the new head (at most `max_attempts` times).
    pub async fn revert(&self, request: &RevertRequest) -> Result<Reverted, RevertError> {
        let specs = request.validate(self.config())?;
        let config = self.config();
        let dir = tempfile::Builder::new()
            .prefix("capstan-revert-")
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
        let branch = resolve_branch(&repo, &request.branch).await?;
        let lock = self.lock_for(&request.repo_url, &branch);
        let _serialized = lock.lock().await;
        let max_attempts = config.max_attempts.max(1);
        let mut backoff = config.initial_backoff;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (sha, reverted) = revert_once(&repo, request, &branch, &specs).await?;
            if let Some(hook) = &config.before_push {
                hook(attempt);
            }
            let refspec = format!("HEAD:refs/heads/{branch}");
            match repo
                .git("pushing to", &["push", "--no-verify", "origin", &refspec])
                .await
            {
                Ok(_) => {
                    info!(url = %request.repo_url, %branch, %sha, attempt, app = %request.app, "revert pushed");
                    return Ok(Reverted {
                        sha,
                        reverted,
                        branch,
                        attempts: attempt,
                    });
                }
                Err(err) => {
                    let Some(reason) = rejection(&err) else {
                        return Err(err.into());
                    };
                    if attempt >= max_attempts {
                        warn!(url = %request.repo_url, %branch, attempt, %reason, "revert push rejected; giving up");
                        return Err(WriteError::PushRejected {
                            attempts: attempt,
                            last_reason: reason,
                        }
                        .into());
                    }
                    warn!(url = %request.repo_url, %branch, attempt, %reason, "revert push rejected; redoing it on the new head");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(config.max_backoff);
                }
            }
        }
    }
}

/// The branch to work on: `branch`, or the remote's default branch for `HEAD`/empty; refused when
/// the remote has no such branch (a tag or a commit as target revision).
async fn resolve_branch(repo: &Repo<'_>, branch: &str) -> Result<String, RevertError> {
    if branch.is_empty() || branch == "HEAD" {
        let out = repo
            .git("listing branches of", &["ls-remote", "--symref", "origin", "HEAD"])
            .await?;
        let default = out.lines().find_map(|l| {
            l.strip_prefix("ref: refs/heads/")
                .and_then(|rest| rest.split_once('\t'))
                .map(|(name, _)| name.to_string())
        });
        return match default {
            Some(name) if valid_branch(&name) => Ok(name),
            _ => Err(RevertError::NotABranch {
                revision: "HEAD".into(),
            }),
        };
    }
    if repo.has_branch(branch).await? {
        Ok(branch.to_string())
    } else {
        Err(RevertError::NotABranch {
            revision: branch.to_string(),
        })
    }
}

/// Fetch the branch, check the range and make the revert commit on it (not pushed): its id and the
/// reverted commits, newest first.
async fn revert_once(
    repo: &Repo<'_>,
    request: &RevertRequest,
    branch: &str,
    specs: &[String],
) -> Result<(String, Vec<String>), RevertError> {
    let config = repo.config;
    let head_ref = format!("refs/heads/{branch}");
    // The whole history of the branch: the range may be long. Later attempts fetch only what is new.
    repo.git("fetching", &["fetch", "--quiet", "--no-tags", "origin", &head_ref])
        .await?;
    repo.git(
        "checking out",
        &["checkout", "--quiet", "--force", "-B", "capstan-write", "FETCH_HEAD"],
    )
    .await?;
    if let Some(expected) = &request.expected_head {
        let found = repo.git("reading", &["rev-parse", "HEAD"]).await?;
        let found = found.trim();
        if found != expected {
            return Err(RevertError::BranchMoved {
                branch: branch.to_string(),
                expected: short(expected).to_string(),
                found: short(found).to_string(),
            });
        }
    }
    let base = request.base.as_str();
    let not_ancestor = || RevertError::NotAncestor {
        base: base.to_string(),
        branch: branch.to_string(),
    };
    let object = format!("{base}^{{commit}}");
    match repo.git("reading", &["cat-file", "-e", &object]).await {
        Ok(_) => {}
        Err(SourceError::Git { .. }) => return Err(not_ancestor()),
        Err(err) => return Err(err.into()),
    }
    match repo
        .git("reading", &["merge-base", "--is-ancestor", base, "HEAD"])
        .await
    {
        Ok(_) => {}
        Err(SourceError::Git { .. }) => return Err(not_ancestor()),
        Err(err) => return Err(err.into()),
    }
    let range = format!("{base}..HEAD");
    let merges = repo.git("reading", &["rev-list", "--min-parents=2", &range]).await?;
    if !merges.is_empty() {
        return Err(RevertError::MergeInRange {
            base: base.to_string(),
            branch: branch.to_string(),
            commits: merges.lines().map(|s| short(s).to_string()).collect(),
        });
    }
    let mut log = vec![
        "--literal-pathspecs",
        "log",
        "--topo-order",
        "--no-decorate",
        "--format=%H%x09%s",
        &range,
        "--",
    ];
    log.extend(specs.iter().map(String::as_str));
    let listed = repo.git("reading", &log).await?;
    let commits: Vec<(String, String)> = listed
        .lines()
        .filter_map(|l| {
            let (sha, subject) = l.split_once('\t').unwrap_or((l, ""));
            is_commit_id(sha).then(|| (sha.to_string(), subject.to_string()))
        })
        .collect();
    let nothing = || RevertError::NothingToRevert {
        base: base.to_string(),
        branch: branch.to_string(),
        paths: specs.to_vec(),
    };
    if commits.is_empty() {
        return Err(nothing());
    }
    if commits.len() > MAX_COMMITS {
        return Err(RevertError::TooManyCommits {
            base: base.to_string(),
            count: commits.len(),
            max: MAX_COMMITS,
        });
    }
    let shas: Vec<String> = commits.iter().map(|(sha, _)| sha.clone()).collect();
    // Every file each commit changes must be under the Application's paths.
    for sha in &shas {
        let changed = repo
            .git(
                "reading",
                &["diff-tree", "--no-commit-id", "--name-only", "-r", "--no-renames", sha],
            )
            .await?;
        let outside: Vec<String> = changed
            .lines()
            .filter(|f| !f.is_empty() && !request.paths.iter().any(|p| under(f, p)))
            .take(10)
            .map(String::from)
            .collect();
        if !outside.is_empty() {
            return Err(RevertError::OutsidePaths {
                commit: short(sha).to_string(),
                files: outside,
            });
        }
    }
    let name = format!("user.name={}", config.author_name);
    let email = format!("user.email={}", config.author_email);
    let mut revert = vec![
        "-c",
        &name,
        "-c",
        &email,
        "revert",
        "--no-commit",
        "--no-edit",
        "--no-rerere-autoupdate",
    ];
    revert.extend(shas.iter().map(String::as_str));
    if let Err(err) = repo.git("reverting in", &revert).await {
        let conflicted = repo
            .git("reading", &["diff", "--name-only", "--diff-filter=U"])
            .await
            .unwrap_or_default();
        if conflicted.is_empty() {
            return Err(err.into());
        }
        return Err(RevertError::Conflict {
            commits: shas.iter().map(|s| short(s).to_string()).collect(),
            files: conflicted.lines().map(str::to_string).collect(),
        });
    }
    let status = repo.git("reading", &["status", "--porcelain"]).await?;
    if status.is_empty() {
        return Err(nothing());
    }
    let message = message(&request.app, base, request.history_id, &request.reason, &commits);
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
            "-m",
            &message,
        ],
    )
    .await?;
    let sha = repo.git("committing to", &["rev-parse", "HEAD"]).await?;
    Ok((sha, shas))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_under_a_path_only_below_a_slash() {
        assert!(under("apps/shop/values.yaml", "apps/shop"));
        assert!(under("apps/shop/values.yaml", "apps/shop/"));
        assert!(under("anything", "."));
        assert!(!under("apps/shopping/values.yaml", "apps/shop"));
        assert!(!under("shared/common.yaml", "apps/shop"));
    }

    #[test]
    fn commit_ids_must_be_full_lower_case_hex() {
        assert!(is_commit_id(&"a".repeat(40)));
        assert!(is_commit_id(&"0123456789abcdef".repeat(4)));
        for bad in [
            "",
            "abc",
            "--all",
            &"A".repeat(40),
            &"g".repeat(40),
            &"a".repeat(41),
            "HEAD",
        ] {
            assert!(!is_commit_id(bad), "{bad}");
        }
    }

    #[test]
    fn paths_become_literal_pathspecs() {
        assert_eq!(pathspec("").unwrap(), ".");
        assert_eq!(pathspec("./").unwrap(), ".");
        assert_eq!(pathspec("./apps/web/").unwrap(), "apps/web");
        for bad in ["/etc", "a/../b", "..", "a//b", ".git", "a\\b", "a\nb"] {
            assert!(matches!(pathspec(bad), Err(RevertError::InvalidRequest(_))), "{bad}");
        }
    }

    #[test]
    fn the_message_names_the_app_the_revision_the_reason_and_the_commits() {
        let base = "0123456789abcdef0123456789abcdef01234567";
        let reverted = vec![
            ("f".repeat(40), "bad value".to_string()),
            ("e".repeat(40), "x".to_string()),
        ];
        assert_eq!(
            message("web", base, 3, "  broke checkout \n", &reverted),
            "Revert web to 0123456789ab (history 3)\n\nbroke checkout\n\nReverts:\n- ffffffffffff bad value\n- eeeeeeeeeeee x\n"
        );
        assert!(
            message("web", base, 3, "", &reverted).starts_with("Revert web to 0123456789ab (history 3)\n\nReverts:\n")
        );
    }

    #[tokio::test]
    async fn requests_are_validated_before_any_git_command() {
        let writer = GitWriter::new(WriterConfig::new("alice", "alice@capstan.invalid"));
        let request = RevertRequest {
            repo_url: "https://git.example/r.git".into(),
            credentials: Credentials::none(),
            branch: "main".into(),
            paths: vec!["apps/web".into()],
            base: "a".repeat(40),
            app: "web".into(),
            history_id: 1,
            reason: String::new(),
            expected_head: None,
        };
        let kind = |r: RevertRequest| {
            let writer = &writer;
            async move { writer.revert(&r).await.map_err(|e| e.kind()).err() }
        };
        let mut r = request.clone();
        r.base = "--upload-pack=evil".into();
        assert_eq!(kind(r).await, Some(RevertErrorKind::BadRequest));
        let mut r = request.clone();
        r.reason = "x".repeat(MAX_REASON_CHARS + 1);
        assert_eq!(kind(r).await, Some(RevertErrorKind::BadRequest));
        let mut r = request.clone();
        r.paths = vec!["../x".into()];
        assert_eq!(kind(r).await, Some(RevertErrorKind::BadRequest));
        let mut r = request.clone();
        r.branch = "-f".into();
        assert_eq!(kind(r).await, Some(RevertErrorKind::Refused));
        let mut r = request;
        r.repo_url = "file:///tmp/x".into();
        assert_eq!(kind(r).await, Some(RevertErrorKind::Failed));
    }
}

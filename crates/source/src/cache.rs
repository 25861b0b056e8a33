//! One bare repository per URL under the cache root, shared by every Application that uses it, and a
//! read-only checkout per commit.
//!
//! What one repository may cost is bounded ([`Limits`]): its bare cache is measured after every fetch
//! and dropped if it is too large, a checkout's tree is streamed from `git archive` into `tar` and
//! stopped at its limit, and only the most recently used checkouts of a repository are kept — a
//! checkout handed out ([`Checkout`]) is never removed while it is held.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::checkout::{self, Checkout, Checkouts, Place};
use crate::git::{GitCommand, check_url, is_full_sha, redact};
use crate::limits::{Limits, SizeLimit};
use crate::{Credentials, Result, SourceError};

/// A revision resolved to a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Full commit SHA.
    pub sha: String,
    /// The ref it came from (`refs/heads/main`, `refs/tags/v1`, `HEAD`), if any.
    pub ref_name: Option<String>,
}

/// Counters for one repository URL.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// `git ls-remote` calls.
    pub ls_remotes: u64,
    /// `git fetch` calls.
    pub fetches: u64,
}

/// The shared Git cache.
pub struct RepoCache {
    root: PathBuf,
    timeout: Duration,
    refs_ttl: Duration,
    allow_local: bool,
    limits: Limits,
    repos: Mutex<HashMap<String, Arc<Repo>>>,
}

struct Repo {
    url: String,
    dir: PathBuf,
    checkouts: PathBuf,
    state: tokio::sync::Mutex<RepoState>,
    ls_remotes: AtomicU64,
    fetches: AtomicU64,
}

#[derive(Default)]
struct RepoState {
    initialised: bool,
    /// Commits known to be in the cache (saves a `git cat-file` per resolution).
    present: std::collections::HashSet<String>,
    /// The remote's refs and when they were listed.
    refs: Option<(Instant, Vec<(String, String)>)>,
    /// The checkouts on disk.
    checkouts: Checkouts,
}

impl RepoCache {
    /// A cache under `root`. Remote refs are listed at most once per `refs_ttl` per repository
    /// (unless a caller forces a refresh); each git command is limited to `timeout`.
    pub fn new(root: impl Into<PathBuf>, timeout: Duration, refs_ttl: Duration) -> Self {
        Self {
            root: root.into(),
            timeout,
            refs_ttl,
            allow_local: false,
            limits: Limits::default(),
            repos: Mutex::new(HashMap::new()),
        }
    }

    /// Bound repository and checkout sizes and the checkouts kept (see [`Limits`]).
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Allow `file://` URLs and absolute paths (off by default: on a shared controller they would
    /// read any repository on its disk). For operators who mirror repositories locally, and tests.
    pub fn with_local_repositories(mut self, allowed: bool) -> Self {
        self.allow_local = allowed;
        self
    }

    fn repo(&self, url: &str) -> Arc<Repo> {
        let mut repos = match self.repos.lock() {
            Ok(r) => r,
            Err(poisoned) => poisoned.into_inner(),
        };
        repos
            .entry(url.to_string())
            .or_insert_with(|| {
                let name = dir_name(url);
                Arc::new(Repo {
                    url: url.to_string(),
                    dir: self.root.join("repos").join(&name),
                    checkouts: self.root.join("checkouts").join(&name),
                    state: tokio::sync::Mutex::new(RepoState::default()),
                    ls_remotes: AtomicU64::new(0),
                    fetches: AtomicU64::new(0),
                })
            })
            .clone()
    }

    /// Counters for `url`.
    pub fn stats(&self, url: &str) -> CacheStats {
        let repo = self.repo(url);
        CacheStats {
            ls_remotes: repo.ls_remotes.load(Ordering::Relaxed),
            fetches: repo.fetches.load(Ordering::Relaxed),
        }
    }

    /// Resolve `revision` (branch, tag, full or short SHA, `HEAD` or empty) of `url` to a commit that
    /// is present in the cache. With `force`, the remote's refs are listed again even if recent.
    pub async fn resolve(&self, url: &str, revision: &str, creds: &Credentials, force: bool) -> Result<Resolved> {
        check_url(url, self.allow_local)?;
        let repo = self.repo(url);
        let mut state = repo.state.lock().await;
        self.init(&repo, &mut state).await?;
        let revision = revision.trim();

        if is_full_sha(revision) {
            let sha = revision.to_ascii_lowercase();
            if !self.has_commit(&repo, &sha).await {
                self.fetch(&repo, &mut state, creds).await?;
            }
            return if self.has_commit(&repo, &sha).await {
                Ok(Resolved { sha, ref_name: None })
            } else {
                Err(self.unknown(&repo, revision, creds))
            };
        }

        let age = state.refs.as_ref().map(|(at, _)| at.elapsed());
        let fresh = age.is_some_and(|age| age < self.refs_ttl);
        if force || !fresh {
            tracing::debug!(url = %redact(url, &creds.secrets()), force, age_ms = age.map(|a| a.as_millis() as u64), "listing refs to resolve {revision:?}");
            let refs = self.ls_remote(&repo, creds).await?;
            state.refs = Some((Instant::now(), refs));
        }
        let refs = state.refs.as_ref().map(|(_, r)| r.as_slice()).unwrap_or(&[]);
        if let Some((sha, name)) = match_ref(refs, revision) {
            if !state.present.contains(&sha) {
                if !self.has_commit(&repo, &sha).await {
                    self.fetch(&repo, &mut state, creds).await?;
                }
                state.present.insert(sha.clone());
            }
            return Ok(Resolved {
                sha,
                ref_name: Some(name),
            });
        }
        if is_short_sha(revision) {
            if let Some(sha) = self.rev_parse(&repo, revision).await {
                return Ok(Resolved { sha, ref_name: None });
            }
            self.fetch(&repo, &mut state, creds).await?;
            if let Some(sha) = self.rev_parse(&repo, revision).await {
                return Ok(Resolved { sha, ref_name: None });
            }
        }
        Err(self.unknown(&repo, revision, creds))
    }

    /// List the remote's refs now and keep them for later resolutions. Returns the refs, so a
    /// poller can tell whether anything moved.
    pub async fn refresh(&self, url: &str, creds: &Credentials) -> Result<Vec<(String, String)>> {
        check_url(url, self.allow_local)?;
        let repo = self.repo(url);
        let mut state = repo.state.lock().await;
        self.init(&repo, &mut state).await?;
        let refs = self.ls_remote(&repo, creds).await?;
        state.refs = Some((Instant::now(), refs.clone()));
        Ok(refs)
    }

    /// The tree of commit `sha` (which [`resolve`](Self::resolve) made present), in a directory
    /// created once per commit; callers must not modify it. It stays on disk at least as long as the
    /// returned [`Checkout`] is held.
    pub async fn checkout(&self, url: &str, sha: &str) -> Result<Checkout> {
        if !is_full_sha(sha) {
            return Err(SourceError::UnknownRevision {
                revision: sha.into(),
                url: redact(url, &[]),
            });
        }
        let repo = self.repo(url);
        let mut state = repo.state.lock().await;
        let place = Place {
            url: &repo.url,
            bare: &repo.dir,
            dir: &repo.checkouts,
            timeout: self.timeout,
            allow_local: self.allow_local,
            limits: self.limits,
        };
        state.checkouts.checkout(&place, sha).await
    }

    /// Author, date and message of commit `sha` of `url` if the cache holds it (never fetches: a
    /// commit an Application deployed is there).
    pub async fn commit_info(&self, url: &str, sha: &str) -> Result<Option<crate::CommitInfo>> {
        check_url(url, self.allow_local)?;
        if !is_full_sha(sha) {
            return Ok(None);
        }
        let repo = self.repo(url);
        if !repo.dir.join("HEAD").exists() || !self.has_commit(&repo, sha).await {
            return Ok(None);
        }
        let none = Credentials::none();
        let out = GitCommand {
            url: &repo.url,
            credentials: &none,
            timeout: self.timeout,
            allow_local: self.allow_local,
            operation: "reading",
        }
        .run(
            Some(&repo.dir),
            &[
                "show",
                "-s",
                "--no-show-signature",
                crate::commit_info::FORMAT,
                sha,
                "--",
            ],
        )
        .await?;
        Ok(crate::commit_info::parse(&out))
    }

    /// Checkouts of `url` on disk.
    pub fn checkouts_on_disk(&self, url: &str) -> usize {
        checkout::on_disk(&self.repo(url).checkouts)
    }

    async fn init(&self, repo: &Repo, state: &mut RepoState) -> Result<()> {
        if state.initialised {
            return Ok(());
        }
        if !repo.dir.join("HEAD").exists() {
            std::fs::create_dir_all(&repo.dir).map_err(SourceError::io(format!("creating {}", repo.dir.display())))?;
            let none = Credentials::none();
            GitCommand {
                url: &repo.url,
                credentials: &none,
                timeout: self.timeout,
                allow_local: self.allow_local,
                operation: "initialising cache for",
            }
            .run(Some(&repo.dir), &["init", "--bare", "--quiet", "."])
            .await?;
        }
        state.initialised = true;
        Ok(())
    }

    async fn ls_remote(&self, repo: &Repo, creds: &Credentials) -> Result<Vec<(String, String)>> {
        repo.ls_remotes.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(url = %redact(&repo.url, &creds.secrets()), "git ls-remote");
        let started = std::time::Instant::now();
        let out = GitCommand {
            url: &repo.url,
            credentials: creds,
            timeout: self.timeout,
            allow_local: self.allow_local,
            operation: "listing refs of",
        }
        .run(Some(&repo.dir), &["ls-remote", "--end-of-options", &repo.url])
        .await;
        capstan_metrics::global().git_request("ls-remote", out.is_ok(), started.elapsed());
        let out = out?;
        Ok(String::from_utf8_lossy(&out)
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .map(|(sha, name)| (sha.trim().to_string(), name.trim().to_string()))
            .collect())
    }

    async fn fetch(&self, repo: &Repo, state: &mut RepoState, creds: &Credentials) -> Result<()> {
        repo.fetches.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(url = %redact(&repo.url, &creds.secrets()), "git fetch");
        let started = std::time::Instant::now();
        let result = GitCommand {
            url: &repo.url,
            credentials: creds,
            timeout: self.timeout,
            allow_local: self.allow_local,
            operation: "fetching",
        }
        .run(
            Some(&repo.dir),
            &[
                "fetch",
                "--quiet",
                "--force",
                "--prune",
                "--no-tags",
                "--end-of-options",
                &repo.url,
                "+refs/heads/*:refs/heads/*",
                "+refs/tags/*:refs/tags/*",
            ],
        )
        .await;
        capstan_metrics::global().git_request("fetch", result.is_ok(), started.elapsed());
        result?;
        let size = dir_size(&repo.dir);
        if size > self.limits.max_repository_bytes {
            // The whole cache goes: what was fetched cannot be trusted to be smaller next time, and
            // the next resolution starts from an empty repository (and fails the same way).
            tracing::warn!(url = %redact(&repo.url, &creds.secrets()), size, "repository over the size limit removed from the cache");
            let _ = std::fs::remove_dir_all(&repo.dir);
            state.initialised = false;
            state.present.clear();
            return Err(SourceError::TooLarge {
                what: SizeLimit::Repository,
                url: redact(&repo.url, &creds.secrets()),
                limit_mib: self.limits.max_repository_bytes >> 20,
            });
        }
        Ok(())
    }

    async fn has_commit(&self, repo: &Repo, sha: &str) -> bool {
        let none = Credentials::none();
        GitCommand {
            url: &repo.url,
            credentials: &none,
            timeout: self.timeout,
            allow_local: self.allow_local,
            operation: "reading",
        }
        .run(Some(&repo.dir), &["cat-file", "-e", &format!("{sha}^{{commit}}")])
        .await
        .is_ok()
    }

    async fn rev_parse(&self, repo: &Repo, short: &str) -> Option<String> {
        let none = Credentials::none();
        let out = GitCommand {
            url: &repo.url,
            credentials: &none,
            timeout: self.timeout,
            allow_local: self.allow_local,
            operation: "reading",
        }
        .run(
            Some(&repo.dir),
            &["rev-parse", "--verify", "--quiet", &format!("{short}^{{commit}}")],
        )
        .await
        .ok()?;
        let sha = String::from_utf8_lossy(&out).trim().to_string();
        is_full_sha(&sha).then_some(sha)
    }

    fn unknown(&self, repo: &Repo, revision: &str, creds: &Credentials) -> SourceError {
        SourceError::UnknownRevision {
            revision: revision.to_string(),
            url: redact(&repo.url, &creds.secrets()),
        }
    }
}

/// Find `revision` among `refs` (sha, name): `HEAD`, a branch, a tag (peeled), or a full ref name.
fn match_ref(refs: &[(String, String)], revision: &str) -> Option<(String, String)> {
    let find = |name: &str| refs.iter().find(|(_, n)| n == name).map(|(sha, _)| sha.clone());
    if revision.is_empty() || revision == "HEAD" {
        return find("HEAD").map(|sha| (sha, "HEAD".to_string()));
    }
    let candidates = [
        format!("refs/heads/{revision}"),
        format!("refs/tags/{revision}^{{}}"),
        format!("refs/tags/{revision}"),
        revision.to_string(),
    ];
    candidates
        .iter()
        .find_map(|name| find(name).map(|sha| (sha, name.trim_end_matches("^{}").to_string())))
}

fn is_short_sha(s: &str) -> bool {
    (4..40).contains(&s.len()) && s.chars().all(|c| c.is_ascii_hexdigit())
}

/// A stable, readable directory name for a URL (FNV-1a: a fixed function, unlike std's hasher).
fn dir_name(url: &str) -> String {
    let hash = {
        use std::hash::Hasher;
        let mut h = fnv::FnvHasher::default();
        h.write(url.as_bytes());
        h.finish()
    };
    let tail: String = redact(url, &[])
        .rsplit('/')
        .next()
        .unwrap_or("repo")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_' || *c == '.')
        .take(40)
        .collect();
    format!("{}-{hash:016x}", tail.trim_start_matches('.'))
}

/// Bytes of the files under `dir` (not following symbolic links).
fn dir_size(dir: &Path) -> u64 {
    let mut total = 0;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            match entry.metadata() {
                Ok(meta) if meta.is_dir() => pending.push(entry.path()),
                Ok(meta) => total += meta.len(),
                Err(_) => {}
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs() -> Vec<(String, String)> {
        [
            ("a".repeat(40), "HEAD"),
            ("a".repeat(40), "refs/heads/main"),
            ("b".repeat(40), "refs/heads/dev"),
            ("c".repeat(40), "refs/tags/v1"),
            ("d".repeat(40), "refs/tags/v1^{}"),
        ]
        .into_iter()
        .map(|(s, n)| (s, n.to_string()))
        .collect()
    }

    #[test]
    fn matches_branches_peeled_tags_and_head() {
        assert_eq!(match_ref(&refs(), "HEAD").map(|r| r.0), Some("a".repeat(40)));
        assert_eq!(match_ref(&refs(), "").map(|r| r.0), Some("a".repeat(40)));
        assert_eq!(
            match_ref(&refs(), "dev"),
            Some(("b".repeat(40), "refs/heads/dev".into()))
        );
        assert_eq!(
            match_ref(&refs(), "v1"),
            Some(("d".repeat(40), "refs/tags/v1".into())),
            "annotated tags peel to the commit"
        );
        assert_eq!(match_ref(&refs(), "refs/heads/main").map(|r| r.0), Some("a".repeat(40)));
        assert_eq!(match_ref(&refs(), "nope"), None);
    }

    #[test]
    fn directory_names_are_stable_and_hide_credentials() {
        let a = dir_name("https://bot:secret@git.example/org/app.git");
        assert_eq!(a, dir_name("https://bot:secret@git.example/org/app.git"));
        assert!(!a.contains("secret") && a.starts_with("app.git-"), "{a}");
        assert_ne!(a, dir_name("https://git.example/org/app.git"));
    }
}

//! Reading one file of a repository at a revision (a commit or a branch), through a shallow fetch in
//! a scratch repository: git runs through `capstan-source`'s [`GitCommand`] (isolated configuration,
//! credentials in the environment, redacted errors, a time limit).

use std::time::Duration;

use capstan_source::{Credentials, GitCommand};
use tracing::debug;

use crate::PromoteError;

/// Largest file a promotion reads (values files are far smaller).
pub const MAX_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// Where to read from.
#[derive(Debug, Clone)]
pub struct Reader {
    /// The repository.
    pub url: String,
    /// Its credentials.
    pub credentials: Credentials,
    /// Limit for each git command.
    pub timeout: Duration,
    /// Whether `file://` repositories may be read (tests).
    pub allow_local: bool,
}

/// A file read: its text and the commit it was read at.
#[derive(Debug, Clone)]
pub struct FileAt {
    /// The file's contents.
    pub text: String,
    /// The commit (full SHA).
    pub commit: String,
}

impl Reader {
    fn git<'a>(&'a self, operation: &'a str) -> GitCommand<'a> {
        GitCommand {
            url: &self.url,
            credentials: &self.credentials,
            timeout: self.timeout,
            operation,
            allow_local: self.allow_local,
        }
    }

    /// The file at `path` at `revision`: a commit SHA, or a branch (`refs/heads/` is added). A SHA
    /// the server will not hand out alone is found in the history of `branch`.
    pub async fn read(&self, path: &str, revision: &str, branch: &str) -> Result<FileAt, PromoteError> {
        capstan_source::check_url(&self.url, self.allow_local)?;
        let dir = tempfile::Builder::new()
            .prefix("capstan-promote-")
            .tempdir()
            .map_err(PromoteError::io("creating a scratch repository"))?;
        let d = Some(dir.path());
        self.git("preparing to read")
            .run(d, &["init", "--quiet", "--bare"])
            .await?;
        let sha = revision.len() == 40 && revision.chars().all(|c| c.is_ascii_hexdigit());
        let wanted = if sha {
            revision.to_string()
        } else {
            format!("refs/heads/{revision}")
        };
        let direct = self
            .git("fetching")
            .run(
                d,
                &[
                    "fetch",
                    "--quiet",
                    "--no-tags",
                    "--depth",
                    "1",
                    "--end-of-options",
                    &self.url,
                    &wanted,
                ],
            )
            .await;
        let commit = match direct {
            Ok(_) => "FETCH_HEAD".to_string(),
            Err(err) if sha => {
                debug!(%err, "fetching the commit alone failed; fetching the branch's history");
                let head = format!("refs/heads/{branch}");
                self.git("fetching")
                    .run(
                        d,
                        &["fetch", "--quiet", "--no-tags", "--end-of-options", &self.url, &head],
                    )
                    .await?;
                revision.to_string()
            }
            Err(err) => return Err(err.into()),
        };
        let resolved = self
            .git("reading")
            .run(
                d,
                &[
                    "rev-parse",
                    "--verify",
                    "--end-of-options",
                    &format!("{commit}^{{commit}}"),
                ],
            )
            .await
            .map_err(|_| PromoteError::NotFound(format!("revision {revision}")))?;
        let resolved = String::from_utf8_lossy(&resolved).trim().to_string();
        // Bounded: the file's size is asked first, and a file larger than any values file is not
        // read (a pipeline naming a huge blob must not fill the controller's memory).
        let object = format!("{resolved}:{path}");
        let size = self
            .git("reading")
            .run(d, &["cat-file", "-s", &object])
            .await
            .map_err(|_| PromoteError::MissingFile {
                path: path.into(),
                revision: revision.into(),
            })?;
        let size: u64 = String::from_utf8_lossy(&size).trim().parse().unwrap_or(u64::MAX);
        if size > MAX_FILE_BYTES {
            return Err(PromoteError::BadFile {
                path: path.into(),
                reason: format!("it is larger than {} MiB", MAX_FILE_BYTES >> 20),
            });
        }
        let text = self
            .git("reading")
            .run(d, &["show", &object])
            .await
            .map_err(|_| PromoteError::MissingFile {
                path: path.into(),
                revision: revision.into(),
            })?;
        let text = String::from_utf8(text).map_err(|_| PromoteError::BadFile {
            path: path.into(),
            reason: "not UTF-8".into(),
        })?;
        Ok(FileAt { text, commit: resolved })
    }
}

//! What a caller asks to be written: plain data (no closures), so the same edits can be applied again
//! to newer content after a concurrent change.

use std::fmt;
use std::str::FromStr;

use capstan_source::Credentials;

use crate::WriteError;

/// One step of a [`KeyPath`]: a mapping key or a sequence index.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Segment {
    /// A key of a mapping (object).
    Key(String),
    /// A position in a sequence (array), from 0.
    Index(usize),
}

/// Where a value is in a YAML or JSON document: `image.tag`, `images[0].newTag`, or built from
/// [`Segment`]s (for keys that contain `.` or `[`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyPath(pub Vec<Segment>);

impl KeyPath {
    /// A path from its segments.
    pub fn new(segments: Vec<Segment>) -> Self {
        KeyPath(segments)
    }

    /// The segments, outermost first.
    pub fn segments(&self) -> &[Segment] {
        &self.0
    }
}

impl FromStr for KeyPath {
    type Err = WriteError;

    /// Parse `a.b[0].c`: keys separated by `.`, indexes in brackets.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| WriteError::InvalidRequest(format!("key path {s:?}: {why}"));
        let mut segments = Vec::new();
        for part in s.split('.') {
            let (key, mut rest) = match part.find('[') {
                Some(i) => part.split_at(i),
                None => (part, ""),
            };
            if key.is_empty() && (segments.is_empty() || rest.is_empty()) {
                return Err(bad("empty key"));
            }
            if !key.is_empty() {
                segments.push(Segment::Key(key.to_string()));
            }
            while !rest.is_empty() {
                let Some(close) = rest.find(']').filter(|_| rest.starts_with('[')) else {
                    return Err(bad("expected `[index]`"));
                };
                let index = rest[1..close].parse().map_err(|_| bad("an index must be a number"))?;
                segments.push(Segment::Index(index));
                rest = &rest[close + 1..];
            }
        }
        Ok(KeyPath(segments))
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                Segment::Key(k) if i == 0 => write!(f, "{k}")?,
                Segment::Key(k) => write!(f, ".{k}")?,
                Segment::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// A change to one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Set the scalar value of an existing key.
    SetKey {
        /// Where the value is.
        key: KeyPath,
        /// The new value (written as a string: quoted when the plain form would read as a number,
        /// boolean or null).
        value: String,
    },
    /// Set `newTag` of the entry of a kustomization's `images:` whose `name` is `name` (added under
    /// that entry when it has none).
    KustomizeImage {
        /// The image name as the entry spells it.
        name: String,
        /// The new tag.
        new_tag: String,
    },
    /// Create the file with `content` if the branch does not have it; a file already there is left
    /// as it is (its content is the repository's, never overwritten).
    CreateFile {
        /// The whole file.
        content: String,
    },
}

impl Change {
    /// The key this change sets, as error messages name it.
    pub fn target(&self) -> String {
        match self {
            Change::SetKey { key, .. } => key.to_string(),
            Change::KustomizeImage { name, .. } => format!("images[name={name}].newTag"),
            Change::CreateFile { .. } => "the whole file".into(),
        }
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::SetKey { key, value } => write!(f, "{key} = {value}"),
            Change::KustomizeImage { new_tag, .. } => write!(f, "{} = {new_tag}", self.target()),
            Change::CreateFile { content } => write!(f, "created if missing ({} bytes)", content.len()),
        }
    }
}

/// A change to the file at `path` (repository-relative, `/`-separated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    /// Repository-relative path of the file.
    pub path: String,
    /// What to change in it.
    pub change: Change,
}

impl fmt::Display for Edit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.change)
    }
}

/// One commit to make.
#[derive(Debug, Clone)]
pub struct WriteRequest {
    /// The repository.
    pub repo_url: String,
    /// Credentials for it (they need write access).
    pub credentials: Credentials,
    /// The branch to read from (and push to, unless `push_branch` is set).
    pub branch: String,
    /// Push to this branch instead; created from `branch` if it does not exist.
    pub push_branch: Option<String>,
    /// The commit message.
    pub message: String,
    /// The changes, applied in order.
    pub edits: Vec<Edit>,
}

impl WriteRequest {
    /// The branch the commit lands on.
    pub fn target_branch(&self) -> &str {
        self.push_branch.as_deref().unwrap_or(&self.branch)
    }
}

/// What a write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The files already had the requested values: nothing was committed.
    Unchanged,
    /// A commit was pushed.
    Committed {
        /// The new commit.
        sha: String,
        /// Push attempts it took (1 when nobody else pushed meanwhile).
        attempts: u32,
        /// The branch it was pushed to.
        branch: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_paths_parse_and_print() {
        let p: KeyPath = "images[0].newTag".parse().unwrap();
        assert_eq!(
            p.segments(),
            [
                Segment::Key("images".into()),
                Segment::Index(0),
                Segment::Key("newTag".into())
            ]
        );
        assert_eq!(p.to_string(), "images[0].newTag");
        assert_eq!("image.tag".parse::<KeyPath>().unwrap().to_string(), "image.tag");
        assert_eq!("a[1][2]".parse::<KeyPath>().unwrap().segments().len(), 3);
        for bad in ["", "a..b", "a[x]", "a[1", ".a", "a."] {
            assert!(bad.parse::<KeyPath>().is_err(), "{bad}");
        }
    }
}

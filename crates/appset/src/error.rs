//! Why an ApplicationSet cannot be generated: every message names where the problem is, with a
//! short reason for status conditions.

use crate::inputs::GitSource;

/// Why an ApplicationSet cannot be generated. Every message names where the problem is.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GenerateError {
    /// A generator is malformed: no kind or several, the wrong number of children, a bad glob or a
    /// path that leaves the repository, a child that is not a generator.
    #[error("{place}: {message}")]
    InvalidGenerator {
        /// Where (`generators[0].matrix`).
        place: String,
        /// What.
        message: String,
    },
    /// A label selector is malformed (unknown operator, missing values).
    #[error("{place}: {message}")]
    InvalidSelector {
        /// Where (`generators[1].clusters.selector`).
        place: String,
        /// What.
        message: String,
    },
    /// A file matched by a git files generator cannot be used.
    #[error("{place}: {file}: {message}")]
    InvalidGitFile {
        /// The generator (`generators[0].git`).
        place: String,
        /// The file, relative to the repository root.
        file: String,
        /// What is wrong with it.
        message: String,
    },
    /// A git generator's repository at its revision is not among the checkouts, or cannot be read.
    /// The URL is shown without credentials.
    #[error(
        "{place}: repository {} at revision {}: {message}",
        capstan_source::redact(&git.repo_url, &[]),
        git.revision
    )]
    GitSourceUnavailable {
        /// The generator.
        place: String,
        /// The source it needs.
        git: GitSource,
        /// Why it is unavailable.
        message: String,
    },
    /// A `{{placeholder}}` names a parameter the set does not have.
    #[error(
        "{place}: parameter {name:?} is not defined for {origin} (known: {})",
        list_keys(known)
    )]
    MissingParameter {
        /// Where the placeholder is (`template: metadata.name`, `generators[0].clusters.values.x`).
        place: String,
        /// The parameter named.
        name: String,
        /// The parameter set (`generators[0].git, file services/a/prod.yaml`).
        origin: String,
        /// The parameters the set does have.
        known: Vec<String>,
    },
    /// The template, its patch or its result is malformed.
    #[error("{place}: {message}")]
    InvalidTemplate {
        /// Where (`template: spec`, `templatePatch`).
        place: String,
        /// What.
        message: String,
    },
    /// The substituted name is not a DNS-1123 subdomain.
    #[error(
        "template: metadata.name: Application name {name:?} (for {origin}) is not a valid DNS-1123 subdomain \
         (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters)"
    )]
    InvalidApplicationName {
        /// The name after substitution.
        name: String,
        /// The parameter set.
        origin: String,
    },
    /// The registered clusters cannot be used: `in-cluster`'s name with another server, or two
    /// clusters with the same name or server.
    #[error("{place}: {message}")]
    InvalidCluster {
        /// The clusters generator (`generators[0].clusters`).
        place: String,
        /// What.
        message: String,
    },
    /// Two parameter sets render to the same Application name.
    #[error("generators produce two Applications named {name:?} (from {first} and from {second})")]
    DuplicateApplicationName {
        /// The name.
        name: String,
        /// The first parameter set producing it.
        first: String,
        /// The second.
        second: String,
    },
}

fn list_keys(keys: &[String]) -> String {
    const SHOWN: usize = 25;
    if keys.is_empty() {
        return "none".into();
    }
    let mut out = keys.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", ");
    if keys.len() > SHOWN {
        out.push_str(&format!(", ... and {} more", keys.len() - SHOWN));
    }
    out
}

impl GenerateError {
    /// A short CamelCase reason for a status condition.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::InvalidGenerator { .. } => "InvalidGenerator",
            Self::InvalidSelector { .. } => "InvalidSelector",
            Self::InvalidGitFile { .. } => "InvalidGitFile",
            Self::GitSourceUnavailable { .. } => "GitSourceUnavailable",
            Self::MissingParameter { .. } => "MissingParameter",
            Self::InvalidTemplate { .. } => "InvalidTemplate",
            Self::InvalidCluster { .. } => "InvalidCluster",
            Self::InvalidApplicationName { .. } => "InvalidApplicationName",
            Self::DuplicateApplicationName { .. } => "DuplicateApplicationName",
        }
    }

    /// The git source a generator needed and did not find in [`Inputs::checkouts`]. Sources whose
    /// URL or revision is only known during generation (a matrix's second child using the first
    /// child's parameters) are not listed by [`git_sources`]; a caller checks this one out and
    /// generates again.
    pub fn missing_git_source(&self) -> Option<&GitSource> {
        match self {
            Self::GitSourceUnavailable { git, .. } => Some(git),
            _ => None,
        }
    }
}

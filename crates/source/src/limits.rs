//! Bounds on what one repository may cost the controller ([`Limits`]), and which bound a repository
//! exceeded ([`SizeLimit`]).

/// Bounds on what one repository may cost the controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest bare cache of one repository, in bytes (measured after each fetch).
    pub max_repository_bytes: u64,
    /// Largest tree of one commit (the uncompressed `git archive` stream), in bytes.
    pub max_checkout_bytes: u64,
    /// Checkouts kept per repository: beyond it, the least recently used ones not in use are removed.
    pub max_checkouts: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_repository_bytes: 2 << 30,
            max_checkout_bytes: 1 << 30,
            max_checkouts: 8,
        }
    }
}

/// What exceeded a [`Limits`] bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeLimit {
    /// The bare cache of the repository.
    Repository,
    /// The tree of one commit.
    Checkout,
}

impl std::fmt::Display for SizeLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SizeLimit::Repository => "repository",
            SizeLimit::Checkout => "tree of the commit",
        })
    }
}

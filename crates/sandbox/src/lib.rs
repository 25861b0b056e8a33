//! Kernel confinement of the programs Capstan runs on content it does not trust.
//!
//! Helm, Kustomize, git, tar and the Jsonnet worker read repositories written by tenants. Checking
//! every field that reaches them has been bypassed by fields nobody listed, so this crate makes the
//! class impossible instead: each such process starts inside a [`Confinement`] that the kernel
//! enforces whatever the process is told to do.
//!
//! - **Landlock** ([`landlock`] crate): the process reads only the paths it was given (its scratch
//!   copy, the repository, its own binary) and the system's libraries, CA store and a few files of
//!   `/etc`; writes only its scratch; executes only its own binary, the programs it was allowed to
//!   start and the dynamic loader; connects to no TCP port but the ones given (none for renders, the
//!   repository's port for git's fetches) and binds none; cannot signal or reach abstract Unix
//!   sockets outside itself. A `--post-renderer=./evil.sh` that reaches Helm fails with "permission
//!   denied", as does `../other-team` or a download from a loopback service.
//! - `no_new_privs`, resource limits (CPU time, address space, file size, processes, no core files).
//! - A new process group, killed whole by [`ProcessGroup`] when the run ends, times out or is
//!   cancelled, so a tool's children (Kustomize's helm) never outlive it.
//!
//! The ruleset is built in the parent (allocations happen there); the child only makes the
//! async-signal-safe system calls that apply it, between `fork` and `exec`.
//!
//! [`kernel`] probes what the running kernel supports and holds the operator's decision for kernels
//! without Landlock.

pub mod confinement;
pub mod group;
pub mod kernel;

pub use confinement::{Confinement, Limits};
pub use group::ProcessGroup;
pub use kernel::{Enforcement, KernelSupport};

/// Why a program could not be confined.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The kernel lacks Landlock (or its TCP rules) and the operator did not allow unconfined tools.
    #[error(
        "tools cannot be confined: {reason}; refusing to run {program} on repository content (an operator may start Capstan with --allow-unconfined-tools to run them anyway)"
    )]
    Unavailable {
        /// What the kernel lacks.
        reason: String,
        /// The program that would have run.
        program: String,
    },
    /// Building the Landlock ruleset failed.
    #[error("cannot build the sandbox of {program}: {source}")]
    Ruleset {
        /// The program that would have run.
        program: String,
        /// The landlock crate's error.
        #[source]
        source: landlock::RulesetError,
    },
}

//! What the running kernel offers for confinement, and the operator's decision for kernels that lack
//! it: by default a tool that cannot be confined does not run ([`Enforcement::Required`]);
//! `--allow-unconfined-tools` sets [`Enforcement::AllowUnconfined`], which runs it with only the
//! environment scrubbed, resource limits and its process group.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};

/// The Landlock ABI version from which TCP `connect`/`bind` can be restricted.
pub const MIN_ABI_FOR_NETWORK: i32 = 4;
/// The Landlock ABI version from which signals and abstract Unix sockets are scoped.
pub const MIN_ABI_FOR_SCOPES: i32 = 6;

/// The kernel's Landlock support, probed once per process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSupport {
    /// The Landlock ABI version, or `None` when the kernel has no Landlock (not built, not enabled).
    pub abi: Option<i32>,
}

impl KernelSupport {
    /// The running kernel's support (probed once).
    pub fn current() -> Self {
        static PROBED: OnceLock<KernelSupport> = OnceLock::new();
        *PROBED.get_or_init(|| KernelSupport { abi: probe_abi() })
    }

    /// Whether tools can be fully confined: file-system and TCP rules.
    pub fn confines(&self) -> bool {
        self.abi.is_some_and(|abi| abi >= MIN_ABI_FOR_NETWORK)
    }

    /// What is missing, for messages; `None` when [`Self::confines`].
    pub fn missing(&self) -> Option<String> {
        match self.abi {
            None => {
                Some("this kernel has no Landlock (it needs Linux 5.13 or later with landlock in the lsm= list)".into())
            }
            Some(abi) if abi < MIN_ABI_FOR_NETWORK => Some(format!(
                "this kernel's Landlock (ABI {abi}) cannot restrict network access (ABI {MIN_ABI_FOR_NETWORK}, Linux 6.7, is needed)"
            )),
            Some(_) => None,
        }
    }

    /// One line for the start-up log.
    pub fn describe(&self) -> String {
        match (self.abi, self.missing()) {
            (Some(abi), None) => format!("tools are confined by Landlock (ABI {abi})"),
            (_, Some(missing)) => missing,
            (None, None) => "unknown".into(),
        }
    }
}

/// `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`: the ABI version, or an error
/// when Landlock is missing. Written by hand because the `landlock` crate keeps its probe private.
fn probe_abi() -> Option<i32> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_ulong = 1;
    // SAFETY: with a null attribute pointer and size 0 this call only returns a number.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    (abi > 0).then_some(abi as i32)
}

/// What to do when the kernel cannot confine a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enforcement {
    /// Refuse to run it (the default).
    Required,
    /// Run it unconfined (`--allow-unconfined-tools`): environment, limits and process group only.
    AllowUnconfined,
}

static ENFORCEMENT: AtomicU8 = AtomicU8::new(0);

impl Enforcement {
    /// The process-wide setting.
    pub fn current() -> Self {
        match ENFORCEMENT.load(Ordering::Relaxed) {
            1 => Enforcement::AllowUnconfined,
            _ => Enforcement::Required,
        }
    }

    /// Set the process-wide setting (at start-up, from the operator's flag).
    pub fn set(self) {
        ENFORCEMENT.store(
            match self {
                Enforcement::Required => 0,
                Enforcement::AllowUnconfined => 1,
            },
            Ordering::Relaxed,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_each_level() {
        assert!(KernelSupport { abi: None }.missing().unwrap().contains("no Landlock"));
        assert!(KernelSupport { abi: Some(3) }.missing().unwrap().contains("network"));
        assert!(KernelSupport { abi: Some(7) }.confines());
        assert!(!KernelSupport { abi: Some(3) }.confines());
        assert_eq!(
            KernelSupport { abi: Some(7) }.describe(),
            "tools are confined by Landlock (ABI 7)"
        );
    }
}

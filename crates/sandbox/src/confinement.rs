//! [`Confinement`]: what one program may read, write, execute and connect to, and its resource
//! limits; [`Confinement::apply`] arranges for a `tokio::process::Command` to start inside it.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, NetPort, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetError, Scope, path_beneath_rules,
};
use tokio::process::Command;

use crate::SandboxError;
use crate::kernel::{Enforcement, KernelSupport, MIN_ABI_FOR_SCOPES};

/// The Landlock ABI whose rights Capstan asks for; newer kernels enforce it whole, older ones as much
/// as they can ([`KernelSupport::confines`] is checked first).
const TARGET_ABI: ABI = ABI::V6;

/// What every program may read: the system's programs and libraries, its CA store, and the few files
/// of `/etc` that name resolution, user look-ups and time zones read. Not `/proc`, `/home`, `/root`,
/// `/var`, `/tmp` or Capstan's cache (other teams' checkouts, credentials).
const SYSTEM_READ: &[&str] = &[
    "/usr",
    "/lib",
    "/lib64",
    "/bin",
    "/sbin",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/resolv.conf",
    "/etc/gai.conf",
    "/etc/localtime",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/sys/kernel/mm/transparent_hugepage",
    "/sys/devices/system/cpu",
    "/dev/zero",
    "/dev/urandom",
    "/dev/random",
];

/// What every program may write: the null device only (its scratch is given per run).
const SYSTEM_WRITE: &[&str] = &["/dev/null"];

/// The dynamic loaders a dynamically linked program needs to execute (the kernel opens them with the
/// program). Nothing else of the system is executable: no shell, no interpreter.
const LOADERS: &[&str] = &[
    "/lib64/ld-linux-x86-64.so.2",
    "/lib/ld-linux-aarch64.so.1",
    "/lib/ld-musl-x86_64.so.1",
    "/lib/ld-musl-aarch64.so.1",
];

/// The rules every confinement shares ([`SYSTEM_READ`], [`SYSTEM_WRITE`], [`LOADERS`]), as
/// `O_PATH` handles opened once per process: each tool run then adds them without opening and
/// checking some thirty paths again (benchmark 12 in docs/benchmarks.md). A handle names the
/// directory or file it was opened on, so replacing one of these system paths while Capstan runs
/// (a mount over `/usr`, say) is seen only after a restart; paths missing at start stay missing.
struct SystemRules {
    handles: Vec<(PathFd, BitFlags<AccessFs>)>,
}

impl SystemRules {
    fn get() -> &'static SystemRules {
        static RULES: OnceLock<SystemRules> = OnceLock::new();
        RULES.get_or_init(|| {
            let read: BitFlags<AccessFs> = AccessFs::ReadFile | AccessFs::ReadDir;
            let write: BitFlags<AccessFs> = read | AccessFs::from_write(TARGET_ABI);
            let exec: BitFlags<AccessFs> = read | AccessFs::Execute;
            let all = SYSTEM_READ
                .iter()
                .map(|p| (p, read))
                .chain(SYSTEM_WRITE.iter().map(|p| (p, write)))
                .chain(LOADERS.iter().map(|p| (p, exec)));
            let handles = all
                .filter_map(|(path, access)| {
                    let fd = PathFd::new(path).ok()?;
                    // A file takes only the rights that apply to files (as `path_beneath_rules`).
                    let is_dir = std::fs::metadata(path).map(|m| m.is_dir()).unwrap_or(true);
                    let access = if is_dir {
                        access
                    } else {
                        access & AccessFs::from_file(TARGET_ABI)
                    };
                    Some((fd, access))
                })
                .collect();
            SystemRules { handles }
        })
    }

    /// The rules, borrowing the handles.
    fn rules(&self) -> impl Iterator<Item = Result<PathBeneath<BorrowedFd<'_>>, RulesetError>> + '_ {
        self.handles
            .iter()
            .map(|(fd, access)| Ok(PathBeneath::new(fd.as_fd(), *access)))
    }
}

/// Resource limits of one confined program (`None`: inherited).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// CPU seconds (`RLIMIT_CPU`): the kernel kills the program beyond.
    pub cpu_seconds: Option<u64>,
    /// Bytes of address space (`RLIMIT_AS`).
    pub address_space: Option<u64>,
    /// Largest file the program may write (`RLIMIT_FSIZE`).
    pub file_size: Option<u64>,
    /// Processes of the user (`RLIMIT_NPROC`; the kernel ignores it for root).
    pub processes: Option<u64>,
}

impl Limits {
    /// Limits for a rendering tool run that may last `timeout_secs`: CPU time a little beyond the
    /// timeout (a backstop should the controller die), 4 GiB of address space (Go reserves address
    /// space generously), 1 GiB per file, 4,096 processes of the user.
    pub fn for_tool(timeout_secs: u64) -> Self {
        Limits {
            cpu_seconds: Some(timeout_secs.saturating_add(30)),
            address_space: Some(4 << 30),
            file_size: Some(1 << 30),
            processes: Some(4096),
        }
    }
}

/// What one program may do. Paths that do not exist are skipped.
#[derive(Debug, Clone)]
pub struct Confinement {
    program: PathBuf,
    read: Vec<PathBuf>,
    write: Vec<PathBuf>,
    exec: Vec<PathBuf>,
    connect_tcp: Vec<u16>,
    limits: Limits,
}

impl Confinement {
    /// A confinement for `program`, which may read and execute itself and read the system's files
    /// ([`SYSTEM_READ`]), nothing else until granted; no network; [`Limits::for_tool`] of 60 s.
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Confinement {
            program: program.into(),
            read: Vec::new(),
            write: Vec::new(),
            exec: Vec::new(),
            connect_tcp: Vec::new(),
            limits: Limits::for_tool(60),
        }
    }

    /// May read `path` (a file, or a directory and everything beneath it).
    pub fn read(mut self, path: impl Into<PathBuf>) -> Self {
        self.read.push(path.into());
        self
    }

    /// May read, create, change and remove beneath `path`.
    pub fn write(mut self, path: impl Into<PathBuf>) -> Self {
        self.write.push(path.into());
        self
    }

    /// May execute `path` (a program it starts, e.g. Kustomize's helm).
    pub fn exec(mut self, path: impl Into<PathBuf>) -> Self {
        self.exec.push(path.into());
        self
    }

    /// May open TCP connections to `port` (on any address: Landlock filters by port only).
    pub fn connect_tcp(mut self, port: u16) -> Self {
        self.connect_tcp.push(port);
        self
    }

    /// Its resource limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The program this confinement is for.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// Make `cmd` start inside this confinement: in a process group of its own (kill it with
    /// [`crate::ProcessGroup`]), with `no_new_privs`, the limits and the Landlock rules. Fails when the
    /// kernel cannot confine it and the operator did not allow unconfined tools.
    pub fn apply(self, cmd: &mut Command) -> Result<(), SandboxError> {
        let support = KernelSupport::current();
        let ruleset = match support.missing() {
            None => Some(self.ruleset(support)?),
            Some(reason) => match Enforcement::current() {
                Enforcement::Required => {
                    return Err(SandboxError::Unavailable {
                        reason,
                        program: self.program.display().to_string(),
                    });
                }
                Enforcement::AllowUnconfined => {
                    static WARNED: AtomicBool = AtomicBool::new(false);
                    if !WARNED.swap(true, Ordering::Relaxed) {
                        tracing::warn!(%reason, "running tools unconfined (--allow-unconfined-tools)");
                    }
                    None
                }
            },
        };
        let limits = self.limits;
        cmd.process_group(0);
        // SAFETY: the closure runs in the child between fork and exec; it only makes system calls
        // (setrlimit, prctl, landlock_restrict_self) and builds errors from raw numbers, none of which
        // allocate or take locks.
        unsafe {
            cmd.pre_exec(move || enter(&limits, ruleset.as_ref()));
        }
        Ok(())
    }

    /// The Landlock ruleset, created in the parent; the child only restricts itself with it.
    fn ruleset(&self, support: KernelSupport) -> Result<OwnedFd, SandboxError> {
        let failed = |source| SandboxError::Ruleset {
            program: self.program.display().to_string(),
            source,
        };
        let abi = TARGET_ABI;
        let read: BitFlags<AccessFs> = AccessFs::ReadFile | AccessFs::ReadDir;
        let exec: BitFlags<AccessFs> = AccessFs::ReadFile | AccessFs::ReadDir | AccessFs::Execute;
        let write: BitFlags<AccessFs> = read | AccessFs::from_write(abi);
        let mut ruleset = Ruleset::default()
            .handle_access(AccessFs::from_all(abi))
            .and_then(|r| r.handle_access(AccessNet::from_all(abi)))
            .map_err(failed)?;
        if support.abi.is_some_and(|a| a >= MIN_ABI_FOR_SCOPES) {
            ruleset = ruleset
                .scope(Scope::AbstractUnixSocket | Scope::Signal)
                .map_err(failed)?;
        }
        let mut executables = vec![self.program.clone()];
        // A tool installed as a script (an operator's wrapper) needs its interpreter; the tool is
        // the operator's choice, so its interpreter is too.
        executables.extend(interpreter(&self.program));
        executables.extend(self.exec.iter().cloned());
        // The system's rules come from handles opened once per process (see [`SystemRules`]); the
        // per-run paths are opened now. `path_beneath_rules` skips paths that do not exist.
        let mut created = ruleset
            .create()
            .map_err(failed)?
            .add_rules(SystemRules::get().rules())
            .and_then(|r| r.add_rules(path_beneath_rules(&self.read, read)))
            .and_then(|r| r.add_rules(path_beneath_rules(&self.write, write)))
            .and_then(|r| r.add_rules(path_beneath_rules(&executables, exec)))
            .map_err(failed)?;
        for port in &self.connect_tcp {
            created = created
                .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
                .map_err(failed)?;
        }
        let fd: Option<OwnedFd> = created.into();
        fd.ok_or_else(|| SandboxError::Unavailable {
            reason: "the kernel refused to create a Landlock ruleset".into(),
            program: self.program.display().to_string(),
        })
    }
}

/// The interpreter a `#!` script names on its first line, canonical.
fn interpreter(program: &Path) -> Option<PathBuf> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(program).and_then(|mut f| f.read(&mut head)).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let path = String::from_utf8_lossy(line).split_whitespace().next()?.to_string();
    std::fs::canonicalize(path).ok()
}

/// In the child, before `exec`: limits, `no_new_privs`, then the Landlock domain.
fn enter(limits: &Limits, ruleset: Option<&OwnedFd>) -> std::io::Result<()> {
    let set = |resource, value: Option<u64>| -> std::io::Result<()> {
        if let Some(value) = value {
            let limit = libc::rlimit {
                rlim_cur: value as libc::rlim_t,
                rlim_max: value as libc::rlim_t,
            };
            // SAFETY: a plain system call on a stack value.
            if unsafe { libc::setrlimit(resource, &limit) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    };
    set(libc::RLIMIT_CPU, limits.cpu_seconds)?;
    set(libc::RLIMIT_AS, limits.address_space)?;
    set(libc::RLIMIT_FSIZE, limits.file_size)?;
    set(libc::RLIMIT_NPROC, limits.processes)?;
    set(libc::RLIMIT_CORE, Some(0))?;
    // SAFETY: plain system calls.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if let Some(fd) = ruleset {
        // SAFETY: a plain system call on a valid descriptor.
        if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0u32) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_limits_leave_room_beyond_the_timeout() {
        let l = Limits::for_tool(60);
        assert_eq!(l.cpu_seconds, Some(90));
        assert_eq!(l.address_space, Some(4 << 30));
    }
}

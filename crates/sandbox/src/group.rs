//! The process group a confined program runs in, killed whole when its owner is dropped: at the end
//! of a run, on timeout, or when the render that started it is cancelled. Killing only the direct
//! child left Kustomize's helm running after a timeout, one more per retry.

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// A process group to kill with `SIGKILL` on drop.
#[derive(Debug)]
pub struct ProcessGroup {
    id: Option<Pid>,
}

impl ProcessGroup {
    /// The group led by the process `pid` (a child started with [`crate::Confinement::apply`], which
    /// puts it in a group of its own); `None` (a child that already exited) guards nothing.
    pub fn of(pid: Option<u32>) -> Self {
        ProcessGroup {
            id: pid
                .and_then(|p| i32::try_from(p).ok())
                .filter(|p| *p > 1)
                .map(Pid::from_raw),
        }
    }

    /// Kill every process of the group now.
    pub fn kill(&mut self) {
        if let Some(id) = self.id.take() {
            // ESRCH: nobody is left in the group, which is the normal case after a clean exit.
            let _ = killpg(id, Signal::SIGKILL);
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

//! Supervised background processes: start with a log file and a pid file, tell whether they still
//! run, and stop exactly the processes that were started (a pid file records the process's start
//! time, so a recycled pid is never signalled).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use crate::{Error, Result};

/// A component started in the background.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    /// Process id.
    pub pid: i32,
    /// Start time in clock ticks since boot (field 22 of `/proc/PID/stat`).
    pub start_ticks: u64,
}

/// Start `cmd` detached from the caller's terminal (own process group), appending its output to `log`
/// and recording it in `pid_file`.
pub fn spawn(name: &str, mut cmd: Command, log: &Path, pid_file: &Path) -> Result<Started> {
    use std::os::unix::process::CommandExt;
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(Error::io(format!("opening {}", log.display())))?;
    let err = out
        .try_clone()
        .map_err(Error::io(format!("opening {}", log.display())))?;
    cmd.stdin(Stdio::null()).stdout(out).stderr(err).process_group(0);
    let child = cmd.spawn().map_err(Error::io(format!("starting {name}")))?;
    let pid = child.id() as i32;
    // The child is supervised through its pid file; dropping the handle does not stop it.
    drop(child);
    let start_ticks = start_ticks(pid).unwrap_or(0);
    let started = Started { pid, start_ticks };
    std::fs::write(pid_file, format!("{pid} {start_ticks}\n"))
        .map_err(Error::io(format!("writing {}", pid_file.display())))?;
    Ok(started)
}

/// Read a pid file written by [`spawn`].
pub fn read_pid_file(pid_file: &Path) -> Option<Started> {
    let text = std::fs::read_to_string(pid_file).ok()?;
    let mut parts = text.split_whitespace();
    let pid = parts.next()?.parse().ok()?;
    let start_ticks = parts.next()?.parse().ok()?;
    Some(Started { pid, start_ticks })
}

/// Whether the process recorded in `started` is still running (and is the same process).
pub fn is_running(started: &Started) -> bool {
    let pid = Pid::from_raw(started.pid);
    // Reap it if it is our own child that has exited.
    match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::StillAlive) => {}
        Ok(_) => return false,
        Err(_) => {} // not our child: look at /proc
    }
    match stat_fields(started.pid) {
        Some((state, ticks)) => state != 'Z' && state != 'X' && ticks == started.start_ticks,
        None => false,
    }
}

/// Stop the process in `pid_file` (SIGTERM, then SIGKILL after `grace`) and remove the pid file.
/// Returns whether a running process was stopped. Safe to call when nothing runs.
pub fn stop(pid_file: &Path, grace: Duration) -> Result<bool> {
    let Some(started) = read_pid_file(pid_file) else {
        remove(pid_file)?;
        return Ok(false);
    };
    let was_running = is_running(&started);
    if was_running {
        let pid = Pid::from_raw(started.pid);
        let _ = kill(pid, Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        while is_running(&started) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if is_running(&started) {
            let _ = kill(pid, Signal::SIGKILL);
            let deadline = Instant::now() + Duration::from_secs(5);
            while is_running(&started) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    remove(pid_file)?;
    Ok(was_running)
}

fn remove(pid_file: &Path) -> Result<()> {
    match std::fs::remove_file(pid_file) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::Io {
            context: format!("removing {}", pid_file.display()),
            source: e,
        }),
    }
}

/// The calling process, as a pid file would record it.
pub fn current() -> Option<Started> {
    let pid = std::process::id() as i32;
    start_ticks(pid).map(|start_ticks| Started { pid, start_ticks })
}

/// The running process `pid`, as a pid file would record it.
pub fn of_pid(pid: i32) -> Option<Started> {
    match stat_fields(pid) {
        Some((state, start_ticks)) if state != 'Z' && state != 'X' => Some(Started { pid, start_ticks }),
        _ => None,
    }
}

/// Record `started` in `pid_file` (the format [`read_pid_file`] reads).
pub fn write_pid_file(pid_file: &Path, started: &Started) -> Result<()> {
    std::fs::write(pid_file, format!("{} {}\n", started.pid, started.start_ticks))
        .map_err(Error::io(format!("writing {}", pid_file.display())))
}

fn start_ticks(pid: i32) -> Option<u64> {
    stat_fields(pid).map(|(_, ticks)| ticks)
}

/// State letter and start time from `/proc/PID/stat`.
fn stat_fields(pid: i32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    // `rest` starts at field 3 (state); start time is field 22.
    let ticks = fields.get(22 - 3)?.parse().ok()?;
    Some((state, ticks))
}

/// The last `lines` lines of a log file, for error messages.
pub fn tail(log: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Paths of a component's pid and log files under a playground directory.
pub fn files(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    (
        dir.join("run").join(format!("{name}.pid")),
        dir.join("logs").join(format!("{name}.log")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spawn_track_and_stop_a_process() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (pid_file, log) = (dir.path().join("sleep.pid"), dir.path().join("sleep.log"));
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let started = spawn("sleep", cmd, &log, &pid_file).expect("spawn");
        assert!(is_running(&started));
        assert_eq!(read_pid_file(&pid_file), Some(started.clone()));
        assert!(stop(&pid_file, Duration::from_secs(5)).expect("stop"));
        assert!(!is_running(&started));
        assert!(!pid_file.exists());
        // A second stop is a no-op.
        assert!(!stop(&pid_file, Duration::from_secs(1)).expect("stop twice"));
    }

    #[test]
    fn a_recycled_pid_is_not_ours() {
        let me = std::process::id() as i32;
        let ticks = start_ticks(me).expect("own stat");
        assert!(is_running(&Started {
            pid: me,
            start_ticks: ticks
        }));
        assert!(!is_running(&Started {
            pid: me,
            start_ticks: ticks + 1
        }));
    }
}

//! git and ssh run with none of the controller's environment: no SSH agent, no `GIT_*` overrides,
//! only the credentials Capstan chose for the repository — against a real sshd and a real
//! `ssh-agent` holding a key the server accepts.
//!
//! One test in this binary: it sets the process's environment.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use capstan_source::{Credentials, RepoCache};
use capstan_testkit::ssh::SshGitServer;
use capstan_testkit::{commit_files, run_git};

/// An `ssh-agent` on a socket in `dir`, stopped on drop.
struct Agent {
    child: std::process::Child,
    socket: std::path::PathBuf,
}

impl Agent {
    fn start(dir: &Path, key: &str) -> anyhow::Result<Agent> {
        let socket = dir.join("agent.sock");
        let child = Command::new("ssh-agent")
            .arg("-D")
            .arg("-a")
            .arg(&socket)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let agent = Agent { child, socket };
        for _ in 0..100 {
            if agent.socket.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let key_file = dir.join("agent-key");
        std::fs::write(&key_file, key)?;
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600))?;
        let added = Command::new("ssh-add")
            .arg(&key_file)
            .env("SSH_AUTH_SOCK", &agent.socket)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()?;
        anyhow::ensure!(
            added.status.success(),
            "ssh-add: {}",
            String::from_utf8_lossy(&added.stderr)
        );
        Ok(agent)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_uses_neither_the_agent_nor_git_settings_from_the_environment() -> anyhow::Result<()> {
    let repos = tempfile::tempdir()?;
    run_git(
        repos.path(),
        &["init", "--bare", "--quiet", "--initial-branch=main", "apps.git"],
    )?;
    let sha = commit_files(
        &repos.path().join("apps.git"),
        "main",
        &[("cm.yaml", Some("v: 1\n"))],
        "one",
    )?;
    let server = SshGitServer::start(repos.path()).await?;
    let url = server.url("apps.git");
    let scratch = tempfile::tempdir()?;
    let agent = Agent::start(scratch.path(), &server.private_key())?;
    let known_hosts = scratch.path().join("known_hosts");
    std::fs::write(&known_hosts, server.known_hosts())?;

    // Control: the agent's key is one the server accepts, so a git that used the agent would get in.
    let ssh = format!("ssh -F /dev/null -o UserKnownHostsFile={}", known_hosts.display());
    let listed = Command::new("git")
        .args(["ls-remote", &url])
        .env("SSH_AUTH_SOCK", &agent.socket)
        .env("GIT_SSH_COMMAND", &ssh)
        .output()?;
    assert!(
        listed.status.success() && String::from_utf8_lossy(&listed.stdout).contains(&sha),
        "plain git with the agent: {}",
        String::from_utf8_lossy(&listed.stderr)
    );

    // The controller's environment: the agent, and git settings that would run a program of its
    // choosing or trace what git does.
    let marker = scratch.path().join("ran");
    let hook = scratch.path().join("ssh-hook");
    std::fs::write(
        &hook,
        format!("#!/bin/sh\ntouch '{}'\nexec ssh \"$@\"\n", marker.display()),
    )?;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755))?;
    let trace = scratch.path().join("trace");
    // SAFETY: this binary has one test, and nothing else runs while the environment is set.
    unsafe {
        std::env::set_var("SSH_AUTH_SOCK", &agent.socket);
        std::env::set_var("GIT_SSH_COMMAND", &hook);
        std::env::set_var("GIT_SSH", &hook);
        std::env::set_var("GIT_TRACE", &trace);
        std::env::set_var(
            "GIT_CONFIG_PARAMETERS",
            format!("'core.sshcommand'='{}'", hook.display()),
        );
    }

    let cache_dir = tempfile::tempdir()?;
    let cache = RepoCache::new(cache_dir.path(), Duration::from_secs(30), Duration::from_secs(1));
    let no_key = Credentials {
        known_hosts: Some(server.known_hosts()),
        ..Default::default()
    };
    let refused = cache.resolve(&url, "main", &no_key, true).await;
    assert!(
        refused.is_err(),
        "without a key from the repository Secret, the agent is not used"
    );

    let with_key = Credentials {
        ssh_private_key: Some(server.private_key()),
        known_hosts: Some(server.known_hosts()),
        ..Default::default()
    };
    let resolved = cache.resolve(&url, "main", &with_key, true).await;
    let resolved = resolved.map_err(|e| anyhow::anyhow!("{e}\nsshd log:\n{}", server.log()))?;
    assert_eq!(resolved.sha, sha, "the repository's own key works");
    let tree = cache.checkout(&url, &sha).await?;
    assert_eq!(std::fs::read_to_string(tree.join("cm.yaml"))?, "v: 1\n");
    assert!(!marker.exists(), "no ssh command from the environment ran");
    assert!(!trace.exists(), "GIT_TRACE from the environment was ignored");
    Ok(())
}

//! The kernel's walls, tested with real programs: a confined program reads, writes, executes and
//! connects only where it was allowed, and its whole process group dies with its owner.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use capstan_sandbox::{Confinement, KernelSupport, ProcessGroup};
use tokio::process::Command;

async fn run(confinement: Confinement, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(confinement.program());
    cmd.args(args).env_clear().stdin(Stdio::null());
    confinement.apply(&mut cmd).expect("this kernel confines");
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let _group = ProcessGroup::of(child.id());
    tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("in time")
        .expect("output")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn this_kernel_confines() {
    let support = KernelSupport::current();
    assert!(support.confines(), "{}", support.describe());
}

#[tokio::test]
async fn reads_only_what_it_was_given() {
    let allowed = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    std::fs::write(allowed.path().join("mine.txt"), "mine").unwrap();
    std::fs::write(other.path().join("theirs.txt"), "theirs").unwrap();
    let cat = || Confinement::new("/usr/bin/cat").read(allowed.path());
    let out = run(cat(), &[allowed.path().join("mine.txt").to_str().unwrap()]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "mine");
    let out = run(cat(), &[other.path().join("theirs.txt").to_str().unwrap()]).await;
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("Permission denied"), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty());
    // Not the controller's home or cache either.
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let out = run(cat(), &[&format!("{home}/.bashrc")]).await;
    assert!(!out.status.success());
}

#[tokio::test]
async fn writes_only_in_its_scratch() {
    let scratch = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let touch = || Confinement::new("/usr/bin/touch").write(scratch.path());
    let out = run(touch(), &[scratch.path().join("made").to_str().unwrap()]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(scratch.path().join("made").exists());
    let out = run(touch(), &[other.path().join("made").to_str().unwrap()]).await;
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("Permission denied"), "{}", text(&out.stderr));
    assert!(!other.path().join("made").exists());
}

#[tokio::test]
async fn executes_nothing_it_was_not_given() {
    let scratch = tempfile::tempdir().unwrap();
    let marker = scratch.path().join("pwned");
    let script = scratch.path().join("evil.sh");
    std::fs::write(&script, format!("#!/bin/sh\n/usr/bin/touch {}\n", marker.display())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let sh = || Confinement::new("/bin/sh").write(scratch.path());
    // The shell itself runs (a builtin answers)…
    let out = run(sh(), &["-c", "echo alive"]).await;
    assert_eq!(text(&out.stdout).trim(), "alive", "{}", text(&out.stderr));
    // …but neither a script of the repository nor a system program can be started from it.
    let out = run(sh(), &["-c", script.to_str().unwrap()]).await;
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("Permission denied"), "{}", text(&out.stderr));
    let out = run(sh(), &["-c", &format!("/usr/bin/touch {}", marker.display())]).await;
    assert!(!out.status.success());
    assert!(!marker.exists());
    // Granted explicitly, a program runs.
    let out = run(
        sh().exec("/usr/bin/touch"),
        &["-c", &format!("/usr/bin/touch {}", marker.display())],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(marker.exists());
}

#[tokio::test]
async fn connects_to_no_tcp_port_unless_given() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}/");
    let curl = || Confinement::new("/usr/bin/curl");
    let out = run(curl(), &["-sS", "--max-time", "5", "--noproxy", "*", &url]).await;
    // curl ran, tried and failed to connect (exit 7)…
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    // …and nothing reached the listener.
    assert_eq!(
        listener.accept().map(|_| ()).map_err(|e| e.kind()),
        Err(std::io::ErrorKind::WouldBlock)
    );
    // With the port granted the same request reaches it.
    let out = tokio::spawn(async move {
        run(
            curl().connect_tcp(port),
            &["-sS", "--max-time", "3", "--noproxy", "*", &url],
        )
        .await
    });
    let accepted = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if listener.accept().is_ok() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(accepted, Ok(true));
    let _ = out.await;
}

fn alive(pid: u32) -> bool {
    // A killed process that nobody reaped yet is a zombie: it is not running.
    match std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X')),
        Err(_) => false,
    }
}

#[tokio::test]
async fn the_whole_group_dies_with_its_owner() {
    let confinement = Confinement::new("/bin/sh").exec("/usr/bin/sleep");
    let mut cmd = Command::new(confinement.program());
    cmd.args(["-c", "/usr/bin/sleep 300 & echo $!; wait"]).env_clear();
    confinement.apply(&mut cmd).unwrap();
    let mut child = cmd.stdout(Stdio::piped()).kill_on_drop(true).spawn().unwrap();
    let group = ProcessGroup::of(child.id());
    let mut stdout = child.stdout.take().unwrap();
    let mut line = Vec::new();
    use tokio::io::AsyncReadExt;
    while !line.ends_with(b"\n") {
        let mut byte = [0u8; 1];
        assert_eq!(stdout.read(&mut byte).await.unwrap(), 1);
        line.push(byte[0]);
    }
    let grandchild: u32 = text(&line).trim().parse().unwrap();
    assert!(alive(grandchild));
    drop(group);
    let _ = child.wait().await;
    let gone = tokio::time::timeout(Duration::from_secs(10), async {
        while alive(grandchild) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "the shell's child {grandchild} outlived its group");
}

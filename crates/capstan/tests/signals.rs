//! SIGTERM at any moment ends `capstan controller --listen` within its grace period, with a success
//! status and no process of its own left behind, and no operation is left `Running` for good.
//!
//! One control plane and one git server; two Applications (automated sync) of many objects with a
//! PreSync hook Job and two waves, the first holding a Deployment whose rollout takes a few seconds,
//! so that a sync runs for seconds. Twenty times: commit a new revision (every object changes), start
//! the controller, send SIGTERM after a random delay — from the first instant the process can take a
//! signal, through start-up, into the sync — and check how it ends. A third of the runs from 1 s on
//! have a grace period of 1 s, too short for a sync: the sync is cut, stays recorded `Running`, and
//! the next start resumes it; the others have 20 s, so a sync in flight finishes before the process
//! exits. Last, one more start must bring both Applications to the newest revision, Synced and
//! Healthy, their operations Succeeded. Each start is a replica of its own with a 3-second lease:
//! one that ends within its grace period must have given its Leases back.
//!
//! Each run must end in a success status within its grace period plus a margin; with 20 s, before
//! the grace period is over (nothing in it takes that long: a start-up or a watch that never ends
//! would). The delays come from a seeded generator; the seed is printed (set `CAPSTAN_SIGTERM_SEED`
//! to replay one), with the delay, what the Applications were doing at the signal ("(held)": sent
//! while `main` held SIGTERM, before its handler was installed) and how each run ended. Processes
//! the controller starts (git, renders) that outlive it are caught by making this test a child
//! subreaper: orphans are re-parented to it.

mod common;

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use capstan_api::Application;
use capstan_api::application::OperationState;
use capstan_api::operation::OperationPhase;
use capstan_testkit::capstan::synced_healthy;
use capstan_testkit::{GitServer, TestCluster};
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::Api;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;

use common::{capstan, kubectl, text};

const RUNS: usize = 20;
const APPS: [&str; 2] = ["sigterm-a", "sigterm-b"];
/// ConfigMaps per wave: enough applies that a SIGTERM can land among them.
const OBJECTS_PER_WAVE: usize = 20;
const LONG_GRACE: Duration = Duration::from_secs(20);
const SHORT_GRACE: Duration = Duration::from_secs(1);
/// What the process may take beyond its grace period (the runtime's last second, a busy machine).
const MARGIN: Duration = Duration::from_secs(5);

/// SplitMix64: a small seeded generator, so that a run can be replayed from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The Application's objects at run `n`: a PreSync hook Job (done after 1 s), wave 0 with a
/// Deployment rolled out anew at each revision (ready 2 s after its pods start) and ConfigMaps,
/// wave 1 with more ConfigMaps. Every object but the hook changes with `n`.
fn manifests(n: usize) -> String {
    let mut out = String::from(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: preflight\n  annotations: {capstan.dev/hook: PreSync, capstan.dev/hook-delete-policy: HookSucceeded}\n\
         spec:\n  backoffLimit: 0\n  template:\n    metadata: {annotations: {capstan.dev/simulate: \"delay=1\"}}\n    spec: {restartPolicy: Never, containers: [{name: check, image: busybox}]}\n",
    );
    out.push_str(&format!(
        "---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\nspec:\n  replicas: 2\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}, annotations: {{capstan.dev/simulate: \"delay=2\", run: \"{n}\"}}}}\n    spec: {{containers: [{{name: web, image: nginx}}]}}\n"
    ));
    for wave in 0..2 {
        for i in 0..OBJECTS_PER_WAVE {
            out.push_str(&format!(
                "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: wave{wave}-{i}, annotations: {{capstan.dev/sync-wave: '{wave}'}}}}\ndata: {{run: '{n}'}}\n"
            ));
        }
    }
    out
}

fn application(name: &str, repo: &str) -> String {
    format!(
        "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata: {{name: {name}, namespace: capstan}}\nspec:\n  source: {{repoURL: '{repo}', targetRevision: main, path: app}}\n  destination: {{server: 'https://kubernetes.default.svc', namespace: {name}}}\n  syncPolicy: {{automated: {{prune: true}}, syncOptions: [CreateNamespace=true]}}\n"
    )
}

fn operation_of(app: &Application) -> Option<OperationState> {
    app.status.as_ref().and_then(|s| s.operation_state.clone())
}

/// The operation of each Application (`None` before its first).
async fn operations(apps: &Api<Application>) -> anyhow::Result<Vec<Option<OperationState>>> {
    let mut out = Vec::new();
    for name in APPS {
        out.push(operation_of(&apps.get(name).await?));
    }
    Ok(out)
}

fn describe(op: &Option<OperationState>) -> String {
    match op {
        Some(op) => format!("{} {}", op.phase, op.message.chars().take(60).collect::<String>()),
        None => "-".into(),
    }
}

/// The processes whose parent is this one.
fn children() -> BTreeSet<i32> {
    let me = std::process::id().to_string();
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if parent_and_state(pid).is_some_and(|(ppid, _)| ppid == me) {
            out.insert(pid);
        }
    }
    out
}

/// A process's parent pid and state letter, from /proc/PID/stat.
fn parent_and_state(pid: i32) -> Option<(String, String)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "PID (COMM) STATE PPID …": COMM may hold spaces and parentheses.
    let mut fields = stat.get(stat.rfind(')')? + 2..)?.split(' ');
    let state = fields.next()?.to_string();
    Some((fields.next()?.to_string(), state))
}

fn command_line(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// How the process's main thread stands with SIGTERM: (blocked, caught). Before it has blocked or
/// caught it — the instants between `exec` and the first instruction of `main` — SIGTERM takes its
/// default action in any program; blocked and not caught yet, it waits for the handler.
fn sigterm_mask(pid: u32) -> (bool, bool) {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return (false, false);
    };
    let sigterm = 1u64 << (Signal::SIGTERM as i32 - 1);
    let has = |key: &str| {
        status.lines().any(|line| {
            line.strip_prefix(key)
                .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
                .is_some_and(|mask| mask & sigterm != 0)
        })
    };
    (has("SigBlk:"), has("SigCgt:"))
}

fn start_controller(
    kc: &str,
    cache: &std::path::Path,
    log: &std::path::Path,
    grace: Duration,
    replica: &str,
) -> anyhow::Result<Child> {
    Ok(Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args([
            "controller",
            "--kubeconfig",
            kc,
            "--listen",
            "127.0.0.1:0",
            "--cache-dir",
        ])
        .arg(cache)
        .args(["--shutdown-grace", &grace.as_secs().to_string()])
        // Each start is a replica of its own; one whose grace period was cut leaves its Leases to
        // lapse, and the next waits out the shortest lease duration before taking its shards.
        .args(["--replica-id", replica, "--lease-duration", "3"])
        .env("CAPSTAN_LOG", "info,kube_client::client::builder=off")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log)?)
        .spawn()?)
}

/// The Leases naming `replica`: its member Lease, and shard or leader Leases it holds.
async fn leases_of(leases: &Api<Lease>, replica: &str) -> anyhow::Result<Vec<String>> {
    Ok(leases
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|l| {
            l.name_any() == format!("capstan-replica-{replica}")
                || l.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) == Some(replica)
        })
        .map(|l| l.name_any())
        .collect())
}

fn log_tail(log: &std::path::Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// Wait up to `limit` for `child` to exit; kill it if it does not (and say so).
async fn exit_within(
    child: &mut Child,
    limit: Duration,
) -> anyhow::Result<Result<(std::process::ExitStatus, Duration), String>> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Ok((status, started.elapsed())));
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(Err(format!("still running {limit:?} after SIGTERM (killed)")));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Processes re-parented to this test since `before` that are still alive 3 s later (the dead ones
/// are reaped).
async fn strays(before: &BTreeSet<i32>) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let mut alive = Vec::new();
        for pid in children().difference(before) {
            match parent_and_state(*pid) {
                Some((_, state)) if state == "Z" || state == "X" => {
                    let _ = waitpid(Pid::from_raw(*pid), Some(WaitPidFlag::WNOHANG));
                }
                Some(_) => alive.push(format!("{pid}: {}", command_line(*pid))),
                None => {}
            }
        }
        if alive.is_empty() || Instant::now() > deadline {
            for entry in &alive {
                if let Some(pid) = entry.split(':').next().and_then(|p| p.parse::<i32>().ok()) {
                    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                    let _ = waitpid(Pid::from_raw(pid), None);
                }
            }
            return alive;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_at_any_moment_ends_the_controller_and_no_operation_stays_running() -> anyhow::Result<()> {
    let seed = std::env::var("CAPSTAN_SIGTERM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    println!("seed {seed} (CAPSTAN_SIGTERM_SEED={seed} replays it)");
    let mut rng = Rng(seed);
    // Six delays within the first 300 ms (start-up: the client, the first lists, the server's
    // bind), the rest spread over 300 ms – 6 s (start-up's end, the first reconciles, the sync);
    // each at a random point of its own slot, in random order. Before 1 s the grace period is the
    // long one (a short one would hide a start-up that never ends); later, one run in three has the
    // short one.
    let mut plan: Vec<(Duration, Duration)> = (0..RUNS as u64)
        .map(|i| {
            let (from, width) = if i < 6 {
                (i * 50, 50)
            } else {
                (300 + (i - 6) * 407, 407)
            };
            let delay = Duration::from_millis(from + rng.below(width));
            let short = rng.below(3) == 0 && delay >= Duration::from_secs(1);
            (delay, if short { SHORT_GRACE } else { LONG_GRACE })
        })
        .collect();
    for i in (1..plan.len()).rev() {
        plan.swap(i, rng.below(i as u64 + 1) as usize);
    }

    // A plane of its own: 21 controller starts over some two and a half minutes, each re-applying
    // two Applications' 80 objects, a rolling Deployment and a hook Job, would load the run's shared
    // plane while other tests time their own waits against it.
    let cluster = TestCluster::start().await?;
    let git = GitServer::start().await?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let out = capstan(&kc, &["install"]);
    assert!(out.status.success(), "{}", text(&out));
    let client = cluster.client().await?;
    let apps: Api<Application> = Api::namespaced(client.clone(), "capstan");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "capstan");
    git.create_repo("sigterm")?;
    git.commit("sigterm", "main", &[("app/all.yaml", Some(&manifests(0)))], "run 0")?;
    let work = tempfile::tempdir()?;
    let cache = work.path().join("cache");
    for name in APPS {
        let file = work.path().join(format!("{name}.yaml"));
        std::fs::write(&file, application(name, &git.git_url("sigterm")))?;
        let out = kubectl(&kc, &["apply", "-f", &file.to_string_lossy()]);
        assert!(out.status.success(), "{}", text(&out));
    }
    // Orphans of the controller (a git or a render it started and did not stop) come to this process.
    nix::sys::prctl::set_child_subreaper(true)?;

    let mut failures = Vec::new();
    let mut mid_sync = Vec::new();
    let mut held_runs = Vec::new();
    println!(
        "run  delay    grace  sent-at  at the signal ({})  ->  exit",
        APPS.join(" | ")
    );
    for (run, (delay, grace)) in plan.iter().copied().enumerate() {
        let revision = git.commit(
            "sigterm",
            "main",
            &[("app/all.yaml", Some(&manifests(run + 1)))],
            &format!("run {}", run + 1),
        )?;
        let before_ops = operations(&apps).await?;
        let before_children = children();
        let log = work.path().join(format!("controller-{run:02}.log"));
        let replica = format!("sigterm-{run:02}");
        let mut child = start_controller(&kc, &cache, &log, grace, &replica)?;
        let started = Instant::now();
        let pid = child.id();
        while sigterm_mask(pid) == (false, false) && started.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_micros(200));
        }
        tokio::time::sleep_until((started + delay).into()).await;
        // What the Applications are doing as the signal goes: an operation this process started or
        // resumed (its record changed since the start) and has not ended is a sync in flight.
        let at_signal = operations(&apps).await?;
        let syncing: Vec<bool> = at_signal
            .iter()
            .zip(&before_ops)
            .map(|(now, before)| now.as_ref().is_some_and(|o| o.phase == OperationPhase::Running) && now != before)
            .collect();
        let sent_at = started.elapsed();
        let held = sigterm_mask(pid) == (true, false);
        kill(Pid::from_raw(pid as i32), Signal::SIGTERM)?;
        let ended = exit_within(&mut child, grace + MARGIN).await?;
        let after = operations(&apps).await?;
        let stray = strays(&before_children).await;
        let summary = format!(
            "{run:>3}  {:>5}ms  {:>3}s  {:>5}ms{}  {}  ->  {}",
            delay.as_millis(),
            grace.as_secs(),
            sent_at.as_millis(),
            if held { " (held)" } else { "" },
            at_signal.iter().map(describe).collect::<Vec<_>>().join(" | "),
            match &ended {
                Ok((status, took)) => format!("{status} after {} ms", took.as_millis()),
                Err(e) => e.clone(),
            }
        );
        println!("{summary}");
        if syncing.iter().any(|s| *s) {
            mid_sync.push((run, sent_at, grace));
        }
        if held {
            held_runs.push(run);
        }
        let mut problems = Vec::new();
        match &ended {
            Ok((status, _)) if status.success() => {}
            Ok((status, _)) => problems.push(format!("exited with {status}")),
            Err(e) => problems.push(e.clone()),
        }
        // The long grace period is never used up: a sync takes a few seconds, and nothing else may
        // keep the process (a start-up that waits on, a watch that never lists).
        let cut = std::fs::read_to_string(&log).is_ok_and(|l| l.contains("still busy after the grace period"))
            || ended.as_ref().is_ok_and(|(_, took)| *took >= grace);
        if grace == LONG_GRACE && cut {
            problems.push("it ran until the grace period was over".into());
        }
        // A process that ended within its grace period gave its Leases back (the next start takes
        // over at once); one cut short left them to lapse, and so does one whose ownership lapsed
        // (a renewal too slow on a loaded machine: it must not write then) or whose give-back the
        // API server did not answer in time — each says so in its log.
        let excused = std::fs::read_to_string(&log).is_ok_and(|l| {
            [
                "stopped working on every shard",
                "cannot give the Lease back",
                "cannot read the Lease",
                "cannot delete the member Lease",
                "no answer from the API server",
            ]
            .iter()
            .any(|m| l.contains(m))
        });
        if ended.is_ok() && !cut && !excused {
            let held = leases_of(&leases, &replica).await?;
            if !held.is_empty() {
                problems.push(format!(
                    "it left within its grace period but still holds the Leases {held:?}"
                ));
            }
        }
        if !stray.is_empty() {
            problems.push(format!("processes left behind: {stray:?}"));
        }
        // With the long grace period, a sync in flight at the signal finishes before the exit.
        if grace == LONG_GRACE {
            for ((name, was), now) in APPS.iter().zip(&syncing).zip(&after) {
                if *was && now.as_ref().is_none_or(|o| o.phase == OperationPhase::Running) {
                    problems.push(format!("{name}: the sync in flight did not finish: {}", describe(now)));
                }
            }
        }
        if !problems.is_empty() {
            failures.push(format!(
                "run {run} (revision {}): {}\n{summary}\n--- controller log:\n{}",
                &revision[..7],
                problems.join("; "),
                log_tail(&log)
            ));
        }
    }
    println!(
        "SIGTERM during a sync in {} runs: {:?}",
        mid_sync.len(),
        mid_sync
            .iter()
            .map(|(run, at, grace)| format!("run {run} at {} ms (grace {} s)", at.as_millis(), grace.as_secs()))
            .collect::<Vec<_>>()
    );
    println!("SIGTERM while held, before the handler was installed, in runs {held_runs:?}");
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n\n"));
    assert!(
        mid_sync.len() >= 2,
        "seed {seed}: SIGTERM arrived during a sync in only {} runs; the delays no longer reach the syncs",
        mid_sync.len()
    );

    // One more start finishes everything: both Applications at the newest revision, Synced and
    // Healthy, their operations Succeeded — none left Running.
    let newest = git.commit(
        "sigterm",
        "main",
        &[("app/all.yaml", Some(&manifests(RUNS + 1)))],
        "final",
    )?;
    let log = work.path().join("controller-final.log");
    let before_children = children();
    let mut child = start_controller(&kc, &cache, &log, LONG_GRACE, "sigterm-final")?;
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let list = apps.list(&Default::default()).await?;
        let done = APPS.iter().all(|name| {
            list.items.iter().any(|a| {
                a.name_any() == *name
                    && synced_healthy(a)
                    && a.status
                        .as_ref()
                        .and_then(|s| s.sync.as_ref())
                        .map(|s| s.revision.as_str())
                        == Some(newest.as_str())
                    && operation_of(a).is_some_and(|o| o.phase == OperationPhase::Succeeded && o.revision == newest)
            })
        });
        if done {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "seed {seed}: the Applications did not all end Synced with a Succeeded operation at {newest}: {:?}\n--- controller log:\n{}",
                operations(&apps).await?.iter().map(describe).collect::<Vec<_>>(),
                log_tail(&log)
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM)?;
    match exit_within(&mut child, LONG_GRACE + MARGIN).await? {
        Ok((status, _)) => assert!(status.success(), "the last controller exited with {status}"),
        Err(e) => panic!("the last controller: {e}\n{}", log_tail(&log)),
    }
    let stray = strays(&before_children).await;
    assert!(stray.is_empty(), "processes left behind: {stray:?}");
    Ok(())
}

//! Several `capstan controller` processes sharing one namespace's Applications through Leases
//! (crates/replicas), on a real control plane whose API server writes an audit log: every write
//! names the replica that made it (`User-Agent`), and the shard Leases' bodies say who held which
//! shard when. Replaying that log proves that each Application was written only by the replica
//! holding its shard at that moment (and ApplicationSets only by the leader) — including around a
//! replica frozen past its lease (SIGSTOP, then SIGCONT) and one leaving (SIGTERM).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use capstan_api::Application;
use capstan_api::status::{HealthCode, SyncCode};
use capstan_testkit::{GitServer, TestCluster};
use common::{capstan, text, until};
use futures::{StreamExt, stream};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

/// A controller replica, killed when dropped.
struct Replica {
    child: Child,
}

impl Drop for Replica {
    fn drop(&mut self) {
        // A frozen process must be thawed to die on SIGKILL's delivery… SIGKILL works on stopped
        // processes too, but SIGCONT first keeps the wait short.
        signal(&self.child, nix::sys::signal::Signal::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn signal(child: &Child, signal: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal);
}

fn start_replica(kc: &str, ns: &str, id: &str, lease: u64, dir: &Path) -> Replica {
    let log = std::fs::File::create(dir.join(format!("{id}.log"))).expect("a log file");
    let child = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["controller", "--kubeconfig", kc, "-n", ns, "--replica-id", id])
        .args([
            "--lease-duration",
            &lease.to_string(),
            "--poll-interval",
            "5",
            "--cache-dir",
        ])
        .arg(dir.join(format!("{id}-cache")))
        .env("CAPSTAN_LOG", "info,kube_client::client::builder=off")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("capstan starts");
    Replica { child }
}

fn log_of(dir: &Path, id: &str) -> String {
    let text = std::fs::read_to_string(dir.join(format!("{id}.log"))).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// `capstan controller status -o json`.
fn status(kc: &str, ns: &str) -> Value {
    let out = capstan(kc, &["controller", "status", "-n", ns, "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// Shards held per live replica.
fn shares(status: &Value) -> BTreeMap<String, (usize, u64, bool)> {
    status["replicas"]
        .as_array()
        .expect("replicas")
        .iter()
        .filter(|r| r["live"] == true)
        .map(|r| {
            (
                r["replica"].as_str().unwrap_or_default().to_string(),
                (
                    r["shards"].as_array().map_or(0, Vec::len),
                    r["applications"].as_u64().unwrap_or(0),
                    r["leader"] == true,
                ),
            )
        })
        .collect()
}

/// One directory per Application, each a ConfigMap named after it with `value`.
fn files(n: usize, value: &str) -> Vec<(String, String)> {
    (0..n)
        .map(|i| {
            (
                format!("apps/app-{i:04}/cm.yaml"),
                format!(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: app-{i:04}}}\ndata: {{value: '{value}'}}\n"
                ),
            )
        })
        .collect()
}

/// The slow Application's directory: a PreSync hook Job that runs for 15 s, and a ConfigMap.
fn slow_files(name: &str, value: &str) -> Vec<(String, String)> {
    vec![
        (
            format!("apps/{name}/hook.yaml"),
            format!(
                "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {name}-pre\n  annotations: {{capstan.dev/hook: PreSync}}\n\
                 spec:\n  backoffLimit: 0\n  template:\n    metadata: {{annotations: {{capstan.dev/simulate: \"delay=15\", run: '{value}'}}}}\n    spec: {{restartPolicy: Never, containers: [{{name: check, image: busybox}}]}}\n"
            ),
        ),
        (
            format!("apps/{name}/cm.yaml"),
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{value: '{value}'}}\n"),
        ),
    ]
}

fn commit(git: &GitServer, n: usize, value: &str) -> String {
    commit_with(git, n, value, None)
}

fn commit_with(git: &GitServer, n: usize, value: &str, slow: Option<&str>) -> String {
    let mut files = files(n, value);
    if let Some(slow) = slow {
        files.extend(slow_files(slow, value));
    }
    let refs: Vec<(&str, Option<&str>)> = files.iter().map(|(p, c)| (p.as_str(), Some(c.as_str()))).collect();
    git.commit("fleet", "main", &refs, value).expect("a commit")
}

fn application(ns: &str, name: &str, repo: &str, dest: &str) -> Application {
    serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "source": {"repoURL": repo, "targetRevision": "main", "path": format!("apps/{name}")},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": dest},
            "syncPolicy": {"automated": {"prune": true}},
        },
    }))
    .expect("an Application")
}

async fn create_apps(apps: &Api<Application>, ns: &str, n: usize, repo: &str, dest: &str) {
    let results: Vec<Result<Application, kube::Error>> = stream::iter(0..n)
        .map(|i| async move {
            apps.create(
                &PostParams::default(),
                &application(ns, &format!("app-{i:04}"), repo, dest),
            )
            .await
        })
        .buffer_unordered(16)
        .collect()
        .await;
    for r in results {
        r.expect("Application created");
    }
}

/// Wait until every Application is Synced and Healthy at `revision`.
async fn all_synced(apps: &Api<Application>, n: usize, revision: &str, timeout: Duration, dir: &Path, ids: &[&str]) {
    let started = std::time::Instant::now();
    loop {
        let list = apps.list(&ListParams::default()).await.expect("a list");
        let done = list
            .items
            .iter()
            .filter(|a| {
                a.status.as_ref().is_some_and(|s| {
                    s.sync
                        .as_ref()
                        .is_some_and(|x| x.status == SyncCode::Synced && x.revision == revision)
                        && s.health.as_ref().is_some_and(|h| h.status == HealthCode::Healthy)
                })
            })
            .count();
        if done == n {
            return;
        }
        if started.elapsed() > timeout {
            let logs: Vec<String> = ids.iter().map(|id| format!("--- {id}\n{}", log_of(dir, id))).collect();
            panic!(
                "{done}/{n} Applications Synced and Healthy at {revision} after {timeout:?}\n{}",
                logs.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What the audit log says, replayed in order.
#[derive(Debug, Default)]
struct Replay {
    /// Writes per Application, by replica.
    writers: BTreeMap<String, BTreeSet<String>>,
    /// Writes made by a replica that did not hold the shard (or the leadership) at that moment.
    violations: Vec<String>,
    /// Shard Lease writes by replica.
    lease_writes: BTreeMap<String, usize>,
    /// ApplicationSet writes by replica.
    appset_writers: BTreeSet<String>,
    /// Shards whose Lease passed from one replica to another after the first Application write (a
    /// handover under load: a lease that lapsed while its holder was starved of CPU).
    moved_after_writes: BTreeSet<u16>,
}

fn replica_of(agent: &str) -> Option<String> {
    let start = agent.find("(replica ")? + "(replica ".len();
    Some(agent[start..].trim_end_matches(')').to_string())
}

/// Replay the audit log: track each shard's and the leader's holder from the Leases' bodies, and
/// check every write of a replica to an Application of `ns` (or its ConfigMap in `dest`) against
/// the holder of its shard then.
fn replay(log: &Path, ns: &str, dest: &str) -> Replay {
    let text = std::fs::read_to_string(log).expect("the audit log");
    let mut holders: BTreeMap<u16, Option<String>> = BTreeMap::new();
    let mut leader: Option<String> = None;
    let mut out = Replay::default();
    for line in text.lines() {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if event["stage"] != "ResponseComplete" {
            continue;
        }
        let code = event["responseStatus"]["code"].as_u64().unwrap_or(0);
        if !(200..300).contains(&code) {
            continue;
        }
        let verb = event["verb"].as_str().unwrap_or_default();
        let object = &event["objectRef"];
        let resource = object["resource"].as_str().unwrap_or_default();
        let namespace = object["namespace"].as_str().unwrap_or_default();
        let name = object["name"].as_str().unwrap_or_default().to_string();
        let writer = replica_of(event["userAgent"].as_str().unwrap_or_default());
        if resource == "leases" && namespace == ns {
            let holder = if verb == "delete" {
                None
            } else {
                event["requestObject"]["spec"]["holderIdentity"]
                    .as_str()
                    .filter(|h| !h.is_empty())
                    .map(str::to_string)
            };
            if let Some(shard) = name.strip_prefix("capstan-shard-").and_then(|s| s.parse::<u16>().ok()) {
                let before = holders.insert(shard, holder.clone()).flatten();
                if !out.writers.is_empty() && before.is_some() && holder.is_some() && before != holder {
                    out.moved_after_writes.insert(shard);
                }
                if let Some(w) = &writer {
                    *out.lease_writes.entry(w.clone()).or_default() += 1;
                }
            } else if name == "capstan-leader" {
                leader = holder;
            }
            continue;
        }
        let Some(writer) = writer else { continue };
        let uri = event["requestURI"].as_str().unwrap_or_default();
        if resource == "applicationsets" && namespace == ns {
            out.appset_writers.insert(writer.clone());
            if leader.as_deref() != Some(writer.as_str()) {
                out.violations.push(format!(
                    "{writer} wrote ApplicationSet {name} while {leader:?} led: {line}"
                ));
            }
            continue;
        }
        let app = match resource {
            "applications" if namespace == ns => name,
            "configmaps" if namespace == dest => name,
            // Hook Jobs are named APP-pre or APP-pre-REVISION.
            "jobs" if namespace == dest => name.split("-pre").next().unwrap_or_default().to_string(),
            _ => continue,
        };
        if resource == "applications" && uri.contains("fieldManager=capstan-applicationset") {
            if leader.as_deref() != Some(writer.as_str()) {
                out.violations.push(format!(
                    "{writer} wrote Application {app} for an ApplicationSet while {leader:?} led"
                ));
            }
            continue;
        }
        let shard = capstan_replicas::hashing::shard_of(ns, &app);
        let holder = holders.get(&shard).cloned().flatten();
        if holder.as_deref() != Some(writer.as_str()) {
            out.violations.push(format!(
                "{writer} wrote {resource} {app} (shard {shard}) while {holder:?} held it: {line}"
            ));
        }
        out.writers.entry(app).or_default().insert(writer);
    }
    out
}

/// Capstan's namespace on the test's plane.
const NAMESPACE: &str = "capstan";
/// Where the Applications deploy.
const DEST: &str = "fleet";

/// An audited control plane with Capstan installed in [`NAMESPACE`] and [`DEST`] created, and a git
/// server with the repository `fleet`: the plane, the server, the kubeconfig and the repository URL.
async fn start() -> anyhow::Result<(TestCluster, GitServer, String, String)> {
    let (cluster, git) = tokio::try_join!(TestCluster::start_audited(), GitServer::start())?;
    let kc = cluster.kubeconfig().to_string_lossy().into_owned();
    let out = capstan(&kc, &["install", "-n", NAMESPACE]);
    assert!(out.status.success(), "{}", text(&out));
    let out = common::kubectl(&kc, &["create", "namespace", DEST]);
    assert!(out.status.success(), "{}", text(&out));
    git.create_repo("fleet")?;
    let repo = git.git_url("fleet");
    Ok((cluster, git, kc, repo))
}

/// The "three replicas share 2,000 Applications": every Application is synced, each by
/// exactly one replica — the holder of its shard — and every replica takes a share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_share_2000_applications_each_written_by_the_holder_of_its_shard() -> anyhow::Result<()> {
    const N: usize = 2000;
    let (cluster, git, kc, repo) = start().await?;
    let (ns, dest) = (NAMESPACE, DEST);
    let revision = commit(&git, N, "one");
    let dir = tempfile::tempdir()?;
    let ids = ["r0", "r1", "r2"];
    let _replicas: Vec<Replica> = ids.iter().map(|id| start_replica(&kc, ns, id, 6, dir.path())).collect();

    // All three join and every shard is held before the Applications arrive.
    until(
        "three live replicas holding every shard",
        Duration::from_secs(60),
        || {
            let s = shares(&status(&kc, ns));
            s.len() == 3 && s.values().map(|(shards, _, _)| shards).sum::<usize>() == 32 && s.values().all(|v| v.0 > 0)
        },
    );
    let client = cluster.client().await?;
    let apps: Api<Application> = Api::namespaced(client.clone(), ns);
    create_apps(&apps, ns, N, &repo, dest).await;
    all_synced(&apps, N, &revision, Duration::from_secs(900), dir.path(), &ids).await;

    let s = status(&kc, ns);
    let per = shares(&s);
    assert_eq!(per.len(), 3, "{s}");
    assert_eq!(
        per.values().map(|v| v.1).sum::<u64>(),
        N as u64,
        "every Application is owned: {s}"
    );
    assert_eq!(per.values().filter(|v| v.2).count(), 1, "one leader: {s}");
    assert!(per.values().all(|v| v.1 > 0), "every replica has a share: {s}");

    let replay = replay(&cluster.audit_log(), ns, dest);
    assert!(
        replay.violations.is_empty(),
        "{:#?}",
        &replay.violations[..replay.violations.len().min(10)]
    );
    assert_eq!(replay.writers.len(), N, "every Application was written");
    // Two writers for one Application are legitimate only when its shard changed hands between
    // them (every write was already checked against the holder of the moment, above).
    let shared: Vec<_> = replay
        .writers
        .iter()
        .filter(|(app, w)| {
            w.len() != 1
                && !replay
                    .moved_after_writes
                    .contains(&capstan_replicas::hashing::shard_of(ns, app))
        })
        .collect();
    assert!(
        shared.is_empty(),
        "written by more than one replica though their shard never moved: {shared:?} (moved: {:?})",
        replay.moved_after_writes
    );
    let by: BTreeSet<&String> = replay.writers.values().flatten().collect();
    assert_eq!(by.len(), 3, "all three replicas wrote: {by:?}");
    Ok(())
}

/// A replica frozen longer than its lease (SIGSTOP: a partition as the others see it) in the middle
/// of a sync (its PreSync hook Job running) loses its shards to the other, which syncs its
/// Applications, that one included; when it thaws (SIGCONT), the sync it was running writes nothing
/// more — the audit log shows no write from it to a shard it did not hold — and it takes a share
/// back through the Leases. The leader leaving (SIGTERM) hands over its shards and the
/// leadership without waiting for the lease to expire, and ApplicationSets stay the leader's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_replica_writes_nothing_after_its_shards_are_taken_and_a_leaving_one_hands_over() -> anyhow::Result<()>
{
    const N: usize = 60;
    let (cluster, git, kc, repo) = start().await?;
    let (ns, dest) = (NAMESPACE, DEST);
    commit(&git, N, "zero");
    let dir = tempfile::tempdir()?;
    let ids = ["r0", "r1"];
    let mut r0 = start_replica(&kc, ns, "r0", 6, dir.path());
    until("r0 holds every shard", Duration::from_secs(60), || {
        shares(&status(&kc, ns)).get("r0").is_some_and(|v| v.0 == 32 && v.2)
    });
    // r0 leads (it came first); r1 joins and takes a share.
    let r1 = start_replica(&kc, ns, "r1", 6, dir.path());
    until("r1 takes a share", Duration::from_secs(60), || {
        let s = shares(&status(&kc, ns));
        s.get("r1").is_some_and(|v| v.0 > 0) && s.values().map(|v| v.0).sum::<usize>() == 32
    });
    // An Application in one of r1's shards whose sync runs a 15 s hook: r1 is frozen in the middle
    // of it.
    let r1_shards: Vec<u64> = status(&kc, ns)["replicas"]
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["replica"] == "r1"))
        .and_then(|r| r["shards"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    let slow = (0..)
        .map(|k| format!("slow-{k}"))
        .find(|name| r1_shards.contains(&u64::from(capstan_replicas::hashing::shard_of(ns, name))))
        .expect("a name in r1's shards");
    let first = commit_with(&git, N, "one", Some(&slow));
    let client = cluster.client().await?;
    let apps: Api<Application> = Api::namespaced(client.clone(), ns);
    create_apps(&apps, ns, N, &repo, dest).await;
    apps.create(&PostParams::default(), &application(ns, &slow, &repo, dest))
        .await?;
    // An ApplicationSet (list generator) whose Applications the leader makes.
    let appset = json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "ApplicationSet",
        "metadata": {"name": "listed", "namespace": ns},
        "spec": {
            "generators": [{"list": {"elements": [{"name": "app-9000"}, {"name": "app-9001"}]}}],
            "template": {
                "metadata": {"name": "{{name}}"},
                "spec": {
                    "source": {"repoURL": repo, "targetRevision": "main", "path": "apps/app-0000"},
                    "destination": {"server": "https://kubernetes.default.svc", "namespace": format!("{dest}-set")},
                    "syncPolicy": {"syncOptions": ["CreateNamespace=true"]},
                },
            },
        },
    });
    let sets: Api<capstan_api::ApplicationSet> = Api::namespaced(client.clone(), ns);
    sets.create(&PostParams::default(), &serde_json::from_value(appset)?)
        .await?;
    all_synced(&apps, N + 1, &first, Duration::from_secs(300), dir.path(), &ids).await;
    let started = std::time::Instant::now();
    while apps.get_opt("app-9001").await?.is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the leader made the ApplicationSet's Applications"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // Freeze r1 in the middle of the slow Application's sync (its new hook Job running): r0 takes
    // its shards once r1's lease has expired and syncs everything, that Application included.
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), dest);
    let hook = format!("{slow}-pre");
    let first_hook = jobs.get(&hook).await?.metadata.uid;
    let second = commit_with(&git, N, "two", Some(&slow));
    let started = std::time::Instant::now();
    loop {
        let job = jobs.get_opt(&hook).await?;
        let app = apps.get(&slow).await?;
        let running = app
            .status
            .as_ref()
            .and_then(|s| s.operation_state.as_ref())
            .is_some_and(|o| o.phase == capstan_api::operation::OperationPhase::Running);
        if running && job.is_some_and(|j| j.metadata.uid != first_hook) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "r1 started the slow sync: {}",
            log_of(dir.path(), "r1")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    signal(&r1.child, nix::sys::signal::Signal::SIGSTOP);
    until("r0 takes r1's shards", Duration::from_secs(90), || {
        status(&kc, ns)["replicas"].as_array().is_some_and(|rs| {
            rs.iter()
                .any(|r| r["replica"] == "r0" && r["shards"].as_array().is_some_and(|s| s.len() == 32))
        })
    });
    all_synced(&apps, N + 1, &second, Duration::from_secs(300), dir.path(), &ids).await;

    // Thawed, r1 stops on its own (its lease lapsed), then takes a share back through the Leases.
    signal(&r1.child, nix::sys::signal::Signal::SIGCONT);
    until("r1 takes a share again", Duration::from_secs(90), || {
        let s = shares(&status(&kc, ns));
        s.get("r1").is_some_and(|v| v.0 > 0) && s.values().map(|v| v.0).sum::<usize>() == 32
    });
    let third = commit_with(&git, N, "three", Some(&slow));
    all_synced(&apps, N + 1, &third, Duration::from_secs(300), dir.path(), &ids).await;

    // r0 (the leader) leaves: r1 takes every shard and the leadership, and syncs what follows.
    signal(&r0.child, nix::sys::signal::Signal::SIGTERM);
    let exited = until("r0 exits", Duration::from_secs(60), || {
        matches!(r0.child.try_wait(), Ok(Some(_)))
    });
    eprintln!("r0 left in {exited:?}");
    until("r1 holds every shard and leads", Duration::from_secs(30), || {
        shares(&status(&kc, ns)).get("r1").is_some_and(|v| v.0 == 32 && v.2)
    });
    let fourth = commit_with(&git, N, "four", Some(&slow));
    all_synced(&apps, N + 1, &fourth, Duration::from_secs(300), dir.path(), &ids).await;

    let replay = replay(&cluster.audit_log(), ns, dest);
    assert!(
        replay.violations.is_empty(),
        "{:#?}",
        &replay.violations[..replay.violations.len().min(10)]
    );
    let by: BTreeSet<&String> = replay.writers.values().flatten().collect();
    assert_eq!(by.len(), 2, "both replicas wrote: {by:?}");
    assert!(
        !replay.appset_writers.is_empty(),
        "the leader made the ApplicationSet's Applications"
    );
    let thawed = std::fs::read_to_string(dir.path().join("r1.log"))?;
    assert!(
        thawed.contains("was not renewed in time"),
        "r1 noticed: {}",
        log_of(dir.path(), "r1")
    );
    drop(r1);
    Ok(())
}

/// Each Application's directory at revision `value`: a ConfigMap, and a PreSync hook Job named for
/// the revision (it runs for 3 s), so that every run of a revision's hook is a create of that name
/// and a second run would first delete it.
fn hooked_files(n: usize, value: &str) -> Vec<(String, String)> {
    let mut out = files(n, value);
    for i in 0..n {
        out.push((
            format!("apps/app-{i:04}/hook.yaml"),
            format!(
                "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: app-{i:04}-pre-{value}\n  annotations: {{capstan.dev/hook: PreSync}}\n\
                 spec:\n  backoffLimit: 0\n  template:\n    metadata: {{annotations: {{capstan.dev/simulate: \"delay=3\"}}}}\n    spec: {{restartPolicy: Never, containers: [{{name: check, image: busybox}}]}}\n"
            ),
        ));
    }
    out
}

/// A small xorshift generator: the test prints its seed, so a failing order of kills can be replayed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Issue 31's SIGKILL case: two replicas, 20 commits, and after each a replica killed with SIGKILL at
/// a random moment (before its poll saw the commit, during a hook, between waves) and started again
/// with its identity. In the end every Application is Synced and Healthy at the last revision; no
/// hook ran twice (a resumed operation adopts the hook Job its interrupted run created: no hook Job
/// was deleted or created twice); no ConfigMap was deleted; and no write came from a replica that did
/// not hold the shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_killed_at_random_moments_leave_every_application_synced_and_no_hook_run_twice() -> anyhow::Result<()>
{
    const N: usize = 8;
    let (cluster, git, kc, repo) = start().await?;
    let (ns, dest) = (NAMESPACE, DEST);
    let commit_hooked = |value: &str| {
        let files = hooked_files(N, value);
        let refs: Vec<(&str, Option<&str>)> = files.iter().map(|(p, c)| (p.as_str(), Some(c.as_str()))).collect();
        git.commit("fleet", "main", &refs, value).expect("a commit")
    };
    commit_hooked("v0");
    let dir = tempfile::tempdir()?;
    let ids = ["r0", "r1"];
    let mut replicas: Vec<Replica> = ids.iter().map(|id| start_replica(&kc, ns, id, 4, dir.path())).collect();
    until("two replicas holding every shard", Duration::from_secs(60), || {
        let s = shares(&status(&kc, ns));
        s.len() == 2 && s.values().map(|v| v.0).sum::<usize>() == 32
    });
    let client = cluster.client().await?;
    let apps: Api<Application> = Api::namespaced(client.clone(), ns);
    create_apps(&apps, ns, N, &repo, dest).await;

    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    eprintln!("kill order seed: {seed}");
    let mut rng = Rng(seed);
    let mut last = String::new();
    for k in 1..=20 {
        last = commit_hooked(&format!("v{k}"));
        tokio::time::sleep(Duration::from_millis(rng.below(3000))).await;
        let victim = rng.below(2) as usize;
        signal(&replicas[victim].child, nix::sys::signal::Signal::SIGKILL);
        let _ = replicas[victim].child.wait();
        replicas[victim] = start_replica(&kc, ns, ids[victim], 4, dir.path());
    }
    all_synced(&apps, N, &last, Duration::from_secs(400), dir.path(), &ids).await;

    let replay = replay(&cluster.audit_log(), ns, dest);
    assert!(
        replay.violations.is_empty(),
        "{:#?}",
        &replay.violations[..replay.violations.len().min(10)]
    );
    // Every write to the hook Jobs and ConfigMaps, from the audit log.
    let text = std::fs::read_to_string(cluster.audit_log())?;
    let mut created: BTreeMap<String, usize> = BTreeMap::new();
    let mut deleted = Vec::new();
    for line in text.lines() {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let object = &event["objectRef"];
        if event["stage"] != "ResponseComplete" || object["namespace"] != dest {
            continue;
        }
        let code = event["responseStatus"]["code"].as_u64().unwrap_or(0);
        let name = object["name"].as_str().unwrap_or_default().to_string();
        let resource = object["resource"].as_str().unwrap_or_default();
        let verb = event["verb"].as_str().unwrap_or_default();
        let by_replica = replica_of(event["userAgent"].as_str().unwrap_or_default()).is_some();
        if !by_replica || !(200..300).contains(&code) {
            continue;
        }
        if verb == "delete" && (resource == "jobs" || resource == "configmaps") {
            deleted.push(format!("{resource}/{name}"));
        }
        // A server-side apply that creates answers 201.
        if resource == "jobs" && code == 201 {
            *created.entry(name).or_default() += 1;
        }
    }
    assert!(deleted.is_empty(), "nothing deleted: {deleted:?}");
    let twice: Vec<_> = created.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "hooks created more than once: {twice:?}");
    for i in 0..N {
        let hook = format!("app-{i:04}-pre-v20");
        assert_eq!(
            created.get(&hook),
            Some(&1),
            "the last revision's hook ran once: {hook}"
        );
    }
    drop(replicas);
    Ok(())
}

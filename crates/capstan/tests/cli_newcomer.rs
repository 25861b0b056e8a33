//! What a new user meets first in the CLI and the API, against a real control plane, a real git
//! server and a real `capstan controller --listen`: output into a pipe closed early, colour
//! (`--color`, `NO_COLOR`), refused rollbacks (the CLI's exit code, the API's status), `app wait`
//! on a ComparisonError, the MESSAGE column of `app list`, objects printed without kubectl's
//! last-applied annotation or managed fields, the clusters' labels in the API, and the
//! controller's log (plain text into a pipe, `--log-format json`, failed logins at WARN).

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use capstan_testkit::capstan::unique_namespace;
use capstan_testkit::{GitServer, TestCluster};
use common::http::Http;
use serde_json::{Value, json};

use common::{capstan, capstan_in, kubectl, text, until};

const SETTINGS: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: blue}\n";
const BROKEN: &str = "kind: ConfigMap\nmetadata: [unclosed\n";

/// The cluster Secret the playground applies for `in-cluster` (in Capstan's namespace `ns`): labels
/// only, applied with kubectl (so it carries kubectl's last-applied annotation).
fn in_cluster_labels(ns: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cluster-in-cluster\n  namespace: {ns}\n  labels: {{capstan.dev/secret-type: cluster, env: staging}}\ntype: Opaque\nstringData: {{name: in-cluster, server: 'https://kubernetes.default.svc'}}\n"
    )
}

fn application(ns: &str, name: &str, repo: &str, path: &str, automated: bool) -> String {
    let automated = if automated { ", automated: {}" } else { "" };
    format!(
        "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  source: {{repoURL: '{repo}', targetRevision: main, path: {path}}}\n  destination: {{server: 'https://kubernetes.default.svc', namespace: newcomer-{name}}}\n  syncPolicy: {{syncOptions: [CreateNamespace=true]{automated}}}\n"
    )
}

/// `kubectl apply -f` of `yaml`, written to `dir/file`.
fn apply(kc: &str, dir: &std::path::Path, file: &str, yaml: &str) {
    let path = dir.join(file);
    std::fs::write(&path, yaml).expect("write the manifest");
    let out = kubectl(kc, &["apply", "-f", &path.to_string_lossy()]);
    assert!(out.status.success(), "kubectl apply {file}: {}", text(&out));
}

/// `capstan ARGS` with its stdout a pipe whose reading end is closed before anything is written:
/// its exit status and its stderr.
fn into_closed_pipe(kc: &str, args: &[&str]) -> (std::process::ExitStatus, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(args)
        .env("KUBECONFIG", kc)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run capstan");
    // The reader goes away at once, as `head -1` does once it has its line.
    drop(child.stdout.take());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr is piped")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    (child.wait().expect("wait for capstan"), stderr)
}

/// `capstan ARGS` on a terminal (`script` gives it a pseudo-terminal), with `env` set: what it printed.
fn on_a_terminal(kc: &str, env: &[(&str, &str)], args: &[&str]) -> String {
    let command = std::iter::once(env!("CARGO_BIN_EXE_capstan"))
        .chain(args.iter().copied())
        .map(|a| format!("'{a}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("KUBECONFIG", kc)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run script (util-linux)");
    text(&out)
}

fn summary<'a>(list: &'a Value, name: &str) -> Option<&'a Value> {
    list["items"].as_array()?.iter().find(|a| a["name"] == name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_newcomer_gets_clear_answers_from_the_cli_and_the_api() -> anyhow::Result<()> {
    // The run's shared plane, Capstan in a namespace of this test's own.
    let (cluster, git) = tokio::try_join!(TestCluster::shared(), GitServer::start())?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let ns = unique_namespace();
    let out = capstan(&kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out));
    let password = common::admin_password(&out);
    let work = tempfile::tempdir()?;
    apply(&kc, work.path(), "in-cluster.yaml", &in_cluster_labels(&ns));
    let (_controller, base, _, log) =
        common::controller_with_server_log(&kc, &work.path().join("cache"), &["-n", &ns])?;

    git.create_repo("edges")?;
    git.commit(
        "edges",
        "main",
        &[("app/settings.yaml", Some(SETTINGS)), ("broken/bad.yaml", Some(BROKEN))],
        "v1",
    )?;
    let repo = git.git_url("edges");
    apply(
        &kc,
        work.path(),
        "manual.yaml",
        &application(&ns, "manual", &repo, "app", false),
    );
    apply(
        &kc,
        work.path(),
        "auto.yaml",
        &application(&ns, "auto", &repo, "app", true),
    );
    apply(
        &kc,
        work.path(),
        "broken.yaml",
        &application(&ns, "broken", &repo, "broken", false),
    );
    let sync = capstan_in(&kc, &ns, &["app", "sync", "manual", "--wait", "--timeout", "120"]);
    assert!(sync.status.success(), "{}", text(&sync));

    // Rollbacks that cannot run are refused when asked, with the reason, and nothing is requested.
    let automated = capstan_in(&kc, &ns, &["app", "rollback", "auto", "0"]);
    assert_eq!(automated.status.code(), Some(1), "{}", text(&automated));
    assert!(
        text(&automated).contains("automated sync is enabled") && !text(&automated).contains("requested"),
        "{}",
        text(&automated)
    );
    let missing = capstan_in(&kc, &ns, &["app", "rollback", "manual", "7"]);
    assert_eq!(missing.status.code(), Some(1), "{}", text(&missing));
    assert!(
        text(&missing).contains("history entry 7 not found (entries: 0)"),
        "{}",
        text(&missing)
    );
    for name in ["auto", "manual"] {
        let annotations = kubectl(
            &kc,
            &[
                "-n",
                &ns,
                "get",
                "application",
                name,
                "-o",
                "jsonpath={.metadata.annotations}",
            ],
        );
        assert!(
            !text(&annotations).contains("capstan.dev/operation"),
            "a refused rollback wrote no request on {name}: {}",
            text(&annotations)
        );
    }
    // The API refuses the same way: 409 while automated sync is on, 422 for an unknown entry.
    let mut http = Http::new(&base);
    until("the server to be ready", Duration::from_secs(30), || {
        http.get("/readyz").status == 200
    });
    assert_eq!(http.login("admin", &password).status, 200);
    let conflict = http.post("/api/applications/auto/rollback", json!({"id": 0}));
    assert_eq!(conflict.status, 409, "{}", conflict.body);
    assert!(
        conflict.json()["error"]
            .as_str()
            .is_some_and(|e| e.contains("automated sync"))
    );
    let unknown = http.post("/api/applications/manual/rollback", json!({"id": 7}));
    assert_eq!(unknown.status, 422, "{}", unknown.body);
    assert!(
        unknown.json()["error"]
            .as_str()
            .is_some_and(|e| e.contains("history entry 7 not found"))
    );

    // `app wait` on an Application that cannot be compared says why at once.
    until("broken to have a ComparisonError", Duration::from_secs(60), || {
        let list = capstan_in(&kc, &ns, &["app", "get", "broken", "-o", "json"]);
        String::from_utf8_lossy(&list.stdout).contains("ComparisonError")
    });
    let started = Instant::now();
    let wait = capstan_in(&kc, &ns, &["app", "wait", "broken", "--timeout", "120"]);
    assert_eq!(wait.status.code(), Some(1), "{}", text(&wait));
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "failed after {:?}, not at once",
        started.elapsed()
    );
    assert!(
        text(&wait).contains("ComparisonError")
            && text(&wait).contains("bad.yaml")
            && !text(&wait).contains("timed out"),
        "{}",
        text(&wait)
    );

    // The list says what is wrong without -o wide.
    let list = text(&capstan_in(&kc, &ns, &["app", "list"]));
    let header = list.lines().next().unwrap_or_default();
    assert!(header.ends_with("MESSAGE"), "{list}");
    let broken_row = list.lines().find(|l| l.starts_with("broken ")).unwrap_or_default();
    assert!(broken_row.contains("ComparisonError: "), "{list}");
    // The CLUSTER column names the cluster Capstan runs in, as the UI does (not its URL).
    assert!(
        broken_row.contains(" in-cluster ") && !broken_row.contains("https://"),
        "{list}"
    );

    // Filters: by label (the API server's selector), project, repository and cluster.
    let none = capstan_in(&kc, &ns, &["app", "list", "-l", "team=nobody"]);
    assert!(none.status.success(), "{}", text(&none));
    assert_eq!(
        String::from_utf8_lossy(&none.stdout).lines().count(),
        1,
        "{}",
        text(&none)
    );
    let some = text(&capstan_in(
        &kc,
        &ns,
        &[
            "app",
            "list",
            "-p",
            "default",
            "--repo",
            &repo,
            "--cluster",
            "in-cluster",
        ],
    ));
    assert!(some.contains("manual ") && some.contains("auto "), "{some}");
    let other = text(&capstan_in(&kc, &ns, &["app", "list", "--cluster", "elsewhere"]));
    assert!(!other.contains("manual "), "{other}");

    // A reader that goes away early: no panic, no message, status 0.
    for output in ["json", "yaml", "table"] {
        let (status, stderr) = into_closed_pipe(&kc, &["app", "list", "-o", output, "-n", &ns]);
        assert_eq!(status.code(), Some(0), "-o {output}: {stderr}");
        assert!(stderr.is_empty(), "-o {output} is quiet: {stderr}");
    }

    // Colour: on a terminal unless NO_COLOR, never into a pipe unless --color always.
    git.commit(
        "edges",
        "main",
        &[("app/settings.yaml", Some(&SETTINGS.replace("blue", "green")))],
        "v2",
    )?;
    let green = "\x1b[32m+  color: green";
    let diff = capstan_in(&kc, &ns, &["app", "diff", "manual"]);
    assert_eq!(diff.status.code(), Some(1), "{}", text(&diff));
    assert!(
        text(&diff).contains("+  color: green") && !text(&diff).contains('\x1b'),
        "{}",
        text(&diff)
    );
    let always = text(&capstan_in(&kc, &ns, &["app", "diff", "manual", "--color", "always"]));
    assert!(always.contains(green), "{always}");
    let terminal = on_a_terminal(&kc, &[], &["app", "diff", "manual", "-n", &ns]);
    assert!(terminal.contains(green), "{terminal}");
    let no_color = on_a_terminal(&kc, &[("NO_COLOR", "1")], &["app", "diff", "manual", "-n", &ns]);
    assert!(
        no_color.contains("+  color: green") && !no_color.contains('\x1b'),
        "{no_color}"
    );
    let never = on_a_terminal(&kc, &[], &["app", "diff", "manual", "--color", "never", "-n", &ns]);
    assert!(never.contains("+  color: green") && !never.contains('\x1b'), "{never}");

    // Who asked: $LOGNAME when $USER is unset (as in some service and container shells).
    let sync = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["app", "sync", "manual", "--wait", "--timeout", "120", "-n", &ns])
        .env("KUBECONFIG", &kc)
        .env_remove("USER")
        .env("LOGNAME", "newcomer")
        .output()?;
    assert!(sync.status.success(), "{}", text(&sync));
    let get = capstan_in(&kc, &ns, &["app", "get", "manual", "-o", "json"]);
    let app: Value = serde_json::from_slice(&get.stdout)?;
    let by = app["status"]["operationState"]["operation"]["initiatedBy"]
        .as_str()
        .unwrap_or_default();
    assert!(by.starts_with("cli:newcomer:"), "{app}");

    // Printed objects: neither kubectl's copy of what it applied (a cluster Secret's holds its
    // credentials) nor managed fields.
    let clusters = capstan_in(&kc, &ns, &["cluster", "list", "-o", "yaml"]);
    assert!(clusters.status.success(), "{}", text(&clusters));
    let clusters = text(&clusters);
    assert!(clusters.contains("env: staging"), "{clusters}");
    assert!(!clusters.contains("last-applied-configuration"), "{clusters}");
    for output in ["yaml", "json"] {
        let get = text(&capstan_in(&kc, &ns, &["app", "get", "manual", "-o", output]));
        assert!(get.contains("manual"), "{get}");
        assert!(
            !get.contains("last-applied-configuration") && !get.contains("managedFields"),
            "-o {output}: {get}"
        );
        let list = text(&capstan_in(&kc, &ns, &["app", "list", "-o", output]));
        assert!(
            !list.contains("last-applied-configuration") && !list.contains("managedFields"),
            "list -o {output}: {list}"
        );
    }

    // The API gives the clusters' labels, in-cluster's included.
    until("in-cluster's labels in the API", Duration::from_secs(30), || {
        summary(&http.get("/api/clusters").json(), "in-cluster").is_some_and(|c| c["labels"]["env"] == "staging")
    });

    // The log: a failed login at WARN, with the account and the address as an address; no colour
    // codes into a pipe.
    let failed = Http::new(&base).login("admin", "not-the-password");
    assert_eq!(failed.status, 401);
    let line = || {
        let kept = log.lock().unwrap_or_else(|p| p.into_inner()).clone();
        kept.lines().find(|l| l.contains("failed login")).map(str::to_string)
    };
    until("the failed login in the log", Duration::from_secs(10), || {
        line().is_some()
    });
    let line = line().unwrap_or_default();
    assert!(
        line.contains("WARN") && line.contains("account=admin") && line.contains("addr=127.0.0.1"),
        "{line}"
    );
    assert!(!line.contains("Some("), "{line}");
    let kept = log.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(
        !kept.contains('\x1b'),
        "no ANSI codes in a log written to a pipe:\n{kept}"
    );

    // Deleting asks first; without a terminal to ask on, only with --yes.
    let refused = capstan_in(&kc, &ns, &["app", "delete", "broken"]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(text(&refused).contains("pass --yes"), "{}", text(&refused));
    let still = kubectl(&kc, &["-n", &ns, "get", "application", "broken"]);
    assert!(still.status.success(), "not deleted: {}", text(&still));
    let answered_no = on_a_terminal(&kc, &[], &["app", "delete", "broken", "-n", &ns]);
    assert!(answered_no.contains("Delete Application broken"), "{answered_no}");
    let still = kubectl(&kc, &["-n", &ns, "get", "application", "broken"]);
    assert!(still.status.success(), "not deleted without a yes: {}", text(&still));
    let deleted = capstan_in(&kc, &ns, &["app", "delete", "broken", "--yes", "--wait"]);
    assert!(deleted.status.success(), "{}", text(&deleted));

    // --log-format json: one object per line.
    let json_log = capstan_in(
        &kc,
        &ns,
        &["app", "list", "--log", "debug", "--log-format", "json", "-o", "json"],
    );
    assert!(json_log.status.success(), "{}", text(&json_log));
    let lines: Vec<Value> = String::from_utf8_lossy(&json_log.stderr)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["level"] == "DEBUG" && l["target"].is_string() && l["timestamp"].is_string()),
        "{lines:?}"
    );
    Ok(())
}

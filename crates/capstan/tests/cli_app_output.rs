//! `capstan app …` through the binary, for what `cli_app.rs` does not cover: machine-readable output
//! (`get -o yaml|json`, `list -o json`), `wait --sync` (success and timeout), `sync --prune --wait`
//! against a sync without `--prune`, `get --hard-refresh`, the exit codes of `diff` (and its
//! `--deny-implicit-default-project`), and
//! `delete --cascade=false` — against a real control plane, a real git server and a real
//! `capstan controller`; through the kubeconfig and, the same, logged in to the server.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use capstan_testkit::capstan::unique_namespace;
use capstan_testkit::{GitServer, TestCluster};
use serde_json::Value;

use common::modes::{Cli, Mode};
use common::{capstan, controller_with_server, kubectl, text, until};

const SETTINGS: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: blue}\n";
const EXTRA: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: extra}\ndata: {kept: \"until pruned\"}\n";

/// `capstan app get NAME -o json`, parsed.
fn get_json(cli: &Cli, name: &str) -> Value {
    let out = cli.run(&["app", "get", name, "-o", "json"]);
    assert!(out.status.success(), "app get -o json: {}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("app get -o json prints JSON ({e}): {}", text(&out)))
}

fn sync_status(app: &Value) -> (String, String) {
    let sync = &app["status"]["sync"];
    (
        sync["status"].as_str().unwrap_or_default().to_string(),
        sync["revision"].as_str().unwrap_or_default().to_string(),
    )
}

/// Whether the ConfigMap `name` exists in namespace `dest`, and its `color` if it has one.
fn config_map(kc: &str, dest: &str, name: &str) -> Option<String> {
    let out = kubectl(
        kc,
        &["-n", dest, "get", "configmap", name, "-o", "jsonpath={.data.color}"],
    );
    if out.status.success() {
        return Some(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    assert!(
        text(&out).contains("NotFound"),
        "kubectl get configmap {name}: {}",
        text(&out)
    );
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn app_output_formats_wait_prune_hard_refresh_diff_and_orphaning_delete() -> anyhow::Result<()> {
    outputs(Mode::Kubeconfig).await
}

/// The same commands, logged in to the server: the same outputs and exit codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn app_output_formats_wait_prune_hard_refresh_diff_and_orphaning_delete_through_the_server() -> anyhow::Result<()>
{
    outputs(Mode::Server).await
}

async fn outputs(mode: Mode) -> anyhow::Result<()> {
    let started = Instant::now();
    // The run's shared plane, Capstan in a namespace of this test's own.
    let (cluster, git) = tokio::try_join!(TestCluster::shared(), GitServer::start())?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let ns = unique_namespace();
    let out = capstan(&kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out));
    let work = tempfile::tempdir()?;
    let (_controller, base, _) = controller_with_server(&kc, &work.path().join("cache"), &["-n", &ns])?;
    let cli = Cli::new(&kc, &ns, mode, &base);
    // The two modes' runs share the plane: each deploys to a namespace of its own.
    let dest = format!("cli-output-{}", mode.tag());
    git.create_repo("out")?;
    let v1 = git.commit(
        "out",
        "main",
        &[("app/settings.yaml", Some(SETTINGS)), ("app/extra.yaml", Some(EXTRA))],
        "v1",
    )?;
    // Manual sync, and the resources finalizer: `delete --cascade=false` has to take it off.
    let manifest = format!(
        "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata:\n  name: out\n  namespace: {ns}\n  finalizers: [capstan.dev/resources-finalizer]\nspec:\n  source: {{repoURL: '{}', targetRevision: main, path: app}}\n  destination: {{server: 'https://kubernetes.default.svc', namespace: {dest}}}\n  syncPolicy: {{syncOptions: [CreateNamespace=true]}}\n",
        git.git_url("out")
    );
    let file = work.path().join("app.yaml");
    std::fs::write(&file, manifest)?;
    let out = kubectl(&kc, &["apply", "-f", &file.to_string_lossy()]);
    assert!(out.status.success(), "{}", text(&out));
    // (Through the server, the Application is found once the server's watch has seen it.)
    until("the app to be compared", Duration::from_secs(60), || {
        let out = cli.run(&["app", "get", "out", "-o", "json"]);
        out.status.success()
            && serde_json::from_slice::<Value>(&out.stdout).is_ok_and(|app| sync_status(&app).0 == "OutOfSync")
    });

    // get -o json / -o yaml: the whole Application, parseable, with status.sync.
    let json = get_json(&cli, "out");
    assert_eq!(json["kind"], "Application");
    assert_eq!(json["metadata"]["name"], "out");
    assert_eq!(json["spec"]["source"]["path"], "app");
    assert_eq!(sync_status(&json), ("OutOfSync".to_string(), v1.clone()));
    let yaml = cli.run(&["app", "get", "out", "-o", "yaml"]);
    assert!(yaml.status.success(), "{}", text(&yaml));
    let yaml_text = String::from_utf8(yaml.stdout.clone())?;
    let parsed: Value = serde_saphyr::from_str(&yaml_text)
        .unwrap_or_else(|e| panic!("app get -o yaml prints YAML ({e}):\n{yaml_text}"));
    assert_eq!(parsed["kind"], "Application", "{yaml_text}");
    assert_eq!(parsed["metadata"]["name"], "out", "{yaml_text}");
    assert_eq!(parsed["spec"], json["spec"], "the same spec as -o json");
    assert_eq!(
        sync_status(&parsed),
        ("OutOfSync".to_string(), v1.clone()),
        "{yaml_text}"
    );
    let resources = parsed["status"]["resources"].as_array().cloned().unwrap_or_default();
    let mut names: Vec<&str> = resources.iter().filter_map(|r| r["name"].as_str()).collect();
    names.sort();
    assert_eq!(names, ["extra", "settings"], "{yaml_text}");

    // list -o json: an array of Applications, with status.sync.
    let list = cli.run(&["app", "list", "-o", "json"]);
    assert!(list.status.success(), "{}", text(&list));
    let items: Vec<Value> = serde_json::from_slice(&list.stdout)
        .unwrap_or_else(|e| panic!("app list -o json prints a JSON array ({e}): {}", text(&list)));
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0]["metadata"]["name"], "out");
    assert_eq!(sync_status(&items[0]), ("OutOfSync".to_string(), v1.clone()));

    // diff: 1 while the objects are missing; 2 (and one error line) for an unknown Application.
    let diff = cli.run(&["app", "diff", "out"]);
    assert_eq!(diff.status.code(), Some(1), "{}", text(&diff));
    assert!(
        text(&diff).contains(&format!("+++ desired /ConfigMap/{dest}/extra")),
        "{}",
        text(&diff)
    );
    let diff = cli.run(&["app", "diff", "nope"]);
    assert_eq!(diff.status.code(), Some(2), "{}", text(&diff));
    assert!(
        String::from_utf8_lossy(&diff.stderr).starts_with("error: ") && text(&diff).contains("\"nope\" not found"),
        "{}",
        text(&diff)
    );
    // Issue 27: the operator's --deny-implicit-default-project holds in the CLI too: `out` names no
    // project, and without an AppProject named default that project then permits nothing.
    // Logged in, the server's own setting decides: the flag is refused rather than ignored.
    let denied = cli.run(&["app", "diff", "out", "--deny-implicit-default-project"]);
    if mode == Mode::Kubeconfig {
        assert_eq!(denied.status.code(), Some(2), "{}", text(&denied));
        assert!(
            text(&denied).contains("project \"default\"") && text(&denied).contains("sourceRepos"),
            "{}",
            text(&denied)
        );
    } else {
        assert_eq!(denied.status.code(), Some(1), "{}", text(&denied));
        assert!(
            text(&denied).contains("--deny-implicit-default-project applies to the kubeconfig"),
            "{}",
            text(&denied)
        );
    }

    // wait --sync: times out while OutOfSync, non-zero, saying what it waited for and the state.
    let wait = cli.run(&["app", "wait", "out", "--sync", "--timeout", "3"]);
    assert_eq!(wait.status.code(), Some(1), "{}", text(&wait));
    let stderr = String::from_utf8_lossy(&wait.stderr);
    assert!(
        stderr.starts_with("error: timed out after 3 s waiting for out: sync=OutOfSync"),
        "{stderr}"
    );
    assert!(wait.stdout.is_empty(), "nothing on stdout on failure");
    // …and returns 0 once Synced: a waiter started before the sync is requested.
    let waiter = cli
        .command(&["app", "wait", "out", "--sync", "--timeout", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let sync = cli.run(&["app", "sync", "out"]);
    assert!(sync.status.success(), "{}", text(&sync));
    assert!(text(&sync).contains("sync of out requested"), "{}", text(&sync));
    let waited = waiter.wait_with_output()?;
    assert_eq!(waited.status.code(), Some(0), "{}", text(&waited));
    let line = String::from_utf8_lossy(&waited.stdout);
    assert!(
        line.starts_with("out: sync=Synced ") && line.trim_end().ends_with(&format!("revision={}", &v1[..7])),
        "{}",
        text(&waited)
    );
    assert_eq!(sync_status(&get_json(&cli, "out")).0, "Synced");
    assert_eq!(config_map(&kc, &dest, "extra"), Some(String::new()));
    let diff = cli.run(&["app", "diff", "out"]);
    assert_eq!(diff.status.code(), Some(0), "equal after the sync: {}", text(&diff));
    assert!(diff.stdout.is_empty(), "{}", text(&diff));

    // extra.yaml removed from Git: a sync without --prune leaves the object (and says it needs
    // pruning); a sync with --prune --wait deletes it.
    let v2 = git.commit("out", "main", &[("app/extra.yaml", None)], "drop extra")?;
    let get = cli.run(&["app", "get", "out", "--refresh"]);
    assert!(get.status.success(), "{}", text(&get));
    assert!(
        text(&get).contains("OutOfSync") && text(&get).contains("(requires pruning)"),
        "{}",
        text(&get)
    );
    let diff = cli.run(&["app", "diff", "out"]);
    assert_eq!(diff.status.code(), Some(1), "extra is to be pruned: {}", text(&diff));
    let sync = cli.run(&["app", "sync", "out"]);
    assert!(sync.status.success(), "{}", text(&sync));
    let wait = cli.run(&["app", "wait", "out", "--operation", "--health", "--timeout", "60"]);
    assert!(wait.status.success(), "{}", text(&wait));
    let app = get_json(&cli, "out");
    assert_eq!(app["status"]["operationState"]["phase"], "Succeeded", "{app}");
    assert_eq!(app["status"]["operationState"]["revision"], v2.as_str(), "{app}");
    assert_eq!(
        config_map(&kc, &dest, "extra"),
        Some(String::new()),
        "no --prune: extra stays"
    );
    assert_eq!(sync_status(&app), ("OutOfSync".to_string(), v2.clone()));
    // sync --wait without --prune can never end Synced: it fails once the sync is done, naming what
    // requires pruning, rather than waiting for its timeout.
    let asked = Instant::now();
    let sync = cli.run(&["app", "sync", "out", "--wait", "--timeout", "120"]);
    assert_eq!(sync.status.code(), Some(1), "{}", text(&sync));
    let stderr = String::from_utf8_lossy(&sync.stderr);
    assert!(
        stderr.starts_with("error: out stays OutOfSync: 1 object(s) no longer in Git require pruning")
            && stderr.contains("--prune")
            && stderr.contains(&format!("ConfigMap/{dest}/extra")),
        "{stderr}"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(60),
        "failed without waiting for the timeout"
    );
    assert_eq!(
        config_map(&kc, &dest, "extra"),
        Some(String::new()),
        "no --prune: extra stays"
    );
    let sync = cli.run(&["app", "sync", "out", "--prune", "--wait", "--timeout", "60"]);
    assert!(sync.status.success(), "{}", text(&sync));
    assert!(
        text(&sync).contains("sync Succeeded") && text(&sync).contains("Pruned"),
        "{}",
        text(&sync)
    );
    assert_eq!(config_map(&kc, &dest, "extra"), None, "--prune deleted extra");
    assert_eq!(
        config_map(&kc, &dest, "settings"),
        Some("blue".into()),
        "settings untouched"
    );
    assert_eq!(sync_status(&get_json(&cli, "out")), ("Synced".to_string(), v2.clone()));

    // get --hard-refresh: returns once the controller has compared again, and sees a new commit.
    let v3 = git.commit(
        "out",
        "main",
        &[("app/settings.yaml", Some(&SETTINGS.replace("blue", "green")))],
        "green",
    )?;
    let refreshed = Instant::now();
    let get = cli.run(&["app", "get", "out", "--hard-refresh", "-o", "json"]);
    assert!(get.status.success(), "{}", text(&get));
    let app: Value = serde_json::from_slice(&get.stdout)?;
    assert_eq!(sync_status(&app), ("OutOfSync".to_string(), v3.clone()), "{app}");
    assert!(
        app["metadata"]["annotations"]["capstan.dev/refresh"].is_null(),
        "the controller consumed the refresh request: {app}"
    );
    assert!(
        refreshed.elapsed() < Duration::from_secs(30),
        "{:?}",
        refreshed.elapsed()
    );
    let get = cli.run(&["app", "get", "out", "--hard-refresh"]);
    assert!(get.status.success(), "{}", text(&get));
    assert!(
        text(&get).contains(&format!("OutOfSync ({})", &v3[..7])),
        "{}",
        text(&get)
    );
    let sync = cli.run(&["app", "sync", "out", "--wait", "--timeout", "60"]);
    assert!(sync.status.success(), "{}", text(&sync));
    assert_eq!(config_map(&kc, &dest, "settings"), Some("green".into()));
    let diff = cli.run(&["app", "diff", "out"]);
    assert_eq!(diff.status.code(), Some(0), "{}", text(&diff));

    // delete --cascade=false: the Application goes (its resources finalizer taken off), its objects stay.
    let delete = cli.run(&["app", "delete", "out", "--cascade=false", "--wait", "--yes"]);
    assert!(delete.status.success(), "{}", text(&delete));
    assert!(
        text(&delete).contains("application out deleted") && !text(&delete).contains("with its resources"),
        "{}",
        text(&delete)
    );
    let get = cli.run(&["app", "get", "out"]);
    assert_eq!(get.status.code(), Some(1), "{}", text(&get));
    assert_eq!(
        config_map(&kc, &dest, "settings"),
        Some("green".into()),
        "--cascade=false leaves the objects"
    );
    let list = cli.run(&["app", "list", "-o", "json"]);
    assert_eq!(serde_json::from_slice::<Value>(&list.stdout)?, Value::Array(vec![]));
    eprintln!("done in {:?}", started.elapsed());
    Ok(())
}

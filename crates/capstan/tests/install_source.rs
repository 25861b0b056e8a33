//! Capstan's install source: `capstan install --print`, the committed `deploy/install.yaml` and the
//! chart at `deploy/chart` (rendered by the real `helm`) hold the same objects; the chart refuses a
//! value it does not read; `capstan install` applies exactly the printed objects to a real control
//! plane; and the controller's health listener (its Pod's probes) answers `/healthz`, `/readyz` once
//! its watch has listed, and `/metrics`.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use capstan_testkit::TestCluster;
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("the command starts");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn capstan_print(args: &[&str]) -> String {
    let out = run(Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["install", "--print"])
        .args(args));
    String::from_utf8(out.stdout).expect("UTF-8 YAML")
}

fn helm_template(args: &[&str]) -> Output {
    helm_template_in("capstan", args)
}

fn helm_template_in(namespace: &str, args: &[&str]) -> Output {
    let helm = capstan_testkit::charts::helm_binary().expect("helm from the tool cache");
    Command::new(helm)
        .args(["template", "capstan"])
        .arg(root().join("deploy/chart"))
        .args(["--namespace", namespace, "--include-crds"])
        .args(args)
        .env(
            "HELM_CACHE_HOME",
            std::env::temp_dir().join("capstan-install-source-helm"),
        )
        .output()
        .expect("helm starts")
}

/// The objects of a YAML stream by kind and name.
fn objects(yaml: &str) -> BTreeMap<(String, String), Value> {
    let mut found = BTreeMap::new();
    for doc in yaml.split("\n---") {
        let doc = doc.trim_start_matches("---");
        let value: Value = match serde_saphyr::from_str(doc) {
            Ok(v) => v,
            Err(e) => panic!("a document does not parse ({e}):\n{doc}"),
        };
        if value.is_null() {
            continue;
        }
        let kind = value["kind"].as_str().expect("kind").to_string();
        let name = value["metadata"]["name"].as_str().expect("name").to_string();
        assert!(
            found.insert((kind.clone(), name.clone()), value).is_none(),
            "{kind} {name} twice"
        );
    }
    found
}

/// The install objects without the Namespace: a chart's release namespace is created by
/// `helm install --create-namespace`, not by the chart.
fn without_namespace(mut all: BTreeMap<(String, String), Value>) -> BTreeMap<(String, String), Value> {
    assert!(all.remove(&("Namespace".to_string(), "capstan".to_string())).is_some());
    all
}

#[test]
fn the_committed_install_yaml_is_what_capstan_install_prints() {
    let committed = std::fs::read_to_string(root().join("deploy/install.yaml")).expect("deploy/install.yaml");
    assert!(
        committed == capstan_print(&[]),
        "deploy/install.yaml is out of date: regenerate it with `make manifests`"
    );
}

#[test]
fn the_charts_crds_are_the_generated_crds() {
    let generated = root().join("deploy/crds");
    let chart = root().join("deploy/chart/crds");
    let names = |dir: &Path| {
        let mut n: Vec<_> = std::fs::read_dir(dir)
            .expect("a CRD directory")
            .map(|e| e.expect("an entry").file_name())
            .collect();
        n.sort();
        n
    };
    assert_eq!(names(&generated), names(&chart), "regenerate with `make manifests`");
    for name in names(&generated) {
        assert_eq!(
            std::fs::read(generated.join(&name)).expect("a CRD"),
            std::fs::read(chart.join(&name)).expect("the chart's CRD"),
            "{name:?} differs: regenerate with `make manifests`"
        );
    }
}

#[test]
fn the_chart_renders_the_objects_capstan_install_prints() {
    let rendered = helm_template(&[]);
    assert!(
        rendered.status.success(),
        "{}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    let chart = objects(&String::from_utf8_lossy(&rendered.stdout));
    let printed = without_namespace(objects(&capstan_print(&[])));
    assert_eq!(chart.keys().collect::<Vec<_>>(), printed.keys().collect::<Vec<_>>());
    for (key, object) in &printed {
        assert_eq!(
            &chart[key], object,
            "{key:?} differs between the chart and `capstan install --print`"
        );
    }
    assert!(printed.len() >= 20, "{} objects", printed.len());

    // The values they share vary the same objects the same way.
    let rendered = helm_template(&[
        "--set",
        "image.repository=registry.test/capstan",
        "--set",
        "image.tag=v9",
        "--set",
        "server.replicas=3",
    ]);
    assert!(
        rendered.status.success(),
        "{}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    let chart = objects(&String::from_utf8_lossy(&rendered.stdout));
    let printed = without_namespace(objects(&capstan_print(&[
        "--image",
        "registry.test/capstan:v9",
        "--server-replicas",
        "3",
    ])));
    assert_eq!(chart, printed);
    let server = &printed[&("Deployment".to_string(), "capstan-server".to_string())];
    assert_eq!(server["spec"]["replicas"], 3);
    assert_eq!(
        server["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.test/capstan:v9"
    );

    // Another namespace: every namespaced object and every binding's subject moves with it; the
    // cluster-wide bindings are named after it, so that installations do not take them from each
    // other.
    let rendered = helm_template_in("team-a", &[]);
    assert!(
        rendered.status.success(),
        "{}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    let chart = objects(&String::from_utf8_lossy(&rendered.stdout));
    let mut printed = objects(&capstan_print(&["--namespace", "team-a"]));
    assert!(
        printed
            .remove(&("Namespace".to_string(), "team-a".to_string()))
            .is_some()
    );
    assert_eq!(chart, printed);
    assert!(printed.contains_key(&("ClusterRoleBinding".to_string(), "capstan-server-team-a".to_string())));
    let text = capstan_print(&["--namespace", "team-a"]);
    assert!(!text.contains("namespace: capstan\n"), "{text}");
}

#[test]
fn the_chart_refuses_values_it_does_not_read() {
    for set in [
        "server.clusterAdmin=true",
        "controller.securityContext.readOnlyRootFilesystem=false",
        "image.digest=latest",
    ] {
        let rendered = helm_template(&["--set", set]);
        assert!(!rendered.status.success(), "--set {set} was accepted");
        let err = String::from_utf8_lossy(&rendered.stderr);
        assert!(err.contains("schema"), "--set {set}: {err}");
    }
}

#[tokio::test]
async fn capstan_install_applies_exactly_the_printed_objects_and_the_controller_answers_its_probes()
-> anyhow::Result<()> {
    // On the run's shared plane, in a namespace of this test's own.
    let cluster = TestCluster::shared().await?;
    let kc = cluster.kubeconfig().to_string_lossy().into_owned();
    let ns = capstan_testkit::capstan::unique_namespace();
    let capstan = env!("CARGO_BIN_EXE_capstan");
    run(Command::new(capstan).args(["install", "--kubeconfig", &kc, "-n", &ns]));
    let kubectl = capstan_playground::binaries::find("kubectl")?;
    for ((kind, name), object) in objects(&capstan_print(&["-n", &ns])) {
        let mut get = Command::new(&kubectl);
        get.args(["--kubeconfig", &kc, "get", &kind, &name, "-o", "json"]);
        if object["metadata"]["namespace"].is_string() {
            get.args(["-n", &ns]);
        }
        let live: Value = serde_json::from_slice(&run(&mut get).stdout)?;
        let spec = |v: &Value| v.get("spec").cloned().or_else(|| v.get("rules").cloned());
        if kind != "CustomResourceDefinition" && kind != "Namespace" {
            // What the API server added (defaults) aside, what was printed is what is stored.
            let printed = spec(&object).unwrap_or(Value::Null);
            let stored = spec(&live).unwrap_or(Value::Null);
            assert!(
                contains(&stored, &printed),
                "{kind} {name}: stored {stored} lacks printed {printed}"
            );
        }
    }

    // The controller's health listener, as the Deployment's probes use it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let cache = tempfile::tempdir()?;
    let log = cache.path().join("controller.log");
    /// Stops the controller however the test ends.
    struct Stop(std::process::Child);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _controller = Stop(
        Command::new(capstan)
            .args([
                "controller",
                "--kubeconfig",
                &kc,
                "-n",
                &ns,
                "--health-listen",
                &format!("127.0.0.1:{port}"),
            ])
            .env("CAPSTAN_CACHE", cache.path())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?,
    );
    let get = |path: &str| common::apps::get(port, path);
    let deadline = Instant::now() + Duration::from_secs(60);
    let ready = loop {
        if let Some((200, body)) = get("/readyz") {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz never answered 200 ({:?}); the controller's log:\n{}",
            get("/readyz"),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(ready, "ready");
    assert_eq!(get("/healthz"), Some((200, "ok".to_string())));
    let (status, metrics) = get("/metrics").expect("/metrics answers");
    assert_eq!(status, 200);
    assert!(metrics.ends_with("# EOF\n"), "{metrics}");
    Ok(())
}

/// Whether `have` holds everything `want` does (objects: every key, recursively; arrays: the same
/// length, element by element; scalars: equal, numbers by value).
fn contains(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (Value::Object(h), Value::Object(w)) => w.iter().all(|(k, v)| h.get(k).is_some_and(|hv| contains(hv, v))),
        (Value::Array(h), Value::Array(w)) => h.len() == w.len() && h.iter().zip(w).all(|(a, b)| contains(a, b)),
        (Value::Number(h), Value::Number(w)) => h.as_f64() == w.as_f64(),
        // Quantities are stored as strings as given.
        _ => have == want,
    }
}

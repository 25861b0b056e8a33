//! The fleet acceptance scenario through the binary, on four real control planes (a hub running
//! `capstan controller` and three spokes): an ApplicationSet with a clusters generator deploys to
//! every labelled cluster, a newly labelled cluster gets its Application within seconds, and a
//! RollingSync rolls a change out to the `upgrade_testing` cluster first — and stops there when the
//! change never becomes healthy.

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use capstan_testkit::capstan::unique_namespace;
use capstan_testkit::{GitServer, TestCluster};

use common::{Controller, capstan, capstan_in, kubectl, text, until};

/// `.data.color` of the ConfigMap on a spoke ("" when absent).
fn color(kubeconfig: &str) -> String {
    let out = kubectl(
        kubeconfig,
        &[
            "-n",
            "guestbook",
            "get",
            "configmap",
            "settings",
            "-o",
            "jsonpath={.data.color}",
        ],
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn manifests(color: &str, simulate: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings}}\ndata: {{color: {color}}}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\nspec:\n  replicas: 1\n  progressDeadlineSeconds: 10\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}, annotations: {{capstan.dev/simulate: '{simulate}', color: {color}}}}}\n    spec: {{containers: [{{name: web, image: nginx}}]}}\n"
    )
}

fn appset_json(hub: &str, ns: &str) -> serde_json::Value {
    let out = capstan_in(hub, ns, &["appset", "get", "fleet", "-o", "json"]);
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_clusters_generator_follows_labels_and_rolls_out_in_steps() -> anyhow::Result<()> {
    // The hub is the run's shared plane, with Capstan in a namespace of this test's own. The
    // three spokes are the fleet: clusters of their own, which no other test uses.
    let (hub, staging, production, late) = tokio::try_join!(
        TestCluster::shared(),
        TestCluster::start(),
        TestCluster::start(),
        TestCluster::start()
    )?;
    let git = GitServer::start().await?;
    let hub_kc = hub.kubeconfig().to_string_lossy().to_string();
    let kc = |c: &TestCluster| c.kubeconfig().to_string_lossy().to_string();
    let (staging_kc, production_kc, late_kc) = (kc(&staging), kc(&production), kc(&late));
    let ns = unique_namespace();
    let out = capstan(&hub_kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out));
    for (name, kubeconfig, labels) in [
        ("staging", &staging_kc, vec!["env=staging", "upgrade_testing=false"]),
        (
            "production",
            &production_kc,
            vec!["env=production", "upgrade_testing=true"],
        ),
        ("late", &late_kc, vec![]),
    ] {
        let mut args = vec!["cluster", "add", name, "--kubeconfig", kubeconfig.as_str()];
        for l in &labels {
            args.extend(["--label", l]);
        }
        let out = capstan_in(&hub_kc, &ns, &args);
        assert!(out.status.success(), "cluster add {name}: {}", text(&out));
    }

    git.create_repo("platform")?;
    git.commit(
        "platform",
        "main",
        &[("guestbook/all.yaml", Some(&manifests("blue", "")))],
        "v1",
    )?;
    let cache = tempfile::tempdir()?;
    let _controller = Controller(
        Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args([
                "controller",
                "--kubeconfig",
                &hub_kc,
                "-n",
                &ns,
                "--poll-interval",
                "3",
                "--wave-timeout",
                "15",
                "--cache-dir",
            ])
            .arg(cache.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let set = format!(
        r#"apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata: {{name: fleet, namespace: {ns}}}
spec:
  generators:
  - clusters:
      selector:
        matchExpressions: [{{key: env, operator: Exists}}]
  template:
    metadata:
      name: 'guestbook-{{{{name}}}}'
      labels: {{upgrade_testing: '{{{{metadata.labels.upgrade_testing}}}}', env: '{{{{metadata.labels.env}}}}'}}
    spec:
      source: {{repoURL: '{repo}', targetRevision: main, path: guestbook}}
      destination: {{server: '{{{{server}}}}', namespace: guestbook}}
      syncPolicy: {{automated: {{prune: true}}, syncOptions: [CreateNamespace=true]}}
  strategy:
    type: RollingSync
    rollingSync:
      steps:
      - matchExpressions: [{{key: upgrade_testing, operator: In, values: ['true']}}]
      - matchExpressions: [{{key: upgrade_testing, operator: In, values: ['false']}}]
"#,
        repo = git.git_url("platform")
    );
    let file = cache.path().join("fleet.yaml");
    std::fs::write(&file, set)?;
    let out = kubectl(&hub_kc, &["apply", "-f", &file.to_string_lossy()]);
    assert!(out.status.success(), "{}", text(&out));

    // Both labelled clusters get the guestbook, the unlabelled one nothing.
    until("staging and production deployed", Duration::from_secs(120), || {
        color(&staging_kc) == "blue" && color(&production_kc) == "blue"
    });
    let list = text(&capstan_in(&hub_kc, &ns, &["app", "list"]));
    assert!(
        list.contains("guestbook-staging") && list.contains("guestbook-production") && !list.contains("guestbook-late"),
        "{list}"
    );
    let apps = text(&capstan_in(&hub_kc, &ns, &["appset", "get", "fleet"]));
    assert!(apps.contains("guestbook-production"), "{apps}");

    // Labelling the third cluster deploys there within 10 s of the label.
    let out = capstan_in(
        &hub_kc,
        &ns,
        &["cluster", "label", "late", "env=staging", "upgrade_testing=false"],
    );
    assert!(out.status.success(), "{}", text(&out));
    let created = until("guestbook-late created", Duration::from_secs(30), || {
        text(&capstan_in(&hub_kc, &ns, &["app", "list"])).contains("guestbook-late")
    });
    assert!(
        created < Duration::from_secs(10),
        "Application created {created:?} after the label"
    );
    until("late deployed", Duration::from_secs(120), || color(&late_kc) == "blue");

    // A change reaches the upgrade_testing cluster first, the others only after it is healthy.
    git.commit(
        "platform",
        "main",
        &[("guestbook/all.yaml", Some(&manifests("green", "")))],
        "v2",
    )?;
    let mut first_green: BTreeMap<&str, Instant> = BTreeMap::new();
    let started = Instant::now();
    while first_green.len() < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "rollout incomplete: {first_green:?}"
        );
        for (name, kubeconfig) in [
            ("production", &production_kc),
            ("staging", &staging_kc),
            ("late", &late_kc),
        ] {
            if !first_green.contains_key(name) && color(kubeconfig) == "green" {
                first_green.insert(name, Instant::now());
                if name != "production" {
                    let deployment = kubectl(
                        &production_kc,
                        &[
                            "-n",
                            "guestbook",
                            "get",
                            "deployment",
                            "web",
                            "-o",
                            "jsonpath={.status.updatedReplicas}/{.status.availableReplicas}",
                        ],
                    );
                    assert_eq!(
                        String::from_utf8_lossy(&deployment.stdout),
                        "1/1",
                        "{name} changed before production's new version was healthy"
                    );
                }
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(first_green["production"] < first_green["staging"], "{first_green:?}");
    assert!(first_green["production"] < first_green["late"], "{first_green:?}");

    // A change that never becomes healthy on the upgrade_testing cluster stops the rollout there.
    let v3 = git.commit(
        "platform",
        "main",
        &[("guestbook/all.yaml", Some(&manifests("red", "never-ready")))],
        "v3",
    )?;
    until("production gets the bad change", Duration::from_secs(60), || {
        color(&production_kc) == "red"
    });
    let mut last = serde_json::Value::Null;
    let reported = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        until("the rollout reports the failure", Duration::from_secs(120), || {
            let set = appset_json(&hub_kc, &ns);
            last = set.clone();
            let statuses = set["status"]["applicationStatus"].to_string();
            let conditions = set["status"]["conditions"].to_string();
            statuses.contains("guestbook-production")
                && statuses.contains("Failed")
                && conditions.contains("guestbook-production")
        })
    }));
    assert!(
        reported.is_ok(),
        "the rollout did not report the failure: {}",
        serde_json::to_string_pretty(&last["status"])?
    );
    // Positive signals before checking what did not happen: the Applications of the later step
    // compared against the bad commit (the controller polls Git every 3 s) without syncing it, and
    // the ApplicationSet controller looked again after reporting the failure (a refresh it handled:
    // it removes the annotation after writing the set's status).
    for app in ["guestbook-staging", "guestbook-late"] {
        until(&format!("{app} compared at v3"), Duration::from_secs(60), || {
            let out = kubectl(
                &hub_kc,
                &[
                    "-n",
                    &ns,
                    "get",
                    "applications.capstan.dev",
                    app,
                    "-o",
                    "jsonpath={.status.sync.revision}",
                ],
            );
            String::from_utf8_lossy(&out.stdout) == v3
        });
    }
    let out = kubectl(
        &hub_kc,
        &[
            "-n",
            &ns,
            "annotate",
            "--overwrite",
            "applicationsets.capstan.dev",
            "fleet",
            "capstan.dev/refresh=normal",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    until("the set's refresh handled", Duration::from_secs(60), || {
        let out = kubectl(
            &hub_kc,
            &[
                "-n",
                &ns,
                "get",
                "applicationsets.capstan.dev",
                "fleet",
                "-o",
                "jsonpath={.metadata.annotations}",
            ],
        );
        out.status.success() && !String::from_utf8_lossy(&out.stdout).contains("capstan.dev/refresh")
    });
    assert_eq!(color(&staging_kc), "green", "the rollout stopped before staging");
    assert_eq!(color(&late_kc), "green", "the rollout stopped before late");
    Ok(())
}

//! End to end: `capstan bootstrap` takes a bare cluster and a Git repository to Capstan managing
//! itself from Git, then upgrades itself by a commit; with a real API server, a real Git server
//! (HTTP with basic auth) and a real registry (the image's tag is resolved to its digest).
//!
//! A control plane of its own: bootstrap refuses a cluster where another Capstan runs, and the
//! run's shared plane has Capstan installed in many namespaces.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use capstan_api::Application;
use capstan_testkit::capstan::{eventually, synced_healthy};
use capstan_testkit::git::{PASSWORD, USER};
use capstan_testkit::{GitServer, Registry, RegistryOptions, TestCluster, run_git};
use common::{Controller, capstan, text};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;

const HELLO_SETTINGS: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: hello}\ndata: {greeting: hello}\n";

/// The hub's first Application, as a team would add it under PATH/apps.
fn hello_application(repo: &str) -> String {
    format!(
        "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata: {{name: hello, namespace: capstan}}\nspec:\n  project: default\n  source: {{repoURL: '{repo}', targetRevision: main, path: clusters/hub/hello}}\n  destination: {{server: 'https://kubernetes.default.svc', namespace: hello}}\n  syncPolicy:\n    automated: {{prune: true}}\n    syncOptions: [CreateNamespace=true]\n"
    )
}

fn refresh_annotation() -> serde_json::Value {
    serde_json::json!({"metadata": {"annotations": {"capstan.dev/refresh": "normal"}}})
}

fn image_of(deployment: &Deployment) -> String {
    deployment
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|p| p.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bootstrap_makes_a_hub_that_manages_and_upgrades_itself_from_git() -> anyhow::Result<()> {
    let (cluster, git, registry) = tokio::try_join!(
        TestCluster::start(),
        GitServer::start(),
        Registry::start(RegistryOptions::default())
    )?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let client = cluster.client().await?;
    let work = tempfile::tempdir()?;
    git.create_repo("fleet")?;
    git.commit("fleet", "main", &[("README.md", Some("# fleet\n"))], "init")?;
    let repo = git.http_url("fleet");
    let password_file = work.path().join("password");
    std::fs::write(&password_file, format!("{PASSWORD}\n"))?;
    let password_file = password_file.to_string_lossy().to_string();
    let host = registry.host();
    let first = common::push_image(&format!("{host}/capstan:1.0"));
    let bootstrap_with = |password_file: &str, extra: &[&str]| {
        let mut args = vec![
            "bootstrap",
            "--repo",
            &repo,
            "--path",
            "clusters/hub",
            "--image",
            &format!("{host}/capstan:1.0"),
            "--plain-http",
            "--username",
            USER,
            "--password-file",
            password_file,
        ]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        capstan(&kc, &args)
    };
    let bootstrap = |extra: &[&str]| bootstrap_with(&password_file, extra);
    let head = || run_git(&git.repo_path("fleet"), &["rev-parse", "main"]);
    let initial = head()?;

    // Bad input changes nothing: a path leaving the repository, a password that cannot write.
    let out = capstan(
        &kc,
        &[
            "bootstrap",
            "--repo",
            &repo,
            "--path",
            "../elsewhere",
            "--image",
            "x/y:1",
        ],
    );
    assert!(
        !out.status.success() && text(&out).contains("must stay inside the repository"),
        "{}",
        text(&out)
    );
    let wrong = work.path().join("wrong");
    std::fs::write(&wrong, "not-the-password")?;
    let out = bootstrap_with(&wrong.to_string_lossy(), &[]);
    assert!(
        !out.status.success(),
        "a repository Capstan cannot write to: {}",
        text(&out)
    );
    assert!(text(&out).contains("committing to"), "{}", text(&out));
    assert!(
        !text(&out).contains("not-the-password"),
        "the password is never shown: {}",
        text(&out)
    );
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    assert!(
        namespaces.get_opt("capstan").await?.is_none(),
        "nothing installed after a refused commit"
    );
    assert_eq!(head()?, initial);

    // A dry run says what it would do and does none of it.
    let out = bootstrap(&["--dry-run"]);
    assert!(out.status.success(), "{}", text(&out));
    let said = text(&out);
    assert!(
        said.contains("clusters/hub/capstan/install.yaml") && said.contains(&format!("{host}/capstan:1.0@{first}")),
        "{said}"
    );
    assert_eq!(head()?, initial, "a dry run commits nothing");
    assert!(
        namespaces.get_opt("capstan").await?.is_none(),
        "a dry run installs nothing"
    );

    // The bootstrap: a commit with the installation pinned to the digest, Capstan installed, the
    // Applications capstan and root.
    let out = bootstrap(&[]);
    assert!(out.status.success(), "capstan bootstrap: {}", text(&out));
    let bootstrapped = head()?;
    assert_ne!(bootstrapped, initial);
    let install = run_git(
        &git.repo_path("fleet"),
        &["show", "main:clusters/hub/capstan/install.yaml"],
    )?;
    assert!(
        install.contains(&format!("image: {host}/capstan:1.0@{first}")),
        "{install}"
    );
    run_git(&git.repo_path("fleet"), &["show", "main:clusters/hub/apps/hub.yaml"])?;
    let apps: Api<Application> = Api::namespaced(client.clone(), "capstan");
    for name in ["capstan", "root"] {
        assert!(apps.get_opt(name).await?.is_some(), "Application {name} created");
    }

    // Twice changes nothing.
    let out = bootstrap(&[]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("left as they are"), "{}", text(&out));
    assert_eq!(head()?, bootstrapped, "a second bootstrap commits nothing");

    // Another namespace of the same cluster is refused, naming the installation there.
    let out = bootstrap(&["-n", "second"]);
    assert!(
        !out.status.success() && text(&out).contains("capstan/capstan-controller"),
        "{}",
        text(&out)
    );

    // The controller (run here as the Deployment would run it) syncs Capstan's own installation
    // and the root Application from Git.
    let log = work.path().join("controller.log");
    let _controller = Controller(
        Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args(["controller", "--kubeconfig", &kc, "--log", "info", "--cache-dir"])
            .arg(work.path().join("cache"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?,
    );
    let controller_log = || std::fs::read_to_string(&log).unwrap_or_default();
    let states = || async {
        let mut said = String::new();
        for name in ["capstan", "root"] {
            if let Ok(app) = apps.get(name).await {
                let status = app.status.unwrap_or_default();
                said.push_str(&format!(
                    "{name}: sync {:?} health {:?} conditions {:?} operation {:?}\n",
                    status.sync.map(|s| s.status),
                    status.health.map(|h| (h.status, h.message)),
                    status
                        .conditions
                        .iter()
                        .map(|c| (&c.type_, &c.message))
                        .collect::<Vec<_>>(),
                    status.operation_state.map(|o| (o.phase, o.message)),
                ));
            }
        }
        said
    };
    let waited = eventually(
        "capstan and root Synced and Healthy",
        Duration::from_secs(120),
        || async {
            let capstan = apps.get("capstan").await?;
            let root = apps.get("root").await?;
            Ok(synced_healthy(&capstan) && synced_healthy(&root))
        },
    )
    .await;
    if let Err(e) = waited {
        anyhow::bail!("{e}\n{}controller log:\n{}", states().await, controller_log());
    }
    // The hub's first Application, added under PATH/apps, is created by root and synced.
    git.commit(
        "fleet",
        "main",
        &[
            ("clusters/hub/apps/hello.yaml", Some(&hello_application(&repo))),
            ("clusters/hub/hello/settings.yaml", Some(HELLO_SETTINGS)),
        ],
        "the hub's first Application",
    )?;
    apps.patch(
        "root",
        &Default::default(),
        &kube::api::Patch::Merge(refresh_annotation()),
    )
    .await?;
    let waited = eventually(
        "root and hello Synced and Healthy",
        Duration::from_secs(120),
        || async {
            let root = apps.get("root").await?;
            let hello = apps.get_opt("hello").await?;
            Ok(synced_healthy(&root) && hello.is_some_and(|h| synced_healthy(&h)))
        },
    )
    .await;
    if let Err(e) = waited {
        anyhow::bail!("{e}\n{}controller log:\n{}", states().await, controller_log());
    }
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "capstan");
    let controller = deployments.get("capstan-controller").await?;
    assert_eq!(image_of(&controller), format!("{host}/capstan:1.0@{first}"));

    // Upgrading is a commit that changes the image.
    let second = common::push_image(&format!("{host}/capstan:1.1"));
    // The commit also drops a field of the controller's Deployment: the sync, owning every field
    // bootstrap applied, removes it.
    let upgraded = install
        .replace(
            &format!("{host}/capstan:1.0@{first}"),
            &format!("{host}/capstan:1.1@{second}"),
        )
        .replacen("      automountServiceAccountToken: true\n", "", 1);
    assert!(
        install.contains("      automountServiceAccountToken: true\n")
            && !upgraded.contains(&format!("{host}/capstan:1.0")),
        "the commit changes the image and drops the field"
    );
    let commit = git.commit(
        "fleet",
        "main",
        &[("clusters/hub/capstan/install.yaml", Some(&upgraded))],
        "upgrade Capstan to 1.1",
    )?;
    apps.patch(
        "capstan",
        &Default::default(),
        &kube::api::Patch::Merge(refresh_annotation()),
    )
    .await?;
    let waited = eventually("Capstan upgraded by the commit", Duration::from_secs(120), || async {
        let capstan = apps.get("capstan").await?;
        let at_commit = capstan
            .status
            .as_ref()
            .and_then(|s| s.sync.as_ref())
            .is_some_and(|s| s.revision == commit);
        let controller = deployments.get("capstan-controller").await?;
        let server = deployments.get("capstan-server").await?;
        let dropped = controller
            .spec
            .template
            .spec
            .as_ref()
            .is_some_and(|p| p.automount_service_account_token.is_none());
        Ok(at_commit
            && dropped
            && synced_healthy(&capstan)
            && image_of(&controller) == format!("{host}/capstan:1.1@{second}")
            && image_of(&server) == format!("{host}/capstan:1.1@{second}"))
    })
    .await;
    if let Err(e) = waited {
        anyhow::bail!("{e}\n{}controller log:\n{}", states().await, controller_log());
    }
    Ok(())
}

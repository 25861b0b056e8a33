//! End to end: a new image pushed to a real registry (Debian's docker-registry with htpasswd and TLS)
//! becomes a commit to seed 004's staging file in a real Git server (push over http with basic auth),
//! and the staging Application (the Application controller, in-process) deploys it. Tags that are not
//! semver are skipped with their reason; a policy nothing matches and an unreachable registry are
//! recorded in status, with no commit.

use std::time::Duration;

use capstan_api::Application;
use capstan_api::image_updater::ImageUpdater;
use capstan_testkit::capstan::{create_namespace, eventually, install, synced_healthy, unique_namespace};
use capstan_testkit::git::{PASSWORD, USER};
use capstan_testkit::registry::{Registry, RegistryOptions, push_image};
use capstan_testkit::{GitServer, TestCluster, run_git};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const REG_USER: &str = "pusher";
const REG_PASSWORD: &str = "registry-s3cret";
const WEBHOOK_SECRET: &str = "registry-webhook-s3cret";

const STAGING: &str = "# Seed 004: one file per service and environment.\ncluster: in-cluster\nservice: payments\nimageTag: 1.0.0   # written by the image updater\ntargetRevision: main\n";

fn chart() -> Vec<(&'static str, &'static str)> {
    vec![
        (
            "charts/service/Chart.yaml",
            "apiVersion: v2\nname: service\nversion: 0.1.0\n",
        ),
        (
            "charts/service/values.yaml",
            "image: {repository: REGISTRY/services/payments}\nimageTag: \"\"\n",
        ),
        (
            "charts/service/templates/deployment.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: {{ .Release.Name }}}\nspec:\n  selector: {matchLabels: {app: payments}}\n  template:\n    metadata: {labels: {app: payments}}\n    spec: {containers: [{name: app, image: \"{{ .Values.image.repository }}:{{ .Values.imageTag }}\"}]}\n",
        ),
    ]
}

async fn secret(client: &kube::Client, ns: &str, name: &str, data: Value) -> anyhow::Result<()> {
    let s: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": ns, "labels": {"capstan.dev/secret-type": "repository"}},
        "stringData": data,
    }))?;
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &s)
        .await?;
    Ok(())
}

fn updater(ns: &str, name: &str, image: &str, repo: &str, policy: Value, interval: u64) -> Value {
    json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "ImageUpdater",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "image": image, "policy": policy, "intervalSeconds": interval, "project": "default",
            "write": {"repoURL": repo, "branch": "main", "path": "services-root/services/payments/staging.yaml", "key": "imageTag"},
        }
    })
}

async fn status(api: &Api<ImageUpdater>, name: &str) -> anyhow::Result<Value> {
    Ok(serde_json::to_value(api.get(name).await?.status)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pushed_image_is_committed_to_the_staging_file_and_deployed() -> anyhow::Result<()> {
    capstan_testkit::init_logging();
    // The run's shared plane, Capstan in a namespace of this test's own.
    let cluster = TestCluster::shared().await?;
    let client = cluster.client().await?;
    install(&client).await?;
    let ns = unique_namespace();
    create_namespace(&client, &ns).await?;
    let git = GitServer::start().await?;
    // Images are pushed to an open instance; Capstan reads them through a second one on the same
    // storage with htpasswd and TLS.
    let open = Registry::start(RegistryOptions::default()).await?;
    let registry = open
        .sharing(RegistryOptions {
            basic_auth: Some((REG_USER.into(), REG_PASSWORD.into())),
            tls: true,
        })
        .await?;
    let image = format!("{}/services/payments", registry.host());
    push_image(&open, "services/payments", "1.0.0")?;
    push_image(&open, "services/payments", "latest")?;

    // The services-root repository: seed 004's staging file and the chart it deploys.
    git.create_repo("services-root")?;
    let values = chart()[1].1.replace("REGISTRY", &registry.host());
    let mut files: Vec<(&str, Option<&str>)> = chart().into_iter().map(|(p, t)| (p, Some(t))).collect();
    files[1] = ("charts/service/values.yaml", Some(&values));
    files.push(("services-root/services/payments/staging.yaml", Some(STAGING)));
    git.commit("services-root", "main", &files, "services-root")?;
    let repo = git.http_url("services-root");
    secret(
        &client,
        &ns,
        "services-root",
        json!({"url": repo, "username": USER, "password": PASSWORD}),
    )
    .await?;
    secret(
        &client,
        &ns,
        "registry",
        json!({"url": format!("oci://{}", registry.host()), "username": REG_USER, "password": REG_PASSWORD,
               "ca.crt": registry.ca_pem().unwrap_or_default()}),
    )
    .await?;

    // The same repository spelled in another case (the server, like GitHub, serves it): its
    // Application must be refreshed after the commit as a webhook would refresh it (issue 29). Its
    // credentials come from a Secret for the whole server, which covers it whatever the rule.
    let repo_other_case = repo.replace("services-root", "Services-Root");
    let server_root = repo.trim_end_matches("/services-root.git").to_string();
    secret(
        &client,
        &ns,
        "git-server",
        json!({"url": server_root, "username": USER, "password": PASSWORD}),
    )
    .await?;

    // The staging Application: the chart with image.tag from the file (as the services
    // ApplicationSet passes it); here the tag is read through a multi-source $ref value file.
    let apps: Api<Application> = Api::namespaced(client.clone(), &ns);
    for (name, repo, namespace) in [
        ("payments-staging", &repo, "images-payments"),
        ("payments-other-case", &repo_other_case, "images-payments-other-case"),
    ] {
        let app: Application = serde_json::from_value(json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "sources": [
                    {"repoURL": repo, "targetRevision": "main", "path": "charts/service",
                     "helm": {"valueFiles": ["$root/services-root/services/payments/staging.yaml"],
                              "parameters": []}},
                    {"repoURL": repo, "targetRevision": "main", "ref": "root"},
                ],
                "destination": {"server": "https://kubernetes.default.svc", "namespace": namespace},
                "syncPolicy": {"automated": {"prune": true, "selfHeal": true}, "syncOptions": ["CreateNamespace=true"]},
            }
        }))?;
        apps.create(&PostParams::default(), &app).await?;
    }
    let runs = |name: &'static str, namespace: &'static str, tag: &'static str| {
        let (apps, client, image) = (apps.clone(), client.clone(), image.clone());
        move || {
            let (apps, client, image) = (apps.clone(), client.clone(), image.clone());
            async move {
                let app = apps.get(name).await?;
                let deployed = Api::<Deployment>::namespaced(client, namespace)
                    .get_opt(name)
                    .await?
                    .and_then(|d| d.spec.template.spec)
                    .map(|s| s.containers[0].image.clone().unwrap_or_default());
                Ok(synced_healthy(&app) && deployed == Some(format!("{image}:{tag}")))
            }
        }
    };

    let cache = tempfile::tempdir()?;
    let (c1, c2) = (client.clone(), client.clone());
    let apps_config = capstan_controller::Config {
        namespace: ns.clone(),
        cache_dir: cache.path().join("apps"),
        // Longer than the test: the new commit reaches the Application through the refresh the
        // image update controller requests after committing.
        poll_interval: Duration::from_secs(600),
        ..Default::default()
    };
    let images_config = capstan_imageupdate::Config {
        namespace: ns.clone(),
        cache_dir: cache.path().join("images"),
        author_name: "Image Bot".into(),
        author_email: "images@capstan.test".into(),
        ..Default::default()
    };
    let _tasks = Tasks(vec![
        tokio::spawn(async move {
            let _ = capstan_controller::run(c1, apps_config, std::future::pending()).await;
        }),
        tokio::spawn(async move {
            let _ = capstan_imageupdate::run(c2, images_config, std::future::pending()).await;
        }),
    ]);

    // The HTTP server, for registry notifications, with the registry webhook secret.
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": capstan_server::state::SECRET, "namespace": ns},
        "stringData": {"webhook.registry.secret": WEBHOOK_SECRET},
    }))?;
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await?;
    let state = capstan_server::State::start(
        client.clone(),
        capstan_server::ServerConfig {
            namespace: ns.clone(),
            secure_cookies: true,
            cache_dir: cache.path().join("server"),
            cache_root: cache.path().to_path_buf(),
            metrics_addr: None,
            webhook_allow_unsigned: false,
            deny_implicit_default_project: false,
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let server = format!("http://{}", listener.local_addr()?);
    let router = capstan_server::router(state.clone()).into_make_service_with_connect_info::<std::net::SocketAddr>();
    let _server = Tasks(vec![tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    })]);
    eventually("the server ready", Duration::from_secs(60), || {
        let state = state.clone();
        async move { Ok(state.is_ready()) }
    })
    .await?;

    let updaters: Api<ImageUpdater> = Api::namespaced(client.clone(), &ns);
    let pp = PatchParams::apply("test").force();
    updaters
        .patch(
            "payments-staging",
            &pp,
            &Patch::Apply(updater(
                &ns,
                "payments-staging",
                &image,
                &repo,
                json!({"semver": {"range": "^1.0"}}),
                600,
            )),
        )
        .await?;
    // 1.0.0 is what the file says: the updater looked (status) and committed nothing.
    eventually("the updater checked", Duration::from_secs(60), || async {
        Ok(status(&updaters, "payments-staging").await?["latestTag"] == "1.0.0")
    })
    .await?;
    let st = status(&updaters, "payments-staging").await?;
    assert!(
        st["skipped"]
            .as_array()
            .is_some_and(|s| s.iter().any(|t| t.as_str().is_some_and(|t| t.starts_with("latest:")))),
        "a non-semver tag is skipped with its reason: {st}"
    );
    assert!(st["lastCommit"].is_null(), "nothing to write: {st}");
    // Before the commit, the other spelling runs what the file said (1.0.0): from here on only the
    // refresh after the commit can move it, the Git poll being longer than the test.
    eventually(
        "the other spelling runs 1.0.0",
        Duration::from_secs(90),
        runs("payments-other-case", "images-payments-other-case", "1.0.0"),
    )
    .await?;
    let head_before = run_git(&git.repo_path("services-root"), &["rev-parse", "main"])?;

    // A new version is pushed and the registry notifies Capstan (the updater's own interval is 10
    // minutes): a commit to the staging file, then staging deploys it.
    push_image(&open, "services/payments", "1.1.0")?;
    push_image(&open, "services/payments", "2.0.0")?;
    let notification = json!({"events": [{"id": "push-1", "action": "push",
        "target": {"repository": "services/payments", "tag": "1.1.0"}, "request": {"host": registry.host()}}]})
    .to_string();
    let post = |token: &str| -> anyhow::Result<u16> {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .new_agent();
        let answer = agent
            .post(format!("{server}/api/webhook/registry"))
            .header("Authorization", format!("Bearer {token}"))
            .header("Content-Type", "application/json")
            .send(notification.as_str())?;
        Ok(answer.status().as_u16())
    };
    assert_eq!(
        post("wrong-token")?,
        401,
        "a notification without the secret is refused"
    );
    let notified = std::time::Instant::now();
    assert_eq!(post(WEBHOOK_SECRET)?, 200);
    eventually("the commit", Duration::from_secs(60), || async {
        Ok(status(&updaters, "payments-staging").await?["lastCommit"].is_string())
    })
    .await?;
    let bare = git.repo_path("services-root");
    let file = run_git(&bare, &["show", "main:services-root/services/payments/staging.yaml"])?;
    assert_eq!(
        file.trim_end(),
        STAGING.replace("imageTag: 1.0.0 ", "imageTag: 1.1.0 ").trim_end(),
        "only the value changed; the comments stay"
    );
    eprintln!("registry notification → commit in Git: {:?}", notified.elapsed());
    let log = run_git(&bare, &["log", "-1", "--format=%an <%ae>%n%s", "main"])?;
    assert!(log.contains("Image Bot <images@capstan.test>"), "{log}");
    assert!(log.contains(&format!("{image}: 1.0.0 → 1.1.0")), "{log}");
    let parent = run_git(&bare, &["rev-parse", "main~1"])?;
    assert_eq!(parent.trim(), head_before.trim(), "one commit");
    eventually(
        "staging runs 1.1.0",
        Duration::from_secs(90),
        runs("payments-staging", "images-payments", "1.1.0"),
    )
    .await?;
    eventually(
        "the Application spelling the repository in another case runs 1.1.0",
        Duration::from_secs(30),
        runs("payments-other-case", "images-payments-other-case", "1.1.0"),
    )
    .await?;

    // A range nothing matches: recorded, no commit.
    let head = run_git(&bare, &["rev-parse", "main"])?;
    updaters
        .patch(
            "payments-staging",
            &pp,
            &Patch::Apply(updater(
                &ns,
                "payments-staging",
                &image,
                &repo,
                json!({"semver": {"range": "^7"}}),
                5,
            )),
        )
        .await?;
    eventually("no match recorded", Duration::from_secs(60), || async {
        Ok(status(&updaters, "payments-staging").await?["error"]
            .as_str()
            .is_some_and(|e| e.contains("no tag qualifies") && e.contains("2.0.0")))
    })
    .await?;
    // An unreachable registry: recorded, no commit.
    updaters
        .patch(
            "payments-staging",
            &pp,
            &Patch::Apply(updater(
                &ns,
                "payments-staging",
                "127.0.0.1:9/services/payments",
                &repo,
                json!({"semver": {"range": "^1"}}),
                5,
            )),
        )
        .await?;
    eventually("unreachable recorded", Duration::from_secs(60), || async {
        Ok(status(&updaters, "payments-staging").await?["error"]
            .as_str()
            .is_some_and(|e| e.contains("127.0.0.1:9")))
    })
    .await?;
    // A key the file does not have: named with the file, no commit.
    let mut missing = updater(
        &ns,
        "payments-staging",
        &image,
        &repo,
        json!({"semver": {"range": "^1"}}),
        5,
    );
    missing["spec"]["write"]["key"] = json!("image.tag");
    updaters.patch("payments-staging", &pp, &Patch::Apply(missing)).await?;
    eventually("missing key recorded", Duration::from_secs(60), || async {
        Ok(status(&updaters, "payments-staging").await?["error"]
            .as_str()
            .is_some_and(|e| e.contains("services-root/services/payments/staging.yaml") && e.contains("image.tag")))
    })
    .await?;
    assert_eq!(
        run_git(&bare, &["rev-parse", "main"])?,
        head,
        "no commit after the failures"
    );
    // Fixed again: the error goes away (and 1.1.0 is already in the file: no commit).
    updaters
        .patch(
            "payments-staging",
            &pp,
            &Patch::Apply(updater(
                &ns,
                "payments-staging",
                &image,
                &repo,
                json!({"semver": {"range": "~1.1"}}),
                5,
            )),
        )
        .await?;
    eventually("the error cleared", Duration::from_secs(60), || async {
        let st = status(&updaters, "payments-staging").await?;
        Ok(st["error"].is_null() && st["latestTag"] == "1.1.0")
    })
    .await?;
    assert_eq!(run_git(&bare, &["rev-parse", "main"])?, head);
    Ok(())
}

/// An AppProject `name` that may read `repos` and write `writes` (`sourceRepoPaths`).
fn team_project(ns: &str, name: &str, repos: &[&str], writes: Value) -> Value {
    json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "AppProject",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "sourceRepos": repos,
            "destinations": [{"server": "*", "namespace": name}],
            "sourceRepoPaths": writes,
        },
    })
}

/// Issue 27: an ImageUpdater belongs to its AppProject, which says which repositories, which files
/// in them and which branches it may commit to. Team A's updaters cannot write team B's file in a
/// shared repository, team B's own repository, a branch team A may not write, or a path that
/// climbs out of team A's directory; with `--deny-implicit-default-project`, an updater of the
/// `default` project writes nothing either. Each is refused in status naming the rule, and nothing reaches
/// Git — while team A's own file gets its commit in the same round. An updater without a project is
/// refused by the API server (the CRD requires `spec.project`). And one team's file the editor
/// cannot change (flow style) fails that team's updater only, not the batched commit of the branch.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_team_commits_only_where_its_project_lets_it() -> anyhow::Result<()> {
    capstan_testkit::init_logging();
    // The run's shared plane, Capstan in a namespace of this test's own.
    let cluster = TestCluster::shared().await?;
    let client = cluster.client().await?;
    install(&client).await?;
    let ns = unique_namespace();
    create_namespace(&client, &ns).await?;
    let git = GitServer::start().await?;
    let registry = Registry::start(RegistryOptions::default()).await?;
    let image = format!("{}/services/web", registry.host());
    push_image(&registry, "services/web", "1.1.0")?;
    let file = |service: &str| format!("service: {service}\nimageTag: 1.0.0\n");
    git.create_repo("shared")?;
    git.commit(
        "shared",
        "main",
        &[
            ("services/team-a/web.yaml", Some(file("web").as_str())),
            ("services/team-b/api.yaml", Some(file("api").as_str())),
            // Team B's file in flow style, which the editor refuses to edit.
            ("services/team-b/flow.yaml", Some("{service: flow, imageTag: 1.0.0}\n")),
        ],
        "two teams",
    )?;
    git.create_repo("team-b")?;
    git.commit("team-b", "main", &[("api.yaml", Some(file("api").as_str()))], "team b")?;
    let (shared, theirs) = (git.http_url("shared"), git.http_url("team-b"));
    for (name, url) in [("shared", &shared), ("team-b", &theirs)] {
        secret(
            &client,
            &ns,
            name,
            json!({"url": url, "username": USER, "password": PASSWORD}),
        )
        .await?;
    }
    secret(
        &client,
        &ns,
        "registry",
        json!({"url": format!("oci://{}", registry.host()), "insecureOCIForceHttp": "true"}),
    )
    .await?;
    let projects: Api<capstan_api::AppProject> = Api::namespaced(client.clone(), &ns);
    let pp = PatchParams::apply("test").force();
    let team_a = team_project(
        &ns,
        "team-a",
        &[&shared],
        json!([{"repo": shared, "paths": ["services/team-a/**"], "branches": ["main"]}]),
    );
    let team_b = team_project(
        &ns,
        "team-b",
        &[&shared, &theirs],
        json!([{"repo": "*", "paths": ["services/team-b/**", "api.yaml"], "branches": ["*"]}]),
    );
    projects.patch("team-a", &pp, &Patch::Apply(team_a)).await?;
    projects.patch("team-b", &pp, &Patch::Apply(team_b)).await?;

    let updaters: Api<ImageUpdater> = Api::namespaced(client.clone(), &ns);
    let team_a_updater = |name: &str, repo: &str, path: &str, branch: &str, push: &str| {
        let mut u = updater(&ns, name, &image, repo, json!({"semver": {"range": "^1"}}), 5);
        u["spec"]["project"] = json!("team-a");
        u["spec"]["write"]["path"] = json!(path);
        u["spec"]["write"]["branch"] = json!(branch);
        if !push.is_empty() {
            u["spec"]["write"]["pushBranch"] = json!(push);
        }
        u
    };
    let head = |repo: &str| run_git(&git.repo_path(repo), &["rev-parse", "main"]);
    let (shared_before, theirs_before) = (head("shared")?, head("team-b")?);
    let attacks = [
        (
            "team-b-file",
            team_a_updater("team-b-file", &shared, "services/team-b/api.yaml", "main", ""),
            "sourceRepoPaths",
        ),
        (
            "team-b-repo",
            team_a_updater("team-b-repo", &theirs, "api.yaml", "main", ""),
            "sourceRepos",
        ),
        (
            "other-branch",
            team_a_updater("other-branch", &shared, "services/team-a/web.yaml", "main", "release"),
            "sourceRepoPaths",
        ),
        (
            "climbing",
            team_a_updater("climbing", &shared, "services/team-a/../team-b/api.yaml", "main", ""),
            "`..`",
        ),
        // The operator denies the implicit default project (below): it permits nothing.
        (
            "implicit-default",
            {
                let mut u = team_a_updater("implicit-default", &shared, "services/team-a/web.yaml", "main", "");
                u["spec"]["project"] = json!("default");
                u
            },
            "sourceRepos",
        ),
    ];
    for (name, body, _) in &attacks {
        updaters.patch(name, &pp, &Patch::Apply(body.clone())).await?;
    }
    let own = team_a_updater("own-file", &shared, "services/team-a/web.yaml", "main", "");
    updaters.patch("own-file", &pp, &Patch::Apply(own)).await?;
    // Team B's updater of its flow-style file, on the same branch of the same repository.
    let mut flow = team_a_updater("team-b-flow", &shared, "services/team-b/flow.yaml", "main", "");
    flow["spec"]["project"] = json!("team-b");
    updaters.patch("team-b-flow", &pp, &Patch::Apply(flow)).await?;

    // The loop starts once every updater exists, so that its first round sees them all and
    // batches team A's and team B's writes to the shared branch into one commit.
    let cache = tempfile::tempdir()?;
    let images_config = capstan_imageupdate::Config {
        namespace: ns.clone(),
        cache_dir: cache.path().join("images"),
        deny_implicit_default_project: true,
        ..Default::default()
    };
    let c = client.clone();
    let _tasks = Tasks(vec![tokio::spawn(async move {
        let _ = capstan_imageupdate::run(c, images_config, std::future::pending()).await;
    })]);

    // The positive signal: team A's own file got its commit, and each attack its refusal.
    eventually("team A's own file committed", Duration::from_secs(60), || async {
        Ok(status(&updaters, "own-file").await?["lastCommit"].is_string())
    })
    .await?;
    for (name, body, rule) in &attacks {
        let project = format!("project {}", body["spec"]["project"]);
        eventually(&format!("{name} refused"), Duration::from_secs(60), || async {
            let st = status(&updaters, name).await?;
            Ok(st["error"]
                .as_str()
                .is_some_and(|e| e.contains(&project) && e.contains(rule)))
        })
        .await?;
        let st = status(&updaters, name).await?;
        assert!(st["lastCommit"].is_null(), "{name}: no commit: {st}");
    }
    // Team B's file that cannot be edited fails team B's updater only, naming the file.
    let st = status(&updaters, "team-b-flow").await?;
    assert!(
        st["error"]
            .as_str()
            .is_some_and(|e| e.contains("services/team-b/flow.yaml") && e.contains("flow style")),
        "{st}"
    );
    assert!(st["lastCommit"].is_null(), "{st}");
    let bare = git.repo_path("shared");
    assert_eq!(
        run_git(&bare, &["show", "main:services/team-a/web.yaml"])?,
        "service: web\nimageTag: 1.1.0"
    );
    assert_eq!(
        run_git(&bare, &["show", "main:services/team-b/api.yaml"])?,
        file("api").trim_end(),
        "team B's file untouched"
    );
    assert_eq!(
        run_git(&bare, &["rev-parse", "main~1"])?,
        shared_before,
        "one commit: team A's"
    );
    assert_eq!(head("team-b")?, theirs_before, "team B's repository untouched");
    assert!(
        run_git(&bare, &["rev-parse", "--verify", "--quiet", "refs/heads/release"]).is_err(),
        "no release branch pushed"
    );

    // The CRD requires the project: an updater naming none is refused by the API server.
    let mut anonymous = team_a_updater("anonymous", &shared, "services/team-a/web.yaml", "main", "");
    anonymous["spec"].as_object_mut().map(|s| s.remove("project"));
    let refused = updaters.patch("anonymous", &pp, &Patch::Apply(anonymous)).await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(e)) if e.code == 422 && e.message.contains("project")),
        "{refused:?}"
    );
    Ok(())
}

struct Tasks(Vec<tokio::task::JoinHandle<()>>);
impl Drop for Tasks {
    fn drop(&mut self) {
        self.0.iter().for_each(|t| t.abort());
    }
}

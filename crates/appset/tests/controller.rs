//! End to end: ApplicationSets reconciled by the ApplicationSet controller against a real control
//! plane, with generated Applications synced by the real Application controller from a real git
//! server.
//!
//! Longer than the ~600 lines a source file should stay under, on purpose: every test of one test
//! binary shares one control plane, so splitting this file would start another plane (and link
//! another test binary) for no gain in readability — each test here is independent and named for the
//! behaviour it checks.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use capstan_api::Application;
use capstan_api::status::{ConditionType, HealthCode, SyncCode};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};
use support::*;

fn configmap(color: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings}}\ndata: {{color: {color}}}\n")
}

/// A list-generator set deploying `<repo>/<name>` to namespace `<set>-<name>` as `web-<name>`.
fn list_set(name: &str, repo: &str, elements: Value, policy: Value, labels: Value) -> Value {
    json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "ApplicationSet",
        "metadata": {"name": name, "namespace": "capstan"},
        "spec": {
            "generators": [{"list": {"elements": elements}}],
            "template": {
                "metadata": {
                    "name": "web-{{name}}",
                    "labels": labels,
                    "finalizers": ["capstan.dev/resources-finalizer"],
                },
                "spec": {
                    "project": "default",
                    "source": {"repoURL": repo, "targetRevision": "main", "path": "{{name}}"},
                    "destination": {"server": "https://kubernetes.default.svc", "namespace": format!("{name}-{{{{name}}}}")},
                    "syncPolicy": {"automated": {"prune": true}, "syncOptions": ["CreateNamespace=true"]},
                },
            },
            "syncPolicy": policy,
        },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn list_generator_creates_owned_applications_updates_them_and_deletes_removed_ones() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("apps")?;
    env.git.commit(
        "apps",
        "main",
        &[
            ("a/cm.yaml", Some(&configmap("red"))),
            ("b/cm.yaml", Some(&configmap("blue"))),
        ],
        "two apps",
    )?;
    let repo = env.git.git_url("apps");
    let elements = json!([{"name": "a"}, {"name": "b"}]);
    let set = env
        .apply_set(&list_set("web", &repo, elements, json!({}), json!({"tier": "web"})))
        .await?;
    let set_uid = set.uid().expect("uid");

    for name in ["web-a", "web-b"] {
        let app = env
            .wait_app(name, "Synced and Healthy", Duration::from_secs(90), synced_healthy)
            .await?;
        let owners = app.owner_references();
        assert_eq!(owners.len(), 1, "{owners:?}");
        assert_eq!(owners[0].kind, "ApplicationSet");
        assert_eq!(owners[0].name, "web");
        assert_eq!(owners[0].uid, set_uid);
        assert_eq!(owners[0].controller, Some(true));
        assert_eq!(owners[0].block_owner_deletion, Some(true));
        assert_eq!(
            app.labels().get("capstan.dev/applicationset").map(String::as_str),
            Some("web")
        );
        assert_eq!(app.labels().get("tier").map(String::as_str), Some("web"));
        assert!(app.finalizers().iter().any(|f| f == "capstan.dev/resources-finalizer"));
    }
    let a = env
        .configmap("web-a", "settings")
        .await?
        .expect("web-a synced its ConfigMap");
    assert_eq!(a.pointer("/data/color"), Some(&json!("red")));
    assert!(env.configmap("web-b", "settings").await?.is_some());

    let set = env
        .wait_set(
            "web",
            "up to date with both Applications Healthy",
            Duration::from_secs(30),
            |s| {
                up_to_date(s)
                    && s.status.as_ref().is_some_and(|st| {
                        st.resources.len() == 2
                            && st
                                .resources
                                .iter()
                                .all(|r| r.status == Some(SyncCode::Synced) && r.health == Some(HealthCode::Healthy))
                    })
            },
        )
        .await?;
    let names: Vec<String> = set
        .status
        .unwrap_or_default()
        .resources
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(names, ["web-a", "web-b"]);
    assert_eq!(
        condition(&env.set("web").await?, "ParametersGenerated").map(|c| c.0),
        Some("True".into())
    );

    // Someone else annotates web-a; a template change updates it without clobbering that
    // annotation or the status the Application controller wrote.
    let note = json!({"metadata": {"annotations": {"example.com/note": "kept"}}});
    env.apps
        .patch("web-a", &PatchParams::default(), &Patch::Merge(note))
        .await?;
    let uid_a = env.app("web-a").await?.expect("web-a").uid();
    env.apply_set(&list_set(
        "web",
        &repo,
        json!([{"name": "a"}, {"name": "b"}]),
        json!({}),
        json!({"tier": "frontend"}),
    ))
    .await?;
    let a = env
        .wait_app("web-a", "label updated", Duration::from_secs(20), |a| {
            a.labels().get("tier").map(String::as_str) == Some("frontend")
        })
        .await?;
    assert_eq!(
        a.annotations().get("example.com/note").map(String::as_str),
        Some("kept")
    );
    assert_eq!(sync_of(&a), "Synced", "status survives the update");
    assert_eq!(a.uid(), uid_a, "updated in place");

    // Removing an element deletes its Application and, through the resources finalizer the template
    // asked for, its objects.
    env.apply_set(&list_set(
        "web",
        &repo,
        json!([{"name": "a"}]),
        json!({}),
        json!({"tier": "frontend"}),
    ))
    .await?;
    env.wait_gone("web-b", Duration::from_secs(60)).await?;
    eventually("web-b's ConfigMap deleted", Duration::from_secs(30), || async {
        Ok(env.configmap("web-b", "settings").await?.is_none())
    })
    .await?;
    assert_eq!(env.app("web-a").await?.map(|a| a.uid()), Some(uid_a), "web-a untouched");
    assert!(env.configmap("web-a", "settings").await?.is_some());

    // Deleting the set: garbage collection deletes web-a, and its finalizer its objects.
    env.sets.delete("web", &DeleteParams::default()).await?;
    env.wait_gone("web-a", Duration::from_secs(60)).await?;
    eventually("web-a's ConfigMap deleted", Duration::from_secs(30), || async {
        Ok(env.configmap("web-a", "settings").await?.is_none())
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn git_directories_are_polled_for_new_and_removed_directories() -> anyhow::Result<()> {
    // The set polls Git every 3 s; no refresh is requested in this test.
    let env = Env::shared_with(Settings {
        set_poll: Duration::from_secs(3),
        ..Default::default()
    })
    .await?;
    env.git.create_repo("dirs")?;
    env.git
        .commit("dirs", "main", &[("apps/a/cm.yaml", Some(&configmap("red")))], "a")?;
    let repo = env.git.git_url("dirs");
    env.apply_set(&json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "ApplicationSet",
        "metadata": {"name": "dirs", "namespace": "capstan"},
        "spec": {
            "generators": [{"git": {"repoURL": repo, "revision": "main", "directories": [{"path": "apps/*"}]}}],
            "template": {
                "metadata": {"name": "dir-{{path.basename}}"},
                "spec": {
                    "source": {"repoURL": repo, "targetRevision": "main", "path": "{{path}}"},
                    "destination": {"server": "https://kubernetes.default.svc", "namespace": "dir-{{path.basename}}"},
                    "syncPolicy": {"automated": {"prune": true}, "syncOptions": ["CreateNamespace=true"]},
                },
            },
        },
    }))
    .await?;
    env.wait_app("dir-a", "Synced and Healthy", Duration::from_secs(60), synced_healthy)
        .await?;
    env.git
        .commit("dirs", "main", &[("apps/b/cm.yaml", Some(&configmap("blue")))], "b")?;
    let b = env
        .wait_app("dir-b", "created by the next poll", Duration::from_secs(15), |_| true)
        .await?;
    assert_eq!(b.spec.source.path, "apps/b");
    env.git.commit("dirs", "main", &[("apps/a/cm.yaml", None)], "drop a")?;
    env.wait_gone("dir-a", Duration::from_secs(15)).await?;
    assert_eq!(env.app_names().await?, ["dir-b"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn create_only_keeps_applications_and_preserve_keeps_objects() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("apps")?;
    env.git.commit(
        "apps",
        "main",
        &[
            ("a/cm.yaml", Some(&configmap("red"))),
            ("b/cm.yaml", Some(&configmap("blue"))),
        ],
        "two apps",
    )?;
    let repo = env.git.git_url("apps");
    let both = json!([{"name": "a"}, {"name": "b"}]);
    let create_only = json!({"applicationsSync": "create-only"});
    env.apply_set(&list_set(
        "keep",
        &repo,
        both.clone(),
        create_only.clone(),
        json!({"tier": "web"}),
    ))
    .await?;
    for name in ["web-a", "web-b"] {
        env.wait_app(name, "Synced and Healthy", Duration::from_secs(90), synced_healthy)
            .await?;
    }
    let generation = env.app("web-a").await?.expect("web-a").metadata.generation;

    // create-only: a template change is not applied, a removed element is not deleted.
    env.apply_set(&list_set(
        "keep",
        &repo,
        json!([{"name": "a"}]),
        create_only.clone(),
        json!({"tier": "changed"}),
    ))
    .await?;
    let set = env
        .wait_set("keep", "reports the kept Applications", Duration::from_secs(20), |s| {
            condition(s, "ResourcesUpToDate").is_some_and(|(_, _, m)| m.contains("create-only") && m.contains("web-b"))
        })
        .await?;
    let (_, _, message) = condition(&set, "ResourcesUpToDate").expect("condition");
    assert!(
        message.contains("web-a"),
        "names the Application it did not update: {message}"
    );
    // The set controller looked again (a refresh it handled) before checking it changed nothing.
    env.refresh_set_and_wait("keep").await?;
    let a = env.app("web-a").await?.expect("web-a kept");
    assert_eq!(a.labels().get("tier").map(String::as_str), Some("web"), "not updated");
    assert_eq!(a.metadata.generation, generation);
    assert!(env.app("web-b").await?.is_some(), "not deleted under create-only");

    // sync + preserveResourcesOnDeletion: web-b is deleted, its objects stay; web-a is updated.
    let preserve = json!({"applicationsSync": "sync", "preserveResourcesOnDeletion": true});
    env.apply_set(&list_set(
        "keep",
        &repo,
        json!([{"name": "a"}]),
        preserve,
        json!({"tier": "changed"}),
    ))
    .await?;
    env.wait_gone("web-b", Duration::from_secs(60)).await?;
    env.wait_app("web-a", "updated to the template", Duration::from_secs(20), |a| {
        a.labels().get("tier").map(String::as_str) == Some("changed")
    })
    .await?;
    // web-b is gone, so its deletion (and whatever it deletes) is over; the set controller looked
    // again after it (a refresh it handled).
    env.refresh_set_and_wait("keep").await?;
    let cm = env.configmap("keep-b", "settings").await?;
    assert!(
        cm.is_some(),
        "preserveResourcesOnDeletion keeps the objects of a deleted Application"
    );
    let set = env.set("keep").await?;
    assert!(
        set.finalizers()
            .iter()
            .any(|f| f == capstan_appset::controller::PRESERVE_FINALIZER),
        "{:?}",
        set.finalizers()
    );

    // Deleting the set: garbage collection removes web-a, its objects stay.
    env.sets.delete("keep", &DeleteParams::default()).await?;
    env.wait_gone("web-a", Duration::from_secs(60)).await?;
    eventually("ApplicationSet deleted", Duration::from_secs(30), || async {
        Ok(env.sets.get_opt("keep").await?.is_none())
    })
    .await?;
    // web-a is gone: its deletion (and whatever it deletes) is over.
    assert!(
        env.configmap("keep-a", "settings").await?.is_some(),
        "objects stay after the set is deleted with preserveResourcesOnDeletion"
    );
    Ok(())
}

fn clusters_set(selector: Value) -> Value {
    json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "ApplicationSet",
        "metadata": {"name": "guestbook", "namespace": "capstan"},
        "spec": {
            "generators": [{"clusters": {"selector": selector}}],
            "template": {
                "metadata": {"name": "guestbook-{{name}}", "labels": {"env": "{{metadata.labels.env}}"}},
                "spec": {
                    "source": {"repoURL": "git://127.0.0.1:1/none.git", "path": "guestbook"},
                    "destination": {"server": "{{server}}", "namespace": "guestbook"},
                },
            },
        },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clusters_generator_follows_cluster_labels_within_seconds() -> anyhow::Result<()> {
    // Git is polled every 180 s: anything faster comes from the cluster Secret watch.
    let env = Env::shared().await?;
    env.cluster_secret(
        "cluster-staging",
        "staging",
        "https://staging.example:6443",
        &[("env", "staging")],
    )
    .await?;
    env.cluster_secret(
        "cluster-prod",
        "production",
        "https://prod.example:6443",
        &[("env", "production")],
    )
    .await?;
    env.cluster_secret("cluster-dev", "dev", "https://dev.example:6443", &[("env", "dev")])
        .await?;
    env.apply_set(&clusters_set(json!({
        "matchExpressions": [{"key": "env", "operator": "In", "values": ["staging", "production"]}]
    })))
    .await?;
    eventually(
        "one Application per matching cluster",
        Duration::from_secs(30),
        || async { Ok(env.app_names().await? == ["guestbook-production", "guestbook-staging"]) },
    )
    .await?;
    let prod = env.app("guestbook-production").await?.expect("app");
    assert_eq!(prod.spec.destination.server, "https://prod.example:6443");
    assert_eq!(prod.labels().get("env").map(String::as_str), Some("production"));

    // Labelling a third cluster to match deploys there within seconds.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = Instant::now();
    env.cluster_secret("cluster-dev", "dev", "https://dev.example:6443", &[("env", "staging")])
        .await?;
    env.wait_app("guestbook-dev", "created", Duration::from_secs(10), |_| true)
        .await?;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let dev = env.app("guestbook-dev").await?.expect("app");
    assert_eq!(dev.spec.destination.server, "https://dev.example:6443");
    assert_eq!(dev.labels().get("env").map(String::as_str), Some("staging"));

    // A cluster that stops matching loses its Application.
    env.cluster_secret(
        "cluster-staging",
        "staging",
        "https://staging.example:6443",
        &[("env", "retired")],
    )
    .await?;
    env.wait_gone("guestbook-staging", Duration::from_secs(10)).await?;
    assert_eq!(env.app_names().await?, ["guestbook-dev", "guestbook-production"]);
    Ok(())
}

/// Create or replace a cluster Secret with the given `config` text.
async fn cluster_secret_with_config(
    env: &Env,
    secret: &str,
    name: &str,
    server: &str,
    env_label: &str,
    config: &str,
) -> anyhow::Result<()> {
    let body = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": secret, "namespace": env.ns,
                     "labels": {"capstan.dev/secret-type": "cluster", "env": env_label}},
        "stringData": {"name": name, "server": server, "config": config},
    });
    env.secrets
        .patch(secret, &PatchParams::apply("test").force(), &Patch::Apply(body))
        .await?;
    Ok(())
}

/// Wait until the Application controller has written `name`'s status and then handled a refresh:
/// whatever it had to write after the Application was created is written.
async fn settle(env: &Env, name: &str) -> anyhow::Result<()> {
    env.wait_app(name, "status written", Duration::from_secs(60), |a| {
        reconciled_at(a).is_some()
    })
    .await?;
    env.refresh_app_and_wait(name).await?;
    Ok(())
}

/// What the ApplicationSet controller could change about the Applications of set `set`, by name: uid
/// and resourceVersion.
async fn owned_identities(env: &Env, set: &str) -> anyhow::Result<BTreeMap<String, (String, String)>> {
    let list = env
        .apps
        .list(&kube::api::ListParams::default().labels(&format!("capstan.dev/applicationset={set}")))
        .await?;
    Ok(list.items.iter().map(|a| (a.name_any(), identity(a))).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unreadable_or_duplicate_cluster_secret_leaves_applications_alone() -> anyhow::Result<()> {
    // Git is polled every 180 s: a reconcile within seconds comes from the cluster Secret watch.
    let env = Env::shared().await?;
    let staging = "https://staging.example:6443";
    cluster_secret_with_config(&env, "cluster-staging", "staging", staging, "staging", "{}").await?;
    cluster_secret_with_config(
        &env,
        "cluster-prod",
        "production",
        "https://prod.example:6443",
        "production",
        "{}",
    )
    .await?;
    env.apply_set(&clusters_set(json!({
        "matchExpressions": [{"key": "env", "operator": "In", "values": ["staging", "production"]}]
    })))
    .await?;
    env.wait_set("guestbook", "up to date", Duration::from_secs(30), |s| {
        up_to_date(s) && s.status.as_ref().is_some_and(|st| st.resources.len() == 2)
    })
    .await?;
    // The Applications settle: the Application controller reported that it cannot compare them
    // (their clusters do not exist), which is where they stay.
    for name in owned_identities(&env, "guestbook").await?.keys() {
        env.wait_app(name, "the comparison error reported", Duration::from_secs(60), |a| {
            a.status
                .as_ref()
                .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == ConditionType::ComparisonError))
        })
        .await?;
    }
    let before = owned_identities(&env, "guestbook").await?;
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        ["guestbook-production", "guestbook-staging"]
    );
    let check = async |what: &str, reason: &str, needles: &[&str]| -> anyhow::Result<()> {
        let set = env
            .wait_set(
                "guestbook",
                &format!("ErrorOccurred {reason}"),
                Duration::from_secs(15),
                |s| error_with(s, reason),
            )
            .await?;
        let (_, _, message) = condition(&set, "ErrorOccurred").expect("condition");
        for needle in needles {
            assert!(
                message.contains(needle),
                "{what}: the message names {needle:?}: {message}"
            );
        }
        // The set controller looked again (a refresh it handled), then check nothing was touched.
        env.refresh_set_and_wait("guestbook").await?;
        assert_eq!(
            owned_identities(&env, "guestbook").await?,
            before,
            "{what}: existing Applications untouched"
        );
        Ok(())
    };

    // 1. staging's config is no longer JSON: its Application is not deleted.
    cluster_secret_with_config(&env, "cluster-staging", "staging", staging, "staging", "{not json").await?;
    check(
        "unreadable Secret",
        "InvalidClusterSecret",
        &["\"cluster-staging\"", "config"],
    )
    .await?;
    // Fixing only the config is enough to reconcile again (no poll, no other trigger).
    cluster_secret_with_config(&env, "cluster-staging", "staging", staging, "staging", "{}").await?;
    env.wait_set("guestbook", "up to date again", Duration::from_secs(15), up_to_date)
        .await?;
    assert_eq!(owned_identities(&env, "guestbook").await?, before);

    // 2. A second Secret for staging's server (under another name, matching no selector).
    cluster_secret_with_config(&env, "cluster-staging-2", "staging-2", staging, "dev", "{}").await?;
    check(
        "duplicate server",
        "DuplicateCluster",
        &["\"cluster-staging\"", "\"cluster-staging-2\"", staging],
    )
    .await?;
    env.secrets
        .delete("cluster-staging-2", &DeleteParams::default())
        .await?;
    env.wait_set("guestbook", "up to date again", Duration::from_secs(15), up_to_date)
        .await?;
    assert_eq!(owned_identities(&env, "guestbook").await?, before);
    Ok(())
}

fn services_set(repo: &str, generators: Value, labels: Value) -> Value {
    json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "ApplicationSet",
        "metadata": {"name": "svc", "namespace": "capstan"},
        "spec": {
            "generators": generators,
            "template": {
                "metadata": {"name": "svc-{{service}}", "labels": labels},
                "spec": {
                    "source": {"repoURL": repo, "targetRevision": "main", "path": "apps/{{service}}"},
                    "destination": {"server": "https://kubernetes.default.svc", "namespace": "svc-{{service}}"},
                },
            },
        },
    })
}

fn git_files(repo: &str) -> Value {
    json!({"git": {"repoURL": repo, "revision": "main", "files": [{"path": "config/*.yaml"}]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_input_is_reported_and_leaves_existing_applications_alone() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("services")?;
    env.git.commit(
        "services",
        "main",
        &[
            ("config/a.yaml", Some("service: a\n")),
            ("config/b.yaml", Some("service: b\n")),
            ("apps/a/cm.yaml", Some(&configmap("red"))),
            ("apps/b/cm.yaml", Some(&configmap("blue"))),
            ("apps/c/cm.yaml", Some(&configmap("green"))),
        ],
        "services",
    )?;
    let repo = env.git.git_url("services");
    let labels = json!({"service": "{{service}}"});
    let good = services_set(&repo, json!([git_files(&repo)]), labels.clone());
    env.apply_set(&good).await?;
    for name in ["svc-a", "svc-b"] {
        env.wait_app(name, "compared", Duration::from_secs(60), |a| !sync_of(a).is_empty())
            .await?;
    }
    env.wait_set("svc", "up to date", Duration::from_secs(20), up_to_date)
        .await?;
    // The Applications settle (the Application controller wrote their status, then handled a
    // refresh after that): their identity and resourceVersion must not change from here on.
    for name in ["svc-a", "svc-b"] {
        settle(&env, name).await?;
    }
    let before = identities(&env).await?;
    assert_eq!(before.keys().collect::<Vec<_>>(), ["svc-a", "svc-b"]);

    let check = async |what: &str, reason: &str, needle: &str| -> anyhow::Result<()> {
        let set = env
            .wait_set(
                "svc",
                &format!("ErrorOccurred {reason}"),
                Duration::from_secs(30),
                |s| error_with(s, reason),
            )
            .await?;
        let (_, _, message) = condition(&set, "ErrorOccurred").expect("condition");
        assert!(
            message.contains(needle),
            "{what}: the message names {needle:?}: {message}"
        );
        let up = condition(&set, "ResourcesUpToDate").expect("ResourcesUpToDate");
        assert_eq!(up.0, "False", "{what}");
        // The set controller looked again (a refresh it handled), then check nothing was touched.
        env.refresh_set_and_wait("svc").await?;
        assert_eq!(
            identities(&env).await?,
            before,
            "{what}: existing Applications untouched"
        );
        Ok(())
    };
    let restore = async |set: &Value| -> anyhow::Result<()> {
        env.apply_set(set).await?;
        env.wait_set("svc", "up to date again", Duration::from_secs(30), up_to_date)
            .await?;
        Ok(())
    };

    // 1. An invalid selector operator.
    let mut bad = git_files(&repo);
    bad["selector"] = json!({"matchExpressions": [{"key": "service", "operator": "Equals", "values": ["a"]}]});
    env.apply_set(&services_set(&repo, json!([bad]), labels.clone()))
        .await?;
    check("invalid selector", "InvalidSelector", "Equals").await?;
    restore(&good).await?;

    // 2. A git file that is not valid YAML.
    env.git.commit(
        "services",
        "main",
        &[("config/c.yaml", Some("service: [unclosed\n"))],
        "broken",
    )?;
    env.refresh_set("svc").await?;
    check("invalid git file", "InvalidGitFile", "config/c.yaml").await?;
    env.git.commit("services", "main", &[("config/c.yaml", None)], "fix")?;
    env.refresh_set("svc").await?;
    env.wait_set("svc", "up to date again", Duration::from_secs(30), up_to_date)
        .await?;

    // 3. A template naming a missing parameter.
    let missing = services_set(&repo, json!([git_files(&repo)]), json!({"owner": "{{owner}}"}));
    env.apply_set(&missing).await?;
    check("missing parameter", "MissingParameter", "owner").await?;
    restore(&good).await?;

    // 4. Two generators producing the same Application name.
    let dup = services_set(
        &repo,
        json!([git_files(&repo), {"list": {"elements": [{"service": "a"}]}}]),
        labels.clone(),
    );
    env.apply_set(&dup).await?;
    check("duplicate names", "DuplicateApplicationName", "svc-a").await?;
    restore(&good).await?;

    // 5. An unreachable repository.
    let gone = env.git.git_url("missing");
    env.apply_set(&services_set(&repo, json!([git_files(&gone)]), labels.clone()))
        .await?;
    check("unreachable repository", "RepositoryError", "missing.git").await?;
    restore(&good).await?;

    // 6. A generated name that belongs to an Application the set does not own: never taken over.
    let other = json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
        "metadata": {"name": "svc-c", "namespace": env.ns},
        "spec": {
            "source": {"repoURL": repo, "targetRevision": "main", "path": "apps/a"},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": "elsewhere"},
        },
    });
    env.apps
        .patch("svc-c", &PatchParams::apply("someone").force(), &Patch::Apply(other))
        .await?;
    env.git
        .commit("services", "main", &[("config/c.yaml", Some("service: c\n"))], "c")?;
    env.refresh_set("svc").await?;
    let set = env
        .wait_set("svc", "conflict reported", Duration::from_secs(30), |s| {
            error_with(s, "ApplicationConflict")
        })
        .await?;
    let (_, _, message) = condition(&set, "ErrorOccurred").expect("condition");
    assert!(message.contains("svc-c") && message.contains("not owned"), "{message}");
    env.refresh_set_and_wait("svc").await?;
    let c = env.app("svc-c").await?.expect("svc-c");
    assert!(
        c.owner_references().is_empty(),
        "not taken over: {:?}",
        c.owner_references()
    );
    assert!(!c.labels().contains_key("capstan.dev/applicationset"));
    assert_eq!(c.spec.source.path, "apps/a");
    assert_eq!(c.spec.destination.namespace, "elsewhere");
    let now = identities(&env).await?;
    assert_eq!(now.get("svc-a"), before.get("svc-a"));
    assert_eq!(now.get("svc-b"), before.get("svc-b"));
    Ok(())
}

/// (uid, resourceVersion) of the Applications the set owns (by label), by name.
async fn identities(env: &Env) -> anyhow::Result<BTreeMap<String, (String, String)>> {
    let list = env
        .apps
        .list(&kube::api::ListParams::default().labels("capstan.dev/applicationset=svc"))
        .await?;
    Ok(list.items.iter().map(|a| (a.name_any(), identity(a))).collect())
}

/// A Deployment, then (wave 1, so the sync waits for the Deployment to be healthy first) a ConfigMap.
fn rolling_app(version: &str, pod_annotations: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: ConfigMap
metadata: {{name: settings, annotations: {{capstan.dev/sync-wave: "1"}}}}
data: {{version: "{version}"}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}, annotations: {{version: "{version}"{pod_annotations}}}}}
    spec: {{containers: [{{name: web, image: nginx}}]}}
"#
    )
}

fn rolling_set(repo: &str) -> Value {
    json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "ApplicationSet",
        "metadata": {"name": "roll", "namespace": "capstan"},
        "spec": {
            "generators": [{"list": {"elements": [
                {"name": "one", "step": "one"},
                {"name": "two", "step": "two"},
                {"name": "extra", "step": "none"},
            ]}}],
            "template": {
                "metadata": {"name": "roll-{{name}}", "labels": {"step": "{{step}}"}},
                "spec": {
                    "source": {"repoURL": repo, "targetRevision": "main", "path": "{{name}}"},
                    "destination": {"server": "https://kubernetes.default.svc", "namespace": "roll-{{name}}"},
                    "syncPolicy": {"automated": {"prune": true}, "syncOptions": ["CreateNamespace=true"]},
                },
            },
            "strategy": {"type": "RollingSync", "rollingSync": {"steps": [
                {"matchExpressions": [{"key": "step", "operator": "In", "values": ["one"]}]},
                {"matchExpressions": [{"key": "step", "operator": "In", "values": ["two"]}]},
            ]}},
        },
    })
}

fn op_times(app: &Application) -> (String, Option<Timestamp>, Option<Timestamp>, String) {
    let op = app
        .status
        .as_ref()
        .and_then(|s| s.operation_state.clone())
        .unwrap_or_default();
    (
        op.revision.clone(),
        op.started_at.parse().ok(),
        op.finished_at.as_deref().and_then(|t| t.parse().ok()),
        op.operation.map(|o| o.initiated_by).unwrap_or_default(),
    )
}

fn app_status_of(set: &capstan_api::ApplicationSet, app: &str) -> Option<(String, String, String)> {
    set.status
        .as_ref()?
        .application_status
        .iter()
        .find(|s| s.application == app)
        .map(|s| (s.status.to_string(), s.step.clone(), s.message.clone()))
}

/// Step 2 is synced only after step 1 is Synced and Healthy at the same commit.
async fn assert_step_order(env: &Env, sha: &str) -> anyhow::Result<()> {
    let mut finished_one = None;
    for name in ["roll-one", "roll-two"] {
        let app = env
            .wait_app(
                name,
                &format!("Synced and Healthy at {sha}"),
                Duration::from_secs(120),
                |a| synced_healthy(a) && revision_of(a) == sha && op_times(a).0 == sha,
            )
            .await?;
        let (_, started, finished, by) = op_times(&app);
        assert_eq!(by, "applicationset-rollingsync", "{name} was synced by the rollout");
        if name == "roll-one" {
            finished_one = finished;
        } else {
            let (started, finished_one) = (started.expect("started"), finished_one.expect("finished"));
            assert!(
                started >= finished_one,
                "step 2 started at {started}, before step 1 finished at {finished_one}"
            );
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_sync_goes_step_by_step_and_stops_on_a_failure() -> anyhow::Result<()> {
    // Applications notice new commits every 2 s; a wave must be healthy within 15 s.
    let env = Env::shared_with(Settings {
        wave_timeout: Duration::from_secs(15),
        app_poll: Duration::from_secs(2),
        ..Default::default()
    })
    .await?;
    env.git.create_repo("roll")?;
    let v1 = rolling_app("1", "");
    let sha1 = env.git.commit(
        "roll",
        "main",
        &[
            ("one/app.yaml", Some(&v1)),
            ("two/app.yaml", Some(&v1)),
            ("extra/app.yaml", Some(&v1)),
        ],
        "v1",
    )?;
    let repo = env.git.git_url("roll");
    env.apply_set(&rolling_set(&repo)).await?;

    // First rollout: step 1, then step 2; `extra` matches no step and is never synced.
    assert_step_order(&env, &sha1).await?;
    for name in ["roll-one", "roll-two", "roll-extra"] {
        let app = env.app(name).await?.expect("app");
        assert!(
            app.spec.sync_policy.as_ref().is_some_and(|p| p.automated.is_none()),
            "{name}: the rollout drives syncs, automated is removed: {:?}",
            app.spec.sync_policy
        );
    }
    let extra = env.app("roll-extra").await?.expect("extra");
    assert!(
        extra.status.as_ref().and_then(|s| s.operation_state.as_ref()).is_none(),
        "roll-extra is never synced"
    );
    assert_eq!(sync_of(&extra), "OutOfSync");
    let set = env
        .wait_set("roll", "rollout complete", Duration::from_secs(20), |s| {
            condition(s, "RolloutProgressing").is_some_and(|(st, r, _)| st == "False" && r == "RolloutComplete")
        })
        .await?;
    assert_eq!(
        app_status_of(&set, "roll-one").map(|s| (s.0, s.1)),
        Some(("Healthy".into(), "1".into()))
    );
    assert_eq!(
        app_status_of(&set, "roll-two").map(|s| (s.0, s.1)),
        Some(("Healthy".into(), "2".into()))
    );
    assert_eq!(
        app_status_of(&set, "roll-extra").map(|s| (s.0, s.1)),
        Some(("Waiting".into(), "".into()))
    );

    // A change in Git rolls out the same way.
    let v2 = rolling_app("2", "");
    let sha2 = env.git.commit(
        "roll",
        "main",
        &[
            ("one/app.yaml", Some(&v2)),
            ("two/app.yaml", Some(&v2)),
            ("extra/app.yaml", Some(&v2)),
        ],
        "v2",
    )?;
    assert_step_order(&env, &sha2).await?;

    // A change that never becomes healthy in step 1 stops the rollout there.
    let v3_bad = rolling_app("3", ", capstan.dev/simulate: never-ready");
    let v3 = rolling_app("3", "");
    let sha3 = env.git.commit(
        "roll",
        "main",
        &[("one/app.yaml", Some(&v3_bad)), ("two/app.yaml", Some(&v3))],
        "v3",
    )?;
    let set = env
        .wait_set("roll", "rollout stopped", Duration::from_secs(90), |s| {
            condition(s, "RolloutProgressing").is_some_and(|(st, r, _)| st == "False" && r == "RolloutStopped")
        })
        .await?;
    let (_, _, message) = condition(&set, "RolloutProgressing").expect("condition");
    assert!(message.contains("roll-one") && message.contains("step 1"), "{message}");
    let (status, step, why) = app_status_of(&set, "roll-one").expect("roll-one status");
    assert_eq!((status.as_str(), step.as_str()), ("Failed", "1"), "{why}");
    // Positive signals before checking what did not happen: roll-two compared at the new commit,
    // and the set controller looked again (a refresh it handled) after stopping the rollout.
    env.wait_app("roll-two", "compared at the new commit", Duration::from_secs(30), |a| {
        revision_of(a) == sha3
    })
    .await?;
    env.refresh_set_and_wait("roll").await?;
    let two = env.app("roll-two").await?.expect("two");
    assert_eq!(revision_of(&two), sha3, "roll-two has seen the new commit");
    assert_eq!(sync_of(&two), "OutOfSync", "but was not synced to it");
    assert_eq!(op_times(&two).0, sha2, "its last sync is still the previous commit");
    let set = env.set("roll").await?;
    assert_eq!(app_status_of(&set, "roll-two").map(|s| s.0), Some("Waiting".into()));
    Ok(())
}

/// Create or replace the AppProject `name` in the test's Capstan namespace: `repos` as its
/// sourceRepos, any namespace starting with `name` on any cluster.
async fn project(env: &Env, name: &str, repos: &[String]) -> anyhow::Result<()> {
    let body = json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "AppProject",
        "metadata": {"name": name, "namespace": env.ns},
        "spec": {
            "sourceRepos": repos,
            "destinations": [{"server": "*", "namespace": format!("{name}*")}],
        },
    });
    let api: kube::Api<capstan_api::AppProject> = kube::Api::namespaced(env.client.clone(), &env.ns);
    api.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(body))
        .await?;
    Ok(())
}

/// A list-generator set of project `team-a`: `web-<name>` from `<repo>/<name>`.
fn team_set(name: &str, repo: &str, elements: Value) -> Value {
    json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "ApplicationSet",
        "metadata": {"name": name, "namespace": "capstan"},
        "spec": {
            "generators": [{"list": {"elements": elements}}],
            "template": {
                "metadata": {"name": format!("{name}-{{{{name}}}}")},
                "spec": {
                    "project": "team-a",
                    "source": {"repoURL": repo, "targetRevision": "main", "path": "{{name}}"},
                    "destination": {"server": "https://kubernetes.default.svc", "namespace": "team-a-{{name}}"},
                },
            },
        },
    })
}

/// Issue 27: an ApplicationSet of project team-a (what the app-of-apps rule checks, on
/// `spec.template.spec.project`) must not generate an Application of another project — here the
/// implicit `default`, which permits everything — whichever part of the set puts it there: the
/// `templatePatch` (literally or through a parameter), or a generator's own `template`. The set
/// reports the Application and the project, creates nothing and deletes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn generated_applications_stay_in_the_sets_project_whatever_patches_them() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("team-a")?;
    env.git
        .commit("team-a", "main", &[("a/cm.yaml", Some(&configmap("red")))], "team a")?;
    let repo = env.git.git_url("team-a");
    project(&env, "team-a", std::slice::from_ref(&repo)).await?;

    // A set that stays in its project works, and its Application exists before the attacks.
    let good = team_set("escape", &repo, json!([{"name": "a"}]));
    env.apply_set(&good).await?;
    env.wait_set("escape", "up to date", Duration::from_secs(30), up_to_date)
        .await?;
    let kept = env.app("escape-a").await?.expect("escape-a generated");
    assert_eq!(kept.spec.project, "team-a");
    let kept_uid = kept.uid();

    let elements = json!([{"name": "a"}, {"name": "b", "project": "default"}]);
    let mut attacks = Vec::new();
    // 1. templatePatch naming the project literally.
    let mut patched = team_set("escape", &repo, elements.clone());
    patched["spec"]["templatePatch"] = json!("spec:\n  project: default\n");
    attacks.push(("templatePatch", patched, "escape-a"));
    // 2. templatePatch taking the project from a parameter (only element b escapes).
    let mut param = team_set("escape", &repo, elements.clone());
    param["spec"]["templatePatch"] = json!("spec:\n  project: '{{project}}'\n");
    param["spec"]["generators"][0]["list"]["elements"] =
        json!([{"name": "a", "project": "team-a"}, {"name": "b", "project": "default"}]);
    attacks.push(("templatePatch with a parameter", param, "escape-b"));
    // 3. the list generator's own template.
    let mut own = team_set("escape", &repo, elements.clone());
    own["spec"]["generators"][0]["list"]["template"] = json!({"spec": {"project": "default"}});
    attacks.push(("a generator's template", own, "escape-a"));
    // 4. a matrix child's template.
    let mut matrix = team_set("escape", &repo, json!([]));
    matrix["spec"]["generators"] = json!([{"matrix": {"generators": [
        {"list": {"elements": [{"name": "b"}]}},
        {"list": {"elements": [{"x": "1"}]}},
    ]}}]);
    matrix["spec"]["generators"][0]["matrix"]["template"] = json!({"spec": {"project": "default"}});
    attacks.push(("a matrix generator's template", matrix, "escape-b"));

    for (what, attack, named) in attacks {
        env.apply_set(&attack).await?;
        let set = env
            .wait_set(
                "escape",
                &format!("{what}: ErrorOccurred ApplicationProjectNotPermitted"),
                Duration::from_secs(30),
                |s| error_with(s, "ApplicationProjectNotPermitted"),
            )
            .await?;
        let (_, _, message) = condition(&set, "ErrorOccurred").expect("condition");
        assert!(
            message.contains(&format!("Application {named} names project \"default\""))
                && message.contains("belongs to project \"team-a\""),
            "{what}: the condition names the Application and both projects: {message}"
        );
        // The controller looked again; nothing was created, the existing Application is kept.
        env.refresh_set_and_wait("escape").await?;
        assert_eq!(
            env.app_names().await?,
            ["escape-a"],
            "{what}: nothing created or deleted"
        );
        let now = env.app("escape-a").await?.expect("escape-a kept");
        assert_eq!(now.uid(), kept_uid, "{what}: escape-a is the same object");
        assert_eq!(now.spec.project, "team-a", "{what}: escape-a still in team-a");
        // Back to the good set before the next attack.
        env.apply_set(&good).await?;
        env.wait_set("escape", "up to date again", Duration::from_secs(30), up_to_date)
            .await?;
    }
    Ok(())
}

/// Issue 27: a git generator of a set of project team-a reads only repositories team-a's
/// `sourceRepos` permit — directly or named by a matrix child during generation. Refused: a
/// condition naming the repository and the project, nothing generated, nothing deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn git_generators_read_only_repositories_the_sets_project_permits() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    for repo in ["team-a-config", "team-b-config"] {
        env.git.create_repo(repo)?;
        env.git.commit(
            repo,
            "main",
            &[
                ("services/a.yaml", Some("name: a\n")),
                ("services/secret.yaml", Some("name: secret\n")),
            ],
            "config",
        )?;
    }
    let ours = env.git.git_url("team-a-config");
    let theirs = env.git.git_url("team-b-config");
    project(&env, "team-a", std::slice::from_ref(&ours)).await?;
    let files =
        |url: &str| json!({"git": {"repoURL": url, "revision": "main", "files": [{"path": "services/a.yaml"}]}});

    let mut set = team_set("gitgen", &ours, json!([]));
    set["spec"]["generators"] = json!([files(&ours)]);
    env.apply_set(&set).await?;
    env.wait_set("gitgen", "up to date", Duration::from_secs(30), up_to_date)
        .await?;
    assert_eq!(env.app_names().await?, ["gitgen-a"], "the permitted repository is read");

    let mut direct = set.clone();
    direct["spec"]["generators"] = json!([files(&theirs)]);
    let mut matrix = set.clone();
    // The second child's repository is known only during generation, from the first's parameters.
    matrix["spec"]["generators"] = json!([{"matrix": {"generators": [
        {"list": {"elements": [{"team": "team-b"}]}},
        files(&theirs.replace("team-b", "{{team}}")),
    ]}}]);
    for (what, attack) in [("a git generator", direct), ("a matrix child", matrix)] {
        env.apply_set(&attack).await?;
        let refused = env
            .wait_set(
                "gitgen",
                &format!("{what}: ErrorOccurred RepositoryNotPermitted"),
                Duration::from_secs(30),
                |s| error_with(s, "RepositoryNotPermitted"),
            )
            .await?;
        let (_, _, message) = condition(&refused, "ErrorOccurred").expect("condition");
        assert!(
            message.contains(&theirs) && message.contains("project \"team-a\"") && message.contains("sourceRepos"),
            "{what}: the condition names the repository and the project: {message}"
        );
        env.refresh_set_and_wait("gitgen").await?;
        assert_eq!(
            env.app_names().await?,
            ["gitgen-a"],
            "{what}: nothing generated or deleted"
        );
        env.apply_set(&set).await?;
        env.wait_set("gitgen", "up to date again", Duration::from_secs(30), up_to_date)
            .await?;
    }
    Ok(())
}

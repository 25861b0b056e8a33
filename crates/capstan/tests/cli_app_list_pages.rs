//! `capstan app list` over more Applications than one page of its requests to the API server holds
//! (it reads in pages of 500 with `limit` and `continue`): every Application listed once, in every
//! output, with a label selector and a project filter applied across pages — on a real control plane.

mod common;

use capstan_testkit::TestCluster;
use capstan_testkit::capstan::unique_namespace;
use futures::{StreamExt, TryStreamExt, stream};
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

use common::{capstan_in, text};

/// More than two pages of 500.
const APPS: usize = 1234;

fn name(i: usize) -> String {
    format!("page-{i:04}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn app_list_reads_every_page() -> anyhow::Result<()> {
    let cluster = TestCluster::shared().await?;
    let client = cluster.client().await?;
    capstan_testkit::capstan::install(&client).await?;
    let ns = unique_namespace();
    capstan_testkit::capstan::create_namespace(&client, &ns).await?;
    let apps: Api<capstan_api::Application> = Api::namespaced(client.clone(), &ns);
    stream::iter(0..APPS)
        .map(|i| {
            let apps = apps.clone();
            async move {
                let app: capstan_api::Application = serde_json::from_value(json!({
                    "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
                    "metadata": {"name": name(i), "labels": {"team": format!("t{}", i % 4)}},
                    "spec": {
                        "project": if i % 3 == 0 { "alpha" } else { "default" },
                        "source": {"repoURL": "https://git.example.com/fleet.git", "targetRevision": "main", "path": "apps"},
                        "destination": {"server": "https://kubernetes.default.svc", "namespace": "apps"},
                    },
                }))?;
                apps.create(&PostParams::default(), &app).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();

    let out = capstan_in(&kc, &ns, &["app", "list", "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out));
    let listed: Value = serde_json::from_slice(&out.stdout)?;
    let names: Vec<&str> = listed
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a["metadata"]["name"].as_str())
        .collect();
    assert_eq!(
        names,
        (0..APPS).map(name).collect::<Vec<_>>(),
        "every Application once, in order"
    );

    let out = capstan_in(&kc, &ns, &["app", "list"]);
    assert!(out.status.success(), "{}", text(&out));
    let rows: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect();
    assert_eq!(rows, (0..APPS).map(name).collect::<Vec<_>>());

    // A label selector (sent to the API server) and a project (kept by the CLI) across pages.
    let out = capstan_in(&kc, &ns, &["app", "list", "-l", "team=t1", "-p", "alpha"]);
    assert!(out.status.success(), "{}", text(&out));
    let rows: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect();
    let want: Vec<String> = (0..APPS).filter(|i| i % 4 == 1 && i % 3 == 0).map(name).collect();
    assert_eq!(rows, want);
    Ok(())
}

//! A real control plane with kwok nodes and the real kube-scheduler: workloads reach real health
//! through the real kube-controller-manager, and the simulate annotation changes pod outcomes.
//!
//! These tests are about the control plane itself (starting, stopping, what its nodes and controllers
//! do), so each starts private ones rather than the run's shared plane.

use std::time::{Duration, Instant};

use capstan_testkit::TestCluster;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

async fn create<K>(api: &Api<K>, value: serde_json::Value) -> anyhow::Result<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(value)?;
    Ok(api.create(&PostParams::default(), &obj).await?)
}

/// Poll `check` until it returns Some, or fail after `timeout` with `what`.
async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if Instant::now() > deadline {
            anyhow::bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn workload(kind: &str, name: &str, annotations: serde_json::Value, restart: &str) -> serde_json::Value {
    let api_version = if kind == "Job" { "batch/v1" } else { "apps/v1" };
    let mut spec = json!({
        "selector": {"matchLabels": {"app": name}},
        "template": {
            "metadata": {"labels": {"app": name}, "annotations": annotations},
            "spec": {"restartPolicy": restart, "containers": [{"name": "main", "image": "example/app:1"}]},
        },
    });
    match kind {
        "Job" => {
            spec.as_object_mut().map(|m| m.remove("selector"));
            spec["backoffLimit"] = json!(1);
        }
        "StatefulSet" => {
            spec["serviceName"] = json!(name);
            spec["replicas"] = json!(2);
        }
        "Deployment" => spec["progressDeadlineSeconds"] = json!(600),
        _ => {}
    }
    json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, "spec": spec})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workloads_reach_health_through_the_real_controllers() -> anyhow::Result<()> {
    capstan_testkit::init_logging();
    let cluster = TestCluster::start().await?;
    let client = cluster.client().await?;
    let ns = "default";

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    create(&deployments, workload("Deployment", "web", json!({}), "Always")).await?;
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    create(&jobs, workload("Job", "migrate", json!({}), "Never")).await?;
    create(
        &jobs,
        workload("Job", "broken", json!({"capstan.dev/simulate": "fail"}), "Never"),
    )
    .await?;
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    create(&sts, workload("StatefulSet", "db", json!({}), "Always")).await?;
    let ds: Api<DaemonSet> = Api::namespaced(client.clone(), ns);
    create(&ds, workload("DaemonSet", "agent", json!({}), "Always")).await?;

    eventually(
        "Deployment web availableReplicas=1",
        Duration::from_secs(30),
        || async {
            let d = deployments.get("web").await?;
            Ok((d.status.and_then(|s| s.available_replicas) == Some(1)).then_some(()))
        },
    )
    .await?;
    eventually("Job migrate to complete", Duration::from_secs(30), || async {
        let j = jobs.get("migrate").await?;
        Ok((j.status.and_then(|s| s.succeeded) == Some(1)).then_some(()))
    })
    .await?;
    eventually("Job broken to fail", Duration::from_secs(60), || async {
        let j = jobs.get("broken").await?;
        let failed = j
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Failed" && c.status == "True");
        Ok(failed.then_some(()))
    })
    .await?;
    eventually("StatefulSet db readyReplicas=2", Duration::from_secs(30), || async {
        let s = sts.get("db").await?;
        Ok((s.status.and_then(|s| s.ready_replicas) == Some(2)).then_some(()))
    })
    .await?;
    eventually(
        "DaemonSet agent ready on all 3 nodes",
        Duration::from_secs(30),
        || async {
            let d = ds.get("agent").await?;
            let status = d.status.unwrap_or_default();
            Ok((status.desired_number_scheduled == 3 && status.number_ready == 3).then_some(()))
        },
    )
    .await?;

    // Deleting a Deployment removes its pods (kwok completes graceful deletion).
    deployments.delete("web", &Default::default()).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    eventually("web pods to be deleted", Duration::from_secs(30), || async {
        let left = pods.list(&ListParams::default().labels("app=web")).await?;
        Ok(left.items.is_empty().then_some(()))
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulate_annotation_controls_pod_outcomes() -> anyhow::Result<()> {
    let cluster = TestCluster::start().await?;
    let client = cluster.client().await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod = |name: &str, ann: &str, restart: &str| {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "annotations": {"capstan.dev/simulate": ann}},
               "spec": {"restartPolicy": restart, "containers": [{"name": "c", "image": "x"}]}})
    };
    create(&pods, pod("fails", "fail", "Always")).await?;
    create(&pods, pod("never-ready", "never-ready", "Always")).await?;
    create(&pods, pod("slow", "delay=3", "Always")).await?;
    let created = Instant::now();

    let phase = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
    let ready = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    };
    eventually("pod fails to end Failed", Duration::from_secs(30), || async {
        Ok((phase(&pods.get("fails").await?) == "Failed").then_some(()))
    })
    .await?;
    eventually("pod never-ready to run", Duration::from_secs(30), || async {
        Ok((phase(&pods.get("never-ready").await?) == "Running").then_some(()))
    })
    .await?;
    eventually("pod slow to become Ready", Duration::from_secs(30), || async {
        Ok(ready(&pods.get("slow").await?).then_some(()))
    })
    .await?;
    assert!(
        created.elapsed() >= Duration::from_secs(3),
        "delay=3 must delay readiness"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!ready(&pods.get("never-ready").await?), "never-ready must stay unready");

    // A Deployment whose pods fail crash-loops instead of churning out new pods.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    create(
        &deployments,
        workload(
            "Deployment",
            "crashy",
            json!({"capstan.dev/simulate": "fail"}),
            "Always",
        ),
    )
    .await?;
    let list = ListParams::default().labels("app=crashy");
    let crashing = eventually("crashy pod to crash-loop", Duration::from_secs(30), || async {
        let items = pods.list(&list).await?.items;
        let waiting = items.iter().find(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c.state
                            .as_ref()
                            .and_then(|s| s.waiting.as_ref())
                            .is_some_and(|w| w.reason.as_deref() == Some("CrashLoopBackOff"))
                    })
                })
        });
        Ok(waiting.cloned())
    })
    .await?;
    assert_eq!(phase(&crashing), "Running");
    // A positive signal before checking what did not happen: a Deployment created after the crash
    // loop was seen gets its pod Ready, so the controllers, the scheduler and kwok have all handled
    // work queued after the crashing pod's status.
    create(&deployments, workload("Deployment", "sentinel", json!({}), "Always")).await?;
    let sentinel = ListParams::default().labels("app=sentinel");
    eventually("the sentinel pod Ready", Duration::from_secs(30), || async {
        Ok(pods.list(&sentinel).await?.items.iter().any(ready).then_some(()))
    })
    .await?;
    assert_eq!(
        pods.list(&list).await?.items.len(),
        1,
        "a crash-looping pod is not replaced"
    );
    Ok(())
}

/// kwok's server plays the kubelets: a Pod's log, read through the API server as `kubectl logs`
/// does, holds the lines written to the playground's log file (with `tailLines`, and the previous
/// container's file for `previous=true`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_logs_are_read_through_the_api_server() -> anyhow::Result<()> {
    let cluster = TestCluster::start().await?;
    let client = cluster.client().await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create(
        &pods,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "talker"},
               "spec": {"containers": [{"name": "main", "image": "x"}, {"name": "side", "image": "y"}]}}),
    )
    .await?;
    eventually("pod talker to run", Duration::from_secs(30), || async {
        let pod = pods.get("talker").await?;
        Ok((pod.status.and_then(|s| s.phase).as_deref() == Some("Running")).then_some(()))
    })
    .await?;
    let logs = capstan_playground::kwok::PodLogs::under(&cluster.dir());
    logs.append(&["first line", "second line"])?;
    let params = kube::api::LogParams {
        container: Some("side".into()),
        ..Default::default()
    };
    let text = pods.logs("talker", &params).await?;
    assert!(text.contains("first line\nsecond line"), "{text:?}");
    let tail = kube::api::LogParams {
        container: Some("main".into()),
        tail_lines: Some(1),
        ..Default::default()
    };
    assert_eq!(pods.logs("talker", &tail).await?.trim_end(), "second line");
    let previous = kube::api::LogParams {
        container: Some("main".into()),
        previous: true,
        ..Default::default()
    };
    let text = pods.logs("talker", &previous).await?;
    assert!(
        text.contains("before its restart") && !text.contains("second line"),
        "{text:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clusters_run_side_by_side_and_stop_cleanly() -> anyhow::Result<()> {
    let a = TestCluster::start().await?;
    let b = TestCluster::start().await?;
    assert_ne!(a.server(), b.server(), "each cluster listens on its own port");
    let ns_a: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(a.client().await?);
    create(
        &ns_a,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "only-in-a"}}),
    )
    .await?;
    let ns_b: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(b.client().await?);
    assert!(
        ns_b.get_opt("only-in-a").await?.is_none(),
        "clusters must not share state"
    );

    let dir = a.dir();
    let pids: Vec<i32> = capstan_playground::Playground::status(&dir)
        .iter()
        .filter_map(|c| c.pid)
        .collect();
    assert_eq!(
        pids.len(),
        5,
        "etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok run as processes"
    );
    drop(a);
    for pid in pids {
        let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false);
        assert!(!alive, "process {pid} must be stopped when the cluster is dropped");
    }
    // The other cluster is untouched.
    assert!(ns_b.list(&Default::default()).await.is_ok());
    Ok(())
}

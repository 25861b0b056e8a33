//! End to end, against a real control plane and a real git server: repository content that tries to
//! make a tool run the repository's own script. A kustomization whose `helmCharts[].releaseName` is a
//! Helm option (`--post-renderer=./evil.sh`, the attack of issue 27) and one whose `valuesFile` climbs
//! out of the repository are refused by the running controller with a condition naming the field or
//! the path; the executable script in the repository never runs, and nothing reaches the destination.

mod support;

use std::time::Duration;

use capstan_testkit::git::push_with_executables;
use support::*;

const CHART: &str = "apiVersion: v2\nname: web\nversion: 0.1.0\n";
const TEMPLATE: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {a: b}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_kustomization_cannot_make_helm_run_the_repositorys_script() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    let bare = env.git.create_repo("hostile-render")?;
    let outside = tempfile::tempdir()?;
    let marker = outside.path().join("pwned");
    let script = format!("#!/bin/sh\ntouch '{}'\ncat\n", marker.display());
    let kustomization = |extra: &str| format!("helmCharts:\n- name: web\n{extra}");
    let post_renderer = kustomization("  releaseName: --post-renderer=./evil.sh\n");
    let values_outside = kustomization("  releaseName: web\n  valuesFile: ../../../../etc/passwd\n");
    push_with_executables(
        &bare,
        &[
            ("renderer/kustomization.yaml", &post_renderer),
            ("renderer/charts/web/Chart.yaml", CHART),
            ("renderer/charts/web/templates/cm.yaml", TEMPLATE),
            ("renderer/evil.sh", &script),
            ("renderer/charts/web/evil.sh", &script),
            ("values/kustomization.yaml", &values_outside),
            ("values/charts/web/Chart.yaml", CHART),
            ("values/charts/web/templates/cm.yaml", TEMPLATE),
        ],
    )?;
    let url = env.git.git_url("hostile-render");
    for (name, path, field) in [
        ("hostile-renderer", "renderer", "helmCharts[0].releaseName"),
        (
            "hostile-values",
            "values",
            "\"../../../../etc/passwd\" escapes the repository",
        ),
    ] {
        env.create_app(app(name, &url, path, name, true)).await?;
        let refused = env
            .wait_app(name, "refused naming the field", Duration::from_secs(60), |a| {
                condition(a, "ComparisonError").is_some() || condition(a, "InvalidSpecError").is_some()
            })
            .await?;
        let message = condition(&refused, "ComparisonError")
            .or_else(|| condition(&refused, "InvalidSpecError"))
            .unwrap_or_default();
        assert!(message.contains(field), "{name}: {message}");
        let (v, k, p) = CM_API;
        assert!(
            env.get(v, k, p, name, "web").await?.is_none(),
            "{name}: nothing deployed"
        );
    }
    assert!(!marker.exists(), "helm ran the repository's script");
    Ok(())
}

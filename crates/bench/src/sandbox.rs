//! Benchmark 12: what the kernel sandbox costs a render. The real `helm template` of a chart and the
//! real `kustomize build` of an overlay are run `runs` times each, alternately inside and outside a
//! [`capstan_sandbox::Confinement`] as the renderer builds it (Landlock ruleset, `no_new_privs`,
//! rlimits, own process group), and the median wall time of each is compared. No control plane.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use capstan_sandbox::{Confinement, Limits, ProcessGroup};

/// The cache's `bin/NAME`, as scripts/setup.sh installs it.
fn tool(name: &str) -> anyhow::Result<PathBuf> {
    let cache = std::env::var_os("CAPSTAN_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/capstan"));
    let path = cache.join("bin").join(name);
    std::fs::canonicalize(&path).with_context(|| format!("{} (run scripts/setup.sh)", path.display()))
}

async fn once(program: &Path, args: &[&Path], read: &Path, home: &Path, confined: bool) -> anyhow::Result<Duration> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env_clear()
        .env("HOME", home)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    if confined {
        Confinement::new(program)
            .read(read)
            .write(home)
            .limits(Limits::for_tool(60))
            .apply(&mut cmd)?;
    }
    let child = cmd.spawn().with_context(|| format!("running {}", program.display()))?;
    let _group = ProcessGroup::of(child.id());
    let out = child.wait_with_output().await?;
    anyhow::ensure!(
        out.status.success(),
        "{}: {}",
        program.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(started.elapsed())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Run the benchmark and print its result lines.
pub async fn sandbox_cost(runs: usize) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let repo = dir.path().join("repo");
    let home = dir.path().join("home");
    std::fs::create_dir_all(repo.join("chart/templates"))?;
    std::fs::create_dir_all(repo.join("overlay"))?;
    std::fs::create_dir_all(&home)?;
    std::fs::write(
        repo.join("chart/Chart.yaml"),
        "apiVersion: v2\nname: web\nversion: 0.1.0\n",
    )?;
    std::fs::write(repo.join("chart/values.yaml"), "replicas: 2\n")?;
    for i in 0..20 {
        std::fs::write(
            repo.join(format!("chart/templates/cm{i}.yaml")),
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm{i}}}\ndata: {{r: {{{{ .Values.replicas | quote }}}}}}\n"
            ),
        )?;
        std::fs::write(
            repo.join(format!("overlay/cm{i}.yaml")),
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm{i}}}\n"),
        )?;
    }
    let resources: Vec<String> = (0..20).map(|i| format!("cm{i}.yaml")).collect();
    std::fs::write(
        repo.join("overlay/kustomization.yaml"),
        format!("namePrefix: p-\nresources: [{}]\n", resources.join(", ")),
    )?;
    let helm = tool("helm")?;
    let kustomize = tool("kustomize")?;
    let chart = repo.join("chart");
    let overlay = repo.join("overlay");
    let jobs: [(&str, &Path, Vec<&Path>); 2] = [
        (
            "helm template",
            &helm,
            vec![Path::new("template"), Path::new("web"), &chart],
        ),
        ("kustomize build", &kustomize, vec![Path::new("build"), &overlay]),
    ];
    for (name, program, args) in jobs {
        // Warm the page cache and the binaries first.
        once(program, &args, &repo, &home, false).await?;
        once(program, &args, &repo, &home, true).await?;
        let (mut plain, mut confined) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            plain.push(once(program, &args, &repo, &home, false).await?);
            confined.push(once(program, &args, &repo, &home, true).await?);
        }
        // Each confined run is paired with the unconfined run just before it, so a machine that
        // slows down or speeds up during the benchmark moves both alike.
        let mut paired: Vec<f64> = plain
            .iter()
            .zip(&confined)
            .map(|(p, c)| (c.as_secs_f64() - p.as_secs_f64()) * 1000.0)
            .collect();
        paired.sort_by(f64::total_cmp);
        let paired = paired[paired.len() / 2];
        let (p, c) = (median(plain), median(confined));
        let cost = (c.as_secs_f64() / p.as_secs_f64() - 1.0) * 100.0;
        println!(
            "12 sandbox cost, {name}: median {:.1} ms unconfined, {:.1} ms confined ({cost:+.1} %); median paired difference {paired:+.2} ms ({:+.1} %); {runs} runs each",
            p.as_secs_f64() * 1000.0,
            c.as_secs_f64() * 1000.0,
            paired / (p.as_secs_f64() * 1000.0) * 100.0
        );
    }
    // What building the confinement costs the parent alone (the Landlock ruleset and its rules),
    // without starting anything: the part of the cost Capstan itself can shrink.
    let mut built = Vec::new();
    for _ in 0..runs.max(20) * 5 {
        let mut cmd = tokio::process::Command::new(&kustomize);
        let started = Instant::now();
        Confinement::new(&kustomize)
            .read(&repo)
            .write(&home)
            .limits(Limits::for_tool(60))
            .apply(&mut cmd)?;
        built.push(started.elapsed());
    }
    println!(
        "12 sandbox cost, building the confinement in the parent: median {:.3} ms",
        median(built).as_secs_f64() * 1000.0
    );
    Ok(())
}

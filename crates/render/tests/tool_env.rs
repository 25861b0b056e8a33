//! The environment `helm` and `kustomize` run with: nothing of the controller's own (cloud
//! credentials, kubeconfig, SSH agent, proxies, Helm settings), `HOME` in a scratch directory.
//!
//! Wrappers stand in for the tools (found first, in `CAPSTAN_CACHE/bin`) and answer with the
//! environment they were started with, as a ConfigMap. One test in this binary: it sets the process's
//! environment.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::*;

/// Variables of the controller's environment no tool may see, each with a recognisable value.
const AMBIENT: &[(&str, &str)] = &[
    ("AWS_SECRET_ACCESS_KEY", "sentinel-aws-secret"),
    ("GOOGLE_APPLICATION_CREDENTIALS", "/sentinel/gcp.json"),
    ("KUBECONFIG", "/sentinel/kubeconfig"),
    ("SSH_AUTH_SOCK", "/sentinel/agent.sock"),
    ("HTTPS_PROXY", "http://sentinel-proxy.invalid:3128"),
    ("HELM_PLUGINS", "/sentinel/helm-plugins"),
    ("HELM_REPOSITORY_CONFIG", "/sentinel/repositories.yaml"),
    ("KUSTOMIZE_PLUGIN_HOME", "/sentinel/kustomize-plugins"),
    ("GIT_SSH_COMMAND", "/sentinel/ssh"),
];

/// Where every tool's HTTP proxy points: a closed loopback port, so a download a tool attempts on its
/// own fails instead of reaching the network.
const CLOSED_PROXY: &str = "http://127.0.0.1:9";

#[tokio::test]
async fn tools_see_none_of_the_controllers_environment() {
    let real_helm = capstan_render::tools::find("helm").expect("helm (run scripts/setup.sh)");
    let real_kustomize = capstan_render::tools::find("kustomize").expect("kustomize (run scripts/setup.sh)");
    let cache = tempfile::tempdir().unwrap();
    let bin = cache.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    // Each wrapper answers with a ConfigMap holding the environment it was started with (shell
    // builtins only: the kernel sandbox lets a tool start nothing but itself and its interpreter).
    for name in ["helm", "kustomize"] {
        let wrapper = bin.join(name);
        let script = format!(
            "#!/bin/sh\necho 'apiVersion: v1'\necho 'kind: ConfigMap'\necho 'metadata: {{name: env-{name}}}'\n\
             echo 'data:'\necho '  env: |'\nexport -p | while IFS= read -r line; do echo \"    $line\"; done\n"
        );
        std::fs::write(&wrapper, script).unwrap();
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    assert!(real_helm.exists() && real_kustomize.exists());
    // SAFETY: this binary has one test, and nothing else runs while the environment is set.
    unsafe {
        std::env::set_var("CAPSTAN_CACHE", cache.path());
        for (key, value) in AMBIENT {
            std::env::set_var(key, value);
        }
    }

    let repo = Repo::new();
    repo.file("chart/Chart.yaml", "apiVersion: v2\nname: web\nversion: 0.1.0\n")
        .file(
            "chart/templates/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {a: b}\n",
        )
        .file("kust/kustomization.yaml", "resources:\n- cm.yaml\n")
        .file(
            "kust/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: k}\ndata: {a: b}\n",
        );
    let helm = render(&repo, &source("chart")).await.expect("helm renders");
    let kustomize = render(&repo, &source("kust")).await.expect("kustomize renders");
    // `export KEY='value'` lines, as `KEY=value`.
    let environment = |rendered: &capstan_render::Rendered, tool: &str| -> String {
        let cm = find(rendered, "ConfigMap", &format!("env-{tool}"));
        cm["data"]["env"]
            .as_str()
            .unwrap_or_default()
            .lines()
            .map(|l| l.trim().trim_start_matches("export ").replacen("='", "=", 1))
            .map(|l| l.strip_suffix('\'').map(str::to_string).unwrap_or(l))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let seen_by = [
        ("helm", environment(&helm, "helm")),
        ("kustomize", environment(&kustomize, "kustomize")),
    ];

    let real_home = std::env::var("HOME").unwrap_or_default();
    for (tool, seen) in &seen_by {
        let (tool, seen) = (*tool, seen.as_str());
        assert!(seen.contains("PATH="), "{tool}: the wrapper recorded an environment");
        for (key, value) in AMBIENT {
            // Only the proxy variables are set, by Capstan, to a closed loopback port.
            let own = |l: &str| l == format!("{key}={CLOSED_PROXY}");
            assert!(
                !seen.contains(value) && !seen.lines().any(|l| l.starts_with(&format!("{key}=")) && !own(l)),
                "{tool} saw {key}:\n{seen}"
            );
        }
        for key in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
            assert!(
                seen.lines().any(|l| l == format!("{key}={CLOSED_PROXY}")),
                "{tool}: downloads go to a closed loopback port ({key}):\n{seen}"
            );
        }
        for line in seen.lines().filter(|l| l.starts_with("HOME=")) {
            let home = &line["HOME=".len()..];
            assert_ne!(home, real_home, "{tool} runs with a scratch HOME");
            assert!(
                std::path::Path::new(home).starts_with(std::env::temp_dir()),
                "{tool}: HOME={home}"
            );
        }
        assert!(
            seen.lines().any(|l| l == "PATH=/usr/local/bin:/usr/bin:/bin"),
            "{tool} gets a fixed PATH:\n{seen}"
        );
    }
}

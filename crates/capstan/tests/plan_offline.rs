//! `capstan plan --manifests DIR --policies DIR --cluster-labels …`: the policies alone, without a
//! cluster, as a CI step runs them on rendered manifests. Exit 1 when a policy denies, 0 when all
//! pass, 2 on unreadable input; a policy that does not compile denies (fail closed).

mod common;

use std::path::Path;
use std::process::Command;

const POLICY: &str = r#"apiVersion: capstan.dev/v1alpha1
kind: Policy
metadata: {name: production-replicas}
spec:
  clusterSelector: {matchLabels: {env: production}}
  matchConstraints:
    resourceRules:
    - {apiGroups: [apps], apiVersions: ["*"], resources: [deployments], operations: [CREATE, UPDATE]}
  validations:
  - expression: "object.spec.replicas >= 2"
    messageExpression: "'replicas is ' + string(object.spec.replicas) + ', production needs 2'"
"#;

fn deployment(replicas: u32) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\nspec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}}}\n    spec: {{containers: [{{name: web, image: nginx}}]}}\n---\napiVersion: v1\nkind: Service\nmetadata: {{name: web}}\nspec: {{ports: [{{port: 80}}]}}\n"
    )
}

fn plan(dir: &Path, labels: &str, format: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["plan", "--manifests"])
        .arg(dir.join("manifests"))
        .arg("--policies")
        .arg(dir.join("policies"))
        .args([
            "--cluster-labels",
            labels,
            "--destination-namespace",
            "shop",
            "-o",
            format,
        ])
        .output()
        .expect("run capstan")
}

#[test]
fn offline_plans_judge_manifests_by_the_policies_of_the_cluster_labels() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::create_dir_all(dir.path().join("manifests/web"))?;
    std::fs::create_dir_all(dir.path().join("policies"))?;
    std::fs::write(dir.path().join("manifests/web/all.yaml"), deployment(1))?;
    std::fs::write(dir.path().join("policies/replicas.yaml"), POLICY)?;

    let out = plan(dir.path(), "env=production,region=eu", "text");
    assert_eq!(out.status.code(), Some(1), "{}", common::text(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "DENIED by policy production-replicas on apps/Deployment/shop/web: replicas is 1, production needs 2"
        ),
        "{text}"
    );
    let out = plan(dir.path(), "env=staging", "json");
    assert_eq!(out.status.code(), Some(0), "{}", common::text(&out));
    let plan_json: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(plan_json["applications"][0]["verdicts"], serde_json::json!([]));
    assert_eq!(
        plan_json["applications"][0]["objects"].as_array().map(Vec::len),
        Some(2)
    );

    // Fixed: passes in production too.
    std::fs::write(dir.path().join("manifests/web/all.yaml"), deployment(3))?;
    let out = plan(dir.path(), "env=production", "markdown");
    assert_eq!(out.status.code(), Some(0), "{}", common::text(&out));

    // A policy that does not compile fails the plan, naming its mistake.
    std::fs::write(
        dir.path().join("policies/broken.yaml"),
        POLICY
            .replace("production-replicas", "broken")
            .replace("object.spec.replicas >= 2", "object.spec.replicas >="),
    )?;
    let out = plan(dir.path(), "env=production", "text");
    assert_eq!(out.status.code(), Some(1), "{}", common::text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("the policy does not compile: spec.validations[0].expression")
    );

    // Unreadable input: exit 2 with the path.
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["plan", "--manifests", "/nonexistent/manifests", "--policies"])
        .arg(dir.path().join("policies"))
        .output()?;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        common::text(&out).contains("/nonexistent/manifests"),
        "{}",
        common::text(&out)
    );
    Ok(())
}

//! Seed 002's guardrail end to end, through the binary: a Crossplane-style database claim is
//! synced to a staging cluster (the hub, labelled `env: staging`) and to a production cluster (a
//! spoke labelled `env: production`). A Policy says claims in production need backups and two
//! replicas: staging accepts the claim, production refuses the whole sync with a condition naming
//! the policy, the object and the message, and nothing of that sync reaches the spoke. Fixed in
//! Git, production syncs. A policy that does not compile says why on its status; a `Warn` policy
//! warns and lets the sync go on.

mod common;

use std::time::Duration;

use capstan_testkit::capstan::unique_namespace;
use capstan_testkit::{GitServer, TestCluster};
use serde_json::Value;

use common::{capstan_in, kubectl, text, until};

/// The claim's CRD: a group no other test of the run uses (the hub is shared).
const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: postgresqlinstances.guardrails.example.org}
spec:
  group: guardrails.example.org
  names: {kind: PostgreSQLInstance, plural: postgresqlinstances, singular: postgresqlinstance}
  scope: Namespaced
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

fn claim(backup: bool, replicas: u32) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: orders-settings}}\ndata: {{pool: '10'}}\n---\napiVersion: guardrails.example.org/v1alpha1\nkind: PostgreSQLInstance\nmetadata: {{name: orders}}\nspec:\n  backup: {{enabled: {backup}}}\n  replicas: {replicas}\n  storageGB: 20\n"
    )
}

fn policy(ns: &str) -> String {
    format!(
        r#"apiVersion: capstan.dev/v1alpha1
kind: Policy
metadata: {{name: production-databases, namespace: {ns}}}
spec:
  clusterSelector: {{matchLabels: {{env: production}}}}
  matchConstraints:
    resourceRules:
    - apiGroups: [guardrails.example.org]
      apiVersions: ["*"]
      resources: [postgresqlinstances]
      operations: [CREATE, UPDATE]
  validations:
  - expression: "has(object.spec.backup) && object.spec.backup.enabled == true"
    message: production databases need automated backups
  - expression: "object.spec.replicas >= 2"
    messageExpression: "'replicas is ' + string(object.spec.replicas) + ', production needs at least 2'"
---
apiVersion: capstan.dev/v1alpha1
kind: Policy
metadata: {{name: storage-size, namespace: {ns}}}
spec:
  validationActions: [Warn]
  matchConstraints:
    resourceRules:
    - apiGroups: [guardrails.example.org]
      apiVersions: ["*"]
      resources: [postgresqlinstances]
      operations: ["*"]
  validations:
  - expression: "object.spec.storageGB >= 50"
    message: databases under 50 GB fill up quickly
---
apiVersion: capstan.dev/v1alpha1
kind: Policy
metadata: {{name: storage-audit, namespace: {ns}}}
spec:
  validationActions: [Audit]
  matchConstraints:
    resourceRules:
    - apiGroups: [guardrails.example.org]
      apiVersions: ["*"]
      resources: [postgresqlinstances]
      operations: [UPDATE]
  validations:
  - expression: "object.spec.storageGB <= 10"
    messageExpression: "'live claim uses ' + string(object.spec.storageGB) + ' GB'"
---
apiVersion: capstan.dev/v1alpha1
kind: Policy
metadata: {{name: broken, namespace: {ns}}}
spec:
  clusterSelector: {{matchLabels: {{env: nowhere}}}}
  matchConstraints:
    resourceRules:
    - {{apiGroups: ["*"], apiVersions: ["*"], resources: ["*"], operations: ["*"]}}
  validations:
  - expression: "object.spec.replicas >"
"#
    )
}

fn application(ns: &str, name: &str, repo: &str, destination: &str) -> String {
    format!(
        "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  source: {{repoURL: '{repo}', targetRevision: main, path: db}}\n  destination: {{name: {destination}, namespace: guardrails-db}}\n  syncPolicy: {{automated: {{prune: true}}, syncOptions: [CreateNamespace=true]}}\n"
    )
}

fn apply(kc: &str, dir: &std::path::Path, name: &str, yaml: &str) {
    let file = dir.join(format!("{name}.yaml"));
    std::fs::write(&file, yaml).expect("write manifest");
    let out = kubectl(kc, &["apply", "-f", &file.to_string_lossy()]);
    assert!(out.status.success(), "{}", text(&out));
}

fn get_json(kc: &str, args: &[&str]) -> Value {
    let mut all = vec!["get"];
    all.extend(args);
    all.extend(["-o", "json"]);
    let out = kubectl(kc, &all);
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

fn condition(app: &Value, type_: &str) -> Option<String> {
    app["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["message"].as_str().map(str::to_string))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_production_policy_refuses_the_claim_that_staging_accepts() -> anyhow::Result<()> {
    let (hub, production) = tokio::try_join!(TestCluster::shared(), TestCluster::start())?;
    let git = GitServer::start().await?;
    let hub_kc = hub.kubeconfig().to_string_lossy().to_string();
    let prod_kc = production.kubeconfig().to_string_lossy().to_string();
    let ns = unique_namespace();
    let dir = tempfile::tempdir()?;
    let out = common::capstan(&hub_kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out));
    let password = common::admin_password(&out);
    for kc in [&hub_kc, &prod_kc] {
        apply(kc, dir.path(), "crd", CRD);
        let out = kubectl(
            kc,
            &[
                "wait",
                "--for=condition=Established",
                "crd/postgresqlinstances.guardrails.example.org",
                "--timeout=60s",
            ],
        );
        assert!(out.status.success(), "{}", text(&out));
    }
    let out = capstan_in(
        &hub_kc,
        &ns,
        &[
            "cluster",
            "add",
            "production",
            "--kubeconfig",
            &prod_kc,
            "--use-kubeconfig-credentials",
            "--label",
            "env=production",
        ],
    );
    assert!(out.status.success(), "cluster add: {}", text(&out));
    // The hub's own labels come from a cluster Secret with its server.
    apply(
        &hub_kc,
        dir.path(),
        "in-cluster",
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: in-cluster, namespace: {ns}, labels: {{capstan.dev/secret-type: cluster, env: staging}}}}\nstringData: {{name: in-cluster, server: 'https://kubernetes.default.svc'}}\n"
        ),
    );
    apply(&hub_kc, dir.path(), "policies", &policy(&ns));

    git.create_repo("databases")?;
    git.commit(
        "databases",
        "main",
        &[("db/claim.yaml", Some(&claim(false, 1)))],
        "orders database",
    )?;
    let repo = git.git_url("databases");
    let cache = tempfile::tempdir()?;
    let (_controller, base, _) = common::controller_with_server(&hub_kc, cache.path(), &["-n", &ns])?;
    // The broken policy says why on its status.
    until("the broken policy reported", Duration::from_secs(60), || {
        let p = get_json(&hub_kc, &["-n", &ns, "policy", "broken"]);
        p["status"]["conditions"][0]["status"] == "False"
    });
    let broken = get_json(&hub_kc, &["-n", &ns, "policy", "broken"]);
    let message = broken["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("spec.validations[0].expression: does not compile"),
        "{broken}"
    );
    let good = get_json(&hub_kc, &["-n", &ns, "policy", "production-databases"]);
    assert_eq!(good["status"]["conditions"][0]["status"], "True", "{good}");

    apply(
        &hub_kc,
        dir.path(),
        "staging",
        &application(&ns, "db-staging", &repo, "in-cluster"),
    );
    apply(
        &hub_kc,
        dir.path(),
        "production",
        &application(&ns, "db-production", &repo, "production"),
    );

    // Staging accepts the claim, with the Warn policy's warning.
    until("db-staging Synced", Duration::from_secs(120), || {
        let app = get_json(&hub_kc, &["-n", &ns, "application", "db-staging"]);
        app["status"]["sync"]["status"] == "Synced"
    });
    let staging = get_json(&hub_kc, &["-n", &ns, "application", "db-staging"]);
    let warning = condition(&staging, "PolicyWarning").unwrap_or_default();
    assert!(
        warning.contains("policy storage-size")
            && warning.contains("guardrails.example.org/PostgreSQLInstance/guardrails-db/orders")
            && warning.contains("databases under 50 GB fill up quickly"),
        "{staging}"
    );
    assert_eq!(condition(&staging, "PolicyDenied"), None, "{staging}");
    let on_hub = get_json(&hub_kc, &["-n", "guardrails-db", "postgresqlinstance", "orders"]);
    assert_eq!(on_hub["spec"]["replicas"], 1, "the claim is on staging");
    // The Audit policy judges the live claim at each comparison (here, the one a refresh asks for)
    // and records it on its status; it blocks nothing.
    let out = capstan_in(&hub_kc, &ns, &["app", "get", "db-staging", "--refresh"]);
    assert!(out.status.success(), "{}", text(&out));
    until("the audit recorded", Duration::from_secs(60), || {
        let p = get_json(&hub_kc, &["-n", &ns, "policy", "storage-audit"]);
        p["status"]["recentVerdicts"]
            .to_string()
            .contains("live claim uses 20 GB")
    });
    let audit = get_json(&hub_kc, &["-n", &ns, "policy", "storage-audit"]);
    let first = &audit["status"]["recentVerdicts"][0];
    assert_eq!(first["application"], format!("{ns}/db-staging"), "{audit}");
    assert_eq!(first["actions"], serde_json::json!(["Audit"]), "{audit}");
    assert_eq!(
        audit["status"]["recentVerdicts"].as_array().map(Vec::len),
        Some(1),
        "recorded once, not at every reconcile: {audit}"
    );

    // Production refuses the whole sync: the condition names the policy, the object and the
    // message, and nothing of the sync (not the ConfigMap, not the namespace) is on the spoke.
    until("db-production denied", Duration::from_secs(120), || {
        let app = get_json(&hub_kc, &["-n", &ns, "application", "db-production"]);
        condition(&app, "PolicyDenied").is_some()
    });
    let prod_app = get_json(&hub_kc, &["-n", &ns, "application", "db-production"]);
    let denied = condition(&prod_app, "PolicyDenied").unwrap_or_default();
    for part in [
        "policy production-databases on guardrails.example.org/PostgreSQLInstance/guardrails-db/orders",
        "production databases need automated backups",
        "replicas is 1, production needs at least 2",
    ] {
        assert!(denied.contains(part), "{part:?} in {denied}");
    }
    assert_eq!(prod_app["status"]["operationState"]["phase"], "Failed", "{prod_app}");
    assert_eq!(prod_app["status"]["sync"]["status"], "OutOfSync", "{prod_app}");
    let ns_on_spoke = kubectl(&prod_kc, &["get", "namespace", "guardrails-db"]);
    assert!(
        !ns_on_spoke.status.success(),
        "nothing applied on production: {}",
        text(&ns_on_spoke)
    );
    let verdicts = get_json(&hub_kc, &["-n", &ns, "policy", "production-databases"]);
    let recent = verdicts["status"]["recentVerdicts"].to_string();
    assert!(
        recent.contains(&format!("{ns}/db-production")) && recent.contains("Deny"),
        "{verdicts}"
    );

    // `capstan plan` before merging: main is denied (exit 1), the fix on a branch passes (exit 0),
    // a revision that does not exist cannot be planned (exit 2).
    git.commit(
        "databases",
        "fix",
        &[("db/claim.yaml", Some(&claim(true, 2)))],
        "backups and a replica",
    )?;
    let out = capstan_in(
        &hub_kc,
        &ns,
        &["plan", "--repo", &repo, "--revision", "main", "-o", "markdown"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let md = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        md.contains("| db-production | production | changed | 2 | 0 | 0 | **2 denied**, 1 warning(s) | within |"),
        "{md}"
    );
    assert!(
        md.contains("| db-staging | in-cluster | unchanged | 0 | 0 | 0 | 1 warning(s), 1 audited | within |"),
        "{md}"
    );
    assert!(md.contains("- **DENIED** by policy `production-databases`"), "{md}");
    let out = capstan_in(
        &hub_kc,
        &ns,
        &[
            "plan",
            "--repo",
            &repo,
            "--revision",
            "fix",
            "--base",
            "main",
            "-o",
            "json",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let plan: Value = serde_json::from_slice(&out.stdout)?;
    let apps = plan["applications"].as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = apps.iter().filter_map(|a| a["name"].as_str()).collect();
    assert_eq!(names, ["db-production", "db-staging"], "{plan}");
    assert_eq!(apps[1]["change"], "Changed", "{plan}");
    let update = &apps[1]["objects"][0];
    assert_eq!(update["action"], "Update", "{plan}");
    assert!(
        update["diff"].as_str().unwrap_or_default().contains("+  replicas: 2"),
        "{plan}"
    );
    assert!(
        apps[0]["verdicts"]
            .as_array()
            .is_some_and(|v| v.iter().all(|v| v["actions"] == serde_json::json!(["Warn"]))),
        "{plan}"
    );
    let out = capstan_in(&hub_kc, &ns, &["plan", "--repo", &repo, "--revision", "no-such-branch"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("no-such-branch"), "{}", text(&out));
    // The same plan through the API, for a person logged in to the web UI; refused for a
    // repository no readable Application follows (the server fetches no URL a caller names), a
    // revision that does not exist, a revision that looks like an option, and without a login.
    let mut http = common::http::Http::new(&base);
    let anonymous = http.post("/api/plan", serde_json::json!({"repo": repo, "revision": "fix"}));
    assert_eq!(anonymous.status, 401, "{}", anonymous.body);
    let login = http.login("admin", &password);
    assert_eq!(login.status, 200, "{}", login.body);
    let answer = http.post(
        "/api/plan",
        serde_json::json!({"repo": repo, "revision": "fix", "base": "main"}),
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    let api_plan = answer.json();
    assert_eq!(
        api_plan["applications"], plan["applications"],
        "the API answers the CLI's plan"
    );
    let elsewhere = http.post(
        "/api/plan",
        serde_json::json!({"repo": "git://127.0.0.1:1/other.git", "revision": "main"}),
    );
    assert_eq!(elsewhere.status, 404, "{}", elsewhere.body);
    let missing = http.post(
        "/api/plan",
        serde_json::json!({"repo": repo, "revision": "no-such-branch"}),
    );
    assert_eq!(missing.status, 422, "{}", missing.body);
    let option = http.post(
        "/api/plan",
        serde_json::json!({"repo": repo, "revision": "--upload-pack=x"}),
    );
    assert_eq!(option.status, 400, "{}", option.body);

    // Nothing was applied by planning: production is still without the claim.
    let ns_on_spoke = kubectl(&prod_kc, &["get", "namespace", "guardrails-db"]);
    assert!(!ns_on_spoke.status.success(), "a plan applies nothing");

    // Fixed in Git: production syncs and the denial is gone.
    git.commit(
        "databases",
        "main",
        &[("db/claim.yaml", Some(&claim(true, 2)))],
        "backups and a replica",
    )?;
    let out = capstan_in(
        &hub_kc,
        &ns,
        &["app", "sync", "db-production", "--wait", "--timeout", "120"],
    );
    assert!(out.status.success(), "{}", text(&out));
    let prod_app = get_json(&hub_kc, &["-n", &ns, "application", "db-production"]);
    assert_eq!(condition(&prod_app, "PolicyDenied"), None, "{prod_app}");
    let on_spoke = get_json(&prod_kc, &["-n", "guardrails-db", "postgresqlinstance", "orders"]);
    assert_eq!(on_spoke["spec"]["replicas"], 2, "the fixed claim is on production");
    let cm = kubectl(
        &prod_kc,
        &["-n", "guardrails-db", "get", "configmap", "orders-settings"],
    );
    assert!(cm.status.success(), "{}", text(&cm));
    Ok(())
}

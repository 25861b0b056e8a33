//! Secret values never leave Capstan, end to end through the binary: one Application deploys a
//! Secret decrypted from a SOPS file (the real `sops` encrypted it) and one whose value is read from
//! a real OpenBao when the controller applies. The values reach the cluster; they appear in no API
//! answer the web UI and the CLI read (list, Application, tree, diff, manifests, live resource,
//! events, history, the live stream), not in the Application itself, not in Events, and not in the
//! controller's debug log — neither before the sync nor after a rotation in OpenBao.

mod common;

use std::io::Read;
use std::time::Duration;

use capstan_testkit::capstan::unique_namespace;
use capstan_testkit::sops::{AgeKey, encrypt};
use capstan_testkit::{GitServer, OpenBao, TestCluster};
use common::http::Http;
use common::{capstan, capstan_in, kubectl, text, until};
use serde_json::json;

const SOPS_VALUE: &str = "sops-value-5b1e7c0d2a";
const STORE_VALUE: &str = "store-value-9e4f3a6b81";
const ROTATED_VALUE: &str = "store-rotated-27c8d1f0";

fn leaks(body: &str) -> Option<&'static str> {
    use base64::Engine;
    [SOPS_VALUE, STORE_VALUE, ROTATED_VALUE]
        .into_iter()
        .find(|v| body.contains(v) || body.contains(&base64::engine::general_purpose::STANDARD.encode(v.as_bytes())))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn secret_values_appear_in_no_answer_log_or_status() -> anyhow::Result<()> {
    // The run's shared plane, Capstan in a namespace of this test's own.
    let cluster = TestCluster::shared().await?;
    let git = GitServer::start().await?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    let ns = unique_namespace();
    let out = capstan(&kc, &["install", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out));
    let password = common::admin_password(&out);

    // The age key and the store, as an operator registers them.
    let key = AgeKey::generate();
    let work = tempfile::tempdir()?;
    let key_file = work.path().join("team.agekey");
    std::fs::write(&key_file, &key.identity)?;
    let bao = tokio::task::spawn_blocking(OpenBao::start).await??;
    bao.put_kv("secret/web", &[("token", STORE_VALUE)])?;
    for args in [
        vec![
            "-n".to_string(),
            ns.clone(),
            "create".into(),
            "secret".into(),
            "generic".into(),
            "team-age".into(),
            format!("--from-file=age.agekey={}", key_file.display()),
        ],
        vec![
            "-n".into(),
            ns.clone(),
            "label".into(),
            "secret".into(),
            "team-age".into(),
            "capstan.dev/secret-type=decryption".into(),
        ],
        vec![
            "-n".into(),
            ns.clone(),
            "create".into(),
            "secret".into(),
            "generic".into(),
            "bao".into(),
            format!("--from-literal=address={}", bao.address()),
            "--from-literal=auth=token".into(),
            format!("--from-literal=token={}", bao.root_token()),
        ],
        vec![
            "-n".into(),
            ns.clone(),
            "label".into(),
            "secret".into(),
            "bao".into(),
            "capstan.dev/secret-type=secret-store".into(),
        ],
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = kubectl(&kc, &args);
        assert!(out.status.success(), "{}", text(&out));
    }

    // Git: a SOPS-encrypted Secret, a Secret referencing the store, a ConfigMap.
    let sops_secret = encrypt(
        "sops.yaml",
        &format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: from-sops\nstringData:\n  password: {SOPS_VALUE}\n"),
        &[&key],
        &["--encrypted-regex", "^stringData$"],
    )?;
    let store_secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: from-store\n  annotations:\n    capstan.dev/secret-store: bao\n    capstan.dev/secret-data: |\n      token: secret/web#token\n";
    git.create_repo("site")?;
    git.commit(
        "site",
        "main",
        &[
            ("app/sops.yaml", Some(&sops_secret)),
            ("app/store.yaml", Some(store_secret)),
            (
                "app/cm.yaml",
                Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: blue}\n"),
            ),
        ],
        "secrets",
    )?;
    let app = format!(
        "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata: {{name: web, namespace: {ns}}}\nspec:\n  source: {{repoURL: '{}', targetRevision: main, path: app}}\n  destination: {{server: 'https://kubernetes.default.svc', namespace: secrets-web}}\n  decryption: {{provider: sops, secretRef: {{name: team-age}}}}\n  syncPolicy: {{syncOptions: [CreateNamespace=true]}}\n",
        git.git_url("site")
    );
    let app_file = work.path().join("app.yaml");
    std::fs::write(&app_file, app)?;

    let cache = tempfile::tempdir()?;
    let (_controller, base, _, log) =
        common::controller_with_server_log(&kc, cache.path(), &["-n", &ns, "--log", "debug"])?;
    let mut http = Http::new(&base);
    until("the server to be ready", Duration::from_secs(30), || {
        http.get("/readyz").status == 200
    });
    assert_eq!(http.login("admin", &password).status, 200);
    let out = kubectl(&kc, &["apply", "-f", &app_file.to_string_lossy()]);
    assert!(out.status.success(), "{}", text(&out));

    // Before the sync: the diff shows three missing objects, the Secrets' values redacted.
    until("compared", Duration::from_secs(60), || {
        http.get("/api/applications/web").json()["status"]["sync"]["status"] == "OutOfSync"
    });
    let diff = http.get("/api/applications/web/diff");
    assert_eq!(diff.status, 200, "{}", diff.body);
    assert!(
        diff.body.contains("from-store") && diff.body.contains("<redacted"),
        "{}",
        diff.body
    );

    // The sync applies both values.
    assert_eq!(http.post("/api/applications/web/sync", json!({})).status, 202);
    until("synced", Duration::from_secs(90), || {
        let a = http.get("/api/applications/web").json();
        a["status"]["sync"]["status"] == "Synced" && a["status"]["operationState"]["phase"] == "Succeeded"
    });
    let value = |name: &str, key: &str| {
        let out = kubectl(
            &kc,
            &[
                "-n",
                "secrets-web",
                "get",
                "secret",
                name,
                "-o",
                &format!("jsonpath={{.data.{key}}}"),
            ],
        );
        use base64::Engine;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(text(&out).trim())
            .unwrap_or_default();
        String::from_utf8_lossy(&decoded).into_owned()
    };
    assert_eq!(value("from-sops", "password"), SOPS_VALUE);
    assert_eq!(value("from-store", "token"), STORE_VALUE);

    // Rotated in OpenBao: after a refresh the diff says the Secret changed, without the values.
    bao.put_kv("secret/web", &[("token", ROTATED_VALUE)])?;
    assert!(http.post("/api/applications/web/refresh", json!({})).status < 300);
    until("the rotation seen", Duration::from_secs(60), || {
        http.get("/api/applications/web").json()["status"]["sync"]["status"] == "OutOfSync"
    });
    let diff = http.get("/api/applications/web/diff");
    assert!(diff.body.contains("<redacted, changed>"), "{}", diff.body);

    // Every answer the UI and the CLI read, the stream included.
    let mut answers = Vec::new();
    for path in [
        "/api/applications",
        "/api/applications/web",
        "/api/applications/web/tree",
        "/api/applications/web/diff",
        "/api/applications/web/manifests",
        "/api/applications/web/events",
        "/api/applications/web/history",
        "/api/applications/web/resource?version=v1&kind=Secret&namespace=secrets-web&name=from-sops",
        "/api/applications/web/resource?version=v1&kind=Secret&namespace=secrets-web&name=from-store",
    ] {
        let a = http.get(path);
        assert_eq!(a.status, 200, "{path}: {}", a.body);
        answers.push((path.to_string(), a.body));
    }
    let mut stream = http
        .agent
        .get(format!("{base}/api/stream/applications/web"))
        .header("Cookie", http.cookie.clone().unwrap_or_default())
        .call()?;
    let mut first = vec![0u8; 64 * 1024];
    let n = stream.body_mut().as_reader().read(&mut first)?;
    assert!(n > 0, "the stream sent the Application");
    answers.push(("stream".into(), String::from_utf8_lossy(&first[..n]).into_owned()));
    for (path, body) in &answers {
        assert_eq!(leaks(body), None, "{path} answered a secret value: {body}");
    }
    // The CLI's own output.
    for args in [vec!["app", "get", "web", "-o", "yaml"], vec!["app", "diff", "web"]] {
        let out = capstan_in(&kc, &ns, &args);
        assert_eq!(leaks(&text(&out)), None, "capstan {args:?}: {}", text(&out));
    }
    // The Application, the Events, the controller's debug log.
    for args in [
        vec!["-n", &ns, "get", "application", "web", "-o", "yaml"],
        vec!["get", "events", "-A", "-o", "yaml"],
    ] {
        let out = kubectl(&kc, &args);
        assert!(out.status.success(), "{}", text(&out));
        assert_eq!(leaks(&text(&out)), None, "kubectl {args:?}");
    }
    let log = log.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(log.contains("DEBUG"), "the controller logged at debug level");
    assert_eq!(leaks(&log), None, "the controller's log holds a secret value");
    Ok(())
}

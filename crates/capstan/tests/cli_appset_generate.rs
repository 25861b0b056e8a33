//! `capstan appset generate FILE` driven through the binary, with no cluster: a "services root"
//! repository read through `file://`, clusters from `--clusters`, YAML and JSON output, standard input,
//! and the `error: FILE: ...` messages (exit code 1) a pull-request reviewer sees.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use capstan_testkit::{commit_files, run_git};
use serde_json::Value;

fn capstan(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run capstan");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).expect("write stdin");
    }
    drop(input);
    child.wait_with_output().expect("wait for capstan")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A bare repository in `dir` with the services-root layout; returns its `file://` URL.
fn services_repo(dir: &Path) -> anyhow::Result<String> {
    let bare = dir.join("services-root.git");
    run_git(
        dir,
        &[
            "init",
            "--bare",
            "--quiet",
            "--initial-branch=main",
            &bare.to_string_lossy(),
        ],
    )?;
    commit_files(
        &bare,
        "main",
        &[
            (
                "services/web/staging.yaml",
                Some("cluster: staging\nservice: web\nimageTag: \"1.4.2\"\ntargetRevision: main\n"),
            ),
            (
                "services/web/production.yaml",
                Some("cluster: production\nservice: web\nimageTag: \"1.4.1\"\ntargetRevision: v1.4.1\n"),
            ),
            (
                "services/api/staging.yaml",
                Some("cluster: staging\nservice: api\nimageTag: \"0.9.0\"\ntargetRevision: main\n"),
            ),
            (
                "charts/service/Chart.yaml",
                Some("apiVersion: v2\nname: service\nversion: 0.1.0\n"),
            ),
        ],
        "services root",
    )?;
    Ok(format!("file://{}", bare.display()))
}

fn manifest(url: &str, path_glob: &str, image_param: &str) -> String {
    format!(
        r#"apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata:
  name: services
  namespace: capstan
spec:
  generators:
  - matrix:
      generators:
      - git:
          repoURL: "{url}"
          revision: main
          files: [{{path: "{path_glob}"}}]
      - clusters:
          selector:
            matchLabels: {{env: "{{{{cluster}}}}"}}
  template:
    metadata:
      name: "{{{{service}}}}-{{{{name}}}}"
      labels: {{service: "{{{{service}}}}", env: "{{{{metadata.labels.env}}}}"}}
    spec:
      project: default
      source:
        repoURL: "{url}"
        targetRevision: "{{{{targetRevision}}}}"
        path: charts/service
        helm: {{parameters: [{{name: image.tag, value: "{{{{{image_param}}}}}"}}]}}
      destination: {{server: "{{{{server}}}}", namespace: "{{{{service}}}}"}}
"#
    )
}

const CLUSTERS: &str = r#"
- name: spoke-staging
  server: https://10.0.0.1:6443
  labels: {env: staging}
- name: spoke-production
  server: https://10.0.0.2:6443
  labels: {env: production, upgrade_testing: "true"}
"#;

fn names(apps: &[Value]) -> Vec<&str> {
    apps.iter()
        .map(|a| a["metadata"]["name"].as_str().unwrap_or_default())
        .collect()
}

#[test]
fn generate_prints_the_applications_of_a_manifest() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let url = services_repo(dir.path())?;
    let set_file = dir.path().join("services.yaml");
    std::fs::write(&set_file, manifest(&url, "services/*/*.yaml", "imageTag"))?;
    let clusters_file = dir.path().join("clusters.yaml");
    std::fs::write(&clusters_file, CLUSTERS)?;
    let set_arg = set_file.to_string_lossy().to_string();
    let clusters_arg = clusters_file.to_string_lossy().to_string();

    let out = capstan(&["appset", "generate", &set_arg, "--clusters", &clusters_arg], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("---\n"), "{text}");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)?;
    assert_eq!(
        names(&docs),
        ["api-spoke-staging", "web-spoke-production", "web-spoke-staging"]
    );
    let web_prod = &docs[1];
    assert_eq!(web_prod["apiVersion"], "capstan.dev/v1alpha1");
    assert_eq!(web_prod["kind"], "Application");
    assert_eq!(web_prod["metadata"]["namespace"], "capstan");
    assert_eq!(web_prod["metadata"]["labels"]["env"], "production");
    assert_eq!(web_prod["spec"]["destination"]["server"], "https://10.0.0.2:6443");
    assert_eq!(web_prod["spec"]["source"]["targetRevision"], "v1.4.1");
    assert_eq!(web_prod["spec"]["source"]["helm"]["parameters"][0]["value"], "1.4.1");
    assert!(web_prod["metadata"].get("ownerReferences").is_none());

    // The same as a JSON list, from standard input.
    let out = capstan(
        &["appset", "generate", "-", "--clusters", &clusters_arg, "-o", "json"],
        Some(&std::fs::read_to_string(&set_file)?),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let list: Vec<Value> = serde_json::from_str(&stdout(&out))?;
    assert_eq!(names(&list), names(&docs));

    // Without --clusters only in-cluster exists, and it has no env label.
    let out = capstan(&["appset", "generate", &set_arg], None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
    Ok(())
}

#[test]
fn generate_errors_name_the_file_and_the_place() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let url = services_repo(dir.path())?;
    let clusters_file = dir.path().join("clusters.yaml");
    std::fs::write(&clusters_file, CLUSTERS)?;
    let clusters_arg = clusters_file.to_string_lossy().to_string();

    // A template naming a parameter no generator gives.
    let set_file = dir.path().join("missing.yaml");
    std::fs::write(&set_file, manifest(&url, "services/*/*.yaml", "imageTagg"))?;
    let set_arg = set_file.to_string_lossy().to_string();
    let out = capstan(&["appset", "generate", &set_arg, "--clusters", &clusters_arg], None);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.starts_with(&format!(
            "error: {set_arg}: template: spec.source.helm.parameters[0].value: parameter \"imageTagg\" is not defined"
        )),
        "{err}"
    );
    assert_eq!(stdout(&out), "", "nothing printed on error");

    // A path pattern leaving the repository.
    let set_file = dir.path().join("escape.yaml");
    std::fs::write(&set_file, manifest(&url, "../*/*.yaml", "imageTag"))?;
    let set_arg = set_file.to_string_lossy().to_string();
    let out = capstan(&["appset", "generate", &set_arg, "--clusters", &clusters_arg], None);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with(&format!(
            "error: {set_arg}: generators[0].matrix.generators[0].git.files[0].path: path \"../*/*.yaml\" leaves the repository"
        )),
        "{}",
        stderr(&out)
    );

    // A manifest that is not YAML.
    let out = capstan(&["appset", "generate", "-"], Some("spec: [unclosed\n"));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("error: <stdin>: not valid YAML or JSON"),
        "{}",
        stderr(&out)
    );

    // An unknown repository.
    let set_file = dir.path().join("norepo.yaml");
    let missing = format!("file://{}", dir.path().join("nope.git").display());
    std::fs::write(&set_file, manifest(&missing, "services/*/*.yaml", "imageTag"))?;
    let set_arg = set_file.to_string_lossy().to_string();
    let out = capstan(&["appset", "generate", &set_arg], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with(&format!("error: {set_arg}: repository {missing} at revision main: ")),
        "{}",
        stderr(&out)
    );
    Ok(())
}

//! Helm charts rendered with the real `helm` binary.

mod common;

use std::time::Duration;

use capstan_api::application::{ApplicationSource, ApplicationSourceHelm, HelmParameter};
use capstan_render::{RenderError, RenderRequest, Renderer, Tool};
use common::*;
use serde_json::json;

const VALUES_TEMPLATE: &str = r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-values
  namespace: {{ .Release.Namespace }}
data:
  a: {{ .Values.a | quote }}
  b: {{ .Values.b | quote }}
  c: {{ .Values.c | quote }}
  d: {{ .Values.d | quote }}
  portIsString: {{ kindIs "string" .Values.port | quote }}
  kube: {{ .Capabilities.KubeVersion.Version | quote }}
  hasIngress: {{ .Capabilities.APIVersions.Has "networking.k8s.io/v1/Ingress" | quote }}
"#;

fn chart(repo: &Repo, dir: &str) {
    repo.file(
        &format!("{dir}/Chart.yaml"),
        "apiVersion: v2\nname: web\nversion: 0.1.0\n",
    )
    .file(
        &format!("{dir}/values.yaml"),
        "a: chart\nb: chart\nc: chart\nd: chart\nport: 80\n",
    )
    .file(&format!("{dir}/templates/values.yaml"), VALUES_TEMPLATE);
}

fn helm_source(path: &str, helm: ApplicationSourceHelm) -> ApplicationSource {
    let mut s = source(path);
    s.helm = Some(helm);
    s
}

fn param(name: &str, value: &str, force_string: bool) -> HelmParameter {
    HelmParameter {
        name: name.into(),
        value: value.into(),
        force_string,
    }
}

fn data(rendered: &capstan_render::Rendered, name: &str) -> serde_json::Value {
    find(rendered, "ConfigMap", name)["data"].clone()
}

#[tokio::test]
async fn defaults_release_name_and_namespace() {
    let repo = Repo::new();
    chart(&repo, "charts/web");
    let rendered = render(&repo, &source("charts/web")).await.unwrap();
    assert_eq!(rendered.tool, Tool::Helm);
    let cm = find(&rendered, "ConfigMap", "myapp-values");
    assert_eq!(cm["metadata"]["namespace"], "team-a");
    assert_eq!(cm["data"]["a"], "chart");
    assert_eq!(cm["data"]["portIsString"], "false");

    let s = helm_source(
        "charts/web",
        ApplicationSourceHelm {
            release_name: "custom".into(),
            ..Default::default()
        },
    );
    let rendered = render(&repo, &s).await.unwrap();
    assert_eq!(ids(&rendered), ["ConfigMap/custom-values"]);
}

#[tokio::test]
async fn values_precedence() {
    let repo = Repo::new();
    chart(&repo, "chart");
    repo.file("chart/env/prod.yaml", "a: file\nb: file\nc: file\nd: file\n")
        .file("shared/extra.yaml", "a: extra\n");
    // valueFiles (in order) < values < parameters.
    let s = helm_source(
        "chart",
        ApplicationSourceHelm {
            value_files: vec!["env/prod.yaml".into(), "../shared/extra.yaml".into()],
            values: "b: values\nc: values\nd: values\n".into(),
            parameters: vec![param("d", "param", false), param("port", "8080", true)],
            ..Default::default()
        },
    );
    let d = data(&render(&repo, &s).await.unwrap(), "myapp-values");
    assert_eq!(
        (&d["a"], &d["b"], &d["c"], &d["d"], &d["portIsString"]),
        (
            &json!("extra"),
            &json!("values"),
            &json!("values"),
            &json!("param"),
            &json!("true")
        )
    );
    // valuesObject wins over values (replacing it, as in Argo CD), parameters still win over it.
    let s = helm_source(
        "chart",
        ApplicationSourceHelm {
            value_files: vec!["env/prod.yaml".into()],
            values: "b: values\nc: values\n".into(),
            values_object: Some(json!({"c": "object", "d": "object"})),
            parameters: vec![param("d", "param", false)],
            ..Default::default()
        },
    );
    let d = data(&render(&repo, &s).await.unwrap(), "myapp-values");
    assert_eq!(
        (&d["a"], &d["b"], &d["c"], &d["d"]),
        (&json!("file"), &json!("file"), &json!("object"), &json!("param"))
    );
}

#[tokio::test]
async fn kube_version_and_api_versions_reach_capabilities() {
    let repo = Repo::new();
    chart(&repo, "chart");
    let s = source("chart");
    let mut req = request(&repo, &s);
    req.kube_version = Some("1.20.2".into());
    req.api_versions = vec!["apps/v1".into(), "networking.k8s.io/v1/Ingress".into()];
    let d = data(&renderer().render(&req, REVISION).await.unwrap(), "myapp-values");
    assert_eq!(d["kube"], "v1.20.2");
    assert_eq!(d["hasIngress"], "true");
    let d = data(&render(&repo, &s).await.unwrap(), "myapp-values");
    assert_eq!(d["hasIngress"], "false");
}

#[tokio::test]
async fn local_file_dependency_is_built_outside_the_checkout() {
    let repo = Repo::new();
    repo.file(
        "apps/web/Chart.yaml",
        "apiVersion: v2\nname: web\nversion: 0.1.0\ndependencies:\n- name: lib\n  version: 0.1.0\n  repository: file://../../libs/lib\n",
    )
    .file("apps/web/templates/cm.yaml", &configmap("{{ .Release.Name }}-web"))
    .file("apps/web/values.yaml", "lib:\n  greeting: hello from parent\n")
    .file("libs/lib/Chart.yaml", "apiVersion: v2\nname: lib\nversion: 0.1.0\n")
    .file(
        "libs/lib/templates/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-lib\ndata:\n  greeting: {{ .Values.greeting | quote }}\n",
    );
    let rendered = render(&repo, &source("apps/web")).await.unwrap();
    let mut got = ids(&rendered);
    got.sort();
    assert_eq!(got, ["ConfigMap/myapp-lib", "ConfigMap/myapp-web"]);
    assert_eq!(data(&rendered, "myapp-lib")["greeting"], "hello from parent");
    assert!(
        !repo.root.join("apps/web/charts").exists(),
        "helm wrote into the checkout"
    );
    assert!(
        !repo.root.join("apps/web/Chart.lock").exists(),
        "helm wrote into the checkout"
    );
}

#[tokio::test]
async fn dependency_paths_must_stay_in_the_repository() {
    let repo = Repo::new();
    repo.file(
        "chart/Chart.yaml",
        "apiVersion: v2\nname: web\nversion: 0.1.0\ndependencies:\n- name: lib\n  version: 0.1.0\n  repository: file://../../outside\n",
    );
    let msg = render(&repo, &source("chart")).await.unwrap_err().to_string();
    assert!(
        msg.contains("chart/Chart.yaml") && msg.contains("escapes the repository"),
        "{msg}"
    );

    let repo = Repo::new();
    repo.file(
        "chart/Chart.yaml",
        "apiVersion: v2\nname: web\nversion: 0.1.0\ndependencies:\n- name: redis\n  version: 1.0.0\n  repository: https://charts.example.com\n",
    );
    let err = render(&repo, &source("chart")).await.unwrap_err();
    assert!(matches!(err.root(), RenderError::RemoteDependency { .. }), "{err}");
}

#[tokio::test]
async fn hooks_are_mapped_to_phases() {
    let repo = Repo::new();
    repo.file("chart/Chart.yaml", "apiVersion: v2\nname: hooks\nversion: 0.1.0\n")
        .file(
            "chart/templates/hooks.yaml",
            r#"apiVersion: batch/v1
kind: Job
metadata:
  name: migrate
  annotations:
    helm.sh/hook: pre-install,pre-upgrade,post-install
    helm.sh/hook-weight: "-5"
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
---
apiVersion: v1
kind: Pod
metadata:
  name: smoke-test
  annotations:
    helm.sh/hook: test
---
apiVersion: batch/v1
kind: Job
metadata:
  name: cleanup
  annotations:
    helm.sh/hook: pre-delete
---
apiVersion: batch/v1
kind: Job
metadata:
  name: argo-hook
  annotations:
    helm.sh/hook: post-install
    argocd.argoproj.io/hook: Sync
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: weighted
  annotations:
    helm.sh/hook-weight: "3"
    capstan.dev/sync-wave: "1"
"#,
        );
    let rendered = render(&repo, &source("chart")).await.unwrap();
    let mut got = ids(&rendered);
    got.sort();
    assert_eq!(got, ["ConfigMap/weighted", "Job/argo-hook", "Job/migrate"]);
    let migrate = &find(&rendered, "Job", "migrate")["metadata"]["annotations"];
    assert_eq!(migrate["capstan.dev/hook"], "PreSync,PostSync");
    assert_eq!(migrate["capstan.dev/sync-wave"], "-5");
    assert_eq!(
        migrate["capstan.dev/hook-delete-policy"],
        "BeforeHookCreation,HookSucceeded"
    );
    assert_eq!(migrate["helm.sh/hook"], "pre-install,pre-upgrade,post-install");
    let argo = &find(&rendered, "Job", "argo-hook")["metadata"]["annotations"];
    assert!(argo.get("capstan.dev/hook").is_none());
    assert_eq!(
        find(&rendered, "ConfigMap", "weighted")["metadata"]["annotations"]["capstan.dev/sync-wave"],
        "1"
    );
}

#[tokio::test]
async fn cache_hits_and_misses() {
    let repo = Repo::new();
    chart(&repo, "chart");
    let renderer = renderer();
    let s = helm_source(
        "chart",
        ApplicationSourceHelm {
            parameters: vec![param("a", "1", false)],
            ..Default::default()
        },
    );
    let first = renderer.render(&request(&repo, &s), REVISION).await.unwrap();
    assert_eq!(renderer.cache_stats(), (0, 1));
    let second = renderer.render(&request(&repo, &s), REVISION).await.unwrap();
    assert_eq!(first, second);
    assert_eq!(renderer.cache_stats(), (1, 1));

    let changed = helm_source(
        "chart",
        ApplicationSourceHelm {
            parameters: vec![param("a", "2", false)],
            ..Default::default()
        },
    );
    let third = renderer.render(&request(&repo, &changed), REVISION).await.unwrap();
    assert_eq!(data(&third, "myapp-values")["a"], "2");
    assert_eq!(renderer.cache_stats(), (1, 2));

    let mut other_ns = request(&repo, &s);
    other_ns.namespace = "team-b";
    renderer.render(&other_ns, REVISION).await.unwrap();
    renderer.render(&request(&repo, &s), "another-revision").await.unwrap();
    assert_eq!(renderer.cache_stats(), (1, 4));
    renderer.render(&request(&repo, &s), REVISION).await.unwrap();
    assert_eq!(renderer.cache_stats(), (2, 4));
}

/// A hard refresh: after `invalidate`, the next render runs `helm template` again (it sees a values
/// file changed in the checkout without a new revision, which the cache key cannot notice) and its
/// result replaces the cached one.
#[tokio::test]
async fn invalidate_makes_the_next_render_run_helm_again() {
    let repo = Repo::new();
    chart(&repo, "chart");
    let renderer = renderer();
    let s = helm_source("chart", ApplicationSourceHelm::default());
    let first = renderer.render(&request(&repo, &s), REVISION).await.unwrap();
    assert_eq!(data(&first, "myapp-values")["a"], "chart");
    assert_eq!(renderer.cache_stats(), (0, 1));

    // Changed behind the cache's back: same revision, same parameters.
    repo.file(
        "chart/values.yaml",
        "a: changed\nb: chart\nc: chart\nd: chart\nport: 80\n",
    );
    let cached = renderer.render(&request(&repo, &s), REVISION).await.unwrap();
    assert_eq!(data(&cached, "myapp-values")["a"], "chart", "served from the cache");
    assert_eq!(renderer.cache_stats(), (1, 1));

    // Another Application's (or another path's) invalidation leaves this one cached.
    assert_eq!(renderer.invalidate(&s, "other-app", "team-a"), 0);
    assert_eq!(
        renderer.invalidate(&helm_source("elsewhere", Default::default()), "myapp", "team-a"),
        0
    );
    let still = renderer.render(&request(&repo, &s), REVISION).await.unwrap();
    assert_eq!(data(&still, "myapp-values")["a"], "chart");
    assert_eq!(renderer.cache_stats(), (2, 1));

    // `./chart/` names the same path as `chart`.
    let spelled = helm_source("./chart/", ApplicationSourceHelm::default());
    assert_eq!(renderer.invalidate(&spelled, "myapp", "team-a"), 1);
    let fresh = renderer.render(&request(&repo, &s), REVISION).await.unwrap();
    assert_eq!(data(&fresh, "myapp-values")["a"], "changed", "helm ran again");
    assert_eq!(renderer.cache_stats(), (2, 2));

    // The fresh result replaced the cached one.
    let again = renderer.render(&request(&repo, &s), REVISION).await.unwrap();
    assert_eq!(again, fresh);
    assert_eq!(renderer.cache_stats(), (3, 2));
}

#[tokio::test]
async fn template_error_carries_helms_message() {
    let repo = Repo::new();
    repo.file("chart/Chart.yaml", "apiVersion: v2\nname: broken\nversion: 0.1.0\n")
        .file("chart/templates/cm.yaml", "metadata:\n  name: {{ .Release.Name \n");
    let err = render(&repo, &source("chart")).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err.root(), RenderError::ToolFailed { .. }), "{msg}");
    assert!(
        msg.starts_with("helm template failed for path 'chart': Error: parse error"),
        "{msg}"
    );
    assert!(msg.contains("templates/cm.yaml"), "{msg}");
}

#[tokio::test]
async fn value_file_errors() {
    let repo = Repo::new();
    chart(&repo, "chart");
    std::fs::write(repo.outside.join("secret.yaml"), "a: stolen\n").unwrap();
    repo.symlink(repo.outside.join("secret.yaml"), "values/linked.yaml");

    let missing = helm_source(
        "chart",
        ApplicationSourceHelm {
            value_files: vec!["nope.yaml".into()],
            ..Default::default()
        },
    );
    let err = render(&repo, &missing).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"helm value file "nope.yaml" of chart 'chart' does not exist in the repository"#
    );

    let escape = helm_source(
        "chart",
        ApplicationSourceHelm {
            value_files: vec!["../../../etc/passwd".into()],
            ..Default::default()
        },
    );
    let err = render(&repo, &escape).await.unwrap_err();
    assert_eq!(err.to_string(), r#"path "../../../etc/passwd" escapes the repository"#);

    let absolute = helm_source(
        "chart",
        ApplicationSourceHelm {
            value_files: vec!["/etc/passwd".into()],
            ..Default::default()
        },
    );
    let err = render(&repo, &absolute).await.unwrap_err();
    assert!(matches!(err.root(), RenderError::AbsolutePath { .. }), "{err}");

    let linked = helm_source(
        "chart",
        ApplicationSourceHelm {
            value_files: vec!["../values/linked.yaml".into()],
            ..Default::default()
        },
    );
    let err = render(&repo, &linked).await.unwrap_err();
    assert!(err.to_string().contains("values/linked.yaml"), "{err}");
    assert!(matches!(err.root(), RenderError::SymlinkEscape { .. }), "{err:?}");
    // Any symlink in the checkout leading out is refused before helm runs at all.
    let err = render(&repo, &source("chart")).await.unwrap_err();
    assert!(matches!(err.root(), RenderError::OutOfBoundsSymlink { .. }), "{err:?}");
}

#[tokio::test]
async fn invalid_inline_values() {
    let repo = Repo::new();
    chart(&repo, "chart");
    let s = helm_source(
        "chart",
        ApplicationSourceHelm {
            values: "a: [unclosed\n".into(),
            ..Default::default()
        },
    );
    let msg = render(&repo, &s).await.unwrap_err().to_string();
    assert!(msg.contains("spec.source.helm.values") && msg.contains("line"), "{msg}");
}

#[tokio::test]
async fn tool_invocations_time_out() {
    let repo = Repo::new();
    chart(&repo, "chart");
    let renderer = Renderer::new(Duration::from_millis(1));
    let s = source("chart");
    let req = RenderRequest {
        repo_root: &repo.root,
        source: &s,
        app_name: "myapp",
        namespace: "default",
        kube_version: None,
        api_versions: Vec::new(),
        refs: &[],
        allow_empty: false,
        dependencies: &[],
        decryption: None,
    };
    let err = renderer.render(&req, REVISION).await.unwrap_err();
    assert!(matches!(err.root(), RenderError::Timeout { .. }), "{err:?}");
    assert_eq!(err.to_string(), "helm template timed out after 1 ms (path 'chart')");
}

/// `$NAME/path` value files are read from the checkout of the source whose `ref` is `NAME`, confined to
/// that checkout; a `$NAME` no source carries is refused by name.
#[tokio::test]
async fn ref_value_files_come_from_the_named_source_and_stay_in_it() {
    let repo = Repo::new();
    chart(&repo, "chart");
    let values = Repo::new();
    values.file("envs/prod.yaml", "a: from-ref\n");
    std::fs::write(values.outside.join("secret.yaml"), "a: stolen\n").unwrap();
    values.symlink(values.outside.join("secret.yaml"), "envs/linked.yaml");
    let refs = [capstan_render::RefSource {
        name: "values",
        root: &values.root,
        revision: "fedcba9876543210fedcba9876543210fedcba98",
    }];
    let with = |file: &str| {
        helm_source(
            "chart",
            ApplicationSourceHelm {
                value_files: vec![file.into()],
                ..Default::default()
            },
        )
    };
    let renderer = renderer();
    let render_ref = |s: ApplicationSource| {
        let renderer = &renderer;
        let refs = &refs;
        let repo = &repo;
        async move {
            let mut req = request(repo, &s);
            req.refs = refs;
            renderer.render(&req, REVISION).await
        }
    };

    let rendered = render_ref(with("$values/envs/prod.yaml")).await.unwrap();
    assert_eq!(data(&rendered, "myapp-values")["a"], "from-ref");

    let err = render_ref(with("$other/envs/prod.yaml")).await.unwrap_err();
    assert!(matches!(err.root(), RenderError::UnknownRef { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("no source of the Application has `ref: other`"),
        "{err}"
    );

    let err = render_ref(with("$values/../../outside/secret.yaml")).await.unwrap_err();
    assert!(err.to_string().contains("escapes the repository"), "{err}");
    let err = render_ref(with("$values/envs/linked.yaml")).await.unwrap_err();
    assert!(matches!(err.root(), RenderError::SymlinkEscape { .. }), "{err:?}");
    let err = render_ref(with("$values")).await.unwrap_err();
    assert!(matches!(err.root(), RenderError::MissingValueFile { .. }), "{err:?}");
}

/// Odd `$ref` value files are refused by name, never read from outside the ref source's checkout: `$`
/// alone, an empty path, an absolute path after the name, `..` after `.`, URL-encoded `..` (a plain
/// file name), a backslash path, and a name that is a prefix of a ref.
#[tokio::test]
async fn odd_ref_value_files_are_refused_and_read_nothing_outside() {
    let repo = Repo::new();
    chart(&repo, "chart");
    let values = Repo::new();
    values.file("envs/prod.yaml", "a: from-ref\n");
    std::fs::write(values.outside.join("secret.yaml"), "a: stolen\n").unwrap();
    let refs = [capstan_render::RefSource {
        name: "values",
        root: &values.root,
        revision: "fedcba9876543210fedcba9876543210fedcba98",
    }];
    let renderer = renderer();
    let outside = values.outside.join("secret.yaml").display().to_string();
    for file in [
        "$".to_string(),
        "$/envs/prod.yaml".to_string(),
        "$values/".to_string(),
        "$values//".to_string(),
        format!("$values/{outside}"),
        format!("$values/{}", outside.trim_start_matches('/')),
        "$values/./../outside/secret.yaml".to_string(),
        "$values/envs/../../outside/secret.yaml".to_string(),
        "$values/%2e%2e/outside/secret.yaml".to_string(),
        "$values\\..\\outside\\secret.yaml".to_string(),
        "$value/envs/prod.yaml".to_string(),
        "$values-x/envs/prod.yaml".to_string(),
    ] {
        let source = helm_source(
            "chart",
            ApplicationSourceHelm {
                value_files: vec![file.clone()],
                ..Default::default()
            },
        );
        let mut req = request(&repo, &source);
        req.refs = &refs;
        match renderer.render(&req, REVISION).await {
            Err(err) => {
                eprintln!("{file}: {err}");
                assert!(!err.to_string().contains("stolen"), "{file}: {err}")
            }
            Ok(rendered) => panic!("{file:?} rendered: {:?}", data(&rendered, "myapp-values")),
        }
    }
}

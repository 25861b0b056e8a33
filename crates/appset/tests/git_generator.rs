//! The git generators against a real repository served by `git daemon`, checked out through
//! `capstan_source::RepoCache` as the controller and `capstan appset generate` do: the "services
//! root" layout of seed 004 (`services/<service>/<env>.yaml` with `cluster`, `service`, `imageTag`,
//! `targetRevision`), and a directories generator.

use std::time::Duration;

use capstan_api::{Application, ApplicationSet};
use capstan_appset::{GitSource, Inputs, generate, git_sources};
use capstan_source::{Credentials, RepoCache};
use capstan_testkit::GitServer;

/// Check out every git source of `set` (forcing a fresh look at the remote's refs).
async fn inputs(cache: &RepoCache, set: &ApplicationSet) -> anyhow::Result<Inputs> {
    let mut inputs = Inputs::default();
    for source in git_sources(&set.spec)? {
        let resolved = cache
            .resolve(&source.repo_url, &source.revision, &Credentials::none(), true)
            .await?;
        let dir = cache.checkout(&source.repo_url, &resolved.sha).await?;
        inputs.checkouts.insert(source, dir.to_path_buf());
    }
    Ok(inputs)
}

fn names(apps: &[Application]) -> Vec<String> {
    apps.iter()
        .map(|a| a.metadata.name.clone().unwrap_or_default())
        .collect()
}

fn json(app: &Application) -> serde_json::Value {
    serde_json::to_value(app).expect("serialisable")
}

fn image_tag(app: &Application) -> String {
    let helm = app.spec.source.helm.as_ref().expect("helm source");
    helm.parameters
        .iter()
        .find(|p| p.name == "image.tag")
        .map(|p| p.value.clone())
        .unwrap_or_default()
}

fn files_set(url: &str, revision: &str) -> anyhow::Result<ApplicationSet> {
    let yaml = format!(
        r#"
apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata: {{name: services, namespace: capstan}}
spec:
  generators:
  - git:
      repoURL: "{url}"
      revision: "{revision}"
      files:
      - path: "services/*/*.yaml"
      - path: "services/*/disabled.yaml"
        exclude: true
  template:
    metadata:
      name: "{{{{service}}}}-{{{{cluster}}}}"
      labels: {{service: "{{{{service}}}}", env: "{{{{path.filename}}}}"}}
    spec:
      project: default
      source:
        repoURL: "{url}"
        targetRevision: "{{{{targetRevision}}}}"
        path: charts/service
        helm:
          releaseName: "{{{{service}}}}"
          parameters: [{{name: image.tag, value: "{{{{imageTag}}}}"}}]
      destination: {{name: "{{{{cluster}}}}", namespace: "{{{{service}}}}"}}
"#
    );
    Ok(serde_saphyr::from_str(&yaml)?)
}

fn service_file(cluster: &str, service: &str, tag: &str, revision: &str) -> String {
    format!("cluster: {cluster}\nservice: {service}\nimageTag: \"{tag}\"\ntargetRevision: {revision}\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_root_files_become_applications_and_follow_commits() -> anyhow::Result<()> {
    let git = GitServer::start().await?;
    git.create_repo("services-root")?;
    let web_staging = service_file("staging", "web", "1.4.2", "main");
    let web_production = service_file("production", "web", "1.4.1", "v1.4.1");
    let api_staging = service_file("staging", "api", "0.9.0", "main");
    let first = git.commit(
        "services-root",
        "main",
        &[
            (
                "charts/service/Chart.yaml",
                Some("apiVersion: v2\nname: service\nversion: 0.1.0\n"),
            ),
            ("services/web/staging.yaml", Some(web_staging.as_str())),
            ("services/web/production.yaml", Some(web_production.as_str())),
            ("services/api/staging.yaml", Some(api_staging.as_str())),
            ("services/api/disabled.yaml", Some("cluster: nowhere\nservice: api\n")),
            ("services/README.md", Some("# one file per service per environment\n")),
        ],
        "services",
    )?;
    let url = git.git_url("services-root");
    let cache_dir = tempfile::tempdir()?;
    let cache = RepoCache::new(cache_dir.path(), Duration::from_secs(30), Duration::from_secs(60));

    let set = files_set(&url, "")?;
    assert_eq!(git_sources(&set.spec)?, [GitSource::new(&url, "HEAD")]);
    let before = generate(&set, &inputs(&cache, &set).await?)?;
    assert_eq!(names(&before), ["api-staging", "web-production", "web-staging"]);
    let web_prod = &before[1];
    assert_eq!(web_prod.metadata.namespace.as_deref(), Some("capstan"));
    assert_eq!(web_prod.spec.destination.name, "production");
    assert_eq!(web_prod.spec.destination.namespace, "web");
    assert_eq!(web_prod.spec.source.target_revision, "v1.4.1");
    assert_eq!(web_prod.spec.source.repo_url, url);
    assert_eq!(image_tag(web_prod), "1.4.1");
    let labels = web_prod.metadata.labels.as_ref().expect("labels");
    assert_eq!(labels["env"], "production.yaml");
    assert_eq!(labels["service"], "web");

    // Roll web in staging, remove api, add a new service.
    git.commit(
        "services-root",
        "main",
        &[
            (
                "services/web/staging.yaml",
                Some(service_file("staging", "web", "1.5.0", "main").as_str()),
            ),
            ("services/api/staging.yaml", None),
            (
                "services/worker/staging.yaml",
                Some(service_file("staging", "worker", "2.0.0", "main").as_str()),
            ),
        ],
        "roll web, drop api, add worker",
    )?;
    let after = generate(&set, &inputs(&cache, &set).await?)?;
    assert_eq!(names(&after), ["web-production", "web-staging", "worker-staging"]);
    assert_eq!(image_tag(&after[1]), "1.5.0");
    assert_eq!(
        json(&after[0]),
        json(&before[1]),
        "the untouched Application is generated identically"
    );

    // A generator pinned to the first commit still sees the old files.
    let pinned = files_set(&url, &first)?;
    let old = generate(&pinned, &inputs(&cache, &pinned).await?)?;
    assert_eq!(
        old.iter().map(json).collect::<Vec<_>>(),
        before.iter().map(json).collect::<Vec<_>>()
    );

    // A file that is not YAML makes the whole set fail, naming the file.
    git.commit(
        "services-root",
        "main",
        &[(
            "services/worker/production.yaml",
            Some("cluster: [production\nservice: worker\n"),
        )],
        "broken file",
    )?;
    let err = generate(&set, &inputs(&cache, &set).await?).unwrap_err();
    assert_eq!(err.reason(), "InvalidGitFile");
    assert!(
        err.to_string()
            .starts_with("generators[0].git: services/worker/production.yaml: not valid YAML or JSON: "),
        "{err}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directories_generator_lists_directories_of_the_checkout() -> anyhow::Result<()> {
    let git = GitServer::start().await?;
    git.create_repo("platform")?;
    git.commit(
        "platform",
        "main",
        &[
            ("addons/external-dns/kustomization.yaml", Some("resources: []\n")),
            ("addons/ingress-nginx/kustomization.yaml", Some("resources: []\n")),
            ("addons/ingress-nginx/base/deploy.yaml", Some("{}\n")),
            ("addons/experimental/kustomization.yaml", Some("resources: []\n")),
            ("README.md", Some("platform\n")),
        ],
        "addons",
    )?;
    let url = git.git_url("platform");
    let yaml = format!(
        r#"
apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata: {{name: addons}}
spec:
  generators:
  - matrix:
      generators:
      - clusters: {{}}
      - git:
          repoURL: "{url}"
          revision: main
          directories:
          - path: "addons/*"
          - path: "addons/experimental"
            exclude: true
  template:
    metadata: {{name: "{{{{path.basename}}}}-{{{{nameNormalized}}}}"}}
    spec:
      source: {{repoURL: "{url}", targetRevision: main, path: "{{{{path}}}}"}}
      destination: {{server: "{{{{server}}}}", namespace: "{{{{path[1]}}}}"}}
"#
    );
    let set: ApplicationSet = serde_saphyr::from_str(&yaml)?;
    let cache_dir = tempfile::tempdir()?;
    let cache = RepoCache::new(cache_dir.path(), Duration::from_secs(30), Duration::from_secs(60));
    let apps = generate(&set, &inputs(&cache, &set).await?)?;
    assert_eq!(names(&apps), ["external-dns-in-cluster", "ingress-nginx-in-cluster"]);
    assert_eq!(apps[1].spec.source.path, "addons/ingress-nginx");
    assert_eq!(apps[1].spec.destination.namespace, "ingress-nginx");
    assert_eq!(apps[1].spec.destination.server, "https://kubernetes.default.svc");
    assert!(apps[1].metadata.namespace.is_none());
    Ok(())
}

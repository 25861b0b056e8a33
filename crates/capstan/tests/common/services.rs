//! Seed 004's services-root layout, shared by the promotion tests (API and browser): one file per
//! service per environment under `services-root/services/<service>/<env>.yaml` next to the shared
//! chart `charts/service`, the `services` ApplicationSet (examples/appsets/services.yaml, one
//! Application `<service>-<env>` per file, in project `services`), the repository Secret the
//! controller and the promoter push with, and PromotionPipelines over it.

use std::path::{Path, PathBuf};

use capstan_testkit::git::{PASSWORD, USER};

use super::{kubectl, text};

/// The path of the services' files in a pipeline.
pub const SERVICES_PATH: &str = "services-root/services/{service}/{env}.yaml";

/// The repository's examples/ directory.
pub fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// The shared chart's files, as `charts/service/…` paths and their text.
pub fn chart_files() -> anyhow::Result<Vec<(String, String)>> {
    Ok(capstan_testkit::files_under(&examples().join("charts/service"))?
        .into_iter()
        .map(|(p, t)| (format!("charts/service/{p}"), t))
        .collect())
}

/// `kubectl apply` of `yaml`, written to `dir/name` first.
pub fn apply(kc: &str, dir: &Path, name: &str, yaml: &str) {
    let file = dir.join(name);
    std::fs::write(&file, yaml).expect("write a manifest");
    let out = kubectl(kc, &["apply", "-f", &file.to_string_lossy()]);
    assert!(out.status.success(), "kubectl apply {name}: {}", text(&out));
}

/// A repository Secret for `repo` (the git test server's user and password), in Capstan's namespace
/// `ns`.
pub fn repository_secret(ns: &str, name: &str, repo: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {ns}, labels: {{capstan.dev/secret-type: repository}}}}\nstringData: {{url: '{repo}', username: {USER}, password: {PASSWORD}}}\n"
    )
}

/// The `services` AppProject and ApplicationSet of examples/appsets, reading `repo`, in Capstan's
/// namespace `ns`: the files name `capstan` (as the metadata's namespace, and as the namespace the
/// project keeps its Applications out of), which becomes `ns`.
pub fn apply_services_appset(kc: &str, ns: &str, dir: &Path, repo: &str) -> anyhow::Result<()> {
    for set in ["services-project.yaml", "services.yaml"] {
        let yaml = std::fs::read_to_string(examples().join("appsets").join(set))?;
        assert!(
            yaml.contains("  namespace: capstan\n"),
            "examples/appsets/{set} names capstan"
        );
        let yaml = yaml
            .replace("REPO_URL", repo)
            .replace("  namespace: capstan\n", &format!("  namespace: {ns}\n"))
            .replace("namespace: '!capstan'", &format!("namespace: '!{ns}'"));
        apply(kc, dir, set, &yaml);
    }
    Ok(())
}

/// A PromotionPipeline `name` (in Capstan's namespace `ns`) of AppProject `project` over `repo` with
/// environments staging (auto) → production (manual), Applications named `{service}-{env}`; `fields`
/// is a YAML line (`  fields: [...]\n`) or empty.
pub fn pipeline(ns: &str, name: &str, project: &str, repo: &str, path: &str, fields: &str) -> String {
    format!(
        "apiVersion: capstan.dev/v1alpha1\nkind: PromotionPipeline\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  project: {project}\n  repoURL: '{repo}'\n  branch: main\n  path: '{path}'\n  application: '{{service}}-{{env}}'\n{fields}  environments:\n    - {{name: staging, promotion: auto}}\n    - {{name: production, promotion: manual}}\n"
    )
}

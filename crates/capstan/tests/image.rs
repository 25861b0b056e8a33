//! `make image` (scripts/image.sh): the image pushed to a real registry (Debian's `docker-registry` on
//! loopback) is what docs/install.md promises — read back through the registry API: an OCI manifest
//! of two gzip layers, run as user 65532, labelled with the source revision, holding a
//! statically linked `capstan`, helm, kustomize, git and ssh; a second build of the same commit has the
//! same digest; a registry that refuses the push gets no tag and the build fails saying so. Then the
//! image's own root file system (extracted with `crane export`) runs `capstan controller` as its Pod
//! would (common::pod: chroot, read-only root, the service account's token) and syncs a directory
//! with a PreSync hook, a Helm chart and a Kustomize overlay with only the shipped RBAC.
//!
//! The first build of a checkout compiles capstan for x86_64-unknown-linux-musl with cargo's dev
//! profile (minutes; `make_image`); later ones reuse cargo's target directory and the cached Debian
//! layer.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use capstan_testkit::registry::{Registry, RegistryOptions};
use capstan_testkit::{GitServer, TestCluster};
use common::apps::{self, APPS};
use common::pod::{self, Root, ServiceAccountFiles};
use common::text;
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `make image IMAGE=image`, with the build's output. capstan is built with cargo's dev profile
/// (`CAPSTAN_IMAGE_PROFILE=dev`): the same code and the same steps as the release image, minutes
/// instead of half an hour from an empty target directory on 2 cores. The release image's size is
/// measured in docs/benchmarks.md ("Issue 30: the image").
fn make_image(image: &str) -> Output {
    Command::new("make")
        .arg("-C")
        .arg(root())
        .arg("image")
        .arg(format!("IMAGE={image}"))
        .env("CAPSTAN_IMAGE_PROFILE", "dev")
        .output()
        .expect("make starts")
}

/// The digest `make image` reported pushing (`pushed REPO@sha256:...`), failing the test otherwise.
fn pushed_digest(out: &Output, repository: &str) -> String {
    assert!(out.status.success(), "make image failed: {}", text(out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("pushed "))
        .unwrap_or_else(|| panic!("make image says what it pushed: {}", text(out)));
    let reference = line.trim_start_matches("pushed ");
    let (name, digest) = reference.split_once('@').expect("REPO@DIGEST");
    assert_eq!(name, repository, "{line}");
    assert!(digest.starts_with("sha256:") && digest.len() == 71, "{line}");
    digest.to_string()
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent()
}

/// GET a registry API path: status, `Docker-Content-Digest` and body.
fn registry_get(registry: &Registry, path: &str, accept: &str) -> (u16, Option<String>, Vec<u8>) {
    let mut answer = agent()
        .get(&format!("http://{}{path}", registry.host()))
        .header("Accept", accept)
        .call()
        .expect("the registry answers");
    let digest = answer
        .headers()
        .get("docker-content-digest")
        .and_then(|d| d.to_str().ok())
        .map(str::to_string);
    let status = answer.status().as_u16();
    let body = answer
        .body_mut()
        .with_config()
        .limit(200 * 1024 * 1024)
        .read_to_vec()
        .unwrap_or_default();
    (status, digest, body)
}

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

fn crane() -> PathBuf {
    capstan_playground::binaries::find("crane").expect("crane from scripts/setup.sh --with-test-tools")
}

/// The image's files, flattened (`crane export`), extracted into `dir` as root keeps them.
fn export(image: &str, dir: &Path) {
    let tar = dir.with_extension("tar");
    let out = Command::new(crane())
        .args(["export", image])
        .arg(&tar)
        .output()
        .expect("crane starts");
    assert!(out.status.success(), "crane export: {}", text(&out));
    std::fs::create_dir_all(dir).expect("creating the root");
    let out = Command::new("tar")
        .args(["-x", "--numeric-owner", "-p", "-f"])
        .arg(&tar)
        .arg("-C")
        .arg(dir)
        .output()
        .expect("tar starts");
    assert!(out.status.success(), "tar: {}", text(&out));
    let _ = std::fs::remove_file(&tar);
}

/// Whether the ELF file at `path` asks for a program interpreter (is dynamically linked).
fn has_interpreter(path: &Path) -> bool {
    let elf = std::fs::read(path).expect("reading the binary");
    assert_eq!(&elf[..4], b"\x7fELF", "{} is an ELF file", path.display());
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().expect("8 bytes")) as usize;
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    // PT_INTERP is 3.
    (0..phnum).any(|i| u32::from_le_bytes(elf[phoff + i * phentsize..][..4].try_into().expect("4 bytes")) == 3)
}

fn revision() -> String {
    let head = Command::new("git")
        .arg("-C")
        .arg(root())
        .args(["rev-parse", "HEAD"])
        .output()
        .expect("git starts");
    String::from_utf8_lossy(&head.stdout).trim().to_string()
}

#[tokio::test]
async fn make_image_pushes_a_reproducible_non_root_image_with_capstan_and_its_tools() -> anyhow::Result<()> {
    let registry = Registry::start(RegistryOptions::default()).await?;
    let repository = format!("{}/capstan", registry.host());
    let first = make_image(&format!("{repository}:test"));
    let digest = pushed_digest(&first, &repository);

    // The tag names the digest that was reported.
    let (status, served, body) = registry_get(&registry, "/v2/capstan/manifests/test", OCI_MANIFEST);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(served.as_deref(), Some(digest.as_str()));
    let manifest: Value = serde_json::from_slice(&body)?;
    assert_eq!(manifest["mediaType"], OCI_MANIFEST, "{manifest}");
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 2, "the Debian layer and capstan's: {manifest}");
    let mut compressed = 0;
    for layer in layers {
        assert_eq!(
            layer["mediaType"], "application/vnd.oci.image.layer.v1.tar+gzip",
            "{layer}"
        );
        compressed += layer["size"].as_u64().expect("a size");
    }
    // The size of a dev build says nothing of the release image's (docs/benchmarks.md).
    eprintln!("image {digest}: {compressed} bytes in its layers (capstan unoptimised)");

    // The configuration: user, entrypoint, environment, platform, labels.
    let config_digest = manifest["config"]["digest"].as_str().expect("a config digest");
    let (status, _, body) = registry_get(&registry, &format!("/v2/capstan/blobs/{config_digest}"), "*/*");
    assert_eq!(status, 200);
    let config: Value = serde_json::from_slice(&body)?;
    assert_eq!(config["os"], "linux");
    assert_eq!(config["architecture"], "amd64");
    assert!(
        config.get("created").is_none_or(|c| c == "0001-01-01T00:00:00Z"),
        "no creation time: {config}"
    );
    let c = &config["config"];
    assert_eq!(c["User"], "65532:65532", "{c}");
    assert_eq!(c["Entrypoint"], serde_json::json!(["/usr/local/bin/capstan"]), "{c}");
    let env: Vec<&str> = c["Env"]
        .as_array()
        .expect("Env")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(env.contains(&"PATH=/usr/local/bin:/usr/bin:/bin"), "{env:?}");
    let labels = &c["Labels"];
    let revision_label = labels["org.opencontainers.image.revision"].as_str().unwrap_or_default();
    let head = revision();
    assert!(
        revision_label == head || revision_label == format!("{head}-dirty"),
        "{revision_label} is the checkout's {head}"
    );
    assert_eq!(labels["org.opencontainers.image.version"], env!("CARGO_PKG_VERSION"));
    assert!(
        labels["org.opencontainers.image.source"]
            .as_str()
            .is_some_and(|s| !s.is_empty()),
        "{labels}"
    );

    // What it holds: capstan (statically linked), helm and kustomize where Capstan looks ($PATH),
    // git and ssh; a user 65532 that ssh can look up; no perl beyond the essential perl-base.
    let rootfs = tempfile::tempdir()?;
    let dir = rootfs.path().join("root");
    export(&format!("{repository}@{digest}"), &dir);
    for file in [
        "usr/local/bin/capstan",
        "usr/local/bin/helm",
        "usr/local/bin/kustomize",
        "usr/bin/git",
        "usr/bin/ssh",
        "usr/lib/git-core/git-remote-http",
    ] {
        assert!(dir.join(file).is_file(), "{file} is in the image");
    }
    assert!(
        !has_interpreter(&dir.join("usr/local/bin/capstan")),
        "capstan is statically linked"
    );
    // Only the essential perl-base (dpkg's) stays: perl's modules, which git's scripts need, are out.
    assert!(!dir.join("usr/share/perl").exists(), "perl is left out");
    let passwd = std::fs::read_to_string(dir.join("etc/passwd"))?;
    assert!(
        passwd.lines().any(|l| l.starts_with("nonroot:x:65532:65532:")),
        "{passwd}"
    );
    let out = Command::new("/usr/sbin/chroot")
        .args(["--userspec=65532:65532"])
        .arg(&dir)
        .args(["/usr/local/bin/capstan", "--version"])
        .env_clear()
        .output()?;
    assert!(
        out.status.success() && text(&out).contains(env!("CARGO_PKG_VERSION")),
        "{}",
        text(&out)
    );

    // Reproducible: the same commit built again (another tag) is the same image.
    let second = make_image(&format!("{repository}:again"));
    assert_eq!(pushed_digest(&second, &repository), digest, "two builds of one commit");

    // A registry that refuses the push (it wants a password the build does not have): the build
    // fails saying so, reports nothing pushed, and the registry holds no tag.
    let guarded = Registry::start(RegistryOptions {
        basic_auth: Some(("ci".to_string(), "secret".to_string())),
        tls: false,
    })
    .await?;
    let refused = make_image(&format!("{}/capstan:test", guarded.host()));
    assert!(!refused.status.success(), "the push was refused: {}", text(&refused));
    let said = text(&refused);
    assert!(said.contains("failed, nothing was tagged"), "{said}");
    assert!(said.to_lowercase().contains("unauthorized"), "{said}");
    assert!(!String::from_utf8_lossy(&refused.stdout).contains("pushed "), "{said}");
    let mut tags = agent()
        .get(&format!("http://{}/v2/capstan/tags/list", guarded.host()))
        // Basic base64("ci:secret").
        .header("Authorization", "Basic Y2k6c2VjcmV0")
        .call()?;
    let tags_status = tags.status().as_u16();
    let tags_body = tags.body_mut().read_to_string().unwrap_or_default();
    assert!(
        tags_status == 404 || !tags_body.contains("\"test\""),
        "no tag in the refusing registry: {tags_status} {tags_body}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_images_root_file_system_runs_the_controller_in_a_pod_and_syncs_with_the_shipped_rbac() -> anyhow::Result<()>
{
    let (registry, cluster, git) = tokio::try_join!(
        Registry::start(RegistryOptions::default()),
        TestCluster::shared(),
        GitServer::start()
    )?;
    let repository = format!("{}/capstan", registry.host());
    let out = make_image(&format!("{repository}:pod"));
    let digest = pushed_digest(&out, &repository);
    let rootfs = tempfile::tempdir()?;
    let dir = rootfs.path().join("root");
    export(&format!("{repository}@{digest}"), &dir);

    let kc = cluster.kubeconfig().to_string_lossy().into_owned();
    let client = cluster.client().await?;
    let ns = capstan_testkit::capstan::unique_namespace();
    let install = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["install", "--kubeconfig", &kc, "-n", &ns])
        .output()?;
    assert!(install.status.success(), "{}", text(&install));
    let repo = apps::publish(&git, "apps")?;

    let sa = ServiceAccountFiles::new(&cluster.ca_pem()?, &ns);
    sa.write_token(&pod::token(&kc, &ns, "capstan-controller", "controller-token"));
    let log = rootfs.path().join("controller.log");
    let health = apps::free_port();
    let health_listen = format!("127.0.0.1:{health}");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut controller = Kill(pod::start(
        &Root::Image(dir.clone()),
        &sa,
        pod::port_of(cluster.server()),
        &["controller", "-n", &ns, "--health-listen", &health_listen],
        rootfs.path(),
        &log,
    ));
    apps::wait_ready(&mut controller.0, health, &log, Duration::from_secs(60)).await;
    for (name, path, values) in APPS {
        apps::create(&client, &ns, &repo, name, path, values).await?;
    }
    let names: Vec<&str> = APPS.iter().map(|(n, _, _)| *n).collect();
    apps::wait_synced(&client, &ns, &names, Duration::from_secs(180), &log).await?;
    apps::assert_hook_ran(&client, &ns).await?;
    assert!(controller.0.try_wait()?.is_none(), "the controller still runs");
    Ok(())
}

//! Charts from a real OCI registry (Debian's `docker-registry`), pushed with the real `helm push`.

use std::path::Path;
use std::time::Duration;

use capstan_source::{ChartCache, ChartError, ChartRequest, Credentials};
use capstan_testkit::charts::package_chart;
use capstan_testkit::registry::sha256_digest;
use capstan_testkit::{Registry, RegistryOptions};

const PASSWORD: &str = "registry-s3cret";

/// An open plain-HTTP registry holding `charts/demo` at 1.0.0, 1.2.0, 1.2.3+build.1 and 2.0.0.
async fn registry() -> anyhow::Result<Registry> {
    let registry = Registry::start(RegistryOptions::default()).await?;
    let work = tempfile::tempdir()?;
    for v in ["1.0.0", "1.2.0", "1.2.3+build.1", "2.0.0"] {
        let archive = package_chart(work.path(), "demo", v)?;
        registry.push_chart(&archive, "charts")?;
    }
    Ok(registry)
}

fn request(url: String, revision: &str, plain_http: bool) -> ChartRequest {
    ChartRequest {
        repo_url: url,
        chart: "demo".into(),
        target_revision: revision.into(),
        plain_http,
    }
}

fn cache(root: &Path) -> ChartCache {
    ChartCache::new(root, Duration::from_secs(10), Duration::from_secs(300))
}

fn chart_version(dir: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(dir.join("Chart.yaml"))?;
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix("version: "))
        .unwrap_or_default()
        .to_string())
}

#[tokio::test]
async fn charts_pushed_by_helm_resolve_by_version_and_constraint() -> anyhow::Result<()> {
    let registry = registry().await?;
    let root = tempfile::tempdir()?;
    let charts = cache(root.path());
    let none = Credentials::none();
    let url = registry.oci_url("charts");

    let exact = charts
        .resolve(&request(url.clone(), "1.2.0", true), &none, false)
        .await?;
    assert_eq!(exact.version, "1.2.0");
    assert_eq!(charts.stats(&url).tag_lists, 0, "an exact version needs no tag list");
    let dir = charts.fetch(&exact, &none).await?;
    assert_eq!(chart_version(&dir)?, "1.2.0");
    assert!(dir.join("templates/configmap.yaml").is_file());

    let ranged = charts
        .resolve(&request(url.clone(), "^1.0", true), &none, false)
        .await?;
    assert_eq!(ranged.version, "1.2.3+build.1", "tags write + as _");
    assert_eq!(chart_version(&charts.fetch(&ranged, &none).await?)?, "1.2.3+build.1");
    let latest = charts
        .resolve(&request(url.clone(), ">=1.0.0", true), &none, false)
        .await?;
    assert_eq!(latest.version, "2.0.0");

    // Within the TTL nothing is asked again, and a digest already fetched is not downloaded again.
    let before = charts.stats(&url);
    charts
        .resolve(&request(url.clone(), "^1.0", true), &none, false)
        .await?;
    charts.fetch(&ranged, &none).await?;
    assert_eq!(charts.stats(&url), before);

    let err = charts
        .resolve(&request(url.clone(), "~3.0", true), &none, false)
        .await
        .expect_err("nothing matches");
    let text = err.to_string();
    assert!(
        matches!(err, ChartError::NoMatchingVersion { .. }) && text.contains("2.0.0, 1.2.3+build.1"),
        "{text}"
    );
    let err = charts
        .resolve(&request(url, "9.9.9", true), &none, false)
        .await
        .expect_err("no such tag");
    assert!(err.to_string().contains("404"), "{err}");
    Ok(())
}

#[tokio::test]
async fn a_manifest_that_is_not_a_helm_chart_is_refused_by_media_type() -> anyhow::Result<()> {
    let registry = Registry::start(RegistryOptions::default()).await?;
    let config = br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}"#;
    let layer = b"not really a layer";
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{}","size":{}}},"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"{}","size":{}}}]}}"#,
        sha256_digest(config),
        config.len(),
        sha256_digest(layer),
        layer.len()
    );
    registry.put_raw(
        "charts/demo",
        "1.0.0",
        &[config, layer],
        manifest.as_bytes(),
        "application/vnd.oci.image.manifest.v1+json",
    )?;
    let root = tempfile::tempdir()?;
    let err = cache(root.path())
        .resolve(
            &request(registry.oci_url("charts"), "1.0.0", true),
            &Credentials::none(),
            false,
        )
        .await
        .expect_err("an image, not a chart");
    let text = err.to_string();
    assert!(matches!(err, ChartError::Oci { .. }), "{text}");
    assert!(
        text.contains("not a Helm chart")
            && text.contains("application/vnd.oci.image.config.v1+json")
            && text.contains("charts/demo:1.0.0"),
        "{text}"
    );
    Ok(())
}

#[tokio::test]
async fn basic_auth_against_the_registry() -> anyhow::Result<()> {
    let open = registry().await?;
    let private = open
        .sharing(RegistryOptions {
            basic_auth: Some(("puller".into(), PASSWORD.into())),
            tls: false,
        })
        .await?;
    let root = tempfile::tempdir()?;
    let url = private.oci_url("charts");
    let creds = Credentials {
        username: Some("puller".into()),
        password: Some(PASSWORD.into()),
        ..Default::default()
    };
    let charts = cache(root.path());
    let resolved = charts
        .resolve(&request(url.clone(), "~1.2", true), &creds, false)
        .await?;
    assert_eq!(chart_version(&charts.fetch(&resolved, &creds).await?)?, "1.2.3+build.1");

    let wrong = Credentials {
        password: Some("wrong-password".into()),
        ..creds
    };
    for creds in [wrong, Credentials::none()] {
        let err = cache(root.path())
            .resolve(&request(url.clone(), "1.0.0", true), &creds, false)
            .await
            .expect_err("refused");
        let text = err.to_string();
        assert!(text.contains("401") || text.contains("requires credentials"), "{text}");
        assert!(!text.contains("wrong-password") && !text.contains(PASSWORD), "{text}");
    }
    Ok(())
}

#[tokio::test]
async fn tls_with_the_registry_ca_and_refused_without_it() -> anyhow::Result<()> {
    let open = registry().await?;
    let tls = open
        .sharing(RegistryOptions {
            basic_auth: None,
            tls: true,
        })
        .await?;
    let root = tempfile::tempdir()?;
    let url = tls.oci_url("charts");
    let with_ca = Credentials {
        tls_ca: tls.ca_pem().map(str::to_string),
        ..Default::default()
    };
    let charts = cache(root.path());
    let resolved = charts
        .resolve(&request(url.clone(), "2.0.0", false), &with_ca, false)
        .await?;
    assert!(resolved.url.starts_with("https://"));
    assert_eq!(chart_version(&charts.fetch(&resolved, &with_ca).await?)?, "2.0.0");
    let err = cache(root.path())
        .resolve(&request(url, "2.0.0", false), &Credentials::none(), false)
        .await
        .expect_err("unknown CA");
    assert!(matches!(err, ChartError::Unreachable { .. }), "{err}");
    Ok(())
}

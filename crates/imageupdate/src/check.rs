//! One updater's question to its registry: the tags (and, for a digest policy, the digest of the
//! followed tag) with the repository Secret's credentials, and the policy's choice. The value to write
//! is the chosen tag, or `TAG@sha256:…` for a digest policy.

use std::time::Duration;

use capstan_api::image_updater::{ImagePolicy, ImageUpdaterSpec, PatternOrder};
use capstan_source::image::{Order, Pick, Policy};
use capstan_source::{ImageClient, ImageRepository};

use crate::UpdateError;

/// What a check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The value to write.
    pub value: String,
    /// The tag chosen.
    pub tag: String,
    /// Tags skipped, `TAG: reason` (at most 20).
    pub skipped: Vec<String>,
}

/// The spec's policy as the image module's [`Policy`]: exactly one must be set.
pub fn policy(spec: &ImagePolicy) -> Result<Policy, UpdateError> {
    let set = [spec.semver.is_some(), spec.pattern.is_some(), spec.digest.is_some()]
        .iter()
        .filter(|s| **s)
        .count();
    if set != 1 {
        return Err(UpdateError::Spec(format!(
            "spec.policy must set exactly one of semver, pattern, digest ({set} set)"
        )));
    }
    let policy = if let Some(semver) = &spec.semver {
        Policy::Semver {
            constraint: semver.range.clone(),
            allow_prerelease: semver.allow_prerelease,
        }
    } else if let Some(pattern) = &spec.pattern {
        Policy::Pattern {
            regex: pattern.regex.clone(),
            extract: (!pattern.extract.is_empty()).then(|| pattern.extract.clone()),
            order: match pattern.order {
                PatternOrder::Alphabetical => Order::Alphabetical,
                PatternOrder::Numerical => Order::Numerical,
            },
            pick: Pick::Highest,
        }
    } else if let Some(digest) = &spec.digest {
        Policy::Digest {
            tag: digest.tag.clone(),
        }
    } else {
        return Err(UpdateError::Spec("spec.policy is empty".into()));
    };
    policy.validate()?;
    Ok(policy)
}

/// Ask the registry and apply the policy.
pub async fn check(
    client: &kube::Client,
    namespace: &str,
    images: &ImageClient,
    spec: &ImageUpdaterSpec,
) -> Result<Checked, UpdateError> {
    let policy = policy(&spec.policy)?;
    let repo = ImageRepository::parse(&spec.image)?;
    let registered = capstan_cluster::repository::lookup(client, namespace, &format!("oci://{}", spec.image)).await;
    let (creds, plain_http) = registered
        .map(|r| (r.credentials, r.oci_force_http))
        .unwrap_or_default();
    let repo = repo.with_plain_http(plain_http);
    let tags = images.tags(&repo, &creds).await?;
    let choice = policy.choose(&tags)?;
    let skipped = choice
        .skipped
        .iter()
        .take(20)
        .map(|s| format!("{}: {}", s.tag, s.reason))
        .collect();
    let value = match policy {
        Policy::Digest { .. } => format!("{}@{}", choice.tag, images.digest(&repo, &choice.tag, &creds).await?),
        _ => choice.tag.clone(),
    };
    Ok(Checked {
        value,
        tag: choice.tag,
        skipped,
    })
}

/// The default client for registries: 15 s per request.
pub fn client() -> ImageClient {
    ImageClient::new(Duration::from_secs(15))
}

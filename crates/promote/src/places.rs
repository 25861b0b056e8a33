//! Where an Application sits in the pipelines: which service and environment it deploys (found from
//! the pipeline's `application` name template), and so where it can be promoted to and which
//! promotions concern it.

use capstan_api::promotion::PromotionRecord;
use capstan_api::{PromotionPipeline, PromotionPipelineSpec};
use kube::Api;
use kube::api::ListParams;

use crate::PromoteError;

/// A service and environment of a pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The service.
    pub service: String,
    /// The environment.
    pub env: String,
}

/// A promotion an Application's environment can make: `service` from `from` to the later `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The pipeline.
    pub pipeline: String,
    /// The service.
    pub service: String,
    /// The source environment (the Application's).
    pub from: String,
    /// The target environment.
    pub to: String,
    /// The target environment's Application.
    pub application: String,
}

/// The services and environments of `spec` whose Application is named `app` (none when the name
/// template does not contain `{service}`: the service cannot be told from the name).
pub fn places(spec: &PromotionPipelineSpec, app: &str) -> Vec<Place> {
    let template = if spec.application.is_empty() {
        "{service}-{env}"
    } else {
        &spec.application
    };
    let mut found = Vec::new();
    for env in &spec.environments {
        let filled = template.replace("{env}", &env.name);
        let Some((prefix, _)) = filled.split_once("{service}") else {
            continue;
        };
        let Some(rest) = app.strip_prefix(prefix) else {
            continue;
        };
        // The service is a part of `rest` starting at its beginning: try each length.
        for end in (1..=rest.len()).filter(|&end| rest.is_char_boundary(end)) {
            let service = &rest[..end];
            if plain(service) && spec.application(service, &env.name) == app {
                found.push(Place {
                    service: service.to_string(),
                    env: env.name.clone(),
                });
            }
        }
    }
    found
}

/// Whether `name` could be a service name (what `check_names` accepts).
fn plain(name: &str) -> bool {
    !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// The promotions `app` can be the source of in `pipeline`: to each later environment.
pub fn targets(pipeline: &PromotionPipeline, app: &str) -> Vec<Target> {
    let name = pipeline.metadata.name.clone().unwrap_or_default();
    let spec = &pipeline.spec;
    let mut targets = Vec::new();
    for place in places(spec, app) {
        let Some(at) = spec.position(&place.env) else {
            continue;
        };
        for env in spec.environments.iter().skip(at + 1) {
            targets.push(Target {
                pipeline: name.clone(),
                service: place.service.clone(),
                from: place.env.clone(),
                to: env.name.clone(),
                application: spec.application(&place.service, &env.name),
            });
        }
    }
    targets
}

/// The promotions of `pipeline`'s history into or out of `app`, newest first.
pub fn records(pipeline: &PromotionPipeline, app: &str) -> Vec<PromotionRecord> {
    let spec = &pipeline.spec;
    crate::history::of(pipeline, None)
        .into_iter()
        .filter(|r| spec.application(&r.service, &r.to) == app || spec.application(&r.service, &r.from) == app)
        .collect()
}

/// The promotions of every pipeline into or out of `app`, newest first (RFC 3339 times sort as
/// text).
pub fn records_of_all(pipelines: &[PromotionPipeline], app: &str) -> Vec<PromotionRecord> {
    let mut all: Vec<PromotionRecord> = pipelines.iter().flat_map(|p| records(p, app)).collect();
    all.sort_by(|a, b| b.time.cmp(&a.time));
    all
}

/// Every PromotionPipeline of `namespace`.
pub async fn pipelines(client: &kube::Client, namespace: &str) -> Result<Vec<PromotionPipeline>, PromoteError> {
    let api: Api<PromotionPipeline> = Api::namespaced(client.clone(), namespace);
    Ok(api
        .list(&ListParams::default())
        .await
        .map_err(PromoteError::kube("listing PromotionPipelines"))?
        .items)
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_api::promotion::PromotionPipelineStatus;

    fn pipeline(application: &str) -> PromotionPipeline {
        let mut p = PromotionPipeline::new(
            "services",
            PromotionPipelineSpec {
                application: application.into(),
                ..crate::check::tests::spec()
            },
        );
        let record = |service: &str, from: &str, to: &str, time: &str| PromotionRecord {
            service: service.into(),
            from: from.into(),
            to: to.into(),
            time: time.into(),
            ..Default::default()
        };
        p.status = Some(PromotionPipelineStatus {
            history: vec![
                record("payments", "staging", "production", "2026-01-03T00:00:00Z"),
                record("checkout", "staging", "production", "2026-01-02T00:00:00Z"),
                record("payments", "dev", "staging", "2026-01-01T00:00:00Z"),
            ],
        });
        p
    }

    fn place(service: &str, env: &str) -> Place {
        Place {
            service: service.into(),
            env: env.into(),
        }
    }

    #[test]
    fn an_application_name_gives_its_service_and_environment() {
        let p = pipeline("");
        assert_eq!(places(&p.spec, "payments-staging"), vec![place("payments", "staging")]);
        assert_eq!(
            places(&p.spec, "my-shop-production"),
            vec![place("my-shop", "production")]
        );
        assert!(places(&p.spec, "payments-qa").is_empty());
        assert!(places(&p.spec, "-staging").is_empty());
        assert!(places(&p.spec, "guestbook").is_empty());
        let custom = pipeline("app-{env}-{service}");
        assert_eq!(places(&custom.spec, "app-dev-web"), vec![place("web", "dev")]);
        assert!(places(&custom.spec, "web-dev").is_empty());
        assert!(places(&pipeline("fixed-{env}").spec, "fixed-dev").is_empty());
    }

    #[test]
    fn an_environment_is_promoted_to_the_later_ones() {
        let p = pipeline("");
        let to: Vec<(String, String)> = targets(&p, "payments-dev")
            .into_iter()
            .map(|t| (t.to, t.application))
            .collect();
        assert_eq!(
            to,
            [("staging", "payments-staging"), ("production", "payments-production")]
                .map(|(a, b)| (a.to_string(), b.to_string()))
        );
        assert!(targets(&p, "payments-production").is_empty());
        let t = &targets(&p, "payments-staging")[0];
        assert_eq!(
            (t.pipeline.as_str(), t.service.as_str(), t.from.as_str()),
            ("services", "payments", "staging")
        );
    }

    #[test]
    fn an_application_s_promotions_are_those_into_or_out_of_it() {
        let p = pipeline("");
        let times = |app: &str| -> Vec<String> { records(&p, app).into_iter().map(|r| r.time).collect() };
        assert_eq!(times("payments-production"), ["2026-01-03T00:00:00Z"]);
        assert_eq!(
            times("payments-staging"),
            ["2026-01-03T00:00:00Z", "2026-01-01T00:00:00Z"]
        );
        assert!(times("checkout-dev").is_empty());
        let mut older = pipeline("");
        older.metadata.name = Some("other".into());
        if let Some(s) = older.status.as_mut() {
            s.history[0].time = "2026-01-05T00:00:00Z".into();
        }
        let all = records_of_all(&[p, older], "payments-production");
        assert_eq!(
            all.iter().map(|r| r.time.as_str()).collect::<Vec<_>>(),
            ["2026-01-05T00:00:00Z", "2026-01-03T00:00:00Z"]
        );
    }
}

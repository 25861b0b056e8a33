//! The pipeline's `status.history`: promotions made, newest first, bounded.

use capstan_api::PromotionPipeline;
use capstan_api::promotion::{HISTORY_LIMIT, PromotionRecord};
use kube::Api;
use kube::api::PostParams;

use crate::PromoteError;

/// Put `record` first in the history of pipeline `name` (read, change, replace with the
/// resourceVersion read; again on a conflict).
pub async fn append(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    record: PromotionRecord,
) -> Result<(), PromoteError> {
    let api: Api<PromotionPipeline> = Api::namespaced(client.clone(), namespace);
    let mut attempts = 0;
    loop {
        attempts += 1;
        let mut pipeline = api
            .get(name)
            .await
            .map_err(PromoteError::kube(format!("reading PromotionPipeline {name}")))?;
        let status = pipeline.status.get_or_insert_with(Default::default);
        status.history.insert(0, record.clone());
        status.history.truncate(HISTORY_LIMIT);
        match api.replace_status(name, &PostParams::default(), &pipeline).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 && attempts < 5 => continue,
            Err(e) => return Err(PromoteError::kube(format!("recording the promotion in {name}"))(e)),
        }
    }
}

/// The history of `pipeline`, only `service`'s promotions when given.
pub fn of(pipeline: &PromotionPipeline, service: Option<&str>) -> Vec<PromotionRecord> {
    pipeline
        .status
        .iter()
        .flat_map(|s| s.history.iter())
        .filter(|r| service.is_none_or(|s| r.service == s))
        .cloned()
        .collect()
}

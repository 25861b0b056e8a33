//! Benchmark 5: the controller's memory does not grow with objects Capstan does not track.

use std::time::Duration;

use futures::{StreamExt, stream};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::json;

use crate::setup::*;

impl Bench {
    /// Benchmark 5: controller memory does not grow with objects Capstan does not track.
    pub(crate) async fn untracked(&self, n: usize) -> anyhow::Result<()> {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (before, _) = self.rss();
        let kubectl = capstan_testkit_kubectl()?;
        run(
            &kubectl,
            &["--kubeconfig", &self.kubeconfig(), "create", "namespace", "untracked"],
        )?;
        let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "ConfigMap"), "configmaps");
        let cms: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), "untracked", &ar);
        let payload = "y".repeat(512);
        let created: Vec<anyhow::Result<()>> = stream::iter(0..n)
            .map(|i| {
                let cms = cms.clone();
                let payload = payload.clone();
                async move {
                    let cm: DynamicObject = serde_json::from_value(json!({
                        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("u-{i:05}")}, "data": {"p": payload}}))?;
                    cms.create(&PostParams::default(), &cm).await?;
                    Ok(())
                }
            })
            .buffer_unordered(32)
            .collect()
            .await;
        created.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
        tokio::time::sleep(Duration::from_secs(10)).await;
        let (after, _) = self.rss();
        println!(
            "5. controller RSS with {n} untracked ConfigMaps in the cluster: {:.1} MiB before, {:.1} MiB after (target: no growth)",
            before as f64 / 1024.0,
            after as f64 / 1024.0
        );
        Ok(())
    }
}

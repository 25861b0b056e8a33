//! The operators' custom health rules as the controller and the server read them: a watch of the
//! `capstan-cm` ConfigMap in Capstan's namespace, parsed into [`HealthRules`] on every change (the
//! rules themselves are in `capstan-health-rules`). Only whoever may write ConfigMaps in Capstan's
//! namespace (the platform's administrators) configures them.
//!
//! On every change the controller publishes one Warning Event on the ConfigMap per rule that cannot
//! be used, and asks every Application to be reconciled, so verdicts follow the new rules at once.

use std::sync::{Arc, RwLock};

use capstan_health_rules::{CONFIG_MAP_NAME, HealthRules};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};

/// What the controller does when the rules change: publish Events with this reporter and call
/// `reconcile_all`.
pub struct OnChange {
    /// Who publishes the Events about broken rules.
    pub reporter: Reporter,
    /// Ask every Application to be reconciled.
    pub reconcile_all: Box<dyn Fn() + Send + Sync>,
}

/// The current custom health rules of one namespace.
pub struct HealthConfig {
    client: kube::Client,
    namespace: String,
    rules: RwLock<HealthRules>,
    /// Whether the ConfigMap has been read once (present or not).
    loaded: tokio::sync::watch::Sender<bool>,
}

impl HealthConfig {
    /// No rules until [`HealthConfig::spawn`] reads the ConfigMap.
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        Self {
            client,
            namespace: namespace.to_string(),
            rules: RwLock::new(HealthRules::default()),
            loaded: tokio::sync::watch::Sender::new(false),
        }
    }

    /// Wait until the ConfigMap has been read once, at most `timeout` (false when it was not: the
    /// rules are then empty until it is). The controller waits before its first reconcile, so that no
    /// wave advances on a verdict the operators' rules would not give.
    pub async fn wait_loaded(&self, timeout: std::time::Duration) -> bool {
        let mut loaded = self.loaded.subscribe();
        tokio::time::timeout(timeout, loaded.wait_for(|l| *l))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// The rules in force now (cheap: shared, not copied).
    pub fn current(&self) -> HealthRules {
        match self.rules.read() {
            Ok(rules) => rules.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Keep the rules up to date with the ConfigMap; `on_change` (the controller's) is told of every
    /// change after the first read as well.
    pub fn spawn(self: &Arc<Self>, on_change: Option<OnChange>) {
        let this = self.clone();
        tokio::spawn(async move { this.watch(on_change).await });
    }

    async fn watch(self: Arc<Self>, on_change: Option<OnChange>) {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={CONFIG_MAP_NAME}"));
        let mut stream = std::pin::pin!(watcher(api, config).default_backoff());
        // The data last parsed, so that a change of labels alone does not re-announce the rules.
        let mut last: Option<std::collections::BTreeMap<String, String>> = None;
        // Whether the ConfigMap was in the current (re-)list, which ends with `InitDone`.
        let mut listed = false;
        while let Some(event) = stream.next().await {
            let (cm, data) = match event {
                Ok(watcher::Event::Apply(cm) | watcher::Event::InitApply(cm)) => {
                    listed = true;
                    let data = cm.data.clone().unwrap_or_default();
                    (Some(cm), data)
                }
                Ok(watcher::Event::Delete(_)) => (None, Default::default()),
                Ok(watcher::Event::Init) => {
                    listed = false;
                    continue;
                }
                Ok(watcher::Event::InitDone) if !listed => (None, Default::default()),
                Ok(watcher::Event::InitDone) => {
                    self.loaded.send_replace(true);
                    continue;
                }
                Err(err) => {
                    // Retried with backoff; an error that lasts (RBAC) must be seen.
                    tracing::warn!(%err, configmap = CONFIG_MAP_NAME, "cannot watch the health rules");
                    continue;
                }
            };
            if last.as_ref() == Some(&data) {
                continue;
            }
            let rules = HealthRules::from_config(data.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            for err in rules.errors() {
                tracing::warn!(configmap = CONFIG_MAP_NAME, key = %err.key, "health rule not used: {}", err.message);
            }
            if let (Some(on_change), Some(cm)) = (&on_change, &cm) {
                publish_errors(&self.client, &on_change.reporter, cm, &rules).await;
            }
            match self.rules.write() {
                Ok(mut current) => *current = rules,
                Err(poisoned) => *poisoned.into_inner() = rules,
            }
            tracing::info!(configmap = CONFIG_MAP_NAME, keys = data.len(), "health rules loaded");
            last = Some(data);
            self.loaded.send_replace(true);
            if let Some(on_change) = &on_change {
                (on_change.reconcile_all)();
            }
        }
    }
}

/// One Warning Event on the ConfigMap per rule that cannot be used.
async fn publish_errors(client: &kube::Client, reporter: &Reporter, cm: &ConfigMap, rules: &HealthRules) {
    let reference = cm.object_ref(&());
    for err in rules.errors() {
        let event = Event {
            type_: EventType::Warning,
            reason: "InvalidHealthRule".into(),
            note: Some(err.to_string()),
            action: "LoadHealthRules".into(),
            secondary: None,
        };
        // A recorder per event, so that each rule's message is its own Event, not a series of the first.
        let recorder = Recorder::new(client.clone(), reporter.clone());
        if let Err(e) = recorder.publish(&event, &reference).await {
            tracing::debug!(err = %e, name = %cm.name_any(), "publishing an event");
        }
    }
}

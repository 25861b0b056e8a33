//! Resolving `apiVersion` + `kind` to an API resource and its scope through API discovery, cached
//! per client; unknown kinds are looked up again on every call so a CRD applied earlier in the same
//! sync becomes usable.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::Client;
use kube::core::GroupVersionKind;
use kube::discovery::{ApiResource, Scope};

use crate::{KubeError, Result, describe_kube_error, key::group_of};

/// A kind as the destination serves it.
#[derive(Debug, Clone)]
pub struct KindInfo {
    /// Resource (plural), group, version, kind.
    pub resource: ApiResource,
    /// Whether objects of the kind live in namespaces.
    pub namespaced: bool,
    /// Whether the kind has a status subresource (`None` when not known). Health uses it for custom
    /// kinds without a rule: such an object without status is waiting for its controller.
    pub status_subresource: Option<bool>,
}

/// How long the list of every API the cluster serves is reused (see [`Discovery::api_versions`]).
const API_VERSIONS_TTL: Duration = Duration::from_secs(30);

/// Discovery cache for one cluster.
pub struct Discovery {
    client: Client,
    known: Mutex<HashMap<(String, String), KindInfo>>,
    version: tokio::sync::OnceCell<String>,
    api_versions: tokio::sync::Mutex<Option<(Instant, Arc<Vec<String>>)>>,
}

impl Discovery {
    /// A cache for `client`'s cluster.
    pub fn new(client: Client) -> Self {
        Self {
            client,
            known: Mutex::new(HashMap::new()),
            version: tokio::sync::OnceCell::new(),
            api_versions: tokio::sync::Mutex::new(None),
        }
    }

    /// The client this cache uses.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Resolve a kind; `Ok(None)` when the cluster does not serve it.
    pub async fn resolve(&self, api_version: &str, kind: &str) -> Result<Option<KindInfo>> {
        let cache_key = (api_version.to_string(), kind.to_string());
        if let Some(info) = self.lock().get(&cache_key) {
            return Ok(Some(info.clone()));
        }
        let (group, version) = match api_version.rsplit_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let gvk = GroupVersionKind::gvk(group, version, kind);
        match kube::discovery::pinned_kind(&self.client, &gvk).await {
            Ok((resource, caps)) => {
                let info = KindInfo {
                    resource,
                    namespaced: caps.scope == Scope::Namespaced,
                    status_subresource: Some(caps.subresources.iter().any(|(sub, _)| sub.plural == "status")),
                };
                self.lock().insert(cache_key, info.clone());
                Ok(Some(info))
            }
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(kube::Error::Discovery(_)) => Ok(None),
            Err(source) => Err(KubeError::Request {
                context: format!("discovering {kind} in {api_version}"),
                source,
            }),
        }
    }

    /// Resolve or fail with an error naming the object.
    pub async fn require(&self, api_version: &str, kind: &str, object: &str) -> Result<KindInfo> {
        self.resolve(api_version, kind)
            .await?
            .ok_or_else(|| KubeError::UnknownKind {
                api_version: api_version.into(),
                kind: kind.into(),
                object: object.into(),
            })
    }

    /// A kind described by a CRD that is about to be applied (not served yet).
    pub fn from_crd(crd: &serde_json::Value, api_version: &str, kind: &str) -> Option<KindInfo> {
        let spec = crd.get("spec")?;
        let group = spec.get("group")?.as_str()?;
        let crd_kind = spec.get("names")?.get("kind")?.as_str()?;
        if group != group_of(api_version) || crd_kind != kind {
            return None;
        }
        let version = api_version.rsplit_once('/').map(|(_, v)| v).unwrap_or(api_version);
        let plural = spec.get("names")?.get("plural")?.as_str()?;
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let status_subresource = spec
            .get("versions")
            .and_then(|v| v.as_array())
            .and_then(|versions| {
                versions
                    .iter()
                    .find(|v| v.get("name").and_then(|n| n.as_str()) == Some(version))
            })
            .map(|v| v.pointer("/subresources/status").is_some());
        Some(KindInfo {
            resource: ApiResource::from_gvk_with_plural(&gvk, plural),
            namespaced: spec.get("scope").and_then(|s| s.as_str()) != Some("Cluster"),
            status_subresource,
        })
    }

    /// The cluster's version as `MAJOR.MINOR.PATCH` (for `helm --kube-version`), asked once: a
    /// comparison should not cost a request for something that changes only on upgrades.
    pub async fn server_version(&self) -> Option<String> {
        let version = self
            .version
            .get_or_try_init(|| async {
                let info = self.client.apiserver_version().await?;
                let v = info.git_version.trim_start_matches('v');
                Ok::<_, kube::Error>(v.split(['-', '+']).next().unwrap_or(v).to_string())
            })
            .await
            .ok()?;
        Some(version.clone())
    }

    /// Every API the cluster serves, as Helm's `--api-versions` takes them: `GROUP/VERSION` (`v1`
    /// for the core group) and `GROUP/VERSION/Kind`, sorted. A full discovery costs a request per
    /// API group and version, so the answer is reused for [`API_VERSIONS_TTL`] (a CRD installed
    /// meanwhile is seen after at most that long). A group version that cannot be read (an
    /// aggregated API whose server is down) is left out rather than failing every Helm render on
    /// the cluster; only a cluster that cannot list its groups at all is an error.
    pub async fn api_versions(&self) -> Result<Arc<Vec<String>>> {
        use futures::{StreamExt, stream};
        let mut cached = self.api_versions.lock().await;
        if let Some((at, list)) = cached.as_ref()
            && at.elapsed() < API_VERSIONS_TTL
        {
            return Ok(list.clone());
        }
        let failed = |source: kube::Error| KubeError::Request {
            context: "discovering the cluster's APIs".into(),
            source,
        };
        let core = self.client.list_core_api_versions().await.map_err(failed)?;
        let groups = self.client.list_api_groups().await.map_err(failed)?;
        let group_versions: Vec<String> = core
            .versions
            .into_iter()
            .chain(
                groups
                    .groups
                    .into_iter()
                    .flat_map(|g| g.versions.into_iter().map(|v| v.group_version)),
            )
            .collect();
        let client = &self.client;
        let listed: Vec<(String, Vec<String>)> = stream::iter(group_versions)
            .map(|gv| async move {
                let resources = if gv.contains('/') {
                    client.list_api_group_resources(&gv).await
                } else {
                    client.list_core_api_resources(&gv).await
                };
                let kinds = match resources {
                    Ok(list) => list
                        .resources
                        .into_iter()
                        .filter(|r| !r.name.contains('/'))
                        .map(|r| r.kind)
                        .collect(),
                    Err(err) => {
                        tracing::debug!(group_version = %gv, err = %describe_kube_error(&err), "API left out of --api-versions");
                        Vec::new()
                    }
                };
                (gv, kinds)
            })
            .buffer_unordered(8)
            .collect()
            .await;
        let mut all = BTreeSet::new();
        for (group_version, kinds) in listed {
            for kind in kinds {
                all.insert(format!("{group_version}/{kind}"));
            }
            all.insert(group_version);
        }
        let list = Arc::new(all.into_iter().collect::<Vec<_>>());
        *cached = Some((Instant::now(), list.clone()));
        Ok(list)
    }

    /// Forget the list of APIs (a hard refresh asks the cluster again).
    pub async fn forget_api_versions(&self) {
        *self.api_versions.lock().await = None;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), KindInfo>> {
        match self.known.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }
}

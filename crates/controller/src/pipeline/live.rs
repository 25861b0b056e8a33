//! Reading an Application's objects: the rendered ones prepared for the destination (kinds resolved,
//! tracking applied), and the live ones — from the watch cache where it holds the kind, listed or read
//! where not.

use std::collections::{BTreeSet, HashMap, HashSet};

use capstan_api::application::ResourceStatus;
use capstan_compare::diff::Desired;
use capstan_compare::normalize::{self, Tracking};
use capstan_kube::{Discovery, KindInfo, ObjectKey};
use futures::{StreamExt, stream};
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::Value;

use crate::error::PipelineError;
use crate::watches::Watches;

/// From this many untracked desired objects of one kind in one namespace on, they are looked up with
/// one LIST instead of one GET each.
const LIST_THRESHOLD: usize = 8;

/// Resolve kinds and prepare rendered objects; unknown kinds are reported all at once.
pub async fn prepare(
    discovery: &Discovery,
    objects: Vec<Value>,
    namespace: &str,
    tracking: &Tracking,
) -> Result<Vec<Desired>, PipelineError> {
    let crds: Vec<&Value> = objects
        .iter()
        .filter(|o| o.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition"))
        .collect();
    let mut out = Vec::with_capacity(objects.len());
    let mut unknown = BTreeSet::new();
    let mut infos: HashMap<(String, String), Option<KindInfo>> = HashMap::new();
    for obj in &objects {
        let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("").to_string();
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
        let key = (api_version.clone(), kind.clone());
        if infos.contains_key(&key) {
            continue;
        }
        let info = match discovery.resolve(&api_version, &kind).await {
            Ok(Some(info)) => Some(info),
            Ok(None) => crds
                .iter()
                .find_map(|crd| Discovery::from_crd(crd, &api_version, &kind)),
            Err(e) => return Err(PipelineError::Discovery(e)),
        };
        infos.insert(key, info);
    }
    for mut obj in objects {
        let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("").to_string();
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
        match infos.get(&(api_version.clone(), kind.clone())).cloned().flatten() {
            Some(info) => {
                normalize::prepare(&mut obj, &info, namespace, tracking);
                out.push(Desired { object: obj, info });
            }
            None => {
                let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("?");
                match capstan_compare::removed_apis::removal_hint(&api_version, &kind) {
                    Some(hint) => unknown.insert(format!("{kind} {name:?} ({api_version}: {hint})")),
                    None => unknown.insert(format!("{kind} {name:?} ({api_version})")),
                };
            }
        }
    }
    if !unknown.is_empty() {
        return Err(PipelineError::UnknownKinds {
            kinds: unknown.into_iter().collect(),
        });
    }
    Ok(out)
}

/// Live objects: everything carrying this Application's tracking label, in every kind it renders or
/// managed before (from `cache` where it has the kind, else listed), plus the live state of desired
/// objects that are not tracked (yet).
pub async fn live_objects(
    client: &Client,
    discovery: &Discovery,
    desired: &[Desired],
    previous: &[ResourceStatus],
    tracking: &Tracking,
    cache: Option<&Watches>,
    denied: &HashSet<ObjectKey>,
) -> Result<Vec<(Value, KindInfo)>, PipelineError> {
    // Kinds and the namespaces they are used in (desired now, or managed before): listing per
    // namespace keeps each request proportional to the Application, not to the cluster.
    let mut kinds: HashMap<(String, String), (KindInfo, BTreeSet<String>)> = HashMap::new();
    for d in desired {
        let ns = namespace_of(&d.object);
        let entry = kinds
            .entry((d.info.resource.api_version.clone(), d.info.resource.kind.clone()))
            .or_insert_with(|| (d.info.clone(), BTreeSet::new()));
        entry.1.insert(ns);
    }
    for r in previous {
        let api_version = if r.group.is_empty() {
            r.version.clone()
        } else {
            format!("{}/{}", r.group, r.version)
        };
        if r.version.is_empty() {
            continue;
        }
        let key = (api_version.clone(), r.kind.clone());
        if !kinds.contains_key(&key) {
            match discovery.resolve(&api_version, &r.kind).await {
                Ok(Some(info)) => {
                    kinds.insert(key.clone(), (info, BTreeSet::new()));
                }
                _ => continue,
            }
        }
        if let Some(entry) = kinds.get_mut(&key) {
            entry.1.insert(r.namespace.clone());
        }
    }
    let selector = tracking.selector();
    let label = tracking.label_value();
    let mut live = Vec::new();
    let requests: Vec<(KindInfo, Option<String>)> = kinds
        .into_values()
        .flat_map(|(info, namespaces)| {
            if info.namespaced {
                namespaces
                    .into_iter()
                    .filter(|n| !n.is_empty())
                    .map(|n| (info.clone(), Some(n)))
                    .collect::<Vec<_>>()
            } else {
                vec![(info, None)]
            }
        })
        .collect();
    // Kinds the watch cache holds are read from it; the others are listed.
    let mut to_list = Vec::new();
    for (info, namespace) in requests {
        match cache.and_then(|c| c.cached(&info)) {
            Some(cache) => live.extend(
                cache
                    .objects_of(&label, namespace.as_deref())
                    .into_iter()
                    .map(|v| (v, info.clone())),
            ),
            None => to_list.push((info, namespace)),
        }
    }
    let lists: Vec<Result<Vec<(Value, KindInfo)>, PipelineError>> = stream::iter(to_list)
        .map(|(info, namespace)| {
            let selector = selector.clone();
            async move {
                let api: Api<DynamicObject> = match &namespace {
                    Some(ns) => Api::namespaced_with(client.clone(), ns, &info.resource),
                    None => Api::all_with(client.clone(), &info.resource),
                };
                match api.list(&ListParams::default().labels(&selector)).await {
                    Ok(list) => Ok(list
                        .items
                        .into_iter()
                        .filter_map(|o| serde_json::to_value(with_type(o, &info)).ok())
                        .map(|v| (v, info.clone()))
                        .collect()),
                    // A CRD not established yet: nothing of the kind exists.
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(Vec::new()),
                    Err(e) => Err(listing_failed(&info, e)),
                }
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    for l in lists {
        live.extend(l?);
    }
    let found: std::collections::HashSet<ObjectKey> = live.iter().filter_map(|(v, _)| ObjectKey::of(v).ok()).collect();
    let missing: Vec<&Desired> = desired
        .iter()
        .filter(|d| ObjectKey::of(&d.object).is_ok_and(|k| !found.contains(&k) && !denied.contains(&k)))
        .filter(|d| d.object.pointer("/metadata/name").is_some())
        .collect();
    // Untracked objects that may already exist: one LIST per kind and namespace when many are
    // missing (a first sync), one GET each otherwise.
    let mut groups: HashMap<(String, String, String), Vec<&Desired>> = HashMap::new();
    for d in missing {
        let ns = namespace_of(&d.object);
        groups
            .entry((d.info.resource.api_version.clone(), d.info.resource.kind.clone(), ns))
            .or_default()
            .push(d);
    }
    let mut singles: Vec<&Desired> = Vec::new();
    for ((_, _, ns), group) in groups {
        if group.len() < LIST_THRESHOLD {
            singles.extend(group);
            continue;
        }
        let info = group[0].info.clone();
        let api: Api<DynamicObject> = if info.namespaced {
            Api::namespaced_with(client.clone(), &ns, &info.resource)
        } else {
            Api::all_with(client.clone(), &info.resource)
        };
        let wanted: std::collections::HashSet<&str> = group
            .iter()
            .filter_map(|d| d.object.pointer("/metadata/name").and_then(Value::as_str))
            .collect();
        match api.list(&ListParams::default()).await {
            Ok(list) => live.extend(
                list.items
                    .into_iter()
                    .filter(|o| o.metadata.name.as_deref().is_some_and(|n| wanted.contains(n)))
                    .filter_map(|o| serde_json::to_value(with_type(o, &info)).ok())
                    .map(|v| (v, info.clone())),
            ),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(listing_failed(&info, e)),
        }
    }
    // Indices, not references, as stream items: closures over borrowed items are not `Send` for
    // every lifetime, which the controller's futures must be.
    let fetched: Vec<Result<Option<(Value, KindInfo)>, PipelineError>> = stream::iter(0..singles.len())
        .map(|i| {
            let d = singles[i];
            async move {
                let Ok(key) = ObjectKey::of(&d.object) else {
                    return Ok(None);
                };
                let api: Api<DynamicObject> = if d.info.namespaced {
                    Api::namespaced_with(client.clone(), &key.namespace, &d.info.resource)
                } else {
                    Api::all_with(client.clone(), &d.info.resource)
                };
                // Only "not found" means missing: any other failure must not look like a free name,
                // or another Application's object could be taken over.
                match api.get_opt(&key.name).await {
                    Ok(Some(obj)) => Ok(serde_json::to_value(with_type(obj, &d.info))
                        .ok()
                        .map(|v| (v, d.info.clone()))),
                    Ok(None) => Ok(None),
                    // Also a 404 for the kind itself (a CRD applied in this same sync).
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
                    Err(source) => Err(PipelineError::Read {
                        key,
                        source: Box::new(source),
                    }),
                }
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let fetched: Vec<Option<(Value, KindInfo)>> = fetched.into_iter().collect::<Result<_, _>>()?;
    live.extend(fetched.into_iter().flatten());
    Ok(live)
}

/// The namespace a prepared object names (empty for cluster-scoped objects).
pub fn namespace_of(obj: &Value) -> String {
    obj.pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

fn listing_failed(info: &KindInfo, source: kube::Error) -> PipelineError {
    PipelineError::List {
        kind: info.resource.kind.clone(),
        source,
    }
}

/// List items come without apiVersion/kind; put them back.
fn with_type(mut obj: DynamicObject, info: &KindInfo) -> DynamicObject {
    obj.types = Some(kube::core::TypeMeta {
        api_version: info.resource.api_version.clone(),
        kind: info.resource.kind.clone(),
    });
    obj
}

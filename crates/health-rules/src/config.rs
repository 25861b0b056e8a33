//! Reading the health keys of Capstan's configuration ConfigMap into rules, in Argo CD's two Lua
//! formats and Flux's `healthCheckExprs` shape. Every key is either used or reported: a key Capstan
//! does not know, or an Argo CD customization other than health (actions, ignoreDifferences, …), is
//! a [`RuleError`], never silently ignored.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::cel::CelRule;
use capstan_health::api_group as group_of;

use crate::key::Selector;
use crate::lua::LuaRule;
use crate::{Entry, Rule, RuleError};

/// The name of Capstan's configuration ConfigMap, in Capstan's namespace (Argo CD's `argocd-cm`).
pub const CONFIG_MAP_NAME: &str = "capstan-cm";

const HEALTH_PREFIX: &str = "resource.customizations.health.";
const OPEN_LIBS_PREFIX: &str = "resource.customizations.useOpenLibs.";
const CUSTOMIZATIONS: &str = "resource.customizations";
const CEL_KEY: &str = "healthCheckExprs";

/// One entry of the older `resource.customizations` map. Only the health fields are Capstan's; any
/// other field is reported.
#[derive(Debug, Deserialize)]
struct Customization {
    #[serde(rename = "health.lua", default)]
    health_lua: Option<String>,
    #[serde(rename = "health.lua.useOpenLibs", default)]
    use_open_libs: Option<bool>,
    #[serde(flatten)]
    other: BTreeMap<String, serde_json::Value>,
}

/// One entry of `healthCheckExprs`, as Flux's Kustomization spells it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CustomHealthCheck {
    api_version: String,
    kind: String,
    current: String,
    #[serde(default)]
    in_progress: Option<String>,
    #[serde(default)]
    failed: Option<String>,
}

/// The rules and the problems of a ConfigMap's `data`.
pub(crate) fn parse<'a>(data: impl IntoIterator<Item = (&'a str, &'a str)>) -> (Vec<Entry>, Vec<RuleError>) {
    let data: BTreeMap<&str, &str> = data.into_iter().collect();
    let mut entries = Vec::new();
    let mut unsupported = Vec::new();
    let err = |key: &str, message: String| RuleError {
        key: key.to_string(),
        message,
    };

    // The older map's kinds, as `<group>_<kind>` keys: a split `useOpenLibs` key applies to them too
    // (Argo CD merges both forms into one override per kind).
    let mut legacy_map = data
        .get(CUSTOMIZATIONS)
        .map(|v| serde_saphyr::from_str::<BTreeMap<String, Customization>>(v));
    let map_kinds: Vec<String> = match &legacy_map {
        Some(Ok(m)) => m.keys().map(|k| k.replacen('/', "_", 1)).collect(),
        _ => Vec::new(),
    };
    let split_open_libs = |gk: &str| -> Option<Result<bool, String>> {
        let v = data.get(format!("{OPEN_LIBS_PREFIX}{gk}").as_str())?;
        Some(parse_bool(v).ok_or_else(|| format!("{OPEN_LIBS_PREFIX}{gk} is {v:?}, not true or false")))
    };
    // Split keys first, then the older map, then CEL: for one kind the first wins (Argo CD's split
    // keys override the map's entries).
    let (mut split, mut legacy, mut exprs) = (Vec::new(), Vec::new(), Vec::new());
    for (&key, &value) in &data {
        if let Some(gk) = key.strip_prefix(HEALTH_PREFIX) {
            let open_libs = split_open_libs(gk).unwrap_or(Ok(false));
            split.push(lua_entry(key, &argo_override_key(gk), value, open_libs));
        } else if let Some(gk) = key.strip_prefix(OPEN_LIBS_PREFIX) {
            if !data.contains_key(format!("{HEALTH_PREFIX}{gk}").as_str()) && !map_kinds.iter().any(|k| k == gk) {
                unsupported.push(err(key, format!("there is no {HEALTH_PREFIX}{gk} for it to apply to")));
            }
        } else if key == CUSTOMIZATIONS {
            match legacy_map.take().unwrap_or_else(|| Ok(BTreeMap::new())) {
                Err(e) => unsupported.push(err(key, format!("is not a map of group/Kind to customizations: {e}"))),
                Ok(map) => {
                    for (gk, c) in map {
                        let at = format!("{key}[{gk}]");
                        for field in c.other.keys() {
                            unsupported.push(err(
                                &at,
                                format!("{field} is not supported by Capstan (only health.lua)"),
                            ));
                        }
                        if let Some(script) = c.health_lua {
                            let open_libs = split_open_libs(&gk.replacen('/', "_", 1))
                                .unwrap_or(Ok(c.use_open_libs.unwrap_or(false)));
                            legacy.push(lua_entry(&at, &Ok(gk), &script, open_libs));
                        }
                    }
                }
            }
        } else if key == CEL_KEY {
            match serde_saphyr::from_str::<Vec<serde_json::Value>>(value) {
                Err(e) => unsupported.push(err(key, format!("is not a list of health check expressions: {e}"))),
                Ok(list) => {
                    for (i, item) in list.into_iter().enumerate() {
                        exprs.push(cel_entry(&format!("{key}[{i}]"), item));
                    }
                }
            }
        } else if key.starts_with("resource.customizations.") {
            unsupported.push(err(
                key,
                "is an Argo CD customization Capstan does not support (only health)".into(),
            ));
        } else {
            unsupported.push(err(key, format!("is not a setting of {CONFIG_MAP_NAME}")));
        }
    }
    entries.extend(split);
    entries.extend(legacy);
    entries.extend(exprs);
    // Exact kinds before patterns, as Argo CD looks the exact key up first; otherwise in the order
    // above (a stable sort).
    entries.sort_by_key(|e| !e.selector.is_exact());
    (entries, unsupported)
}

/// Argo CD's `<group>_<kind>` (or `<kind>`) as an override key `group/kind`.
fn argo_override_key(group_kind: &str) -> Result<String, String> {
    match group_kind.split('_').collect::<Vec<_>>().as_slice() {
        [group, kind] => Ok(format!("{group}/{kind}")),
        [kind] if !kind.is_empty() => Ok(kind.to_string()),
        _ => Err(format!(
            "the key must end in <group>_<kind> or <kind>, not {group_kind:?}"
        )),
    }
}

fn parse_bool(v: &str) -> Option<bool> {
    match v.trim() {
        "true" | "True" | "TRUE" | "1" | "t" | "T" => Some(true),
        "false" | "False" | "FALSE" | "0" | "f" | "F" => Some(false),
        _ => None,
    }
}

fn lua_entry(key: &str, override_key: &Result<String, String>, script: &str, open_libs: Result<bool, String>) -> Entry {
    let broken = |selector, message| Entry {
        selector,
        rule: Rule::Broken(RuleError {
            key: key.to_string(),
            message,
        }),
    };
    let selector = match override_key {
        Ok(k) => Selector::from_override_key(k),
        Err(e) => Err(e.clone()),
    };
    let selector = match selector {
        Ok(s) => s,
        // A key naming no kind cannot mark any object Unknown; it is still reported.
        Err(message) => return broken(Selector::Nothing, message),
    };
    let open_libs = match open_libs {
        Ok(b) => b,
        Err(message) => return broken(selector, message),
    };
    match LuaRule::new(key, script, open_libs) {
        Ok(rule) => Entry {
            selector,
            rule: Rule::Lua(rule),
        },
        Err(message) => broken(selector, message),
    }
}

fn cel_entry(key: &str, item: serde_json::Value) -> Entry {
    let broken = |selector, message| Entry {
        selector,
        rule: Rule::Broken(RuleError {
            key: key.to_string(),
            message,
        }),
    };
    let check: CustomHealthCheck = match serde_json::from_value(item.clone()) {
        Ok(c) => c,
        Err(e) => {
            // Still aim the error at the kind when the entry names one, so its objects show it.
            let selector = match (
                item.get("apiVersion").and_then(|v| v.as_str()),
                item.get("kind").and_then(|v| v.as_str()),
            ) {
                (Some(api_version), Some(kind)) => Selector::exact(group_of(api_version), kind),
                _ => Selector::Nothing,
            };
            return broken(selector, format!("is not a health check expression: {e}"));
        }
    };
    let selector = Selector::exact(group_of(&check.api_version), &check.kind);
    match CelRule::new(
        key,
        &check.current,
        check.in_progress.as_deref(),
        check.failed.as_deref(),
    ) {
        Ok(rule) => Entry {
            selector,
            rule: Rule::Cel(Box::new(rule)),
        },
        Err(message) => broken(selector, message),
    }
}

//! End to end: operators' health rules in `capstan-cm` change verdicts in a running controller. A Lua
//! customization (Argo CD's format) judges a core kind, a CEL rule (Flux's `healthCheckExprs` shape)
//! judges a custom kind, a custom resource without status is Progressing while its CRD declares a
//! status subresource, and a rule that does not compile is reported on the ConfigMap (an Event) and on
//! the Application using the kind (a condition), with the objects Unknown rather than judged otherwise.

mod support;

use std::time::Duration;

use capstan_api::status::HealthCode;
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::*;

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.healthrules.test.capstan.dev}
spec:
  group: healthrules.test.capstan.dev
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {status: {}}
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
"#;

const GADGET: &str = "apiVersion: healthrules.test.capstan.dev/v1\nkind: Gadget\nmetadata: {name: g1, annotations: {capstan.dev/sync-wave: '1'}}\nspec: {size: 1}\n";

const COLOR_LUA: &str = r#"hs = {status = "Healthy"}
if obj.data ~= nil and obj.data.color == "white" then
  hs.status = "Degraded"
  hs.message = "white is not a colour"
end
return hs
"#;

const GADGET_EXPRS: &str = r#"- apiVersion: healthrules.test.capstan.dev/v1
  kind: Gadget
  failed: "status.?phase.orValue('') == 'Broken'"
  current: "status.?phase.orValue('') == 'Ready'"
"#;

fn message_of(app: &capstan_api::Application) -> String {
    app.status
        .as_ref()
        .and_then(|s| s.health.as_ref())
        .map(|h| h.message.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lua_and_cel_rules_change_health_in_a_running_controller() -> anyhow::Result<()> {
    let env = Env::shared().await?;
    env.git.create_repo("custom-health")?;
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: colors}\ndata: {color: white}\n";
    env.git.commit(
        "custom-health",
        "main",
        &[
            ("app/crd.yaml", Some(CRD)),
            ("app/gadget.yaml", Some(GADGET)),
            ("app/cm.yaml", Some(cm)),
        ],
        "gadget and colours",
    )?;
    let dest = "custom-health";
    env.create_app(app(
        "custom-health",
        &env.git.git_url("custom-health"),
        "app",
        dest,
        true,
    ))
    .await?;

    // The CRD declares a status subresource and the Gadget has no status yet: Progressing, not Healthy.
    let app0 = env
        .wait_app(
            "custom-health",
            "synced, Gadget waiting for its status",
            Duration::from_secs(120),
            |a| sync_of(a) == "Synced" && health_of(a) == "Progressing",
        )
        .await?;
    assert!(message_of(&app0).contains("Gadget g1"), "{}", message_of(&app0));

    // Built-in verdicts: a status without conditions is Healthy, whatever its phase says.
    let gadgets = env.api("healthrules.test.capstan.dev/v1", "Gadget", "gadgets", Some(dest));
    gadgets
        .patch_status(
            "g1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Broken"}})),
        )
        .await?;
    env.wait_app(
        "custom-health",
        "healthy by the built-in rules",
        Duration::from_secs(60),
        synced_healthy,
    )
    .await?;

    // The rules arrive: the Lua one makes the white ConfigMap Degraded, the CEL one the Broken Gadget.
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.ns);
    let mut config: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "capstan-cm", "namespace": env.ns},
        "data": {
            "resource.customizations.health.ConfigMap": COLOR_LUA,
            "healthCheckExprs": GADGET_EXPRS,
        }
    }))?;
    cms.create(&PostParams::default(), &config).await?;
    let degraded = env
        .wait_app(
            "custom-health",
            "degraded by the custom rules",
            Duration::from_secs(60),
            |a| {
                let resources = &a.status.as_ref().map(|s| s.resources.clone()).unwrap_or_default();
                let of = |kind: &str| {
                    resources
                        .iter()
                        .find(|r| r.kind == kind)
                        .and_then(|r| r.health.as_ref())
                        .map(|h| (h.status, h.message.clone()))
                };
                health_of(a) == "Degraded"
                    && of("ConfigMap") == Some((HealthCode::Degraded, "white is not a colour".into()))
                    && of("Gadget") == Some((HealthCode::Degraded, "failed expression is true".into()))
            },
        )
        .await?;
    assert_eq!(condition(&degraded, "HealthRuleError"), None);

    // The CEL rule follows the object: Ready is Healthy.
    gadgets
        .patch_status(
            "g1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Ready"}})),
        )
        .await?;
    env.wait_app(
        "custom-health",
        "gadget ready by the CEL rule",
        Duration::from_secs(60),
        |a| {
            a.status.as_ref().is_some_and(|s| {
                s.resources
                    .iter()
                    .any(|r| r.kind == "Gadget" && r.health.as_ref().is_some_and(|h| h.status == HealthCode::Healthy))
            })
        },
    )
    .await?;

    // A Lua rule that does not compile: the ConfigMap is Unknown (not judged by the built-in rule),
    // the Application carries a condition naming the key, and the ConfigMap an Event.
    config
        .data
        .get_or_insert_default()
        .insert("resource.customizations.health.ConfigMap".into(), "hs = {".into());
    cms.replace("capstan-cm", &PostParams::default(), &{
        let mut c = config.clone();
        c.metadata.resource_version = cms.get("capstan-cm").await?.metadata.resource_version;
        c
    })
    .await?;
    let broken = env
        .wait_app("custom-health", "broken rule reported", Duration::from_secs(60), |a| {
            condition(a, "HealthRuleError").is_some()
        })
        .await?;
    let message = condition(&broken, "HealthRuleError").unwrap_or_default();
    assert!(
        message.contains("resource.customizations.health.ConfigMap") && message.contains("does not compile"),
        "{message}"
    );
    assert_eq!(health_of(&broken), "Unknown");
    let events: Api<Event> = Api::namespaced(env.client.clone(), &env.ns);
    eventually(
        "an InvalidHealthRule event on capstan-cm",
        Duration::from_secs(30),
        || async {
            let list = events
                .list(&ListParams::default().fields("involvedObject.name=capstan-cm"))
                .await?;
            Ok(list.items.iter().any(|e| {
                e.reason.as_deref() == Some("InvalidHealthRule")
                    && e.message.as_deref().is_some_and(|m| m.contains("does not compile"))
            }))
        },
    )
    .await?;

    // Removing the ConfigMap brings back the built-in verdicts.
    cms.delete("capstan-cm", &Default::default()).await?;
    env.wait_app(
        "custom-health",
        "built-in verdicts again",
        Duration::from_secs(60),
        |a| synced_healthy(a) && condition(a, "HealthRuleError").is_none(),
    )
    .await?;
    Ok(())
}

//! Rules read from ConfigMap data and run on objects: precedence over the built-in rules, both Argo CD
//! formats and wildcards, the sandbox's closed doors and limits, Flux's expression order, and every
//! kind of broken rule reported instead of ignored.

use capstan_health::{Context, HealthCode};
use serde_json::{Value, json};

use crate::HealthRules;

fn rules(data: &[(&str, &str)]) -> HealthRules {
    HealthRules::from_config(data.iter().copied())
}

fn config_map(data: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"color": data}})
}

fn health(rules: &HealthRules, obj: &Value) -> (HealthCode, String) {
    let h = rules.assess(obj, &Context::default());
    (h.code, h.message)
}

/// The script of Argo CD's health documentation, as users paste it.
const CERTIFICATE_LUA: &str = r#"
hs = {}
if obj.status ~= nil then
  if obj.status.conditions ~= nil then
    for i, condition in ipairs(obj.status.conditions) do
      if condition.type == "Ready" and condition.status == "False" then
        hs.status = "Degraded"
        hs.message = condition.message
        return hs
      end
      if condition.type == "Ready" and condition.status == "True" then
        hs.status = "Healthy"
        hs.message = condition.message
        return hs
      end
    end
  end
end
hs.status = "Progressing"
hs.message = "Waiting for certificate"
return hs
"#;

const COLOR_LUA: &str = r#"
hs = {status = "Healthy"}
if obj.data.color == "white" then
  hs.status = "Degraded"
  hs.message = "Use a different color"
end
return hs
"#;

#[test]
fn no_rules_gives_the_built_in_verdicts() {
    let r = HealthRules::default();
    assert!(r.is_empty());
    let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "status": {"phase": "Pending"}});
    assert_eq!(health(&r, &pvc).0, HealthCode::Progressing);
}

#[test]
fn a_lua_rule_for_a_core_kind_overrides_the_built_in_one() {
    let r = rules(&[("resource.customizations.health.ConfigMap", COLOR_LUA)]);
    assert_eq!(
        health(&r, &config_map("white")),
        (HealthCode::Degraded, "Use a different color".into())
    );
    assert_eq!(health(&r, &config_map("blue")).0, HealthCode::Healthy);
    // Another kind keeps its built-in rule.
    let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "status": {"phase": "Pending"}});
    assert_eq!(health(&r, &pvc).0, HealthCode::Progressing);
    assert!(r.errors().is_empty());
}

#[test]
fn group_kind_keys_and_the_older_map_format() {
    let cert = |status: &str| {
        json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
               "status": {"conditions": [{"type": "Ready", "status": status, "message": "m"}]}})
    };
    let new_style = rules(&[(
        "resource.customizations.health.cert-manager.io_Certificate",
        CERTIFICATE_LUA,
    )]);
    let map = format!(
        "cert-manager.io/Certificate:\n  health.lua: |\n{}",
        CERTIFICATE_LUA
            .lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    );
    let old_style = rules(&[("resource.customizations", map.as_str())]);
    for r in [new_style, old_style] {
        assert!(r.errors().is_empty(), "{:?}", r.errors());
        assert_eq!(health(&r, &cert("False")).0, HealthCode::Degraded);
        assert_eq!(health(&r, &cert("True")).0, HealthCode::Healthy);
        let no_status = json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate"});
        assert_eq!(
            health(&r, &no_status),
            (HealthCode::Progressing, "Waiting for certificate".into())
        );
    }
}

#[test]
fn wildcard_keys_match_every_group_they_cover_and_exact_keys_win() {
    let r = rules(&[
        (
            "resource.customizations.health.*.crossplane.io_*",
            r#"return {status = "Suspended", message = "wild"}"#,
        ),
        (
            "resource.customizations.health.s3.aws.crossplane.io_Bucket",
            r#"return {status = "Healthy", message = "exact"}"#,
        ),
    ]);
    let obj = |api: &str, kind: &str| json!({"apiVersion": api, "kind": kind});
    assert_eq!(
        health(&r, &obj("rds.aws.crossplane.io/v1", "Instance")),
        (HealthCode::Suspended, "wild".into())
    );
    assert_eq!(
        health(&r, &obj("s3.aws.crossplane.io/v1beta1", "Bucket")),
        (HealthCode::Healthy, "exact".into())
    );
    assert_eq!(health(&r, &obj("v1", "ConfigMap")).0, HealthCode::Healthy);
}

#[test]
fn open_libraries_only_with_use_open_libs() {
    let script = r#"return {status = "Healthy", message = string.upper(obj.data.color)}"#;
    let closed = rules(&[("resource.customizations.health.ConfigMap", script)]);
    let (code, message) = health(&closed, &config_map("blue"));
    assert_eq!(code, HealthCode::Unknown);
    assert!(message.contains("string"), "{message}");
    let open = rules(&[
        ("resource.customizations.health.ConfigMap", script),
        ("resource.customizations.useOpenLibs.ConfigMap", "true"),
    ]);
    assert_eq!(health(&open, &config_map("blue")), (HealthCode::Healthy, "BLUE".into()));
    // `os` is the safe one, and `require("os")` gives it, as in Argo CD.
    let os = rules(&[(
        "resource.customizations.health.ConfigMap",
        r#"local o = require("os"); if o.execute == nil and os.getenv == nil and o.time() > 0 then return {status = "Healthy"} end return {status = "Degraded"}"#,
    )]);
    assert_eq!(health(&os, &config_map("x")).0, HealthCode::Healthy);
}

#[test]
fn the_sandbox_has_no_files_processes_or_chunk_loading() {
    for (what, script) in [
        (
            "io",
            r#"return {status = "Healthy", message = io.open("/etc/passwd"):read("*a")}"#,
        ),
        (
            "os.execute",
            r#"os.execute("touch /tmp/capstan-lua-escape") return {status = "Healthy"}"#,
        ),
        (
            "os.getenv",
            r#"return {status = "Healthy", message = os.getenv("HOME")}"#,
        ),
        ("dofile", r#"dofile("/etc/passwd") return {status = "Healthy"}"#),
        ("loadfile", r#"loadfile("/etc/passwd") return {status = "Healthy"}"#),
        ("load", r#"load("return 1")() return {status = "Healthy"}"#),
        ("require", r#"require("io") return {status = "Healthy"}"#),
        ("debug", r#"debug.sethook() return {status = "Healthy"}"#),
        (
            "package",
            r#"package.loadlib("libc.so.6", "system") return {status = "Healthy"}"#,
        ),
        // Coroutines run without the time limit's hook: not opened, even with useOpenLibs.
        (
            "coroutine",
            r#"coroutine.resume(coroutine.create(function() end)) return {status = "Healthy"}"#,
        ),
    ] {
        for open in ["false", "true"] {
            let r = rules(&[
                ("resource.customizations.health.ConfigMap", script),
                ("resource.customizations.useOpenLibs.ConfigMap", open),
            ]);
            let (code, message) = health(&r, &config_map("x"));
            assert_eq!(code, HealthCode::Unknown, "{what} (useOpenLibs {open}) ran: {message}");
        }
    }
    assert!(!std::path::Path::new("/tmp/capstan-lua-escape").exists());
}

#[test]
fn endless_loops_and_allocations_are_stopped() {
    let r = rules(&[("resource.customizations.health.ConfigMap", "while true do end")]);
    let start = std::time::Instant::now();
    let (code, message) = health(&r, &config_map("x"));
    assert_eq!(code, HealthCode::Unknown);
    assert!(message.contains("ran longer than"), "{message}");
    assert!(start.elapsed() < std::time::Duration::from_secs(10));

    let r = rules(&[(
        "resource.customizations.health.ConfigMap",
        // Doubling a string reaches the limit in a few dozen steps, whatever the machine's speed.
        r#"local s = "x" while true do s = s .. s end"#,
    )]);
    let (code, message) = health(&r, &config_map("x"));
    assert_eq!(code, HealthCode::Unknown);
    assert!(message.contains("memory"), "{message}");
}

#[test]
fn answers_argo_cd_does_not_accept_are_unknown() {
    for (script, expect) in [
        (r#"return {status = "Fine"}"#, "Lua returned an invalid health status"),
        (r#"return {}"#, "Lua returned an invalid health status"),
        (r#"return "Healthy""#, "expect table output from Lua script, not string"),
        (r#"return {status = 3}"#, "status is a integer, not a string"),
        (r#"error("boom")"#, "boom"),
    ] {
        let r = rules(&[("resource.customizations.health.ConfigMap", script)]);
        let (code, message) = health(&r, &config_map("x"));
        assert_eq!(code, HealthCode::Unknown, "{script}");
        assert!(message.contains(expect), "{script}: {message}");
    }
}

#[test]
fn a_rule_that_does_not_compile_is_reported_and_makes_its_kind_unknown() {
    let r = rules(&[("resource.customizations.health.ConfigMap", "hs = {")]);
    let errors = r.errors();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].key, "resource.customizations.health.ConfigMap");
    assert!(errors[0].message.contains("does not compile"), "{}", errors[0].message);
    let (code, message) = health(&r, &config_map("x"));
    assert_eq!(code, HealthCode::Unknown);
    assert!(message.contains("does not compile"), "{message}");
    assert!(r.broken_rule_for(&config_map("x")).is_some());
    let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "status": {"phase": "Bound"}});
    assert!(r.broken_rule_for(&pvc).is_none());
}

#[test]
fn keys_capstan_does_not_use_are_reported() {
    let r = rules(&[
        (
            "resource.customizations.ignoreDifferences.apps_Deployment",
            "jsonPointers: [/spec/replicas]",
        ),
        ("resource.customizations.health.a_b_c", "return {status = 'Healthy'}"),
        ("resource.customizations.useOpenLibs.ConfigMap", "true"),
        ("resource.customizations", "apps/Deployment:\n  actions: '{}'\n"),
        ("timeout.reconciliation", "180s"),
        ("healthCheckExprs", "not: [a list"),
    ]);
    let keys: Vec<String> = r.errors().iter().map(|e| e.key.clone()).collect();
    for key in [
        "resource.customizations.ignoreDifferences.apps_Deployment",
        "resource.customizations.health.a_b_c",
        "resource.customizations.useOpenLibs.ConfigMap",
        "resource.customizations[apps/Deployment]",
        "timeout.reconciliation",
        "healthCheckExprs",
    ] {
        assert!(keys.iter().any(|k| k == key), "{key} not reported: {keys:?}");
    }
}

#[test]
fn use_open_libs_that_is_not_a_boolean_breaks_the_rule() {
    let r = rules(&[
        ("resource.customizations.health.ConfigMap", COLOR_LUA),
        ("resource.customizations.useOpenLibs.ConfigMap", "yes please"),
    ]);
    assert_eq!(health(&r, &config_map("x")).0, HealthCode::Unknown);
    assert_eq!(r.errors().len(), 1);
}

const KAFKA_EXPRS: &str = r#"
- apiVersion: kafka.strimzi.io/v1beta2
  kind: Kafka
  inProgress: "has(status.conditions) && status.conditions.exists(e, e.type == 'NotReady' && e.status == 'True')"
  failed: "status.?conditions.orValue([]).exists(e, e.type == 'Ready' && e.status == 'False')"
  current: "status.?conditions.orValue([]).exists(e, e.type == 'Ready' && e.status == 'True')"
"#;

fn kafka(status: Value) -> Value {
    json!({"apiVersion": "kafka.strimzi.io/v1", "kind": "Kafka", "metadata": {"name": "k", "generation": 2}, "status": status})
}

#[test]
fn cel_expressions_in_flux_order() {
    let r = rules(&[("healthCheckExprs", KAFKA_EXPRS)]);
    assert!(r.errors().is_empty(), "{:?}", r.errors());
    let cond = |t: &str, s: &str| json!({"observedGeneration": 2, "conditions": [{"type": t, "status": s}]});
    assert_eq!(health(&r, &kafka(cond("Ready", "True"))).0, HealthCode::Healthy);
    assert_eq!(health(&r, &kafka(cond("Ready", "False"))).0, HealthCode::Degraded);
    assert_eq!(health(&r, &kafka(cond("NotReady", "True"))).0, HealthCode::Progressing);
    assert_eq!(
        health(&r, &kafka(json!({"observedGeneration": 2}))).0,
        HealthCode::Progressing
    );
    // A status older than the spec is Progressing whatever the expressions say.
    let (code, message) = health(
        &r,
        &kafka(json!({"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]})),
    );
    assert_eq!(code, HealthCode::Progressing);
    assert!(message.contains("observedGeneration 1"), "{message}");
}

#[test]
fn cel_errors_at_run_time_are_unknown_with_the_error() {
    let exprs = "- apiVersion: v1\n  kind: ConfigMap\n  current: \"data.colour == 'blue'\"\n- apiVersion: apps/v1\n  kind: Deployment\n  current: \"spec.replicas\"\n";
    let r = rules(&[("healthCheckExprs", exprs)]);
    let (code, message) = health(&r, &config_map("blue"));
    assert_eq!(code, HealthCode::Unknown);
    assert!(
        message.contains("healthCheckExprs[0]") && message.contains("current failed"),
        "{message}"
    );
    let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replicas": 2}});
    let (code, message) = health(&r, &deploy);
    assert_eq!(code, HealthCode::Unknown);
    assert!(message.contains("not a boolean"), "{message}");
}

#[test]
fn cel_rules_that_do_not_compile_or_have_unknown_fields_are_reported() {
    let exprs = "- apiVersion: v1\n  kind: ConfigMap\n  current: \"data.color ==\"\n- apiVersion: v1\n  kind: Secret\n  current: \"true\"\n  healthy: \"true\"\n- apiVersion: v1\n  kind: Service\n";
    let r = rules(&[("healthCheckExprs", exprs)]);
    let keys: Vec<String> = r.errors().iter().map(|e| e.key.clone()).collect();
    assert_eq!(
        keys,
        ["healthCheckExprs[0]", "healthCheckExprs[1]", "healthCheckExprs[2]"]
    );
    assert_eq!(health(&r, &config_map("x")).0, HealthCode::Unknown);
    let secret = json!({"apiVersion": "v1", "kind": "Secret"});
    assert_eq!(health(&r, &secret).0, HealthCode::Unknown);
}

#[test]
fn objects_being_deleted_are_progressing_before_any_rule() {
    let r = rules(&[("resource.customizations.health.ConfigMap", COLOR_LUA)]);
    let mut obj = config_map("white");
    obj["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    assert_eq!(health(&r, &obj).0, HealthCode::Progressing);
}

#[test]
fn hostile_objects_never_panic() {
    let r = rules(&[
        ("resource.customizations.health.ConfigMap", COLOR_LUA),
        (
            "healthCheckExprs",
            "- apiVersion: v1\n  kind: Secret\n  current: \"has(status.x)\"\n",
        ),
    ]);
    let mut deep = json!("leaf");
    for _ in 0..300 {
        deep = json!({"a": deep});
    }
    for obj in [
        json!({"apiVersion": "v1", "kind": "ConfigMap", "data": deep.clone()}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "data": "not a map"}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"color": 3}}),
        json!({"apiVersion": "v1", "kind": "Secret", "status": deep}),
        json!({"apiVersion": "v1", "kind": "Secret", "status": [1, 2]}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"color": "x".repeat(1 << 20)}}),
    ] {
        let h = r.assess(&obj, &Context::default());
        assert!(h.message.len() <= capstan_health::MAX_MESSAGE_BYTES + 4);
    }
}

#[test]
fn the_playground_settings_load_without_errors() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/settings/capstan-cm.yaml");
    let text = std::fs::read_to_string(path).expect("examples/settings/capstan-cm.yaml");
    let cm: Value = serde_saphyr::from_str(&text).expect("a ConfigMap");
    let data: Vec<(String, String)> = cm["data"]
        .as_object()
        .expect("data")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect();
    let r = HealthRules::from_config(data.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    assert!(r.errors().is_empty(), "{:?}", r.errors());
    let mut annotated = config_map("x");
    annotated["metadata"]["annotations"] = json!({"example.capstan.dev/health": "Degraded"});
    assert_eq!(health(&r, &annotated).0, HealthCode::Degraded);
    assert_eq!(health(&r, &config_map("x")).0, HealthCode::Healthy);
}

#[test]
fn catching_errors_does_not_outlive_the_time_limit() {
    for (what, script, open) in [
        (
            "pcall",
            "while true do pcall(function() while true do end end) end",
            "false",
        ),
        (
            "xpcall",
            "while true do xpcall(function() while true do end end, function() end) end",
            "false",
        ),
    ] {
        let r = rules(&[
            ("resource.customizations.health.ConfigMap", script),
            ("resource.customizations.useOpenLibs.ConfigMap", open),
        ]);
        let start = std::time::Instant::now();
        let (code, message) = health(&r, &config_map("x"));
        assert_eq!(code, HealthCode::Unknown, "{what}");
        assert!(message.contains("ran longer than"), "{what}: {message}");
        assert!(start.elapsed() < std::time::Duration::from_secs(5), "{what}");
    }
}

#[test]
fn library_loops_the_hook_cannot_see_are_bounded() {
    for (what, script) in [
        (
            "table.move",
            "table.move({}, 1, 9223372036854775806, 2) return {status = 'Healthy'}",
        ),
        (
            "string.rep",
            "string.rep('', 9223372036854775807) return {status = 'Healthy'}",
        ),
        (
            "string.find",
            "string.find(string.rep('a', 100000), '.-.-.-.-.-b') return {status = 'Healthy'}",
        ),
    ] {
        let r = rules(&[
            ("resource.customizations.health.ConfigMap", script),
            ("resource.customizations.useOpenLibs.ConfigMap", "true"),
        ]);
        let start = std::time::Instant::now();
        let (code, message) = health(&r, &config_map("x"));
        assert_eq!(code, HealthCode::Unknown, "{what}");
        assert!(message.contains(what), "{what}: {message}");
        assert!(start.elapsed() < std::time::Duration::from_secs(5), "{what}");
    }
}

#[test]
fn a_split_key_wins_over_the_older_map_and_use_open_libs_applies_to_both() {
    let map = "ConfigMap:\n  health.lua: |\n    return {status = 'Suspended', message = string.lower('MAP')}\n";
    let r = rules(&[
        ("resource.customizations", map),
        ("resource.customizations.useOpenLibs.ConfigMap", "true"),
    ]);
    assert!(r.errors().is_empty(), "{:?}", r.errors());
    assert_eq!(health(&r, &config_map("x")), (HealthCode::Suspended, "map".into()));
    let r = rules(&[
        ("resource.customizations", map),
        (
            "resource.customizations.health.ConfigMap",
            "return {status = 'Degraded', message = 'split'}",
        ),
    ]);
    assert_eq!(health(&r, &config_map("x")), (HealthCode::Degraded, "split".into()));
}

#[test]
fn cel_rules_with_nested_comprehensions_are_refused_and_wrong_answers_show_no_value() {
    let exprs = "- apiVersion: v1\n  kind: ConfigMap\n  current: \"metadata.?labels.orValue({}).all(k, ['a', 'b'].exists(x, x == k))\"\n";
    let r = rules(&[("healthCheckExprs", exprs)]);
    assert_eq!(r.errors().len(), 1);
    assert!(
        r.errors()[0].message.contains("inside another comprehension"),
        "{}",
        r.errors()[0].message
    );
    let secret_rule = "- apiVersion: v1\n  kind: Secret\n  current: \"data\"\n";
    let r = rules(&[("healthCheckExprs", secret_rule)]);
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "data": {"password": "c2VjcmV0LXZhbHVl"}});
    let (code, message) = health(&r, &secret);
    assert_eq!(code, HealthCode::Unknown);
    assert!(
        message.contains("not a boolean") && !message.contains("c2VjcmV0"),
        "{message}"
    );
}

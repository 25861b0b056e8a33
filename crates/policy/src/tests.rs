//! Policies evaluated end to end on objects, without a cluster: the seed's production database
//! rule, the failure modes (compile errors, run-time errors, the cost budget), match rules,
//! conditions, variables, messages and params.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use capstan_api::Policy;
use serde_json::{Value, json};

use crate::{Candidate, Operation, Params, Resource, Scope, compile, evaluate};

fn policy(spec: Value) -> Arc<crate::CompiledPolicy> {
    let p: Policy = serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Policy",
        "metadata": {"name": "p", "namespace": "capstan", "generation": 1},
        "spec": spec,
    }))
    .expect("policy");
    Arc::new(compile(&p))
}

fn claims_rule() -> Value {
    json!({"resourceRules": [{"apiGroups": ["database.example.org"], "apiVersions": ["*"],
        "resources": ["postgresqlinstances"], "operations": ["CREATE", "UPDATE"]}]})
}

fn production_policy() -> Arc<crate::CompiledPolicy> {
    policy(json!({
        "matchConstraints": claims_rule(),
        "clusterSelector": {"matchLabels": {"env": "production"}},
        "validations": [
            {"expression": "has(object.spec.backup) && object.spec.backup.enabled == true",
             "message": "production databases need automated backups"},
            {"expression": "object.spec.replicas >= 2",
             "messageExpression": "'replicas is ' + string(object.spec.replicas) + ', production needs at least 2'"}
        ]
    }))
}

fn claim(backup: bool, replicas: i64) -> Candidate {
    Candidate {
        key: "database.example.org/PostgreSQLInstance/team-a/orders".into(),
        resource: Resource {
            group: "database.example.org".into(),
            version: "v1alpha1".into(),
            kind: "PostgreSQLInstance".into(),
            resource: "postgresqlinstances".into(),
            namespaced: true,
        },
        operation: Operation::Create,
        object: Some(json!({
            "apiVersion": "database.example.org/v1alpha1", "kind": "PostgreSQLInstance",
            "metadata": {"name": "orders", "namespace": "team-a"},
            "spec": {"backup": {"enabled": backup}, "replicas": replicas}
        })),
        old_object: None,
        namespace_object: None,
    }
}

fn scope(env: &str) -> Scope {
    Scope {
        project: "team-a".into(),
        cluster: env.into(),
        cluster_labels: BTreeMap::from([("env".to_string(), env.to_string())]),
    }
}

fn messages(p: &Arc<crate::CompiledPolicy>, c: Candidate, s: &Scope) -> Vec<String> {
    evaluate(std::slice::from_ref(p), s, &[c], &HashMap::new())
        .verdicts
        .into_iter()
        .map(|v| v.message)
        .collect()
}

#[test]
fn the_production_rule_refuses_a_claim_without_backups_and_staging_accepts_it() {
    let p = production_policy();
    assert!(p.errors.is_empty(), "{:?}", p.errors);
    let staging = evaluate(
        std::slice::from_ref(&p),
        &scope("staging"),
        &[claim(false, 1)],
        &HashMap::new(),
    );
    assert_eq!(staging.evaluated, 0, "not in scope");
    assert!(staging.verdicts.is_empty());
    let prod = evaluate(
        std::slice::from_ref(&p),
        &scope("production"),
        &[claim(false, 1)],
        &HashMap::new(),
    );
    assert_eq!(prod.evaluated, 1);
    let got: Vec<_> = prod.verdicts.iter().map(|v| (v.message.as_str(), v.denies())).collect();
    assert_eq!(
        got,
        [
            ("production databases need automated backups", true),
            ("replicas is 1, production needs at least 2", true)
        ]
    );
    assert!(prod.cost > 0);
    assert!(messages(&p, claim(true, 2), &scope("production")).is_empty());
}

#[test]
fn a_missing_field_without_has_is_an_error_that_fails_closed_or_is_ignored() {
    let p = policy(json!({"matchConstraints": claims_rule(),
        "validations": [{"expression": "object.spec.storage.size > 1"}]}));
    let m = messages(&p, claim(true, 2), &scope("production"));
    assert_eq!(m.len(), 1);
    assert!(
        m[0].starts_with("expression 'object.spec.storage.size > 1' resulted in error"),
        "{m:?}"
    );
    let ignore = policy(json!({"matchConstraints": claims_rule(), "failurePolicy": "Ignore",
        "validations": [{"expression": "object.spec.storage.size > 1"}]}));
    assert!(messages(&ignore, claim(true, 2), &scope("production")).is_empty());
}

#[test]
fn a_policy_that_does_not_compile_names_its_mistakes_and_denies_what_it_matches() {
    let p = policy(
        json!({"matchConstraints": claims_rule(), "validationActions": ["Deny", "Warn"],
        "validations": [{"expression": "object.spec.replicas >"}, {"expression": "true"}]}),
    );
    assert_eq!(p.errors.len(), 2, "{:?}", p.errors);
    assert!(
        p.errors[0].starts_with("spec.validations[0].expression: does not compile"),
        "{:?}",
        p.errors
    );
    assert!(p.errors[1].contains("Deny and Warn"), "{:?}", p.errors);
    let m = messages(&p, claim(true, 2), &scope("staging"));
    assert_eq!(m.len(), 1);
    assert!(m[0].starts_with("the policy does not compile"), "{m:?}");
    // Match rules that are a mistake: every object in scope.
    let p = policy(json!({"matchConstraints": {"resourceRules": [{"resources": ["*"]}]},
        "validations": [{"expression": "true"}]}));
    assert!(
        p.errors[0].contains("resourceRules[0].operations is required"),
        "{:?}",
        p.errors
    );
    assert_eq!(messages(&p, claim(true, 2), &scope("staging")).len(), 1);
}

#[test]
fn the_cost_budget_stops_an_expensive_expression_with_a_denial() {
    let items: Vec<i64> = (0..2_000).collect();
    let mut c = claim(true, 2);
    if let Some(spec) = c.object.as_mut().and_then(|o| o.get_mut("spec")) {
        spec["items"] = json!(items);
    }
    // 2,000 × 2,000 = 4,000,000 iterations: over the 1,000,000 budget.
    let p = policy(json!({"matchConstraints": claims_rule(),
        "validations": [{"expression": "object.spec.items.all(x, object.spec.items.exists(y, y >= x))"}]}));
    let started = std::time::Instant::now();
    let m = messages(&p, c.clone(), &scope("staging"));
    assert_eq!(m.len(), 1);
    assert!(m[0].contains("actual cost limit exceeded"), "{m:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    // One pass over the same list is cheap.
    let cheap = policy(json!({"matchConstraints": claims_rule(),
        "validations": [{"expression": "object.spec.items.all(x, x >= 0)"}]}));
    assert!(messages(&cheap, c, &scope("staging")).is_empty());
}

#[test]
fn conditions_variables_and_excluded_objects() {
    let p = policy(json!({
        "matchConstraints": {"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "operations": ["*"]}],
            "excludeResourceRules": [{"apiGroups": [""], "apiVersions": ["*"], "resources": ["configmaps"], "operations": ["*"]}]},
        "matchConditions": [{"name": "only-orders", "expression": "object.metadata.name == 'orders'"}],
        "variables": [{"name": "twice", "expression": "object.spec.replicas * 2"}],
        "validations": [{"expression": "variables.twice >= 4", "reason": "Forbidden"}]
    }));
    assert!(p.errors.is_empty(), "{:?}", p.errors);
    let out = evaluate(
        std::slice::from_ref(&p),
        &scope("x"),
        &[claim(true, 1)],
        &HashMap::new(),
    );
    assert_eq!(out.verdicts.len(), 1);
    assert_eq!(out.verdicts[0].reason, "Forbidden");
    assert_eq!(out.verdicts[0].message, "failed expression: variables.twice >= 4");
    let mut other = claim(true, 1);
    if let Some(o) = other.object.as_mut() {
        o["metadata"]["name"] = json!("billing");
    }
    assert!(messages(&p, other, &scope("x")).is_empty(), "the condition skips it");
    let mut cm = claim(true, 1);
    cm.resource = Resource {
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
        resource: "configmaps".into(),
        namespaced: true,
    };
    assert!(messages(&p, cm, &scope("x")).is_empty(), "excluded");
}

#[test]
fn params_come_from_the_referenced_object_and_a_missing_one_denies() {
    let p = policy(json!({"matchConstraints": claims_rule(),
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"}, "paramRef": {"name": "limits"},
        "validations": [{"expression": "object.spec.replicas <= int(params.data.maxReplicas)"}]}));
    let found = HashMap::from([("p".to_string(), Params::Found(json!({"data": {"maxReplicas": "3"}})))]);
    let run =
        |c, params: &HashMap<String, Params>| evaluate(std::slice::from_ref(&p), &scope("x"), &[c], params).verdicts;
    assert!(run(claim(true, 2), &found).is_empty());
    assert_eq!(run(claim(true, 5), &found).len(), 1);
    let missing = HashMap::from([(
        "p".to_string(),
        Params::Missing("configmaps \"limits\" not found".into()),
    )]);
    let v = run(claim(true, 2), &missing);
    assert!(v[0].message.contains("no params found"), "{v:?}");
}

#[test]
fn a_deep_or_long_expression_is_refused_when_compiled() {
    let deep = format!("{}true{}", "(".repeat(100), ")".repeat(100));
    let p = policy(json!({"matchConstraints": claims_rule(), "validations": [{"expression": deep}]}));
    assert!(p.errors[0].contains("nests deeper"), "{:?}", p.errors);
    let long = format!("'{}' == ''", "a".repeat(6000));
    let p = policy(json!({"matchConstraints": claims_rule(), "validations": [{"expression": long}]}));
    assert!(p.errors[0].contains("characters long"), "{:?}", p.errors);
}

#[test]
fn the_kubernetes_libraries_are_there_through_a_policy() {
    let mut c = claim(true, 2);
    if let Some(spec) = c.object.as_mut().and_then(|o| o.get_mut("spec")) {
        spec["size"] = json!("20Gi");
        spec["zones"] = json!(["a", "b", "c"]);
        spec["owner"] = json!("team-a@example.org");
    }
    let p = policy(json!({"matchConstraints": claims_rule(), "validations": [
        {"expression": "quantity(object.spec.size).isGreaterThan(quantity('10Gi'))"},
        {"expression": "object.spec.zones.isSorted() && object.spec.zones.indexOf('b') == 1"},
        {"expression": "object.spec.owner.find('[a-z-]+') == 'team-a'"},
        {"expression": "quantity(object.spec.size).isLessThan(quantity('10Gi'))", "message": "too big"}
    ]}));
    assert!(p.errors.is_empty(), "{:?}", p.errors);
    assert_eq!(messages(&p, c, &scope("x")), ["too big"]);
}

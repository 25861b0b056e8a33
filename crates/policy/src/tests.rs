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

#[test]
fn a_long_operator_chain_is_refused_when_compiled_not_a_stack_overflow() {
    let chain = format!("{} == 2550", vec!["1"; 2550].join("+"));
    let p = policy(json!({"matchConstraints": claims_rule(), "validations": [{"expression": chain}]}));
    assert!(p.errors[0].contains("deeper than 100 levels"), "{:?}", p.errors);
    let short = format!("{} == 40", vec!["1"; 40].join("+"));
    let p = policy(json!({"matchConstraints": claims_rule(), "validations": [{"expression": short}]}));
    assert!(p.errors.is_empty(), "{:?}", p.errors);
    assert!(messages(&p, claim(true, 2), &scope("x")).is_empty());
}

#[test]
fn variables_that_double_are_refused_and_literals_are_charged() {
    // Each variable twice in the next: 2^k parts once put in.
    let mut variables = vec![json!({"name": "v0", "expression": "object.metadata.name"})];
    for i in 1..=22 {
        variables.push(
            json!({"name": format!("v{i}"), "expression": format!("[variables.v{}, variables.v{}]", i - 1, i - 1)}),
        );
    }
    let p = policy(json!({"matchConstraints": claims_rule(), "variables": variables,
        "validations": [{"expression": "size(variables.v22) == 2"}]}));
    assert!(
        p.errors.iter().any(|e| e.contains("more than 20000 parts")),
        "{:?}",
        p.errors
    );
    // A large literal built in one expression is charged its whole size.
    let big = format!("[{}]", vec!["1"; 1200].join(","));
    let p = policy(
        json!({"matchConstraints": claims_rule(), "variables": [{"name": "big", "expression": big}],
        "validations": [{"expression": "variables.big.all(a, variables.big.size() > 0)"}]}),
    );
    assert!(p.errors.is_empty(), "{:?}", p.errors);
    let m = messages(&p, claim(true, 2), &scope("x"));
    assert!(m[0].contains("actual cost limit exceeded"), "{m:?}");
}

#[test]
fn filter_and_map_are_charged_linearly_and_replace_before_it_allocates() {
    let mut c = claim(true, 2);
    let keys: serde_json::Map<String, serde_json::Value> =
        (0..5000).map(|i| (format!("forbidden-{i}"), json!("x"))).collect();
    if let Some(spec) = c.object.as_mut().and_then(|o| o.get_mut("spec")) {
        spec["data"] = serde_json::Value::Object(keys);
        spec["text"] = json!("a".repeat(700));
    }
    let filter = policy(json!({"matchConstraints": claims_rule(), "failurePolicy": "Ignore",
        "validations": [{"expression": "object.spec.data.filter(k, k.startsWith('forbidden-')).size() == 0", "message": "forbidden keys"}]}));
    assert_eq!(
        messages(&filter, c.clone(), &scope("x")),
        ["forbidden keys"],
        "5,000 kept: not over the budget"
    );
    let replace = policy(json!({"matchConstraints": claims_rule(), "validations": [
        {"expression": "object.spec.text.replace('', object.spec.text).replace('', object.spec.text).size() > 0"}]}));
    let started = std::time::Instant::now();
    let m = messages(&replace, c, &scope("x"));
    assert!(m[0].contains("actual cost limit exceeded"), "{m:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

#[test]
fn a_quantity_in_a_variable_and_condition_semantics() {
    let mut c = claim(true, 2);
    if let Some(spec) = c.object.as_mut().and_then(|o| o.get_mut("spec")) {
        spec["memory"] = json!("8Gi");
    }
    let p = policy(json!({"matchConstraints": claims_rule(),
        "variables": [{"name": "mem", "expression": "quantity(object.spec.memory)"}],
        "validations": [{"expression": "variables.mem.isLessThan(quantity('4Gi'))", "message": "at most 4Gi"}]}));
    assert_eq!(messages(&p, c.clone(), &scope("x")), ["at most 4Gi"]);
    // A false condition skips the object even when another condition errors.
    let p = policy(json!({"matchConstraints": claims_rule(),
        "matchConditions": [{"name": "broken", "expression": "object.spec.missing.field"}, {"name": "never", "expression": "false"}],
        "validations": [{"expression": "false"}]}));
    assert!(messages(&p, c, &scope("x")).is_empty());
}

#[test]
fn equivalent_match_names_every_version_and_a_missing_object_never_matches_a_selector() {
    let mut c = claim(true, 1);
    c.resource.version = "v1beta9".into();
    let p = policy(
        json!({"matchConstraints": {"resourceRules": [{"apiGroups": ["database.example.org"], "apiVersions": ["v1"],
        "resources": ["postgresqlinstances"], "operations": ["CREATE"]}]},
        "validations": [{"expression": "object.spec.replicas >= 2", "message": "two"}]}),
    );
    assert_eq!(
        messages(&p, c.clone(), &scope("x")),
        ["two"],
        "Equivalent: another version is judged"
    );
    let exact = policy(
        json!({"matchConstraints": {"matchPolicy": "Exact", "resourceRules": [{"apiGroups": ["database.example.org"], "apiVersions": ["v1"],
        "resources": ["postgresqlinstances"], "operations": ["CREATE"]}]},
        "validations": [{"expression": "false"}]}),
    );
    assert!(messages(&exact, c.clone(), &scope("x")).is_empty());
    // DoesNotExist on a create: the new object has no such label and matches; the missing old
    // object is not considered.
    let p = policy(
        json!({"matchConstraints": {"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "operations": ["*"]}],
        "objectSelector": {"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]}},
        "validations": [{"expression": "false", "message": "judged"}]}),
    );
    assert_eq!(messages(&p, c.clone(), &scope("x")), ["judged"]);
    if let Some(o) = c.object.as_mut() {
        o["metadata"]["labels"] = json!({"skip": "yes"});
    }
    assert!(messages(&p, c, &scope("x")).is_empty(), "labelled skip: not selected");
}

#[test]
fn two_policies_that_contradict_each_other_are_both_reported() {
    let at_least = policy(json!({"matchConstraints": claims_rule(),
        "validations": [{"expression": "object.spec.replicas >= 2", "message": "at least 2"}]}));
    let mut at_most = (*policy(json!({"matchConstraints": claims_rule(),
        "validations": [{"expression": "object.spec.replicas <= 1", "message": "at most 1"}]})))
    .clone();
    at_most.name = "q".into();
    let both = [at_least, Arc::new(at_most)];
    for replicas in [1, 2] {
        let out = evaluate(&both, &scope("x"), &[claim(true, replicas)], &HashMap::new());
        assert_eq!(out.evaluated, 2);
        assert_eq!(
            out.verdicts.len(),
            1,
            "one of the two refuses {replicas}: {:?}",
            out.verdicts
        );
        assert!(out.verdicts[0].denies());
    }
}

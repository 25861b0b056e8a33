//! Evaluating compiled policies on the objects of one sync, as Kubernetes' admission does for one
//! request: scope (cluster labels, project), `matchConstraints`, `matchConditions` (any false
//! skips the object), `variables`, then each validation; a failed one becomes a [`Verdict`] with
//! the policy's actions and the message (`messageExpression`, else `message`, else
//! `failed expression: …`). An expression that cannot be evaluated, the cost budget exceeded, a
//! policy that does not compile and missing params fail the object under `failurePolicy: Fail`.
//!
//! Evaluation is synchronous and bounded by the cost budget; the caller also bounds its wall-clock
//! time and runs it off the async executor.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use capstan_api::policy::{FailurePolicy, ParameterNotFoundAction, ValidationAction};
use cel::objects::Map;
use cel::{Context, Value};
use serde_json::Value as Json;

use crate::compile::{CompiledPolicy, Expression, one_line};
use crate::cost;
use crate::matching::{Resource, Subject, labels_of};
use crate::value::{from_json, from_optional};

/// The most all expressions of one policy may cost on one object (Kubernetes' per-request limit).
pub const PER_POLICY: u64 = 10_000_000;
/// How long one evaluation (every policy on every object of a sync) may run; after it each
/// expression still running fails (and so denies, under `failurePolicy: Fail`).
pub const DEADLINE: std::time::Duration = std::time::Duration::from_secs(9);

/// Where the objects of a sync go.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    /// The Application's project.
    pub project: String,
    /// The destination cluster's name.
    pub cluster: String,
    /// The destination cluster's labels.
    pub cluster_labels: BTreeMap<String, String>,
}

/// One object of the sync, with what the sync would do to it.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Its key for messages (`GROUP/KIND/NAMESPACE/NAME`).
    pub key: String,
    /// Kind and resource.
    pub resource: Resource,
    /// What the sync would do.
    pub operation: crate::matching::Operation,
    /// The object after the sync (none for a prune).
    pub object: Option<Json>,
    /// The live object (none for a create).
    pub old_object: Option<Json>,
    /// Its namespace's object on the destination, when known.
    pub namespace_object: Option<Json>,
}

/// A policy's `params`, looked up by the caller.
#[derive(Debug, Clone)]
pub enum Params {
    /// The object named by `paramRef`.
    Found(Json),
    /// It could not be found or read: why.
    Missing(String),
}

/// One failed validation (or failure to evaluate) of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The policy's name.
    pub policy: String,
    /// The object's key.
    pub object: String,
    /// The policy's actions.
    pub actions: Vec<ValidationAction>,
    /// What failed.
    pub message: String,
    /// `reason` of the validation (`Invalid` by default).
    pub reason: String,
}

impl Verdict {
    /// Whether it refuses the sync.
    pub fn denies(&self) -> bool {
        self.actions.contains(&ValidationAction::Deny)
    }

    /// Whether it is a warning on the Application.
    pub fn warns(&self) -> bool {
        self.actions.contains(&ValidationAction::Warn)
    }
}

/// What evaluating the policies on a sync's objects found.
#[derive(Debug, Clone, Default)]
pub struct Evaluation {
    /// The failed validations, in policy then object order.
    pub verdicts: Vec<Verdict>,
    /// (policy, object) pairs evaluated (matched and in scope).
    pub evaluated: usize,
    /// The cost spent, summed over every expression.
    pub cost: u64,
}

impl Evaluation {
    /// The verdicts that refuse the sync.
    pub fn denials(&self) -> impl Iterator<Item = &Verdict> {
        self.verdicts.iter().filter(|v| v.denies())
    }
}

impl CompiledPolicy {
    /// Whether the policy applies to syncs to `scope` at all.
    pub fn in_scope(&self, scope: &Scope) -> bool {
        let cluster = self
            .cluster_selector
            .as_ref()
            .is_none_or(|s| s.matches(&scope.cluster_labels));
        let project = self.projects.is_empty() || self.projects.contains(&scope.project);
        cluster && project
    }

    /// Whether `candidate` is one of the objects it names (every object in scope when its
    /// `matchConstraints` are a mistake: fail closed).
    pub fn matches(&self, candidate: &Candidate) -> bool {
        let labels = candidate.namespace_object.as_ref().map(|n| labels_of(Some(n)));
        let subject = Subject {
            resource: &candidate.resource,
            operation: candidate.operation,
            object: candidate.object.as_ref(),
            old_object: candidate.old_object.as_ref(),
            namespace_labels: labels.as_ref(),
        };
        self.matcher.as_ref().is_none_or(|m| m.matches(&subject))
    }

    /// Whether its `namespaceSelector` needs the namespaces' labels.
    pub fn reads_namespaces(&self) -> bool {
        self.matcher.as_ref().is_some_and(|m| m.reads_namespaces())
    }

    /// Its verdicts on `candidate` (already known to be in scope and matched), and their cost.
    fn judge(&self, candidate: &Candidate, params: Option<&Params>) -> (Vec<Verdict>, u64) {
        let verdict = |message: String, reason: &str| Verdict {
            policy: self.name.clone(),
            object: candidate.key.clone(),
            actions: self.actions.clone(),
            message,
            reason: reason.to_string(),
        };
        // A failure to evaluate: a verdict under `Fail`, nothing under `Ignore`.
        let failed = |message: String| match self.failure {
            FailurePolicy::Fail => vec![verdict(message, "Invalid")],
            FailurePolicy::Ignore => Vec::new(),
        };
        if !self.errors.is_empty() {
            return (
                failed(format!("the policy does not compile: {}", self.errors.join("; "))),
                0,
            );
        }
        let params = match (&self.params, params) {
            (None, _) => Value::Null,
            (Some(_), Some(Params::Found(p))) => from_json(p),
            (Some(source), missing) => {
                let why = match missing {
                    Some(Params::Missing(why)) => why.clone(),
                    _ => "not looked up".into(),
                };
                return match source.not_found {
                    ParameterNotFoundAction::Allow => (Vec::new(), 0),
                    ParameterNotFoundAction::Deny => (
                        failed(format!(
                            "no params found for the policy: {} {} {}: {why}",
                            source.api_version, source.kind, source.name
                        )),
                        0,
                    ),
                };
            }
        };
        let Ok(env) = crate::env::env() else {
            return (failed("the CEL environment did not start".into()), 0);
        };
        let mut context = Context::with_env(env);
        context.add_variable_from_value("object", from_optional(candidate.object.as_ref()));
        context.add_variable_from_value("oldObject", from_optional(candidate.old_object.as_ref()));
        context.add_variable_from_value("params", params);
        context.add_variable_from_value("namespaceObject", from_optional(candidate.namespace_object.as_ref()));
        context.add_variable_from_value("request", request(candidate));
        let mut spent = 0u64;
        let mut run = |e: &Expression, context: &Context| -> Result<Value, String> {
            let (result, cost) = execute(e, context, PER_POLICY.saturating_sub(spent));
            spent = spent.saturating_add(cost);
            result
        };
        // As the API server: any condition false skips the object; otherwise an error fails it.
        let mut condition_error = None;
        for condition in &self.match_conditions {
            match run(&condition.expression, &context) {
                Ok(Value::Bool(true)) => {}
                Ok(Value::Bool(false)) => return (Vec::new(), spent),
                Ok(other) => {
                    condition_error.get_or_insert(format!(
                        "matchCondition {:?} returned {:?}, not a boolean",
                        condition.name,
                        other.type_of()
                    ));
                }
                Err(e) => {
                    condition_error
                        .get_or_insert(format!("matchCondition {:?} resulted in error: {e}", condition.name));
                }
            }
        }
        if let Some(error) = condition_error {
            return (failed(error), spent);
        }
        // Variables are put into the expressions that read them when compiled: none left here.
        context.add_variable_from_value(
            "variables",
            Value::Map(Map {
                map: Arc::new(HashMap::new()),
            }),
        );
        let mut verdicts = Vec::new();
        for validation in &self.validations {
            match run(&validation.expression, &context) {
                Ok(Value::Bool(true)) => {}
                Ok(Value::Bool(false)) => {
                    let message = validation
                        .message_expression
                        .as_ref()
                        .and_then(|m| match run(m, &context) {
                            Ok(Value::String(s)) if !s.trim().is_empty() && !s.contains('\n') => Some(s.to_string()),
                            _ => None,
                        })
                        .or_else(|| validation.message.clone())
                        .unwrap_or_else(|| format!("failed expression: {}", validation.expression.source));
                    verdicts.push(verdict(message, &validation.reason));
                }
                Ok(other) => verdicts.extend(failed(format!(
                    "expression '{}' returned {:?}, not a boolean",
                    validation.expression.source,
                    other.type_of()
                ))),
                Err(e) => verdicts.extend(failed(format!(
                    "expression '{}' resulted in error: {e}",
                    validation.expression.source
                ))),
            }
        }
        (verdicts, spent)
    }
}

/// Run one expression with at most `budget` cost; its result (an error over the budget) and cost.
fn execute(e: &Expression, context: &Context, budget: u64) -> (Result<Value, String>, u64) {
    let budget = budget.min(cost::PER_EXPRESSION);
    cost::start(budget);
    let result = Value::resolve(&e.expr, context);
    let (spent, over) = cost::finish();
    if over {
        return (
            Err(format!(
                "operation cancelled: actual cost limit exceeded (budget {budget})"
            )),
            spent,
        );
    }
    (result.map_err(|err| one_line(&err.to_string())), spent)
}

/// `request`, as much of Kubernetes' admission request as a sync has.
fn request(c: &Candidate) -> Value {
    let either = c.object.as_ref().or(c.old_object.as_ref());
    let field = |path: &str| {
        either
            .and_then(|o| o.pointer(path))
            .and_then(Json::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let r = &c.resource;
    from_json(&serde_json::json!({
        "operation": c.operation.as_str(),
        "name": field("/metadata/name"),
        "namespace": field("/metadata/namespace"),
        "kind": {"group": r.group, "version": r.version, "kind": r.kind},
        "resource": {"group": r.group, "version": r.version, "resource": r.resource},
        "dryRun": false,
    }))
}

/// Evaluate `policies` on `candidates` of a sync to `scope`; `params` holds each policy's params by
/// name (for those that have `paramKind`).
pub fn evaluate(
    policies: &[Arc<CompiledPolicy>],
    scope: &Scope,
    candidates: &[Candidate],
    params: &HashMap<String, Params>,
) -> Evaluation {
    let mut out = Evaluation::default();
    // Past the deadline every further charge fails: the evaluation stops itself (failing closed).
    cost::set_deadline(Some(std::time::Instant::now() + DEADLINE));
    for policy in policies.iter().filter(|p| p.in_scope(scope)) {
        for candidate in candidates.iter().filter(|c| policy.matches(c)) {
            let (verdicts, cost) = policy.judge(candidate, params.get(&policy.name));
            out.evaluated += 1;
            out.cost = out.cost.saturating_add(cost);
            out.verdicts.extend(verdicts);
        }
    }
    cost::set_deadline(None);
    out
}

//! A `Policy` compiled: its expressions parsed (and instrumented for the cost budget, see
//! [`crate::cost`]), its match rules and scope checked. Every mistake is collected, with the field
//! it is in, for the policy's status; a policy with mistakes fails what it matches (fail closed).

use capstan_api::Policy;
use capstan_api::policy::{FailurePolicy, ParameterNotFoundAction, ValidationAction};
use capstan_kube::Selector;
use std::collections::HashMap;

use cel::IdedExpr;
use cel::common::ast::{EntryExpr, Expr};
use kube::ResourceExt;

use crate::matching::Matcher;
use crate::{cost, env};

/// The longest expression accepted (Kubernetes' limit for a validation's expression).
pub const MAX_EXPRESSION_LENGTH: usize = 5 * 1024;
/// The deepest nesting of parentheses, brackets and braces accepted: the parser and the
/// interpreter recurse once per level.
pub const MAX_NESTING: usize = 32;

/// One compiled expression, with its source for messages.
#[derive(Debug, Clone)]
pub struct Expression {
    /// As written.
    pub source: String,
    /// Parsed, macros expanded, instrumented.
    pub(crate) expr: IdedExpr,
}

/// A named expression (`matchConditions[]`).
#[derive(Debug, Clone)]
pub struct Named {
    /// Its name.
    pub name: String,
    /// Its expression.
    pub expression: Expression,
}

/// One `validations[]` entry, compiled.
#[derive(Debug, Clone)]
pub struct CompiledValidation {
    /// The expression that must be true.
    pub expression: Expression,
    /// `message`.
    pub message: Option<String>,
    /// `messageExpression`.
    pub message_expression: Option<Expression>,
    /// `reason` (default `Invalid`).
    pub reason: String,
}

/// A policy ready to evaluate, or with the mistakes that make it fail what it matches.
#[derive(Debug, Clone)]
pub struct CompiledPolicy {
    /// The policy's name.
    pub name: String,
    /// The generation compiled.
    pub generation: Option<i64>,
    /// Its mistakes, each naming the field (empty: it compiled).
    pub errors: Vec<String>,
    /// `matchConstraints` (`None` when they are a mistake: then it matches every object in scope).
    pub matcher: Option<Matcher>,
    /// `matchConditions`.
    pub match_conditions: Vec<Named>,
    /// `validations`.
    pub validations: Vec<CompiledValidation>,
    /// `validationActions` (default `[Deny]`).
    pub actions: Vec<ValidationAction>,
    /// `failurePolicy` (default `Fail`).
    pub failure: FailurePolicy,
    /// `clusterSelector` (`None`: every cluster).
    pub cluster_selector: Option<Selector>,
    /// `projects` (empty: every project).
    pub projects: Vec<String>,
    /// `paramKind` as `(apiVersion, kind)` and `paramRef`'s name and not-found action.
    pub params: Option<ParamSource>,
}

/// Where a policy's `params` come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamSource {
    /// `paramKind.apiVersion`.
    pub api_version: String,
    /// `paramKind.kind`.
    pub kind: String,
    /// `paramRef.name`.
    pub name: String,
    /// `paramRef.parameterNotFoundAction` (default `Deny`).
    pub not_found: ParameterNotFoundAction,
}

/// The deepest an expression's tree may be, once its variables are put in (the interpreter
/// recurses once per level; chains of operators such as `1+1+…` are one level per operator).
pub const MAX_DEPTH: usize = 100;
/// The most nodes an expression's tree may have once its variables are put in (a variable used
/// twice in the next one, and so on, doubles at each step).
pub const MAX_NODES: usize = 20_000;

/// `source` parsed (macros expanded), or why it cannot be: empty, too long, nested too deep, not
/// CEL.
pub fn parse(source: &str, at: &str) -> Result<IdedExpr, String> {
    if source.trim().is_empty() {
        return Err(format!("{at}: the expression is empty"));
    }
    if source.len() > MAX_EXPRESSION_LENGTH {
        return Err(format!(
            "{at}: the expression is {} characters long, more than {MAX_EXPRESSION_LENGTH}",
            source.len()
        ));
    }
    if nesting(source) > MAX_NESTING {
        return Err(format!("{at}: the expression nests deeper than {MAX_NESTING} levels"));
    }
    let env = env::env()?;
    let (source, at_owned) = (source.to_string(), at.to_string());
    // The parser, and copying or dropping a tree, recurse once per level: a tree is bounded (with
    // a stack of its own) before it is copied, and all of it happens on a thread with a large
    // stack, so an expression at the limits cannot overflow the caller's.
    std::thread::Builder::new()
        .name("policy-compile".into())
        .stack_size(PARSE_STACK)
        .spawn(move || -> Result<IdedExpr, String> {
            let program = env
                .compile(&source)
                .map_err(|e| format!("{at_owned}: does not compile: {}", one_line(&e.to_string())))?;
            bounded(program.expression(), &at_owned)?;
            Ok(program.expression().clone())
        })
        .map_err(|e| format!("{at}: could not be compiled: {e}"))?
        .join()
        .map_err(|_| format!("{at}: the compiler failed"))?
}

/// The stack of the thread an expression is parsed on.
const PARSE_STACK: usize = 64 << 20;

/// The children of one node of a tree.
fn children(expr: &IdedExpr) -> Vec<&IdedExpr> {
    match &expr.expr {
        Expr::Call(c) => c.target.iter().map(|t| t.as_ref()).chain(c.args.iter()).collect(),
        Expr::Comprehension(c) => vec![&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result],
        Expr::List(l) => l.elements.iter().collect(),
        Expr::Map(m) => m
            .entries
            .iter()
            .flat_map(|e| match &e.expr {
                EntryExpr::MapEntry(e) => vec![&e.key, &e.value],
                EntryExpr::StructField(f) => vec![&f.value],
            })
            .collect(),
        Expr::Struct(s) => s
            .entries
            .iter()
            .flat_map(|e| match &e.expr {
                EntryExpr::MapEntry(e) => vec![&e.key, &e.value],
                EntryExpr::StructField(f) => vec![&f.value],
            })
            .collect(),
        Expr::Select(s) => vec![s.operand.as_ref()],
        _ => Vec::new(),
    }
}

/// Why `expr` is too deep or too large, if it is. Walked with a stack of its own, never recursion:
/// the tree is what may be too deep.
fn bounded(expr: &IdedExpr, at: &str) -> Result<(), String> {
    let mut stack = vec![(expr, 1usize)];
    let mut nodes = 0usize;
    while let Some((e, depth)) = stack.pop() {
        nodes += 1;
        if depth > MAX_DEPTH {
            return Err(format!("{at}: the expression is deeper than {MAX_DEPTH} levels"));
        }
        if nodes > MAX_NODES {
            return Err(format!(
                "{at}: the expression (with its variables) has more than {MAX_NODES} parts"
            ));
        }
        stack.extend(children(e).into_iter().map(|c| (c, depth + 1)));
    }
    Ok(())
}

/// `expr` with every `variables.NAME` of `known` replaced by that variable's expression (CEL has
/// no side effects, so this is what evaluating the variable first and reading it gives; and, as
/// Kubernetes does, a variable no expression reads is never evaluated).
fn inline(expr: &IdedExpr, known: &HashMap<String, IdedExpr>) -> IdedExpr {
    let mut out = expr.clone();
    let mut stack: Vec<&mut IdedExpr> = vec![&mut out];
    while let Some(e) = stack.pop() {
        if let Expr::Select(select) = &e.expr
            && !select.test
            && matches!(&select.operand.expr, Expr::Ident(v) if v == "variables")
            && let Some(value) = known.get(&select.field)
        {
            *e = value.clone();
            continue;
        }
        match &mut e.expr {
            Expr::Call(c) => {
                if let Some(t) = c.target.as_mut() {
                    stack.push(t.as_mut());
                }
                stack.extend(c.args.iter_mut());
            }
            Expr::Comprehension(c) => {
                let c = c.as_mut();
                stack.extend([
                    &mut c.iter_range,
                    &mut c.accu_init,
                    &mut c.loop_cond,
                    &mut c.loop_step,
                    &mut c.result,
                ]);
            }
            Expr::List(l) => stack.extend(l.elements.iter_mut()),
            Expr::Map(m) => {
                for entry in m.entries.iter_mut() {
                    match &mut entry.expr {
                        EntryExpr::MapEntry(me) => stack.extend([&mut me.key, &mut me.value]),
                        EntryExpr::StructField(f) => stack.push(&mut f.value),
                    }
                }
            }
            Expr::Struct(st) => {
                for entry in st.entries.iter_mut() {
                    match &mut entry.expr {
                        EntryExpr::MapEntry(me) => stack.extend([&mut me.key, &mut me.value]),
                        EntryExpr::StructField(f) => stack.push(&mut f.value),
                    }
                }
            }
            Expr::Select(s) => stack.push(s.operand.as_mut()),
            _ => {}
        }
    }
    out
}

/// `source` compiled with the variables `known` put in, bounded, and instrumented.
fn finish(source: &str, known: &HashMap<String, IdedExpr>, at: &str) -> Result<Expression, String> {
    let parsed = parse(source, at)?;
    let inlined = inline(&parsed, known);
    // Bounded before it is instrumented (which walks it recursively).
    bounded(&inlined, at)?;
    Ok(Expression {
        source: source.to_string(),
        expr: cost::instrument(&inlined),
    })
}

/// Why `source` cannot be compiled, or its compiled form (with no variables).
pub fn expression(source: &str, at: &str) -> Result<Expression, String> {
    finish(source, &HashMap::new(), at)
}

/// The deepest nesting of `(`, `[` and `{` outside string literals.
fn nesting(src: &str) -> usize {
    let (mut depth, mut deepest, mut quote, mut escaped) = (0usize, 0usize, None, false);
    for c in src.chars() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '\'' | '"' => quote = Some(c),
            '(' | '[' | '{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// `s` on one line (parse errors print the source and a caret under it).
pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Compile `policy`; its mistakes are in [`CompiledPolicy::errors`].
pub fn compile(policy: &Policy) -> CompiledPolicy {
    let spec = &policy.spec;
    let mut errors = Vec::new();
    let mut match_conditions = Vec::new();
    for (i, c) in spec.match_conditions.iter().enumerate() {
        match expression(&c.expression, &format!("spec.matchConditions[{i}] ({})", c.name)) {
            Ok(expression) => match_conditions.push(Named {
                name: c.name.clone(),
                expression,
            }),
            Err(e) => errors.push(e),
        }
    }
    // Each variable with the ones before it put in; the expressions below read them so.
    let mut known: HashMap<String, IdedExpr> = HashMap::new();
    for (i, v) in spec.variables.iter().enumerate() {
        let at = format!("spec.variables[{i}] ({})", v.name);
        let parsed = match parse(&v.expression, &at) {
            Ok(p) => p,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let inlined = inline(&parsed, &known);
        if let Err(e) = bounded(&inlined, &at) {
            errors.push(e);
            continue;
        }
        known.insert(v.name.clone(), inlined);
    }
    let mut keep = |r: Result<Expression, String>| match r {
        Ok(e) => Some(e),
        Err(e) => {
            errors.push(e);
            None
        }
    };
    let validations = spec
        .validations
        .iter()
        .enumerate()
        .filter_map(|(i, v)| {
            let at = format!("spec.validations[{i}]");
            let message_expression = v
                .message_expression
                .as_deref()
                .and_then(|m| keep(finish(m, &known, &format!("{at}.messageExpression"))));
            Some(CompiledValidation {
                expression: keep(finish(&v.expression, &known, &format!("{at}.expression")))?,
                message: v.message.clone().filter(|m| !m.is_empty()),
                message_expression,
                reason: v.reason.clone().unwrap_or_else(|| "Invalid".into()),
            })
        })
        .collect();
    if spec.validations.is_empty() {
        errors.push("spec.validations: at least one validation is required".into());
    }
    let mut actions = spec.validation_actions.clone();
    actions.sort();
    actions.dedup();
    if actions.is_empty() {
        actions.push(ValidationAction::Deny);
    }
    if actions.contains(&ValidationAction::Deny) && actions.contains(&ValidationAction::Warn) {
        errors.push("spec.validationActions: Deny and Warn may not be used together".into());
    }
    let matcher = match Matcher::new(spec.match_constraints.as_ref()) {
        Ok(m) => Some(m),
        Err(e) => {
            errors.push(e);
            None
        }
    };
    let cluster_selector = match &spec.cluster_selector {
        Some(s) => match Selector::new(s) {
            Ok(s) => Some(s),
            Err(e) => {
                errors.push(format!("spec.clusterSelector: {e}"));
                // Fail closed: a selector that cannot be read selects every cluster.
                None
            }
        },
        None => None,
    };
    let params = match (&spec.param_kind, &spec.param_ref) {
        (None, None) => None,
        (Some(kind), Some(reference)) => {
            let (api_version, kind) = (
                kind.api_version.clone().unwrap_or_default(),
                kind.kind.clone().unwrap_or_default(),
            );
            if api_version.is_empty() || kind.is_empty() || reference.name.is_empty() {
                errors.push("spec.paramKind needs apiVersion and kind, spec.paramRef a name".into());
                None
            } else {
                Some(ParamSource {
                    api_version,
                    kind,
                    name: reference.name.clone(),
                    not_found: reference
                        .parameter_not_found_action
                        .unwrap_or(ParameterNotFoundAction::Deny),
                })
            }
        }
        (Some(_), None) => {
            errors.push("spec.paramKind is set but spec.paramRef is not".into());
            None
        }
        (None, Some(_)) => {
            errors.push("spec.paramRef is set but spec.paramKind is not".into());
            None
        }
    };
    CompiledPolicy {
        name: policy.name_any(),
        generation: policy.metadata.generation,
        errors,
        matcher,
        match_conditions,
        validations,
        actions,
        failure: spec.failure_policy.unwrap_or(FailurePolicy::Fail),
        cluster_selector,
        projects: spec.projects.clone(),
        params,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_skips_string_literals() {
        assert_eq!(nesting("a.all(x, (x > 1))"), 2);
        assert_eq!(nesting("'((((' == x"), 0);
        assert_eq!(nesting(&"(".repeat(40)), 40);
    }
}

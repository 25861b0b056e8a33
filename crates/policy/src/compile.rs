//! A `Policy` compiled: its expressions parsed (and instrumented for the cost budget, see
//! [`crate::cost`]), its match rules and scope checked. Every mistake is collected, with the field
//! it is in, for the policy's status; a policy with mistakes fails what it matches (fail closed).

use capstan_api::Policy;
use capstan_api::policy::{FailurePolicy, ParameterNotFoundAction, ValidationAction};
use capstan_kube::Selector;
use cel::IdedExpr;
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

/// A named expression (`matchConditions[]`, `variables[]`).
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
    /// `variables`.
    pub variables: Vec<Named>,
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

/// Why `source` cannot be compiled, or its compiled form.
pub fn expression(source: &str, at: &str) -> Result<Expression, String> {
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
    let program = env
        .compile(source)
        .map_err(|e| format!("{at}: does not compile: {}", one_line(&e.to_string())))?;
    Ok(Expression {
        source: source.to_string(),
        expr: cost::instrument(program.expression()),
    })
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
    let mut keep = |r: Result<Expression, String>| match r {
        Ok(e) => Some(e),
        Err(e) => {
            errors.push(e);
            None
        }
    };
    let match_conditions = spec
        .match_conditions
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let at = format!("spec.matchConditions[{i}] ({})", c.name);
            Some(Named {
                name: c.name.clone(),
                expression: keep(expression(&c.expression, &at))?,
            })
        })
        .collect();
    let variables = spec
        .variables
        .iter()
        .enumerate()
        .filter_map(|(i, v)| {
            let at = format!("spec.variables[{i}] ({})", v.name);
            Some(Named {
                name: v.name.clone(),
                expression: keep(expression(&v.expression, &at))?,
            })
        })
        .collect();
    let validations = spec
        .validations
        .iter()
        .enumerate()
        .filter_map(|(i, v)| {
            let at = format!("spec.validations[{i}]");
            let message_expression = v
                .message_expression
                .as_deref()
                .and_then(|m| keep(expression(m, &format!("{at}.messageExpression"))));
            Some(CompiledValidation {
                expression: keep(expression(&v.expression, &format!("{at}.expression")))?,
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
        variables,
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

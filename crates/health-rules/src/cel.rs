//! Flux's `healthCheckExprs`, evaluated with the `cel` crate (a maintained CEL implementation with
//! the standard macros, optional fields such as `status.?conditions`, and the strings extension; not
//! the lists extension, whose `lists.range` builds lists of any size).
//!
//! As in Flux's kustomize-controller, each expression sees the object's top-level fields as variables
//! (`metadata`, `spec`, `status`, …). An object whose `status.observedGeneration` is behind
//! `metadata.generation` is Progressing before any expression runs. Then `inProgress` (optional) true
//! → Progressing, `failed` (optional) true → Degraded, `current` true → Healthy, and otherwise
//! Progressing. An expression that errors at run time (a missing field without `has()`) or answers
//! something other than a boolean makes the object Unknown with the error; Flux would keep waiting
//! silently, which hides the mistake. A comprehension nested in another one's arguments is refused
//! when the rule is read, and each evaluation runs on a thread of its own (module `bounded`).

use std::sync::{Arc, LazyLock};

use capstan_health::{Health, HealthCode};
use cel::{Context, Env, Program};
use serde_json::Value;

use crate::bounded::{self, Quarantine};

/// The environment every expression is compiled and run in: the standard library and macros, plus the
/// strings extension Kubernetes' CEL also offers.
static ENV: LazyLock<Result<Arc<Env>, String>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    env.add_extension(cel::extensions::strings)
        .map_err(|e| format!("{e:?}"))?;
    Ok(Arc::new(env))
});

/// The comprehension macros: each runs its body once per element.
const COMPREHENSIONS: &[&str] = &["all", "exists", "exists_one", "map", "filter"];

/// Why `src` nests a comprehension in another one's arguments, if it does: the cost would grow with
/// the product of two lists' lengths, which CEL cannot interrupt. Chains are fine. A scan of the
/// text (string literals skipped) is enough for the macros' call syntax.
fn nested_comprehension(src: &str) -> Option<String> {
    let chars: Vec<char> = src.chars().collect();
    // One entry per open parenthesis: whether it opened a comprehension's arguments.
    let mut open: Vec<bool> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' || c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
        } else if c == '(' {
            let start = chars[..i]
                .iter()
                .rposition(|c| !(c.is_alphanumeric() || *c == '_'))
                .map_or(0, |p| p + 1);
            let word: String = chars[start..i].iter().collect();
            let comprehension = COMPREHENSIONS.contains(&word.as_str());
            if comprehension && open.iter().any(|&o| o) {
                return Some(format!("{word}(…) inside another comprehension's arguments"));
            }
            open.push(comprehension);
        } else if c == ')' {
            open.pop();
        }
        i += 1;
    }
    None
}

/// One entry of `healthCheckExprs`, compiled.
#[derive(Debug)]
pub struct CelRule {
    /// The ConfigMap key and index it came from, for messages.
    key: String,
    programs: Arc<Programs>,
    quarantine: Quarantine,
}

/// The compiled expressions of one rule.
#[derive(Debug)]
struct Programs {
    current: Program,
    in_progress: Option<Program>,
    failed: Option<Program>,
}

/// Which expression of a rule.
#[derive(Debug, Clone, Copy)]
enum Which {
    InProgress,
    Failed,
    Current,
}

impl Which {
    fn name(self) -> &'static str {
        match self {
            Which::InProgress => "inProgress",
            Which::Failed => "failed",
            Which::Current => "current",
        }
    }
}

impl CelRule {
    /// A rule from its three expressions (`current` required), each checked to compile.
    pub fn new(key: &str, current: &str, in_progress: Option<&str>, failed: Option<&str>) -> Result<CelRule, String> {
        let env = ENV
            .as_ref()
            .map_err(|e| format!("the CEL environment did not start: {e}"))?;
        let compile = |which: Which, src: &str| {
            if let Some(nested) = nested_comprehension(src) {
                return Err(format!("{} is refused: {nested} (its cost has no bound)", which.name()));
            }
            env.compile(src)
                .map_err(|e| format!("{} does not compile: {}", which.name(), one_line(&e.to_string())))
        };
        if current.trim().is_empty() {
            return Err("current is required".into());
        }
        Ok(CelRule {
            key: key.to_string(),
            programs: Arc::new(Programs {
                current: compile(Which::Current, current)?,
                in_progress: in_progress.map(|s| compile(Which::InProgress, s)).transpose()?,
                failed: failed.map(|s| compile(Which::Failed, s)).transpose()?,
            }),
            quarantine: Quarantine::default(),
        })
    }

    /// The rule's verdict on `obj`; Unknown with the reason when an expression fails. Run on a thread
    /// of its own, waited for at most [`crate::lua::WAIT_LIMIT`].
    pub fn assess(&self, obj: &Value) -> Health {
        let (programs, obj) = (self.programs.clone(), obj.clone());
        let answer = bounded::run(crate::lua::WAIT_LIMIT, &self.quarantine, move || programs.run(&obj));
        match answer.and_then(|a| a) {
            Ok(health) => health,
            Err(message) => Health::new(
                HealthCode::Unknown,
                format!("custom health rule {}: {message}", self.key),
            ),
        }
    }
}

impl Programs {
    fn run(&self, obj: &Value) -> Result<Health, String> {
        if let Some(behind) = generation_behind(obj) {
            return Ok(Health::new(HealthCode::Progressing, behind));
        }
        let env = ENV
            .as_ref()
            .map_err(|e| format!("the CEL environment did not start: {e}"))?;
        let Some(fields) = obj.as_object() else {
            return Err("not a Kubernetes object".into());
        };
        let mut context = Context::with_env(env.clone());
        for (name, value) in fields {
            let value = cel::to_value(value).map_err(|e| format!("field {name} cannot be read: {e}"))?;
            context.add_variable_from_value(name.as_str(), value);
        }
        let eval = |which: Which, program: &Program| match program.execute(&context) {
            Ok(cel::Value::Bool(b)) => Ok(b),
            // The type only: the value could be a Secret's data.
            Ok(other) => Err(format!(
                "{} evaluated to a {:?}, not a boolean",
                which.name(),
                other.type_of()
            )),
            Err(e) => Err(format!("{} failed: {}", which.name(), one_line(&e.to_string()))),
        };
        if let Some(p) = &self.in_progress
            && eval(Which::InProgress, p)?
        {
            return Ok(Health::new(HealthCode::Progressing, "inProgress expression is true"));
        }
        if let Some(p) = &self.failed
            && eval(Which::Failed, p)?
        {
            return Ok(Health::new(HealthCode::Degraded, "failed expression is true"));
        }
        if eval(Which::Current, &self.current)? {
            return Ok(Health::new(HealthCode::Healthy, ""));
        }
        Ok(Health::new(
            HealthCode::Progressing,
            "current expression is not true yet",
        ))
    }
}

/// Why the object's status is older than its spec, when it is (kstatus' generic check, which Flux runs
/// before the expressions).
fn generation_behind(obj: &Value) -> Option<String> {
    let generation = obj.pointer("/metadata/generation")?.as_i64()?;
    let observed = obj.pointer("/status/observedGeneration")?.as_i64()?;
    (observed < generation)
        .then(|| format!("status.observedGeneration {observed} is behind metadata.generation {generation}"))
}

/// `s` on one line (parse errors print the source and a caret under it).
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::nested_comprehension;

    #[test]
    fn nested_comprehensions_are_found_and_chains_are_not() {
        for ok in [
            "status.conditions.filter(e, e.type == 'Ready').all(e, e.status == 'True')",
            "has(status.x) && size(status.conditions) > 0",
            "status.?conditions.orValue([]).exists(c, c.type == 'all(' && c.status == 'True')",
        ] {
            assert_eq!(nested_comprehension(ok), None, "{ok}");
        }
        for nested in [
            "a.all(x, b.exists(y, x == y))",
            "a.map(x, [1, 2].filter(y, y > x))",
            "a.exists(x, (b.all(y, true)))",
        ] {
            assert!(nested_comprehension(nested).is_some(), "{nested}");
        }
    }
}

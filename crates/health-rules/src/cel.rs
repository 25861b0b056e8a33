//! Flux's `healthCheckExprs`, evaluated with the `cel` crate (a maintained CEL implementation with
//! the standard macros, optional fields such as `status.?conditions`, and the strings and lists
//! extensions).
//!
//! As in Flux's kustomize-controller, each expression sees the object's top-level fields as variables
//! (`metadata`, `spec`, `status`, …). An object whose `status.observedGeneration` is behind
//! `metadata.generation` is Progressing before any expression runs. Then `inProgress` (optional) true
//! → Progressing, `failed` (optional) true → Degraded, `current` true → Healthy, and otherwise
//! Progressing. An expression that errors at run time (a missing field without `has()`) or answers
//! something other than a boolean makes the object Unknown with the error; Flux would keep waiting
//! silently, which hides the mistake.

use std::sync::{Arc, LazyLock};

use capstan_health::{Health, HealthCode};
use cel::{Context, Env, Program};
use serde_json::Value;

/// The environment every expression is compiled and run in: the standard library and macros, plus the
/// strings and lists extensions Kubernetes' CEL also offers.
static ENV: LazyLock<Result<Arc<Env>, String>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    env.add_extension(cel::extensions::strings)
        .map_err(|e| format!("{e:?}"))?;
    env.add_extension(cel::extensions::lists)
        .map_err(|e| format!("{e:?}"))?;
    Ok(Arc::new(env))
});

/// One entry of `healthCheckExprs`, compiled.
#[derive(Debug)]
pub struct CelRule {
    /// The ConfigMap key and index it came from, for messages.
    key: String,
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
            env.compile(src)
                .map_err(|e| format!("{} does not compile: {}", which.name(), one_line(&e.to_string())))
        };
        if current.trim().is_empty() {
            return Err("current is required".into());
        }
        Ok(CelRule {
            key: key.to_string(),
            current: compile(Which::Current, current)?,
            in_progress: in_progress.map(|s| compile(Which::InProgress, s)).transpose()?,
            failed: failed.map(|s| compile(Which::Failed, s)).transpose()?,
        })
    }

    /// The rule's verdict on `obj`; Unknown with the reason when an expression fails.
    pub fn assess(&self, obj: &Value) -> Health {
        match self.run(obj) {
            Ok(health) => health,
            Err(message) => Health::new(
                HealthCode::Unknown,
                format!("custom health rule {}: {message}", self.key),
            ),
        }
    }

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
            Ok(other) => Err(format!("{} evaluated to {other:?}, not a boolean", which.name())),
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

//! Evaluating Jsonnet files with `rsjsonnet-lang`, inside the Jsonnet worker process (see
//! [`super`]): the files of one render, with their top-level arguments, external variables and library
//! paths, each `import`, `importstr` and `importbin` resolved with [`crate::resolve_in_repo`]. No
//! native function is registered, and the standard library of `rsjsonnet-lang` has nothing that
//! reads the environment, the clock or files.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rsjsonnet_lang::arena::Arena;
use rsjsonnet_lang::interner::InternedStr;
use rsjsonnet_lang::lexer::LexError;
use rsjsonnet_lang::parser::{ActualToken, ExpectedToken, ParseError};
use rsjsonnet_lang::program::{
    AnalyzeError, Callbacks, EvalError, EvalErrorKind, EvalStackTraceItem, ImportError, LoadError, NativeError,
    Program, Thunk, Value,
};
use rsjsonnet_lang::span::{SourceId, SpanContext, SpanId};
use rsjsonnet_lang::token::STokenKind;

use super::{JsonnetJob, Var};
use crate::paths::resolve_in_repo;

/// Deepest Jsonnet call stack (the evaluator is not recursive: this bounds its own stack, not Rust's).
pub const MAX_STACK: usize = 500;

/// Largest file `import`, `importstr` or `importbin` reads.
const MAX_IMPORT_BYTES: u64 = 32 * 1024 * 1024;

/// Why evaluating a job failed: a message naming the file (and line where known).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct EvalFailure(pub String);

/// Evaluate every file of `job`; returns each file's value as JSON, in the job's order.
pub fn evaluate(job: &JsonnetJob) -> Result<Vec<serde_json::Value>, EvalFailure> {
    let arena = Arena::new();
    let mut program = Program::new(&arena);
    program.set_max_stack(MAX_STACK);
    let mut host = Host {
        root: job.root.clone(),
        libs: Vec::new(),
        sources: HashMap::new(),
        loaded: HashMap::new(),
        import_error: None,
    };
    for lib in &job.libs {
        let dir = resolve_in_repo(&job.root, &job.root, lib)
            .map_err(|e| EvalFailure(format!("spec.source.directory.jsonnet.libs {lib:?}: {e}")))?;
        host.libs.push(dir);
    }
    let mut seen = std::collections::HashSet::new();
    for var in &job.ext_vars {
        if !seen.insert(var.name.as_str()) {
            return Err(EvalFailure(format!(
                "spec.source.directory.jsonnet.extVars: {:?} is given twice",
                var.name
            )));
        }
        let thunk = host.var_thunk(&mut program, "extVar", var)?;
        let name = program.intern_str(&var.name);
        program.add_ext_var(name, &thunk);
    }
    let mut tlas: Vec<(InternedStr<'_>, Thunk<'_>)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for var in &job.tlas {
        if !seen.insert(var.name.as_str()) {
            return Err(EvalFailure(format!(
                "spec.source.directory.jsonnet.tlas: {:?} is given twice",
                var.name
            )));
        }
        let thunk = host.var_thunk(&mut program, "tla", var)?;
        tlas.push((program.intern_str(&var.name), thunk));
    }

    let mut results = Vec::with_capacity(job.files.len());
    for file in &job.files {
        let path = resolve_in_repo(&job.root, &job.root, file).map_err(|e| EvalFailure(e.to_string()))?;
        let thunk = host.load_file(&mut program, &path, file)?;
        let value = program
            .eval_value(&thunk, &mut host)
            .map_err(|e| host.eval_failure(&program, file, &e))?;
        let value = if value.is_function() {
            program
                .eval_call(&thunk, &[], &tlas, &mut host)
                .map_err(|e| host.eval_failure(&program, file, &e))?
        } else {
            value
        };
        let json = program
            .manifest_json(&value, false)
            .map_err(|e| host.eval_failure(&program, file, &e))?;
        let json: serde_json::Value = serde_json::from_str(&json)
            .map_err(|e| EvalFailure(format!("{file}: the evaluated output is not JSON: {e}")))?;
        results.push(json);
    }
    Ok(results)
}

/// A loaded source: its name for messages (the path relative to the repository root, or
/// `<extVar NAME>`), its directory for relative imports, and its text for line numbers.
struct Source {
    name: String,
    dir: Option<PathBuf>,
    text: Vec<u8>,
}

/// The evaluator's callbacks: imports confined to the repository, no native functions.
struct Host<'p> {
    root: PathBuf,
    libs: Vec<PathBuf>,
    sources: HashMap<SourceId, Source>,
    /// Files already loaded, by canonical path: each is parsed once and shared by its importers.
    loaded: HashMap<PathBuf, Thunk<'p>>,
    /// Why the last import failed (the evaluator's own error carries only the path).
    import_error: Option<String>,
}

impl<'p> Host<'p> {
    fn var_thunk(&mut self, program: &mut Program<'p>, what: &str, var: &Var) -> Result<Thunk<'p>, EvalFailure> {
        if !var.code {
            return Ok(program.value_to_thunk(&Value::string(&var.value)));
        }
        let name = format!("<{what} {}>", var.name);
        self.load_source(program, var.value.as_bytes().to_vec(), name, None)
    }

    fn load_file(&mut self, program: &mut Program<'p>, path: &Path, name: &str) -> Result<Thunk<'p>, EvalFailure> {
        if let Some(thunk) = self.loaded.get(path) {
            return Ok(thunk.clone());
        }
        let text = read_limited(path).map_err(|e| EvalFailure(format!("{name}: {e}")))?;
        let thunk = self.load_source(program, text, name.to_string(), path.parent().map(Path::to_path_buf))?;
        self.loaded.insert(path.to_path_buf(), thunk.clone());
        Ok(thunk)
    }

    fn load_source(
        &mut self,
        program: &mut Program<'p>,
        text: Vec<u8>,
        name: String,
        dir: Option<PathBuf>,
    ) -> Result<Thunk<'p>, EvalFailure> {
        let (ctx, id) = program.span_manager_mut().insert_source_context(text.len());
        let result = program.load_source(ctx, &text, true, &name);
        self.sources.insert(id, Source { name, dir, text });
        result.map_err(|e| {
            let (span, message) = describe_load_error(&e);
            EvalFailure(format!("{}: {message}", self.locate(program, span)))
        })
    }

    /// `file:line:column` of a span.
    fn locate(&self, program: &Program<'p>, span: SpanId) -> String {
        let (ctx, start, _) = program.span_manager().get_span(span);
        let SpanContext::Source(id) = program.span_manager().get_context(ctx);
        match self.sources.get(id) {
            Some(source) => {
                let before = &source.text[..start.min(source.text.len())];
                let line = before.iter().filter(|b| **b == b'\n').count() + 1;
                let column = before.iter().rev().take_while(|b| **b != b'\n').count() + 1;
                format!("{}:{line}:{column}", source.name)
            }
            None => "<std>".to_string(),
        }
    }

    fn eval_failure(&mut self, program: &Program<'p>, file: &str, error: &EvalError) -> EvalFailure {
        let message = describe_eval_error(&error.kind);
        let location = span_of_eval_error(&error.kind)
            .or_else(|| error.stack_trace.iter().find_map(trace_span))
            .map(|span| self.locate(program, span))
            .unwrap_or_else(|| file.to_string());
        let message = match (&error.kind, self.import_error.take()) {
            (EvalErrorKind::ImportFailed { .. }, Some(why)) => format!("{message}: {why}"),
            _ => message,
        };
        EvalFailure(format!("{location}: {message}"))
    }

    /// The file an import names: relative to the importing file's directory, then to each library
    /// path, confined to the repository. Errors are kept for the message.
    fn find(&mut self, program: &Program<'p>, from: SpanId, path: &str) -> Result<(PathBuf, String), ImportError> {
        let (ctx, _, _) = program.span_manager().get_span(from);
        let SpanContext::Source(id) = program.span_manager().get_context(ctx);
        let (importer, dir) = match self.sources.get(id) {
            Some(source) => (
                source.name.clone(),
                source.dir.clone().unwrap_or_else(|| self.root.clone()),
            ),
            None => ("<std>".to_string(), self.root.clone()),
        };
        let mut first_error = None;
        for base in std::iter::once(dir).chain(self.libs.iter().cloned()) {
            match resolve_in_repo(&self.root, &base, path) {
                Ok(found) if found.is_file() => {
                    let name = found
                        .strip_prefix(&self.root)
                        .map(|p| p.display().to_string())
                        .unwrap_or_else(|_| path.to_string());
                    return Ok((found, name));
                }
                Ok(_) => {}
                Err(crate::RenderError::NotFound { .. }) => {}
                Err(e) => {
                    first_error.get_or_insert_with(|| e.to_string());
                }
            }
        }
        self.import_error = Some(
            first_error
                .unwrap_or_else(|| format!("not found next to {importer} or in spec.source.directory.jsonnet.libs")),
        );
        Err(ImportError)
    }

    fn read_import(&mut self, program: &Program<'p>, from: SpanId, path: &str) -> Result<Vec<u8>, ImportError> {
        let (found, name) = self.find(program, from, path)?;
        read_limited(&found).map_err(|e| {
            self.import_error = Some(format!("{name}: {e}"));
            ImportError
        })
    }
}

impl<'p> Callbacks<'p> for Host<'p> {
    fn import(&mut self, program: &mut Program<'p>, from: SpanId, path: &str) -> Result<Thunk<'p>, ImportError> {
        let (found, name) = self.find(program, from, path)?;
        self.load_file(program, &found, &name).map_err(|e| {
            self.import_error = Some(e.0);
            ImportError
        })
    }

    fn import_str(&mut self, program: &mut Program<'p>, from: SpanId, path: &str) -> Result<String, ImportError> {
        let bytes = self.read_import(program, from, path)?;
        String::from_utf8(bytes).map_err(|_| {
            self.import_error = Some(format!("importstr {path:?}: the file is not UTF-8 text"));
            ImportError
        })
    }

    fn import_bin(&mut self, program: &mut Program<'p>, from: SpanId, path: &str) -> Result<Vec<u8>, ImportError> {
        self.read_import(program, from, path)
    }

    fn trace(&mut self, _program: &mut Program<'p>, _message: &str, _stack: &[EvalStackTraceItem]) {
        // `std.trace` output is dropped: the worker's standard error is the render's error message.
    }

    fn native_call(
        &mut self,
        _program: &mut Program<'p>,
        _name: InternedStr<'p>,
        _args: &[Value<'p>],
    ) -> Result<Value<'p>, NativeError> {
        // None is registered, so `std.native(name)` never yields a callable function.
        Err(NativeError)
    }
}

fn read_limited(path: &Path) -> Result<Vec<u8>, String> {
    let size = std::fs::metadata(path).map(|m| m.len()).map_err(|e| e.to_string())?;
    if size > MAX_IMPORT_BYTES {
        return Err(format!(
            "{size} bytes, more than the {MAX_IMPORT_BYTES} bytes a Jsonnet file may have"
        ));
    }
    std::fs::read(path).map_err(|e| e.to_string())
}

fn trace_span(item: &EvalStackTraceItem) -> Option<SpanId> {
    match item {
        EvalStackTraceItem::Expr { span } | EvalStackTraceItem::Import { span } => Some(*span),
        EvalStackTraceItem::Variable { span, .. } => Some(*span),
        EvalStackTraceItem::Call { span, .. }
        | EvalStackTraceItem::ArrayItem { span, .. }
        | EvalStackTraceItem::ObjectField { span, .. } => *span,
        _ => None,
    }
}

fn span_of_eval_error(kind: &EvalErrorKind) -> Option<SpanId> {
    match kind {
        EvalErrorKind::AssertFailed { span, .. }
        | EvalErrorKind::ExplicitError { span, .. }
        | EvalErrorKind::ImportFailed { span, .. }
        | EvalErrorKind::UnknownObjectField { span, .. } => Some(*span),
        EvalErrorKind::UnknownCallParam { span, .. }
        | EvalErrorKind::CallParamNotBound { span, .. }
        | EvalErrorKind::TooManyCallArgs { span, .. }
        | EvalErrorKind::InvalidBinaryOpTypes { span, .. }
        | EvalErrorKind::Other { span, .. } => *span,
        _ => None,
    }
}

fn describe_eval_error(kind: &EvalErrorKind) -> String {
    match kind {
        EvalErrorKind::StackOverflow => format!("stack overflow: more than {MAX_STACK} nested calls"),
        EvalErrorKind::InfiniteRecursion => "infinite recursion".to_string(),
        EvalErrorKind::ExplicitError { message, .. } => format!("error: {message}"),
        EvalErrorKind::AssertFailed { message, .. } => match message {
            Some(message) => format!("assertion failed: {message}"),
            None => "assertion failed".to_string(),
        },
        EvalErrorKind::ImportFailed { path, .. } => format!("cannot import {path:?}"),
        EvalErrorKind::UnknownExtVar { name } => format!("undefined external variable {name:?}"),
        EvalErrorKind::ManifestFunction => "a function cannot be turned into JSON".to_string(),
        EvalErrorKind::NativeCallFailed => "native functions are not available".to_string(),
        EvalErrorKind::UnknownObjectField { field_name, .. } => format!("field {field_name:?} does not exist"),
        EvalErrorKind::UnknownCallParam { param_name, .. } => {
            format!("the function has no parameter {param_name:?} (a top-level argument it does not declare?)")
        }
        EvalErrorKind::CallParamNotBound { param_name, .. } => {
            format!("parameter {param_name:?} is not given (a top-level argument without a default?)")
        }
        EvalErrorKind::TooManyCallArgs { num_params, .. } => {
            format!("too many arguments: the function takes {num_params}")
        }
        EvalErrorKind::InvalidBinaryOpTypes {
            op, lhs_type, rhs_type, ..
        } => format!("operator {op:?} cannot take {lhs_type:?} and {rhs_type:?}"),
        EvalErrorKind::InvalidStdFuncArgType {
            func_name,
            arg_index,
            expected_types,
            got_type,
        } => format!(
            "std.{func_name}: argument {} must be {expected_types:?}, not {got_type:?}",
            arg_index + 1
        ),
        EvalErrorKind::Other { message, .. } => message.clone(),
        other => format!("evaluation error: {other:?}"),
    }
}

fn describe_load_error(error: &LoadError) -> (SpanId, String) {
    match error {
        LoadError::Lex(e) => {
            let span = match e {
                LexError::InvalidChar { span, .. }
                | LexError::InvalidUtf8 { span, .. }
                | LexError::UnfinishedMultilineComment { span }
                | LexError::LeadingZeroInNumber { span }
                | LexError::MissingFracDigits { span }
                | LexError::MissingExpDigits { span }
                | LexError::MissingDigitAfterUnderscore { span }
                | LexError::ExpOverflow { span }
                | LexError::InvalidEscapeInString { span, .. }
                | LexError::IncompleteUnicodeEscape { span }
                | LexError::InvalidUtf16EscapeSequence { span, .. }
                | LexError::UnfinishedString { span }
                | LexError::MissingLineBreakAfterTextBlockStart { span }
                | LexError::MissingWhitespaceTextBlockStart { span }
                | LexError::InvalidTextBlockTermination { span } => *span,
            };
            (span, format!("syntax error: {e:?}"))
        }
        LoadError::Parse(ParseError::Expected {
            span,
            expected,
            instead,
        }) => {
            let expected: Vec<String> = expected.iter().map(expected_token).collect();
            (
                *span,
                format!(
                    "syntax error: expected {}, found {}",
                    expected.join(" or "),
                    actual_token(instead)
                ),
            )
        }
        LoadError::Analyze(e) => {
            let span = match e {
                AnalyzeError::UnknownVariable { span, .. }
                | AnalyzeError::TextBlockAsImportPath { span }
                | AnalyzeError::ComputedImportPath { span } => *span,
                AnalyzeError::SelfOutsideObject { self_span } => *self_span,
                AnalyzeError::SuperOutsideObject { super_span } => *super_span,
                AnalyzeError::DollarOutsideObject { dollar_span } => *dollar_span,
                AnalyzeError::RepeatedLocalName { repeated_span, .. }
                | AnalyzeError::RepeatedFieldName { repeated_span, .. }
                | AnalyzeError::RepeatedParamName { repeated_span, .. } => *repeated_span,
                AnalyzeError::PositionalArgAfterNamed { arg_span } => *arg_span,
            };
            let message = match e {
                AnalyzeError::UnknownVariable { name, .. } => format!("unknown variable {name:?}"),
                other => format!("{other:?}"),
            };
            (span, message)
        }
    }
}

fn expected_token(token: &ExpectedToken) -> String {
    match token {
        ExpectedToken::EndOfFile => "the end of the file".to_string(),
        ExpectedToken::Simple(kind) => simple_token(*kind),
        ExpectedToken::Ident => "an identifier".to_string(),
        ExpectedToken::Number => "a number".to_string(),
        ExpectedToken::String => "a string".to_string(),
        ExpectedToken::TextBlock => "a text block".to_string(),
        ExpectedToken::Expr => "an expression".to_string(),
        ExpectedToken::BinaryOp => "an operator".to_string(),
    }
}

fn actual_token(token: &ActualToken) -> String {
    match token {
        ActualToken::EndOfFile => "the end of the file".to_string(),
        ActualToken::Simple(kind) => simple_token(*kind),
        ActualToken::OtherOp(op) => format!("operator {op:?}"),
        ActualToken::Ident(name) => format!("identifier {name:?}"),
        ActualToken::Number => "a number".to_string(),
        ActualToken::String => "a string".to_string(),
        ActualToken::TextBlock => "a text block".to_string(),
    }
}

/// A keyword (`keyword local`) or a symbol by its name (`'Comma'`): the crate has no public spelling
/// of its tokens. Keywords come first in its token order, up to `true`.
fn simple_token(kind: STokenKind) -> String {
    match kind {
        STokenKind::Self_ => "keyword self".to_string(),
        kind if kind <= STokenKind::True => format!("keyword {}", format!("{kind:?}").to_lowercase()),
        kind => format!("'{kind:?}'"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(root: &Path, files: &[&str]) -> JsonnetJob {
        JsonnetJob {
            root: root.to_path_buf(),
            files: files.iter().map(|f| f.to_string()).collect(),
            tlas: Vec::new(),
            ext_vars: Vec::new(),
            libs: Vec::new(),
            timeout_secs: 0,
        }
    }

    #[test]
    fn evaluates_and_calls_functions_with_tlas() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(
            root.join("a.jsonnet"),
            "function(n, m=2) { n: n, m: m, e: std.extVar('e') }",
        )
        .unwrap();
        let mut j = job(&root, &["a.jsonnet"]);
        j.tlas.push(Var {
            name: "n".into(),
            value: "1 + 1".into(),
            code: true,
        });
        j.ext_vars.push(Var {
            name: "e".into(),
            value: "x".into(),
            code: false,
        });
        let out = evaluate(&j).unwrap();
        assert_eq!(out, vec![serde_json::json!({"n": 2, "m": 2, "e": "x"})]);
    }

    #[test]
    fn tlas_a_function_does_not_declare_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join("f.jsonnet"), "function(a)\n  { a: a }").unwrap();
        let mut j = job(&root, &["f.jsonnet"]);
        j.tlas.push(Var {
            name: "b".into(),
            value: "x".into(),
            code: false,
        });
        let err = evaluate(&j).unwrap_err().to_string();
        assert!(err.starts_with("f.jsonnet") && err.contains("\"b\""), "{err}");
        std::fs::write(root.join("f.jsonnet"), "local o = { a: 1 };\no.missing").unwrap();
        let err = evaluate(&job(&root, &["f.jsonnet"])).unwrap_err().to_string();
        assert!(
            err.starts_with("f.jsonnet:2:") && err.contains("\"missing\" does not exist"),
            "{err}"
        );
    }

    #[test]
    fn syntax_errors_name_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join("bad.jsonnet"), "{\n  a: 1,\n  b: ,\n}\n").unwrap();
        let err = evaluate(&job(&root, &["bad.jsonnet"])).unwrap_err().to_string();
        assert_eq!(
            err,
            "bad.jsonnet:3:6: syntax error: expected an expression, found 'Comma'"
        );
    }
}

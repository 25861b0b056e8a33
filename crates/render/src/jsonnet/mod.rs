//! Jsonnet: the `.jsonnet` files of a plain directory source, evaluated with `rsjsonnet-lang` (a
//! maintained, pure-Rust, non-recursive evaluator) with Argo CD's `directory.jsonnet` options — top-level
//! arguments, external variables (strings, or Jsonnet code) and library paths inside the repository.
//! Each file's output is an object (one manifest, or a `List` that is flattened) or an array of them
//! (nested arrays are flattened, as Argo CD does).
//!
//! # Why a child process
//!
//! Repository content is untrusted, and a Jsonnet program can run forever
//! (`local f(x) = f(x + 1) tailstrict; f(0)`) or ask for unbounded memory (`std.range(0, 1e12)`).
//! Neither `rsjsonnet-lang` nor `jrsonnet` can be interrupted: there is no cancellation hook and no
//! step budget, and a thread cannot be stopped from outside. So the evaluation runs in a child process
//! of Capstan's own binary (`capstan __jsonnet-worker JOB`, the hidden entry point [`worker_main`]) — no
//! second executable to ship — started like `helm` and `kustomize` (see [`crate::tools`]): no
//! environment from the controller, a scratch `HOME`, killed when the renderer's per-tool timeout
//! passes. The worker also limits its own address space ([`WORKER_MEMORY_BYTES`]) and CPU time (the
//! timeout plus a margin, should the controller die first). Imports go through
//! [`crate::resolve_in_repo`] (see [`eval`]), so no path or symlink leads out of the repository.

mod eval;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use capstan_api::application::{ApplicationSourceJsonnet, JsonnetVar as Var};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::RenderError;

/// The hidden first argument that makes the `capstan` binary a Jsonnet worker.
pub const WORKER_ARG: &str = "__jsonnet-worker";

/// Most address space a Jsonnet worker may map.
pub const WORKER_MEMORY_BYTES: u64 = 2 * 1024 * 1024 * 1024;

/// `command` of the errors of a Jsonnet render.
const COMMAND: &str = "jsonnet";

/// What a worker evaluates: written by the renderer to a file in a scratch directory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct JsonnetJob {
    /// The canonical repository root.
    root: PathBuf,
    /// The files to evaluate, relative to the root, in order.
    files: Vec<String>,
    tlas: Vec<Var>,
    ext_vars: Vec<Var>,
    libs: Vec<String>,
    /// The renderer's timeout, for the worker's CPU-time backstop.
    #[serde(default)]
    timeout_secs: u64,
}

/// Whether `name` is a Jsonnet file evaluated on its own (`.libsonnet` files are only imported).
pub(crate) fn is_jsonnet_name(name: &str) -> bool {
    name.ends_with(".jsonnet")
}

/// Evaluate `files` (relative to the canonical `root`) in a worker, within `timeout`; returns each
/// file's objects, in order. `app_rel` names the source in errors.
pub(crate) async fn render(
    root: &Path,
    app_rel: &str,
    files: Vec<String>,
    options: Option<&ApplicationSourceJsonnet>,
    timeout: Duration,
) -> Result<Vec<Vec<Value>>, RenderError> {
    let options = options.cloned().unwrap_or_default();
    let job = JsonnetJob {
        root: root.to_path_buf(),
        files: files.clone(),
        tlas: options.tlas,
        ext_vars: options.ext_vars,
        libs: options.libs,
        timeout_secs: timeout.as_secs().max(1),
    };
    let binary = worker_binary()?;
    let scratch = tempfile::Builder::new()
        .prefix("capstan-jsonnet-")
        .tempdir()
        .map_err(|e| RenderError::io("cannot create a scratch directory for jsonnet", e))?;
    let job_path = scratch.path().join("job.json");
    let text = serde_json::to_vec(&job).map_err(|e| RenderError::Task(format!("jsonnet job: {e}")))?;
    std::fs::write(&job_path, text).map_err(|e| RenderError::io(format!("cannot write {}", job_path.display()), e))?;
    let mut cmd = crate::tools::sandboxed(&binary, scratch.path());
    // The worker reads the repository (imports are also resolved inside it by the evaluator) and
    // writes nothing but its scratch.
    cmd.read(root);
    cmd.arg(WORKER_ARG).arg(&job_path);
    let out = crate::tools::run(cmd, COMMAND, app_rel, timeout).await?;
    let values: Vec<Value> = serde_json::from_str(&out).map_err(|e| RenderError::ToolFailed {
        command: COMMAND.to_string(),
        path: app_rel.to_string(),
        stderr: format!("the Jsonnet worker {} gave no result: {e}", binary.display()),
    })?;
    if values.len() != files.len() {
        return Err(RenderError::Task(format!(
            "jsonnet: {} results for {} files",
            values.len(),
            files.len()
        )));
    }
    files
        .iter()
        .zip(values)
        .map(|(file, value)| objects_of(file, value))
        .collect()
}

/// The Kubernetes objects of one file's output: an object (a `List`'s items), or arrays of them.
fn objects_of(file: &str, value: Value) -> Result<Vec<Value>, RenderError> {
    let mut objects = Vec::new();
    let mut stack = vec![value];
    // Depth-first, keeping the order of the output.
    while let Some(value) = stack.pop() {
        match value {
            Value::Array(items) => stack.extend(items.into_iter().rev()),
            other => crate::manifests::collect_objects(other, file, &mut objects)?,
        }
    }
    Ok(objects)
}

/// The executable started as the worker: this process's own binary when it is `capstan`; otherwise
/// (a test binary of the workspace, in `target/<profile>/deps/`) the `capstan` built beside it, and
/// failing that the running binary itself (a renamed `capstan`).
fn worker_binary() -> Result<PathBuf, RenderError> {
    let exe = std::env::current_exe().map_err(|e| RenderError::io("cannot find the running executable", e))?;
    if exe.file_name().is_some_and(|n| n == "capstan") {
        return Ok(exe);
    }
    let beside = exe
        .ancestors()
        .skip(1)
        .take(2)
        .map(|dir| dir.join("capstan"))
        .find(|candidate| candidate.is_file());
    Ok(beside.unwrap_or(exe))
}

/// The worker's entry point: `args` are the arguments after [`WORKER_ARG`] (the job file). Prints the
/// files' values as a JSON array on standard output, or the error on standard error and fails.
pub fn worker_main(mut args: impl Iterator<Item = std::ffi::OsString>) -> ExitCode {
    let Some(job_path) = args.next() else {
        eprintln!("usage: capstan {WORKER_ARG} JOB");
        return ExitCode::FAILURE;
    };
    let job: JsonnetJob = match std::fs::read(&job_path)
        .map_err(|e| e.to_string())
        .and_then(|bytes| serde_json::from_slice(&bytes).map_err(|e| e.to_string()))
    {
        Ok(job) => job,
        Err(e) => {
            eprintln!("cannot read the Jsonnet job {}: {e}", Path::new(&job_path).display());
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = limit_resources(job.timeout_secs) {
        eprintln!("cannot limit the Jsonnet worker's resources: {e}");
        return ExitCode::FAILURE;
    }
    let values = match eval::evaluate(&job) {
        Ok(values) => values,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let written = serde_json::to_writer(&mut stdout, &values)
        .map_err(std::io::Error::from)
        .and_then(|()| stdout.flush());
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cannot write the result: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Bound the worker's memory and, as a backstop to the renderer killing it, its CPU time.
fn limit_resources(timeout_secs: u64) -> nix::Result<()> {
    use nix::sys::resource::{Resource, setrlimit};
    setrlimit(Resource::RLIMIT_AS, WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES)?;
    let cpu = timeout_secs.max(1) + 5;
    setrlimit(Resource::RLIMIT_CPU, cpu, cpu)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_arrays_and_lists_are_flattened_in_order() {
        let out = serde_json::json!([
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}},
            [[{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}]],
            {"apiVersion": "v1", "kind": "List", "items": [
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
            ]}
        ]);
        let names: Vec<String> = objects_of("x.jsonnet", out)
            .unwrap()
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(names, ["a", "b", "c"]);
    }

    #[test]
    fn scalars_are_refused_naming_the_file() {
        let err = objects_of("x.jsonnet", serde_json::json!([1])).unwrap_err().to_string();
        assert!(
            err.contains("x.jsonnet") && err.contains("not a Kubernetes object"),
            "{err}"
        );
    }
}

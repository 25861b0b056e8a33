//! The errors of the render stage. Each names what was being rendered and where: the path in the
//! repository, the file and document, or the tool and its own message.

use std::path::PathBuf;

/// Why rendering an Application's source failed.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The error of a render this caller waited for (another caller asked for the same render
    /// first); see [`RenderError::root`] for what it is.
    #[error(transparent)]
    Shared(std::sync::Arc<RenderError>),
    /// A tool could not be confined by the kernel (see `capstan_sandbox`), so it did not run.
    #[error(transparent)]
    Sandbox(#[from] capstan_sandbox::SandboxError),
    /// A path in the source (or a file it references) is absolute.
    #[error("path {path:?} is absolute; only paths inside the repository are allowed")]
    AbsolutePath {
        /// The path as written.
        path: String,
    },
    /// A path climbs out of the repository with `..`.
    #[error("path {path:?} escapes the repository")]
    EscapesRepository {
        /// The path as written.
        path: String,
    },
    /// A path goes through a symlink whose target is outside the repository.
    #[error("path {path:?} escapes the repository through symlink {link:?} (pointing to {target:?})")]
    SymlinkEscape {
        /// The path as written.
        path: String,
        /// The symlink, relative to the repository root.
        link: String,
        /// Where the symlink points.
        target: PathBuf,
    },
    /// A path does not exist in the repository.
    #[error("path {path:?} does not exist in the repository")]
    NotFound {
        /// The path as written.
        path: String,
    },
    /// The Application's `spec.source.path` does not exist at the rendered revision.
    #[error("path '{path}' does not exist in the repository at {revision}")]
    MissingAppPath {
        /// `spec.source.path`.
        path: String,
        /// The resolved revision.
        revision: String,
    },
    /// The Application's `spec.source.path` is a file, not a directory.
    #[error("path '{path}' is not a directory in the repository at {revision}")]
    AppPathNotDirectory {
        /// `spec.source.path`.
        path: String,
        /// The resolved revision.
        revision: String,
    },
    /// A Helm value file listed in `spec.source.helm.valueFiles` does not exist.
    #[error("helm value file {file:?} of chart '{chart}' does not exist in the repository")]
    MissingValueFile {
        /// The entry of `valueFiles`.
        file: String,
        /// The chart's path in the repository.
        chart: String,
    },
    /// A Helm value file names a `$ref` that no source of the Application carries.
    #[error(
        "helm value file {file:?} of chart '{chart}' reads from ${name}, but no source of the Application has `ref: {name}`"
    )]
    UnknownRef {
        /// The entry of `valueFiles`.
        file: String,
        /// The `ref` it names.
        name: String,
        /// The chart's path in the repository.
        chart: String,
    },
    /// A Helm value file is a URL; Capstan renders from the repository only.
    #[error("helm value file {file:?} of chart '{chart}' is a URL; only files in the repository are supported")]
    RemoteValueFile {
        /// The entry of `valueFiles`.
        file: String,
        /// The chart's path in the repository.
        chart: String,
    },
    /// `spec.source.helm.values` or `valuesObject` is not a YAML mapping.
    #[error("spec.source.helm.{field} of chart '{chart}' is not a valid values mapping: {message}")]
    InvalidHelmValues {
        /// `values` or `valuesObject`.
        field: &'static str,
        /// The chart's path in the repository.
        chart: String,
        /// What is wrong.
        message: String,
    },
    /// A chart dependency is neither vendored under `charts/`, nor a local `file://` chart, nor fetched
    /// from a registered repository.
    #[error(
        "chart '{chart}': dependency {name:?} from {repository:?} is missing from charts/ and was not fetched \
         (only repositories registered with a repository Secret are used; register it, or vendor the chart into charts/)"
    )]
    RemoteDependency {
        /// The chart's path in the repository.
        chart: String,
        /// The dependency's name.
        name: String,
        /// The dependency's repository.
        repository: String,
    },
    /// A chart mixes local `file://` dependencies to build with repository dependencies.
    #[error(
        "chart '{chart}': local file:// dependencies to build and repository dependencies in one chart are not \
         supported; vendor one kind under charts/"
    )]
    MixedDependencies {
        /// The chart's path in the repository.
        chart: String,
    },
    /// A symlink in the repository points outside it; tools are not run on such a checkout.
    #[error("the repository contains symlink {link:?} pointing outside it (to {target:?})")]
    OutOfBoundsSymlink {
        /// The symlink, relative to the repository root.
        link: String,
        /// Where it points.
        target: PathBuf,
    },
    /// An error found while reading a file of the repository (a kustomization, a Chart.yaml).
    #[error("{file}: {source}")]
    InFile {
        /// The file, relative to the repository root.
        file: String,
        /// What is wrong.
        #[source]
        source: Box<RenderError>,
    },
    /// A required binary is not installed.
    #[error("{binary} not found in {searched}; run scripts/setup.sh to install it")]
    ToolNotFound {
        /// `helm` or `kustomize`.
        binary: String,
        /// Where it was looked for.
        searched: String,
    },
    /// A tool could not be started.
    #[error("could not run {program}: {source}")]
    Spawn {
        /// The program.
        program: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A tool exited unsuccessfully.
    #[error("{command} failed for path '{path}': {stderr}")]
    ToolFailed {
        /// What ran, e.g. `helm template`.
        command: String,
        /// The Application's path in the repository.
        path: String,
        /// The tool's standard error, trimmed.
        stderr: String,
    },
    /// A tool ran longer than the render timeout and was killed.
    #[error("{command} timed out after {after} (path '{path}')")]
    Timeout {
        /// What ran, e.g. `helm template`.
        command: String,
        /// The Application's path in the repository.
        path: String,
        /// The timeout, human readable (`60 s`).
        after: String,
    },
    /// A manifest file or tool output is not valid YAML.
    #[error("{origin}: invalid YAML: {message}")]
    InvalidYaml {
        /// The file (relative to the repository root) or tool output.
        origin: String,
        /// The parser's message, with line and column.
        message: String,
    },
    /// A JSON manifest file is not valid JSON.
    #[error("{origin}: invalid JSON: {message}")]
    InvalidJson {
        /// The file, relative to the repository root.
        origin: String,
        /// The parser's message, with line and column.
        message: String,
    },
    /// A document is not a Kubernetes object.
    #[error("{origin}: {message}")]
    InvalidManifest {
        /// The file or tool output, and the document.
        origin: String,
        /// What is wrong.
        message: String,
    },
    /// `spec.source.directory.include` or `exclude` is not a valid glob.
    #[error("spec.source.directory.{field} {pattern:?} is not a valid glob: {message}")]
    InvalidGlob {
        /// `include` or `exclude`.
        field: &'static str,
        /// The pattern.
        pattern: String,
        /// The glob parser's message.
        message: String,
    },
    /// A filesystem operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, on which path.
        context: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// `helm.releaseName` (or the Application's name used as one) is not a name Helm accepts.
    #[error("invalid Helm release name {name:?}: {reason}")]
    InvalidReleaseName {
        /// The name (at most 80 characters of it).
        name: String,
        /// Why it is refused.
        reason: String,
    },
    /// A chart's lock file pins a dependency to a repository the chart does not declare.
    #[error("{file}: refused: {message}")]
    ForgedLock {
        /// The lock file, relative to the repository root.
        file: String,
        /// What is wrong.
        message: String,
    },
    /// A kustomization refers to something outside the repository by URL (a remote base, a Git URL,
    /// `file://`); Capstan renders only what the Application's own repository holds.
    #[error(
        "{file}: remote reference {reference:?} refused: kustomizations may only refer to files of the \
         Application's own repository (vendor the base into the repository, or make it an Application source)"
    )]
    RemoteReference {
        /// The kustomization, relative to the repository root.
        file: String,
        /// The reference.
        reference: String,
    },
    /// A SOPS file of the source cannot be decrypted (no matching key, tampered, not SOPS). The message
    /// names the file, never key material or values.
    #[error("cannot decrypt {file}: {source}")]
    Decrypt {
        /// The file, relative to the repository root.
        file: String,
        /// Why.
        #[source]
        source: capstan_sops::SopsError,
    },
    /// Symlinks to files would add more than the budget to a scratch copy of the repository.
    #[error(
        "symlink {link:?}: the files that symlinks point to add more than {limit_mib} MiB to a copy of the repository"
    )]
    LinkedCopyTooLarge {
        /// The symlink at which the budget ran out, relative to the repository root.
        link: String,
        /// The budget.
        limit_mib: u64,
    },
    /// A kustomization Capstan cannot read completely, so it cannot check what Kustomize would read.
    #[error("kustomization {file} is refused: {message}")]
    UnsupportedKustomization {
        /// The kustomization, relative to the repository root.
        file: String,
        /// What Capstan could not understand, and where.
        message: String,
    },
    /// A kustomization's `helmCharts` or `helmGlobals` entry that cannot be used safely.
    #[error("{file}: {message}")]
    KustomizeHelmChart {
        /// The kustomization, relative to the repository root.
        file: String,
        /// What is wrong.
        message: String,
    },
    /// Two rendered objects have the same group, kind, namespace and name.
    #[error("duplicate object {key}: the source defines it {count} times; each object may be defined once")]
    DuplicateObject {
        /// `group/Kind namespace/name`.
        key: String,
        /// How many times.
        count: usize,
    },
    /// A tool wrote more output than Capstan reads.
    #[error("{command} for path '{path}' wrote more than {limit} of output; refused")]
    OutputTooLarge {
        /// What ran.
        command: String,
        /// The Application's path.
        path: String,
        /// The limit, for people.
        limit: String,
    },
    /// A manifest file is larger than Capstan reads.
    #[error("{file} is {size} bytes, more than the {limit} bytes a manifest file may have; refused")]
    FileTooLarge {
        /// The file, relative to the repository root.
        file: String,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The source rendered no object at all and `allowEmpty` is not set.
    #[error(
        "path '{path}' rendered no objects ({tool}): {detail}; nothing is applied or pruned (set \
         spec.syncPolicy.automated.allowEmpty: true if the source is empty on purpose)"
    )]
    EmptyRender {
        /// The Application's path.
        path: String,
        /// How it was rendered.
        tool: crate::kind::Tool,
        /// What the directory holds: the files skipped (the first ten and a count), or why nothing came.
        detail: String,
    },
    /// A background task of the renderer failed (a panic in a blocking task).
    #[error("render task failed: {0}")]
    Task(String),
}

impl RenderError {
    /// The error itself, whether this caller rendered or waited for another caller's render.
    pub fn root(&self) -> &RenderError {
        match self {
            RenderError::Shared(shared) => shared.root(),
            other => other,
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        RenderError::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn in_file(file: impl Into<String>, source: RenderError) -> Self {
        RenderError::InFile {
            file: file.into(),
            source: Box::new(source),
        }
    }
}

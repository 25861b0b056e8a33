//! What the CLI writes to its standard output, and whether it uses colour.
//!
//! Every line the commands print goes through [`outln!`] / [`out!`] (the crate denies `outln!`):
//! when the reader has gone away (`capstan app list -o json | head -1`), the process exits quietly
//! with status 0, as `kubectl` and `argocd` stop without a message, instead of panicking on
//! the broken pipe. Colour follows `--color auto|always|never` and, for `auto`, the `NO_COLOR`
//! convention (<https://no-color.org>: set and not empty means no colour) and whether the stream is
//! a terminal.

use std::io::{IsTerminal, Write};
use std::sync::OnceLock;

/// `--color`: when the CLI colours what it prints (diffs, the log of `controller` and `server`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    /// Colour on a terminal, unless `NO_COLOR` is set (and not empty).
    #[default]
    Auto,
    /// Always colour, even into a pipe or a file, and whatever `NO_COLOR` says.
    Always,
    /// Never colour.
    Never,
}

/// Which output stream a colour decision is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output (diffs).
    Stdout,
    /// Standard error (logs, progress).
    Stderr,
}

static CHOICE: OnceLock<ColorChoice> = OnceLock::new();

/// Record the `--color` choice (once, at start-up; later calls are ignored).
pub fn set_color(choice: ColorChoice) {
    let _ = CHOICE.set(choice);
}

/// Whether to colour what is written to `stream`.
pub fn color(stream: Stream) -> bool {
    let terminal = match stream {
        Stream::Stdout => std::io::stdout().is_terminal(),
        Stream::Stderr => std::io::stderr().is_terminal(),
    };
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    decide(CHOICE.get().copied().unwrap_or_default(), no_color, terminal)
}

/// The decision itself: an explicit choice wins; `auto` colours a terminal unless `NO_COLOR` is set.
fn decide(choice: ColorChoice, no_color: bool, terminal: bool) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => terminal && !no_color,
    }
}

pub use capstan_api::labels::LAST_APPLIED;

/// `object` as the CLI prints it (`-o yaml|json`), as `kubectl get` does by default: without
/// `managedFields`, which say which client wrote which field, and without [`LAST_APPLIED`].
pub fn printable<K: kube::Resource + Clone>(object: &K) -> K {
    let mut object = object.clone();
    let meta = object.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
    object
}

/// Every object of `objects` as printed (see [`printable`]).
pub fn all_printable<K: kube::Resource + Clone>(objects: &[K]) -> Vec<K> {
    objects.iter().map(printable).collect()
}

/// Write `args` to standard output; on a closed pipe, exit quietly (status 0): nobody reads what
/// would follow. Other write errors are reported once on stderr, with status 1.
pub fn write(args: std::fmt::Arguments<'_>) {
    let mut stdout = std::io::stdout().lock();
    if let Err(err) = stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        exit_on(&err);
    }
}

fn exit_on(err: &std::io::Error) -> ! {
    if err.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    // Not through `eprintln!`, which would panic if stderr is gone too.
    let _ = writeln!(std::io::stderr(), "error: writing to standard output: {err}");
    std::process::exit(1);
}

/// `outln!` that exits quietly on a closed pipe (see the module documentation).
macro_rules! outln {
    () => {
        $crate::output::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` that exits quietly on a closed pipe (see the module documentation).
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write(format_args!($($arg)*))
    };
}

pub(crate) use {out, outln};

#[cfg(test)]
mod tests {
    use super::{ColorChoice, LAST_APPLIED, decide, printable};

    #[test]
    fn an_explicit_choice_wins_and_auto_follows_no_color_and_the_terminal() {
        assert!(decide(ColorChoice::Always, true, false));
        assert!(!decide(ColorChoice::Never, false, true));
        assert!(decide(ColorChoice::Auto, false, true));
        assert!(!decide(ColorChoice::Auto, true, true), "NO_COLOR turns colour off");
        assert!(!decide(ColorChoice::Auto, false, false), "no colour into a pipe");
    }

    #[test]
    fn printed_objects_have_neither_managed_fields_nor_the_last_applied_annotation() {
        let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "cluster-a",
                "annotations": {LAST_APPLIED: "{\"stringData\":{\"config\":\"token\"}}", "team": "a"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
            },
        }))
        .expect("a Secret");
        let printed = printable(&secret);
        assert_eq!(printed.metadata.managed_fields, None);
        let annotations = printed.metadata.annotations.expect("other annotations kept");
        assert_eq!(annotations.keys().collect::<Vec<_>>(), ["team"]);
    }
}

//! The process log on stderr: its filter (`--log`, `RUST_LOG`), its format (`--log-format text`,
//! the default, or `json`, one object per line for log collectors) and its colour (ANSI only where
//! [`crate::output::color`] says so: never into a file or a pipe unless `--color always`). Every
//! line goes through [`capstan_redact`] on its way out, so no secret value this process learned
//! (decrypted, or read from a secret store) is ever logged, whatever logged it.

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::output::{self, Stream};

/// `--log-format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One line of text per event.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `spans`, and the event's fields
    /// (its message under `message`).
    Json,
}

/// Install the log: `filter` unless `RUST_LOG` is set, in `format`.
pub fn init(filter: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(filter))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| ScrubbedStderr);
    match format {
        LogFormat::Text => builder.with_ansi(output::color(Stream::Stderr)).init(),
        LogFormat::Json => builder.with_ansi(false).event_format(Json).init(),
    }
}

/// Standard error, with every registered secret value scrubbed from what is written (the log layer
/// writes each formatted event in one call).
struct ScrubbedStderr;

impl std::io::Write for ScrubbedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        if capstan_redact::holds_secret(&text) {
            std::io::stderr().write_all(capstan_redact::scrub(&text).as_bytes())?;
        } else {
            std::io::stderr().write_all(buf)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// The JSON event format.
struct Json;

impl<S, N> FormatEvent<S, N> for Json
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let mut timestamp = String::new();
        SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
        let meta = event.metadata();
        let mut object = Map::new();
        object.insert("timestamp".into(), Value::String(timestamp));
        object.insert("level".into(), Value::String(meta.level().to_string()));
        object.insert("target".into(), Value::String(meta.target().to_string()));
        let spans: Vec<Value> = ctx
            .event_scope()
            .into_iter()
            .flat_map(|scope| scope.from_root())
            .map(|span| Value::String(span.name().to_string()))
            .collect();
        if !spans.is_empty() {
            object.insert("spans".into(), Value::Array(spans));
        }
        event.record(&mut Fields(&mut object));
        writeln!(writer, "{}", Value::Object(object))
    }
}

/// Collects an event's fields into a JSON object: numbers and booleans as such, the rest as text.
struct Fields<'a>(&'a mut Map<String, Value>);

impl Visit for Fields<'_> {
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().into(), format!("{value:?}").into());
    }
}

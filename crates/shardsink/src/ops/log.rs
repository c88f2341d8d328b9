//! Logs: the `tracing` subscriber (text or JSON lines on stderr, filtered by
//! `SHARDSINK_LOG` or `RUST_LOG`) and [`error_chain`], how an error and its
//! causes become one log field.

use std::fmt::Write as _;
use std::io::IsTerminal as _;

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Text on a terminal, JSON otherwise.
    Auto,
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Log filter unless `SHARDSINK_LOG` (or `RUST_LOG`) says otherwise: shardsink
/// at info, libraries at warn.
const DEFAULT_LOG_FILTER: &str = "warn,shardsink=info,shard_lease=info,event_store=info";

/// Installs the process's log subscriber: JSON lines for `Json`, text for
/// `Text`, and for `Auto` text on a terminal, JSON otherwise.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_env("SHARDSINK_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG_FILTER));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let json = match format {
        LogFormat::Json => true,
        LogFormat::Text => false,
        LogFormat::Auto => !std::io::stderr().is_terminal(),
    };
    if json {
        builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .init();
    } else {
        builder.init();
    }
}

/// An error and its sources, `: `-separated, for one log field or line. SDK
/// errors repeat their cause's text; it is said once.
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            let _ = write!(text, ": {cause_text}");
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("inner: {0}")]
    struct Inner(&'static str);

    #[test]
    fn causes_are_joined_and_said_once() {
        assert_eq!(error_chain(&Outer(Inner("x"))), "outer: inner: x");
        let repeated = std::io::Error::other(Outer(Inner("x")));
        assert_eq!(error_chain(&repeated), "outer: inner: x");
    }
}

//! Settings: flags and `SHARDSINK_*` environment variables, and their
//! validation.
//!
//! # Layout
//! - `archive`: [`ArchiveArgs`], what the daemon and `shardsink verify`
//!   share — stream, bucket, prefix, application name, lease table, path
//!   style — with its one validation;
//! - `daemon`: [`Config`], the daemon's settings, validated into
//!   [`Settings`];
//! - `events`: event deduplication — which records are the same event,
//!   where accepted copies are kept;
//! - `iceberg`: the Iceberg catalog and table (`--format iceberg`), and its
//!   commits;
//! - `values`: the enums and parsers of setting values;
//! - `error`: [`ConfigError`], and clap's errors as one line naming the
//!   setting.

mod archive;
mod daemon;
mod error;
mod events;
mod iceberg;
mod values;

pub use crate::aws::kinesis::StreamRef;
pub use crate::events::EventSettings;
pub use crate::ops::log::LogFormat;
pub use crate::output::bucket::KeyStyle;
pub use crate::output::bucket::TimeBucket;
pub use crate::output::compression::CompressionCodec;
pub use crate::output::format::OutputFormat;
pub use crate::read::shard_graph::InitialPosition;
pub use archive::{Archive, ArchiveArgs};
pub use daemon::{Config, Settings};
pub use error::{ConfigError, one_line_error};
pub(crate) use events::only_with_event_id;
pub use events::{EventArgs, EventDedup, EventStoreKind, EventStoreSetting};
pub use iceberg::{IcebergSettings, IcebergTableArgs, IcebergTarget};
pub(crate) use values::parse_timestamp;

/// Parses flags only, for tests: environment lookup is switched off so that
/// a developer's `SHARDSINK_*` variables cannot change the outcome (the
/// end-to-end `bad_config` tests cover the variables).
#[cfg(test)]
pub(crate) fn parse_flags_only(args: &[&str]) -> Result<Config, clap::Error> {
    use clap::{CommandFactory as _, FromArgMatches as _};
    let mut argv = vec!["shardsink"];
    argv.extend_from_slice(args);
    let command = Config::command().mut_args(|arg| arg.env(None::<&str>));
    Config::from_arg_matches(&command.try_get_matches_from(argv)?)
}

#[cfg(test)]
pub(crate) mod tests;

//! The values settings take: enums (initial position, codec, log format)
//! and the parsers of durations, byte sizes and times.

use std::time::Duration;

use chrono::{DateTime, Utc};
use clap::ValueEnum;

/// Where a shard without a checkpoint starts (GetShardIterator
/// `ShardIteratorType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum InitialPosition {
    /// The oldest record still in the shard.
    #[value(name = "TRIM_HORIZON")]
    TrimHorizon,
    /// Records added after the shard is first read.
    #[value(name = "LATEST")]
    Latest,
    /// The first record at or after --initial-timestamp.
    #[value(name = "AT_TIMESTAMP")]
    AtTimestamp,
}

/// Object compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompressionCodec {
    /// Plain JSON Lines (`.jsonl`).
    None,
    /// gzip (`.jsonl.gz`).
    Gzip,
    /// Zstandard (`.jsonl.zst`).
    Zstd,
}

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

pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|err| format!("{err} (examples: 500ms, 10s, 5m)"))
}

pub(crate) fn parse_byte_size(text: &str) -> Result<u64, String> {
    text.trim()
        .parse::<bytesize::ByteSize>()
        .map(|size| size.as_u64())
        .map_err(|err| format!("{err} (examples: 64MiB, 512KiB, 1048576)"))
}

/// Parses an RFC 3339 time (`2026-11-21T00:00:00Z`, any offset) to UTC.
///
/// # Errors
/// The parse error with an example, for clap to show.
pub(crate) fn parse_timestamp(text: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(text)
        .map(|time| time.with_timezone(&Utc))
        .map_err(|err| format!("{err} (example: 2026-11-21T00:00:00Z)"))
}

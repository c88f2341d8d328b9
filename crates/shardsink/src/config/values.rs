//! The values settings take: enums (initial position, format, codec, key
//! layout, time bucket, log format) and the parsers of durations, byte
//! sizes, times and record delimiters.

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

/// What each record becomes in an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum)]
pub enum OutputFormat {
    /// JSON Lines: the payload in base64 beside the Kinesis metadata
    /// (`.jsonl`).
    Envelope,
    /// JSON Lines: the payload itself, a JSON object, with the metadata
    /// under one field (`.jsonl`).
    Json,
    /// The payload bytes, each followed by the record delimiter (`.raw`).
    Raw,
    /// Apache Parquet, one row per record (`.parquet`).
    Parquet,
}

impl OutputFormat {
    /// The name, as `--format` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Envelope => "envelope",
            Self::Json => "json",
            Self::Raw => "raw",
            Self::Parquet => "parquet",
        }
    }
}

/// Object compression. For `envelope`, `json` and `raw` the whole object is
/// compressed (and the key says so); for `parquet`, its pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum)]
pub enum CompressionCodec {
    /// No compression.
    None,
    /// gzip (`.gz`).
    Gzip,
    /// Zstandard (`.zst`).
    Zstd,
}

/// How the time part of a key is written.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum KeyStyle {
    /// `2026/11/21/05/27/`.
    Plain,
    /// `year=2026/month=11/day=21/hour=05/minute=27/`: Hive-style
    /// partitions, recognised by Athena, Glue, Spark and DuckDB.
    Hive,
}

impl KeyStyle {
    /// The name, as `--key-layout` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plain => "plain",
            Self::Hive => "hive",
        }
    }
}

/// The span of arrival time one object's records share.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum TimeBucket {
    /// A UTC minute.
    Minute,
    /// A UTC hour.
    Hour,
}

impl TimeBucket {
    /// The name, as `--time-bucket` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Minute => "minute",
            Self::Hour => "hour",
        }
    }
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

/// A record delimiter: the bytes written after each payload of the `raw`
/// format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordDelimiter(pub Vec<u8>);

/// Parses a record delimiter: text in which `\n`, `\r`, `\t`, `\0`,
/// `\\` and `\xHH` are escapes (so that a newline fits in a flag or an
/// environment variable); any other character stands for its UTF-8 bytes.
/// The empty text is no delimiter.
///
/// # Errors
/// An unknown or incomplete escape, for clap to show.
pub(crate) fn parse_delimiter(text: &str) -> Result<RecordDelimiter, String> {
    let mut out = Vec::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            let mut buffer = [0; 4];
            out.extend_from_slice(c.encode_utf8(&mut buffer).as_bytes());
            continue;
        }
        match chars.next() {
            Some('n') => out.push(b'\n'),
            Some('r') => out.push(b'\r'),
            Some('t') => out.push(b'\t'),
            Some('0') => out.push(0),
            Some('\\') => out.push(b'\\'),
            Some('x') => {
                let hex: String = chars.by_ref().take(2).collect();
                match u8::from_str_radix(&hex, 16) {
                    Ok(byte) if hex.len() == 2 && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
                        out.push(byte);
                    }
                    _ => return Err(format!("\\x{hex} is not \\x and two hex digits")),
                }
            }
            Some(other) => {
                return Err(format!(
                    "\\{other} is not an escape (\\n \\r \\t \\0 \\\\ \\xHH)"
                ));
            }
            None => return Err("ends with a lone \\ (write \\\\ for a backslash)".to_owned()),
        }
    }
    Ok(RecordDelimiter(out))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delimiters_take_escapes() {
        let parse = |text| parse_delimiter(text).unwrap().0;
        assert_eq!(parse("\\n"), b"\n");
        assert_eq!(parse("\\r\\n"), b"\r\n");
        assert_eq!(parse(""), b"");
        assert_eq!(parse("|\\x1e\\\\"), b"|\x1e\\");
        assert_eq!(parse("é"), "é".as_bytes());
        for bad in ["\\q", "\\", "\\x1", "\\xzz", "\\x+1"] {
            assert!(parse_delimiter(bad).is_err(), "{bad:?}");
        }
    }
}

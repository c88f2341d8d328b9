//! [`Config`]: every setting, as flags and `SHARDSINK_*` environment
//! variables. The doc comment of each field is the user's documentation (it is
//! what `shardsink --help` prints; `docs/CONFIGURATION.md` repeats it).

use std::time::Duration;

use chrono::{DateTime, Utc};
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Parser, ValueEnum};

/// The shortest `--failover-time`: a writer stops sending a PUT one second
/// before its lease could move, so below two seconds almost nothing fits.
pub const MIN_FAILOVER_TIME: Duration = Duration::from_secs(2);

/// The longest `--failover-time` (one hour): beyond it a dead worker's
/// shards would wait hours to move.
pub const MAX_FAILOVER_TIME: Duration = Duration::from_secs(3_600);

/// Most records one GetRecords call may return (Kinesis API reference,
/// GetRecords `Limit`: 1 to 10,000).
pub const MAX_GET_RECORDS_LIMIT: i32 = 10_000;

/// Copies every record of a Kinesis data stream to S3 exactly once.
///
/// AWS credentials, region and endpoints come from the standard sources:
/// AWS_REGION, AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE, the ECS
/// task role, AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_{KINESIS,S3,DYNAMODB}.
/// Logs go to stderr; SHARDSINK_LOG (or RUST_LOG) sets the filter, e.g.
/// SHARDSINK_LOG=debug. Exit codes: 0 after a clean shutdown, 1 when start-up
/// fails, 2 for a bad setting. See docs/CONFIGURATION.md.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "shardsink",
    version,
    max_term_width = 100,
    args_override_self = true
)]
pub struct Config {
    /// Kinesis data stream to read: a stream name or a stream ARN
    /// (arn:aws:kinesis:REGION:ACCOUNT:stream/NAME).
    #[arg(long, env = "SHARDSINK_STREAM", value_name = "NAME|ARN")]
    pub stream: String,

    /// S3 bucket the objects are written to.
    #[arg(long, env = "SHARDSINK_BUCKET", value_name = "BUCKET")]
    pub bucket: String,

    /// Key prefix of every object, without a trailing slash. Must be used by
    /// this stream only: dedup reads the ranges of every key under it.
    /// [default: the stream name]
    #[arg(long, env = "SHARDSINK_PREFIX", value_name = "PREFIX")]
    pub prefix: Option<String>,

    /// Name of this shardsink application, as the KCL's applicationName: the
    /// default lease table is <application name>-<stream name>. Two
    /// applications archiving one stream (to different prefixes) keep
    /// separate leases.
    #[arg(
        long,
        env = "SHARDSINK_APPLICATION_NAME",
        default_value = "shardsink",
        value_name = "NAME"
    )]
    pub application_name: String,

    /// DynamoDB table holding the leases and checkpoints, one row per shard;
    /// created (on-demand billing) if missing. One table serves one stream.
    /// [default: <application name>-<stream name>]
    #[arg(long, env = "SHARDSINK_LEASE_TABLE", value_name = "TABLE")]
    pub lease_table: Option<String>,

    /// This worker's id, written as the lease owner. Every running worker
    /// needs a distinct id; a restarted worker with the same id takes its
    /// leases back at once instead of waiting for them to expire.
    /// [default: the host name]
    #[arg(long, env = "SHARDSINK_WORKER_ID", value_name = "ID")]
    pub worker_id: Option<String>,

    /// Where a shard with no checkpoint starts. Shards created by a reshard
    /// always start at TRIM_HORIZON, after their parents.
    #[arg(
        long,
        env = "SHARDSINK_INITIAL_POSITION",
        value_enum,
        ignore_case = true,
        default_value = "TRIM_HORIZON",
        value_name = "POSITION"
    )]
    pub initial_position: InitialPosition,

    /// Start time for --initial-position AT_TIMESTAMP, RFC 3339
    /// (e.g. 2026-11-21T00:00:00Z).
    #[arg(long, env = "SHARDSINK_INITIAL_TIMESTAMP", value_parser = parse_timestamp, value_name = "TIME")]
    pub initial_timestamp: Option<DateTime<Utc>>,

    /// Flush a shard's buffer once its JSON Lines reach this size (before
    /// compression), like Firehose's buffering size hint. Units: B, KiB,
    /// MiB, GiB (or KB, MB, GB).
    #[arg(long, env = "SHARDSINK_BUFFER_MAX_BYTES", default_value = "64MiB", value_parser = parse_byte_size, value_name = "SIZE")]
    pub buffer_max_bytes: u64,

    /// Flush a shard's buffer once it holds this many records.
    #[arg(
        long,
        env = "SHARDSINK_BUFFER_MAX_RECORDS",
        default_value_t = 100_000,
        value_name = "COUNT"
    )]
    pub buffer_max_records: usize,

    /// Flush a shard's buffer this long after its first record arrived, like
    /// Firehose's buffering interval hint. A buffer is also flushed when its
    /// arrival minute is over.
    #[arg(long, env = "SHARDSINK_BUFFER_MAX_AGE", default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub buffer_max_age: Duration,

    /// Limit on the records held: all shards' buffers, batches being written
    /// and GetRecords responses. Past it, buffers are written early and
    /// reads wait; replays after a crash take turns. The process stays
    /// under twice this plus 100 MiB.
    #[arg(long, env = "SHARDSINK_BUFFER_MEMORY_LIMIT", default_value = "256MiB", value_parser = parse_byte_size, value_name = "SIZE")]
    pub buffer_memory_limit: u64,

    /// Compression of the objects: none (.jsonl), gzip (.jsonl.gz) or zstd
    /// (.jsonl.zst). Athena, Spark and Trino read all three.
    #[arg(
        long,
        env = "SHARDSINK_COMPRESSION",
        value_enum,
        ignore_case = true,
        default_value = "zstd",
        value_name = "CODEC"
    )]
    pub compression: CompressionCodec,

    /// Compression level: 1-22 for zstd (default 3), 0-9 for gzip (default 6).
    #[arg(
        long,
        env = "SHARDSINK_COMPRESSION_LEVEL",
        value_name = "LEVEL",
        allow_negative_numbers = true
    )]
    pub compression_level: Option<i32>,

    /// Address S3 buckets by path (http://host/bucket/key) instead of by
    /// virtual host; needed by most local S3 servers.
    #[arg(long, env = "SHARDSINK_S3_FORCE_PATH_STYLE", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub s3_force_path_style: bool,

    /// A lease whose counter has not changed for this long is expired and may
    /// be taken by another worker (the KCL's failoverTimeMillis). Leases are
    /// renewed every third of it. Recorded in each lease taken; other workers
    /// wait the larger of theirs and the owner's.
    #[arg(long, env = "SHARDSINK_FAILOVER_TIME", default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub failover_time: Duration,

    /// How often held leases are renewed and this worker's heartbeat is
    /// written. Must be below --failover-time. [default: a third of
    /// --failover-time]
    #[arg(long, env = "SHARDSINK_LEASE_RENEWAL_INTERVAL", value_parser = parse_duration, value_name = "DURATION")]
    pub lease_renewal_interval: Option<Duration>,

    /// How often the lease table is scanned to create, take and steal leases.
    /// Keep it below the renewal interval so that a lease released at
    /// shutdown is taken within one renewal interval. [default: a fifth of
    /// --failover-time]
    #[arg(long, env = "SHARDSINK_LEASE_TAKING_INTERVAL", value_parser = parse_duration, value_name = "DURATION")]
    pub lease_taking_interval: Option<Duration>,

    /// How long the lease of a shard read to SHARD_END (after a split or
    /// merge) is kept before it is deleted, once its children have started.
    /// Leases of shards that left the stream are deleted at once.
    #[arg(long, env = "SHARDSINK_ENDED_LEASE_RETENTION", default_value = "1h", value_parser = parse_duration, value_name = "DURATION")]
    pub ended_lease_retention: Duration,

    /// How often the shard list is read again (ListShards) to find new shards.
    #[arg(long, env = "SHARDSINK_SHARD_SYNC_INTERVAL", default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub shard_sync_interval: Duration,

    /// Wait between GetRecords calls on a shard that is caught up (the KCL's
    /// idleTimeBetweenReadsInMillis). Busy shards are read as fast as the
    /// Kinesis limit of 5 calls a second allows.
    #[arg(long, env = "SHARDSINK_IDLE_TIME_BETWEEN_READS", default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub idle_time_between_reads: Duration,

    /// Most records asked for per GetRecords call (1-10000).
    #[arg(long, env = "SHARDSINK_MAX_RECORDS_PER_READ", default_value_t = MAX_GET_RECORDS_LIMIT, value_name = "COUNT")]
    pub max_records_per_read: i32,

    /// On SIGTERM or SIGINT, how long to flush buffers and checkpoint before
    /// exiting anyway. Keep it below the ECS stopTimeout / systemd
    /// TimeoutStopSec. Nothing is lost if it runs out: the next start replays.
    #[arg(long, env = "SHARDSINK_SHUTDOWN_TIMEOUT", default_value = "25s", value_parser = parse_duration, value_name = "DURATION")]
    pub shutdown_timeout: Duration,

    /// Log format: text (human-readable), json (one JSON object a line), or
    /// auto: text when stderr is a terminal, JSON otherwise (ECS, systemd).
    #[arg(
        long,
        env = "SHARDSINK_LOG_FORMAT",
        value_enum,
        ignore_case = true,
        default_value = "auto",
        value_name = "FORMAT"
    )]
    pub log_format: LogFormat,

    /// Address of the HTTP endpoints: GET /metrics (Prometheus), /healthz
    /// (liveness), /readyz (readiness). "off" turns them off.
    #[arg(
        long,
        env = "SHARDSINK_METRICS_ADDRESS",
        default_value = "0.0.0.0:9898",
        value_name = "HOST:PORT|off"
    )]
    pub metrics_address: String,
}

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

/// A setting that is missing or invalid. Printed as one line; the process
/// exits with code 2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid setting {flag} ({env}): {message}")]
pub struct ConfigError {
    /// The flag, e.g. `--buffer-max-age`.
    pub flag: String,
    /// The environment variable, e.g. `SHARDSINK_BUFFER_MAX_AGE`.
    pub env: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    fn new(flag: &str, message: impl Into<String>) -> Self {
        Self {
            flag: format!("--{flag}"),
            env: format!("SHARDSINK_{}", flag.replace('-', "_").to_uppercase()),
            message: message.into(),
        }
    }
}

/// The stream as the Kinesis API takes it: `StreamName` or `StreamARN`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamRef {
    /// A stream name.
    Name(String),
    /// A stream ARN, with the name parsed out of it.
    Arn {
        /// The full ARN.
        arn: String,
        /// The stream name (after `stream/`).
        name: String,
    },
}

impl StreamRef {
    /// The stream's name.
    pub fn name(&self) -> &str {
        match self {
            Self::Name(name) | Self::Arn { name, .. } => name,
        }
    }

    /// The `StreamName` parameter (None when the ARN is used).
    pub fn stream_name(&self) -> Option<String> {
        match self {
            Self::Name(name) => Some(name.clone()),
            Self::Arn { .. } => None,
        }
    }

    /// The `StreamARN` parameter (None when the name is used).
    pub fn stream_arn(&self) -> Option<String> {
        match self {
            Self::Name(_) => None,
            Self::Arn { arn, .. } => Some(arn.clone()),
        }
    }
}

/// Settings after validation, with defaults resolved.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The parsed command line / environment.
    pub config: Config,
    /// The stream.
    pub stream: StreamRef,
    /// Key prefix, no leading or trailing slash, may be empty.
    pub prefix: String,
    /// Lease table name.
    pub lease_table: String,
    /// Worker id.
    pub worker_id: String,
    /// Interval between lease renewals and heartbeats.
    pub lease_renewal_interval: Duration,
    /// Interval between lease-table scans (create, take, steal).
    pub lease_taking_interval: Duration,
    /// Where to serve /metrics, /healthz and /readyz; `None` when off.
    pub metrics_address: Option<std::net::SocketAddr>,
}

impl Config {
    /// Checks every setting and resolves defaults.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first bad setting.
    pub fn validate(self) -> Result<Settings, ConfigError> {
        let stream = parse_stream(&self.stream)?;
        validate_bucket(&self.bucket)?;
        let prefix = match &self.prefix {
            Some(prefix) => validate_prefix(prefix)?,
            None => stream.name().to_owned(),
        };
        if !is_stream_name(&self.application_name) {
            return Err(ConfigError::new(
                "application-name",
                format!(
                    "{:?} is not a name (1-128 of a-z A-Z 0-9 _ . -)",
                    self.application_name
                ),
            ));
        }
        let lease_table = match &self.lease_table {
            Some(table) => table.clone(),
            None => format!("{}-{}", self.application_name, stream.name()),
        };
        validate_table_name(&lease_table)?;
        let worker_id = match &self.worker_id {
            Some(id) => id.clone(),
            None => hostname::get()
                .ok()
                .and_then(|name| name.into_string().ok())
                .filter(|name| !name.is_empty())
                .ok_or_else(|| {
                    ConfigError::new("worker-id", "the host name is unavailable; set a worker id")
                })?,
        };
        if worker_id.trim().is_empty() {
            return Err(ConfigError::new("worker-id", "must not be empty"));
        }
        match (self.initial_position, self.initial_timestamp) {
            (InitialPosition::AtTimestamp, None) => {
                return Err(ConfigError::new(
                    "initial-timestamp",
                    "required when --initial-position is AT_TIMESTAMP",
                ));
            }
            (InitialPosition::TrimHorizon | InitialPosition::Latest, Some(_)) => {
                return Err(ConfigError::new(
                    "initial-timestamp",
                    "only used with --initial-position AT_TIMESTAMP",
                ));
            }
            _ => {}
        }
        if self.buffer_max_bytes == 0 {
            return Err(ConfigError::new(
                "buffer-max-bytes",
                "must be at least 1 byte",
            ));
        }
        if self.buffer_max_records == 0 {
            return Err(ConfigError::new("buffer-max-records", "must be at least 1"));
        }
        if self.buffer_max_age < Duration::from_millis(100) {
            return Err(ConfigError::new("buffer-max-age", "must be at least 100ms"));
        }
        if self.buffer_memory_limit == 0 {
            return Err(ConfigError::new(
                "buffer-memory-limit",
                "must be at least 1 byte",
            ));
        }
        if let Some(level) = self.compression_level {
            let range = match self.compression {
                CompressionCodec::None => {
                    return Err(ConfigError::new(
                        "compression-level",
                        "set, but --compression is none",
                    ));
                }
                CompressionCodec::Gzip => 0..=9,
                CompressionCodec::Zstd => 1..=22,
            };
            if !range.contains(&level) {
                return Err(ConfigError::new(
                    "compression-level",
                    format!(
                        "{level} is outside {}..={} for {:?}",
                        range.start(),
                        range.end(),
                        self.compression
                    ),
                ));
            }
        }
        // Every PUT must end a margin (1 s) before the lease could move, so
        // shorter times leave no room to write; far longer ones only delay
        // failover (and would overflow deadline arithmetic).
        if !(MIN_FAILOVER_TIME..=MAX_FAILOVER_TIME).contains(&self.failover_time) {
            return Err(ConfigError::new(
                "failover-time",
                format!(
                    "{:?} is outside {MIN_FAILOVER_TIME:?}..={MAX_FAILOVER_TIME:?}",
                    self.failover_time
                ),
            ));
        }
        let lease_renewal_interval = self
            .lease_renewal_interval
            .unwrap_or(self.failover_time / 3);
        if lease_renewal_interval.is_zero() || lease_renewal_interval >= self.failover_time {
            return Err(ConfigError::new(
                "lease-renewal-interval",
                format!(
                    "must be above 0 and below --failover-time ({:?})",
                    self.failover_time
                ),
            ));
        }
        let lease_taking_interval = self.lease_taking_interval.unwrap_or(self.failover_time / 5);
        if lease_taking_interval < Duration::from_millis(50) {
            return Err(ConfigError::new(
                "lease-taking-interval",
                "must be at least 50ms",
            ));
        }
        let metrics_address = match self.metrics_address.trim() {
            "off" | "none" | "" => None,
            address => Some(address.parse().map_err(|_| {
                ConfigError::new(
                    "metrics-address",
                    format!(
                        "{address:?} is not HOST:PORT with an IP address (e.g. 0.0.0.0:9898) or off"
                    ),
                )
            })?),
        };
        if self.shard_sync_interval < Duration::from_secs(1) {
            return Err(ConfigError::new(
                "shard-sync-interval",
                "must be at least 1s",
            ));
        }
        if !(1..=MAX_GET_RECORDS_LIMIT).contains(&self.max_records_per_read) {
            return Err(ConfigError::new(
                "max-records-per-read",
                format!(
                    "{} is outside 1..={MAX_GET_RECORDS_LIMIT}",
                    self.max_records_per_read
                ),
            ));
        }
        Ok(Settings {
            config: self,
            stream,
            prefix,
            lease_table,
            worker_id,
            lease_renewal_interval,
            lease_taking_interval,
            metrics_address,
        })
    }
}

fn parse_stream(stream: &str) -> Result<StreamRef, ConfigError> {
    if stream.is_empty() {
        return Err(ConfigError::new("stream", "must not be empty"));
    }
    if let Some(rest) = stream.strip_prefix("arn:") {
        // arn:PARTITION:kinesis:REGION:ACCOUNT:stream/NAME
        let parts: Vec<&str> = rest.splitn(5, ':').collect();
        let name = match parts.as_slice() {
            [_, "kinesis", _, _, resource] => resource.strip_prefix("stream/"),
            _ => None,
        };
        return match name {
            Some(name) if is_stream_name(name) => Ok(StreamRef::Arn {
                arn: stream.to_owned(),
                name: name.to_owned(),
            }),
            _ => Err(ConfigError::new(
                "stream",
                format!(
                    "{stream:?} is not a Kinesis stream ARN (arn:aws:kinesis:REGION:ACCOUNT:stream/NAME)"
                ),
            )),
        };
    }
    if !is_stream_name(stream) {
        return Err(ConfigError::new(
            "stream",
            format!("{stream:?} is not a stream name (1-128 of a-z A-Z 0-9 _ . -)"),
        ));
    }
    Ok(StreamRef::Name(stream.to_owned()))
}

/// Kinesis API reference, `StreamName`: pattern `[a-zA-Z0-9_.-]+`, 1 to 128.
fn is_stream_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// S3 bucket naming rules (general purpose buckets): 3-63 characters of
/// lowercase letters, digits, dots and hyphens.
fn validate_bucket(bucket: &str) -> Result<(), ConfigError> {
    let ok = (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ConfigError::new(
            "bucket",
            format!("{bucket:?} is not a bucket name (3-63 of a-z 0-9 . -)"),
        ))
    }
}

/// A prefix has no leading slash, no empty segments, and at most 512 bytes so
/// that full keys stay well under S3's 1,024-byte limit.
fn validate_prefix(prefix: &str) -> Result<String, ConfigError> {
    let trimmed = prefix.trim_end_matches('/');
    if trimmed.starts_with('/') || trimmed.contains("//") {
        return Err(ConfigError::new(
            "prefix",
            format!("{prefix:?} must not start with / or contain //"),
        ));
    }
    if trimmed.len() > 512 {
        return Err(ConfigError::new("prefix", "longer than 512 bytes"));
    }
    Ok(trimmed.to_owned())
}

/// DynamoDB table names: 3-255 of `a-z A-Z 0-9 _ . -`.
fn validate_table_name(table: &str) -> Result<(), ConfigError> {
    let ok = (3..=255).contains(&table.len())
        && table
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ConfigError::new(
            "lease-table",
            format!("{table:?} is not a DynamoDB table name (3-255 of a-z A-Z 0-9 _ . -)"),
        ))
    }
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|err| format!("{err} (examples: 500ms, 10s, 5m)"))
}

fn parse_byte_size(text: &str) -> Result<u64, String> {
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

/// Renders a command-line error as one line naming the setting, e.g.
/// `invalid setting --compression (SHARDSINK_COMPRESSION): invalid value "lz4"; possible values: none, gzip, zstd`.
/// Help and version requests are not errors and are rendered as clap renders them.
pub fn one_line_error(err: &clap::Error) -> String {
    let arg = match err.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => Some(arg.clone()),
        Some(ContextValue::Strings(args)) => args.first().cloned(),
        _ => None,
    };
    // clap names an argument as `--flag <VALUE>`; keep the flag.
    let flag = arg
        .as_deref()
        .and_then(|arg| arg.split_whitespace().next())
        .map(str::to_owned);
    let detail = match err.kind() {
        ErrorKind::MissingRequiredArgument => "required, not set".to_owned(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation => {
            let value = match err.get(ContextKind::InvalidValue) {
                Some(ContextValue::String(value)) => value.clone(),
                _ => String::new(),
            };
            let mut detail = format!("invalid value {value:?}");
            if let Some(ContextValue::Strings(valid)) = err.get(ContextKind::ValidValue) {
                detail.push_str(&format!("; possible values: {}", valid.join(", ")));
            }
            if let Some(source) = std::error::Error::source(err) {
                detail.push_str(&format!(": {source}"));
            }
            detail
        }
        ErrorKind::UnknownArgument => "unknown setting".to_owned(),
        _ => first_line(&err.to_string()),
    };
    match flag {
        Some(flag) => {
            let env = format!(
                "SHARDSINK_{}",
                flag.trim_start_matches('-')
                    .replace('-', "_")
                    .to_uppercase()
            );
            if err.kind() == ErrorKind::UnknownArgument {
                format!("unknown setting {flag}")
            } else {
                format!("invalid setting {flag} ({env}): {detail}")
            }
        }
        None => detail,
    }
}

fn first_line(text: &str) -> String {
    text.lines()
        .next()
        .unwrap_or_default()
        .trim_start_matches("error: ")
        .to_owned()
}

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
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Config, clap::Error> {
        parse_flags_only(args)
    }

    fn valid(args: &[&str]) -> Result<Settings, ConfigError> {
        let mut all = vec![
            "--stream",
            "orders",
            "--bucket",
            "archive",
            "--worker-id",
            "w1",
        ];
        all.extend_from_slice(args);
        parse(&all).unwrap().validate()
    }

    #[test]
    fn defaults_follow_the_brief() {
        let settings = valid(&[]).unwrap();
        let config = &settings.config;
        assert_eq!(config.buffer_max_bytes, 64 * 1024 * 1024);
        assert_eq!(config.buffer_max_records, 100_000);
        assert_eq!(config.buffer_max_age, Duration::from_secs(60));
        assert_eq!(config.compression, CompressionCodec::Zstd);
        assert_eq!(config.initial_position, InitialPosition::TrimHorizon);
        assert_eq!(settings.prefix, "orders");
        assert_eq!(settings.lease_table, "shardsink-orders");
        let named = valid(&["--application-name", "audit"]).unwrap();
        assert_eq!(named.lease_table, "audit-orders");
        assert!(!config.s3_force_path_style);
        assert_eq!(settings.lease_renewal_interval, Duration::from_secs(10) / 3);
        assert_eq!(settings.lease_taking_interval, Duration::from_secs(2));
        assert_eq!(
            settings.metrics_address,
            Some("0.0.0.0:9898".parse().unwrap())
        );
        assert_eq!(config.log_format, LogFormat::Auto);
        assert_eq!(
            valid(&["--metrics-address", "off"])
                .unwrap()
                .metrics_address,
            None
        );
    }

    #[test]
    fn accepts_a_stream_arn() {
        let settings = valid(&[
            "--stream",
            "arn:aws:kinesis:eu-west-1:123456789012:stream/clicks",
        ])
        .unwrap();
        assert_eq!(settings.stream.name(), "clicks");
        assert!(settings.stream.stream_name().is_none());
        assert_eq!(settings.prefix, "clicks");
        let err = valid(&["--stream", "arn:aws:s3:::bucket"]).unwrap_err();
        assert_eq!(err.flag, "--stream");
    }

    #[test]
    fn positions_are_kinesis_names_case_insensitive() {
        assert_eq!(
            valid(&["--initial-position", "latest"])
                .unwrap()
                .config
                .initial_position,
            InitialPosition::Latest
        );
        let settings = valid(&[
            "--initial-position",
            "AT_TIMESTAMP",
            "--initial-timestamp",
            "2026-11-21T00:00:00Z",
        ])
        .unwrap();
        assert_eq!(
            settings.config.initial_position,
            InitialPosition::AtTimestamp
        );
    }

    #[test]
    fn validation_names_the_setting() {
        let cases: [(&[&str], &str); 12] = [
            (
                &["--initial-position", "AT_TIMESTAMP"],
                "--initial-timestamp",
            ),
            (&["--buffer-max-records", "0"], "--buffer-max-records"),
            (&["--buffer-max-bytes", "0"], "--buffer-max-bytes"),
            (
                &["--compression", "gzip", "--compression-level", "12"],
                "--compression-level",
            ),
            (
                &["--compression", "none", "--compression-level", "1"],
                "--compression-level",
            ),
            (&["--prefix", "/abs"], "--prefix"),
            (&["--bucket", "Not_A_Bucket"], "--bucket"),
            (
                &["--max-records-per-read", "10001"],
                "--max-records-per-read",
            ),
            (&["--lease-table", "x"], "--lease-table"),
            (&["--application-name", "my app"], "--application-name"),
            (
                &["--lease-renewal-interval", "10s"],
                "--lease-renewal-interval",
            ),
            (&["--metrics-address", "localhost"], "--metrics-address"),
        ];
        for (args, flag) in cases {
            let err = valid(args).unwrap_err();
            assert_eq!(err.flag, flag, "{args:?}");
            assert!(
                err.to_string()
                    .starts_with(&format!("invalid setting {flag} (SHARDSINK_")),
                "{err}"
            );
        }
    }

    #[test]
    fn prefix_loses_its_trailing_slash() {
        assert_eq!(
            valid(&["--prefix", "raw/orders/"]).unwrap().prefix,
            "raw/orders"
        );
        assert_eq!(valid(&["--prefix", ""]).unwrap().prefix, "");
    }

    #[test]
    fn parse_errors_render_as_one_line_naming_the_flag() {
        let err = parse(&["--stream", "s", "--bucket", "bkt", "--compression", "lz4"]).unwrap_err();
        let line = one_line_error(&err);
        assert!(!line.contains('\n'));
        assert!(
            line.starts_with(
                "invalid setting --compression (SHARDSINK_COMPRESSION): invalid value \"lz4\""
            ),
            "{line}"
        );
        assert!(line.contains("none, gzip, zstd"), "{line}");

        let err = parse(&["--stream", "s"]).unwrap_err();
        let line = one_line_error(&err);
        assert_eq!(
            line,
            "invalid setting --bucket (SHARDSINK_BUCKET): required, not set"
        );

        let err = parse(&[
            "--stream",
            "s",
            "--bucket",
            "bkt",
            "--buffer-max-age",
            "soon",
        ])
        .unwrap_err();
        let line = one_line_error(&err);
        assert!(line.starts_with("invalid setting --buffer-max-age (SHARDSINK_BUFFER_MAX_AGE): invalid value \"soon\""), "{line}");
        assert!(!line.contains('\n'));
    }

    #[test]
    fn configuration_reference_names_every_setting() {
        use clap::CommandFactory as _;
        let reference = include_str!("../../../../docs/CONFIGURATION.md");
        for arg in Config::command().get_arguments() {
            let Some(flag) = arg.get_long() else { continue };
            if matches!(flag, "help" | "version") {
                continue;
            }
            assert!(
                reference.contains(&format!("`--{flag}`")),
                "docs/CONFIGURATION.md lacks --{flag}"
            );
            let env = arg.get_env().and_then(|e| e.to_str()).unwrap_or_default();
            assert!(
                env.starts_with("SHARDSINK_") && reference.contains(&format!("`{env}`")),
                "docs/CONFIGURATION.md lacks {env} for --{flag}"
            );
            if let Some(default) = arg.get_default_values().first().and_then(|d| d.to_str()) {
                assert!(
                    reference.contains(&format!("`{default}`")),
                    "docs/CONFIGURATION.md lacks the default {default} of --{flag}"
                );
            }
        }
    }

    #[test]
    fn failover_time_leaves_room_to_write() {
        let failover =
            |value: &str| valid(&["--failover-time", value]).map(|s| s.config.failover_time);
        assert_eq!(failover("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(failover("1h").unwrap(), Duration::from_secs(3_600));
        for bad in ["1s", "500ms", "2h"] {
            let err = failover(bad).unwrap_err();
            assert_eq!(err.flag, "--failover-time", "{bad}");
        }
    }

    #[test]
    fn byte_sizes_accept_units() {
        assert_eq!(parse_byte_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_byte_size("1048576").unwrap(), 1 << 20);
        assert!(parse_byte_size("lots").is_err());
    }

    #[test]
    fn path_style_reads_true_and_false() {
        let base = ["--stream", "s", "--bucket", "bkt"];
        let mut with = base.to_vec();
        with.push("--s3-force-path-style");
        assert!(parse(&with).unwrap().s3_force_path_style);
        let mut off = base.to_vec();
        off.extend(["--s3-force-path-style", "false"]);
        assert!(!parse(&off).unwrap().s3_force_path_style);
    }
}

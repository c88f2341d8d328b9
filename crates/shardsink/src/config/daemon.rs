//! [`Config`]: the daemon's settings, as flags and `SHARDSINK_*` environment
//! variables, validated into [`Settings`]. The doc comment of each field is
//! the user's documentation (it is what `shardsink --help` prints;
//! `docs/CONFIGURATION.md` repeats it).

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::archive::{Archive, ArchiveArgs, is_stream_name};
use super::error::ConfigError;
use super::events::{EventArgs, EventDedup, EventStoreArgs};
use super::iceberg::{IcebergArgs, IcebergSettings};
use super::values::{
    RecordDelimiter, parse_byte_size, parse_delimiter, parse_duration, parse_timestamp,
};
use super::{
    CompressionCodec, InitialPosition, KeyStyle, LogFormat, OutputFormat, StreamRef, TimeBucket,
};
use crate::output::Output;
use crate::output::compression::Compression;
use crate::output::format::schema::ParquetSchema;
use crate::output::format::{DEFAULT_METADATA_FIELD, Format};
use crate::output::key::KeyLayout;
use crate::read::mode::ReadMode;

/// The shortest `--failover-time`: a writer stops sending a PUT one second
/// before its lease could move, so below two seconds almost nothing fits.
pub const MIN_FAILOVER_TIME: Duration = Duration::from_secs(2);

/// The longest `--failover-time` (one hour): beyond it a dead worker's
/// shards would wait hours to move.
pub const MAX_FAILOVER_TIME: Duration = Duration::from_secs(3_600);

/// The longest `--buffer-max-age`: 15 minutes, as Firehose's buffering
/// interval.
pub const MAX_BUFFER_MAX_AGE: Duration = Duration::from_secs(900);

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
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "shardsink",
    version,
    max_term_width = 100,
    args_override_self = true
)]
pub struct Config {
    /// Where the archive is (shared with `shardsink verify`).
    #[command(flatten)]
    pub archive: ArchiveArgs,

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

    /// Flush a shard's buffer once its encoded records reach this size
    /// (before compression), like Firehose's buffering size hint. Units: B,
    /// KiB, MiB, GiB (or KB, MB, GB).
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
    /// Firehose's buffering interval hint (at most 15m). A buffer is also
    /// flushed when its arrival minute or hour (--time-bucket) is over.
    #[arg(long, env = "SHARDSINK_BUFFER_MAX_AGE", default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub buffer_max_age: Duration,

    /// Limit on the records held: all shards' buffers, batches being written
    /// and GetRecords responses. Past it, buffers are written early and
    /// reads wait; replays after a crash take turns. The process stays
    /// under twice this plus 100 MiB.
    #[arg(long, env = "SHARDSINK_BUFFER_MEMORY_LIMIT", default_value = "256MiB", value_parser = parse_byte_size, value_name = "SIZE")]
    pub buffer_memory_limit: u64,

    /// What each record becomes: envelope (JSON Lines, payload in base64
    /// beside the Kinesis metadata; .jsonl), json (JSON Lines of the
    /// payloads, which must be JSON objects, with the metadata under
    /// --metadata-field; .jsonl), raw (the payload bytes, each followed by
    /// --record-delimiter; .raw), parquet (one row per record; .parquet) or
    /// iceberg (rows of an Apache Iceberg table: see --iceberg-catalog).
    #[arg(
        long,
        env = "SHARDSINK_FORMAT",
        value_enum,
        ignore_case = true,
        default_value = "envelope",
        value_name = "FORMAT"
    )]
    pub format: OutputFormat,

    /// With --format json: the member each line's Kinesis metadata goes
    /// under (shardId, sequenceNumber, subSequenceNumber, partitionKey,
    /// approximateArrivalTimestamp). Empty: no metadata. [default: _kinesis]
    #[arg(long, env = "SHARDSINK_METADATA_FIELD", value_name = "NAME")]
    pub metadata_field: Option<String>,

    /// With --format raw: the bytes written after each payload; \n, \r,
    /// \t, \0, \\ and \xHH are escapes; may be empty. [default: \n]
    #[arg(long, env = "SHARDSINK_RECORD_DELIMITER", value_parser = parse_delimiter, value_name = "TEXT", allow_hyphen_values = true)]
    pub record_delimiter: Option<RecordDelimiter>,

    /// With --format parquet (or iceberg, for the table it creates): a JSON
    /// file listing the columns to make of each JSON payload's fields
    /// instead of the data column, e.g.
    /// [{"name":"user_id","type":"int64"}]; see docs/CONFIGURATION.md.
    #[arg(long, env = "SHARDSINK_PARQUET_SCHEMA", value_name = "FILE")]
    pub parquet_schema: Option<std::path::PathBuf>,

    /// How the time part of keys is written: plain (2026/11/21/05/27/) or
    /// hive (year=2026/month=11/day=21/hour=05/minute=27/). Recorded under
    /// the prefix: a prefix keeps the layout it was started with.
    #[arg(
        long,
        env = "SHARDSINK_KEY_LAYOUT",
        value_enum,
        ignore_case = true,
        default_value = "plain",
        value_name = "LAYOUT"
    )]
    pub key_layout: KeyStyle,

    /// The span of arrival time one object holds: minute or hour. Recorded
    /// under the prefix: a prefix keeps the bucket it was started with.
    #[arg(
        long,
        env = "SHARDSINK_TIME_BUCKET",
        value_enum,
        ignore_case = true,
        default_value = "minute",
        value_name = "BUCKET"
    )]
    pub time_bucket: TimeBucket,

    /// The Iceberg table, with --format iceberg.
    #[command(flatten)]
    pub iceberg: IcebergArgs,

    /// Which records are the same event (event deduplication; off unless
    /// --event-id is set).
    #[command(flatten)]
    pub events: EventArgs,

    /// Where accepted copies of events are kept.
    #[command(flatten)]
    pub event_store: EventStoreArgs,

    /// Compression: none, gzip or zstd. For envelope, json and raw the whole
    /// object is compressed (.gz, .zst after the extension); for parquet,
    /// its pages. Athena, Spark, Trino and DuckDB read all of them.
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

    /// How shards are read: polling (GetRecords; each shard's 5 reads a
    /// second and 2 MB/s are shared with the stream's other polling
    /// consumers) or fan-out (enhanced fan-out: SubscribeToShard through a
    /// stream consumer with its own 2 MB/s per shard, pushed; registered if
    /// missing, never deregistered, billed per consumer-shard hour).
    #[arg(
        long,
        env = "SHARDSINK_READ_MODE",
        value_enum,
        ignore_case = true,
        default_value = "polling",
        value_name = "MODE"
    )]
    pub read_mode: ReadMode,

    /// Name of the enhanced fan-out stream consumer, registered on the
    /// stream if missing; used with --read-mode fan-out only. The workers of
    /// one application share it. [default: the application name]
    #[arg(long, env = "SHARDSINK_CONSUMER_NAME", value_name = "NAME")]
    pub consumer_name: Option<String>,

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

/// Settings after validation, with defaults resolved.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The parsed command line / environment.
    pub config: Config,
    /// The stream.
    pub stream: StreamRef,
    /// The bucket.
    pub bucket: String,
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
    /// Format, compression and key layouts of the objects.
    pub(crate) output: Output,
    /// Event deduplication, when on.
    pub events: Option<EventDedup>,
    /// The enhanced fan-out stream consumer's name, with `--read-mode
    /// fan-out`; `None` when polling.
    pub consumer_name: Option<String>,
    /// The Iceberg table and its commits, with `--format iceberg`; then
    /// `output`'s format is `parquet` (with `--parquet-schema`'s columns),
    /// the columns of a table created, until start-up has opened the table
    /// and made it the table's own.
    pub iceberg: Option<IcebergSettings>,
}

impl Config {
    /// Checks every setting and resolves defaults.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first bad setting.
    pub fn validate(self) -> Result<Settings, ConfigError> {
        // The daemon needs the stream (verify does not).
        if self.archive.stream.is_none() {
            return Err(ConfigError::missing("stream"));
        }
        let Archive {
            stream: Some(stream),
            bucket,
            prefix,
            error_prefix,
            duplicates_prefix,
            lease_table: Some(lease_table),
        } = self.archive.validate()?
        else {
            return Err(ConfigError::missing("stream"));
        };
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
        if !(Duration::from_millis(100)..=MAX_BUFFER_MAX_AGE).contains(&self.buffer_max_age) {
            return Err(ConfigError::new(
                "buffer-max-age",
                "must be at least 100ms and at most 15m",
            ));
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
        let consumer_name = self.consumer_name()?;
        let format = self.output_format()?;
        let events = EventDedup::resolve(&self.events, &self.event_store, &lease_table)?;
        let iceberg = self
            .iceberg
            .validate(self.format == OutputFormat::Iceberg)?;
        let layout = KeyLayout::new(prefix.clone(), self.key_layout, self.time_bucket);
        let output = Output::new(layout, error_prefix, duplicates_prefix, format)
            .with_compression(Compression::new(self.compression, self.compression_level));
        Ok(Settings {
            output,
            events,
            config: self,
            stream,
            bucket,
            prefix,
            lease_table,
            worker_id,
            lease_renewal_interval,
            lease_taking_interval,
            metrics_address,
            consumer_name,
            iceberg,
        })
    }

    /// The stream consumer's name with `--read-mode fan-out` (default: the
    /// application name); `None` when polling. A name given for polling is
    /// checked all the same and not used, so that a deployment can switch
    /// modes by the one setting. RegisterStreamConsumer's `ConsumerName` is
    /// 1-128 of a-z A-Z 0-9 _ . - (Kinesis API reference).
    fn consumer_name(&self) -> Result<Option<String>, ConfigError> {
        let name = self
            .consumer_name
            .clone()
            .unwrap_or_else(|| self.archive.application_name.clone());
        if !is_stream_name(&name) {
            return Err(ConfigError::new(
                "consumer-name",
                format!("{name:?} is not a name (1-128 of a-z A-Z 0-9 _ . -)"),
            ));
        }
        Ok((self.read_mode == ReadMode::FanOut).then_some(name))
    }

    /// The format with its settings; a setting of another format is a bad
    /// setting, not silently ignored.
    fn output_format(&self) -> Result<Format, ConfigError> {
        let only_with = |setting: &'static str, format: &str| {
            ConfigError::new(
                setting,
                format!(
                    "only used with --format {format} (--format is {})",
                    self.format.as_str()
                ),
            )
        };
        if self.metadata_field.is_some() && self.format != OutputFormat::Json {
            return Err(only_with("metadata-field", "json"));
        }
        if self.record_delimiter.is_some() && self.format != OutputFormat::Raw {
            return Err(only_with("record-delimiter", "raw"));
        }
        if self.parquet_schema.is_some()
            && !matches!(self.format, OutputFormat::Parquet | OutputFormat::Iceberg)
        {
            return Err(only_with("parquet-schema", "parquet or iceberg"));
        }
        Ok(match self.format {
            OutputFormat::Envelope => Format::Envelope,
            OutputFormat::Json => Format::Json {
                metadata_field: match self.metadata_field.as_deref() {
                    None => Some(DEFAULT_METADATA_FIELD.to_owned()),
                    Some("") => None,
                    Some(field) => Some(field.to_owned()),
                },
            },
            OutputFormat::Raw => Format::Raw {
                delimiter: self
                    .record_delimiter
                    .clone()
                    .map_or_else(|| b"\n".to_vec(), |delimiter| delimiter.0),
            },
            // The table's own layout replaces it at start-up.
            OutputFormat::Parquet | OutputFormat::Iceberg => Format::Parquet {
                schema: match &self.parquet_schema {
                    None => None,
                    Some(path) => Some(std::sync::Arc::new(
                        ParquetSchema::load(path)
                            .map_err(|message| ConfigError::new("parquet-schema", message))?,
                    )),
                },
            },
        })
    }
}

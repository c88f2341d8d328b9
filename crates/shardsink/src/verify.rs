//! `shardsink verify`: audits what shardsink wrote for one stream under a
//! bucket prefix and says whether it is exact — every record once, nothing
//! missing up to the checkpoints.
//!
//! # Checks
//! 1. **Keys.** Every key under `{prefix}/` is listed (all pages) and parsed
//!    as `{prefix}/{yyyy}/{MM}/{dd}/{HH}/{mm}/{shardId}/{name}`, `name` by
//!    [`crate::key::parse_object_name`]. A key that does not parse is
//!    *foreign*: listed as a warning and otherwise ignored, as dedup ignores
//!    it. Foreign keys do not make the archive inexact.
//! 2. **Overlaps.** Two objects of one shard whose sequence ranges share a
//!    number. An object holds every record of its shard in its range
//!    (`docs/DESIGN.md`, I1) and a range's ends are records, so the larger of
//!    two overlapping ranges' `first`s is a record in both objects: an
//!    overlap is a record archived twice. Ranges of different shards never
//!    overlap, whatever their numbers.
//! 3. **Unreadable objects** (`--deep`). Each object is fetched, decompressed
//!    by its extension and read line by line. It is unreadable when it does
//!    not decompress, has no lines, a line is empty or not a JSON object with
//!    exactly the fields shardsink writes (`shardId`, `sequenceNumber`,
//!    optional `subSequenceNumber`, `partitionKey`,
//!    `approximateArrivalTimestamp`, `data` in base64), a line's `shardId` is
//!    not the key's, its `sequenceNumber` is outside the key's range, its
//!    arrival time is outside the key's minute, a (`sequenceNumber`,
//!    `subSequenceNumber`) pair repeats, or no line carries the key's `first`
//!    or `last`.
//! 4. **Gaps** (`--stream`, when Kinesis answers). For every shard of the
//!    stream (ListShards) the *bound* is the larger of the lease row's
//!    checkpoint and the highest archived sequence number; a `SHARD_END`
//!    checkpoint makes it the whole shard, and a sentinel (`TRIM_HORIZON`, …)
//!    contributes nothing. The shard is read from `TRIM_HORIZON` — the
//!    oldest retained record — up to the bound. Every record read at or below
//!    the bound whose sequence number is in no object range of its shard is
//!    a gap. Records already trimmed by retention cannot be checked; the
//!    report says where each shard's check started. Key ranges alone cannot
//!    show a gap: Kinesis does not hand out consecutive sequence numbers, so
//!    a hole between two ranges may hold no record at all.
//!
//! The lease table is read *before* the listing: a checkpoint is written
//! only after its objects (I3), so every object a checkpoint read first
//! vouches for is in the listing that follows, even while the daemon runs.
//!
//! # Output and exit
//! Progress goes to stderr: an `indicatif` bar on a terminal, plain lines
//! otherwise. The summary goes to stdout: counts, then up to 50 offending
//! objects or records, up to 50 foreign keys, and `exact` or `NOT exact`.
//! [`run`] returns `Ok(true)` when there is no overlap, no unreadable object
//! and no gap; the binary exits 0, 1, or 2 when the audit cannot run.
//!
//! # Layout of this file
//! Arguments and their validation (`Plan`); the I/O (`run` → `audit`:
//! listing, fetching objects, reading shards), kept thin; the checks as pure
//! functions (`parse_archived_key`, `overlaps`, `check_body`,
//! `ShardGapCheck`, `Audit::render`), each with unit tests at the end, and
//! one test of `audit` through the SDK against in-memory fakes.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use chrono::{DateTime, NaiveDate, SecondsFormat};
use futures::StreamExt as _;
use indicatif::{ProgressBar, ProgressStyle};
use sequence_range::{RangeSet, SequenceNumber, SequenceRange};
use shard_lease::{Checkpoint, LeaseTable};

use crate::aws::{AwsClients, Kinesis, KinesisError, ObjectStore, S3Error, StartingPosition};
use crate::backoff::Backoff;
use crate::compression::{decompress, extension};
use crate::config::{CompressionCodec, ConfigError, InitialPosition, StreamRef};
use crate::key::parse_object_name;
use crate::minute::Minute;

/// Most offending items (overlaps, unreadable objects, gaps) the summary
/// lists; the same for foreign keys.
const MAX_LISTED: usize = 50;
/// Objects fetched and checked at once with `--deep`.
const DEEP_CONCURRENCY: usize = 8;
/// Shards read at once for the gap check (each paced on its own).
const SHARD_CONCURRENCY: usize = 16;
/// Kinesis allows 5 GetRecords calls a second per shard: at least this long
/// between two calls on one shard.
const MIN_CALL_INTERVAL: Duration = Duration::from_millis(200);
/// Records asked for per GetRecords call (the API's maximum).
const GET_RECORDS_LIMIT: i32 = 10_000;
/// Consecutive failed calls (after the SDK's own retries) before a shard's
/// gap check, an object's GET or the listing gives up.
const MAX_FAILURES: u32 = 10;
/// Consecutive throttled calls on one shard before its gap check gives up:
/// a running daemon shares the shard's read limit, so throttling is
/// expected (about ten minutes at the 10 s backoff cap).
const MAX_THROTTLED: u32 = 60;
/// Plain progress lines at most this often per phase.
const PLAIN_PROGRESS_INTERVAL: Duration = Duration::from_secs(5);

/// Audits the archive of one stream: lists every object under the prefix,
/// checks that no two objects of a shard share a sequence number, optionally
/// reads every line (--deep), and, given the stream, that no record up to
/// the checkpoints is missing.
///
/// AWS credentials, region and endpoints come from the standard sources, as
/// for the daemon. Progress goes to stderr, the summary to stdout. Exit
/// codes: 0 exact, 1 not exact (the summary lists the offending keys and
/// records), 2 when the audit cannot run (bad argument, bucket unreachable).
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "shardsink verify",
    bin_name = "shardsink verify",
    max_term_width = 100,
    args_override_self = true
)]
pub struct VerifyArgs {
    /// S3 bucket holding the archive.
    #[arg(long, env = "SHARDSINK_BUCKET", value_name = "BUCKET")]
    pub bucket: String,

    /// Key prefix of the archive, as the daemon's --prefix. [default: the
    /// stream name when --stream is given; required otherwise]
    #[arg(long, env = "SHARDSINK_PREFIX", value_name = "PREFIX")]
    pub prefix: Option<String>,

    /// Kinesis data stream the archive is of (name or ARN). Enables the gap
    /// check: every shard is read from its oldest retained record up to its
    /// checkpoint, and each record must be in some object's range.
    #[arg(long, env = "SHARDSINK_STREAM", value_name = "NAME|ARN")]
    pub stream: Option<String>,

    /// Application name, as the daemon's: the default lease table is
    /// <application name>-<stream name>.
    #[arg(
        long,
        env = "SHARDSINK_APPLICATION_NAME",
        default_value = "shardsink",
        value_name = "NAME"
    )]
    pub application_name: String,

    /// Lease table holding the checkpoints (read only; used with --stream).
    /// [default: <application name>-<stream name>]
    #[arg(long, env = "SHARDSINK_LEASE_TABLE", value_name = "TABLE")]
    pub lease_table: Option<String>,

    /// Where the daemon starts a shard without a checkpoint, as its
    /// --initial-position. With LATEST or AT_TIMESTAMP the records before a
    /// shard's first archived record were never meant to be archived, so the
    /// gap check of each shard starts at its first archived record (a lost
    /// first object then goes unnoticed).
    #[arg(
        long,
        env = "SHARDSINK_INITIAL_POSITION",
        value_enum,
        ignore_case = true,
        default_value = "TRIM_HORIZON",
        value_name = "POSITION"
    )]
    pub initial_position: InitialPosition,

    /// Also fetch every object and check every line: decompresses, parses,
    /// belongs to the key's shard, range and minute, and no record twice.
    #[arg(long)]
    pub deep: bool,

    /// Address S3 buckets by path (http://host/bucket/key) instead of by
    /// virtual host; needed by most local S3 servers.
    #[arg(long, env = "SHARDSINK_S3_FORCE_PATH_STYLE", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub s3_force_path_style: bool,
}

/// Runs the audit and prints its summary; `Ok(true)` when the archive is
/// exact: no overlap, no unreadable object (with `--deep`), no gap (with
/// `--stream`, when Kinesis answers).
///
/// # Errors
/// A bad argument (a [`ConfigError`] naming it); the bucket cannot be listed.
pub async fn run(args: VerifyArgs) -> anyhow::Result<bool> {
    let plan = Plan::from_args(&args)?;
    let clients = AwsClients::from_env(args.s3_force_path_style).await;
    let audit = audit(&plan, &clients, std::io::stderr().is_terminal()).await?;
    // Not `print!`: a closed stdout must not turn the verdict into a panic.
    let _ = std::io::Write::write_all(&mut std::io::stdout(), audit.render().as_bytes());
    Ok(audit.is_exact())
}

/// The checks, in order; progress on stderr (a bar when `tty`).
async fn audit(plan: &Plan, clients: &AwsClients, tty: bool) -> anyhow::Result<Audit> {
    let store = ObjectStore::new(clients.s3.clone(), &plan.bucket);

    // Checkpoints first, then the listing (see the module documentation).
    let checkpoints = match (&plan.stream, &plan.lease_table) {
        (Some(_), Some(table)) => Some(read_checkpoints(clients, table).await),
        _ => None,
    };

    let keys = list_keys(&store, &plan.list_prefix, tty).await?;
    let (objects, foreign) = classify(&plan.list_prefix, keys);
    let overlaps = overlaps(&objects);

    let deep = if plan.deep {
        Some(read_objects(&store, &objects, tty).await)
    } else {
        None
    };

    let gaps = match &plan.stream {
        None => GapOutcome::NotRequested,
        Some(stream) => {
            let kinesis = Kinesis::new(clients.kinesis.clone(), stream.clone());
            check_gaps(&kinesis, &objects, checkpoints, plan, tty).await
        }
    };

    Ok(Audit {
        target: plan.target(),
        objects: objects.len(),
        shards_in_archive: objects
            .iter()
            .map(|o| o.shard_id.as_str())
            .collect::<HashSet<_>>()
            .len(),
        foreign,
        overlaps,
        deep,
        gaps,
    })
}

// ---------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------

/// The arguments, validated, with defaults resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Plan {
    bucket: String,
    /// The prefix as given (no trailing slash; may be empty).
    prefix: String,
    /// What is listed: `{prefix}/`, or everything for an empty prefix.
    list_prefix: String,
    stream: Option<StreamRef>,
    /// Set when `stream` is.
    lease_table: Option<String>,
    deep: bool,
    /// Whether each shard's gap check starts at its first archived record
    /// (initial position LATEST or AT_TIMESTAMP) instead of the oldest
    /// retained one.
    from_first_archived: bool,
}

impl Plan {
    fn from_args(args: &VerifyArgs) -> Result<Self, ConfigError> {
        validate_bucket(&args.bucket)?;
        let stream = args.stream.as_deref().map(parse_stream).transpose()?;
        let prefix = match (&args.prefix, &stream) {
            (Some(prefix), _) => validate_prefix(prefix)?,
            (None, Some(stream)) => stream.name().to_owned(),
            (None, None) => {
                return Err(setting_error(
                    "prefix",
                    "required when --stream is not given (the daemon's default prefix is the stream name)",
                ));
            }
        };
        let lease_table = match &stream {
            None => None,
            Some(stream) => {
                let table = args
                    .lease_table
                    .clone()
                    .unwrap_or_else(|| format!("{}-{}", args.application_name, stream.name()));
                validate_table_name(&table)?;
                Some(table)
            }
        };
        let list_prefix = if prefix.is_empty() {
            String::new()
        } else {
            format!("{prefix}/")
        };
        Ok(Self {
            bucket: args.bucket.clone(),
            prefix,
            list_prefix,
            stream,
            lease_table,
            deep: args.deep,
            from_first_archived: args.initial_position != InitialPosition::TrimHorizon,
        })
    }

    /// `s3://bucket/prefix/ (stream …, lease table …)`, for the summary.
    fn target(&self) -> String {
        let mut target = format!("s3://{}/{}", self.bucket, self.list_prefix);
        if let (Some(stream), Some(table)) = (&self.stream, &self.lease_table) {
            let _ = write!(
                target,
                " (stream {}, lease table {table})",
                stream_label(stream)
            );
        }
        target
    }
}

fn stream_label(stream: &StreamRef) -> &str {
    match stream {
        StreamRef::Name(name) => name,
        StreamRef::Arn { arn, .. } => arn,
    }
}

/// A [`ConfigError`] for `--{flag}` / `SHARDSINK_{FLAG}`.
fn setting_error(flag: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        flag: format!("--{flag}"),
        env: format!("SHARDSINK_{}", flag.replace('-', "_").to_uppercase()),
        message: message.into(),
    }
}

/// A stream name or ARN, as the daemon accepts it.
fn parse_stream(stream: &str) -> Result<StreamRef, ConfigError> {
    if let Some(rest) = stream.strip_prefix("arn:") {
        // arn:PARTITION:kinesis:REGION:ACCOUNT:stream/NAME
        let parts: Vec<&str> = rest.splitn(5, ':').collect();
        let name = match parts.as_slice() {
            [_, "kinesis", _, _, resource] => resource.strip_prefix("stream/"),
            _ => None,
        };
        return match name {
            Some(name) if is_aws_name(name, 1, 128) => Ok(StreamRef::Arn {
                arn: stream.to_owned(),
                name: name.to_owned(),
            }),
            _ => Err(setting_error(
                "stream",
                format!(
                    "{stream:?} is not a Kinesis stream ARN (arn:aws:kinesis:REGION:ACCOUNT:stream/NAME)"
                ),
            )),
        };
    }
    if !is_aws_name(stream, 1, 128) {
        return Err(setting_error(
            "stream",
            format!("{stream:?} is not a stream name (1-128 of a-z A-Z 0-9 _ . -)"),
        ));
    }
    Ok(StreamRef::Name(stream.to_owned()))
}

/// `min..=max` bytes of `a-z A-Z 0-9 _ . -`: Kinesis stream names and shard
/// ids, DynamoDB table names.
fn is_aws_name(name: &str, min: usize, max: usize) -> bool {
    (min..=max).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

fn validate_bucket(bucket: &str) -> Result<(), ConfigError> {
    let ok = (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(setting_error(
            "bucket",
            format!("{bucket:?} is not a bucket name (3-63 of a-z 0-9 . -)"),
        ))
    }
}

/// As the daemon: trailing slashes dropped; no leading slash, no `//`.
fn validate_prefix(prefix: &str) -> Result<String, ConfigError> {
    let trimmed = prefix.trim_end_matches('/');
    if trimmed.starts_with('/') || trimmed.contains("//") {
        return Err(setting_error(
            "prefix",
            format!("{prefix:?} must not start with / or contain //"),
        ));
    }
    Ok(trimmed.to_owned())
}

fn validate_table_name(table: &str) -> Result<(), ConfigError> {
    if is_aws_name(table, 3, 255) {
        Ok(())
    } else {
        Err(setting_error(
            "lease-table",
            format!("{table:?} is not a DynamoDB table name (3-255 of a-z A-Z 0-9 _ . -)"),
        ))
    }
}

// ---------------------------------------------------------------------------
// Keys and overlaps (pure)
// ---------------------------------------------------------------------------

/// A key that is a shardsink object.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ArchivedKey {
    key: String,
    minute: Minute,
    shard_id: String,
    range: SequenceRange,
    codec: CompressionCodec,
}

/// A key under the prefix that is not one shardsink writes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ForeignKey {
    key: String,
    reason: String,
}

/// Parses `{list_prefix}{yyyy}/{MM}/{dd}/{HH}/{mm}/{shardId}/{name}`.
///
/// # Errors
/// Why the key is foreign.
fn parse_archived_key(list_prefix: &str, key: &str) -> Result<ArchivedKey, String> {
    let rest = key
        .strip_prefix(list_prefix)
        .ok_or_else(|| format!("not under {list_prefix:?}"))?;
    let segments: Vec<&str> = rest.split('/').collect();
    let [year, month, day, hour, minute, shard_id, name] = segments[..] else {
        return Err(format!(
            "{} path segments after the prefix, not yyyy/MM/dd/HH/mm/shardId/name",
            segments.len()
        ));
    };
    let minute = parse_minute([year, month, day, hour, minute])
        .ok_or_else(|| format!("{year}/{month}/{day}/{hour}/{minute} is not a UTC minute"))?;
    if !is_aws_name(shard_id, 1, 128) {
        return Err(format!("{shard_id:?} is not a shard id"));
    }
    let parsed = parse_object_name(name).map_err(|err| err.to_string())?;
    Ok(ArchivedKey {
        key: key.to_owned(),
        minute,
        shard_id: shard_id.to_owned(),
        range: parsed.range,
        codec: parsed.codec,
    })
}

/// `yyyy/MM/dd/HH/mm` path segments as a minute: exactly 4 and 2 digits,
/// a real date and time.
fn parse_minute([year, month, day, hour, minute]: [&str; 5]) -> Option<Minute> {
    let number = |text: &str, width: usize| -> Option<u32> {
        if text.len() == width && text.bytes().all(|b| b.is_ascii_digit()) {
            text.parse().ok()
        } else {
            None
        }
    };
    let date = NaiveDate::from_ymd_opt(
        i32::try_from(number(year, 4)?).ok()?,
        number(month, 2)?,
        number(day, 2)?,
    )?;
    let time = date.and_hms_opt(number(hour, 2)?, number(minute, 2)?, 0)?;
    Some(Minute::from_datetime(time.and_utc()))
}

/// Splits a listing into objects and foreign keys.
fn classify(list_prefix: &str, keys: Vec<String>) -> (Vec<ArchivedKey>, Vec<ForeignKey>) {
    let mut objects = Vec::with_capacity(keys.len());
    let mut foreign = Vec::new();
    for key in keys {
        match parse_archived_key(list_prefix, &key) {
            Ok(object) => objects.push(object),
            Err(reason) => foreign.push(ForeignKey { key, reason }),
        }
    }
    (objects, foreign)
}

/// Two objects of one shard whose ranges share at least one sequence number.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Overlap {
    shard_id: String,
    /// The object that sorts first (by first, then last, then key).
    earlier: (String, SequenceRange),
    /// The object that overlaps it.
    later: (String, SequenceRange),
}

/// The overlaps among `objects`, shard by shard.
///
/// Objects are sorted by (first, last, key) and swept once: an object that
/// shares a number with any object before it is reported together with the
/// one among those that reaches furthest. That names every object involved
/// in some overlap — the first later object overlapping X always finds X
/// reaching furthest — and reports at most one pair per object, so the cost
/// is O(n log n) however many pairs overlap. No overlap reported ⇔ no two
/// objects of a shard share a number.
fn overlaps(objects: &[ArchivedKey]) -> Vec<Overlap> {
    let mut by_shard: BTreeMap<&str, Vec<&ArchivedKey>> = BTreeMap::new();
    for object in objects {
        by_shard.entry(&object.shard_id).or_default().push(object);
    }
    let mut found = Vec::new();
    for (shard_id, mut shard_objects) in by_shard {
        shard_objects.sort_by(|a, b| {
            (a.range.first(), a.range.last(), &a.key).cmp(&(
                b.range.first(),
                b.range.last(),
                &b.key,
            ))
        });
        let mut reach: Option<&ArchivedKey> = None;
        for object in shard_objects {
            match reach {
                Some(furthest) if furthest.range.last() >= object.range.first() => {
                    found.push(Overlap {
                        shard_id: shard_id.to_owned(),
                        earlier: (furthest.key.clone(), furthest.range.clone()),
                        later: (object.key.clone(), object.range.clone()),
                    });
                    if object.range.last() > furthest.range.last() {
                        reach = Some(object);
                    }
                }
                _ => reach = Some(object),
            }
        }
    }
    found
}

// ---------------------------------------------------------------------------
// Object bodies (pure)
// ---------------------------------------------------------------------------

/// One JSON line as shardsink writes it (`encode.rs`); any other field is an
/// error.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Line<'a> {
    #[serde(borrow)]
    shard_id: Cow<'a, str>,
    #[serde(borrow)]
    sequence_number: Cow<'a, str>,
    sub_sequence_number: Option<u64>,
    #[serde(borrow)]
    #[allow(dead_code)] // read for its type only
    partition_key: Cow<'a, str>,
    #[serde(borrow)]
    approximate_arrival_timestamp: Cow<'a, str>,
    #[serde(borrow)]
    data: Cow<'a, str>,
}

/// What reading one object found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct BodyCheck {
    /// Lines that parsed (user records).
    lines: u64,
    /// Distinct sequence numbers among them (Kinesis records).
    kinesis_records: u64,
    /// The first problem found.
    first_problem: Option<String>,
    /// How many problems were found.
    problems: u64,
}

impl BodyCheck {
    fn failed(reason: String) -> Self {
        Self {
            first_problem: Some(reason),
            problems: 1,
            ..Self::default()
        }
    }

    fn problem(&mut self, reason: impl FnOnce() -> String) {
        if self.first_problem.is_none() {
            self.first_problem = Some(reason());
        }
        self.problems += 1;
    }
}

/// Checks an object's body against its key (check 3 of the module
/// documentation).
fn check_body(object: &ArchivedKey, body: &[u8]) -> BodyCheck {
    let text = match decompress(object.codec, body) {
        Ok(text) => text,
        Err(err) => {
            return BodyCheck::failed(format!(
                "does not decompress as {}: {err}",
                extension(object.codec)
            ));
        }
    };
    let mut check = BodyCheck::default();
    let first = object.range.first().to_string();
    let last = object.range.last().to_string();
    let mut seen: HashSet<(String, Option<u64>)> = HashSet::new();
    let mut records: HashSet<String> = HashSet::new();
    let mut data = Vec::new();
    let pieces: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
    for (index, raw) in pieces.iter().enumerate() {
        let n = index + 1;
        if raw.is_empty() {
            // The piece after the final newline is empty; any other is not.
            if index + 1 < pieces.len() {
                check.problem(|| format!("line {n} is empty"));
            }
            continue;
        }
        let line: Line<'_> = match serde_json::from_slice(raw) {
            Ok(line) => line,
            Err(err) => {
                check.problem(|| format!("line {n} is not a shardsink JSON line: {err}"));
                continue;
            }
        };
        check.lines += 1;
        if line.shard_id != object.shard_id {
            check.problem(|| {
                format!(
                    "line {n}: shardId {:?} is not the key's shard {:?}",
                    line.shard_id, object.shard_id
                )
            });
        }
        let sequence_number = line.sequence_number.as_ref();
        if SequenceNumber::validate_text(sequence_number).is_err() {
            check.problem(|| format!("line {n}: sequenceNumber {sequence_number:?} is not one"));
        } else {
            if SequenceNumber::cmp_text(sequence_number, &first) == Ordering::Less
                || SequenceNumber::cmp_text(sequence_number, &last) == Ordering::Greater
            {
                check.problem(|| {
                    format!(
                        "line {n}: sequenceNumber {sequence_number} is outside the key's range {first}-{last}"
                    )
                });
            }
            if !seen.insert((sequence_number.to_owned(), line.sub_sequence_number)) {
                check.problem(|| {
                    format!(
                        "line {n}: record ({sequence_number}, {:?}) appears twice",
                        line.sub_sequence_number
                    )
                });
            }
            if !records.contains(sequence_number) {
                records.insert(sequence_number.to_owned());
            }
        }
        let timestamp = line.approximate_arrival_timestamp.as_ref();
        match DateTime::parse_from_rfc3339(timestamp) {
            Ok(time) if Minute::from_millis(time.timestamp_millis()) == object.minute => {}
            Ok(_) => check.problem(|| {
                format!(
                    "line {n}: approximateArrivalTimestamp {timestamp} is not in the key's minute {}",
                    minute_text(object.minute)
                )
            }),
            Err(err) => check.problem(|| {
                format!("line {n}: approximateArrivalTimestamp {timestamp:?}: {err}")
            }),
        }
        data.clear();
        if let Err(err) = STANDARD.decode_vec(line.data.as_bytes(), &mut data) {
            check.problem(|| format!("line {n}: data is not base64: {err}"));
        }
    }
    check.kinesis_records = records.len() as u64;
    if check.lines == 0 && check.problems == 0 {
        check.problem(|| "object has no lines".to_owned());
    }
    if check.lines > 0 {
        for (end, name) in [(&first, "first"), (&last, "last")] {
            if !records.contains(end.as_str()) {
                check.problem(|| format!("no line has the key's {name} sequence number {end}"));
            }
        }
    }
    check
}

// ---------------------------------------------------------------------------
// Gaps (pure)
// ---------------------------------------------------------------------------

/// Up to where a shard's records must be archived.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Bound {
    /// Every record: the checkpoint is `SHARD_END`.
    ShardEnd,
    /// Every record up to and including this sequence number.
    UpTo(SequenceNumber),
}

/// The bound of a shard: the checkpoint or the highest archived sequence
/// number, whichever is larger; `SHARD_END` is the whole shard; a sentinel
/// checkpoint (nothing written yet) counts as none. `None`: nothing to check.
fn shard_bound(
    checkpoint: Option<&Checkpoint>,
    highest_archived: Option<&SequenceNumber>,
) -> Option<Bound> {
    if checkpoint.is_some_and(Checkpoint::is_shard_end) {
        return Some(Bound::ShardEnd);
    }
    let checkpointed = checkpoint.and_then(Checkpoint::sequence_number);
    checkpointed
        .into_iter()
        .chain(highest_archived)
        .max()
        .map(|n| Bound::UpTo(n.clone()))
}

/// A run of consecutive records of a shard that are in no object.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Gap {
    shard_id: String,
    first: SequenceNumber,
    last: SequenceNumber,
    records: u64,
    first_arrival: Minute,
    last_arrival: Minute,
    /// The object ending just below the gap, if any.
    before: Option<(String, SequenceRange)>,
    /// The object starting just above the gap, if any.
    after: Option<(String, SequenceRange)>,
    /// Whether the gap lies before the shard's first object.
    before_first_object: bool,
    /// Indices of `before` and `after` in the shard's sorted objects: a run
    /// continues only between the same two objects.
    around: (Option<usize>, Option<usize>),
}

/// Whether to read on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Continue,
    /// The bound is reached; later records are not checked.
    Done,
}

/// How reading a shard ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ReadEnd {
    /// A record at or past the bound was read.
    Bound,
    /// The shard is closed and every record was read.
    ShardEnd,
    /// Nothing more to read (no records, `MillisBehindLatest` 0).
    CaughtUp,
    /// Kinesis kept failing.
    Failed(String),
}

/// The gap check of one shard, fed the shard's records in order.
#[derive(Debug)]
struct ShardGapCheck {
    shard_id: String,
    bound: Bound,
    covered: RangeSet,
    /// The shard's objects sorted by first, to name the objects around a gap.
    objects: Vec<(SequenceRange, String)>,
    /// Records below this are not checked (`--initial-position` LATEST or
    /// AT_TIMESTAMP: the first archived record).
    check_from: Option<SequenceNumber>,
    checked: u64,
    not_expected: u64,
    oldest: Option<(SequenceNumber, i64)>,
    last_read: Option<SequenceNumber>,
    gaps: Vec<Gap>,
    in_run: bool,
}

/// What the gap check of one shard found.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ShardGapResult {
    shard_id: String,
    bound: Bound,
    /// Records at or below the bound that were checked.
    checked: u64,
    /// Records before the first archived one, not checked
    /// (`--initial-position` LATEST or AT_TIMESTAMP).
    not_expected: u64,
    /// The oldest retained record and its arrival (ms since the epoch).
    oldest: Option<(SequenceNumber, i64)>,
    gaps: Vec<Gap>,
    /// Facts that limit what the check could see.
    notes: Vec<String>,
}

impl ShardGapCheck {
    fn new(
        shard_id: &str,
        bound: Bound,
        objects: &[&ArchivedKey],
        from_first_archived: bool,
    ) -> Self {
        let mut sorted: Vec<(SequenceRange, String)> = objects
            .iter()
            .map(|o| (o.range.clone(), o.key.clone()))
            .collect();
        sorted
            .sort_by(|a, b| (a.0.first(), a.0.last(), &a.1).cmp(&(b.0.first(), b.0.last(), &b.1)));
        let covered: RangeSet = sorted.iter().map(|(range, _)| range.clone()).collect();
        let check_from = if from_first_archived {
            covered.min().cloned()
        } else {
            None
        };
        Self {
            shard_id: shard_id.to_owned(),
            bound,
            covered,
            objects: sorted,
            check_from,
            checked: 0,
            not_expected: 0,
            oldest: None,
            last_read: None,
            gaps: Vec::new(),
            in_run: false,
        }
    }

    /// The next record of the shard (in sequence order).
    fn observe(&mut self, sequence_number: SequenceNumber, arrival_millis: i64) -> Flow {
        if let Bound::UpTo(bound) = &self.bound {
            if &sequence_number > bound {
                return Flow::Done;
            }
        }
        if self.oldest.is_none() {
            self.oldest = Some((sequence_number.clone(), arrival_millis));
        }
        let at_bound = matches!(&self.bound, Bound::UpTo(b) if *b == sequence_number);
        if self
            .check_from
            .as_ref()
            .is_some_and(|from| &sequence_number < from)
        {
            self.not_expected += 1;
        } else {
            self.checked += 1;
            if self.covered.contains(&sequence_number) {
                self.in_run = false;
            } else {
                self.missing(&sequence_number, arrival_millis);
            }
        }
        self.last_read = Some(sequence_number);
        if at_bound { Flow::Done } else { Flow::Continue }
    }

    fn missing(&mut self, sequence_number: &SequenceNumber, arrival_millis: i64) {
        let minute = Minute::from_millis(arrival_millis);
        let above = self
            .objects
            .partition_point(|(range, _)| range.first() <= sequence_number);
        let around = (
            above.checked_sub(1),
            (above < self.objects.len()).then_some(above),
        );
        if let Some(gap) = self.gaps.last_mut() {
            if self.in_run && gap.around == around {
                gap.last = sequence_number.clone();
                gap.records += 1;
                gap.last_arrival = minute;
                return;
            }
        }
        let object = |index: Option<usize>| {
            index.map(|i| (self.objects[i].1.clone(), self.objects[i].0.clone()))
        };
        self.gaps.push(Gap {
            shard_id: self.shard_id.clone(),
            first: sequence_number.clone(),
            last: sequence_number.clone(),
            records: 1,
            first_arrival: minute,
            last_arrival: minute,
            before: object(around.0),
            after: object(around.1),
            before_first_object: around.0.is_none(),
            around,
        });
        self.in_run = true;
    }

    fn finish(self, end: ReadEnd) -> ShardGapResult {
        let mut notes = Vec::new();
        match (&end, &self.bound) {
            (ReadEnd::Failed(reason), _) => notes.push(format!(
                "check incomplete: Kinesis kept failing after {} records ({reason})",
                self.checked + self.not_expected
            )),
            (ReadEnd::CaughtUp, Bound::ShardEnd) => notes.push(
                "the checkpoint is SHARD_END but the shard is still open (a lease table of another stream?)"
                    .to_owned(),
            ),
            (ReadEnd::CaughtUp | ReadEnd::ShardEnd, Bound::UpTo(bound))
                if self.last_read.as_ref() != Some(bound) =>
            {
                notes.push(format!(
                    "the bound {bound} is not a record of the shard: the stream ended at {} \
                     (archive or lease table of an earlier stream of that name?)",
                    self.last_read
                        .as_ref()
                        .map_or_else(|| "its start".to_owned(), ToString::to_string)
                ));
            }
            _ => {}
        }
        match (&self.oldest, self.covered.min()) {
            (None, Some(_)) => notes.push(
                "no record retained: every archived record is past retention, none checked"
                    .to_owned(),
            ),
            (Some((oldest, _)), Some(lowest)) if lowest < oldest => notes.push(format!(
                "archived records below the oldest retained record {oldest} were trimmed from the \
                 stream and are not checked"
            )),
            _ => {}
        }
        ShardGapResult {
            shard_id: self.shard_id,
            bound: self.bound,
            checked: self.checked,
            not_expected: self.not_expected,
            oldest: self.oldest,
            gaps: self.gaps,
            notes,
        }
    }
}

/// The gaps of one shard's `records` (sequence number, arrival ms) against
/// its `objects` up to `bound`: the pure form of the gap check.
#[cfg(test)]
fn gaps(
    shard_id: &str,
    records: impl IntoIterator<Item = (SequenceNumber, i64)>,
    objects: &[&ArchivedKey],
    bound: Bound,
    from_first_archived: bool,
) -> ShardGapResult {
    let mut check = ShardGapCheck::new(shard_id, bound, objects, from_first_archived);
    for (sequence_number, arrival) in records {
        if check.observe(sequence_number, arrival) == Flow::Done {
            return check.finish(ReadEnd::Bound);
        }
    }
    check.finish(ReadEnd::CaughtUp)
}

// ---------------------------------------------------------------------------
// The summary (pure)
// ---------------------------------------------------------------------------

/// An object `--deep` could not read as a batch of its key.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Unreadable {
    key: String,
    reason: String,
    /// Problems found besides `reason`.
    more: u64,
}

/// What `--deep` found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct DeepSummary {
    lines: u64,
    kinesis_records: u64,
    unreadable: Vec<Unreadable>,
}

/// What became of the gap check.
#[derive(Debug, Clone, PartialEq, Eq)]
enum GapOutcome {
    /// No `--stream`.
    NotRequested,
    /// Kinesis did not answer (ListShards failed).
    Skipped(String),
    /// Checked shard by shard.
    Checked {
        shards: Vec<ShardGapResult>,
        /// Stream-level facts: the lease table, shards not checked.
        notes: Vec<String>,
    },
}

/// Everything the audit found.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Audit {
    target: String,
    objects: usize,
    shards_in_archive: usize,
    foreign: Vec<ForeignKey>,
    overlaps: Vec<Overlap>,
    deep: Option<DeepSummary>,
    gaps: GapOutcome,
}

impl Audit {
    fn missing_records(&self) -> u64 {
        match &self.gaps {
            GapOutcome::Checked { shards, .. } => {
                shards.iter().flat_map(|s| &s.gaps).map(|g| g.records).sum()
            }
            _ => 0,
        }
    }

    fn unreadable(&self) -> usize {
        self.deep.as_ref().map_or(0, |d| d.unreadable.len())
    }

    fn is_exact(&self) -> bool {
        self.overlaps.is_empty() && self.unreadable() == 0 && self.missing_records() == 0
    }

    /// The summary printed on stdout.
    fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "verify {}", self.target);
        let _ = writeln!(out, "objects:      {}", self.objects);
        let _ = writeln!(
            out,
            "foreign keys: {}{}",
            self.foreign.len(),
            if self.foreign.is_empty() {
                ""
            } else {
                " (not shardsink objects: ignored, listed below)"
            }
        );
        let stream_shards = match &self.gaps {
            GapOutcome::Checked { shards, .. } => format!(", {} in the stream", shards.len()),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "shards:       {} in the archive{stream_shards}",
            self.shards_in_archive
        );
        match &self.deep {
            Some(deep) => {
                let _ = writeln!(
                    out,
                    "records:      {} lines, {} Kinesis records",
                    deep.lines, deep.kinesis_records
                );
            }
            None => {
                let _ = writeln!(out, "records:      not read (--deep reads every object)");
            }
        }
        let _ = writeln!(out, "overlaps:     {}", self.overlaps.len());
        match &self.deep {
            Some(deep) => {
                let _ = writeln!(out, "unreadable:   {}", deep.unreadable.len());
            }
            None => {
                let _ = writeln!(out, "unreadable:   not checked (--deep reads every object)");
            }
        }
        let gaps_line = match &self.gaps {
            GapOutcome::NotRequested => "not checked (--stream reads the stream; key ranges alone \
                 cannot show a missing record, Kinesis sequence numbers are not consecutive)"
                .to_owned(),
            GapOutcome::Skipped(reason) => format!("skipped: {reason}"),
            GapOutcome::Checked { shards, .. } => {
                let runs: usize = shards.iter().map(|s| s.gaps.len()).sum();
                let checked: u64 = shards.iter().map(|s| s.checked).sum();
                format!(
                    "{} missing records in {runs} runs ({checked} records checked, from each \
                     shard's oldest retained record)",
                    self.missing_records()
                )
            }
        };
        let _ = writeln!(out, "gaps:         {gaps_line}");

        if let GapOutcome::Checked { shards, notes } = &self.gaps {
            let _ = writeln!(out, "shards checked:");
            for note in notes {
                let _ = writeln!(out, "  {note}");
            }
            for shard in shards {
                let _ = writeln!(out, "  {}", shard_line(shard));
                for note in &shard.notes {
                    let _ = writeln!(out, "    {note}");
                }
            }
        }

        let problems = self.problem_lines();
        if !problems.is_empty() {
            let _ = writeln!(
                out,
                "problems ({} shown of {}):",
                problems.len().min(MAX_LISTED),
                problems.len()
            );
            for line in problems.iter().take(MAX_LISTED) {
                let _ = writeln!(out, "  {line}");
            }
        }
        if !self.foreign.is_empty() {
            let _ = writeln!(
                out,
                "warnings ({} shown of {}):",
                self.foreign.len().min(MAX_LISTED),
                self.foreign.len()
            );
            for foreign in self.foreign.iter().take(MAX_LISTED) {
                let _ = writeln!(out, "  foreign key {}: {}", foreign.key, foreign.reason);
            }
        }
        if self.is_exact() {
            let mut caveats = Vec::new();
            if self.deep.is_none() {
                caveats.push("lines not read".to_owned());
            }
            match &self.gaps {
                GapOutcome::NotRequested => caveats.push("gaps not checked".to_owned()),
                GapOutcome::Skipped(_) => caveats.push("gap check skipped".to_owned()),
                GapOutcome::Checked { .. } => {}
            }
            if caveats.is_empty() {
                let _ = writeln!(out, "exact");
            } else {
                let _ = writeln!(out, "exact ({})", caveats.join(", "));
            }
        } else {
            let _ = writeln!(
                out,
                "NOT exact: {} overlaps, {} unreadable objects, {} missing records",
                self.overlaps.len(),
                self.unreadable(),
                self.missing_records()
            );
        }
        out
    }

    /// One line per offending pair, object or run, in that order.
    fn problem_lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .overlaps
            .iter()
            .map(|o| {
                format!(
                    "overlap in {}: {} ({}) and {} ({}) share sequence numbers",
                    o.shard_id, o.earlier.0, o.earlier.1, o.later.0, o.later.1
                )
            })
            .collect();
        if let Some(deep) = &self.deep {
            lines.extend(deep.unreadable.iter().map(|u| {
                let more = if u.more > 0 {
                    format!(" (and {} more problems)", u.more)
                } else {
                    String::new()
                };
                format!("unreadable {}: {}{more}", u.key, u.reason)
            }));
        }
        if let GapOutcome::Checked { shards, .. } = &self.gaps {
            lines.extend(shards.iter().flat_map(|s| &s.gaps).map(gap_line));
        }
        lines
    }
}

fn shard_line(shard: &ShardGapResult) -> String {
    let from = match &shard.oldest {
        Some((sequence_number, arrival)) => format!(
            "from the oldest retained record {sequence_number} (arrived {})",
            millis_text(*arrival)
        ),
        None => "no record retained".to_owned(),
    };
    let to = match &shard.bound {
        Bound::ShardEnd => "to SHARD_END".to_owned(),
        Bound::UpTo(bound) => format!("up to {bound}"),
    };
    let mut line = format!(
        "{}: {} records checked {from} {to}; {} missing",
        shard.shard_id,
        shard.checked,
        shard.gaps.iter().map(|g| g.records).sum::<u64>()
    );
    if shard.not_expected > 0 {
        let _ = write!(
            line,
            "; {} records before the first archived one not checked (--initial-position)",
            shard.not_expected
        );
    }
    line
}

fn gap_line(gap: &Gap) -> String {
    let span = if gap.first == gap.last {
        format!("record {}", gap.first)
    } else {
        format!("{} records {} .. {}", gap.records, gap.first, gap.last)
    };
    let arrival = if gap.first_arrival == gap.last_arrival {
        minute_text(gap.first_arrival)
    } else {
        format!(
            "{} .. {}",
            minute_text(gap.first_arrival),
            minute_text(gap.last_arrival)
        )
    };
    let describe = |object: &Option<(String, SequenceRange)>, missing: &str| match object {
        Some((key, range)) => format!("{key} ({range})"),
        None => missing.to_owned(),
    };
    format!(
        "gap in {}: {span} (arrived {arrival}) in no object; between {} and {}",
        gap.shard_id,
        describe(&gap.before, "the start of the archive"),
        describe(&gap.after, "the end of the archive"),
    )
}

/// `yyyy-MM-ddTHH:mmZ`.
fn minute_text(minute: Minute) -> String {
    format!("{}Z", minute.rfc3339_prefix().trim_end_matches(':'))
}

/// RFC 3339 with milliseconds.
fn millis_text(millis: i64) -> String {
    DateTime::from_timestamp_millis(millis).map_or_else(
        || format!("{millis} ms"),
        |t| t.to_rfc3339_opts(SecondsFormat::Millis, true),
    )
}

// ---------------------------------------------------------------------------
// I/O
// ---------------------------------------------------------------------------

/// The lease rows' checkpoints by shard id, or why they could not be read.
async fn read_checkpoints(
    clients: &AwsClients,
    table: &str,
) -> Result<HashMap<String, Checkpoint>, String> {
    LeaseTable::new(clients.dynamodb.clone(), table)
        .list_leases()
        .await
        .map(|leases| {
            leases
                .into_iter()
                .map(|lease| (lease.lease_key, lease.checkpoint))
                .collect()
        })
        .map_err(|err| error_chain(&err))
}

/// Every key under `list_prefix` (ListObjectsV2, all pages).
async fn list_keys(
    store: &ObjectStore,
    list_prefix: &str,
    tty: bool,
) -> anyhow::Result<Vec<String>> {
    let phase = Phase::start(tty, None, "listing keys");
    let mut keys = Vec::new();
    let mut token = None;
    let mut backoff = Backoff::transient();
    let mut failures = 0;
    loop {
        match store.list_page(list_prefix, token.clone()).await {
            Ok(page) => {
                failures = 0;
                backoff.reset();
                keys.extend(page.keys);
                phase.update(keys.len() as u64, || format!("listed {} keys", keys.len()));
                match page.next_continuation_token {
                    Some(next) => token = Some(next),
                    None => break,
                }
            }
            Err(err) if err.is_retriable() && failures < MAX_FAILURES => {
                failures += 1;
                tokio::time::sleep(backoff.next_delay()).await;
            }
            Err(err) => {
                phase.finish(None);
                return Err(err).with_context(|| {
                    format!("failed to list s3://{}/{list_prefix}", store.bucket())
                });
            }
        }
    }
    phase.finish(Some(format!("listed {} objects", keys.len())));
    Ok(keys)
}

/// `--deep`: fetches and checks every object, a few at a time.
async fn read_objects(store: &ObjectStore, objects: &[ArchivedKey], tty: bool) -> DeepSummary {
    let total = objects.len() as u64;
    let phase = Phase::start(tty, Some(total), "reading objects");
    let done = AtomicU64::new(0);
    let mut checks: Vec<(usize, BodyCheck)> = futures::stream::iter(objects.iter().enumerate())
        .map(|(index, object)| {
            let (phase, done) = (&phase, &done);
            async move {
                let check = match get_object(store, &object.key).await {
                    Ok(body) => {
                        let object = object.clone();
                        tokio::task::spawn_blocking(move || check_body(&object, &body))
                            .await
                            .unwrap_or_else(|err| {
                                BodyCheck::failed(format!("the check did not finish: {err}"))
                            })
                    }
                    Err(err) => BodyCheck::failed(format!("GET failed: {}", error_chain(&err))),
                };
                let n = done.fetch_add(1, AtomicOrdering::Relaxed) + 1;
                phase.update(n, || format!("read {n} of {total} objects"));
                (index, check)
            }
        })
        .buffer_unordered(DEEP_CONCURRENCY)
        .collect()
        .await;
    checks.sort_by_key(|(index, _)| *index);
    let mut summary = DeepSummary::default();
    for (index, check) in checks {
        summary.lines += check.lines;
        summary.kinesis_records += check.kinesis_records;
        if let Some(reason) = check.first_problem {
            summary.unreadable.push(Unreadable {
                key: objects[index].key.clone(),
                reason,
                more: check.problems.saturating_sub(1),
            });
        }
    }
    phase.finish(Some(format!(
        "read {total} objects: {} lines, {} unreadable",
        summary.lines,
        summary.unreadable.len()
    )));
    summary
}

/// GetObject with retries of transient failures.
async fn get_object(store: &ObjectStore, key: &str) -> Result<Bytes, S3Error> {
    let mut backoff = Backoff::transient();
    let mut failures = 0;
    loop {
        match store.get(key).await {
            Ok(body) => return Ok(body),
            Err(err) if err.is_retriable() && failures < MAX_FAILURES => {
                failures += 1;
                tokio::time::sleep(backoff.next_delay()).await;
            }
            Err(err) => return Err(err),
        }
    }
}

/// The gap check: ListShards, then every shard with a bound, a few at a
/// time.
async fn check_gaps(
    kinesis: &Kinesis,
    objects: &[ArchivedKey],
    checkpoints: Option<Result<HashMap<String, Checkpoint>, String>>,
    plan: &Plan,
    tty: bool,
) -> GapOutcome {
    let shards = match kinesis.list_shards().await {
        Ok(shards) => shards,
        Err(err) => {
            return GapOutcome::Skipped(format!("ListShards failed: {}", error_chain(&err)));
        }
    };
    let mut notes = Vec::new();
    let checkpoints = match checkpoints {
        Some(Ok(checkpoints)) => checkpoints,
        Some(Err(reason)) => {
            notes.push(format!(
                "lease table {} not read ({reason}): bounds from the archive only",
                plan.lease_table.as_deref().unwrap_or_default()
            ));
            HashMap::new()
        }
        None => HashMap::new(),
    };
    let mut by_shard: HashMap<&str, Vec<&ArchivedKey>> = HashMap::new();
    for object in objects {
        by_shard.entry(&object.shard_id).or_default().push(object);
    }
    let in_stream: HashSet<&str> = shards.iter().map(|s| s.shard_id.as_str()).collect();
    let mut gone: Vec<&str> = by_shard
        .keys()
        .copied()
        .filter(|id| !in_stream.contains(id))
        .collect();
    gone.sort_unstable();
    for shard_id in gone {
        notes.push(format!(
            "{shard_id}: in the archive but not in the stream (past retention, or another \
             stream's): not checked"
        ));
    }

    let mut checks = Vec::new();
    for shard in &shards {
        let shard_objects = by_shard.remove(shard.shard_id.as_str()).unwrap_or_default();
        let highest = shard_objects.iter().map(|o| o.range.last()).max();
        match shard_bound(checkpoints.get(&shard.shard_id), highest) {
            Some(bound) => checks.push(ShardGapCheck::new(
                &shard.shard_id,
                bound,
                &shard_objects,
                plan.from_first_archived,
            )),
            None => notes.push(format!(
                "{}: nothing archived or checkpointed yet: not checked",
                shard.shard_id
            )),
        }
    }
    let total = checks.len();
    let phase = Phase::start(tty, Some(total as u64), "reading shards");
    let (done, read) = (AtomicU64::new(0), AtomicU64::new(0));
    let mut results: Vec<ShardGapResult> = futures::stream::iter(checks)
        .map(|check| {
            let (phase, done, read) = (&phase, &done, &read);
            let progress = move |records: u64| {
                let read = read.fetch_add(records, AtomicOrdering::Relaxed) + records;
                let done = done.load(AtomicOrdering::Relaxed);
                phase.update(done, || {
                    format!("checked {done} of {total} shards, {read} records read")
                });
            };
            async move {
                let result = read_shard(kinesis, check, progress).await;
                done.fetch_add(1, AtomicOrdering::Relaxed);
                phase.line(format!(
                    "checked shard {}: {} records",
                    result.shard_id, result.checked
                ));
                progress(0);
                result
            }
        })
        .buffer_unordered(SHARD_CONCURRENCY)
        .collect()
        .await;
    phase.finish(None);
    results.sort_by(|a, b| a.shard_id.cmp(&b.shard_id));
    GapOutcome::Checked {
        shards: results,
        notes,
    }
}

/// Reads a shard from `TRIM_HORIZON` into `check` until the bound, the
/// shard's end, or caught up; at least [`MIN_CALL_INTERVAL`] between calls,
/// backing off on throttling and transient errors. `progress` is told how
/// many records each call returned.
async fn read_shard(
    kinesis: &Kinesis,
    mut check: ShardGapCheck,
    progress: impl Fn(u64),
) -> ShardGapResult {
    let shard_id = check.shard_id.clone();
    let mut iterator: Option<String> = None;
    let mut last: Option<String> = None;
    let mut backoff = Backoff::transient();
    let mut failures = 0;
    let mut next_call = tokio::time::Instant::now();
    let end = 'read: loop {
        tokio::time::sleep_until(next_call).await;
        next_call = tokio::time::Instant::now() + MIN_CALL_INTERVAL;
        let result = match iterator.take() {
            Some(current) => Ok(current),
            None => {
                let position = match &last {
                    Some(sequence_number) => {
                        StartingPosition::AfterSequenceNumber(sequence_number.clone())
                    }
                    None => StartingPosition::TrimHorizon,
                };
                kinesis.get_shard_iterator(&shard_id, &position).await
            }
        };
        let result = match result {
            Ok(current) => {
                let output = kinesis.get_records(&current, GET_RECORDS_LIMIT).await;
                if output
                    .as_ref()
                    .is_err_and(|err| !matches!(err, KinesisError::ExpiredIterator))
                {
                    // Still valid for retries within five minutes.
                    iterator = Some(current);
                }
                output
            }
            Err(err) => Err(err),
        };
        let output = match result {
            Ok(output) => output,
            // A new iterator after the last record read, on the next turn.
            Err(KinesisError::ExpiredIterator) => continue,
            Err(err) => {
                failures += 1;
                let limit = if matches!(err, KinesisError::Throttled(_)) {
                    MAX_THROTTLED
                } else {
                    MAX_FAILURES
                };
                if !err.is_retriable() || failures >= limit {
                    break ReadEnd::Failed(error_chain(&err));
                }
                next_call =
                    tokio::time::Instant::now() + backoff.next_delay().max(MIN_CALL_INTERVAL);
                continue;
            }
        };
        failures = 0;
        backoff.reset();
        let caught_up =
            output.records.is_empty() && output.millis_behind_latest().unwrap_or(0) == 0;
        iterator = output.next_shard_iterator.clone();
        let shard_end = iterator.is_none();
        progress(output.records.len() as u64);
        for record in output.records {
            let arrival = record
                .approximate_arrival_timestamp
                .and_then(|t| t.to_millis().ok())
                .unwrap_or(0);
            let flow = match SequenceNumber::parse(&record.sequence_number) {
                Ok(sequence_number) => check.observe(sequence_number, arrival),
                // Kinesis never returns one; it could not be in any range.
                Err(err) => {
                    tracing::warn!(shard_id = %shard_id, error = %err, "record with an invalid sequence number");
                    Flow::Continue
                }
            };
            last = Some(record.sequence_number);
            if flow == Flow::Done {
                break 'read ReadEnd::Bound;
            }
        }
        if shard_end {
            break ReadEnd::ShardEnd;
        }
        if caught_up {
            break ReadEnd::CaughtUp;
        }
    };
    check.finish(end)
}

/// An error and its sources on one line.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        // SDK errors repeat their cause's text; say it once.
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            let _ = write!(text, ": {cause_text}");
        }
        source = cause.source();
    }
    text
}

/// Progress of one phase on stderr: an `indicatif` bar (or spinner, when
/// the total is unknown) on a terminal; otherwise a plain line at most every
/// [`PLAIN_PROGRESS_INTERVAL`].
struct Phase {
    bar: Option<ProgressBar>,
    last_line: Mutex<Instant>,
}

impl Phase {
    fn start(tty: bool, total: Option<u64>, label: &'static str) -> Self {
        let bar = tty.then(|| {
            let (bar, template) = match total {
                Some(total) => (
                    ProgressBar::new(total),
                    "{msg} [{wide_bar}] {pos}/{len} {elapsed}",
                ),
                None => (ProgressBar::new_spinner(), "{spinner} {msg} {elapsed}"),
            };
            if let Ok(style) = ProgressStyle::with_template(template) {
                bar.set_style(style);
            }
            bar.set_message(label);
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Self {
            bar,
            last_line: Mutex::new(Instant::now()),
        }
    }

    /// Progress at `position`; `message` is built only when shown.
    fn update(&self, position: u64, message: impl FnOnce() -> String) {
        match &self.bar {
            Some(bar) => {
                bar.set_position(position);
                bar.set_message(message());
            }
            None => {
                let Ok(mut last) = self.last_line.lock() else {
                    return;
                };
                if last.elapsed() >= PLAIN_PROGRESS_INTERVAL {
                    *last = Instant::now();
                    eprintln!("{}", message());
                }
            }
        }
    }

    /// A line that is always shown.
    fn line(&self, text: String) {
        match &self.bar {
            Some(bar) => bar.println(text),
            None => eprintln!("{text}"),
        }
    }

    /// Ends the phase, then shows `text`.
    fn finish(self, text: Option<String>) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        if let Some(text) = text {
            eprintln!("{text}");
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory as _, FromArgMatches as _};
    use proptest::prelude::*;

    use super::*;
    use crate::compression::Compression;
    use crate::key::KeyLayout;

    const SHARD: &str = "shardId-000000000001";
    /// 2026-11-21T05:27:00Z.
    const MINUTE_MILLIS: i64 = 1_795_238_820_000;

    fn n(value: u64) -> SequenceNumber {
        SequenceNumber::from(value)
    }

    fn range(first: u64, last: u64) -> SequenceRange {
        SequenceRange::new(n(first), n(last)).unwrap()
    }

    fn object_in(
        shard_id: &str,
        minute_millis: i64,
        first: u64,
        last: u64,
        codec: CompressionCodec,
    ) -> ArchivedKey {
        let minute = Minute::from_millis(minute_millis);
        let range = range(first, last);
        ArchivedKey {
            key: KeyLayout::new("p").object_key(minute, shard_id, &range, codec),
            minute,
            shard_id: shard_id.to_owned(),
            range,
            codec,
        }
    }

    fn object(first: u64, last: u64) -> ArchivedKey {
        object_in(SHARD, MINUTE_MILLIS, first, last, CompressionCodec::None)
    }

    fn parse_args(args: &[&str]) -> Result<VerifyArgs, clap::Error> {
        let mut argv = vec!["shardsink verify"];
        argv.extend_from_slice(args);
        // No environment: a developer's SHARDSINK_* must not change the outcome.
        let command = VerifyArgs::command().mut_args(|arg| arg.env(None::<&str>));
        VerifyArgs::from_arg_matches(&command.try_get_matches_from(argv)?)
    }

    fn plan(args: &[&str]) -> Result<Plan, ConfigError> {
        Plan::from_args(&parse_args(args).unwrap())
    }

    #[test]
    fn prefix_and_lease_table_default_as_in_the_daemon() {
        let p = plan(&["--bucket", "archive", "--stream", "orders"]).unwrap();
        assert_eq!(p.prefix, "orders");
        assert_eq!(p.list_prefix, "orders/");
        assert_eq!(p.lease_table.as_deref(), Some("shardsink-orders"));
        assert!(!p.deep && !p.from_first_archived);

        let p = plan(&[
            "--bucket",
            "archive",
            "--stream",
            "arn:aws:kinesis:eu-west-1:123456789012:stream/clicks",
            "--application-name",
            "audit",
            "--prefix",
            "raw/clicks/",
            "--deep",
            "--initial-position",
            "latest",
        ])
        .unwrap();
        assert_eq!(p.prefix, "raw/clicks");
        assert_eq!(p.lease_table.as_deref(), Some("audit-clicks"));
        assert!(p.deep && p.from_first_archived);

        let p = plan(&["--bucket", "archive", "--prefix", ""]).unwrap();
        assert_eq!(
            (p.list_prefix.as_str(), p.stream, p.lease_table),
            ("", None, None)
        );
    }

    #[test]
    fn bad_arguments_name_the_setting() {
        let err = plan(&["--bucket", "archive"]).unwrap_err();
        assert_eq!(err.flag, "--prefix");
        assert!(
            err.to_string()
                .starts_with("invalid setting --prefix (SHARDSINK_PREFIX)")
        );
        for (args, flag) in [
            (&["--bucket", "Bad_Bucket", "--prefix", "p"][..], "--bucket"),
            (&["--bucket", "archive", "--stream", "a b"][..], "--stream"),
            (&["--bucket", "archive", "--prefix", "/abs"][..], "--prefix"),
            (
                &["--bucket", "archive", "--stream", "s", "--lease-table", "x"][..],
                "--lease-table",
            ),
        ] {
            assert_eq!(plan(args).unwrap_err().flag, flag, "{args:?}");
        }
        assert!(
            parse_args(&["--prefix", "p"]).is_err(),
            "--bucket is required"
        );
    }

    #[test]
    fn path_style_reads_a_bare_flag_or_a_value() {
        let base = ["--bucket", "b", "--prefix", "p"];
        assert!(!parse_args(&base).unwrap().s3_force_path_style);
        let mut on = base.to_vec();
        on.push("--s3-force-path-style");
        assert!(parse_args(&on).unwrap().s3_force_path_style);
        let mut off = base.to_vec();
        off.extend(["--s3-force-path-style", "false"]);
        assert!(!parse_args(&off).unwrap().s3_force_path_style);
    }

    #[test]
    fn parses_the_keys_shardsink_writes() {
        let written = object(9, 10);
        assert_eq!(
            written.key,
            "p/2026/11/21/05/27/shardId-000000000001/9980-0019-00210.jsonl"
        );
        assert_eq!(parse_archived_key("p/", &written.key), Ok(written));
        // An empty prefix lists from the bucket's root.
        let bare = "2026/11/21/05/27/shardId-000000000001/9980-0019-00210.jsonl.zst";
        let parsed = parse_archived_key("", bare).unwrap();
        assert_eq!(parsed.codec, CompressionCodec::Zstd);
        assert_eq!(parsed.minute, Minute::from_millis(MINUTE_MILLIS));
    }

    #[test]
    fn other_keys_are_foreign() {
        let name = "9980-0019-00210.jsonl";
        for key in [
            format!("p/2026/11/21/05/27/{SHARD}/notes.txt"),
            format!("p/2026/11/21/05/27/{SHARD}/sub/{name}"),
            format!("p/2026/11/21/05/{SHARD}/{name}"),
            format!("p/2026/13/21/05/27/{SHARD}/{name}"),
            format!("p/2026/11/21/24/27/{SHARD}/{name}"),
            format!("p/2026/11/21/5/27/{SHARD}/{name}"),
            format!("p/2026/11/21/05/27/shard id/{name}"),
            format!("p/2026/11/21/05/27//{name}"),
            format!("p/2026/11/21/05/27/{SHARD}/99789-0019-00210.jsonl"),
            format!("p/2026/11/21/05/27/{SHARD}/9-1-99999999.jsonl"),
            format!("q/2026/11/21/05/27/{SHARD}/{name}"),
        ] {
            assert!(
                parse_archived_key("p/", &key).is_err(),
                "{key} must be foreign"
            );
        }
        let (objects, foreign) = classify("p/", vec![object(1, 2).key, "p/README".to_owned()]);
        assert_eq!(objects.len(), 1);
        assert_eq!(foreign[0].key, "p/README");
    }

    fn overlap_keys(objects: &[ArchivedKey]) -> Vec<(String, String)> {
        overlaps(objects)
            .into_iter()
            .map(|o| (o.earlier.0, o.later.0))
            .collect()
    }

    #[test]
    fn overlap_table() {
        let a = object(1, 5);
        // Objects, and the pairs (by index) that must be reported.
        type Case = (Vec<ArchivedKey>, Vec<(usize, usize)>);
        let cases: Vec<Case> = vec![
            // Adjacent and disjoint ranges do not overlap.
            (vec![object(1, 5), object(6, 9), object(20, 20)], vec![]),
            // Touching at one number does.
            (vec![object(1, 5), object(5, 9)], vec![(0, 1)]),
            // Containment.
            (vec![object(1, 10), object(3, 4)], vec![(0, 1)]),
            // A chain is reported pairwise against the furthest reach.
            (
                vec![object(1, 10), object(2, 3), object(9, 12), object(11, 11)],
                vec![(0, 1), (0, 2), (2, 3)],
            ),
            // The same range in another codec (another key).
            (
                vec![
                    a.clone(),
                    object_in(SHARD, MINUTE_MILLIS, 1, 5, CompressionCodec::Gzip),
                ],
                vec![(0, 1)],
            ),
            // Another minute's object of the same shard still overlaps.
            (
                vec![
                    a.clone(),
                    object_in(SHARD, MINUTE_MILLIS + 60_000, 5, 6, CompressionCodec::None),
                ],
                vec![(0, 1)],
            ),
            // Another shard never does.
            (
                vec![
                    a.clone(),
                    object_in(
                        "shardId-000000000002",
                        MINUTE_MILLIS,
                        1,
                        5,
                        CompressionCodec::None,
                    ),
                ],
                vec![],
            ),
        ];
        for (objects, expected) in cases {
            let expected: Vec<(String, String)> = expected
                .iter()
                .map(|&(i, j)| (objects[i].key.clone(), objects[j].key.clone()))
                .collect();
            let mut found = overlap_keys(&objects);
            found.sort();
            let mut expected_sorted = expected.clone();
            expected_sorted.sort();
            assert_eq!(found, expected_sorted, "{objects:?}");
        }
    }

    proptest! {
        /// Against the naive model — every pair compared: reported pairs
        /// overlap, and the objects named are exactly those in some
        /// overlapping pair.
        #[test]
        fn overlaps_match_the_naive_model(
            specs in prop::collection::vec((0usize..2, 0u64..60, 0u64..8, 0usize..3), 0..40)
        ) {
            let objects: Vec<ArchivedKey> = specs
                .iter()
                .enumerate()
                .map(|(i, &(shard, first, len, codec))| {
                    let codec = [CompressionCodec::None, CompressionCodec::Gzip, CompressionCodec::Zstd][codec];
                    // A minute per object keeps keys unique.
                    object_in(&format!("shardId-{shard:012}"), MINUTE_MILLIS + 60_000 * i as i64, first, first + len, codec)
                })
                .collect();
            let mut naive: HashSet<&str> = HashSet::new();
            for (i, a) in objects.iter().enumerate() {
                for b in &objects[i + 1..] {
                    if a.shard_id == b.shard_id && a.range.overlaps(&b.range) {
                        naive.insert(&a.key);
                        naive.insert(&b.key);
                    }
                }
            }
            let found = overlaps(&objects);
            let by_key: HashMap<&str, &ArchivedKey> = objects.iter().map(|o| (o.key.as_str(), o)).collect();
            let mut named: HashSet<&str> = HashSet::new();
            for overlap in &found {
                let (a, b) = (by_key[overlap.earlier.0.as_str()], by_key[overlap.later.0.as_str()]);
                prop_assert!(a.key != b.key);
                prop_assert_eq!(&a.shard_id, &b.shard_id);
                prop_assert_eq!(&overlap.shard_id, &a.shard_id);
                prop_assert!(a.range.overlaps(&b.range), "{:?} does not overlap {:?}", a.range, b.range);
                named.insert(&a.key);
                named.insert(&b.key);
            }
            prop_assert_eq!(named, naive);
            prop_assert!(found.len() < objects.len().max(1));
        }
    }

    fn line(shard: &str, sequence_number: &str, sub: Option<u64>, timestamp: &str) -> String {
        let sub = sub
            .map(|s| format!(",\"subSequenceNumber\":{s}"))
            .unwrap_or_default();
        format!(
            "{{\"shardId\":\"{shard}\",\"sequenceNumber\":\"{sequence_number}\"{sub},\"partitionKey\":\"k\",\"approximateArrivalTimestamp\":\"{timestamp}\",\"data\":\"aGk=\"}}\n"
        )
    }

    const IN_MINUTE: &str = "2026-11-21T05:27:03.045Z";

    fn body(lines: &[String]) -> Vec<u8> {
        lines.concat().into_bytes()
    }

    #[test]
    fn a_batch_written_by_shardsink_reads_clean() {
        use crate::encode::LineEncoder;
        use crate::record::ShardRecord;
        let minute = Minute::from_millis(MINUTE_MILLIS);
        let encoder = LineEncoder::new(SHARD, minute);
        let mut lines = Vec::new();
        for (i, sequence_number) in ["9", "10", "12"].into_iter().enumerate() {
            let record = ShardRecord {
                sequence_number: sequence_number.to_owned(),
                arrival_millis: MINUTE_MILLIS + 1_000 * i as i64,
                partition_key: "pk \"quoted\"".to_owned(),
                data: bytes::Bytes::from_static(b"\x00\xffdata"),
                user_records: None,
            };
            encoder.encode(&record, &mut lines);
        }
        for compression in [
            Compression::None,
            Compression::Gzip(6),
            Compression::Zstd(3),
        ] {
            let object = object_in(SHARD, MINUTE_MILLIS, 9, 12, compression.codec());
            let check = check_body(&object, &compression.compress(&lines).unwrap());
            assert_eq!(
                check,
                BodyCheck {
                    lines: 3,
                    kinesis_records: 3,
                    first_problem: None,
                    problems: 0
                },
                "{compression:?}"
            );
        }
    }

    #[test]
    fn kpl_user_records_share_a_sequence_number() {
        let object = object(7, 7);
        let check = check_body(
            &object,
            &body(&[
                line(SHARD, "7", Some(0), IN_MINUTE),
                line(SHARD, "7", Some(1), IN_MINUTE),
            ]),
        );
        assert_eq!(
            (check.lines, check.kinesis_records, check.problems),
            (2, 1, 0)
        );
    }

    #[test]
    fn unreadable_bodies_say_why() {
        let ok = |seq: &str| line(SHARD, seq, None, IN_MINUTE);
        let cases: Vec<(ArchivedKey, Vec<u8>, &str)> = vec![
            (
                object_in(SHARD, MINUTE_MILLIS, 1, 2, CompressionCodec::Zstd),
                b"not zstd".to_vec(),
                "does not decompress as .jsonl.zst",
            ),
            (object(1, 2), Vec::new(), "object has no lines"),
            (
                object(1, 2),
                body(&[ok("1"), "{}\n".to_owned(), ok("2")]),
                "line 2 is not a shardsink JSON line",
            ),
            (
                object(1, 2),
                body(&[ok("1"), "\n".to_owned(), ok("2")]),
                "line 2 is empty",
            ),
            (
                object(1, 2),
                body(&[ok("1"), ok("2").replace("\"data\"", "\"extra\":1,\"data\"")]),
                "line 2 is not a shardsink JSON line: unknown field `extra`",
            ),
            (
                object(1, 2),
                body(&[ok("1"), line("shardId-000000000002", "2", None, IN_MINUTE)]),
                "line 2: shardId \"shardId-000000000002\" is not the key's shard",
            ),
            (
                object(1, 2),
                body(&[ok("1"), ok("2"), ok("3")]),
                "line 3: sequenceNumber 3 is outside the key's range 1-2",
            ),
            (
                object(1, 2),
                body(&[ok("1"), ok("02")]),
                "line 2: sequenceNumber \"02\" is not one",
            ),
            (
                object(1, 2),
                body(&[ok("1"), line(SHARD, "2", None, "2026-11-21T05:28:00.000Z")]),
                "line 2: approximateArrivalTimestamp 2026-11-21T05:28:00.000Z is not in the key's minute 2026-11-21T05:27Z",
            ),
            (
                object(1, 2),
                body(&[ok("1"), line(SHARD, "2", None, "yesterday")]),
                "line 2: approximateArrivalTimestamp \"yesterday\"",
            ),
            (
                object(1, 2),
                body(&[ok("1"), ok("1"), ok("2")]),
                "line 2: record (1, None) appears twice",
            ),
            (
                object(1, 2),
                body(&[ok("1"), ok("2").replace("aGk=", "a!")]),
                "line 2: data is not base64",
            ),
            (
                object(1, 3),
                body(&[ok("1"), ok("2")]),
                "no line has the key's last sequence number 3",
            ),
            (
                object(1, 3),
                body(&[ok("2"), ok("3")]),
                "no line has the key's first sequence number 1",
            ),
        ];
        for (object, body, expected) in cases {
            let check = check_body(&object, &body);
            let problem = check.first_problem.unwrap_or_default();
            assert!(
                problem.starts_with(expected),
                "{problem:?} must start with {expected:?}"
            );
        }
    }

    #[test]
    fn bounds_follow_checkpoints_and_the_archive() {
        let seq = |v| Checkpoint::SequenceNumber(n(v));
        assert_eq!(shard_bound(None, None), None);
        assert_eq!(shard_bound(Some(&Checkpoint::TrimHorizon), None), None);
        assert_eq!(
            shard_bound(Some(&Checkpoint::Latest), Some(&n(4))),
            Some(Bound::UpTo(n(4)))
        );
        assert_eq!(
            shard_bound(Some(&seq(9)), Some(&n(4))),
            Some(Bound::UpTo(n(9)))
        );
        assert_eq!(
            shard_bound(Some(&seq(3)), Some(&n(4))),
            Some(Bound::UpTo(n(4)))
        );
        assert_eq!(shard_bound(Some(&seq(3)), None), Some(Bound::UpTo(n(3))));
        assert_eq!(
            shard_bound(Some(&Checkpoint::ShardEnd), Some(&n(4))),
            Some(Bound::ShardEnd)
        );
    }

    /// Records 10, 20, …, 10·count, one a minute apart starting at the test minute.
    fn stream(count: u64) -> Vec<(SequenceNumber, i64)> {
        (1..=count)
            .map(|i| (n(10 * i), MINUTE_MILLIS + 60_000 * (i as i64 - 1)))
            .collect()
    }

    fn missing(result: &ShardGapResult) -> Vec<(u64, u64, u64)> {
        result
            .gaps
            .iter()
            .map(|g| {
                let value = |s: &SequenceNumber| s.to_string().parse::<u64>().unwrap();
                (value(&g.first), value(&g.last), g.records)
            })
            .collect()
    }

    #[test]
    fn gap_table() {
        let objects = [object(10, 20), object(30, 40), object(70, 80)];
        let refs: Vec<&ArchivedKey> = objects.iter().collect();
        // A missing object in the middle: 50 and 60, between the 2nd and 3rd.
        let result = gaps(SHARD, stream(10), &refs, Bound::UpTo(n(80)), false);
        assert_eq!(missing(&result), vec![(50, 60, 2)]);
        assert_eq!(result.checked, 8);
        let gap = &result.gaps[0];
        assert_eq!(gap.before.as_ref().unwrap().0, objects[1].key);
        assert_eq!(gap.after.as_ref().unwrap().0, objects[2].key);
        assert_eq!(minute_text(gap.first_arrival), "2026-11-21T05:31Z");
        assert_eq!(minute_text(gap.last_arrival), "2026-11-21T05:32Z");
        assert_eq!(result.oldest, Some((n(10), MINUTE_MILLIS)));
        assert!(result.notes.is_empty(), "{:?}", result.notes);

        // A checkpoint past the newest object: its records are missing too.
        let result = gaps(SHARD, stream(10), &refs, Bound::UpTo(n(100)), false);
        assert_eq!(missing(&result), vec![(50, 60, 2), (90, 100, 2)]);
        assert!(result.gaps[1].after.is_none());

        // SHARD_END: every record.
        let result = gaps(SHARD, stream(12), &refs, Bound::ShardEnd, false);
        assert_eq!(missing(&result), vec![(50, 60, 2), (90, 120, 4)]);

        // A lost first object (TRIM_HORIZON), unless the daemon started later.
        let later = [object(30, 40), object(50, 60)];
        let later: Vec<&ArchivedKey> = later.iter().collect();
        let result = gaps(SHARD, stream(6), &later, Bound::UpTo(n(60)), false);
        assert_eq!(missing(&result), vec![(10, 20, 2)]);
        assert!(result.gaps[0].before_first_object);
        let result = gaps(SHARD, stream(6), &later, Bound::UpTo(n(60)), true);
        assert_eq!(missing(&result), vec![]);
        assert_eq!((result.checked, result.not_expected), (4, 2));

        // Trimmed by retention: the check starts at the oldest retained record.
        let trimmed = stream(10).into_iter().skip(3);
        let result = gaps(SHARD, trimmed, &refs, Bound::UpTo(n(80)), false);
        assert_eq!(missing(&result), vec![(50, 60, 2)]);
        assert_eq!(result.oldest, Some((n(40), MINUTE_MILLIS + 180_000)));
        assert!(result.notes[0].contains("trimmed"), "{:?}", result.notes);

        // A bound that is not a record of the stream.
        let result = gaps(SHARD, stream(3), &refs, Bound::UpTo(n(80)), false);
        assert!(
            result.notes[0].contains("not a record of the shard"),
            "{:?}",
            result.notes
        );

        // Exact.
        let all = [object(10, 50), object(60, 60), object(70, 100)];
        let all: Vec<&ArchivedKey> = all.iter().collect();
        let result = gaps(SHARD, stream(10), &all, Bound::UpTo(n(100)), false);
        assert_eq!((missing(&result), result.checked), (vec![], 10));
    }

    #[test]
    fn a_gap_run_ends_at_a_covered_record_or_an_object_boundary() {
        // Ranges with holes that hold no record: 25 lies between objects but
        // is not a record, so 10..40 read as exact.
        let objects = [object(10, 20), object(30, 40)];
        let refs: Vec<&ArchivedKey> = objects.iter().collect();
        let records = [10, 20, 30, 40, 50, 60].map(|v| (n(v), MINUTE_MILLIS));
        let result = gaps(SHARD, records, &refs, Bound::UpTo(n(60)), false);
        assert_eq!(missing(&result), vec![(50, 60, 2)]);
        // Missing records on both sides of an object are two runs.
        let objects = [object(30, 30)];
        let refs: Vec<&ArchivedKey> = objects.iter().collect();
        let records = [10, 20, 30, 40].map(|v| (n(v), MINUTE_MILLIS));
        let result = gaps(SHARD, records, &refs, Bound::UpTo(n(40)), false);
        assert_eq!(missing(&result), vec![(10, 20, 2), (40, 40, 1)]);
    }

    fn summary(overlaps: Vec<Overlap>, deep: Option<DeepSummary>, gaps: GapOutcome) -> Audit {
        Audit {
            target: "s3://archive/orders/".to_owned(),
            objects: 3,
            shards_in_archive: 1,
            foreign: vec![ForeignKey {
                key: "orders/notes.txt".to_owned(),
                reason: "1 path segments".to_owned(),
            }],
            overlaps,
            deep,
            gaps,
        }
    }

    #[test]
    fn the_summary_names_what_is_wrong() {
        let clean = summary(
            vec![],
            Some(DeepSummary::default()),
            GapOutcome::NotRequested,
        );
        assert!(clean.is_exact());
        let text = clean.render();
        assert!(text.ends_with("exact (gaps not checked)\n"), "{text}");
        assert!(
            text.contains("foreign key orders/notes.txt: 1 path segments"),
            "{text}"
        );

        let (a, b) = (object(1, 5), object(5, 9));
        let objects = [a.clone(), b.clone()];
        let overlapping = overlaps(&objects);
        let missing_run = gaps(
            SHARD,
            stream(3),
            &[&object(10, 10)],
            Bound::UpTo(n(30)),
            false,
        );
        let bad = summary(
            overlapping,
            Some(DeepSummary {
                lines: 4,
                kinesis_records: 4,
                unreadable: vec![Unreadable {
                    key: a.key.clone(),
                    reason: "line 2 is empty".to_owned(),
                    more: 2,
                }],
            }),
            GapOutcome::Checked {
                shards: vec![missing_run],
                notes: vec![],
            },
        );
        assert!(!bad.is_exact());
        let text = bad.render();
        for expected in [
            format!("overlap in {SHARD}: {} (1-5) and {} (5-9)", a.key, b.key),
            format!(
                "unreadable {}: line 2 is empty (and 2 more problems)",
                a.key
            ),
            format!(
                "gap in {SHARD}: 2 records 20 .. 30 (arrived 2026-11-21T05:28Z .. 2026-11-21T05:29Z)"
            ),
            format!("{SHARD}: 3 records checked from the oldest retained record 10"),
            "NOT exact: 1 overlaps, 1 unreadable objects, 2 missing records".to_owned(),
        ] {
            assert!(text.contains(&expected), "{expected:?} not in:\n{text}");
        }

        let skipped = summary(vec![], None, GapOutcome::Skipped("no answer".to_owned()));
        assert!(skipped.is_exact());
        assert!(
            skipped
                .render()
                .ends_with("exact (lines not read, gap check skipped)\n")
        );
    }

    /// The whole audit against in-memory S3, DynamoDB and Kinesis: a gap, an
    /// overlap, an unreadable object, a foreign key, a shard with nothing
    /// archived, and GetRecords throttled twice on the way.
    #[tokio::test(start_paused = true)]
    async fn audits_an_archive_through_the_sdk() {
        use std::sync::Arc;
        use std::sync::atomic::Ordering;

        use shard_lease::Lease;

        use crate::encode::LineEncoder;
        use crate::fake_aws::{self, FakeBucket, FakeStream, FakeTable};
        use crate::record::ShardRecord;

        let (stream, bucket, table) = (
            Arc::new(FakeStream::default()),
            Arc::new(FakeBucket::default()),
            Arc::new(FakeTable::default()),
        );
        let shard = stream.shard(SHARD);
        for i in 1..=9 {
            shard.push(&i.to_string(), MINUTE_MILLIS + i * 1_000, b"x");
        }
        shard.failing_reads.store(2, Ordering::SeqCst);
        stream
            .shard("shardId-000000000002")
            .push("1", MINUTE_MILLIS, b"y");
        let minute = Minute::from_millis(MINUTE_MILLIS);
        let batch = |shard_id: &str, first: u64, last: u64, codec| {
            let mut lines = Vec::new();
            for i in first..=last {
                let record = ShardRecord {
                    sequence_number: i.to_string(),
                    arrival_millis: MINUTE_MILLIS + i as i64 * 1_000,
                    partition_key: format!("pk-{i}"),
                    data: bytes::Bytes::from_static(b"x"),
                    user_records: None,
                };
                LineEncoder::new(shard_id, minute).encode(&record, &mut lines);
            }
            let object = object_in(SHARD, MINUTE_MILLIS, first, last, codec);
            let body = Compression::new(codec, None).compress(&lines).unwrap();
            (object.key, bytes::Bytes::from(body))
        };
        let (first, first_body) = batch(SHARD, 1, 3, CompressionCodec::Zstd);
        let (newest, newest_body) = batch(SHARD, 6, 9, CompressionCodec::Gzip);
        // Lines of another shard under this shard's key, overlapping `newest`.
        let (stray, stray_body) = batch("shardId-000000000002", 8, 8, CompressionCodec::None);
        {
            let mut objects = bucket.objects.lock().unwrap();
            objects.insert(first.clone(), first_body);
            objects.insert(newest.clone(), newest_body);
            objects.insert(stray.clone(), stray_body);
            objects.insert("p/README".to_owned(), bytes::Bytes::from_static(b"hi"));
        }
        let clients = fake_aws::clients(stream, bucket, table);
        LeaseTable::new(clients.dynamodb.clone(), "leases")
            .create_lease(&Lease::new(SHARD, Checkpoint::SequenceNumber(n(9)), vec![]))
            .await
            .unwrap();
        let plan = Plan {
            bucket: "bucket".to_owned(),
            prefix: "p".to_owned(),
            list_prefix: "p/".to_owned(),
            stream: Some(StreamRef::Name("s".to_owned())),
            lease_table: Some("leases".to_owned()),
            deep: true,
            from_first_archived: false,
        };

        let audit = audit(&plan, &clients, false).await.unwrap();
        let text = audit.render();
        assert!(!audit.is_exact(), "{text}");
        assert_eq!((audit.objects, audit.foreign.len()), (3, 1), "{text}");
        assert_eq!(
            overlap_keys_of(&audit),
            vec![(newest.clone(), stray.clone())]
        );
        let deep = audit.deep.clone().unwrap();
        assert_eq!((deep.lines, deep.unreadable.len()), (8, 1), "{text}");
        assert_eq!(deep.unreadable[0].key, stray);
        assert!(
            deep.unreadable[0].reason.contains("is not the key's shard"),
            "{text}"
        );
        let GapOutcome::Checked { shards, notes } = &audit.gaps else {
            panic!("gaps not checked:\n{text}");
        };
        assert_eq!(shards.len(), 1, "{text}");
        assert_eq!(missing(&shards[0]), vec![(4, 5, 2)], "{text}");
        assert_eq!(shards[0].checked, 9, "{text}");
        assert!(shards[0].notes.is_empty(), "{text}");
        assert_eq!(shards[0].gaps[0].before.as_ref().unwrap().0, first);
        assert_eq!(shards[0].gaps[0].after.as_ref().unwrap().0, newest);
        assert_eq!(
            notes,
            &vec![
                "shardId-000000000002: nothing archived or checkpointed yet: not checked"
                    .to_owned()
            ]
        );
        assert!(
            shard.reads.load(Ordering::SeqCst) >= 3,
            "throttled reads are retried"
        );
    }

    fn overlap_keys_of(audit: &Audit) -> Vec<(String, String)> {
        audit
            .overlaps
            .iter()
            .map(|o| (o.earlier.0.clone(), o.later.0.clone()))
            .collect()
    }
}

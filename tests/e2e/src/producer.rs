//! Writing records to the stream: `PutRecords` in limit-respecting chunks
//! with per-entry retries, deterministic record generators, a background
//! producer, KPL-aggregated records, and a producer that retries on purpose
//! (the same event put more than once).
//!
//! Every function returns, per record, what was sent and where Kinesis put
//! it ([`ProducedRecord`]): the expected side of the exactly-once check.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use aws_sdk_kinesis::error::SdkError;
use aws_sdk_kinesis::operation::put_records::PutRecordsError;
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use md5::{Digest as _, Md5};
use rand::rngs::StdRng;
use rand::seq::SliceRandom as _;
use rand::{RngExt as _, SeedableRng as _};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::env::{TestEnv, env_nonempty};
use crate::fixtures::ShardInfo;
use crate::kpl;

/// Most records one `PutRecords` call may carry.
pub const MAX_RECORDS_PER_CALL: usize = 500;
/// Most bytes (data plus partition keys) one `PutRecords` call may carry:
/// 5 MiB.
pub const MAX_BYTES_PER_CALL: usize = 5 * 1024 * 1024;
/// Most bytes one record (data plus partition key) may have: 1 MiB.
pub const MAX_RECORD_BYTES: usize = 1024 * 1024;

/// A record to put: what the test sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordSpec {
    /// Partition key (1–256 Unicode characters).
    pub partition_key: String,
    /// Optional explicit hash key (decimal 128-bit integer).
    pub explicit_hash_key: Option<String>,
    /// The payload (0 bytes to 1 MiB minus the partition key).
    pub data: Vec<u8>,
}

impl RecordSpec {
    /// A record with no explicit hash key.
    pub fn new(partition_key: impl Into<String>, data: impl Into<Vec<u8>>) -> Self {
        Self {
            partition_key: partition_key.into(),
            explicit_hash_key: None,
            data: data.into(),
        }
    }

    /// Bytes this record counts against the per-record and per-call limits.
    pub fn size(&self) -> usize {
        self.partition_key.len() + self.data.len()
    }
}

/// A user record that is in the stream: what was sent and what Kinesis said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducedRecord {
    /// The shard Kinesis put the (aggregate) record in.
    pub shard_id: String,
    /// The Kinesis record's sequence number (decimal text).
    pub sequence_number: String,
    /// For a user record inside a KPL aggregate: its position in the
    /// aggregate. `None` for a plain record.
    pub sub_sequence_number: Option<u64>,
    /// The user record's partition key.
    pub partition_key: String,
    /// The user record's data.
    pub data: Vec<u8>,
}

/// Puts `specs` with `PutRecords` in chunks of at most
/// [`MAX_RECORDS_PER_CALL`] records and [`MAX_BYTES_PER_CALL`] bytes,
/// retrying only the entries that failed (with backoff), and returns one
/// [`ProducedRecord`] per spec, in the same order.
///
/// Whole calls are retried only on throttling and on connection errors.
///
/// API: <https://docs.aws.amazon.com/kinesis/latest/APIReference/API_PutRecords.html>
///
/// # Errors
/// A record over [`MAX_RECORD_BYTES`]; a non-retryable AWS error; entries
/// still failing after 30 attempts.
pub async fn put_records(
    env: &TestEnv,
    stream: &str,
    specs: &[RecordSpec],
) -> Result<Vec<ProducedRecord>> {
    let mut produced = Vec::with_capacity(specs.len());
    for chunk in chunks(specs)? {
        produced.extend(put_chunk(env, stream, chunk).await?);
    }
    Ok(produced)
}

/// Splits `specs` into slices that each fit one `PutRecords` call.
fn chunks(specs: &[RecordSpec]) -> Result<Vec<&[RecordSpec]>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut bytes = 0;
    for (i, spec) in specs.iter().enumerate() {
        ensure!(
            spec.size() <= MAX_RECORD_BYTES,
            "record {i} has {} bytes (data + partition key), more than Kinesis accepts",
            spec.size()
        );
        ensure!(
            !spec.partition_key.is_empty(),
            "record {i} has an empty partition key"
        );
        if i > start
            && (i - start == MAX_RECORDS_PER_CALL || bytes + spec.size() > MAX_BYTES_PER_CALL)
        {
            out.push(&specs[start..i]);
            start = i;
            bytes = 0;
        }
        bytes += spec.size();
    }
    if start < specs.len() {
        out.push(&specs[start..]);
    }
    Ok(out)
}

const MAX_ATTEMPTS: u32 = 30;

async fn put_chunk(
    env: &TestEnv,
    stream: &str,
    chunk: &[RecordSpec],
) -> Result<Vec<ProducedRecord>> {
    let mut results: Vec<Option<(String, String)>> = vec![None; chunk.len()];
    let mut pending: Vec<usize> = (0..chunk.len()).collect();
    let mut last_failure = String::new();
    for attempt in 0..MAX_ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(backoff(attempt)).await;
        }
        let entries = pending
            .iter()
            .map(|&i| {
                let spec = &chunk[i];
                PutRecordsRequestEntry::builder()
                    .partition_key(&spec.partition_key)
                    .set_explicit_hash_key(spec.explicit_hash_key.clone())
                    .data(Blob::new(spec.data.clone()))
                    .build()
                    .context("failed to build a PutRecords entry")
            })
            .collect::<Result<Vec<_>>>()?;
        let in_flight = one_put_at_a_time(stream).await;
        let sent = env
            .kinesis
            .put_records()
            .stream_name(stream)
            .set_records(Some(entries))
            .send()
            .await;
        drop(in_flight);
        let output = match sent {
            Ok(output) => output,
            Err(err) if is_retryable(&err) => {
                last_failure = format!("{}", aws_sdk_kinesis::error::DisplayErrorContext(&err));
                continue;
            }
            Err(err) => {
                return Err(err).with_context(|| format!("failed to put records to {stream}"));
            }
        };
        let entries = output.records();
        ensure!(
            entries.len() == pending.len(),
            "PutRecords returned {} results for {} entries",
            entries.len(),
            pending.len()
        );
        let mut still_pending = Vec::new();
        for (&i, entry) in pending.iter().zip(entries) {
            match (
                entry.error_code(),
                entry.shard_id(),
                entry.sequence_number(),
            ) {
                (None, Some(shard_id), Some(sequence_number)) => {
                    results[i] = Some((shard_id.to_owned(), sequence_number.to_owned()));
                }
                (code, _, _) => {
                    last_failure = format!(
                        "{}: {}",
                        code.unwrap_or("no shard id or sequence number"),
                        entry.error_message().unwrap_or_default()
                    );
                    still_pending.push(i);
                }
            }
        }
        pending = still_pending;
        if pending.is_empty() {
            break;
        }
    }
    if !pending.is_empty() {
        bail!(
            "{} records still not put to {stream} after {MAX_ATTEMPTS} attempts; last failure: {last_failure}",
            pending.len()
        );
    }
    Ok(chunk
        .iter()
        .zip(results)
        .map(|(spec, result)| {
            let (shard_id, sequence_number) = result.expect("every entry succeeded, checked above");
            ProducedRecord {
                shard_id,
                sequence_number,
                sub_sequence_number: None,
                partition_key: spec.partition_key.clone(),
                data: spec.data.clone(),
            }
        })
        .collect())
}

/// Works around a race in moto's Kinesis (the local server, not the
/// daemon): `Shard.put_record` in moto/kinesis/models.py (moto 5.2.5, "not
/// safe for concurrency") numbers a record with the shard's highest sequence
/// number plus one and stores it in a dict keyed by that number, without a
/// lock, while moto_server serves requests on concurrent threads. Two
/// `PutRecords` calls in flight to one shard can both be given number N;
/// the second record then overwrites the first, and the stream no longer
/// holds what a producer was told (`GroundTruth::check_produced` reports
/// it as an environment failure).
///
/// So at most one `PutRecords` call per stream is in flight, across every
/// producer of the test process (each producer is sequential on its own;
/// two producers on one stream, as in the chaos test, are not). Producers'
/// calls still interleave in every shard; only their overlap in time goes,
/// and every check stays as it is. The LocalStack and fanout profiles
/// (kinesis-mock, which updates its streams atomically) keep concurrent
/// calls; any other profile is serialized, moto being the default. The guard is held only
/// while a call is sent, not over a retry's backoff.
async fn one_put_at_a_time(stream: &str) -> Option<tokio::sync::OwnedMutexGuard<()>> {
    type Locks = Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>;
    static LOCKS: LazyLock<Locks> = LazyLock::new(Locks::default);
    if matches!(
        env_nonempty("SHARDSINK_TEST_PROFILE").as_deref(),
        Some("localstack" | "fanout")
    ) {
        return None;
    }
    let lock = Arc::clone(
        LOCKS
            .lock()
            .expect("put lock registry poisoned")
            .entry(stream.to_owned())
            .or_default(),
    );
    Some(lock.lock_owned().await)
}

/// Throttling, and connection errors or timeouts. (A dropped connection
/// after the server processed the call would put the records twice, which
/// the checker then reports as unexpected records; local servers do not do
/// that in practice.)
fn is_retryable(
    err: &SdkError<PutRecordsError, aws_sdk_kinesis::config::http::HttpResponse>,
) -> bool {
    match err {
        SdkError::ServiceError(service) => {
            let e = service.err();
            e.is_provisioned_throughput_exceeded_exception() || e.is_kms_throttling_exception()
        }
        SdkError::DispatchFailure(failure) => failure.is_io() || failure.is_timeout(),
        SdkError::TimeoutError(_) => true,
        _ => false,
    }
}

fn backoff(attempt: u32) -> Duration {
    let millis = 50u64.saturating_mul(1 << attempt.min(6)).min(2_000);
    Duration::from_millis(millis + rand::rng().random_range(0..=millis / 2))
}

/// Partition keys that stress JSON escaping and UTF-8 handling: quotes,
/// backslashes, newlines, control characters, non-ASCII (2-, 3- and 4-byte
/// UTF-8, right-to-left override), a JSON document, and the 256-character
/// maximum.
pub fn special_partition_keys() -> Vec<String> {
    vec![
        "plain".to_owned(),
        "with \"double quotes\"".to_owned(),
        "back\\slash\\".to_owned(),
        "new\nline\r\n".to_owned(),
        "tab\tand\u{1}\u{1f}controls".to_owned(),
        "ünïcödé".to_owned(),
        "日本語のキー".to_owned(),
        "emoji 🦀🚀".to_owned(),
        "rtl \u{202e}override".to_owned(),
        "{\"json\": [1, \"two\", null]}".to_owned(),
        "</script><!--".to_owned(),
        " ".to_owned(),
        "k".repeat(256),
        "é".repeat(256),
    ]
}

/// A random partition key: 70 % `pk-<number>` (spreads over shards), 30 %
/// one of [`special_partition_keys`].
fn partition_key(rng: &mut StdRng, specials: &[String]) -> String {
    if rng.random_bool(0.3) {
        specials[rng.random_range(0..specials.len())].clone()
    } else {
        format!("pk-{}", rng.random::<u32>())
    }
}

fn random_bytes(rng: &mut StdRng, len: usize) -> Vec<u8> {
    let mut data = vec![0u8; len];
    rng.fill(&mut data[..]);
    data
}

/// Text with JSON-special characters and multi-byte UTF-8, `len` bytes or a
/// few less (never splits a character).
fn random_text(rng: &mut StdRng, len: usize) -> Vec<u8> {
    const PIECES: &[&str] = &[
        "{\"event\":\"click\",\"n\":1}",
        "\"",
        "\\",
        "\n",
        "\r\n",
        "\t",
        "é",
        "ß",
        "日本",
        "🦀",
        "\u{0}",
        "\u{7f}",
        " ",
        "lorem ipsum ",
        "0123456789",
        "=",
        "+/",
    ];
    let mut text = String::with_capacity(len);
    while text.len() < len {
        let piece = PIECES[rng.random_range(0..PIECES.len())];
        if text.len() + piece.len() > len {
            break;
        }
        text.push_str(piece);
    }
    while text.len() < len {
        text.push('.');
    }
    text.into_bytes()
}

/// The mixed workload of the run-to-end test, deterministic from `seed`:
/// mostly small records (0–2 KiB), 5 % empty, 15 % random binary, 1 %
/// larger (2–32 KiB), text full of JSON-special and multi-byte characters,
/// partition keys from [`special_partition_keys`], two records that start
/// with the KPL magic bytes but are not valid aggregates (kept as they
/// are), and four records at or just under the 1 MiB limit (data +
/// partition key = 1,048,576 − {0, 1, 7, 1024} bytes).
pub fn mixed_record_specs(count: usize, seed: u64) -> Vec<RecordSpec> {
    let mut rng = StdRng::seed_from_u64(seed);
    let specials = special_partition_keys();
    let mut specs: Vec<RecordSpec> = (0..count)
        .map(|i| {
            let partition_key = partition_key(&mut rng, &specials);
            let roll = rng.random_range(0..1000);
            let data = match roll {
                0..50 => Vec::new(),
                50..200 => {
                    let len = rng.random_range(1..=2048);
                    random_bytes(&mut rng, len)
                }
                200..210 => {
                    let len = rng.random_range(2048..=32 * 1024);
                    if rng.random_bool(0.5) {
                        random_bytes(&mut rng, len)
                    } else {
                        random_text(&mut rng, len)
                    }
                }
                210..400 => {
                    let len = rng.random_range(1..=2048);
                    random_text(&mut rng, len)
                }
                _ => {
                    let len = rng.random_range(0..=400);
                    let mut data =
                        format!("{{\"record\":{i},\"seed\":{seed},\"pad\":\"").into_bytes();
                    data.extend(random_text(&mut rng, len));
                    data.extend_from_slice(b"\"}");
                    data
                }
            };
            RecordSpec::new(partition_key, data)
        })
        .collect();
    if count >= 10 {
        for (k, slack) in [0usize, 1, 7, 1024].into_iter().enumerate() {
            let index = (k + 1) * count / 5;
            let partition_key = format!("big-{k}");
            let len = MAX_RECORD_BYTES - partition_key.len() - slack;
            let data = if k % 2 == 0 {
                random_bytes(&mut rng, len)
            } else {
                random_text(&mut rng, len)
            };
            specs[index] = RecordSpec::new(partition_key, data);
        }
        for (k, index) in [count / 3, 2 * count / 3 + 1].into_iter().enumerate() {
            let mut data = kpl::KPL_MAGIC.to_vec();
            data.extend(random_bytes(&mut rng, 40 + k));
            specs[index] = RecordSpec::new(format!("fake-kpl-{k}"), data);
        }
    }
    specs
}

/// Small records (0–512 bytes, text or binary, some empty) with
/// `pk-<number>` and special partition keys, deterministic from `seed`;
/// every record's data starts with `label` and its index, so a record found
/// in the wrong place can be traced.
pub fn small_record_specs(count: usize, seed: u64, label: &str) -> Vec<RecordSpec> {
    let mut rng = StdRng::seed_from_u64(seed);
    let specials = special_partition_keys();
    (0..count)
        .map(|i| small_record_spec(&mut rng, &specials, label, i))
        .collect()
}

fn small_record_spec(
    rng: &mut StdRng,
    specials: &[String],
    label: &str,
    index: usize,
) -> RecordSpec {
    let partition_key = partition_key(rng, specials);
    let data = match rng.random_range(0..20) {
        0 => Vec::new(),
        1..=4 => {
            let len = rng.random_range(1..=512);
            random_bytes(rng, len)
        }
        _ => {
            let len = rng.random_range(0..=400);
            let mut data = format!("{label} #{index} ").into_bytes();
            data.extend(random_text(rng, len));
            data
        }
    };
    RecordSpec::new(partition_key, data)
}

/// KPL workload, deterministic from `seed`: `aggregates` groups of 1–20
/// user records (0–300 bytes each, some empty), partition keys repeated
/// within a group and drawn from [`special_partition_keys`], some with an
/// explicit hash key.
pub fn kpl_record_specs(aggregates: usize, seed: u64) -> Vec<Vec<RecordSpec>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let specials = special_partition_keys();
    (0..aggregates)
        .map(|a| {
            let n = if a == 0 { 1 } else { rng.random_range(1..=20) };
            let keys: Vec<String> = (0..rng.random_range(1..=3))
                .map(|_| partition_key(&mut rng, &specials))
                .collect();
            (0..n)
                .map(|i| {
                    let partition_key = keys[rng.random_range(0..keys.len())].clone();
                    let explicit_hash_key = rng
                        .random_bool(0.2)
                        .then(|| rng.random::<u128>().to_string());
                    let data = if rng.random_bool(0.1) {
                        Vec::new()
                    } else {
                        let len = rng.random_range(0..=300);
                        let mut data = format!("kpl {a}/{i} ").into_bytes();
                        data.extend(random_text(&mut rng, len));
                        data
                    };
                    RecordSpec {
                        partition_key,
                        explicit_hash_key,
                        data,
                    }
                })
                .collect()
        })
        .collect()
}

/// Puts each group of user records as one KPL aggregated Kinesis record
/// (built by [`kpl::aggregate`]; the Kinesis record's partition key and
/// explicit hash key are the first user record's, as the KPL does), and
/// returns one [`ProducedRecord`] per user record, with its sub-sequence
/// number, in order.
///
/// # Errors
/// An empty group; an aggregate over 1 MiB; as [`put_records`].
pub async fn put_kpl_records(
    env: &TestEnv,
    stream: &str,
    aggregates: &[Vec<RecordSpec>],
) -> Result<Vec<ProducedRecord>> {
    let units: Vec<Unit> = aggregates.iter().cloned().map(Unit::Aggregate).collect();
    put_units(env, stream, &units).await
}

/// What one Kinesis record of a `PutRecords` call carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unit {
    /// One plain user record.
    Plain(RecordSpec),
    /// User records in one KPL aggregate.
    Aggregate(Vec<RecordSpec>),
}

impl Unit {
    /// Its user records, in order.
    pub fn user_records(&self) -> &[RecordSpec] {
        match self {
            Self::Plain(spec) => std::slice::from_ref(spec),
            Self::Aggregate(group) => group,
        }
    }
}

/// Puts `units` — plain records and KPL aggregates (see
/// [`put_kpl_records`]), mixed in one series of `PutRecords` calls — and
/// returns one [`ProducedRecord`] per user record, in order.
///
/// # Errors
/// An empty aggregate; a record over 1 MiB; as [`put_records`].
pub async fn put_units(env: &TestEnv, stream: &str, units: &[Unit]) -> Result<Vec<ProducedRecord>> {
    let mut kinesis_records = Vec::with_capacity(units.len());
    for (i, unit) in units.iter().enumerate() {
        match unit {
            Unit::Plain(spec) => kinesis_records.push(spec.clone()),
            Unit::Aggregate(group) => {
                let first = group
                    .first()
                    .with_context(|| format!("aggregate {i} is empty"))?;
                let user_records: Vec<(String, Option<String>, Vec<u8>)> = group
                    .iter()
                    .map(|r| {
                        (
                            r.partition_key.clone(),
                            r.explicit_hash_key.clone(),
                            r.data.clone(),
                        )
                    })
                    .collect();
                kinesis_records.push(RecordSpec {
                    partition_key: first.partition_key.clone(),
                    explicit_hash_key: first.explicit_hash_key.clone(),
                    data: kpl::aggregate(&user_records),
                });
            }
        }
    }
    let outer = put_records(env, stream, &kinesis_records).await?;
    let mut produced = Vec::new();
    for (unit, kinesis_record) in units.iter().zip(outer) {
        match unit {
            Unit::Plain(_) => produced.push(kinesis_record),
            Unit::Aggregate(group) => {
                for (i, user) in group.iter().enumerate() {
                    produced.push(ProducedRecord {
                        shard_id: kinesis_record.shard_id.clone(),
                        sequence_number: kinesis_record.sequence_number.clone(),
                        sub_sequence_number: Some(u64::try_from(i).expect("an index fits in u64")),
                        partition_key: user.partition_key.clone(),
                        data: user.data.clone(),
                    });
                }
            }
        }
    }
    Ok(produced)
}

/// The shard a partition key maps to: the open shard of `shards` whose
/// hash key range holds the key's MD5 hash, read as a 128-bit big-endian
/// number (as Kinesis maps keys without an explicit hash key).
pub fn shard_of(partition_key: &str, shards: &[ShardInfo]) -> Option<String> {
    let hash = u128::from_be_bytes(Md5::digest(partition_key.as_bytes()).into());
    shards
        .iter()
        .filter(|s| s.ending_sequence_number.is_none())
        .find(|s| (s.hash_key_range.0..=s.hash_key_range.1).contains(&hash))
        .map(|s| s.shard_id.clone())
}

/// How a [`RetryingProducer`] sends its events.
#[derive(Clone, Debug)]
pub struct RetryOptions {
    /// Rounds the events and their copies are spread over, each round put
    /// by one [`RetryingProducer::put_next_round`]. An event's first copy
    /// goes out in one of them (evenly, in event order).
    pub rounds: usize,
    /// Share of copies put inside KPL aggregates (2–5 user records of one
    /// partition key, copies of one event among them sometimes), the rest
    /// as plain records.
    pub kpl_share: f64,
    /// Share of the retries put under another partition key, one that maps
    /// to another shard (a producer that picks a fresh key when it
    /// retries); 0 keeps every copy on its event's shard.
    pub other_shard_share: f64,
    /// The stream's shards, to find keys for [`RetryOptions::other_shard_share`].
    pub shards: Vec<ShardInfo>,
}

/// A producer that retries on purpose: each event (a user record) is put
/// one to three times (50 %, 30 %, 20 %), each copy with the event's
/// payload. A retry goes out in the same round as the copy before it (at
/// once, as after a failed or lost `PutRecords` entry) or one or two rounds
/// later (a late retry), re-aggregated with other records or plain, and
/// sometimes under another partition key. The plan is deterministic from
/// the seed; the test decides when each round is put.
#[derive(Clone, Debug)]
pub struct RetryingProducer {
    rounds: Vec<Vec<Unit>>,
    next: usize,
    copies: usize,
    other_shard_copies: usize,
}

impl RetryingProducer {
    /// Plans how `events` are sent.
    ///
    /// # Panics
    /// Without rounds, or with [`RetryOptions::other_shard_share`] and
    /// fewer than two shards.
    pub fn plan(events: &[RecordSpec], options: &RetryOptions, seed: u64) -> Self {
        assert!(options.rounds > 0, "a producer needs rounds");
        assert!(
            options.other_shard_share == 0.0 || options.shards.len() > 1,
            "copies on another shard need another shard"
        );
        let mut rng = StdRng::seed_from_u64(seed);
        let mut copies: Vec<Vec<RecordSpec>> = vec![Vec::new(); options.rounds];
        let mut count = 0;
        let mut other_shard_copies = 0;
        for (i, event) in events.iter().enumerate() {
            let sends = match rng.random_range(0..10) {
                0..5 => 1,
                5..8 => 2,
                _ => 3,
            };
            let mut round = i * options.rounds / events.len().max(1);
            for send in 0..sends {
                let mut copy = event.clone();
                if send > 0 {
                    if rng.random_bool(0.5) {
                        round = (round + rng.random_range(1..=2)).min(options.rounds - 1);
                    }
                    if rng.random_bool(options.other_shard_share) {
                        copy.partition_key =
                            key_on_another_shard(&event.partition_key, &options.shards);
                        other_shard_copies += 1;
                    }
                }
                copies[round].push(copy);
                count += 1;
            }
        }
        let rounds = copies
            .into_iter()
            .map(|round| pack(round, options.kpl_share, &mut rng))
            .collect();
        Self {
            rounds,
            next: 0,
            copies: count,
            other_shard_copies,
        }
    }

    /// How many rounds there are.
    pub fn rounds(&self) -> usize {
        self.rounds.len()
    }

    /// How many rounds are still to be put.
    pub fn rounds_left(&self) -> usize {
        self.rounds.len() - self.next
    }

    /// How many user records the plan puts, retries included.
    pub fn copies(&self) -> usize {
        self.copies
    }

    /// How many retries go under another partition key.
    pub fn other_shard_copies(&self) -> usize {
        self.other_shard_copies
    }

    /// The Kinesis records of every round (for tests of the plan).
    pub fn planned(&self) -> &[Vec<Unit>] {
        &self.rounds
    }

    /// Puts the next round; returns what it produced.
    ///
    /// # Errors
    /// No round is left; as [`put_units`].
    pub async fn put_next_round(
        &mut self,
        env: &TestEnv,
        stream: &str,
    ) -> Result<Vec<ProducedRecord>> {
        let Some(units) = self.rounds.get(self.next) else {
            bail!("all {} rounds were put", self.rounds.len());
        };
        let produced = put_units(env, stream, units).await?;
        self.next += 1;
        Ok(produced)
    }
}

/// A partition key derived from `key` that maps to another shard than
/// `key` does.
fn key_on_another_shard(key: &str, shards: &[ShardInfo]) -> String {
    let home = shard_of(key, shards);
    (0u32..)
        .map(|n| format!("{key}~retry-{n}"))
        .find(|other| shard_of(other, shards) != home)
        .expect("some key maps to another shard")
}

/// One round's copies as Kinesis records, in random order: a share of
/// them grouped by partition key into KPL aggregates of 2–5 user records
/// (fewer when fewer are left), the rest plain.
fn pack(mut copies: Vec<RecordSpec>, kpl_share: f64, rng: &mut StdRng) -> Vec<Unit> {
    copies.shuffle(rng);
    let mut by_key: BTreeMap<String, Vec<RecordSpec>> = BTreeMap::new();
    for copy in copies {
        by_key
            .entry(copy.partition_key.clone())
            .or_default()
            .push(copy);
    }
    let mut units = Vec::new();
    for group in by_key.into_values() {
        let mut rest = group.into_iter().peekable();
        while let Some(first) = rest.next() {
            if rest.peek().is_some() && rng.random_bool(kpl_share) {
                let size = rng.random_range(2..=5);
                let mut aggregate = vec![first];
                aggregate.extend(rest.by_ref().take(size - 1));
                units.push(Unit::Aggregate(aggregate));
            } else {
                units.push(Unit::Plain(first));
            }
        }
    }
    units.shuffle(rng);
    units
}

/// How a [`BackgroundProducer`] produces.
#[derive(Clone, Debug)]
pub struct BackgroundOptions {
    /// Records per second, on average.
    pub records_per_second: u32,
    /// One `PutRecords` call per tick.
    pub tick: Duration,
    /// Seed for the record contents ([`small_record_specs`]-like).
    pub seed: u64,
    /// Prefix of every record's data, to tell producers apart.
    pub label: String,
}

impl Default for BackgroundOptions {
    fn default() -> Self {
        Self {
            records_per_second: 100,
            tick: Duration::from_millis(200),
            seed: 0,
            label: "bg".to_owned(),
        }
    }
}

/// A tokio task putting small records at a steady pace until
/// [`BackgroundProducer::stop`].
#[derive(Debug)]
pub struct BackgroundProducer {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<()>>,
    produced: Arc<Mutex<Vec<ProducedRecord>>>,
}

impl BackgroundProducer {
    /// Starts producing to `stream` (must be called inside a tokio runtime).
    pub fn start(env: &TestEnv, stream: &str, options: BackgroundOptions) -> Self {
        let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
        let produced = Arc::new(Mutex::new(Vec::new()));
        let env = env.clone();
        let stream = stream.to_owned();
        let sink = Arc::clone(&produced);
        let task = tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(options.seed);
            let specials = special_partition_keys();
            let per_tick = (f64::from(options.records_per_second) * options.tick.as_secs_f64())
                .round()
                .max(1.0) as usize;
            let mut ticker = tokio::time::interval(options.tick);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut index = 0usize;
            loop {
                tokio::select! {
                    _ = &mut stop_rx => return Ok(()),
                    _ = ticker.tick() => {}
                }
                let specs: Vec<RecordSpec> = (0..per_tick)
                    .map(|k| small_record_spec(&mut rng, &specials, &options.label, index + k))
                    .collect();
                index += per_tick;
                let records = put_records(&env, &stream, &specs).await?;
                sink.lock().expect("producer lock poisoned").extend(records);
            }
        });
        Self {
            stop: Some(stop_tx),
            task,
            produced,
        }
    }

    /// What has been produced so far (a copy).
    pub fn produced(&self) -> Vec<ProducedRecord> {
        self.produced
            .lock()
            .expect("producer lock poisoned")
            .clone()
    }

    /// How many records have been produced so far.
    pub fn count(&self) -> usize {
        self.produced.lock().expect("producer lock poisoned").len()
    }

    /// Stops after the call in flight and returns everything produced.
    ///
    /// # Errors
    /// The first error the producer hit (it stops producing on error).
    pub async fn stop(mut self) -> Result<Vec<ProducedRecord>> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task)
            .await
            .context("background producer panicked")??;
        Ok(self.produced())
    }
}

impl Drop for BackgroundProducer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_respect_both_limits() {
        let small: Vec<RecordSpec> = (0..1201)
            .map(|i| RecordSpec::new(format!("k{i}"), vec![1u8; 10]))
            .collect();
        let sizes: Vec<usize> = chunks(&small).unwrap().iter().map(|c| c.len()).collect();
        assert_eq!(sizes, [500, 500, 201]);

        let big: Vec<RecordSpec> = (0..12)
            .map(|i| RecordSpec::new(format!("k{i:02}"), vec![0u8; MAX_RECORD_BYTES - 3]))
            .collect();
        let sizes: Vec<usize> = chunks(&big).unwrap().iter().map(|c| c.len()).collect();
        assert_eq!(sizes, [5, 5, 2]);

        let too_big = [RecordSpec::new("kk", vec![0u8; MAX_RECORD_BYTES - 1])];
        assert!(chunks(&too_big).is_err());
    }

    fn two_shards() -> Vec<ShardInfo> {
        let half = u128::MAX / 2;
        [(0, half), (half + 1, u128::MAX)]
            .into_iter()
            .enumerate()
            .map(|(i, range)| ShardInfo {
                shard_id: format!("shardId-00000000000{i}"),
                parent_shard_id: None,
                adjacent_parent_shard_id: None,
                starting_sequence_number: "0".to_owned(),
                ending_sequence_number: None,
                hash_key_range: range,
            })
            .collect()
    }

    #[test]
    fn partition_keys_map_to_shards_by_md5() {
        let shards = two_shards();
        // MD5("a") = 0cc175b9…: the lower half; MD5("b") = 92eb5ffe…: the upper.
        assert_eq!(shard_of("a", &shards).unwrap(), "shardId-000000000000");
        assert_eq!(shard_of("b", &shards).unwrap(), "shardId-000000000001");
        let other = key_on_another_shard("a", &shards);
        assert!(other.starts_with("a~retry-"));
        assert_eq!(shard_of(&other, &shards).unwrap(), "shardId-000000000001");
    }

    #[test]
    fn a_retrying_producer_sends_each_event_one_to_three_times() {
        let events: Vec<RecordSpec> = (0..300)
            .map(|i| RecordSpec::new(format!("key-{}", i % 4), format!("event {i}")))
            .collect();
        let options = RetryOptions {
            rounds: 4,
            kpl_share: 0.4,
            other_shard_share: 0.3,
            shards: two_shards(),
        };
        let producer = RetryingProducer::plan(&events, &options, 9);
        assert_eq!(
            producer.planned(),
            RetryingProducer::plan(&events, &options, 9).planned()
        );
        let mut sends: HashMap<&[u8], Vec<(usize, &str)>> = HashMap::new();
        let mut aggregated = 0;
        for (round, units) in producer.planned().iter().enumerate() {
            for unit in units {
                if let Unit::Aggregate(group) = unit {
                    aggregated += group.len();
                    assert!((2..=5).contains(&group.len()));
                    assert!(
                        group
                            .iter()
                            .all(|r| r.partition_key == group[0].partition_key)
                    );
                }
                for record in unit.user_records() {
                    sends
                        .entry(&record.data)
                        .or_default()
                        .push((round, &record.partition_key));
                }
            }
        }
        assert_eq!(sends.len(), 300);
        let total: usize = sends.values().map(Vec::len).sum();
        assert_eq!(total, producer.copies());
        assert!(sends.values().all(|s| (1..=3).contains(&s.len())));
        for count in 1..=3 {
            assert!(sends.values().filter(|s| s.len() == count).count() > 30);
        }
        // Retries at once and later; under the event's key or another shard's.
        let events_by_data: HashMap<&[u8], &RecordSpec> =
            events.iter().map(|e| (e.data.as_slice(), e)).collect();
        let mut later = 0;
        let mut moved = 0;
        for (data, copies) in &sends {
            let home = &events_by_data[data].partition_key;
            later += copies.windows(2).filter(|w| w[1].0 > w[0].0).count();
            for (_, key) in copies {
                if *key != home {
                    moved += 1;
                    assert_ne!(
                        shard_of(key, &options.shards),
                        shard_of(home, &options.shards)
                    );
                }
            }
        }
        assert!(later > 20 && later < total - 300, "{later} late retries");
        assert_eq!(moved, producer.other_shard_copies());
        assert!(moved > 10 && moved < total - 300, "{moved} moved");
        assert!(aggregated > total / 5, "{aggregated} of {total} aggregated");
        assert_eq!(producer.rounds(), 4);
    }

    #[test]
    fn mixed_specs_are_deterministic_and_varied() {
        let a = mixed_record_specs(2_000, 7);
        assert_eq!(a, mixed_record_specs(2_000, 7));
        assert_ne!(a, mixed_record_specs(2_000, 8));
        assert!(
            a.iter()
                .all(|s| s.size() <= MAX_RECORD_BYTES && !s.partition_key.is_empty())
        );
        assert!(a.iter().any(|s| s.data.is_empty()));
        assert_eq!(
            a.iter()
                .filter(|s| s.size() >= MAX_RECORD_BYTES - 1024)
                .count(),
            4
        );
        assert!(a.iter().any(|s| s.size() == MAX_RECORD_BYTES));
        assert!(a.iter().any(|s| std::str::from_utf8(&s.data).is_err()));
        assert!(a.iter().any(|s| s.partition_key.contains('\n')));
        assert!(a.iter().any(|s| s.partition_key.contains('"')));
        assert!(a.iter().any(|s| s.partition_key.contains('\\')));
        assert!(a.iter().any(|s| !s.partition_key.is_ascii()));
        assert!(
            a.iter()
                .filter(|s| s.data.starts_with(&kpl::KPL_MAGIC))
                .count()
                >= 2
        );
        let small = a.iter().filter(|s| s.data.len() <= 2048).count();
        assert!(small * 100 >= a.len() * 95, "{small} of {} small", a.len());
    }
}

//! The I/O of check 4: checkpoints from the lease table, the stream's shards
//! (ListShards), and each shard read from `TRIM_HORIZON` with the daemon's
//! own [`ShardReader`] into its [`ShardGapCheck`] (and, with `--event-id`,
//! its [`ShardEvents`]), paced and backing off. The table's gap check reads
//! the shards the same way ([`read_shards`], any [`ShardCheck`]).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt as _;
use sequence_range::RangeSet;
use shard_lease::{Checkpoint, Lease, LeaseTable};

use super::MAX_FAILURES;
use super::args::Plan;
use super::gaps::{Flow, ReadEnd, ShardGapCheck, ShardGapResult, shard_bound};
use super::keys::ArchivedKey;
use super::progress::Phase;
use super::window::{EventCopy, ShardEvents};
use crate::aws::retry::{Log, Retry, Stopped};
use crate::aws::{AwsClients, Kinesis, KinesisError, ShardInfo, StartingPosition};
use crate::config::EventSettings;
use crate::ops::log::error_chain;
use crate::read::reader::ShardReader;
use crate::read::record::ShardRecord;

/// Shards read at once for the gap check (each paced on its own).
const SHARD_CONCURRENCY: usize = 16;
/// Kinesis allows 5 GetRecords calls a second per shard: at least this long
/// between two calls on one shard.
const MIN_CALL_INTERVAL: Duration = Duration::from_millis(200);
/// Records asked for per GetRecords call (the API's maximum).
const GET_RECORDS_LIMIT: i32 = 10_000;
/// Consecutive throttled calls on one shard before its gap check gives up:
/// a running daemon shares the shard's read limit, so throttling is
/// expected (about ten minutes at the 10 s backoff cap).
const MAX_THROTTLED: u32 = 60;

/// What became of the gap check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum GapOutcome {
    /// No `--stream`.
    NotRequested,
    /// Kinesis did not answer (ListShards failed).
    Skipped(String),
    /// The kept records are rows of an Iceberg table: the table's audit
    /// checks the stream against them (`table_io.rs`).
    InTable,
    /// Checked shard by shard.
    Checked {
        shards: Vec<ShardGapResult>,
        /// Stream-level facts: the lease table, shards not checked.
        notes: Vec<String>,
        /// `--since`: where each shard was read from, if not its oldest
        /// retained record.
        since: Option<DateTime<Utc>>,
    },
}

/// What reading the stream gave besides the gap check: the event copies of
/// the records read (with `--event-id`) and the shard list.
#[derive(Debug, Default)]
pub(super) struct StreamEvents {
    /// Every shard's user records in decided batches, with their keys.
    pub(super) copies: Vec<EventCopy>,
    /// ListShards, for the shards' ancestors.
    pub(super) shards: Vec<ShardInfo>,
}

/// The event settings to key records with, and each shard's batches
/// decided with them.
pub(super) type EventsToRead<'a> = (&'a EventSettings, HashMap<String, RangeSet>);

/// The lease rows' checkpoints by shard id, or why they could not be read.
pub(super) async fn read_checkpoints(
    clients: &AwsClients,
    table: &str,
) -> Result<HashMap<String, Checkpoint>, String> {
    read_leases(clients, table).await.map(|leases| {
        leases
            .into_iter()
            .map(|lease| (lease.lease_key, lease.checkpoint))
            .collect()
    })
}

/// Every lease row of `table` (a consistent Scan, read only; heartbeats
/// and the committer's row left out), or why it could not be read.
pub(super) async fn read_leases(clients: &AwsClients, table: &str) -> Result<Vec<Lease>, String> {
    LeaseTable::new(clients.dynamodb.clone(), table)
        .list_leases()
        .await
        .map_err(|err| error_chain(&err))
}

/// The gap check: ListShards, then every shard with a bound, a few at a
/// time; with `events`, each record read in a decided batch is keyed too.
pub(super) async fn check_gaps(
    kinesis: &Kinesis,
    objects: &[ArchivedKey],
    checkpoints: Option<Result<HashMap<String, Checkpoint>, String>>,
    plan: &Plan,
    events: Option<EventsToRead<'_>>,
    tty: bool,
) -> (GapOutcome, StreamEvents) {
    let shards = match kinesis.list_shards().await {
        Ok(shards) => shards,
        Err(err) => {
            return (
                GapOutcome::Skipped(format!("ListShards failed: {}", error_chain(&err))),
                StreamEvents::default(),
            );
        }
    };
    let (settings, mut decided) = match events {
        Some((settings, decided)) => (Some(settings), decided),
        None => (None, HashMap::new()),
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
            Some(bound) => checks.push((
                ShardGapCheck::new(
                    &shard.shard_id,
                    bound,
                    &shard_objects,
                    plan.from_first_archived,
                ),
                settings
                    .zip(decided.remove(&shard.shard_id))
                    .map(|(settings, ranges)| ShardEvents::new(settings, &shard.shard_id, ranges)),
            )),
            None => notes.push(format!(
                "{}: nothing archived or checkpointed yet: not checked",
                shard.shard_id
            )),
        }
    }
    let (results, copies) = read_shards(kinesis, checks, plan.since, tty).await;
    (
        GapOutcome::Checked {
            shards: results,
            notes,
            since: plan.since,
        },
        StreamEvents { copies, shards },
    )
}

/// The progress of reading many shards at once (`SHARD_CONCURRENCY` at a
/// time): one phase, with the records read by all of them and each shard's
/// line as it ends.
struct ShardsRead {
    phase: Phase,
    total: usize,
    done: AtomicU64,
    read: AtomicU64,
}

impl ShardsRead {
    /// The phase for `total` shards.
    fn start(tty: bool, total: usize) -> Self {
        Self {
            phase: Phase::start(tty, Some(total as u64), "reading shards"),
            total,
            done: AtomicU64::new(0),
            read: AtomicU64::new(0),
        }
    }

    /// The callback a shard's read reports its records to (a count each
    /// time).
    fn progress(&self) -> impl Fn(u64) + '_ {
        move |records: u64| {
            let read = self.read.fetch_add(records, AtomicOrdering::Relaxed) + records;
            let done = self.done.load(AtomicOrdering::Relaxed);
            let total = self.total;
            self.phase.update(done, || {
                format!("checked {done} of {total} shards, {read} records read")
            });
        }
    }

    /// Says that `shard_id` is read, `checked` records checked.
    fn shard_done(&self, shard_id: &str, checked: u64) {
        self.done.fetch_add(1, AtomicOrdering::Relaxed);
        self.phase
            .line(format!("checked shard {shard_id}: {checked} records"));
        self.progress()(0);
    }

    /// Ends the phase.
    fn finish(self) {
        self.phase.finish(None);
    }
}

/// A shard's check that a gap check's read feeds: the archive's
/// [`ShardGapCheck`], or a table's (`table_gaps::TableShardCheck`).
pub(super) trait ShardCheck {
    /// What the check found.
    type Found;
    /// The shard it checks.
    fn shard_id(&self) -> &str;
    /// The next record of the shard, in sequence order.
    fn observe(&mut self, record: &ShardRecord) -> Flow;
    /// What the check found once the read ended with `end`.
    fn finish(self, end: ReadEnd) -> Self::Found;
    /// The shard and the records checked, of what a check found.
    fn checked(found: &Self::Found) -> (&str, u64);
}

impl ShardCheck for ShardGapCheck {
    type Found = ShardGapResult;

    fn shard_id(&self) -> &str {
        &self.shard_id
    }

    fn observe(&mut self, record: &ShardRecord) -> Flow {
        ShardGapCheck::observe(self, record.sequence_number.clone(), record.arrival_millis)
    }

    fn finish(self, end: ReadEnd) -> ShardGapResult {
        ShardGapCheck::finish(self, end)
    }

    fn checked(found: &ShardGapResult) -> (&str, u64) {
        (&found.shard_id, found.checked)
    }
}

/// Reads the shard of each of `checks` from `TRIM_HORIZON` (or, with
/// `since`, from `AT_TIMESTAMP`) into its check and, with `--event-id`,
/// its [`ShardEvents`], [`SHARD_CONCURRENCY`] shards at a time under one
/// progress phase (a bar when `tty`), each until its check is done, the
/// shard's end, or caught up (see [`read_records`]). Returns what the
/// checks found, sorted by shard id, and every keyed copy. The events'
/// batches lie within the checks' bounds: no record past a bound is keyed.
pub(super) async fn read_shards<C: ShardCheck>(
    kinesis: &Kinesis,
    checks: Vec<(C, Option<ShardEvents>)>,
    since: Option<DateTime<Utc>>,
    tty: bool,
) -> (Vec<C::Found>, Vec<EventCopy>) {
    let reading = ShardsRead::start(tty, checks.len());
    let read_all: Vec<(C::Found, Vec<EventCopy>)> = futures::stream::iter(checks)
        .map(|(mut check, mut events)| {
            let reading = &reading;
            async move {
                let shard_id = check.shard_id().to_owned();
                let end = read_records(kinesis, &shard_id, since, reading.progress(), |record| {
                    if let Some(events) = &mut events {
                        events.observe(&record);
                    }
                    check.observe(&record)
                })
                .await;
                let found = check.finish(end);
                let (shard_id, checked) = C::checked(&found);
                reading.shard_done(shard_id, checked);
                (found, events.map(ShardEvents::finish).unwrap_or_default())
            }
        })
        .buffer_unordered(SHARD_CONCURRENCY)
        .collect()
        .await;
    reading.finish();
    let mut found = Vec::with_capacity(read_all.len());
    let mut copies = Vec::new();
    for (shard_found, shard_copies) in read_all {
        found.push(shard_found);
        copies.extend(shard_copies);
    }
    found.sort_by(|a, b| C::checked(a).0.cmp(C::checked(b).0));
    (found, copies)
}

/// Reads shard `shard_id` from `TRIM_HORIZON` (or, with `since`, from
/// `AT_TIMESTAMP`), handing each record in order to `observe`, until it
/// answers [`Flow::Done`], the shard's end, or caught up; at least
/// [`MIN_CALL_INTERVAL`] between calls, backing off on throttling and
/// transient errors. `progress` is told how many records each call
/// returned. Returns how the read ended.
///
/// With `since`, leading records whose `ApproximateArrivalTimestamp` is
/// before it are skipped here too: servers resolve `AT_TIMESTAMP` coarsely
/// (kinesis-mock to the second), and `--since` promises that nothing
/// older is checked.
pub(super) async fn read_records(
    kinesis: &Kinesis,
    shard_id: &str,
    since: Option<DateTime<Utc>>,
    progress: impl Fn(u64),
    mut observe: impl FnMut(ShardRecord) -> Flow,
) -> ReadEnd {
    let start = since.map_or(StartingPosition::TrimHorizon, StartingPosition::AtTimestamp);
    let mut reader = ShardReader::new(kinesis.clone(), shard_id, start, GET_RECORDS_LIMIT);
    let mut skip_before = since.map(|t| t.timestamp_millis());
    // Throttling and transient errors are retried, up to a limit; the
    // report says what ended a shard's read, so nothing is logged.
    let mut retry = Retry::new("GetRecords")
        .log(Log::Off)
        .final_when(|err: &KinesisError| !err.is_retriable())
        .give_up_after(MAX_FAILURES)
        .give_up_after_when(
            |err| matches!(err, KinesisError::Throttled(_)),
            MAX_THROTTLED,
        )
        .step();
    let mut next_call = tokio::time::Instant::now();
    loop {
        tokio::time::sleep_until(next_call).await;
        next_call = tokio::time::Instant::now() + MIN_CALL_INTERVAL;
        let read = match reader.read().await {
            Ok(read) => read,
            // A new iterator after the last record read, on the next turn.
            Err(KinesisError::ExpiredIterator) => continue,
            Err(err) => match retry.failed(err) {
                Ok(delay) => {
                    next_call = tokio::time::Instant::now() + delay.max(MIN_CALL_INTERVAL);
                    continue;
                }
                Err(Stopped::Final(err) | Stopped::GaveUp(err)) => {
                    return ReadEnd::Failed(error_chain(&err));
                }
                // No stop token.
                Err(Stopped::Cancelled) => return ReadEnd::Failed("cancelled".to_owned()),
            },
        };
        retry.succeeded();
        progress(read.records.len() as u64);
        let (shard_end, caught_up) = (read.shard_end, read.is_caught_up());
        for record in read.records {
            match skip_before {
                Some(since) if record.arrival_millis < since => continue,
                _ => skip_before = None,
            }
            if observe(record) == Flow::Done {
                return ReadEnd::Bound;
            }
        }
        if shard_end {
            return ReadEnd::ShardEnd;
        }
        if caught_up {
            return ReadEnd::CaughtUp;
        }
    }
}

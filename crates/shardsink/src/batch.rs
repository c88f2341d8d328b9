//! [`Batch`]: one shard's buffered records of one minute, encoded as JSON
//! Lines, and the [`MemoryBudget`] all batches share.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sequence_range::{SequenceNumber, SequenceRange};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::encode::LineEncoder;
use crate::minute::Minute;
use crate::record::ShardRecord;

/// When a batch is flushed (Firehose-style buffering hints).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferLimits {
    /// Encoded JSON Lines bytes, before compression.
    pub max_bytes: u64,
    /// User records (lines).
    pub max_records: usize,
    /// Time since the batch's first record was added.
    pub max_age: Duration,
}

/// The most data one GetRecords response holds: 10 MiB ("Each GetRecords
/// call can return up to 10 MiB of data", Kinesis API reference,
/// GetRecords).
pub const MAX_GET_RECORDS_BYTES: u64 = 10 << 20;

/// The fewest GetRecords calls in flight a budget allows, however small.
const MIN_READS_IN_FLIGHT: usize = 4;

/// Memory the process may use for records: bytes buffered by all batches,
/// against a limit, and permits for GetRecords calls in flight.
///
/// A response is held until its records are in batches, so with many shards
/// catching up at once the responses alone could outgrow the buffers (100
/// shards × 10 MiB). Reads therefore take a permit first: at most
/// `limit / 10 MiB` (at least 4) are in flight, and the process holds at
/// most about twice `limit` in records.
#[derive(Debug)]
pub struct MemoryBudget {
    used: AtomicU64,
    limit: u64,
    reads: Arc<Semaphore>,
    reads_limit: usize,
}

impl MemoryBudget {
    /// A budget of `limit` bytes (`--buffer-memory-limit`).
    pub fn new(limit: u64) -> Arc<Self> {
        let reads = usize::try_from(limit / MAX_GET_RECORDS_BYTES)
            .unwrap_or(usize::MAX)
            .clamp(MIN_READS_IN_FLIGHT, Semaphore::MAX_PERMITS);
        Arc::new(Self {
            used: AtomicU64::new(0),
            limit,
            reads: Arc::new(Semaphore::new(reads)),
            reads_limit: reads,
        })
    }

    /// Bytes in use.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// How many GetRecords calls may be in flight at once.
    pub fn reads_in_flight_limit(&self) -> usize {
        self.reads_limit
    }

    /// Permits free now.
    #[cfg(test)]
    pub(crate) fn reads_available(&self) -> usize {
        self.reads.available_permits()
    }

    /// Waits for a permit to make one GetRecords call; hold it until the
    /// response's records are in batches (or dropped).
    ///
    /// `None` only if the semaphore were closed, which nothing does; a read
    /// then goes ahead without a permit rather than stall the shard.
    pub async fn read_permit(&self) -> Option<OwnedSemaphorePermit> {
        self.reads.clone().acquire_owned().await.ok()
    }

    fn is_exceeded(&self) -> bool {
        self.used() > self.limit
    }
}

/// One shard's records of one arrival minute, in sequence order, contiguous
/// (no record of the shard between `first` and `last` is missing), encoded.
#[derive(Debug)]
pub struct Batch {
    minute: Minute,
    encoder: LineEncoder,
    lines: Vec<u8>,
    first: Option<String>,
    /// `ApproximateArrivalTimestamp` of the first record, ms since the epoch.
    first_arrival: Option<i64>,
    last: Option<String>,
    kinesis_records: usize,
    user_records: usize,
    opened_at: Instant,
    budget: Arc<MemoryBudget>,
    accounted: u64,
}

impl Batch {
    /// An empty batch for `shard_id` and `minute`.
    pub fn new(shard_id: &str, minute: Minute, budget: Arc<MemoryBudget>) -> Self {
        Self {
            minute,
            encoder: LineEncoder::new(shard_id, minute),
            lines: Vec::new(),
            first: None,
            first_arrival: None,
            last: None,
            kinesis_records: 0,
            user_records: 0,
            opened_at: Instant::now(),
            budget,
            accounted: 0,
        }
    }

    /// Appends a record of this batch's minute, after the batch's last.
    pub fn push(&mut self, record: &ShardRecord) {
        debug_assert_eq!(record.minute(), self.minute);
        debug_assert!(
            self.last
                .as_deref()
                .is_none_or(|last| SequenceNumber::cmp_text(last, &record.sequence_number).is_lt()),
            "records must arrive in sequence order"
        );
        if self.first.is_none() {
            self.first = Some(record.sequence_number.clone());
            self.first_arrival = Some(record.arrival_millis);
            self.opened_at = Instant::now();
        }
        // Reuse the buffer: no allocation per record.
        match &mut self.last {
            Some(last) => {
                last.clear();
                last.push_str(&record.sequence_number);
            }
            None => self.last = Some(record.sequence_number.clone()),
        }
        self.encoder.encode(record, &mut self.lines);
        self.kinesis_records += 1;
        self.user_records += record.user_record_count();
        let grown = self.lines.len() as u64 - self.accounted;
        self.budget.used.fetch_add(grown, Ordering::Relaxed);
        self.accounted += grown;
    }

    /// Arrival time of the first record (ms since the epoch); `None` when
    /// empty.
    pub fn first_arrival_millis(&self) -> Option<i64> {
        self.first_arrival
    }

    /// Whether no record has been added.
    pub fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    /// The arrival minute.
    pub fn minute(&self) -> Minute {
        self.minute
    }

    /// Encoded bytes so far.
    pub fn len_bytes(&self) -> usize {
        self.lines.len()
    }

    /// Kinesis records in the batch.
    pub fn kinesis_records(&self) -> usize {
        self.kinesis_records
    }

    /// User records (lines) in the batch.
    pub fn user_records(&self) -> usize {
        self.user_records
    }

    /// Sequence number text of the last record.
    pub fn last_sequence_number(&self) -> Option<&str> {
        self.last.as_deref()
    }

    /// Why the batch must be flushed now, if it must: a size or count limit,
    /// the process-wide memory budget, or its age.
    pub fn flush_reason(&self, limits: &BufferLimits) -> Option<FlushReason> {
        if self.is_empty() {
            return None;
        }
        if self.lines.len() as u64 >= limits.max_bytes {
            Some(FlushReason::MaxBytes)
        } else if self.user_records >= limits.max_records {
            Some(FlushReason::MaxRecords)
        } else if self.budget.is_exceeded() {
            Some(FlushReason::MemoryLimit)
        } else if self.opened_at.elapsed() >= limits.max_age {
            Some(FlushReason::MaxAge)
        } else {
            None
        }
    }

    /// The sequence range `[first, last]`; `None` for an empty batch.
    pub fn range(&self) -> Option<SequenceRange> {
        let first = SequenceNumber::parse(self.first.as_deref()?).ok()?;
        let last = SequenceNumber::parse(self.last.as_deref()?).ok()?;
        SequenceRange::new(first, last).ok()
    }

    /// The encoded JSON Lines.
    pub fn lines(&self) -> &[u8] {
        &self.lines
    }

    /// Takes the encoded JSON Lines out without copying them; the batch's
    /// share of the memory budget is released when it is dropped here.
    pub fn into_lines(mut self) -> Vec<u8> {
        std::mem::take(&mut self.lines)
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        self.budget
            .used
            .fetch_sub(self.accounted, Ordering::Relaxed);
    }
}

/// Why a batch was flushed; logged with each written batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushReason {
    /// `--buffer-max-bytes` reached.
    MaxBytes,
    /// `--buffer-max-records` reached.
    MaxRecords,
    /// `--buffer-memory-limit` exceeded by all batches together.
    MemoryLimit,
    /// `--buffer-max-age` reached.
    MaxAge,
    /// A record of a later minute arrived, or the minute ended while the
    /// shard was caught up.
    MinuteOver,
    /// The next record is already in S3 (dedup), so the batch ends here.
    Gap,
    /// The shard reached `SHARD_END`.
    ShardEnd,
    /// The worker is shutting down.
    Shutdown,
    /// Replay of the pending batch recorded in the lease row.
    Replay,
}

impl FlushReason {
    /// Lowercase name for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MaxBytes => "max_bytes",
            Self::MaxRecords => "max_records",
            Self::MemoryLimit => "memory_limit",
            Self::MaxAge => "max_age",
            Self::MinuteOver => "minute_over",
            Self::Gap => "gap",
            Self::ShardEnd => "shard_end",
            Self::Shutdown => "shutdown",
            Self::Replay => "replay",
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn record(sequence_number: &str) -> ShardRecord {
        ShardRecord {
            sequence_number: sequence_number.to_owned(),
            arrival_millis: 120_000,
            partition_key: "pk".to_owned(),
            data: Bytes::from_static(b"0123456789"),
            user_records: None,
        }
    }

    fn limits() -> BufferLimits {
        BufferLimits {
            max_bytes: 1 << 20,
            max_records: 3,
            max_age: Duration::from_secs(60),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn flushes_on_count_then_tracks_the_range() {
        let budget = MemoryBudget::new(1 << 30);
        let mut batch = Batch::new("s", Minute::from_millis(120_000), budget);
        for n in ["8", "9"] {
            batch.push(&record(n));
            assert_eq!(batch.flush_reason(&limits()), None);
        }
        batch.push(&record("10"));
        assert_eq!(batch.flush_reason(&limits()), Some(FlushReason::MaxRecords));
        assert_eq!(batch.range().unwrap().to_string(), "8-10");
    }

    #[tokio::test(start_paused = true)]
    async fn flushes_on_age_and_bytes() {
        let budget = MemoryBudget::new(1 << 30);
        let mut batch = Batch::new("s", Minute::from_millis(120_000), budget);
        batch.push(&record("1"));
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(batch.flush_reason(&limits()), Some(FlushReason::MaxAge));
        let small = BufferLimits {
            max_bytes: 10,
            ..limits()
        };
        assert_eq!(batch.flush_reason(&small), Some(FlushReason::MaxBytes));
    }

    #[tokio::test(start_paused = true)]
    async fn reads_in_flight_are_bounded_by_the_budget() {
        assert_eq!(MemoryBudget::new(256 << 20).reads_in_flight_limit(), 25);
        let small = MemoryBudget::new(1 << 20);
        assert_eq!(small.reads_in_flight_limit(), MIN_READS_IN_FLIGHT);
        let mut held = Vec::new();
        for _ in 0..MIN_READS_IN_FLIGHT {
            held.push(small.read_permit().await);
        }
        let next = small.read_permit();
        tokio::pin!(next);
        assert!(
            futures::poll!(next.as_mut()).is_pending(),
            "a fifth read must wait"
        );
        held.pop();
        assert!(
            futures::poll!(next.as_mut()).is_ready(),
            "a freed permit is taken"
        );
    }

    #[tokio::test]
    async fn the_memory_budget_is_shared_and_released_on_drop() {
        let budget = MemoryBudget::new(150);
        let mut a = Batch::new("a", Minute::from_millis(120_000), budget.clone());
        let mut b = Batch::new("b", Minute::from_millis(120_000), budget.clone());
        a.push(&record("1"));
        assert_eq!(a.flush_reason(&limits()), None);
        b.push(&record("1"));
        assert_eq!(b.flush_reason(&limits()), Some(FlushReason::MemoryLimit));
        assert_eq!(budget.used(), (a.len_bytes() + b.len_bytes()) as u64);
        drop(b);
        assert_eq!(a.flush_reason(&limits()), None);
        let lines = a.into_lines();
        assert!(!lines.is_empty());
        assert_eq!(budget.used(), 0, "taking the lines releases the budget");
    }
}

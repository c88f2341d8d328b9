//! [`Batch`]: one shard's buffered records of one minute, encoded as JSON
//! Lines, held against the process's [`MemoryBudget`].

use std::sync::Arc;
use std::time::Duration;

use sequence_range::{SequenceNumber, SequenceRange};
use tokio::time::Instant;

use crate::output::encode::LineEncoder;
use crate::output::minute::Minute;
use crate::read::record::ShardRecord;
use crate::shard::memory::{MemoryBudget, Reservation};

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
    /// The bytes of `lines`, held against the budget.
    reservation: Reservation,
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
            reservation: budget.reserve(),
            budget,
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
        self.reservation
            .grow(self.lines.len() as u64 - self.reservation.bytes());
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

    /// Takes the encoded JSON Lines out without copying them, with their
    /// reservation: they stay counted against the budget until the caller
    /// drops it (after the write).
    pub fn into_lines(self) -> (Vec<u8>, Reservation) {
        (self.lines, self.reservation)
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
        let budget = MemoryBudget::new(1 << 30, 1 << 20);
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
        let budget = MemoryBudget::new(1 << 30, 1 << 20);
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

    #[tokio::test]
    async fn the_memory_budget_is_shared_and_released_on_drop() {
        let budget = MemoryBudget::new(150, 150);
        let mut a = Batch::new("a", Minute::from_millis(120_000), budget.clone());
        let mut b = Batch::new("b", Minute::from_millis(120_000), budget.clone());
        a.push(&record("1"));
        assert_eq!(a.flush_reason(&limits()), None);
        b.push(&record("1"));
        assert_eq!(b.flush_reason(&limits()), Some(FlushReason::MemoryLimit));
        assert_eq!(budget.used(), (a.len_bytes() + b.len_bytes()) as u64);
        drop(b);
        assert_eq!(a.flush_reason(&limits()), None);
        let a_bytes = a.len_bytes() as u64;
        let (lines, reservation) = a.into_lines();
        assert!(!lines.is_empty());
        assert_eq!(budget.used(), a_bytes, "lines being written stay counted");
        drop(reservation);
        assert_eq!(budget.used(), 0, "released once written");
    }
}

//! [`Batch`]: one shard's buffered records of one minute or hour, encoded in
//! the output format as they arrive, held against the process's
//! [`MemoryBudget`].

use std::sync::Arc;
use std::time::Duration;

use sequence_range::SequenceRange;
use tokio::time::Instant;

use crate::events::decisions::UserDecision;
use crate::memory::{MemoryBudget, Reservation};
use crate::output::bucket::Bucket;
use crate::output::format::{Bodies, BodyEncoder, Format};
use crate::read::record::ShardRecord;

/// When a batch is flushed (Firehose-style buffering hints).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferLimits {
    /// Encoded bytes, before compression (for Parquet, the bytes its
    /// columns hold).
    pub max_bytes: u64,
    /// User records (lines).
    pub max_records: usize,
    /// Time since the batch's first record was added.
    pub max_age: Duration,
}

/// One shard's records of one arrival minute or hour, in sequence order,
/// contiguous (no record of the shard between `first` and `last` is
/// missing), encoded. Never empty: it starts with its first record, so its
/// range always exists.
#[derive(Debug)]
pub struct Batch {
    bucket: Bucket,
    bodies: BodyEncoder,
    /// `[first, last]`: the first record's sequence number to the last's.
    range: SequenceRange,
    /// `ApproximateArrivalTimestamp` of the first record, ms since the epoch.
    first_arrival: i64,
    kinesis_records: usize,
    user_records: usize,
    opened_at: Instant,
    budget: Arc<MemoryBudget>,
    /// The bytes of `bodies`, held against the budget.
    reservation: Reservation,
}

impl Batch {
    /// A batch of `shard_id`'s records arriving in `bucket` (`first`'s),
    /// encoded in `format`, holding `first` — with its event `decisions`
    /// (one per user record) when the batch records them; then every record
    /// pushed comes with its decisions.
    pub fn start(
        shard_id: &str,
        first: &ShardRecord,
        decisions: Option<&[UserDecision]>,
        bucket: Bucket,
        format: &Format,
        budget: Arc<MemoryBudget>,
    ) -> Self {
        let mut batch = Self {
            bucket,
            bodies: BodyEncoder::new(shard_id, format),
            range: SequenceRange::single(first.sequence_number.clone()),
            first_arrival: first.arrival_millis,
            kinesis_records: 0,
            user_records: 0,
            opened_at: Instant::now(),
            reservation: budget.reserve(),
            budget,
        };
        batch.append(first, decisions);
        batch
    }

    /// Appends a record of this batch's bucket, after the batch's last, with
    /// its event decisions if the batch records them.
    pub fn push(&mut self, record: &ShardRecord, decisions: Option<&[UserDecision]>) {
        debug_assert_eq!(
            Bucket::of(self.bucket.size(), record.arrival_millis),
            self.bucket
        );
        debug_assert!(
            *self.range.last() < record.sequence_number,
            "records must arrive in sequence order"
        );
        // Reuses the range's buffers: no allocation per record.
        self.range.extend_to(&record.sequence_number);
        self.append(record, decisions);
    }

    fn append(&mut self, record: &ShardRecord, decisions: Option<&[UserDecision]>) {
        self.bodies.push(record, decisions);
        self.kinesis_records += 1;
        self.user_records += record.user_record_count();
        let held = self.bodies.memory_bytes();
        self.reservation
            .grow(held.saturating_sub(self.reservation.bytes()));
    }

    /// Arrival time of the first record (ms since the epoch).
    pub fn first_arrival_millis(&self) -> i64 {
        self.first_arrival
    }

    /// The arrival minute or hour.
    pub fn bucket(&self) -> Bucket {
        self.bucket
    }

    /// Encoded bytes so far.
    pub fn len_bytes(&self) -> u64 {
        self.bodies.memory_bytes()
    }

    /// Kinesis records in the batch.
    #[cfg_attr(
        not(any(test, feature = "bench")),
        expect(dead_code, reason = "read by tests only")
    )]
    pub fn kinesis_records(&self) -> usize {
        self.kinesis_records
    }

    /// User records in the batch (main, error and duplicates bodies).
    pub fn user_records(&self) -> usize {
        self.user_records
    }

    /// Why the batch must be flushed now, if it must: a size or count limit,
    /// the process-wide memory budget, or its age.
    pub fn flush_reason(&self, limits: &BufferLimits) -> Option<FlushReason> {
        if self.len_bytes() >= limits.max_bytes {
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

    /// The sequence range `[first, last]`.
    pub fn range(&self) -> &SequenceRange {
        &self.range
    }

    /// Takes the encoded bodies out without copying them, with their
    /// reservation: they stay counted against the budget until the caller
    /// drops it (after the write).
    pub fn into_bodies(self) -> (Bodies, Reservation) {
        (self.bodies.finish(), self.reservation)
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
    /// A record of a later minute or hour arrived, or the bucket ended
    /// while the shard was caught up.
    BucketOver,
    /// The next record is already in S3 (the resume skip), so the batch ends here.
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
            Self::BucketOver => "bucket_over",
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
    use crate::output::format::MainBody;

    fn start(shard_id: &str, first: &ShardRecord, budget: Arc<MemoryBudget>) -> Batch {
        let bucket = Bucket::minute(first.arrival_millis);
        Batch::start(shard_id, first, None, bucket, &Format::Envelope, budget)
    }

    fn record(sequence_number: &str) -> ShardRecord {
        ShardRecord {
            sequence_number: sequence_range::SequenceNumber::parse(sequence_number).unwrap(),
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
        let mut batch = start("s", &record("8"), budget);
        assert_eq!(batch.flush_reason(&limits()), None);
        batch.push(&record("9"), None);
        assert_eq!(batch.flush_reason(&limits()), None);
        batch.push(&record("10"), None);
        assert_eq!(batch.flush_reason(&limits()), Some(FlushReason::MaxRecords));
        assert_eq!(batch.range().to_string(), "8-10");
    }

    #[tokio::test(start_paused = true)]
    async fn flushes_on_age_and_bytes() {
        let budget = MemoryBudget::new(1 << 30, 1 << 20);
        let batch = start("s", &record("1"), budget);
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
        let a = start("a", &record("1"), budget.clone());
        assert_eq!(a.flush_reason(&limits()), None);
        let b = start("b", &record("1"), budget.clone());
        assert_eq!(b.flush_reason(&limits()), Some(FlushReason::MemoryLimit));
        assert_eq!(budget.used(), a.len_bytes() + b.len_bytes());
        drop(b);
        assert_eq!(a.flush_reason(&limits()), None);
        let a_bytes = a.len_bytes();
        let (bodies, reservation) = a.into_bodies();
        assert!(matches!(bodies.main, MainBody::Bytes(lines) if !lines.is_empty()));
        assert_eq!(budget.used(), a_bytes, "lines being written stay counted");
        drop(reservation);
        assert_eq!(budget.used(), 0, "released once written");
    }
}

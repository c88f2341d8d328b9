//! What every shard task shares ([`ShardContext`]) and how a task ends
//! ([`ShardExit`]).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sequence_range::SequenceNumber;
use shard_lease::{Checkpoint, Lease};
use tracing::warn;

use crate::aws::{Kinesis, ObjectStore, ShardInfo, StartingPosition};
use crate::events::decider::EventRuntime;
use crate::memory::MemoryBudget;
use crate::ops::metrics::Metrics;
use crate::output::Output;
use crate::output::batch::BufferLimits;
use crate::read::mode::ReadSource;
use crate::table::sink::TableSink;
use crate::table::state::StagedBatch;

/// What every shard task shares.
#[derive(Debug, Clone)]
pub struct ShardContext {
    /// The stream.
    pub kinesis: Kinesis,
    /// The bucket.
    pub store: ObjectStore,
    /// Format, compression and key layouts.
    pub output: Output,
    /// Buffering hints.
    pub limits: BufferLimits,
    /// Process-wide buffer budget.
    pub budget: Arc<MemoryBudget>,
    /// Process-wide metrics.
    pub metrics: Arc<Metrics>,
    /// Start time for `AT_TIMESTAMP`.
    pub initial_timestamp: Option<DateTime<Utc>>,
    /// Wait between reads of a caught-up shard.
    pub idle_time_between_reads: Duration,
    /// GetRecords `Limit`.
    pub max_records_per_read: i32,
    /// Polling, or enhanced fan-out through a stream consumer.
    pub read_source: ReadSource,
    /// `--failover-time`: bounds how long a write may outlive the lease's
    /// last confirmation.
    pub failover_time: Duration,
    /// Event deduplication, with `--event-id`.
    pub events: Option<Arc<EventRuntime>>,
    /// The Iceberg table the records go into, with `--format iceberg`.
    pub table: Option<Arc<TableSink>>,
}

/// How a shard task ended, when it did not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardExit {
    /// The shard is closed and every record is in S3; checkpoint `SHARD_END`.
    /// Carries the `ChildShards` GetRecords reported, if any.
    ShardEnd(Vec<ShardInfo>),
    /// The lease was lost; nothing more was written.
    LeaseLost,
    /// Shutdown requested; the buffer was written and checkpointed.
    Shutdown,
}

impl ShardContext {
    /// Where reading starts: the pending batch's first record, after the
    /// last batch staged for a table, after the checkpoint, or the initial
    /// position.
    pub fn start_position(&self, lease: &Lease) -> StartingPosition {
        if let Some(pending) = &lease.pending_batch {
            return StartingPosition::AtSequenceNumber(pending.first.clone());
        }
        // Batches staged for a table are written: the next one follows them.
        if let Some(last) = last_staged(lease) {
            return StartingPosition::AfterSequenceNumber(last);
        }
        match &lease.checkpoint {
            Checkpoint::SequenceNumber(n) => StartingPosition::AfterSequenceNumber(n.clone()),
            Checkpoint::TrimHorizon | Checkpoint::ShardEnd => StartingPosition::TrimHorizon,
            Checkpoint::Latest => StartingPosition::Latest,
            Checkpoint::AtTimestamp => {
                // The row's own start time (shardsink writes it); else the
                // setting, for rows written without it.
                let stored = lease
                    .initial_timestamp
                    .as_deref()
                    .and_then(|text| DateTime::parse_from_rfc3339(text).ok())
                    .map(|time| time.with_timezone(&Utc));
                match stored.or(self.initial_timestamp) {
                    Some(time) => StartingPosition::AtTimestamp(time),
                    None => {
                        warn!(
                            "lease says AT_TIMESTAMP without a time and no --initial-timestamp is set; starting at TRIM_HORIZON"
                        );
                        StartingPosition::TrimHorizon
                    }
                }
            }
        }
    }
}

/// The last record of the batches `lease` has staged for a table (they
/// follow one another), if any.
pub(crate) fn last_staged(lease: &Lease) -> Option<SequenceNumber> {
    lease
        .staged_batches
        .last()
        .and_then(|entry| StagedBatch::last_of(entry))
}

//! [`Stats`]: process-wide counters, logged as progress and in the shutdown
//! summary.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters shared by every shard task.
#[derive(Debug, Default)]
pub struct Stats {
    /// Kinesis records returned by GetRecords.
    pub kinesis_records_read: AtomicU64,
    /// User records read (KPL aggregates count each user record).
    pub records_read: AtomicU64,
    /// Data bytes read.
    pub bytes_read: AtomicU64,
    /// Objects written by this process (PUT succeeded).
    pub batches_written: AtomicU64,
    /// Objects found already present (HTTP 412) with the same records.
    pub batches_already_present: AtomicU64,
    /// User records in written or already-present objects.
    pub records_written: AtomicU64,
    /// Compressed bytes PUT.
    pub bytes_written: AtomicU64,
    /// User records skipped because dedup found them already in S3.
    pub duplicates_excluded: AtomicU64,
    /// LIST requests made by dedup.
    pub dedup_list_requests: AtomicU64,
}

impl Stats {
    /// Adds `n` to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Reads a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

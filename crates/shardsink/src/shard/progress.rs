//! [`Progress`]: what a shard task tells the metrics and its progress log —
//! records read, batches written, duplicates skipped, how far behind it is,
//! and how old its oldest unarchived record is (the retention gauge).
//!
//! The age of a record not read yet is known only from a read: a response's
//! `MillisBehindLatest` says how far its last record is behind the tip
//! (GetRecords API reference). Between reads the estimate ages on the
//! monotonic clock. While reads fail, nothing is learnt: the estimate counts
//! from the last read that succeeded — or the task's start, before any did
//! — as if a record had arrived right then (see [`Progress::unarchived`]).

use std::time::Duration;

use chrono::Utc;
use tokio::time::Instant;
use tracing::info;

use crate::ops::metrics::Metrics;
use crate::read::batch::ReadBatch;

/// How often each shard logs its progress.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(30);

/// One shard task's counters.
#[derive(Debug)]
pub(crate) struct Progress {
    records_read: u64,
    batches_written: u64,
    duplicates_excluded: u64,
    millis_behind_latest: Option<i64>,
    logged_at: Instant,
    /// The last read's `MillisBehindLatest` when it was above 0, and when
    /// that read returned; `None` when it was 0 (caught up).
    behind: Option<(Duration, Instant)>,
    /// When the last read succeeded, or when the task started before any
    /// did.
    read_ok_at: Instant,
    /// Reads have failed since `read_ok_at`.
    reads_failing: bool,
}

impl Progress {
    /// Nothing read yet.
    pub(crate) fn new() -> Self {
        Self {
            records_read: 0,
            batches_written: 0,
            duplicates_excluded: 0,
            millis_behind_latest: None,
            logged_at: Instant::now(),
            behind: None,
            read_ok_at: Instant::now(),
            reads_failing: false,
        }
    }

    /// Counts one GetRecords response.
    pub(crate) fn read(&mut self, read: &ReadBatch, shard_id: &str, metrics: &Metrics) {
        let kinesis_records = read.records.len() as u64;
        let user_records: u64 = read
            .records
            .iter()
            .map(|r| r.user_record_count() as u64)
            .sum();
        self.records_read += user_records;
        self.millis_behind_latest = read.millis_behind_latest.or(self.millis_behind_latest);
        metrics.kinesis_records_read.inc_by(kinesis_records);
        metrics.records_read.inc_by(user_records);
        metrics.bytes_read.inc_by(read.bytes);
        metrics.read.read_delays(
            read.records.iter().map(|record| record.arrival_millis),
            Utc::now().timestamp_millis(),
        );
        if let Some(behind) = read.millis_behind_latest {
            metrics.behind(shard_id, behind);
        }
        // The next unread record is no older than the last one returned,
        // which is `MillisBehindLatest` behind the tip.
        let now = Instant::now();
        self.behind = match read.millis_behind_latest {
            Some(behind) if behind > 0 => Some((Duration::from_millis(behind.unsigned_abs()), now)),
            Some(_) => None,
            None => self.behind,
        };
        self.read_ok_at = now;
        self.reads_failing = false;
    }

    /// Notes a failed read (GetShardIterator or GetRecords): until one
    /// succeeds, the shard's unread records are not seen.
    pub(crate) fn read_failed(&mut self) {
        self.reads_failing = true;
    }

    /// Counts a batch written.
    pub(crate) fn batch_written(&mut self) {
        self.batches_written += 1;
    }

    /// Counts user records the resume skip found already in S3.
    pub(crate) fn duplicates(&mut self, user_records: u64, metrics: &Metrics) {
        self.duplicates_excluded += user_records;
        metrics.duplicates_excluded.inc_by(user_records);
    }

    /// Tells the retention gauge when the shard's oldest unarchived record
    /// arrived (ms since the epoch): `held` (the first record of what is
    /// being written, replayed or buffered), else the next unread record
    /// (see [`unread_age`](Self::unread_age)), else none.
    pub(crate) fn unarchived(&self, held: Option<i64>, shard_id: &str, metrics: &Metrics) {
        let unread = self.unread_age().map(|age| {
            let age_millis = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
            Utc::now().timestamp_millis().saturating_sub(age_millis)
        });
        metrics.unarchived_since(shard_id, held.or(unread));
    }

    /// The age of the next unread record: the last read's
    /// `MillisBehindLatest` plus the time since it returned. While reads
    /// fail, a shard that was caught up (or not read yet) has records
    /// nobody has seen: counted from the last read that succeeded (or the
    /// task's start), as if one had arrived just after it. That is an
    /// upper bound when the shard was caught up — a quiet shard may have
    /// nothing unread — and a lower bound when the task started with a
    /// backlog behind its checkpoint, whose age only a read can tell.
    /// `None` when the last read was caught up and reads work.
    fn unread_age(&self) -> Option<Duration> {
        let behind = self.behind.map(|(age, at)| age + at.elapsed());
        let unseen = self.reads_failing.then(|| self.read_ok_at.elapsed());
        behind.or(unseen)
    }

    /// Logs the counters every [`PROGRESS_INTERVAL`], or now with `force`.
    pub(crate) fn log(
        &mut self,
        force: bool,
        resume_skip: bool,
        checkpoint: &impl std::fmt::Display,
    ) {
        if force || self.logged_at.elapsed() >= PROGRESS_INTERVAL {
            info!(
                records_read = self.records_read,
                batches_written = self.batches_written,
                duplicates_excluded = self.duplicates_excluded,
                millis_behind_latest = self.millis_behind_latest,
                resume_skip,
                checkpoint = %checkpoint,
                "shard progress"
            );
            self.logged_at = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHARD: &str = "shardId-000000000003";
    const HOUR_MILLIS: i64 = 3_600_000;

    fn empty_read(millis_behind_latest: Option<i64>) -> ReadBatch {
        ReadBatch {
            records: Vec::new(),
            millis_behind_latest,
            shard_end: false,
            bytes: 0,
            child_shards: Vec::new(),
            retention_gap: None,
        }
    }

    /// `shardsink_retention_used_ratio` of [`SHARD`].
    fn used_ratio(metrics: &Metrics) -> f64 {
        let text = metrics.encode();
        let prefix = format!("shardsink_retention_used_ratio{{shard_id=\"{SHARD}\"}} ");
        text.lines()
            .find_map(|line| line.strip_prefix(prefix.as_str()))
            .unwrap_or_else(|| panic!("no ratio for {SHARD} in\n{text}"))
            .parse()
            .unwrap()
    }

    #[test]
    fn a_shard_behind_with_nothing_held_is_aged_by_millis_behind_latest() {
        let metrics = Metrics::new();
        metrics.set_stream_retention(Duration::from_secs(24 * 3_600));
        let mut progress = Progress::new();

        // Six hours behind the tip; the response returned no records and
        // nothing is buffered: the next unread record is at least six
        // hours old, a quarter of the retention.
        progress.read(&empty_read(Some(6 * HOUR_MILLIS)), SHARD, &metrics);
        progress.unarchived(None, SHARD, &metrics);
        let behind = used_ratio(&metrics);
        assert!((0.25..0.26).contains(&behind), "{behind}");

        // A response without `MillisBehindLatest` keeps the estimate. It is
        // computed from two clocks (monotonic age, wall-clock now) each
        // truncated to the millisecond, so allow a second of slack: losing
        // the estimate would read 0, not a second under a quarter.
        progress.read(&empty_read(None), SHARD, &metrics);
        progress.unarchived(None, SHARD, &metrics);
        let one_second = 1.0 / (24.0 * 3_600.0);
        let kept = used_ratio(&metrics);
        assert!(kept >= behind - one_second, "{kept} < {behind}");

        // A held record is the oldest unarchived one.
        let held = Utc::now().timestamp_millis() - 12 * HOUR_MILLIS;
        progress.unarchived(Some(held), SHARD, &metrics);
        assert!((0.5..0.51).contains(&used_ratio(&metrics)));

        // Caught up, nothing held: nothing is unarchived.
        progress.read(&empty_read(Some(0)), SHARD, &metrics);
        progress.unarchived(None, SHARD, &metrics);
        assert_eq!(used_ratio(&metrics), 0.0);
    }
}

//! [`Progress`]: what a shard task tells the metrics and its progress log —
//! records read, batches written, duplicates skipped, how far behind it is,
//! and how old its oldest unarchived record is (the retention gauge).

use std::time::Duration;

use chrono::Utc;
use tokio::time::Instant;
use tracing::info;

use crate::ops::metrics::Metrics;
use crate::read::reader::ReadBatch;

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
    /// When the next unread record arrived at the latest (ms since the
    /// epoch): from the last read's `MillisBehindLatest`; `None` when caught
    /// up.
    unread_since: Option<i64>,
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
            unread_since: None,
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
        if let Some(behind) = read.millis_behind_latest {
            metrics.behind(shard_id, behind);
        }
        // The next unread record is no older than the last one returned,
        // which is `MillisBehindLatest` behind the tip.
        self.unread_since = match read.millis_behind_latest {
            Some(behind) if behind > 0 => Some(Utc::now().timestamp_millis() - behind),
            Some(_) => None,
            None => self.unread_since,
        };
    }

    /// Counts a batch written.
    pub(crate) fn batch_written(&mut self) {
        self.batches_written += 1;
    }

    /// Counts user records dedup found already in S3.
    pub(crate) fn duplicates(&mut self, user_records: u64, metrics: &Metrics) {
        self.duplicates_excluded += user_records;
        metrics.duplicates_excluded.inc_by(user_records);
    }

    /// Tells the retention gauge when the shard's oldest unarchived record
    /// arrived: `held` (the first record of what is being written, replayed
    /// or buffered), else the next unread record when behind, else none.
    pub(crate) fn unarchived(&self, held: Option<i64>, shard_id: &str, metrics: &Metrics) {
        metrics.unarchived_since(shard_id, held.or(self.unread_since));
    }

    /// Logs the counters every [`PROGRESS_INTERVAL`], or now with `force`.
    pub(crate) fn log(&mut self, force: bool, dedup: bool, checkpoint: &impl std::fmt::Display) {
        if force || self.logged_at.elapsed() >= PROGRESS_INTERVAL {
            info!(
                records_read = self.records_read,
                batches_written = self.batches_written,
                duplicates_excluded = self.duplicates_excluded,
                millis_behind_latest = self.millis_behind_latest,
                dedup,
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

        // A response without `MillisBehindLatest` keeps the estimate.
        progress.read(&empty_read(None), SHARD, &metrics);
        progress.unarchived(None, SHARD, &metrics);
        assert!(used_ratio(&metrics) >= behind);

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

//! [`IcebergMetrics`]: what the Iceberg table path did — table commits,
//! their conflicts, latency and files, payload members no column reads, and
//! which worker is the committer.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The Iceberg table path's metrics (all zero without `--format iceberg`).
#[derive(Debug)]
pub struct IcebergMetrics {
    /// `shardsink_iceberg_commits_total`: table commits made (snapshots
    /// appended) by this worker.
    pub commits: Counter,
    /// `shardsink_iceberg_commit_conflicts_total`: commits the catalog
    /// refused because the table had moved, planned again.
    pub conflicts: Counter,
    /// `shardsink_iceberg_commit_duration_seconds`: one commit, from
    /// loading the table to the catalog's answer, conflicts included.
    pub duration: Histogram,
    /// `shardsink_iceberg_commit_files`: data files appended per commit.
    pub files: Histogram,
    /// `shardsink_iceberg_fields_ignored_total`: payload members that no
    /// column of the table reads.
    pub fields_ignored: Counter,
    /// `shardsink_iceberg_committer`: 1 while this worker is the table's
    /// committer, else 0.
    pub committer: Gauge,
}

impl Default for IcebergMetrics {
    fn default() -> Self {
        Self {
            commits: Counter::default(),
            conflicts: Counter::default(),
            // 50 ms to about 100 s.
            duration: Histogram::new(exponential_buckets(0.05, 2.0, 12)),
            // 1 to 4096 files.
            files: Histogram::new(exponential_buckets(1.0, 2.0, 13)),
            fields_ignored: Counter::default(),
            committer: Gauge::default(),
        }
    }
}

impl IcebergMetrics {
    /// Registers every metric in `registry`.
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "iceberg_commits",
            "Iceberg table commits (snapshots appended) made by this worker",
            self.commits.clone(),
        );
        registry.register(
            "iceberg_commit_conflicts",
            "Iceberg table commits refused by the catalog because the table had moved, planned again",
            self.conflicts.clone(),
        );
        registry.register(
            "iceberg_commit_duration_seconds",
            "Seconds one Iceberg table commit took, from loading the table to the catalog's answer, conflicts included",
            self.duration.clone(),
        );
        registry.register(
            "iceberg_commit_files",
            "Data files appended per Iceberg table commit",
            self.files.clone(),
        );
        registry.register(
            "iceberg_fields_ignored",
            "Payload members that no column of the Iceberg table reads",
            self.fields_ignored.clone(),
        );
        registry.register(
            "iceberg_committer",
            "1 while this worker is the Iceberg table's committer",
            self.committer.clone(),
        );
    }
}

//! [`Metrics`]: the process's counters and gauges, in a Prometheus registry
//! (`prometheus-client`), served at `/metrics` and read for the shutdown
//! summary. Names follow the Prometheus conventions (`_total` counters, base
//! units: seconds, bytes).
//!
//! - `labels`: the label sets and values, plain text and enums of this
//!   module's own (no domain type);
//! - `collectors`: the gauges computed at scrape time.

mod collectors;
mod fan_out;
mod iceberg;
mod labels;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::lock::lock;

use self::collectors::{BuildInfo, CheckpointAges, UnarchivedAges};
pub use self::fan_out::ReadMetrics;
pub use self::iceberg::IcebergMetrics;
pub use self::labels::*;

/// Every metric shardsink exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// `shardsink_kinesis_records_read_total`: Kinesis records returned by GetRecords.
    pub kinesis_records_read: Counter,
    /// `shardsink_records_read_total`: user records read (KPL aggregates count each).
    pub records_read: Counter,
    /// `shardsink_read_bytes_total`: data bytes read.
    pub bytes_read: Counter,
    /// `shardsink_records_written_total`: user records in written or already
    /// present objects, error and duplicates objects included.
    pub records_written: Counter,
    /// `shardsink_records_errored_total{reason}`: user records the format
    /// could not represent, written to the error prefix.
    pub records_errored: Family<ReasonLabel, Counter>,
    /// `shardsink_events_total{outcome}`: user records in written batches
    /// by event decision (with `--event-id`). The DynamoDB store never
    /// says `id_reused`: it sees only the copies with the record's payload,
    /// so such a record is `unique` there.
    pub events: Family<EventOutcomeLabel, Counter>,
    /// `shardsink_written_bytes_total`: compressed bytes PUT.
    pub bytes_written: Counter,
    /// `shardsink_batches_written_total{outcome}`.
    pub batches_written: Family<OutcomeLabel, Counter>,
    /// `shardsink_duplicates_excluded_total`: user records skipped by the resume skip.
    pub duplicates_excluded: Counter,
    /// `shardsink_conditional_write_conflicts_total`: PUTs answered 412.
    pub conditional_write_conflicts: Counter,
    /// `shardsink_checkpoints_total{result}`.
    pub checkpoints: Family<ResultLabel, Counter>,
    /// `shardsink_retries_total{cause}`.
    pub retries: Family<CauseLabel, Counter>,
    /// `shardsink_dedup_list_requests_total`.
    pub dedup_list_requests: Counter,
    /// `shardsink_event_manifest_requests_total{operation}`: requests sent
    /// to the DynamoDB event table, retries included.
    pub event_table_requests: Family<OperationLabel, Counter>,
    /// `shardsink_event_manifest_capacity_units_total{operation}`: capacity
    /// units DynamoDB reported consumed (`ReturnConsumedCapacity` `TOTAL`)
    /// by the DynamoDB store's successful requests — read units for
    /// `BatchGetItem` and `GetItem`, write units for `PutItem`.
    pub event_table_capacity_units: Family<OperationLabel, Counter<f64, AtomicU64>>,
    /// `shardsink_event_manifest_evictions_total`: accepted copies dropped
    /// from an item of the DynamoDB event table only to keep it within its
    /// bound, though a late decision (a shard read behind, a replay) might still have
    /// consulted them.
    pub event_table_evictions: Counter,
    /// `shardsink_event_manifest_rejected_total{operation}`: manifest
    /// requests DynamoDB refused as ones that can never succeed
    /// (`ValidationException`); the records concerned were kept and their
    /// copies not recorded.
    pub event_table_rejected: Family<OperationLabel, Counter>,
    /// `shardsink_millis_behind_latest{shard_id}`: `MillisBehindLatest` of
    /// GetRecords or of a SubscribeToShardEvent.
    pub millis_behind_latest: Family<ShardLabel, Gauge>,
    /// `shardsink_leases_held`.
    pub leases_held: Gauge,
    /// `shardsink_retention_gaps_total`: shards found with records that
    /// expired from the stream before they were read.
    pub retention_gaps: Counter,
    /// The read mode, and enhanced fan-out subscriptions.
    pub read: ReadMetrics,
    /// Iceberg table commits.
    pub iceberg: IcebergMetrics,
    last_checkpoint: std::sync::Arc<CheckpointAges>,
    unarchived: std::sync::Arc<UnarchivedAges>,
}

impl Metrics {
    /// A fresh registry with every metric registered.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("shardsink");
        let metrics_last_checkpoint = std::sync::Arc::new(CheckpointAges::default());
        let unarchived = std::sync::Arc::new(UnarchivedAges::default());
        let metrics = Self {
            kinesis_records_read: Counter::default(),
            records_read: Counter::default(),
            bytes_read: Counter::default(),
            records_written: Counter::default(),
            records_errored: Family::default(),
            events: Family::default(),
            bytes_written: Counter::default(),
            batches_written: Family::default(),
            duplicates_excluded: Counter::default(),
            conditional_write_conflicts: Counter::default(),
            checkpoints: Family::default(),
            retries: Family::default(),
            dedup_list_requests: Counter::default(),
            event_table_requests: Family::default(),
            event_table_capacity_units: Family::default(),
            event_table_evictions: Counter::default(),
            event_table_rejected: Family::default(),
            millis_behind_latest: Family::default(),
            leases_held: Gauge::default(),
            retention_gaps: Counter::default(),
            read: ReadMetrics::default(),
            iceberg: IcebergMetrics::default(),
            last_checkpoint: metrics_last_checkpoint.clone(),
            unarchived: unarchived.clone(),
            registry: Registry::default(),
        };
        registry.register(
            "kinesis_records_read",
            "Kinesis records returned by GetRecords",
            metrics.kinesis_records_read.clone(),
        );
        registry.register(
            "records_read",
            "User records read (each user record of a KPL aggregate counts)",
            metrics.records_read.clone(),
        );
        registry.register(
            "read_bytes",
            "Data bytes read from Kinesis",
            metrics.bytes_read.clone(),
        );
        registry.register(
            "records_written",
            "User records in objects written or found already written (error and duplicates objects included)",
            metrics.records_written.clone(),
        );
        registry.register(
            "records_errored",
            "User records the output format could not represent, written to the error prefix, by reason",
            metrics.records_errored.clone(),
        );
        registry.register(
            "events",
            "User records in written batches by event decision: unique, duplicate (written to the duplicates prefix), expired, id_reused (local store only; unique under the DynamoDB store), id_missing",
            metrics.events.clone(),
        );
        registry.register(
            "written_bytes",
            "Compressed bytes written to S3",
            metrics.bytes_written.clone(),
        );
        registry.register(
            "batches_written",
            "Batches written to S3, by outcome (created, or already present from an earlier attempt)",
            metrics.batches_written.clone(),
        );
        registry.register(
            "duplicates_excluded",
            "User records skipped because the resume skip found them already in S3",
            metrics.duplicates_excluded.clone(),
        );
        registry.register(
            "conditional_write_conflicts",
            "PUTs answered 412 Precondition Failed (If-None-Match): the object already existed",
            metrics.conditional_write_conflicts.clone(),
        );
        registry.register(
            "checkpoints",
            "Checkpoint writes to the lease table, by result",
            metrics.checkpoints.clone(),
        );
        registry.register(
            "retries",
            "AWS calls retried after a backoff, by cause",
            metrics.retries.clone(),
        );
        registry.register(
            "dedup_list_requests",
            "ListObjectsV2 requests made by the resume skip",
            metrics.dedup_list_requests.clone(),
        );
        // The DynamoDB event table's metrics keep their older names
        // (`event_manifest_*`, docs/OPERATIONS.md): dashboards use them.
        registry.register(
            "event_manifest_requests",
            "Requests sent to the DynamoDB event table, retries included, by operation",
            metrics.event_table_requests.clone(),
        );
        registry.register(
            "event_manifest_capacity_units",
            "Capacity units DynamoDB reported consumed by successful DynamoDB event table requests, by operation (read units for BatchGetItem and GetItem, write units for PutItem)",
            metrics.event_table_capacity_units.clone(),
        );
        registry.register(
            "event_manifest_evictions",
            "Accepted copies dropped from an item of the DynamoDB event table only to keep the item within its bound of copies",
            metrics.event_table_evictions.clone(),
        );
        registry.register(
            "event_manifest_rejected",
            "Requests to the DynamoDB event table that DynamoDB refused as ones that can never succeed (ValidationException), by operation; the records were kept, their copies not recorded",
            metrics.event_table_rejected.clone(),
        );
        registry.register(
            "millis_behind_latest",
            "MillisBehindLatest of the last GetRecords response or SubscribeToShardEvent, per held shard",
            metrics.millis_behind_latest.clone(),
        );
        registry.register(
            "leases_held",
            "Leases this worker holds",
            metrics.leases_held.clone(),
        );
        registry.register(
            "retention_gaps",
            "Times a shard's position had expired from the stream (retention) before its records were read: records may have been lost",
            metrics.retention_gaps.clone(),
        );
        metrics.read.register(&mut registry);
        metrics.iceberg.register(&mut registry);
        registry.register_collector(Box::new(BuildInfo));
        registry.register_collector(Box::new(metrics_last_checkpoint));
        registry.register_collector(Box::new(unarchived));
        Self {
            registry,
            ..metrics
        }
    }

    /// The text exposition format (`/metrics`).
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Encoding into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }

    /// Counts one retry.
    pub fn retry(&self, cause: RetryCause) {
        self.retries.get_or_create(&CauseLabel { cause }).inc();
    }

    /// Counts one request to the DynamoDB event table.
    pub fn event_table_request(&self, operation: &'static str) {
        self.event_table_requests
            .get_or_create(&OperationLabel { operation })
            .inc();
    }

    /// Requests to the DynamoDB event table with `operation` so far.
    #[cfg(any(test, feature = "bench"))]
    pub fn event_table_requests(&self, operation: &'static str) -> u64 {
        self.event_table_requests
            .get_or_create(&OperationLabel { operation })
            .get()
    }

    /// Counts `units` capacity units a DynamoDB event table request with
    /// `operation` consumed.
    pub fn event_table_capacity(&self, operation: &'static str, units: f64) {
        self.event_table_capacity_units
            .get_or_create(&OperationLabel { operation })
            .inc_by(units);
    }

    /// Capacity units DynamoDB event table requests with `operation`
    /// consumed so far.
    #[cfg(any(test, feature = "bench"))]
    pub fn event_table_capacity_units(&self, operation: &'static str) -> f64 {
        self.event_table_capacity_units
            .get_or_create(&OperationLabel { operation })
            .get()
    }

    /// Counts a DynamoDB event table request with `operation` that DynamoDB
    /// refused for good.
    pub fn event_table_rejected(&self, operation: &'static str) {
        self.event_table_rejected
            .get_or_create(&OperationLabel { operation })
            .inc();
    }

    /// Counts `count` user records rejected for `reason` (a label of
    /// [`ReasonLabel::reason`]).
    pub fn records_errored(&self, reason: &'static str, count: u64) {
        self.records_errored
            .get_or_create(&ReasonLabel { reason })
            .inc_by(count);
    }

    /// Counts `count` user records written with event `outcome` (a label of
    /// [`EventOutcomeLabel::outcome`]).
    pub fn events(&self, outcome: &'static str, count: u64) {
        self.events
            .get_or_create(&EventOutcomeLabel { outcome })
            .inc_by(count);
    }

    /// Counts a batch write.
    pub fn batch_written(&self, outcome: Outcome) {
        self.batches_written
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }

    /// Batches written with `outcome` so far.
    pub fn batches(&self, outcome: Outcome) -> u64 {
        self.batches_written
            .get_or_create(&OutcomeLabel { outcome })
            .get()
    }

    /// Counts a checkpoint write; a success also restarts the shard's
    /// "seconds since checkpoint" clock.
    pub fn checkpoint(&self, shard_id: &str, ok: bool) {
        let result = if ok { "ok" } else { "failed" };
        self.checkpoints
            .get_or_create(&ResultLabel { result })
            .inc();
        if ok {
            self.last_checkpoint.set(shard_id, Instant::now());
        }
    }

    /// Says the shard's checkpoint is current: nothing is buffered or
    /// unchecked behind it (a caught-up idle shard), so the "seconds since
    /// checkpoint" clock restarts — it measures how long records have waited
    /// for a checkpoint, not how long the shard has been idle.
    pub fn checkpoint_current(&self, shard_id: &str) {
        self.last_checkpoint.set(shard_id, Instant::now());
    }

    /// Starts tracking a shard this worker now holds.
    pub fn shard_started(&self, shard_id: &str) {
        self.last_checkpoint.set(shard_id, Instant::now());
    }

    /// Forgets the per-shard series of a shard this worker no longer holds.
    pub fn shard_stopped(&self, shard_id: &str) {
        let label = ShardLabel {
            shard_id: shard_id.to_owned(),
        };
        self.millis_behind_latest.remove(&label);
        self.last_checkpoint.remove(shard_id);
        lock(&self.unarchived.since).remove(shard_id);
    }

    /// The stream's retention period (DescribeStreamSummary
    /// `RetentionPeriodHours`), against which unarchived records are aged.
    pub fn set_stream_retention(&self, retention: Duration) {
        let millis = u64::try_from(retention.as_millis()).unwrap_or(u64::MAX);
        self.unarchived
            .retention_millis
            .store(millis, Ordering::Relaxed);
    }

    /// The stream's retention period as last set by
    /// [`set_stream_retention`](Self::set_stream_retention); `None` before
    /// DescribeStreamSummary first answered.
    pub fn stream_retention(&self) -> Option<Duration> {
        match self.unarchived.retention_millis.load(Ordering::Relaxed) {
            0 => None,
            millis => Some(Duration::from_millis(millis)),
        }
    }

    /// The arrival time (ms since the epoch) of the shard's oldest record
    /// not yet archived — buffered, being written, or not read yet (an
    /// estimate: see `shard::progress`) — or `None` when everything read
    /// is archived and the shard is caught up.
    pub fn unarchived_since(&self, shard_id: &str, arrival_millis: Option<i64>) {
        lock(&self.unarchived.since).insert(shard_id.to_owned(), arrival_millis);
    }

    /// Records `MillisBehindLatest` for a shard.
    pub fn behind(&self, shard_id: &str, millis: i64) {
        self.millis_behind_latest
            .get_or_create(&ShardLabel {
                shard_id: shard_id.to_owned(),
            })
            .set(millis);
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposes_the_documented_names() {
        let metrics = Metrics::new();
        metrics.records_read.inc_by(5);
        metrics.batch_written(Outcome::created);
        metrics.batch_written(Outcome::already_present);
        metrics.retry(RetryCause::s3_throttled);
        metrics.behind("shardId-000000000001", 1_500);
        metrics.checkpoint("shardId-000000000001", true);
        metrics.leases_held.set(3);
        metrics.retention_gaps.inc();
        metrics.event_table_capacity("BatchGetItem", 0.5);
        metrics.event_table_capacity("BatchGetItem", 1.0);
        metrics.event_table_evictions.inc();
        metrics.event_table_rejected("PutItem");
        metrics.set_stream_retention(Duration::from_secs(24 * 3_600));
        // Half a day old: half the retention used.
        metrics.unarchived_since(
            "shardId-000000000001",
            Some(chrono::Utc::now().timestamp_millis() - 12 * 3_600_000),
        );
        let text = metrics.encode();
        // Whole samples at the start of a line: a prefix added twice would
        // still contain the expected text.
        let has = |sample: &str| text.lines().any(|line| line.starts_with(sample));
        for line in [
            "shardsink_records_read_total 5",
            "shardsink_batches_written_total{outcome=\"created\"} 1",
            "shardsink_batches_written_total{outcome=\"already_present\"} 1",
            "shardsink_retries_total{cause=\"s3_throttled\"} 1",
            "shardsink_millis_behind_latest{shard_id=\"shardId-000000000001\"} 1500",
            "shardsink_checkpoints_total{result=\"ok\"} 1",
            "shardsink_leases_held 3",
            "shardsink_build_info{version=\"",
            "shardsink_seconds_since_checkpoint{shard_id=\"shardId-000000000001\"} ",
            "shardsink_retention_gaps_total 1",
            "shardsink_event_manifest_capacity_units_total{operation=\"BatchGetItem\"} 1.5",
            "shardsink_event_manifest_evictions_total 1",
            "shardsink_event_manifest_rejected_total{operation=\"PutItem\"} 1",
            "shardsink_stream_retention_seconds 86400",
            "shardsink_retention_used_ratio{shard_id=\"shardId-000000000001\"} 0.5",
        ] {
            assert!(has(line), "missing {line:?} in\n{text}");
        }
        metrics.shard_stopped("shardId-000000000001");
        let text = metrics.encode();
        assert!(
            !text.contains("shard_id=\"shardId-000000000001\""),
            "per-shard series are removed:\n{text}"
        );
        assert_eq!(metrics.batches(Outcome::created), 1);
    }
}

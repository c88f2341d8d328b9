//! The gauges [`Metrics`](super::Metrics) computes at scrape time: the
//! age of each shard's checkpoint, of its oldest unarchived record, and the
//! build's information.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;

use super::labels::ShardLabel;
use crate::lock::lock;

/// `shardsink_seconds_since_checkpoint{shard_id}`, computed at scrape time
/// from the last successful checkpoint (or the start of the shard task).
#[derive(Debug, Default)]
pub(super) struct CheckpointAges {
    pub(super) at: Mutex<HashMap<String, Instant>>,
}

impl CheckpointAges {
    pub(super) fn set(&self, shard_id: &str, at: Instant) {
        lock(&self.at).insert(shard_id.to_owned(), at);
    }

    pub(super) fn remove(&self, shard_id: &str) {
        lock(&self.at).remove(shard_id);
    }
}

impl Collector for CheckpointAges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let ages: Vec<(String, f64)> = lock(&self.at)
            .iter()
            .map(|(shard, at)| (shard.clone(), at.elapsed().as_secs_f64()))
            .collect();
        let mut family = encoder.encode_descriptor(
            "seconds_since_checkpoint",
            "Seconds records have waited for a checkpoint, per held shard: since the last checkpoint, or since the shard was last caught up with nothing buffered",
            None,
            MetricType::Gauge,
        )?;
        for (shard_id, age) in ages {
            let gauge = ConstGauge::new(age);
            gauge.encode(family.encode_family(&ShardLabel { shard_id })?)?;
        }
        Ok(())
    }
}

/// `shardsink_stream_retention_seconds` and
/// `shardsink_retention_used_ratio{shard_id}`: how much of the stream's
/// retention the oldest unarchived record of each held shard has used,
/// computed at scrape time (so it keeps growing while writes are stuck, and
/// while reads fail: then counted from the last read that succeeded). At
/// 1 that record expires from the stream unread.
#[derive(Debug, Default)]
pub(super) struct UnarchivedAges {
    pub(super) retention_millis: AtomicU64,
    pub(super) since: Mutex<HashMap<String, Option<i64>>>,
}

impl Collector for UnarchivedAges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let retention = self.retention_millis.load(Ordering::Relaxed);
        if retention == 0 {
            return Ok(());
        }
        let retention_seconds = retention as f64 / 1_000.0;
        ConstGauge::new(retention_seconds).encode(encoder.encode_descriptor(
            "stream_retention_seconds",
            "The stream's retention period (DescribeStreamSummary RetentionPeriodHours)",
            None,
            MetricType::Gauge,
        )?)?;
        let now = chrono::Utc::now().timestamp_millis();
        let ratios: Vec<(String, f64)> = lock(&self.since)
            .iter()
            .map(|(shard, since)| {
                let age = since.map_or(0, |since| now.saturating_sub(since).max(0));
                (shard.clone(), age as f64 / retention as f64)
            })
            .collect();
        let mut family = encoder.encode_descriptor(
            "retention_used_ratio",
            "Age of the shard's oldest unarchived record as a fraction of the stream's retention, per held shard (while reads fail: since the last read that succeeded); at 1 records expire unread",
            None,
            MetricType::Gauge,
        )?;
        for (shard_id, ratio) in ratios {
            ConstGauge::new(ratio).encode(family.encode_family(&ShardLabel { shard_id })?)?;
        }
        Ok(())
    }
}

/// `shardsink_build_info{version}` = 1.
#[derive(Debug)]
pub(super) struct BuildInfo;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct VersionLabel {
    pub(super) version: &'static str,
}

impl Collector for BuildInfo {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let mut family = encoder.encode_descriptor(
            "build_info",
            "shardsink version; always 1",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(1_i64).encode(family.encode_family(&VersionLabel {
            version: env!("CARGO_PKG_VERSION"),
        })?)
    }
}

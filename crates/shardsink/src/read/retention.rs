//! [`RetentionGap`]: records of a shard that expired from the stream before
//! shardsink read them, and the marker object that says so in S3.
//!
//! Kinesis keeps records for the stream's retention period (24 hours by
//! default, DescribeStreamSummary `RetentionPeriodHours`). When shardsink
//! cannot read a shard for longer — an outage, a stopped service — the
//! position it resumes at is trimmed. The reader finds out from what a fresh
//! iterator returns ([`crate::read::resume_check`]): a later record than the
//! position's own first, nothing at all once caught up, or a start time past
//! the retention with no older record left; GetShardIterator may also reject
//! the sequence number ([`crate::aws::kinesis::is_expired_position`]), or the
//! shard itself may have left the stream (ResourceNotFoundException).
//! Reading goes on from the oldest record still there, and whatever arrived
//! in between and was trimmed is gone. shardsink cannot tell how many records
//! that was (sequence numbers are not consecutive), but it says loudly that
//! it happened: an error log, `shardsink_retention_gaps_total`, and a marker
//! object
//!
//! ```text
//! {prefix}/_retention-gaps/{shardId}/{position}.json
//! ```
//!
//! where `{position}` is the expired sequence number (or the sentinel the
//! shard was to start at). `shardsink verify` lists these markers and reports
//! each gap. The key is a pure function of the shard and the position, so a
//! restart that finds the same gap again writes the same key, and
//! `If-None-Match` keeps the first marker.

use bytes::Bytes;
use chrono::{DateTime, SecondsFormat, Utc};
use sequence_range::SequenceNumber;
use serde::{Deserialize, Serialize};
use shard_lease::{Checkpoint, Lease};
use tracing::error;

use crate::aws::{ObjectStore, S3Error, StartingPosition};
use crate::ops::metrics::Metrics;
use crate::output::key::KeyLayout;
use crate::read::record::ShardRecord;

/// The folder of gap markers under the prefix.
pub const MARKER_FOLDER: &str = "_retention-gaps";

/// Records of one shard that expired from the stream unread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionGap {
    /// The shard.
    pub shard_id: String,
    /// Where reading was to resume: this position had expired.
    pub expired: StartingPosition,
    /// The oldest record the shard still held when the gap was found:
    /// sequence number and arrival time (ms since the epoch). `None` when
    /// the shard held no record at all, or has left the stream.
    pub first_retained: Option<(SequenceNumber, i64)>,
    /// The shard itself has left the stream (every record trimmed after it
    /// was closed by a reshard).
    pub shard_left_stream: bool,
}

/// The marker's JSON body (field names as written).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GapMarker {
    /// The shard.
    pub shard_id: String,
    /// `AT_SEQUENCE_NUMBER`, `AFTER_SEQUENCE_NUMBER`, or the sentinel the
    /// shard was to start at (`TRIM_HORIZON`, `LATEST`, `AT_TIMESTAMP`).
    pub position: String,
    /// The expired sequence number, for the two sequence-number positions.
    pub sequence_number: Option<String>,
    /// The expired start time, RFC 3339, for `AT_TIMESTAMP` (absent from
    /// markers written before it was recorded).
    #[serde(default)]
    pub timestamp: Option<String>,
    /// The oldest record still in the shard when the gap was found.
    pub first_retained_sequence_number: Option<String>,
    /// Its `ApproximateArrivalTimestamp`, RFC 3339.
    pub first_retained_arrival: Option<String>,
    /// Whether the shard had left the stream.
    pub shard_left_stream: bool,
    /// When shardsink found the gap, RFC 3339.
    pub detected_at: String,
}

impl RetentionGap {
    /// `(position name, sequence number)` of the expired position.
    fn position(&self) -> (&'static str, Option<&str>) {
        match &self.expired {
            StartingPosition::AtSequenceNumber(n) => ("AT_SEQUENCE_NUMBER", Some(n.as_str())),
            StartingPosition::AfterSequenceNumber(n) => ("AFTER_SEQUENCE_NUMBER", Some(n.as_str())),
            StartingPosition::TrimHorizon => ("TRIM_HORIZON", None),
            StartingPosition::Latest => ("LATEST", None),
            StartingPosition::AtTimestamp(_) => ("AT_TIMESTAMP", None),
        }
    }

    /// The marker's key under `prefix` (no trailing slash; may be empty).
    pub fn marker_key(&self, prefix: &str) -> String {
        let (name, sequence_number) = self.position();
        let file = sequence_number.unwrap_or(name);
        let folder = marker_prefix(prefix);
        format!("{folder}{}/{file}.json", self.shard_id)
    }

    /// The marker's body, found at `detected_at`.
    pub fn marker(&self, detected_at: DateTime<Utc>) -> GapMarker {
        let (position, sequence_number) = self.position();
        let rfc3339 = |millis: i64| {
            DateTime::from_timestamp_millis(millis)
                .map(|time| time.to_rfc3339_opts(SecondsFormat::Millis, true))
        };
        let timestamp = match &self.expired {
            StartingPosition::AtTimestamp(time) => {
                Some(time.to_rfc3339_opts(SecondsFormat::Millis, true))
            }
            _ => None,
        };
        GapMarker {
            shard_id: self.shard_id.clone(),
            position: position.to_owned(),
            sequence_number: sequence_number.map(str::to_owned),
            timestamp,
            first_retained_sequence_number: self
                .first_retained
                .as_ref()
                .map(|(n, _)| n.to_string()),
            first_retained_arrival: self
                .first_retained
                .as_ref()
                .and_then(|(_, arrival)| rfc3339(*arrival)),
            shard_left_stream: self.shard_left_stream,
            detected_at: detected_at.to_rfc3339_opts(SecondsFormat::Millis, true),
        }
    }
}

impl RetentionGap {
    /// Records of `shard_id` trimmed from `expired` on, up to `first_retained`,
    /// the oldest record the shard still holds (`None`: it holds none past
    /// the position).
    pub fn trimmed(
        shard_id: &str,
        expired: StartingPosition,
        first_retained: Option<&ShardRecord>,
    ) -> Self {
        Self {
            shard_id: shard_id.to_owned(),
            expired,
            first_retained: first_retained
                .map(|record| (record.sequence_number.clone(), record.arrival_millis)),
            shard_left_stream: false,
        }
    }

    /// Every record of `shard_id` from `expired` on: the shard has left the
    /// stream (closed, then trimmed) before it was read to its end.
    pub fn shard_gone(shard_id: &str, expired: StartingPosition) -> Self {
        Self {
            shard_id: shard_id.to_owned(),
            expired,
            first_retained: None,
            shard_left_stream: true,
        }
    }

    /// The gap of a lease whose shard left the stream before it was read to
    /// its end: every record after its checkpoint.
    pub fn of_unread_lease(lease: &Lease) -> Self {
        let expired = match &lease.checkpoint {
            Checkpoint::SequenceNumber(n) => StartingPosition::AfterSequenceNumber(n.clone()),
            Checkpoint::TrimHorizon | Checkpoint::ShardEnd => StartingPosition::TrimHorizon,
            Checkpoint::Latest => StartingPosition::Latest,
            Checkpoint::AtTimestamp => StartingPosition::AtTimestamp(
                lease
                    .initial_timestamp
                    .as_deref()
                    .and_then(|text| DateTime::parse_from_rfc3339(text).ok())
                    .map(|time| time.with_timezone(&Utc))
                    .unwrap_or_default(),
            ),
        };
        Self::shard_gone(&lease.lease_key, expired)
    }

    /// Says that the gap happened: writes its marker (`If-None-Match`; a
    /// marker already there, from an earlier detection, is fine), then logs
    /// an error naming the shard, its `checkpoint` and the first record
    /// still retained, and counts `shardsink_retention_gaps_total`. Callers
    /// retry until it succeeds, so the marker exists before anything moves
    /// past the gap.
    ///
    /// # Errors
    /// [`S3Error`] from the PUT; nothing was logged or counted.
    pub async fn report(
        &self,
        checkpoint: &Checkpoint,
        store: &ObjectStore,
        prefix: &str,
        metrics: &Metrics,
    ) -> Result<(), S3Error> {
        let key = self.marker_key(prefix);
        // Serializing plain strings and booleans cannot fail.
        let body = serde_json::to_vec(&self.marker(Utc::now())).unwrap_or_default();
        store
            .put_if_absent(&key, Bytes::from(body), "application/json", &[])
            .await?;
        metrics.retention_gaps.inc();
        error!(
            shard_id = %self.shard_id,
            checkpoint = %checkpoint,
            expired_position = ?self.expired,
            first_retained = self.first_retained.as_ref().map(|(n, _)| n.as_str()),
            shard_left_stream = self.shard_left_stream,
            marker = %key,
            "records expired from the stream before they were read: the stream's retention was exceeded and data was lost"
        );
        Ok(())
    }
}

/// `{prefix}/_retention-gaps/` (or `_retention-gaps/` without a prefix):
/// where every gap marker of the archive is.
pub fn marker_prefix(prefix: &str) -> String {
    format!("{}{MARKER_FOLDER}/", KeyLayout::plain(prefix).list_prefix())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_keyed_by_shard_and_expired_position() {
        let gap = RetentionGap {
            shard_id: "shardId-000000000002".to_owned(),
            expired: StartingPosition::AfterSequenceNumber(SequenceNumber::from(4959u64)),
            first_retained: Some((SequenceNumber::from(4971u64), 1_795_238_823_045)),
            shard_left_stream: false,
        };
        assert_eq!(
            gap.marker_key("raw/orders"),
            "raw/orders/_retention-gaps/shardId-000000000002/4959.json"
        );
        assert_eq!(
            gap.marker_key(""),
            "_retention-gaps/shardId-000000000002/4959.json"
        );
        let detected = DateTime::from_timestamp_millis(1_795_300_000_000).unwrap();
        let body = serde_json::to_value(gap.marker(detected)).unwrap();
        assert_eq!(body["position"], "AFTER_SEQUENCE_NUMBER");
        assert_eq!(body["sequenceNumber"], "4959");
        assert_eq!(body["firstRetainedSequenceNumber"], "4971");
        assert_eq!(body["firstRetainedArrival"], "2026-11-21T05:27:03.045Z");
        assert_eq!(body["shardLeftStream"], false);
        let gone = RetentionGap {
            expired: StartingPosition::TrimHorizon,
            first_retained: None,
            shard_left_stream: true,
            ..gap
        };
        assert_eq!(
            gone.marker_key("p"),
            "p/_retention-gaps/shardId-000000000002/TRIM_HORIZON.json"
        );
        let start = DateTime::from_timestamp_millis(1_795_000_000_000).unwrap();
        let by_time = RetentionGap::trimmed(
            "shardId-000000000002",
            StartingPosition::AtTimestamp(start),
            None,
        );
        assert_eq!(
            by_time.marker_key("p"),
            "p/_retention-gaps/shardId-000000000002/AT_TIMESTAMP.json"
        );
        let body = serde_json::to_value(by_time.marker(detected)).unwrap();
        assert_eq!(body["position"], "AT_TIMESTAMP");
        assert_eq!(body["timestamp"], "2026-11-18T11:06:40.000Z");
        assert_eq!(body["sequenceNumber"], serde_json::Value::Null);
    }
}

//! The retention-gap marker: the object that says records of a shard
//! expired from the stream before they were read
//! ([`RetentionGap`]):
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
use serde::{Deserialize, Serialize};
use shard_lease::Checkpoint;
use tracing::error;

use crate::aws::{ObjectStore, S3Error, StartingPosition};
use crate::ops::metrics::Metrics;
use crate::output::key::KeyLayout;
use crate::read::retention::RetentionGap;

/// The folder of gap markers under the prefix.
pub const MARKER_FOLDER: &str = "_retention-gaps";

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

/// The marker's key of `gap` under `prefix` (no trailing slash; may be empty).
pub fn marker_key(gap: &RetentionGap, prefix: &str) -> String {
    let (name, sequence_number) = gap.position();
    let file = sequence_number.unwrap_or(name);
    let folder = marker_prefix(prefix);
    format!("{folder}{}/{file}.json", gap.shard_id)
}

/// The marker's body of `gap`, found at `detected_at`.
pub fn marker(gap: &RetentionGap, detected_at: DateTime<Utc>) -> GapMarker {
    let (position, sequence_number) = gap.position();
    let rfc3339 = |millis: i64| {
        DateTime::from_timestamp_millis(millis)
            .map(|time| time.to_rfc3339_opts(SecondsFormat::Millis, true))
    };
    let timestamp = match &gap.expired {
        StartingPosition::AtTimestamp(time) => {
            Some(time.to_rfc3339_opts(SecondsFormat::Millis, true))
        }
        _ => None,
    };
    GapMarker {
        shard_id: gap.shard_id.clone(),
        position: position.to_owned(),
        sequence_number: sequence_number.map(str::to_owned),
        timestamp,
        first_retained_sequence_number: gap.first_retained.as_ref().map(|(n, _)| n.to_string()),
        first_retained_arrival: gap
            .first_retained
            .as_ref()
            .and_then(|(_, arrival)| rfc3339(*arrival)),
        shard_left_stream: gap.shard_left_stream,
        detected_at: detected_at.to_rfc3339_opts(SecondsFormat::Millis, true),
    }
}

/// Says that `gap` happened: writes its marker (`If-None-Match`; a
/// marker already there, from an earlier detection, is fine), then logs
/// an error naming the shard, its `checkpoint` and the first record
/// still retained, and counts `shardsink_retention_gaps_total`. Callers
/// retry until it succeeds, so the marker exists before anything moves
/// past the gap.
///
/// # Errors
/// [`S3Error`] from the PUT; nothing was logged or counted.
pub async fn report(
    gap: &RetentionGap,
    checkpoint: &Checkpoint,
    store: &ObjectStore,
    prefix: &str,
    metrics: &Metrics,
) -> Result<(), S3Error> {
    let key = marker_key(gap, prefix);
    // Serializing plain strings and booleans cannot fail.
    let body = serde_json::to_vec(&marker(gap, Utc::now())).unwrap_or_default();
    store
        .put_if_absent(&key, Bytes::from(body), "application/json", &[])
        .await?;
    metrics.retention_gaps.inc();
    error!(
        shard_id = %gap.shard_id,
        checkpoint = %checkpoint,
        expired_position = ?gap.expired,
        first_retained = gap.first_retained.as_ref().map(|(n, _)| n.as_str()),
        shard_left_stream = gap.shard_left_stream,
        marker = %key,
        "records expired from the stream before they were read: the stream's retention was exceeded and data was lost"
    );
    Ok(())
}

/// `{prefix}/_retention-gaps/` (or `_retention-gaps/` without a prefix):
/// where every gap marker of the archive is.
pub fn marker_prefix(prefix: &str) -> String {
    format!("{}{MARKER_FOLDER}/", KeyLayout::plain(prefix).list_prefix())
}

#[cfg(test)]
mod tests {
    use sequence_range::SequenceNumber;

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
            marker_key(&gap, "raw/orders"),
            "raw/orders/_retention-gaps/shardId-000000000002/4959.json"
        );
        assert_eq!(
            marker_key(&gap, ""),
            "_retention-gaps/shardId-000000000002/4959.json"
        );
        let detected = DateTime::from_timestamp_millis(1_795_300_000_000).unwrap();
        let body = serde_json::to_value(marker(&gap, detected)).unwrap();
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
            marker_key(&gone, "p"),
            "p/_retention-gaps/shardId-000000000002/TRIM_HORIZON.json"
        );
        let start = DateTime::from_timestamp_millis(1_795_000_000_000).unwrap();
        let by_time = RetentionGap::trimmed(
            "shardId-000000000002",
            StartingPosition::AtTimestamp(start),
            None,
        );
        assert_eq!(
            marker_key(&by_time, "p"),
            "p/_retention-gaps/shardId-000000000002/AT_TIMESTAMP.json"
        );
        let body = serde_json::to_value(marker(&by_time, detected)).unwrap();
        assert_eq!(body["position"], "AT_TIMESTAMP");
        assert_eq!(body["timestamp"], "2026-11-18T11:06:40.000Z");
        assert_eq!(body["sequenceNumber"], serde_json::Value::Null);
    }
}

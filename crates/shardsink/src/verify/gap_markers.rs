//! Check 5, recorded retention gaps: the markers the daemon writes under
//! `{prefix}/_retention-gaps/` when records of a shard expired from the
//! stream before it read them ([`crate::read::retention`]). Each is fetched and
//! reported; any marker makes the archive not exact — records the stream
//! once held are not in it.

use super::{s3_retry, s3_stopped};
use crate::aws::ObjectStore;
use crate::output::gap_marker::{GapMarker, MARKER_FOLDER};

/// One marker and what it says (or why it could not be read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RecordedGap {
    pub(super) key: String,
    pub(super) marker: Result<GapMarker, String>,
}

/// Whether `key` (under `list_prefix`) is a gap marker.
pub(super) fn is_marker_key(list_prefix: &str, key: &str) -> bool {
    key.strip_prefix(list_prefix)
        .and_then(|rest| rest.strip_prefix(MARKER_FOLDER))
        .is_some_and(|rest| rest.starts_with('/') && rest.ends_with(".json"))
}

/// Fetches and parses each marker; a marker that cannot be read still
/// counts, with the reason.
pub(super) async fn read_markers(store: &ObjectStore, keys: Vec<String>) -> Vec<RecordedGap> {
    let mut gaps = Vec::with_capacity(keys.len());
    for key in keys {
        let marker = match s3_retry("GetObject").run(|| store.get(&key)).await {
            Ok(body) => serde_json::from_slice::<GapMarker>(&body)
                .map_err(|err| format!("not a gap marker: {err}")),
            Err(stopped) => Err(format!("cannot read it: {}", s3_stopped(stopped))),
        };
        gaps.push(RecordedGap { key, marker });
    }
    gaps
}

/// One line for the summary.
pub(super) fn gap_marker_line(gap: &RecordedGap) -> String {
    match &gap.marker {
        Ok(marker) => {
            let from = match (&marker.sequence_number, &marker.timestamp) {
                (Some(n), _) if marker.position == "AT_SEQUENCE_NUMBER" => format!("from {n}"),
                (Some(n), _) => format!("after {n}"),
                (None, Some(time)) => format!("from {time}"),
                (None, None) => format!("from {}", marker.position),
            };
            let to = match (
                &marker.first_retained_sequence_number,
                &marker.first_retained_arrival,
            ) {
                (Some(n), Some(arrival)) => {
                    format!("before {n} (the oldest record left, arrived {arrival})")
                }
                (Some(n), None) => format!("before {n} (the oldest record left)"),
                (None, _) if marker.shard_left_stream => {
                    "to its end (the shard has left the stream)".to_owned()
                }
                (None, _) => "to its end (no record was left)".to_owned(),
            };
            format!(
                "retention gap in {}: records {from} {to} expired from the stream before shardsink read them (found {}; {})",
                marker.shard_id, marker.detected_at, gap.key
            )
        }
        Err(reason) => format!("retention gap marker {}: {reason}", gap.key),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_told_from_objects_and_other_keys() {
        assert!(is_marker_key(
            "p/",
            "p/_retention-gaps/shardId-000000000001/4959.json"
        ));
        assert!(is_marker_key(
            "",
            "_retention-gaps/shardId-000000000001/TRIM_HORIZON.json"
        ));
        assert!(!is_marker_key("p/", "p/_retention-gapsX/a.json"));
        assert!(!is_marker_key("p/", "q/_retention-gaps/s/1.json"));
        assert!(!is_marker_key("p/", "p/_retention-gaps/s/1.txt"));
    }

    #[test]
    fn a_marker_reads_as_a_sentence() {
        let gap = RecordedGap {
            key: "p/_retention-gaps/shardId-000000000001/4959.json".to_owned(),
            marker: Ok(GapMarker {
                shard_id: "shardId-000000000001".to_owned(),
                position: "AFTER_SEQUENCE_NUMBER".to_owned(),
                sequence_number: Some("4959".to_owned()),
                timestamp: None,
                first_retained_sequence_number: Some("4971".to_owned()),
                first_retained_arrival: Some("2026-11-21T05:27:03.045Z".to_owned()),
                shard_left_stream: false,
                detected_at: "2026-11-22T09:00:00.000Z".to_owned(),
            }),
        };
        assert_eq!(
            gap_marker_line(&gap),
            "retention gap in shardId-000000000001: records after 4959 before 4971 (the oldest record left, arrived 2026-11-21T05:27:03.045Z) expired from the stream before shardsink read them (found 2026-11-22T09:00:00.000Z; p/_retention-gaps/shardId-000000000001/4959.json)"
        );
    }

    #[test]
    fn a_start_time_gap_names_the_time() {
        let body = r#"{"shardId":"shardId-000000000001","position":"AT_TIMESTAMP","sequenceNumber":null,"timestamp":"2026-11-20T00:00:00.000Z","firstRetainedSequenceNumber":null,"firstRetainedArrival":null,"shardLeftStream":false,"detectedAt":"2026-11-22T09:00:00.000Z"}"#;
        let gap = RecordedGap {
            key: "p/_retention-gaps/shardId-000000000001/AT_TIMESTAMP.json".to_owned(),
            marker: Ok(serde_json::from_str(body).unwrap()),
        };
        assert_eq!(
            gap_marker_line(&gap),
            "retention gap in shardId-000000000001: records from 2026-11-20T00:00:00.000Z to its end (no record was left) expired from the stream before shardsink read them (found 2026-11-22T09:00:00.000Z; p/_retention-gaps/shardId-000000000001/AT_TIMESTAMP.json)"
        );
        // Markers written before the start time was recorded still read.
        let old = body.replace(r#""timestamp":"2026-11-20T00:00:00.000Z","#, "");
        let marker: GapMarker = serde_json::from_str(&old).unwrap();
        assert_eq!(marker.timestamp, None);
    }
}

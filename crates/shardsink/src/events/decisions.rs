//! A batch's event decisions: one [`UserDecision`] per user record, and the
//! *decisions object* that records them in S3 before anything else of the
//! batch is written —
//! `{prefix}/_events/{time path}/{shardId}/{sorter}-{first}-{last}.events.zst`,
//! zstd-compressed JSON Lines, one line per user record in batch order:
//!
//! ```json
//! {"sequenceNumber":"4959…","approximateArrivalTimestamp":1795238823045,"eventIdHash":"9f…","payloadHash":"41…","outcome":"duplicate","duplicateOf":{"shardId":"shardId-000000000001","sequenceNumber":"4959…"}}
//! ```
//!
//! The object is a pure function of the batch's decisions, so a replay that
//! decides alike writes the same bytes. A replay that finds it adopts it
//! instead of deciding again (docs/DESIGN.md, "Each event once"), and a lost
//! local store is rebuilt from the decisions objects of committed batches.
//!
//! This module writes them; `output::read_back::decisions` reads them back.

use sequence_range::SequenceRange;
use serde::{Deserialize, Serialize};

use super::id::EventIdSource;
use super::rule::{AcceptedCopy, CopyRef, Decision, EventKey};
use crate::output::bucket::Bucket;
use crate::output::key::{KeyLayout, named};
use crate::read::record::UserRecordView;

/// The folder of decisions objects under the prefix.
pub const DECISIONS_FOLDER: &str = "_events";

/// The extension of decisions objects (not `.jsonl…`, so that a query
/// engine's `**/*.jsonl.zst` over the prefix never reads them).
pub const DECISIONS_EXTENSION: &str = ".events.zst";

/// One user record's event decision, as a batch carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserDecision {
    /// Its event key; `None` when it has no id.
    pub key: Option<EventKey>,
    /// What it is.
    pub decision: Decision,
}

/// The settings the decisions of an object were made with, stored as its
/// user metadata `x-amz-meta-shardsink-format`:
/// `events;id=<--event-id>;fingerprint=payload|none`. Keys made with other
/// settings cannot be compared, so a rebuild skips such objects.
pub fn settings_description(source: &EventIdSource, fingerprint: bool) -> String {
    format!(
        "events;id={};fingerprint={}",
        source.as_setting(),
        if fingerprint { "payload" } else { "none" }
    )
}

/// The layout of decisions objects: the main layout's style and time bucket
/// under `{prefix}/_events`.
pub fn decisions_layout(main: &KeyLayout) -> KeyLayout {
    main.with_prefix(format!("{}{DECISIONS_FOLDER}", main.list_prefix()))
}

/// The decisions object's key of the batch `range` of `shard_id` in `bucket`.
pub fn decisions_key(
    layout: &KeyLayout,
    bucket: Bucket,
    shard_id: &str,
    range: &SequenceRange,
) -> String {
    let mut key = layout.shard_bucket_prefix(bucket, shard_id);
    key.push_str(&named(range, DECISIONS_EXTENSION));
    key
}

/// One line of a decisions object, as [`encode_line`] writes it and
/// `output::read_back::decisions` reads it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Line {
    /// The user record's sequence number, decimal.
    pub(crate) sequence_number: String,
    /// Its sub-sequence number (KPL aggregates only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) sub_sequence_number: Option<u64>,
    /// ms since the Unix epoch.
    pub(crate) approximate_arrival_timestamp: i64,
    /// 32 hex digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) event_id_hash: Option<String>,
    /// 16 hex digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) payload_hash: Option<String>,
    /// [`Outcome::as_str`].
    pub(crate) outcome: String,
    /// The accepted copy a duplicate repeats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) duplicate_of: Option<CopyLine>,
}

/// The `duplicateOf` member of a decisions line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CopyLine {
    /// The accepted copy's shard.
    pub(crate) shard_id: String,
    /// Its sequence number, decimal.
    pub(crate) sequence_number: String,
    /// Its sub-sequence number (KPL aggregates only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) sub_sequence_number: Option<u64>,
}

/// Appends one user record's line to a decisions body.
pub fn encode_line(user: &UserRecordView<'_>, decision: &UserDecision, out: &mut Vec<u8>) {
    let line = Line {
        sequence_number: user.sequence_number.to_owned(),
        sub_sequence_number: user.sub_sequence_number,
        approximate_arrival_timestamp: user.arrival_millis,
        event_id_hash: decision.key.map(|key| format!("{:032x}", key.id)),
        payload_hash: decision.key.map(|key| format!("{:016x}", key.fingerprint)),
        outcome: decision.decision.outcome().as_str().to_owned(),
        duplicate_of: match &decision.decision {
            Decision::Duplicate { of } => Some(CopyLine {
                shard_id: of.shard_id.to_string(),
                sequence_number: of.sequence_number.as_str().to_owned(),
                sub_sequence_number: of.sub_sequence_number,
            }),
            Decision::Keep(_) => None,
        },
    };
    // Writing to a Vec cannot fail; every field serializes.
    let _ = serde_json::to_writer(&mut *out, &line);
    out.push(b'\n');
}

/// One user record's decision read back from a decisions object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedDecision {
    /// The user record.
    pub copy: CopyRef,
    /// Its arrival time, ms since the Unix epoch.
    pub arrival_millis: i64,
    /// The decision with its key.
    pub decision: UserDecision,
}

impl RecordedDecision {
    /// The accepted copy it records, if the record was accepted.
    pub fn accepted(&self) -> Option<AcceptedCopy> {
        let key = self
            .decision
            .key
            .filter(|_| self.decision.decision.accepts())?;
        Some(AcceptedCopy {
            fingerprint: key.fingerprint,
            arrival_millis: self.arrival_millis,
            copy: self.copy.clone(),
        })
    }
}

/// Bytes a replay holds for decisions read back from a decisions object
/// (an estimate from the types' sizes and the texts' lengths): the
/// `recorded` decisions, the queue of their [`UserDecision`]s the batch is
/// rebuilt from, and the accepted copies the store is given.
pub fn held_bytes(recorded: &[RecordedDecision]) -> u64 {
    const EACH: usize = std::mem::size_of::<RecordedDecision>()
        + std::mem::size_of::<UserDecision>()
        + std::mem::size_of::<(EventKey, AcceptedCopy)>();
    recorded
        .iter()
        .map(|r| {
            let duplicate_of = match &r.decision.decision {
                Decision::Duplicate { of } => of.sequence_number.as_str().len(),
                Decision::Keep(_) => 0,
            };
            // The record's number in the decision and its accepted copy; the
            // duplicated copy's in the decision and its queued clone.
            EACH + 2 * r.copy.sequence_number.as_str().len() + 2 * duplicate_of
        })
        .sum::<usize>() as u64
}

#[cfg(test)]
mod tests {
    use sequence_range::SequenceNumber;

    use super::*;
    use crate::output::bucket::TimeBucket;
    use crate::output::key::KeyStyle;
    use crate::output::read_back::decisions::parse_decisions_name;

    #[test]
    fn keys_live_beside_the_main_keys_under_the_events_folder() {
        let main = KeyLayout::new("orders", KeyStyle::Hive, TimeBucket::Hour);
        let layout = decisions_layout(&main);
        let range =
            SequenceRange::new(SequenceNumber::from(9u64), SequenceNumber::from(10u64)).unwrap();
        let key = decisions_key(
            &layout,
            main.bucket_of(1_795_238_823_045),
            "shardId-000000000001",
            &range,
        );
        assert!(key.starts_with("orders/_events/year=2026/"), "{key}");
        assert!(key.ends_with(".events.zst"), "{key}");
        let name = key.rsplit('/').next().unwrap();
        assert_eq!(parse_decisions_name(name).unwrap(), range);
        assert!(parse_decisions_name(&name.replace(".events.zst", ".jsonl.zst")).is_err());
        let bare = decisions_layout(&KeyLayout::plain(""));
        assert_eq!(bare.prefix(), "_events");
    }
}

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

use std::sync::Arc;

use sequence_range::{SequenceNumber, SequenceRange};
use serde::{Deserialize, Serialize};

use super::id::EventIdSource;
use super::rule::{AcceptedCopy, CopyRef, Decision, EventKey, Outcome};
use crate::output::bucket::Bucket;
use crate::output::key::{KeyLayout, KeyParseError, named, parse_named};
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

/// The batch range a decisions object's name (last key segment) says.
///
/// # Errors
/// [`KeyParseError`] for a name shardsink does not write.
pub fn parse_decisions_name(name: &str) -> Result<SequenceRange, KeyParseError> {
    parse_named(name, DECISIONS_EXTENSION)
}

/// One line of a decisions object.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Line {
    sequence_number: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sub_sequence_number: Option<u64>,
    /// ms since the Unix epoch.
    approximate_arrival_timestamp: i64,
    /// 32 hex digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    event_id_hash: Option<String>,
    /// 16 hex digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    payload_hash: Option<String>,
    outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    duplicate_of: Option<CopyLine>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CopyLine {
    shard_id: String,
    sequence_number: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sub_sequence_number: Option<u64>,
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

/// Reads a decisions body (uncompressed) of `shard_id`'s batch.
///
/// # Errors
/// A sentence naming the first line that does not parse.
pub fn parse(shard_id: &str, body: &[u8]) -> Result<Vec<RecordedDecision>, String> {
    let shard: Arc<str> = Arc::from(shard_id);
    body.split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .enumerate()
        .map(|(n, line)| parse_line(&shard, n + 1, line))
        .collect()
}

/// Reads the `number`-th line (from 1, empty lines not counted; for the
/// error) of a decisions body of `shard`'s batch, without its newline.
///
/// # Errors
/// A sentence naming the line when it does not parse.
pub fn parse_line(
    shard: &Arc<str>,
    number: usize,
    line: &[u8],
) -> Result<RecordedDecision, String> {
    let n = number;
    let sequence_number = |text: &str| {
        SequenceNumber::parse(text).map_err(|err| format!("sequence number {text:?}: {err}"))
    };
    let line: Line =
        serde_json::from_slice(line).map_err(|err| format!("decisions line {n}: {err}"))?;
    let key = match (&line.event_id_hash, &line.payload_hash) {
        (Some(id), Some(fingerprint)) => Some(EventKey {
            id: u128::from_str_radix(id, 16)
                .map_err(|err| format!("decisions line {n}: eventIdHash: {err}"))?,
            fingerprint: u64::from_str_radix(fingerprint, 16)
                .map_err(|err| format!("decisions line {n}: payloadHash: {err}"))?,
        }),
        _ => None,
    };
    let outcome = Outcome::from_str_label(&line.outcome)
        .ok_or_else(|| format!("decisions line {n}: outcome {:?}", line.outcome))?;
    let decision = match (outcome, line.duplicate_of) {
        (Outcome::Duplicate, Some(of)) => Decision::Duplicate {
            of: CopyRef {
                shard_id: Arc::from(of.shard_id.as_str()),
                sequence_number: sequence_number(&of.sequence_number)?,
                sub_sequence_number: of.sub_sequence_number,
            },
        },
        (Outcome::Duplicate, None) => {
            return Err(format!(
                "decisions line {n}: a duplicate without duplicateOf"
            ));
        }
        (outcome, _) => Decision::Keep(outcome),
    };
    Ok(RecordedDecision {
        copy: CopyRef {
            shard_id: shard.clone(),
            sequence_number: sequence_number(&line.sequence_number)?,
            sub_sequence_number: line.sub_sequence_number,
        },
        arrival_millis: line.approximate_arrival_timestamp,
        decision: UserDecision { key, decision },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::bucket::TimeBucket;
    use crate::output::key::KeyStyle;

    fn view(sub: Option<u64>) -> UserRecordView<'static> {
        UserRecordView {
            shard_id: "shardId-000000000002",
            sequence_number: "49590338271490256608559692538361571095921575989136588898",
            sub_sequence_number: sub,
            partition_key: "pk",
            arrival_millis: 1_795_238_823_045,
            data: b"{}",
        }
    }

    #[test]
    fn lines_read_back_as_written() {
        let key = EventKey {
            id: u128::MAX - 5,
            fingerprint: 17,
        };
        let of = CopyRef {
            shard_id: Arc::from("shardId-000000000001"),
            sequence_number: SequenceNumber::from(12u64),
            sub_sequence_number: Some(3),
        };
        let decisions = [
            (
                view(None),
                UserDecision {
                    key: Some(key),
                    decision: Decision::Keep(Outcome::Expired),
                },
            ),
            (
                view(Some(0)),
                UserDecision {
                    key: Some(key),
                    decision: Decision::Duplicate { of: of.clone() },
                },
            ),
            (
                view(Some(1)),
                UserDecision {
                    key: None,
                    decision: Decision::Keep(Outcome::IdMissing),
                },
            ),
        ];
        let mut body = Vec::new();
        for (user, decision) in &decisions {
            encode_line(user, decision, &mut body);
        }
        let read = parse("shardId-000000000002", &body).unwrap();
        assert_eq!(read.len(), 3);
        for ((user, decision), read) in decisions.iter().zip(&read) {
            assert_eq!(&read.decision, decision);
            assert_eq!(read.copy.sequence_number.as_str(), user.sequence_number);
            assert_eq!(read.copy.sub_sequence_number, user.sub_sequence_number);
            assert_eq!(read.arrival_millis, user.arrival_millis);
        }
        assert_eq!(read[0].accepted().unwrap().fingerprint, 17);
        assert_eq!(read[1].accepted(), None);
        assert_eq!(read[2].accepted(), None);
        assert!(parse("s", b"{\"outcome\":\"duplicate\"}\n").is_err());
    }

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

//! Decisions objects: with event deduplication on, each batch first writes
//! `{prefix}/_events/{time path}/{shardId}/{name}.events.zst`, zstd JSON
//! Lines, one line per user record of the batch in sequence order — its
//! outcome, the hashes of its event id and payload, and for a duplicate the
//! accepted copy it repeats:
//!
//! ```json
//! {"sequenceNumber":"4959…","approximateArrivalTimestamp":1795238823045,"eventIdHash":"9f…","payloadHash":"41…","outcome":"duplicate","duplicateOf":{"shardId":"shardId-000000000001","sequenceNumber":"4959…"}}
//! ```
//!
//! Decoded here independently of the daemon's code; every deviation becomes
//! an [`ArchiveProblem`].

use std::fmt;
use std::str::FromStr;

use chrono::DateTime;
use serde::Deserialize;

use super::decode::{Checker, lines_of};
use super::key::Shape;
use super::{ArchiveProblem, CopyRef, ObjectKey, format_timestamp};
use crate::seq::Seq;

/// The folder of decisions objects under the prefix.
pub const DECISIONS_FOLDER: &str = "_events";

/// What a user record was decided to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    /// The first copy of its event in the window: kept and accepted.
    Unique,
    /// A later copy of an accepted event within the window: written to the
    /// duplicates prefix.
    Duplicate,
    /// A copy of an event accepted longer than the window ago: kept.
    Expired,
    /// The id of an accepted event with another payload: kept.
    IdReused,
    /// No event id: kept, never accepted.
    IdMissing,
}

impl Outcome {
    /// Every outcome.
    pub const ALL: [Self; 5] = [
        Self::Unique,
        Self::Duplicate,
        Self::Expired,
        Self::IdReused,
        Self::IdMissing,
    ];

    /// The text a decisions line (and the `outcome` label of
    /// `shardsink_events_total`) gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unique => "unique",
            Self::Duplicate => "duplicate",
            Self::Expired => "expired",
            Self::IdReused => "id_reused",
            Self::IdMissing => "id_missing",
        }
    }
}

impl FromStr for Outcome {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|o| o.as_str() == text)
            .ok_or_else(|| format!("unknown outcome {text:?}"))
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One line of a decisions object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecisionLine {
    /// 1-based line number in the (decompressed) object.
    pub line: usize,
    /// The user record's sequence number (decimal text).
    pub sequence_number: String,
    /// Its sub-sequence number (KPL user records only).
    pub sub_sequence_number: Option<u64>,
    /// Its `ApproximateArrivalTimestamp`, ms since the Unix epoch.
    pub arrival_millis: i64,
    /// The hash of its event id (32 hex digits); `None` without an id.
    pub event_id_hash: Option<String>,
    /// The hash of its payload (16 hex digits); `None` without an id.
    pub payload_hash: Option<String>,
    /// The decision.
    pub outcome: Outcome,
    /// For a duplicate: the accepted copy it repeats.
    pub duplicate_of: Option<CopyRef>,
}

impl DecisionLine {
    /// The user record, in the shard `shard_id` of its object's key.
    pub fn copy_ref(&self, shard_id: &str) -> CopyRef {
        CopyRef {
            shard_id: shard_id.to_owned(),
            sequence_number: self.sequence_number.clone(),
            sub_sequence_number: self.sub_sequence_number,
        }
    }
}

/// A decisions object, decoded.
#[derive(Clone, Debug)]
pub struct DecisionsObject {
    /// The parsed key (prefix `{prefix}/_events`, shape
    /// [`Shape::Decisions`]).
    pub key: ObjectKey,
    /// The ETag from the listing.
    pub e_tag: Option<String>,
    /// Size in bytes as stored (compressed).
    pub size: usize,
    /// `x-amz-meta-shardsink-format`: the event settings the decisions were
    /// made with, `events;id=…;fingerprint=payload|none`.
    pub settings: Option<String>,
    /// `x-amz-meta-shardsink-main-format`: the format of the batch's main
    /// object.
    pub main_format: Option<String>,
    /// `x-amz-meta-shardsink-records`: the batch's user records.
    pub declared_records: Option<String>,
    /// The lines that could be decoded.
    pub lines: Vec<DecisionLine>,
    /// What is wrong with it.
    pub problems: Vec<ArchiveProblem>,
}

/// A line as stored; field names and presence checked by serde, values
/// here.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StoredLine {
    sequence_number: String,
    #[serde(default)]
    sub_sequence_number: Option<u64>,
    approximate_arrival_timestamp: i64,
    #[serde(default)]
    event_id_hash: Option<String>,
    #[serde(default)]
    payload_hash: Option<String>,
    outcome: String,
    #[serde(default)]
    duplicate_of: Option<StoredCopy>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StoredCopy {
    shard_id: String,
    sequence_number: String,
    #[serde(default)]
    sub_sequence_number: Option<u64>,
}

/// Whether `text` is `digits` lowercase hexadecimal digits.
fn is_hex(text: &str, digits: usize) -> bool {
    text.len() == digits && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Decodes a decisions object's body against its key: zstd JSON Lines;
/// each line's sequence number inside the key's range and after the
/// previous line's, its arrival time in the key's time bucket, hashes of
/// the right length (both or neither, neither exactly for `id_missing`),
/// `duplicateOf` exactly for `duplicate`. The metadata values are checked
/// by the reader.
pub fn decode_decisions(key: &ObjectKey, body: &[u8]) -> (Vec<DecisionLine>, Vec<ArchiveProblem>) {
    let mut checker = Checker::new(key);
    if key.shape != Shape::Decisions {
        checker.problem(
            None,
            format!("a decisions object with the extension {}", key.extension()),
        );
        return (Vec::new(), checker.problems);
    }
    let Some(texts) = lines_of(&mut checker, body) else {
        return (Vec::new(), checker.problems);
    };
    let mut lines = Vec::with_capacity(texts.len());
    for (index, text) in texts.iter().enumerate() {
        let line = index + 1;
        let stored: StoredLine = match serde_json::from_str(text) {
            Ok(stored) => stored,
            Err(error) => {
                checker.problem(Some(line), format!("not a decisions line: {error}"));
                continue;
            }
        };
        let shard_id = key.shard_id.clone();
        checker.identity(
            line,
            &shard_id,
            &stored.sequence_number,
            stored.sub_sequence_number,
        );
        match DateTime::from_timestamp_millis(stored.approximate_arrival_timestamp) {
            Some(arrival) => checker.arrival(line, &format_timestamp(arrival)),
            None => checker.problem(
                Some(line),
                format!(
                    "approximateArrivalTimestamp {} is not a time",
                    stored.approximate_arrival_timestamp
                ),
            ),
        }
        let outcome = match stored.outcome.parse::<Outcome>() {
            Ok(outcome) => outcome,
            Err(message) => {
                checker.problem(Some(line), message);
                continue;
            }
        };
        match (&stored.event_id_hash, &stored.payload_hash) {
            (Some(id), Some(payload)) => {
                if !is_hex(id, 32) || !is_hex(payload, 16) {
                    checker.problem(
                        Some(line),
                        format!("hashes {id:?} and {payload:?} are not 32 and 16 hex digits"),
                    );
                }
                if outcome == Outcome::IdMissing {
                    checker.problem(Some(line), "id_missing with an eventIdHash".to_owned());
                }
            }
            (None, None) => {
                if outcome != Outcome::IdMissing {
                    checker.problem(Some(line), format!("{outcome} without an eventIdHash"));
                }
            }
            _ => checker.problem(
                Some(line),
                "one of eventIdHash and payloadHash without the other".to_owned(),
            ),
        }
        let duplicate_of = match (outcome, stored.duplicate_of) {
            (Outcome::Duplicate, Some(copy)) => {
                if copy.shard_id.is_empty() || Seq::parse(&copy.sequence_number).is_err() {
                    checker.problem(
                        Some(line),
                        format!(
                            "duplicateOf {:?}/{:?} names no record",
                            copy.shard_id, copy.sequence_number
                        ),
                    );
                }
                Some(CopyRef {
                    shard_id: copy.shard_id,
                    sequence_number: copy.sequence_number,
                    sub_sequence_number: copy.sub_sequence_number,
                })
            }
            (Outcome::Duplicate, None) => {
                checker.problem(Some(line), "a duplicate without duplicateOf".to_owned());
                None
            }
            (_, Some(_)) => {
                checker.problem(Some(line), format!("{outcome} with a duplicateOf"));
                None
            }
            (_, None) => None,
        };
        lines.push(DecisionLine {
            line,
            sequence_number: stored.sequence_number,
            sub_sequence_number: stored.sub_sequence_number,
            arrival_millis: stored.approximate_arrival_timestamp,
            event_id_hash: stored.event_id_hash,
            payload_hash: stored.payload_hash,
            outcome,
            duplicate_of,
        });
    }
    let problems = checker.problems;
    (lines, problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::test_support::{minute, seq};
    use crate::archive::{Compression, KeyLayout};

    fn key(first: &str, last: &str) -> ObjectKey {
        let text = ObjectKey::format_in(
            KeyLayout::default(),
            "p/_events",
            minute(),
            "s-1",
            &seq(first),
            &seq(last),
            Shape::Decisions.extension(Compression::Zstd),
        );
        ObjectKey::parse("p/_events", &text).unwrap()
    }

    const ARRIVAL: i64 = 1_795_238_823_045; // 2026-11-21T05:27:03.045Z
    const ID: &str = "0123456789abcdef0123456789abcdef";
    const PAYLOAD: &str = "0123456789abcdef";

    fn body(lines: &[String]) -> Vec<u8> {
        Compression::Zstd
            .compress(lines.concat().as_bytes())
            .unwrap()
    }

    #[test]
    fn decodes_every_outcome() {
        let key = key("9", "11");
        assert_eq!(
            key.key,
            "p/_events/2026/11/21/05/27/s-1/9980-0019-00211.events.zst"
        );
        let lines = [
            format!(
                "{{\"sequenceNumber\":\"9\",\"approximateArrivalTimestamp\":{ARRIVAL},\"eventIdHash\":\"{ID}\",\"payloadHash\":\"{PAYLOAD}\",\"outcome\":\"unique\"}}\n"
            ),
            format!(
                "{{\"sequenceNumber\":\"10\",\"subSequenceNumber\":0,\"approximateArrivalTimestamp\":{ARRIVAL},\"outcome\":\"id_missing\"}}\n"
            ),
            format!(
                "{{\"sequenceNumber\":\"11\",\"approximateArrivalTimestamp\":{ARRIVAL},\"eventIdHash\":\"{ID}\",\"payloadHash\":\"{PAYLOAD}\",\"outcome\":\"duplicate\",\"duplicateOf\":{{\"shardId\":\"s-1\",\"sequenceNumber\":\"9\"}}}}\n"
            ),
        ];
        let (decoded, problems) = decode_decisions(&key, &body(&lines));
        assert!(problems.is_empty(), "{problems:#?}");
        let outcomes: Vec<Outcome> = decoded.iter().map(|l| l.outcome).collect();
        assert_eq!(
            outcomes,
            [Outcome::Unique, Outcome::IdMissing, Outcome::Duplicate]
        );
        assert_eq!(decoded[1].sub_sequence_number, Some(0));
        assert_eq!(
            decoded[2].duplicate_of.as_ref().map(ToString::to_string),
            Some("s-1/9".to_owned())
        );
        assert_eq!(decoded[2].copy_ref("s-1").to_string(), "s-1/11");
    }

    #[test]
    fn reports_what_does_not_hold() {
        let key = key("9", "12");
        let lines = [
            // A duplicate without duplicateOf; out of the key's minute.
            format!(
                "{{\"sequenceNumber\":\"9\",\"approximateArrivalTimestamp\":{},\"eventIdHash\":\"{ID}\",\"payloadHash\":\"{PAYLOAD}\",\"outcome\":\"duplicate\"}}\n",
                ARRIVAL + 60_000
            ),
            // Unique without hashes, and out of order.
            format!(
                "{{\"sequenceNumber\":\"9\",\"approximateArrivalTimestamp\":{ARRIVAL},\"outcome\":\"unique\"}}\n"
            ),
            // A short hash; an unknown field.
            format!(
                "{{\"sequenceNumber\":\"11\",\"approximateArrivalTimestamp\":{ARRIVAL},\"eventIdHash\":\"ab\",\"payloadHash\":\"{PAYLOAD}\",\"outcome\":\"expired\"}}\n"
            ),
            format!(
                "{{\"sequenceNumber\":\"12\",\"approximateArrivalTimestamp\":{ARRIVAL},\"outcome\":\"id_missing\",\"extra\":1}}\n"
            ),
            // An unknown outcome.
            format!(
                "{{\"sequenceNumber\":\"12\",\"approximateArrivalTimestamp\":{ARRIVAL},\"outcome\":\"maybe\"}}\n"
            ),
        ];
        let (decoded, problems) = decode_decisions(&key, &body(&lines));
        let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
        for needle in [
            "a duplicate without duplicateOf",
            "not in the key's minute",
            "unique without an eventIdHash",
            "out of sequence order",
            "are not 32 and 16 hex digits",
            "unknown field `extra`",
            "unknown outcome \"maybe\"",
        ] {
            assert!(
                text.iter().any(|t| t.contains(needle)),
                "{needle}: {text:#?}"
            );
        }
        assert_eq!(decoded.len(), 3);
    }
}

//! [`Row`]: one user record's identity and metadata as a body holds it —
//! what the JSON Lines reader (`lines`) and the Parquet reader (`parquet`)
//! give `verify` of each record.

use std::fmt;

/// Where in a body a record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// The `n`-th line (from 1, empty lines counted) of JSON Lines.
    Line(usize),
    /// The `n`-th row (from 1) of a Parquet file.
    Row(usize),
}

impl fmt::Display for Place {
    /// `line 3`, `row 3`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Line(n) => write!(f, "line {n}"),
            Self::Row(n) => write!(f, "row {n}"),
        }
    }
}

/// One record's identity and metadata, as read from a body; the texts as
/// written, not validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// Where in the body.
    pub at: Place,
    /// `shardId`, when the body names it (not in Parquet identities).
    pub shard_id: Option<String>,
    /// `sequenceNumber`.
    pub sequence_number: String,
    /// `subSequenceNumber`: KPL user records only.
    pub sub_sequence_number: Option<u64>,
    /// `approximateArrivalTimestamp` as written (RFC 3339), when the body
    /// has it as text.
    pub arrival: Option<String>,
    /// `duplicateOf` (duplicates objects): the accepted copy's shard,
    /// sequence number and sub-sequence number.
    pub duplicate_of: Option<(String, String, Option<u64>)>,
}

/// A user record decoded from a body: its identity and metadata, and its
/// payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The shard it was read from.
    pub shard_id: String,
    /// Its Kinesis record's sequence number, decimal text.
    pub sequence_number: String,
    /// Its index in its KPL aggregate; `None` outside KPL.
    pub sub_sequence_number: Option<u64>,
    /// Its partition key.
    pub partition_key: String,
    /// `ApproximateArrivalTimestamp`, ms since the Unix epoch.
    pub arrival_millis: i64,
    /// The payload bytes.
    pub payload: Vec<u8>,
}

/// Why a line of a body does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct DecodeError {
    /// The line's number, from 1.
    pub line: usize,
    /// Why, as a sentence.
    pub reason: String,
}

/// The non-empty lines of an uncompressed JSON Lines body, numbered from
/// 1 (empty lines counted).
pub(super) fn numbered_lines(body: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    body.split(|b| *b == b'\n')
        .enumerate()
        .filter(|(_, line)| !line.is_empty())
        .map(|(index, line)| (index + 1, line))
}

/// `approximateArrivalTimestamp` text (RFC 3339) as ms since the Unix
/// epoch.
///
/// # Errors
/// chrono's reason, as a sentence.
pub(super) fn arrival_millis(text: &str) -> Result<i64, String> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|time| time.timestamp_millis())
        .map_err(|err| format!("approximateArrivalTimestamp {text:?}: {err}"))
}

#[cfg(test)]
pub(crate) mod strategy {
    //! Arbitrary user records, for the round-trip tests of each format.

    use proptest::prelude::*;

    use super::Record;
    use crate::read::record::UserRecordView;

    impl Record {
        /// The record as every encoder sees it.
        pub(crate) fn view(&self) -> UserRecordView<'_> {
            UserRecordView {
                shard_id: &self.shard_id,
                sequence_number: &self.sequence_number,
                sub_sequence_number: self.sub_sequence_number,
                partition_key: &self.partition_key,
                arrival_millis: self.arrival_millis,
                data: &self.payload,
            }
        }
    }

    /// Records of one shard, with payloads from `payload`: sequence numbers
    /// up to 128 digits, sub-sequence numbers or none, any partition key,
    /// arrivals from 1970 to 2100.
    pub(crate) fn records(
        payload: impl Strategy<Value = Vec<u8>> + Clone,
    ) -> impl Strategy<Value = Vec<Record>> {
        let record = (
            "[1-9][0-9]{0,127}",
            prop::option::of(0_u64..100_000),
            "\\PC{0,16}",
            0_i64..4_102_444_800_000,
            payload,
        )
            .prop_map(
                |(sequence_number, sub_sequence_number, partition_key, arrival_millis, payload)| {
                    Record {
                        shard_id: "shardId-000000000007".to_owned(),
                        sequence_number,
                        sub_sequence_number,
                        partition_key,
                        arrival_millis,
                        payload,
                    }
                },
            );
        prop::collection::vec(record, 0..24)
    }
}

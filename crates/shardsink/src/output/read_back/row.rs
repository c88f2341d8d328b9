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

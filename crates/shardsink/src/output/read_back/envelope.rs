//! Envelope lines read back — the lines `output::format::envelope` writes
//! for the `envelope` format, error objects (`errorMessage` after `data`)
//! and duplicates objects (`duplicateOf` after `data`).
//!
//! - [`parse_line`]: one line exactly as shardsink writes it (no other
//!   member), for `verify`;
//! - [`identity`]: the record a line holds, whatever else it holds, for the
//!   check of an object already at a key (an older shardsink may have
//!   encoded the same records in other bytes).

use std::borrow::Cow;

use serde_json::Value;

/// One envelope line as shardsink writes it (`output/format/envelope.rs`).
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnvelopeLine<'a> {
    /// `shardId`.
    #[serde(borrow)]
    pub shard_id: Cow<'a, str>,
    /// `sequenceNumber`, as written (not validated).
    #[serde(borrow)]
    pub sequence_number: Cow<'a, str>,
    /// `subSequenceNumber`: KPL user records only.
    pub sub_sequence_number: Option<u64>,
    /// `partitionKey`.
    #[serde(borrow)]
    #[allow(dead_code)] // read for its type only
    pub partition_key: Cow<'a, str>,
    /// `approximateArrivalTimestamp`: RFC 3339 text, as written (not
    /// validated).
    #[serde(borrow)]
    pub approximate_arrival_timestamp: Cow<'a, str>,
    /// `data`: the payload in standard base64, as written (not decoded).
    #[serde(borrow)]
    pub data: Cow<'a, str>,
    /// `errorMessage`: only in the lines of error objects.
    #[serde(borrow, default)]
    #[allow(dead_code)] // read for its type only
    pub error_message: Option<Cow<'a, str>>,
    /// `duplicateOf`: only in the lines of duplicates objects, the accepted
    /// copy.
    #[serde(borrow, default)]
    pub duplicate_of: Option<DuplicateOf<'a>>,
}

/// The `duplicateOf` member of a duplicates object's line.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DuplicateOf<'a> {
    /// The accepted copy's shard.
    #[serde(borrow)]
    pub shard_id: Cow<'a, str>,
    /// Its sequence number, as written.
    #[serde(borrow)]
    pub sequence_number: Cow<'a, str>,
    /// Its sub-sequence number (KPL user records only).
    pub sub_sequence_number: Option<u64>,
}

/// Reads one line (without its newline) as an envelope line shardsink
/// writes.
///
/// # Errors
/// serde_json's error when it is not JSON, lacks a member, has another or
/// one of another type.
pub fn parse_line(line: &[u8]) -> Result<EnvelopeLine<'_>, serde_json::Error> {
    serde_json::from_slice(line)
}

/// The record an envelope line holds: its `sequenceNumber`,
/// `subSequenceNumber` (null when absent) and `data`, as JSON values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordIdentity {
    sequence_number: Value,
    sub_sequence_number: Value,
    data: Value,
}

/// The record identity of a line: sequence number, sub-sequence number and
/// data, whatever the line's other members and their order; `None` when it
/// is not a JSON object with `sequenceNumber` and `data`.
pub fn identity(line: &[u8]) -> Option<RecordIdentity> {
    let value: Value = serde_json::from_slice(line).ok()?;
    Some(RecordIdentity {
        sequence_number: value.get("sequenceNumber")?.clone(),
        sub_sequence_number: value
            .get("subSequenceNumber")
            .cloned()
            .unwrap_or(Value::Null),
        data: value.get("data")?.clone(),
    })
}

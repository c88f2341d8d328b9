//! Envelope lines read back — the lines `output::format::envelope` writes
//! for the `envelope` format, error objects (`errorMessage` after `data`)
//! and duplicates objects (`duplicateOf` after `data`).
//!
//! - [`parse_line`]: one line exactly as shardsink writes it (no other
//!   member), for `verify`;
//! - [`identity`]: the record a line holds, whatever else it holds, for the
//!   check of an object already at a key (an older shardsink may have
//!   encoded the same records in other bytes);
//! - [`copy_ref`]: the accepted copy a duplicates line names;
//! - [`decode`]: a body's records, payloads decoded — the inverse of the
//!   encoder, checked by a round-trip test.

use std::borrow::Cow;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use sequence_range::SequenceNumber;
use serde_json::Value;

use super::row::{DecodeError, Record, arrival_millis, numbered_lines};
use crate::events::rule::CopyRef;

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
    #[cfg_attr(not(test), allow(dead_code))] // checked for its type; read by the tests
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

/// Decodes an envelope body (uncompressed; main, error or duplicates
/// object): every line's record, its payload decoded from base64 and its
/// arrival time from RFC 3339, in body order. Empty lines are skipped.
///
/// # Errors
/// [`DecodeError`] naming the first line that is not an envelope line.
#[cfg_attr(not(test), allow(dead_code))] // only the round-trip test needs payloads today
pub fn decode(body: &[u8]) -> Result<Vec<Record>, DecodeError> {
    numbered_lines(body)
        .map(|(n, line)| {
            let error = |reason: String| DecodeError { line: n, reason };
            let line = parse_line(line).map_err(|err| error(err.to_string()))?;
            Ok(Record {
                arrival_millis: arrival_millis(&line.approximate_arrival_timestamp)
                    .map_err(error)?,
                payload: STANDARD
                    .decode(line.data.as_bytes())
                    .map_err(|err| error(format!("data is not base64: {err}")))?,
                shard_id: line.shard_id.into_owned(),
                sequence_number: line.sequence_number.into_owned(),
                sub_sequence_number: line.sub_sequence_number,
                partition_key: line.partition_key.into_owned(),
            })
        })
        .collect()
}

/// The accepted copy a duplicates line's `duplicateOf` names (as
/// [`Row::duplicate_of`](super::row::Row::duplicate_of) holds it).
///
/// # Errors
/// A sentence when the sequence number is not one.
pub fn copy_ref(
    (shard_id, sequence_number, sub): &(String, String, Option<u64>),
) -> Result<CopyRef, String> {
    let number = SequenceNumber::parse(sequence_number)
        .map_err(|err| format!("sequenceNumber {sequence_number:?}: {err}"))?;
    Ok(CopyRef {
        shard_id: Arc::from(shard_id.as_str()),
        sequence_number: number,
        sub_sequence_number: *sub,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::events::rule::CopyRef;
    use crate::output::format::envelope::LineEncoder;
    use crate::output::read_back::row::strategy::records;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Main, error and duplicate lines decode to the records encoded,
        /// and every line's identity is its own.
        #[test]
        fn envelope_lines_decode_to_the_records_encoded(
            records in records(prop::collection::vec(any::<u8>(), 0..64)),
            message in "\\PC{0,16}",
        ) {
            let shard = "shardId-000000000007";
            let mut encoder = LineEncoder::new(shard);
            let (mut main, mut errors, mut duplicates) = (Vec::new(), Vec::new(), Vec::new());
            let of = CopyRef {
                shard_id: std::sync::Arc::from("shardId-000000000001"),
                sequence_number: sequence_range::SequenceNumber::from(7u64),
                sub_sequence_number: Some(2),
            };
            for record in &records {
                encoder.encode_line(&record.view(), &mut main);
                encoder.encode_error(&record.view(), &message, &mut errors);
                encoder.encode_duplicate(&record.view(), &of, &mut duplicates);
            }
            prop_assert_eq!(&decode(&main).unwrap(), &records);
            prop_assert_eq!(&decode(&errors).unwrap(), &records);
            prop_assert_eq!(&decode(&duplicates).unwrap(), &records);
            for (line, error_line) in main.split_inclusive(|b| *b == b'\n').zip(errors.split_inclusive(|b| *b == b'\n')) {
                prop_assert_eq!(identity(line), identity(error_line));
                let parsed = parse_line(error_line.strip_suffix(b"\n").unwrap()).unwrap();
                prop_assert_eq!(parsed.error_message.as_deref(), Some(message.as_str()));
            }
        }
    }
}

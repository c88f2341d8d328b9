//! `json` lines read back — the lines `output::format::json` writes: the
//! payload (one JSON object) with the record's metadata under one member.
//!
//! - [`metadata_of`]: the metadata member of a line, found by its shape
//!   (whatever `--metadata-field` named it), for `verify`;
//! - [`decode`]: a body's payloads and metadata under a known metadata
//!   field — the inverse of the encoder, checked by a round-trip test.

use serde_json::{Map, Value};

use super::row::{DecodeError, numbered_lines};

/// The metadata member of a `json` line: the envelope's fields without
/// `data` (`output/format/envelope.rs`, `encode_metadata`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Metadata {
    /// `shardId`.
    pub shard_id: String,
    /// `sequenceNumber`, as written (not validated).
    pub sequence_number: String,
    /// `subSequenceNumber`: KPL user records only.
    pub sub_sequence_number: Option<u64>,
    /// `partitionKey`.
    pub partition_key: String,
    /// `approximateArrivalTimestamp`: RFC 3339 text, as written.
    pub approximate_arrival_timestamp: String,
}

/// The first member of `line` (a `json` line read as an object) that is a
/// metadata object; `None` for a line written without metadata.
pub fn metadata_of(line: &Map<String, Value>) -> Option<Metadata> {
    line.values()
        .find_map(|value| serde_json::from_value::<Metadata>(value.clone()).ok())
}

/// One `json` line decoded: the payload's members and the record's
/// metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonRecord {
    /// The payload: the line's members but the metadata field.
    pub payload: Map<String, Value>,
    /// The metadata member, when the lines have one.
    pub metadata: Option<Metadata>,
}

/// Decodes a `json` body (uncompressed) written with `metadata_field`
/// (`--metadata-field`; `None`: without metadata), in body order. Empty
/// lines are skipped.
///
/// # Errors
/// [`DecodeError`] naming the first line that is not a JSON object, or
/// lacks its metadata member, or whose member is not a metadata object.
#[cfg_attr(not(test), allow(dead_code))] // only the round-trip test needs payloads today
pub fn decode(body: &[u8], metadata_field: Option<&str>) -> Result<Vec<JsonRecord>, DecodeError> {
    numbered_lines(body)
        .map(|(n, line)| {
            let error = |reason: String| DecodeError { line: n, reason };
            let mut payload: Map<String, Value> =
                serde_json::from_slice(line).map_err(|err| error(err.to_string()))?;
            let metadata = match metadata_field {
                None => None,
                Some(field) => {
                    let member = payload
                        .remove(field)
                        .ok_or_else(|| error(format!("no {field:?} member")))?;
                    Some(
                        serde_json::from_value(member)
                            .map_err(|err| error(format!("{field:?}: {err}")))?,
                    )
                }
            };
            Ok(JsonRecord { payload, metadata })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::output::format::envelope::LineEncoder;
    use crate::output::format::json::encode_line;
    use crate::output::read_back::row::arrival_millis;
    use crate::output::read_back::row::strategy::records;

    /// A JSON object's text, members from a few names and kinds of value.
    fn object() -> impl Strategy<Value = Vec<u8>> + Clone {
        let value = prop_oneof![
            any::<i64>().prop_map(Value::from),
            any::<bool>().prop_map(Value::from),
            "\\PC{0,12}".prop_map(Value::from),
            Just(Value::Null),
            prop::collection::vec(any::<i32>().prop_map(Value::from), 0..3).prop_map(Value::from),
        ];
        prop::collection::btree_map("[a-z_]{1,6}", value, 0..5).prop_map(|members| {
            let object: Map<String, Value> = members.into_iter().collect();
            serde_json::to_vec(&Value::Object(object)).unwrap()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Lines decode to the payloads encoded and, with a metadata field,
        /// to each record's identity and metadata.
        #[test]
        fn json_lines_decode_to_the_records_encoded(
            records in records(object()),
            with_metadata in any::<bool>(),
        ) {
            let field = with_metadata.then_some("_kinesis");
            let mut envelope = LineEncoder::new("shardId-000000000007");
            let mut body = Vec::new();
            let mut written = Vec::new();
            for record in &records {
                // A payload with the metadata field's name is rejected.
                if encode_line(&mut envelope, field, &record.view(), &mut body).is_ok() {
                    written.push(record);
                }
            }
            let decoded = decode(&body, field).unwrap();
            prop_assert_eq!(decoded.len(), written.len());
            for (decoded, record) in decoded.iter().zip(written) {
                let payload: Map<String, Value> = serde_json::from_slice(&record.payload).unwrap();
                prop_assert_eq!(&decoded.payload, &payload);
                match &decoded.metadata {
                    None => prop_assert!(field.is_none()),
                    Some(metadata) => {
                        prop_assert_eq!(&metadata.shard_id, &record.shard_id);
                        prop_assert_eq!(&metadata.sequence_number, &record.sequence_number);
                        prop_assert_eq!(metadata.sub_sequence_number, record.sub_sequence_number);
                        prop_assert_eq!(&metadata.partition_key, &record.partition_key);
                        prop_assert_eq!(
                            arrival_millis(&metadata.approximate_arrival_timestamp).unwrap(),
                            record.arrival_millis
                        );
                    }
                }
            }
        }
    }
}

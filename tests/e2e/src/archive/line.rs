//! One JSON line of an object: the reference encoder ([`encode_line`]) and
//! the strict field-order-keeping parse the decoder checks lines with.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::Deserialize;
use serde::de::{self, IgnoredAny, MapAccess, Visitor};

/// One JSON line exactly as the contract prescribes it (fields in order,
/// `subSequenceNumber` only when given, data in standard padded base64),
/// with the trailing newline: a reference implementation of the output
/// format, for harness self-tests and for planting objects.
pub fn encode_line(
    shard_id: &str,
    sequence_number: &str,
    sub_sequence_number: Option<u64>,
    partition_key: &str,
    approximate_arrival_timestamp: &str,
    data: &[u8],
) -> String {
    let json = |s: &str| serde_json::to_string(s).expect("a string always serializes");
    let sub = sub_sequence_number
        .map(|n| format!(",\"subSequenceNumber\":{n}"))
        .unwrap_or_default();
    format!(
        "{{\"shardId\":{},\"sequenceNumber\":{}{sub},\"partitionKey\":{},\"approximateArrivalTimestamp\":{},\"data\":{}}}\n",
        json(shard_id),
        json(sequence_number),
        json(partition_key),
        json(approximate_arrival_timestamp),
        json(&BASE64.encode(data)),
    )
}

/// A duplicate's line as the contract prescribes it: [`encode_line`]'s
/// fields, then `duplicateOf` naming the accepted copy
/// (`{"shardId":…,"sequenceNumber":…[,"subSequenceNumber":…]}`), for
/// harness self-tests.
pub fn encode_duplicate_line(
    line: &str,
    of_shard_id: &str,
    of_sequence_number: &str,
    of_sub_sequence_number: Option<u64>,
) -> String {
    let json = |s: &str| serde_json::to_string(s).expect("a string always serializes");
    let sub = of_sub_sequence_number
        .map(|n| format!(",\"subSequenceNumber\":{n}"))
        .unwrap_or_default();
    let open = line
        .trim_end()
        .strip_suffix('}')
        .expect("encode_line writes an object");
    format!(
        "{open},\"duplicateOf\":{{\"shardId\":{},\"sequenceNumber\":{}{sub}}}}}\n",
        json(of_shard_id),
        json(of_sequence_number),
    )
}

/// The `json` format's metadata object: [`encode_line`]'s fields without
/// `data` (for harness self-tests).
pub fn encode_metadata(
    shard_id: &str,
    sequence_number: &str,
    sub_sequence_number: Option<u64>,
    partition_key: &str,
    approximate_arrival_timestamp: &str,
) -> String {
    let line = encode_line(
        shard_id,
        sequence_number,
        sub_sequence_number,
        partition_key,
        approximate_arrival_timestamp,
        b"",
    );
    let end = line
        .rfind(",\"data\":")
        .expect("encode_line writes data last");
    format!("{}}}", &line[..end])
}

/// The fields of a line without `subSequenceNumber`, in order.
pub(super) const FIELDS: [&str; 5] = [
    "shardId",
    "sequenceNumber",
    "partitionKey",
    "approximateArrivalTimestamp",
    "data",
];
/// The fields of a KPL user record's line, in order.
pub(super) const FIELDS_WITH_SUB_SEQUENCE: [&str; 6] = [
    "shardId",
    "sequenceNumber",
    "subSequenceNumber",
    "partitionKey",
    "approximateArrivalTimestamp",
    "data",
];

/// One JSON line with its field order kept (serde_json's map is sorted).
#[derive(Default)]
pub(super) struct RawLine {
    pub(super) order: Vec<String>,
    pub(super) unknown: Vec<String>,
    pub(super) shard_id: Option<String>,
    pub(super) sequence_number: Option<String>,
    pub(super) sub_sequence_number: Option<u64>,
    pub(super) partition_key: Option<String>,
    pub(super) approximate_arrival_timestamp: Option<String>,
    pub(super) data: Option<String>,
    pub(super) error_message: Option<String>,
    pub(super) duplicate_of: Option<RawCopy>,
}

/// The fields of a `duplicateOf` object, in order (`subSequenceNumber`
/// only for a KPL user record).
pub(super) const COPY_FIELDS: [&str; 3] = ["shardId", "sequenceNumber", "subSequenceNumber"];

/// A `duplicateOf` object with its field order kept.
#[derive(Default)]
pub(super) struct RawCopy {
    pub(super) order: Vec<String>,
    pub(super) shard_id: Option<String>,
    pub(super) sequence_number: Option<String>,
    pub(super) sub_sequence_number: Option<u64>,
}

impl<'de> Deserialize<'de> for RawCopy {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(RawCopyVisitor)
    }
}

struct RawCopyVisitor;

impl<'de> Visitor<'de> for RawCopyVisitor {
    type Value = RawCopy;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duplicateOf object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawCopy, A::Error> {
        let mut copy = RawCopy::default();
        while let Some(name) = map.next_key::<String>()? {
            if copy.order.contains(&name) {
                return Err(de::Error::custom(format!(
                    "duplicate field {name:?} in duplicateOf"
                )));
            }
            match name.as_str() {
                "shardId" => copy.shard_id = Some(map.next_value()?),
                "sequenceNumber" => copy.sequence_number = Some(map.next_value()?),
                "subSequenceNumber" => copy.sub_sequence_number = Some(map.next_value()?),
                _ => {
                    return Err(de::Error::custom(format!(
                        "unexpected field {name:?} in duplicateOf"
                    )));
                }
            }
            copy.order.push(name);
        }
        Ok(copy)
    }
}

impl<'de> Deserialize<'de> for RawLine {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(RawLineVisitor)
    }
}

struct RawLineVisitor;

impl<'de> Visitor<'de> for RawLineVisitor {
    type Value = RawLine;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawLine, A::Error> {
        let mut line = RawLine::default();
        while let Some(name) = map.next_key::<String>()? {
            if line.order.contains(&name) {
                return Err(de::Error::custom(format!("duplicate field {name:?}")));
            }
            match name.as_str() {
                "shardId" => line.shard_id = Some(map.next_value()?),
                "sequenceNumber" => line.sequence_number = Some(map.next_value()?),
                "subSequenceNumber" => line.sub_sequence_number = Some(map.next_value()?),
                "partitionKey" => line.partition_key = Some(map.next_value()?),
                "approximateArrivalTimestamp" => {
                    line.approximate_arrival_timestamp = Some(map.next_value()?);
                }
                "data" => line.data = Some(map.next_value()?),
                "errorMessage" => line.error_message = Some(map.next_value()?),
                "duplicateOf" => line.duplicate_of = Some(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    line.unknown.push(name.clone());
                }
            }
            line.order.push(name);
        }
        Ok(line)
    }
}

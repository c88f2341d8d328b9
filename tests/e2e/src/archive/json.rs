//! Decoding a `json` object: each line is a payload (a JSON object) with
//! the Kinesis metadata appended as its last member, under the metadata
//! field. The record's identity comes from that member; its payload is the
//! line without it.

use std::sync::Arc;

use serde_json::Value;

use super::decode::{Checker, lines_of};
use super::line::{FIELDS, FIELDS_WITH_SUB_SEQUENCE, RawLine};
use super::{ArchiveProblem, ArchivedRecord, ObjectKey, PayloadForm};

/// Decodes a `json` object's body against its key. Every line must be one
/// JSON object whose last member is `"{metadata_field}":{…}`, the metadata
/// holding the envelope's fields without `data`, in order; the record's
/// [`ArchivedRecord::data`] is the line's text without that member
/// ([`PayloadForm::JsonText`]), which must itself be a JSON object. The
/// [`Checker`]'s checks apply to every line.
pub fn decode_json(
    key: &ObjectKey,
    body: &[u8],
    metadata_field: &str,
) -> (Vec<ArchivedRecord>, Vec<ArchiveProblem>) {
    let mut checker = Checker::new(key);
    let Some(lines) = lines_of(&mut checker, body) else {
        return (Vec::new(), checker.problems);
    };
    let member = format!(
        "{}:{{\"shardId\":",
        serde_json::to_string(metadata_field).expect("a string always serializes")
    );
    let mut records = Vec::with_capacity(lines.len());
    for (index, text) in lines.iter().enumerate() {
        let line = index + 1;
        if text.contains('\r') {
            checker.problem(Some(line), "a raw carriage return in the line".to_owned());
        }
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(_)) => {}
            Ok(_) => checker.problem(Some(line), "the line is not a JSON object".to_owned()),
            Err(error) => checker.problem(Some(line), format!("the line is not JSON: {error}")),
        }
        // The metadata is the last member; its strings are escaped, so the
        // member's opening cannot occur inside it.
        let Some(at) = text.rfind(&member) else {
            checker.problem(
                Some(line),
                format!("no metadata member {metadata_field:?} at the end of the line"),
            );
            continue;
        };
        let metadata_start = at + member.len() - "{\"shardId\":".len();
        let Some(metadata) = text[metadata_start..].strip_suffix('}') else {
            checker.problem(Some(line), "the line does not end in '}'".to_owned());
            continue;
        };
        let before = &text[..at];
        let payload = match before.strip_suffix(',') {
            Some(members) => format!("{members}}}"),
            None => format!("{before}}}"),
        };
        match serde_json::from_str::<Value>(&payload) {
            Ok(Value::Object(_)) => {}
            _ => checker.problem(
                Some(line),
                format!("the line without its metadata member is not a JSON object: {payload:?}"),
            ),
        }
        let raw: RawLine = match serde_json::from_str(metadata) {
            Ok(raw) => raw,
            Err(error) => {
                checker.problem(
                    Some(line),
                    format!("the metadata is not a JSON object of the expected shape: {error}"),
                );
                continue;
            }
        };
        let fields: &[&str] = if raw.sub_sequence_number.is_some() {
            &FIELDS_WITH_SUB_SEQUENCE[..5]
        } else {
            &FIELDS[..4]
        };
        if raw.order != fields {
            checker.problem(
                Some(line),
                format!("metadata fields are {:?}, expected {fields:?}", raw.order),
            );
        }
        let (Some(shard_id), Some(sequence_number)) = (raw.shard_id, raw.sequence_number) else {
            checker.problem(
                Some(line),
                "metadata shardId or sequenceNumber missing".to_owned(),
            );
            continue;
        };
        checker.identity(line, &shard_id, &sequence_number, raw.sub_sequence_number);
        let partition_key = raw.partition_key.unwrap_or_else(|| {
            checker.problem(Some(line), "metadata partitionKey missing".to_owned());
            String::new()
        });
        let approximate_arrival_timestamp =
            raw.approximate_arrival_timestamp.unwrap_or_else(|| {
                checker.problem(
                    Some(line),
                    "metadata approximateArrivalTimestamp missing".to_owned(),
                );
                String::new()
            });
        if !approximate_arrival_timestamp.is_empty() {
            checker.arrival(line, &approximate_arrival_timestamp);
        }
        for unknown in raw.unknown.iter().chain(
            [
                raw.data.as_ref().map(|_| "data".to_owned()),
                raw.error_message
                    .as_ref()
                    .map(|_| "errorMessage".to_owned()),
                raw.duplicate_of.as_ref().map(|_| "duplicateOf".to_owned()),
            ]
            .iter()
            .flatten(),
        ) {
            checker.problem(Some(line), format!("unexpected metadata field {unknown:?}"));
        }
        records.push(ArchivedRecord {
            object_key: Arc::clone(&checker.object_key),
            line,
            shard_id,
            sequence_number,
            sub_sequence_number: raw.sub_sequence_number,
            partition_key,
            approximate_arrival_timestamp,
            data: payload.into_bytes(),
            payload: PayloadForm::JsonText,
            error_message: None,
            duplicate_of: None,
        });
    }
    (records, checker.problems)
}

/// The text a `json` line keeps of a payload: without the whitespace
/// around it, its raw line breaks (`\n`, `\r`) made spaces.
pub fn kept_text(payload: &[u8]) -> Vec<u8> {
    let start = payload
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        .unwrap_or(payload.len());
    let end = payload
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        .map_or(start, |i| i + 1);
    payload[start..end]
        .iter()
        .map(|&b| if matches!(b, b'\n' | b'\r') { b' ' } else { b })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::line::encode_metadata;
    use crate::archive::test_support::key_of_s1;
    use crate::archive::{Compression, key::Shape};

    fn json_key(first: &str, last: &str) -> ObjectKey {
        let key = key_of_s1(first, last, Compression::None);
        assert_eq!(key.shape, Shape::Lines);
        key
    }

    #[test]
    fn decodes_payloads_and_their_metadata() {
        let key = json_key("9", "11");
        let ts = "2026-11-21T05:27:03.123Z";
        let body = format!(
            "{{\"a\":1,\"_kinesis\":{}}}\n{{ \"_kinesis\":{}}}\n{{\"x\":{{\"_kinesis\":{{\"shardId\":1}}}} ,\"_kinesis\":{}}}\n",
            encode_metadata("s-1", "9", None, "k\"\n", ts),
            encode_metadata("s-1", "10", Some(0), "k", ts),
            encode_metadata("s-1", "11", None, "k", ts),
        );
        let (records, problems) = decode_json(&key, body.as_bytes(), "_kinesis");
        assert!(problems.is_empty(), "{problems:#?}");
        let payloads: Vec<&str> = records
            .iter()
            .map(|r| std::str::from_utf8(&r.data).unwrap())
            .collect();
        assert_eq!(
            payloads,
            [
                "{\"a\":1}",
                "{ }",
                "{\"x\":{\"_kinesis\":{\"shardId\":1}} }"
            ]
        );
        assert_eq!(records[0].partition_key, "k\"\n");
        assert_eq!(records[1].sub_sequence_number, Some(0));
        assert!(records.iter().all(|r| r.payload == PayloadForm::JsonText));
    }

    #[test]
    fn reports_lines_without_metadata() {
        let key = json_key("9", "9");
        let ts = "2026-11-21T05:28:03.123Z";
        let body = format!(
            "{{\"a\":1}}\n[1,{{\"_kinesis\":{}}}]\n{{\"_kinesis\":{}}}\n",
            encode_metadata("s-1", "9", None, "k", ts),
            encode_metadata("s-2", "9", None, "k", ts).replace("\"partitionKey\"", "\"pk\""),
        );
        let (_, problems) = decode_json(&key, body.as_bytes(), "_kinesis");
        let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
        let has = |needle: &str| text.iter().any(|t| t.contains(needle));
        assert!(has("no metadata member"), "{text:#?}");
        assert!(has("the line is not a JSON object"), "{text:#?}");
        assert!(has("not in the key's minute"), "{text:#?}");
        assert!(has("shardId \"s-2\""), "{text:#?}");
        assert!(has("metadata fields are"), "{text:#?}");
    }

    #[test]
    fn kept_text_trims_and_flattens() {
        assert_eq!(kept_text(b" \r\n{\"a\":\n1}\t\n"), b"{\"a\": 1}");
        assert_eq!(kept_text(b"  "), b"");
    }
}

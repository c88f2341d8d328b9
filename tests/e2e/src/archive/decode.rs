//! Decoding one object's body against its key, line by line; every
//! deviation from the format becomes an [`ArchiveProblem`].

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use super::line::{FIELDS, FIELDS_WITH_SUB_SEQUENCE, RawLine};
use super::{ArchiveProblem, ArchivedRecord, ObjectKey, parse_timestamp, truncate_to_minute};
use crate::seq::Seq;

/// Decodes one object's body against its key: decompression, JSON Lines,
/// field order and types, timestamp and base64 format, and every line's
/// shard, sequence number and arrival minute against the key; lines in
/// strictly increasing (sequence number, sub-sequence number) order; the
/// first and last lines carrying the key's first and last.
pub fn decode_object(key: &ObjectKey, body: &[u8]) -> (Vec<ArchivedRecord>, Vec<ArchiveProblem>) {
    let object_key: Arc<str> = Arc::from(key.key.as_str());
    let mut problems = Vec::new();
    let mut problem = |line: Option<usize>, message: String| {
        problems.push(ArchiveProblem {
            object_key: key.key.clone(),
            line,
            message,
        });
    };
    let text = match key.compression.decompress(body) {
        Ok(text) => text,
        Err(message) => {
            problem(None, message);
            return (Vec::new(), problems);
        }
    };
    let text = match String::from_utf8(text) {
        Ok(text) => text,
        Err(_) => {
            problem(None, "body is not UTF-8".to_owned());
            return (Vec::new(), problems);
        }
    };
    let mut lines: Vec<&str> = text.split('\n').collect();
    if lines.last() == Some(&"") {
        lines.pop();
    }
    if lines.is_empty() {
        problem(None, "object has no lines".to_owned());
    }

    let mut records: Vec<ArchivedRecord> = Vec::with_capacity(lines.len());
    let mut previous: Option<(Seq, Option<u64>)> = None;
    for (index, line_text) in lines.iter().enumerate() {
        let line = index + 1;
        if line_text.is_empty() {
            problem(Some(line), "empty line".to_owned());
            continue;
        }
        let raw: RawLine = match serde_json::from_str(line_text) {
            Ok(raw) => raw,
            Err(error) => {
                problem(
                    Some(line),
                    format!("not a JSON object of the expected shape: {error}"),
                );
                continue;
            }
        };
        let expected_order: &[&str] = if raw.sub_sequence_number.is_some() {
            &FIELDS_WITH_SUB_SEQUENCE
        } else {
            &FIELDS
        };
        if raw.order != expected_order {
            problem(
                Some(line),
                format!("fields are {:?}, expected {expected_order:?}", raw.order),
            );
        }
        let (Some(shard_id), Some(sequence_number)) = (raw.shard_id, raw.sequence_number) else {
            problem(Some(line), "shardId or sequenceNumber missing".to_owned());
            continue;
        };
        if shard_id != key.shard_id {
            problem(
                Some(line),
                format!(
                    "shardId {shard_id:?} but the key's shard is {:?}",
                    key.shard_id
                ),
            );
        }
        match Seq::parse(&sequence_number) {
            Ok(seq) => {
                if seq < key.first || seq > key.last {
                    problem(
                        Some(line),
                        format!(
                            "sequenceNumber {seq} outside the key's range [{}, {}]",
                            key.first, key.last
                        ),
                    );
                }
                if index == 0 && seq != key.first {
                    problem(
                        Some(line),
                        format!(
                            "first line has sequenceNumber {seq}, the key says first {}",
                            key.first
                        ),
                    );
                }
                if index + 1 == lines.len() && seq != key.last {
                    problem(
                        Some(line),
                        format!(
                            "last line has sequenceNumber {seq}, the key says last {}",
                            key.last
                        ),
                    );
                }
                let current = (seq, raw.sub_sequence_number);
                if let Some(prev) = &previous
                    && !is_after(prev, &current)
                {
                    problem(
                        Some(line),
                        format!(
                            "({}, {:?}) does not follow ({}, {:?}): lines out of sequence order",
                            current.0, current.1, prev.0, prev.1
                        ),
                    );
                }
                previous = Some(current);
            }
            Err(message) => problem(Some(line), format!("sequenceNumber: {message}")),
        }
        let partition_key = raw.partition_key.unwrap_or_else(|| {
            problem(Some(line), "partitionKey missing".to_owned());
            String::new()
        });
        let approximate_arrival_timestamp =
            raw.approximate_arrival_timestamp.unwrap_or_else(|| {
                problem(Some(line), "approximateArrivalTimestamp missing".to_owned());
                String::new()
            });
        if !approximate_arrival_timestamp.is_empty() {
            match parse_timestamp(&approximate_arrival_timestamp) {
                Ok(arrival) => {
                    if truncate_to_minute(arrival) != key.minute {
                        problem(
                            Some(line),
                            format!(
                                "arrival {approximate_arrival_timestamp} is not in the key's minute {}",
                                key.minute.format("%Y-%m-%dT%H:%M")
                            ),
                        );
                    }
                }
                Err(message) => problem(Some(line), message),
            }
        }
        let data = match raw.data.as_deref().map(|d| BASE64.decode(d)) {
            Some(Ok(data)) => data,
            Some(Err(error)) => {
                problem(
                    Some(line),
                    format!("data is not standard padded base64: {error}"),
                );
                Vec::new()
            }
            None => {
                problem(Some(line), "data missing".to_owned());
                Vec::new()
            }
        };
        for unknown in &raw.unknown {
            problem(Some(line), format!("unexpected field {unknown:?}"));
        }
        records.push(ArchivedRecord {
            object_key: Arc::clone(&object_key),
            line,
            shard_id,
            sequence_number,
            sub_sequence_number: raw.sub_sequence_number,
            partition_key,
            approximate_arrival_timestamp,
            data,
        });
    }
    (records, problems)
}

fn is_after(previous: &(Seq, Option<u64>), current: &(Seq, Option<u64>)) -> bool {
    match current.0.cmp(&previous.0) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Less => false,
        // Same Kinesis record: only user records of one aggregate, in order.
        std::cmp::Ordering::Equal => matches!(
            (previous.1, current.1),
            (Some(a), Some(b)) if b > a
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::test_support::key_of_s1;
    use crate::archive::{Compression, encode_line};

    fn line(shard: &str, seq: &str, sub: Option<u64>, pk: &str, ts: &str, data: &[u8]) -> String {
        encode_line(shard, seq, sub, pk, ts, data)
    }

    #[test]
    fn decodes_a_good_object() {
        let key = key_of_s1("9", "10", Compression::Gzip);
        let body = [
            line(
                "s-1",
                "9",
                None,
                "a\n\"b\"",
                "2026-11-21T05:27:03.123Z",
                b"",
            ),
            line(
                "s-1",
                "10",
                Some(0),
                "k",
                "2026-11-21T05:27:59.999Z",
                &[0, 255],
            ),
            line("s-1", "10", Some(1), "k", "2026-11-21T05:27:59.999Z", b"x"),
        ]
        .concat();
        let (records, problems) =
            decode_object(&key, &Compression::Gzip.compress(body.as_bytes()).unwrap());
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(records.len(), 3);
        assert_eq!(records[0].partition_key, "a\n\"b\"");
        assert_eq!(records[1].data, [0, 255]);
        assert_eq!(records[2].sub_sequence_number, Some(1));
    }

    #[test]
    fn reports_every_kind_of_problem() {
        let key = key_of_s1("9", "12", Compression::None);
        let body = [
            // Wrong shard, wrong minute.
            line("s-2", "9", None, "k", "2026-11-21T05:28:00.000Z", b"a"),
            // Field order.
            "{\"sequenceNumber\":\"10\",\"shardId\":\"s-1\",\"partitionKey\":\"k\",\"approximateArrivalTimestamp\":\"2026-11-21T05:27:00.000Z\",\"data\":\"YQ==\"}\n".to_owned(),
            // Timestamp without milliseconds, unpadded base64.
            "{\"shardId\":\"s-1\",\"sequenceNumber\":\"11\",\"partitionKey\":\"k\",\"approximateArrivalTimestamp\":\"2026-11-21T05:27:00Z\",\"data\":\"YQ\"}\n".to_owned(),
            // Out of order and outside the range (last must be 12).
            line("s-1", "13", None, "k", "2026-11-21T05:27:00.000Z", b"a"),
            "not json\n".to_owned(),
        ]
        .concat();
        let (records, problems) = decode_object(&key, body.as_bytes());
        let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
        let has = |needle: &str| text.iter().any(|t| t.contains(needle));
        assert!(has("shardId \"s-2\""), "{text:#?}");
        assert!(has("not in the key's minute"), "{text:#?}");
        assert!(has("fields are"), "{text:#?}");
        assert!(has("YYYY-MM-DDTHH:MM:SS.mmmZ"), "{text:#?}");
        assert!(has("base64"), "{text:#?}");
        assert!(has("outside the key's range"), "{text:#?}");
        assert!(has("not a JSON object"), "{text:#?}");
        assert_eq!(records.len(), 4);
    }
}

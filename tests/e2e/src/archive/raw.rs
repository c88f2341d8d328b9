//! Decoding a `raw` object: payloads, each followed by the delimiter, with
//! no identity inside. The pieces take the identities of the stream's
//! records of the key's shard from the key's first to its last sequence
//! number, in order — the stream read back is the ground truth.

use std::sync::Arc;

use super::decode::Checker;
use super::{ArchiveProblem, ArchivedRecord, ObjectKey, PayloadForm};
use crate::stream::StreamRecord;

/// Decodes a `raw` object's body against its key and `in_range`, the
/// stream's records of the key's shard within the key's range, in order.
///
/// The decompressed body is split after each `delimiter` (it must end with
/// one unless empty); with an empty delimiter it is cut into the lengths of
/// `in_range`'s payloads. There must be exactly as many pieces as records
/// in range; piece *i* gets record *i*'s shard, sequence number, partition
/// key and arrival time (whose time bucket must be the key's), and keeps
/// its own bytes as the payload, which the exactly-once check compares
/// with what was produced. KPL aggregates are not split: a raw archive of
/// aggregated records shows up as a count mismatch.
pub fn decode_raw(
    key: &ObjectKey,
    body: &[u8],
    delimiter: &[u8],
    in_range: &[&StreamRecord],
) -> (Vec<ArchivedRecord>, Vec<ArchiveProblem>) {
    let mut checker = Checker::new(key);
    let body = match key.compression.decompress(body) {
        Ok(body) => body,
        Err(message) => {
            checker.problem(None, message);
            return (Vec::new(), checker.problems);
        }
    };
    let pieces: Vec<&[u8]> = if delimiter.is_empty() {
        let mut pieces = Vec::with_capacity(in_range.len());
        let mut rest = &body[..];
        for record in in_range {
            if rest.len() < record.data.len() {
                break;
            }
            let (piece, tail) = rest.split_at(record.data.len());
            pieces.push(piece);
            rest = tail;
        }
        if !rest.is_empty() || pieces.len() < in_range.len() {
            checker.problem(
                None,
                format!(
                    "the body ({} bytes) is not the {} payloads of the stream's records in range",
                    body.len(),
                    in_range.len()
                ),
            );
        }
        pieces
    } else {
        split_after(&body, delimiter).unwrap_or_else(|pieces| {
            checker.problem(
                None,
                "the body does not end with the record delimiter".to_owned(),
            );
            pieces
        })
    };
    if pieces.len() != in_range.len() {
        checker.problem(
            None,
            format!(
                "{} payloads, but the stream holds {} records of {} in [{}, {}]",
                pieces.len(),
                in_range.len(),
                key.shard_id,
                key.first,
                key.last
            ),
        );
    }
    let mut records = Vec::with_capacity(pieces.len());
    for (index, (piece, truth)) in pieces.iter().zip(in_range).enumerate() {
        let line = index + 1;
        checker.identity(line, &truth.shard_id, &truth.sequence_number, None);
        let arrival = truth.arrival_text();
        checker.arrival(line, &arrival);
        records.push(ArchivedRecord {
            object_key: Arc::clone(&checker.object_key),
            line,
            shard_id: truth.shard_id.clone(),
            sequence_number: truth.sequence_number.clone(),
            sub_sequence_number: None,
            partition_key: truth.partition_key.clone(),
            approximate_arrival_timestamp: arrival,
            data: piece.to_vec(),
            payload: PayloadForm::Bytes,
            error_message: None,
            duplicate_of: None,
        });
    }
    (records, checker.problems)
}

/// `body` cut after each `delimiter` (not empty), delimiters removed;
/// `Err` with the pieces (the last one unterminated) when `body` does not
/// end with the delimiter.
fn split_after<'b>(body: &'b [u8], delimiter: &[u8]) -> Result<Vec<&'b [u8]>, Vec<&'b [u8]>> {
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut at = 0;
    while at + delimiter.len() <= body.len() {
        if &body[at..at + delimiter.len()] == delimiter {
            pieces.push(&body[start..at]);
            at += delimiter.len();
            start = at;
        } else {
            at += 1;
        }
    }
    if start == body.len() {
        Ok(pieces)
    } else {
        pieces.push(&body[start..]);
        Err(pieces)
    }
}

#[cfg(test)]
mod tests {
    use chrono::DateTime;

    use super::*;
    use crate::archive::test_support::minute;
    use crate::archive::{Compression, key::Shape};

    fn truth(seq: &str, data: &[u8], second: i64) -> StreamRecord {
        StreamRecord {
            shard_id: "s-1".to_owned(),
            sequence_number: seq.to_owned(),
            partition_key: format!("pk-{seq}"),
            data: data.to_vec(),
            approximate_arrival_timestamp: minute()
                + chrono::Duration::seconds(second)
                + chrono::Duration::microseconds(1_500),
        }
    }

    fn raw_key(first: &str, last: &str) -> ObjectKey {
        let key = ObjectKey::format_in(
            Default::default(),
            "p",
            minute(),
            "s-1",
            &crate::seq::Seq::parse(first).unwrap(),
            &crate::seq::Seq::parse(last).unwrap(),
            Shape::Raw.extension(Compression::Gzip),
        );
        ObjectKey::parse("p", &key).unwrap()
    }

    #[test]
    fn pieces_take_the_stream_identities() {
        let key = raw_key("9", "11");
        let records = [
            truth("9", b"a\nb", 1),
            truth("10", b"", 2),
            truth("11", b"c", 3),
        ];
        let in_range: Vec<&StreamRecord> = records.iter().collect();
        let body = Compression::Gzip.compress(b"a\nb\x1e\x1ec\x1e").unwrap();
        let (decoded, problems) = decode_raw(&key, &body, b"\x1e", &in_range);
        assert!(problems.is_empty(), "{problems:#?}");
        let data: Vec<&[u8]> = decoded.iter().map(|r| &r.data[..]).collect();
        assert_eq!(data, [&b"a\nb"[..], b"", b"c"]);
        assert_eq!(decoded[2].sequence_number, "11");
        assert_eq!(decoded[0].partition_key, "pk-9");
        assert_eq!(
            decoded[0].approximate_arrival_timestamp,
            "2026-11-21T05:27:01.001Z"
        );
        // Empty delimiter: cut by the stream's payload lengths.
        let body = Compression::Gzip.compress(b"a\nbc").unwrap();
        let (decoded, problems) = decode_raw(&key, &body, b"", &in_range);
        assert!(problems.is_empty(), "{problems:#?}");
        assert_eq!(decoded.len(), 3);
    }

    #[test]
    fn counts_and_buckets_must_match() {
        let key = raw_key("9", "10");
        let late = StreamRecord {
            approximate_arrival_timestamp: DateTime::parse_from_rfc3339("2026-11-21T05:28:00Z")
                .unwrap()
                .to_utc(),
            ..truth("10", b"b", 0)
        };
        let records = [truth("9", b"a", 1), late];
        let in_range: Vec<&StreamRecord> = records.iter().collect();
        for (body, needle) in [
            (&b"a\x1eb\x1ec\x1e"[..], "3 payloads"),
            (b"a\x1eb", "does not end with"),
            (b"a\x1eb\x1e", "not in the key's minute"),
        ] {
            let body = Compression::Gzip.compress(body).unwrap();
            let (_, problems) = decode_raw(&key, &body, b"\x1e", &in_range);
            assert!(
                problems.iter().any(|p| p.message.contains(needle)),
                "{needle}: {problems:#?}"
            );
        }
    }
}

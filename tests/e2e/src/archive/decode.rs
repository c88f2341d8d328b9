//! Decoding one JSON Lines object (the `envelope` format, error objects
//! and duplicates objects) against its key, line by line, and the checks every format
//! shares ([`Checker`]); every deviation from the format becomes an
//! [`ArchiveProblem`].

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use super::layout::TimeBucket;
use super::line::{COPY_FIELDS, FIELDS, FIELDS_WITH_SUB_SEQUENCE, RawCopy, RawLine};
use super::{ArchiveProblem, ArchivedRecord, CopyRef, ObjectKey, PayloadForm, parse_timestamp};
use crate::seq::Seq;

/// What the lines of a JSON Lines object are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineKind {
    /// `envelope` lines: `shardId`, `sequenceNumber`, [`subSequenceNumber`],
    /// `partitionKey`, `approximateArrivalTimestamp`, `data`.
    Envelope,
    /// Error lines: the envelope's fields, then a non-empty `errorMessage`.
    Errors,
    /// Duplicate lines: the envelope's fields, then `duplicateOf`, the
    /// accepted copy (`shardId`, `sequenceNumber`, [`subSequenceNumber`]).
    Duplicates,
}

/// The checks every decoder makes of each record it finds in an object:
/// its shard is the key's, its sequence number is inside the key's range and
/// after the previous record's (strictly increasing (sequence number,
/// sub-sequence number)), its arrival time has the contract's text form and
/// falls in the key's time bucket.
#[derive(Debug)]
pub struct Checker<'k> {
    /// The object's parsed key.
    pub key: &'k ObjectKey,
    /// The key, shared by the records.
    pub object_key: Arc<str>,
    /// What was found wrong so far.
    pub problems: Vec<ArchiveProblem>,
    previous: Option<(Seq, Option<u64>)>,
}

impl<'k> Checker<'k> {
    /// A checker of the object under `key`.
    pub fn new(key: &'k ObjectKey) -> Self {
        Self {
            key,
            object_key: Arc::from(key.key.as_str()),
            problems: Vec::new(),
            previous: None,
        }
    }

    /// Records a problem at `line` (or of the whole object).
    pub fn problem(&mut self, line: Option<usize>, message: String) {
        self.problems.push(ArchiveProblem {
            object_key: self.key.key.clone(),
            line,
            message,
        });
    }

    /// Checks a record's shard id and sequence number against the key and
    /// the previous record.
    pub fn identity(
        &mut self,
        line: usize,
        shard_id: &str,
        sequence_number: &str,
        sub_sequence_number: Option<u64>,
    ) {
        if shard_id != self.key.shard_id {
            self.problem(
                Some(line),
                format!(
                    "shardId {shard_id:?} but the key's shard is {:?}",
                    self.key.shard_id
                ),
            );
        }
        let seq = match Seq::parse(sequence_number) {
            Ok(seq) => seq,
            Err(message) => {
                self.problem(Some(line), format!("sequenceNumber: {message}"));
                return;
            }
        };
        if seq < self.key.first || seq > self.key.last {
            self.problem(
                Some(line),
                format!(
                    "sequenceNumber {seq} outside the key's range [{}, {}]",
                    self.key.first, self.key.last
                ),
            );
        }
        let current = (seq, sub_sequence_number);
        if let Some(prev) = &self.previous
            && !is_after(prev, &current)
        {
            self.problem(
                Some(line),
                format!(
                    "({}, {:?}) does not follow ({}, {:?}): records out of sequence order",
                    current.0, current.1, prev.0, prev.1
                ),
            );
        }
        self.previous = Some(current);
    }

    /// Checks an `approximateArrivalTimestamp` text: its form, and that it
    /// falls in the key's time bucket.
    pub fn arrival(&mut self, line: usize, text: &str) {
        match parse_timestamp(text) {
            Ok(arrival) => {
                let bucket = self.key.layout.bucket;
                if bucket.truncate(arrival) != self.key.bucket_start {
                    let unit = match bucket {
                        TimeBucket::Minute => "minute",
                        TimeBucket::Hour => "hour",
                    };
                    self.problem(
                        Some(line),
                        format!(
                            "arrival {text} is not in the key's {unit} {}",
                            self.key.bucket_start.format("%Y-%m-%dT%H:%M")
                        ),
                    );
                }
            }
            Err(message) => self.problem(Some(line), message),
        }
    }
}

/// Decodes an `envelope` object's body against its key
/// ([`decode_lines`] with [`LineKind::Envelope`]).
pub fn decode_object(key: &ObjectKey, body: &[u8]) -> (Vec<ArchivedRecord>, Vec<ArchiveProblem>) {
    decode_lines(key, body, LineKind::Envelope)
}

/// Decompresses `body` by the key's extension and splits it into its lines
/// (without the final empty one); `None` after recording why it cannot.
pub fn lines_of(checker: &mut Checker<'_>, body: &[u8]) -> Option<Vec<String>> {
    let text = match checker.key.compression.decompress(body) {
        Ok(text) => text,
        Err(message) => {
            checker.problem(None, message);
            return None;
        }
    };
    let Ok(text) = String::from_utf8(text) else {
        checker.problem(None, "body is not UTF-8".to_owned());
        return None;
    };
    let mut lines: Vec<String> = text.split('\n').map(str::to_owned).collect();
    if lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    Some(lines)
}

/// Decodes a JSON Lines object of `kind` against its key: decompression,
/// JSON Lines, field order and types, timestamp and base64 format, and the
/// [`Checker`]'s checks of every line. (That the batch's records run from
/// the key's first to its last sequence number is checked per batch, over
/// its main and error objects.)
pub fn decode_lines(
    key: &ObjectKey,
    body: &[u8],
    kind: LineKind,
) -> (Vec<ArchivedRecord>, Vec<ArchiveProblem>) {
    let mut checker = Checker::new(key);
    let Some(lines) = lines_of(&mut checker, body) else {
        return (Vec::new(), checker.problems);
    };
    let mut records: Vec<ArchivedRecord> = Vec::with_capacity(lines.len());
    for (index, line_text) in lines.iter().enumerate() {
        let line = index + 1;
        if line_text.is_empty() {
            checker.problem(Some(line), "empty line".to_owned());
            continue;
        }
        let raw: RawLine = match serde_json::from_str(line_text) {
            Ok(raw) => raw,
            Err(error) => {
                checker.problem(
                    Some(line),
                    format!("not a JSON object of the expected shape: {error}"),
                );
                continue;
            }
        };
        let mut expected_order: Vec<&str> = if raw.sub_sequence_number.is_some() {
            FIELDS_WITH_SUB_SEQUENCE.to_vec()
        } else {
            FIELDS.to_vec()
        };
        match kind {
            LineKind::Envelope => {}
            LineKind::Errors => expected_order.push("errorMessage"),
            LineKind::Duplicates => expected_order.push("duplicateOf"),
        }
        if raw.order != expected_order {
            checker.problem(
                Some(line),
                format!("fields are {:?}, expected {expected_order:?}", raw.order),
            );
        }
        let (Some(shard_id), Some(sequence_number)) = (raw.shard_id, raw.sequence_number) else {
            checker.problem(Some(line), "shardId or sequenceNumber missing".to_owned());
            continue;
        };
        checker.identity(line, &shard_id, &sequence_number, raw.sub_sequence_number);
        let partition_key = raw.partition_key.unwrap_or_else(|| {
            checker.problem(Some(line), "partitionKey missing".to_owned());
            String::new()
        });
        let approximate_arrival_timestamp =
            raw.approximate_arrival_timestamp.unwrap_or_else(|| {
                checker.problem(Some(line), "approximateArrivalTimestamp missing".to_owned());
                String::new()
            });
        if !approximate_arrival_timestamp.is_empty() {
            checker.arrival(line, &approximate_arrival_timestamp);
        }
        let data = match raw.data.as_deref().map(|d| BASE64.decode(d)) {
            Some(Ok(data)) => data,
            Some(Err(error)) => {
                checker.problem(
                    Some(line),
                    format!("data is not standard padded base64: {error}"),
                );
                Vec::new()
            }
            None => {
                checker.problem(Some(line), "data missing".to_owned());
                Vec::new()
            }
        };
        let error_message = match (kind, raw.error_message) {
            (LineKind::Errors, Some(message)) if !message.is_empty() => Some(message),
            (LineKind::Errors, _) => {
                checker.problem(
                    Some(line),
                    "an error line without an errorMessage".to_owned(),
                );
                Some(String::new())
            }
            (LineKind::Envelope | LineKind::Duplicates, Some(_)) => {
                checker.problem(
                    Some(line),
                    "unexpected field \"errorMessage\" outside the error prefix".to_owned(),
                );
                None
            }
            (LineKind::Envelope | LineKind::Duplicates, None) => None,
        };
        let duplicate_of = match (kind, raw.duplicate_of) {
            (LineKind::Duplicates, Some(copy)) => match copy_ref(copy) {
                Ok(copy) => Some(copy),
                Err(message) => {
                    checker.problem(Some(line), format!("duplicateOf: {message}"));
                    None
                }
            },
            (LineKind::Duplicates, None) => {
                checker.problem(
                    Some(line),
                    "a duplicate line without duplicateOf".to_owned(),
                );
                None
            }
            (LineKind::Envelope | LineKind::Errors, Some(_)) => {
                checker.problem(
                    Some(line),
                    "unexpected field \"duplicateOf\" outside the duplicates prefix".to_owned(),
                );
                None
            }
            (LineKind::Envelope | LineKind::Errors, None) => None,
        };
        for unknown in &raw.unknown {
            checker.problem(Some(line), format!("unexpected field {unknown:?}"));
        }
        records.push(ArchivedRecord {
            object_key: Arc::clone(&checker.object_key),
            line,
            shard_id,
            sequence_number,
            sub_sequence_number: raw.sub_sequence_number,
            partition_key,
            approximate_arrival_timestamp,
            data,
            payload: PayloadForm::Bytes,
            error_message,
            duplicate_of,
        });
    }
    (records, checker.problems)
}

/// A `duplicateOf` object checked: its fields in order, a shard id, and a
/// sequence number of decimal digits.
fn copy_ref(copy: RawCopy) -> Result<CopyRef, String> {
    let expected: &[&str] = if copy.sub_sequence_number.is_some() {
        &COPY_FIELDS
    } else {
        &COPY_FIELDS[..2]
    };
    if copy.order != expected {
        return Err(format!(
            "fields are {:?}, expected {expected:?}",
            copy.order
        ));
    }
    let (Some(shard_id), Some(sequence_number)) = (copy.shard_id, copy.sequence_number) else {
        return Err("shardId or sequenceNumber missing".to_owned());
    };
    if shard_id.is_empty() {
        return Err("empty shardId".to_owned());
    }
    Seq::parse(&sequence_number).map_err(|message| format!("sequenceNumber: {message}"))?;
    Ok(CopyRef {
        shard_id,
        sequence_number,
        sub_sequence_number: copy.sub_sequence_number,
    })
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
    use crate::archive::{Compression, encode_duplicate_line, encode_line};

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

    #[test]
    fn error_lines_need_an_error_message() {
        let key = key_of_s1("9", "11", Compression::None);
        let ts = "2026-11-21T05:27:03.123Z";
        let good = line("s-1", "9", None, "k", ts, b"\xff");
        let with_message = format!(
            "{},\"errorMessage\":\"payload is not UTF-8\"}}\n",
            good.trim_end().strip_suffix('}').unwrap()
        );
        let body = [with_message.clone(), line("s-1", "11", None, "k", ts, b"x")].concat();
        let (records, problems) = decode_lines(&key, body.as_bytes(), LineKind::Errors);
        assert_eq!(
            records[0].error_message.as_deref(),
            Some("payload is not UTF-8")
        );
        assert_eq!(records[0].data, b"\xff");
        let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 2, "{text:#?}");
        assert!(text.iter().all(|t| t.contains(":2:")), "{text:#?}");
        assert!(
            text.iter().any(|t| t.contains("without an errorMessage")),
            "{text:#?}"
        );
        // In a main object, an errorMessage is out of place.
        let (records, problems) = decode_lines(&key, with_message.as_bytes(), LineKind::Envelope);
        assert_eq!(records[0].error_message, None);
        assert!(
            problems
                .iter()
                .any(|p| p.message.contains("outside the error prefix")),
            "{problems:#?}"
        );
    }

    #[test]
    fn duplicate_lines_name_the_accepted_copy() {
        let key = key_of_s1("9", "11", Compression::None);
        let ts = "2026-11-21T05:27:03.123Z";
        let body = [
            encode_duplicate_line(
                &line("s-1", "9", Some(2), "k", ts, b"{}"),
                "s-0",
                "4",
                Some(1),
            ),
            encode_duplicate_line(&line("s-1", "10", None, "k", ts, b"x"), "s-1", "9", None),
            // Without duplicateOf; then one with its fields out of order.
            line("s-1", "11", Some(0), "k", ts, b"x"),
            line("s-1", "11", Some(1), "k", ts, b"x").replacen(
                "}\n",
                ",\"duplicateOf\":{\"sequenceNumber\":\"9\",\"shardId\":\"s-1\"}}\n",
                1,
            ),
        ]
        .concat();
        let (records, problems) = decode_lines(&key, body.as_bytes(), LineKind::Duplicates);
        assert_eq!(records.len(), 4);
        assert_eq!(
            records[0].duplicate_of.as_ref().map(ToString::to_string),
            Some("s-0/4#1".to_owned())
        );
        assert_eq!(
            records[1].duplicate_of.as_ref().map(ToString::to_string),
            Some("s-1/9".to_owned())
        );
        let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 3, "{text:#?}");
        assert!(text[0].contains(":3: fields are"), "{text:#?}");
        assert!(
            text[1].contains(":3: a duplicate line without duplicateOf"),
            "{text:#?}"
        );
        assert!(text[2].contains(":4: duplicateOf: fields are"), "{text:#?}");
        // In a main object, a duplicateOf is out of place.
        let (_, problems) = decode_lines(&key, body.as_bytes(), LineKind::Envelope);
        assert!(
            problems
                .iter()
                .any(|p| p.message.contains("outside the duplicates prefix")),
            "{problems:#?}"
        );
    }
}

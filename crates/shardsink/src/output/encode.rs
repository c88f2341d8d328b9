//! JSON Lines encoding of records: one line per user record, fields in the
//! order the README's example line shows — `shardId`, `sequenceNumber`,
//! `subSequenceNumber` (KPL records only), `partitionKey`,
//! `approximateArrivalTimestamp` (RFC 3339, UTC, milliseconds), `data`
//! (standard base64).
//!
//! The encoding is a pure function of the record and its shard, so a replay of
//! the same records produces the same bytes (C5 in docs/DESIGN.md). It writes
//! straight into the batch buffer: the shard id is escaped once per batch, the
//! timestamp's `yyyy-MM-ddTHH:mm:` once per minute, and base64 goes directly
//! into the buffer, so a record costs about what `serde_json` alone would.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::output::minute::Minute;
use crate::read::record::ShardRecord;

/// Per-batch encoding context: the parts of a line shared by every record of
/// one shard and minute.
#[derive(Debug, Clone)]
pub struct LineEncoder {
    /// `{"shardId":"…","sequenceNumber":"`
    head: Vec<u8>,
    /// `"approximateArrivalTimestamp":"yyyy-MM-ddTHH:mm:`
    timestamp_head: Vec<u8>,
    minute: Minute,
}

impl LineEncoder {
    /// The encoder for records of `shard_id` arriving in `minute`.
    pub fn new(shard_id: &str, minute: Minute) -> Self {
        let mut head = br#"{"shardId":"#.to_vec();
        push_json_string(&mut head, shard_id);
        head.extend_from_slice(br#","sequenceNumber":""#);
        let mut timestamp_head = br#","approximateArrivalTimestamp":""#.to_vec();
        timestamp_head.extend_from_slice(minute.rfc3339_prefix().as_bytes());
        Self {
            head,
            timestamp_head,
            minute,
        }
    }

    /// Appends the record's lines (one, or one per KPL user record) to `out`.
    pub fn encode(&self, record: &ShardRecord, out: &mut Vec<u8>) {
        debug_assert_eq!(
            record.minute(),
            self.minute,
            "record encoded in the wrong minute"
        );
        match &record.user_records {
            None => self.encode_line(record, None, &record.partition_key, &record.data, out),
            Some(user_records) => {
                for user in user_records {
                    self.encode_line(
                        record,
                        Some(user.sub_sequence_number),
                        &user.partition_key,
                        &user.data,
                        out,
                    );
                }
            }
        }
    }

    fn encode_line(
        &self,
        record: &ShardRecord,
        sub_sequence_number: Option<u64>,
        partition_key: &str,
        data: &[u8],
        out: &mut Vec<u8>,
    ) {
        out.extend_from_slice(&self.head);
        // Validated decimal digits: nothing to escape.
        out.extend_from_slice(record.sequence_number.as_str().as_bytes());
        out.push(b'"');
        if let Some(sub) = sub_sequence_number {
            out.extend_from_slice(br#","subSequenceNumber":"#);
            push_decimal(out, sub);
        }
        out.extend_from_slice(br#","partitionKey":"#);
        push_json_string(out, partition_key);
        out.extend_from_slice(&self.timestamp_head);
        let millis_in_minute =
            (record.arrival_millis - self.minute.start_millis()).clamp(0, 59_999);
        push_seconds_millis(out, millis_in_minute);
        out.extend_from_slice(br#"Z","data":""#);
        let start = out.len();
        out.resize(
            start + base64::encoded_len(data.len(), true).unwrap_or(0),
            0,
        );
        // The buffer was sized with the engine's own length formula.
        let written = STANDARD.encode_slice(data, &mut out[start..]).unwrap_or(0);
        out.truncate(start + written);
        out.extend_from_slice(b"\"}\n");
    }
}

/// Appends `text` as a JSON string (quoted and escaped per RFC 8259).
fn push_json_string(out: &mut Vec<u8>, text: &str) {
    // Writing to a Vec cannot fail, and serializing a str cannot either.
    let _ = serde_json::to_writer(&mut *out, text);
}

fn push_decimal(out: &mut Vec<u8>, value: u64) {
    let mut buffer = [0u8; 20];
    let mut i = buffer.len();
    let mut v = value;
    loop {
        i -= 1;
        buffer[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&buffer[i..]);
}

/// `SS.mmm` for a millisecond offset within the minute (0..60,000).
fn push_seconds_millis(out: &mut Vec<u8>, millis_in_minute: i64) {
    let (seconds, millis) = (millis_in_minute / 1000, millis_in_minute % 1000);
    out.extend_from_slice(&[
        b'0' + (seconds / 10) as u8,
        b'0' + (seconds % 10) as u8,
        b'.',
        b'0' + (millis / 100) as u8,
        b'0' + (millis / 10 % 10) as u8,
        b'0' + (millis % 10) as u8,
    ]);
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use proptest::prelude::*;
    use serde_json::Value;

    use super::*;
    use crate::read::kpl;

    fn record(
        sequence_number: &str,
        arrival_millis: i64,
        partition_key: &str,
        data: &[u8],
    ) -> ShardRecord {
        ShardRecord {
            sequence_number: sequence_range::SequenceNumber::parse(sequence_number).unwrap(),
            arrival_millis,
            partition_key: partition_key.to_owned(),
            data: Bytes::copy_from_slice(data),
            user_records: None,
        }
    }

    fn encode(shard_id: &str, record: &ShardRecord) -> String {
        let mut out = Vec::new();
        LineEncoder::new(shard_id, record.minute()).encode(record, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn writes_the_documented_fields_in_order() {
        // 2026-11-21T05:27:03.045Z
        let line = encode(
            "shardId-000000000001",
            &record(
                "49590338271490256608559692538361571095921575989136588898",
                1_795_238_823_045,
                "user \"7\"\n",
                b"\x00\xffhi",
            ),
        );
        assert_eq!(
            line,
            concat!(
                r#"{"shardId":"shardId-000000000001","sequenceNumber":"49590338271490256608559692538361571095921575989136588898","#,
                r#""partitionKey":"user \"7\"\n","approximateArrivalTimestamp":"2026-11-21T05:27:03.045Z","data":"AP9oaQ=="}"#,
                "\n"
            )
        );
    }

    #[test]
    fn empty_data_is_an_empty_string() {
        let line = encode("s", &record("1", 0, "", b""));
        let value: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["data"], "");
        assert_eq!(
            value["approximateArrivalTimestamp"],
            "1970-01-01T00:00:00.000Z"
        );
    }

    #[test]
    fn kpl_user_records_get_their_own_lines() {
        let aggregate = Bytes::from(kpl::aggregate(&[
            ("a".to_owned(), None, b"one".to_vec()),
            ("b".to_owned(), None, b"two".to_vec()),
        ]));
        let mut rec = record("9", 60_000, "outer", &aggregate);
        rec.user_records = kpl::deaggregate(&aggregate).unwrap();
        let text = encode("s", &rec);
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["subSequenceNumber"], 1);
        assert_eq!(lines[1]["partitionKey"], "b");
        assert_eq!(lines[1]["sequenceNumber"], "9");
        assert_eq!(lines[1]["data"], "dHdv");
        let keys: Vec<&str> = lines[0]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys.len(), 6);
    }

    proptest! {
        #[test]
        fn lines_parse_back_to_the_record(
            pk in "\\PC{0,40}",
            data in prop::collection::vec(any::<u8>(), 0..300),
            millis in 0i64..4_102_444_800_000,
            sub in prop::option::of(any::<u64>()),
        ) {
            let mut rec = record("123456789", millis, &pk, &data);
            if let Some(sub) = sub {
                rec.user_records = Some(vec![kpl::UserRecord {
                    sub_sequence_number: sub,
                    partition_key: pk.clone(),
                    explicit_hash_key: None,
                    data: Bytes::from(data.clone()),
                }]);
            }
            let line = encode("shardId-000000000000", &rec);
            prop_assert!(line.ends_with('\n'));
            prop_assert_eq!(line.matches('\n').count(), 1);
            let value: Value = serde_json::from_str(&line).unwrap();
            prop_assert_eq!(value["partitionKey"].as_str().unwrap(), pk.as_str());
            prop_assert_eq!(STANDARD.decode(value["data"].as_str().unwrap()).unwrap(), data);
            let ts = chrono::DateTime::parse_from_rfc3339(value["approximateArrivalTimestamp"].as_str().unwrap()).unwrap();
            prop_assert_eq!(ts.timestamp_millis(), millis);
            prop_assert_eq!(value.get("subSequenceNumber").and_then(Value::as_u64), sub);
        }
    }
}

//! The `envelope` format: JSON Lines, one line per user record, fields in
//! the order the README's example line shows — `shardId`, `sequenceNumber`,
//! `subSequenceNumber` (KPL records only), `partitionKey`,
//! `approximateArrivalTimestamp` (RFC 3339, UTC, milliseconds), `data`
//! (standard base64). The same fields without `data` are the `json`
//! format's metadata object, and with an `errorMessage` after `data` they
//! are the lines of error objects.
//!
//! The encoding is a pure function of the record and its shard, so a replay of
//! the same records produces the same bytes (C5 in docs/DESIGN.md). It writes
//! straight into the batch buffer: the shard id is escaped once per batch, the
//! timestamp's `yyyy-MM-ddTHH:mm:` once per minute, and base64 goes directly
//! into the buffer, so a record costs about what `serde_json` alone would.

use base64::Engine;
use chrono::{DateTime, Datelike, Timelike};

#[cfg(test)]
use crate::read::record::ShardRecord;
use crate::read::record::UserRecordView;

/// Milliseconds in a minute.
const MINUTE_MILLIS: i64 = 60_000;

/// Per-batch encoding context: the parts of a line shared by every record of
/// one shard, and of one arrival minute.
#[derive(Debug, Clone)]
pub struct LineEncoder {
    /// `{"shardId":"…","sequenceNumber":"`
    head: Vec<u8>,
    /// The minute `timestamp_head` is for (minutes since the epoch).
    minute: i64,
    /// `,"approximateArrivalTimestamp":"yyyy-MM-ddTHH:mm:`
    timestamp_head: Vec<u8>,
}

impl LineEncoder {
    /// The encoder for records of `shard_id`.
    pub fn new(shard_id: &str) -> Self {
        let mut head = br#"{"shardId":"#.to_vec();
        push_json_string(&mut head, shard_id);
        head.extend_from_slice(br#","sequenceNumber":""#);
        Self {
            head,
            minute: i64::MIN,
            timestamp_head: Vec::new(),
        }
    }

    /// Appends the record's lines (one, or one per KPL user record) to `out`
    /// (under the encoder's shard id).
    #[cfg(test)]
    pub fn encode(&mut self, record: &ShardRecord, out: &mut Vec<u8>) {
        for user in record.views("") {
            self.encode_line(&user, out);
        }
    }

    /// Appends one user record's envelope line to `out`.
    pub fn encode_line(&mut self, user: &UserRecordView<'_>, out: &mut Vec<u8>) {
        self.metadata_fields(user, out);
        push_data(out, user.data);
        out.extend_from_slice(b"\"}\n");
    }

    /// Appends one user record's error line to `out`: its envelope line with
    /// an `errorMessage` after `data`.
    pub fn encode_error(&mut self, user: &UserRecordView<'_>, message: &str, out: &mut Vec<u8>) {
        self.metadata_fields(user, out);
        push_data(out, user.data);
        out.extend_from_slice(br#"","errorMessage":"#);
        push_json_string(out, message);
        out.extend_from_slice(b"}\n");
    }

    /// Appends one user record's duplicate line to `out`: its envelope line
    /// with `duplicateOf` after `data` — the accepted copy it repeats, as
    /// `{"shardId":…,"sequenceNumber":…[,"subSequenceNumber":…]}`.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn encode_duplicate(
        &mut self,
        user: &UserRecordView<'_>,
        of: &crate::events::rule::CopyRef,
        out: &mut Vec<u8>,
    ) {
        self.metadata_fields(user, out);
        push_data(out, user.data);
        out.extend_from_slice(br#"","duplicateOf":{"shardId":"#);
        push_json_string(out, &of.shard_id);
        out.extend_from_slice(br#","sequenceNumber":""#);
        out.extend_from_slice(of.sequence_number.as_str().as_bytes());
        out.push(b'"');
        if let Some(sub) = of.sub_sequence_number {
            out.extend_from_slice(br#","subSequenceNumber":"#);
            push_decimal(out, sub);
        }
        out.extend_from_slice(b"}}\n");
    }

    /// Appends the metadata object of a user record: the envelope's fields
    /// without `data`, `{"shardId":…,"approximateArrivalTimestamp":"…"}`.
    pub fn encode_metadata(&mut self, user: &UserRecordView<'_>, out: &mut Vec<u8>) {
        self.metadata_fields(user, out);
        out.extend_from_slice(b"\"}");
    }

    /// `{"shardId":…,"approximateArrivalTimestamp":"…Z` — the string and
    /// the object left open.
    fn metadata_fields(&mut self, user: &UserRecordView<'_>, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.head);
        // Validated decimal digits: nothing to escape.
        out.extend_from_slice(user.sequence_number.as_bytes());
        out.push(b'"');
        if let Some(sub) = user.sub_sequence_number {
            out.extend_from_slice(br#","subSequenceNumber":"#);
            push_decimal(out, sub);
        }
        out.extend_from_slice(br#","partitionKey":"#);
        push_json_string(out, user.partition_key);
        let minute = user.arrival_millis.div_euclid(MINUTE_MILLIS);
        if minute != self.minute {
            self.minute = minute;
            self.timestamp_head.clear();
            self.timestamp_head
                .extend_from_slice(br#","approximateArrivalTimestamp":""#);
            self.timestamp_head
                .extend_from_slice(rfc3339_minute_prefix(minute).as_bytes());
        }
        out.extend_from_slice(&self.timestamp_head);
        push_seconds_millis(out, user.arrival_millis.rem_euclid(MINUTE_MILLIS));
        out.push(b'Z');
    }
}

/// `","data":"` and the payload in standard base64 (the string left open).
fn push_data(out: &mut Vec<u8>, data: &[u8]) {
    out.extend_from_slice(br#"","data":""#);
    let start = out.len();
    out.resize(
        start + base64::encoded_len(data.len(), true).unwrap_or(0),
        0,
    );
    // The buffer was sized with the engine's own length formula.
    let written = base64_engine()
        .encode_slice(data, &mut out[start..])
        .unwrap_or(0);
    out.truncate(start + written);
}

/// Standard base64 with padding — the bytes of
/// `base64::engine::general_purpose::STANDARD` — encoded with AVX2 or NEON
/// when the CPU has them (detected once). Base64 is most of an envelope
/// line's cost: the vector engine takes a 1 KiB payload several times
/// faster than the scalar one.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn base64_engine() -> &'static impl Engine {
    use std::sync::LazyLock;

    use base64::engine::Simd;
    use base64::engine::general_purpose::PAD;

    static SIMD: LazyLock<Simd> = LazyLock::new(|| Simd::standard(PAD));
    &*SIMD
}

/// Standard base64 with padding (no vector engine for this target).
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn base64_engine() -> &'static impl Engine {
    &base64::engine::general_purpose::STANDARD
}

/// `yyyy-MM-ddTHH:mm:` of a minute since the epoch.
fn rfc3339_minute_prefix(minute: i64) -> String {
    // In range for any minute chrono can represent; records carry timestamps
    // from the Kinesis API, well inside that range.
    let t =
        DateTime::from_timestamp_millis(minute.saturating_mul(MINUTE_MILLIS)).unwrap_or_default();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:",
        t.year(),
        t.month(),
        t.day(),
        t.hour(),
        t.minute()
    )
}

/// Appends `text` as a JSON string (quoted and escaped per RFC 8259).
pub(crate) fn push_json_string(out: &mut Vec<u8>, text: &str) {
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
    use base64::engine::general_purpose::STANDARD;
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
        LineEncoder::new(shard_id).encode(record, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_duplicate_line_names_the_accepted_copy() {
        let shard = "shardId-000000000001";
        let record = record("12", 60_000, "pk", b"x");
        let user = record.views(shard).next().unwrap();
        let of = crate::events::rule::CopyRef {
            shard_id: std::sync::Arc::from("shardId-000000000000"),
            sequence_number: sequence_range::SequenceNumber::from(7u64),
            sub_sequence_number: Some(2),
        };
        let mut out = Vec::new();
        LineEncoder::new(shard).encode_duplicate(&user, &of, &mut out);
        let line: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(line["sequenceNumber"], "12");
        assert_eq!(line["data"], "eA==");
        assert_eq!(
            line["duplicateOf"],
            serde_json::json!({"shardId": "shardId-000000000000", "sequenceNumber": "7", "subSequenceNumber": 2})
        );
        assert!(out.ends_with(b"}}\n") && !out[..out.len() - 1].contains(&b'\n'));
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

        /// The vector engine writes exactly the scalar engine's bytes, for
        /// every length (whole vector blocks, and the scalar tail).
        #[test]
        fn base64_is_the_standard_encoding(data in prop::collection::vec(any::<u8>(), 0..3_000)) {
            let mut out = b"x".to_vec();
            push_data(&mut out, &data);
            let expected = format!(r#"x","data":"{}"#, STANDARD.encode(&data));
            prop_assert_eq!(String::from_utf8(out).unwrap(), expected);
        }
    }
}

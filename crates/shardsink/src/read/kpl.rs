//! Deaggregation (and, for tests and the end-to-end producer, aggregation) of
//! Kinesis Producer Library (KPL) aggregated records.
//!
//! The KPL packs many *user records* into one Kinesis record. Such a record's
//! data is laid out as
//!
//! ```text
//! 0        4                    len-16          len
//! +--------+--------------------+----------------+
//! | magic  | protobuf message   | MD5 of message |
//! +--------+--------------------+----------------+
//! ```
//!
//! * magic: the 4 bytes `F3 89 9A C2` ([`KPL_MAGIC`]);
//! * the protobuf message is a proto2 `AggregatedRecord`:
//!
//!   ```text
//!   message AggregatedRecord {
//!     repeated string partition_key_table     = 1;
//!     repeated string explicit_hash_key_table = 2;
//!     repeated Record records                 = 3;
//!   }
//!   message Record {
//!     required uint64 partition_key_index     = 1;
//!     optional uint64 explicit_hash_key_index = 2;
//!     required bytes  data                    = 3;
//!     repeated Tag    tags                    = 4;
//!   }
//!   message Tag {
//!     required string key   = 1;
//!     optional string value = 2;
//!   }
//!   ```
//!
//!   The key indices are 0-based indices into the two key tables. Tags are
//!   not used by the KPL or the KCL; they are ignored here too;
//! * the trailing 16 bytes are the MD5 digest of the protobuf bytes alone.
//!
//! Sources:
//! * the format: `aggregation-format.md` and `aws/kinesis/protobuf/messages.proto`
//!   in awslabs/amazon-kinesis-producer
//!   (<https://github.com/awslabs/amazon-kinesis-producer/blob/master/aggregation-format.md>);
//! * the consumer side this module follows: `AggregatorUtil.deaggregate` in
//!   awslabs/amazon-kinesis-client
//!   (<https://github.com/awslabs/amazon-kinesis-client/blob/master/amazon-kinesis-client/src/main/java/software/amazon/kinesis/retrieval/AggregatorUtil.java>).
//!
//! Behaviour shared with the KCL:
//! * a record is aggregated only if it starts with the magic bytes;
//! * a user record's sub-sequence number is its 0-based position in `records`;
//! * proto2 `required` fields are enforced (Java's `parseFrom` rejects a
//!   message that lacks one);
//! * key strings are decoded from UTF-8 lossily (invalid sequences become
//!   U+FFFD), as protobuf-java does for proto2 `string` fields.
//!
//! Where this module deliberately differs from the KCL: every way a record
//! with the magic prefix can be invalid is reported as one [`KplError`] and
//! the caller keeps the whole Kinesis record unchanged. The KCL does that for
//! a short record, a digest mismatch or a protobuf error, but on a key index
//! out of range it logs, keeps the user records before the bad one and drops
//! the rest together with the original record, and an aggregate with no user
//! records yields nothing at all. The KCL also drops every user record of an
//! aggregate if one of them hashes outside the shard's hash key range; this
//! module does no hash key range filtering. Smaller differences, all on
//! crafted input only: a known field with an unexpected wire type is a decode
//! error here (protobuf-java skips it as an unknown field), and key indices
//! are compared as `u64` (the KCL casts them to a Java `int` first).
//!
//! [`deaggregate`] does not copy user data: every [`UserRecord::data`] is a
//! slice of the input [`Bytes`].

#[cfg(test)]
use std::collections::HashMap;

use bytes::Bytes;
use md5::{Digest, Md5};
use prost::Message;

/// The 4 bytes (`F3 89 9A C2`) that start every KPL aggregated record.
///
/// Source: `aggregation-format.md` in awslabs/amazon-kinesis-producer and
/// `AGGREGATED_RECORD_MAGIC` in the KCL's `AggregatorUtil.java`.
pub const KPL_MAGIC: [u8; 4] = [0xF3, 0x89, 0x9A, 0xC2];

/// Length in bytes of the MD5 digest that ends an aggregated record.
const DIGEST_LEN: usize = 16;

/// Smallest length in bytes of an aggregated record: magic and digest around
/// an empty protobuf message.
#[cfg(test)]
const MIN_AGGREGATE_LEN: usize = KPL_MAGIC.len() + DIGEST_LEN;

/// One user record unpacked from a KPL aggregated record.
///
/// Source: the per-record fields the KCL's `AggregatorUtil.deaggregate` sets
/// on each `KinesisClientRecord` it produces (awslabs/amazon-kinesis-client).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRecord {
    /// 0-based position of this user record in the aggregate's `records`
    /// list (the KCL's rule); with the Kinesis record's sequence number it
    /// identifies the user record (the KCL's extended sequence number).
    pub sub_sequence_number: u64,
    /// The user record's partition key, looked up in the aggregate's
    /// partition key table (invalid UTF-8 replaced by U+FFFD).
    pub partition_key: String,
    /// The user record's explicit hash key (a decimal 128-bit integer when
    /// written by the KPL, not validated here), if the record carries an
    /// explicit hash key index; looked up in the explicit hash key table.
    pub explicit_hash_key: Option<String>,
    /// The user record's payload bytes: a slice sharing the buffer of the
    /// [`Bytes`] given to [`deaggregate`], not a copy. May be empty.
    pub data: Bytes,
}

/// Why a Kinesis record that starts with [`KPL_MAGIC`] is not a valid KPL
/// aggregated record. The caller keeps such a record as it is.
///
/// Source of the format: `aggregation-format.md` in
/// awslabs/amazon-kinesis-producer.
#[derive(Debug, thiserror::Error)]
pub enum KplError {
    /// The record is shorter than the magic bytes plus the 16-byte digest
    /// (20 bytes).
    #[error("kpl record too short: {len} bytes, need at least 20")]
    TooShort {
        /// Length of the whole record in bytes.
        len: usize,
    },
    /// The trailing 16 bytes are not the MD5 digest of the protobuf bytes.
    #[error("kpl digest mismatch")]
    DigestMismatch,
    /// The bytes between magic and digest are not a protobuf
    /// `AggregatedRecord` (bad varint, truncated field, wrong wire type,
    /// ...). The cause is the error's `source()`.
    #[error("kpl protobuf decode error")]
    Decode(#[source] prost::DecodeError),
    /// A proto2 `required` field is absent (protobuf-java's `parseFrom`, and
    /// so the KCL, rejects such a message).
    #[error("kpl required field missing: {field}")]
    MissingField {
        /// The missing field as `Message.field`: `Record.partition_key_index`,
        /// `Record.data` or `Tag.key`.
        field: &'static str,
    },
    /// A user record's `partition_key_index` is not an index into
    /// `partition_key_table`.
    #[error("kpl partition key index out of range: index {index}, table length {table_len}")]
    PartitionKeyIndexOutOfRange {
        /// The out-of-range index found in the record.
        index: u64,
        /// Number of entries in `partition_key_table`.
        table_len: usize,
    },
    /// A user record's `explicit_hash_key_index` is not an index into
    /// `explicit_hash_key_table`.
    #[error("kpl explicit hash key index out of range: index {index}, table length {table_len}")]
    ExplicitHashKeyIndexOutOfRange {
        /// The out-of-range index found in the record.
        index: u64,
        /// Number of entries in `explicit_hash_key_table`.
        table_len: usize,
    },
    /// The aggregate is well formed but holds no user records.
    #[error("kpl aggregate has no user records")]
    NoRecords,
}

/// Protobuf `AggregatedRecord`. Key tables are read as bytes so that invalid
/// UTF-8 can be replaced lossily, as protobuf-java does for proto2 strings.
#[derive(Clone, PartialEq, Message)]
struct AggregatedRecord {
    #[prost(bytes = "bytes", repeated, tag = "1")]
    partition_key_table: Vec<Bytes>,
    #[prost(bytes = "bytes", repeated, tag = "2")]
    explicit_hash_key_table: Vec<Bytes>,
    #[prost(message, repeated, tag = "3")]
    records: Vec<Record>,
}

/// Protobuf `Record`. The `required` fields are declared `optional` so that
/// their absence can be detected.
#[derive(Clone, PartialEq, Message)]
struct Record {
    #[prost(uint64, optional, tag = "1")]
    partition_key_index: Option<u64>,
    #[prost(uint64, optional, tag = "2")]
    explicit_hash_key_index: Option<u64>,
    #[prost(bytes = "bytes", optional, tag = "3")]
    data: Option<Bytes>,
    #[prost(message, repeated, tag = "4")]
    tags: Vec<Tag>,
}

/// Protobuf `Tag`, decoded only to enforce its required `key`. `value`
/// (field 2) is not declared, so it is skipped like an unknown field.
#[derive(Clone, PartialEq, Message)]
struct Tag {
    #[prost(bytes = "bytes", optional, tag = "1")]
    key: Option<Bytes>,
}

/// Unpacks a Kinesis record's data into its KPL user records.
///
/// `data` is the Kinesis record's data blob.
///
/// * `Ok(None)`: the data does not start with [`KPL_MAGIC`], so the record is
///   not aggregated; the caller keeps the record as it is.
/// * `Ok(Some(v))`: `v.len() >= 1` user records, in order, with
///   `v[i].sub_sequence_number == i`; their `data` slices share `data`'s
///   buffer (no copy).
/// * `Err(e)`: the data has the magic prefix but is not a valid aggregate;
///   the caller logs `e` and keeps the record as it is (the KCL does the same
///   for short, digest-mismatched and undecodable records).
///
/// Never panics, whatever the input.
///
/// # Errors
///
/// Checked in this order (the KCL's): [`KplError::TooShort`] below 20 bytes,
/// [`KplError::DigestMismatch`], [`KplError::Decode`] and
/// [`KplError::MissingField`] for the protobuf message as a whole,
/// [`KplError::NoRecords`], then for each user record in turn
/// [`KplError::PartitionKeyIndexOutOfRange`] before
/// [`KplError::ExplicitHashKeyIndexOutOfRange`].
///
/// Source: `AggregatorUtil.deaggregate` in awslabs/amazon-kinesis-client;
/// format from `aggregation-format.md` in awslabs/amazon-kinesis-producer.
pub fn deaggregate(data: &Bytes) -> Result<Option<Vec<UserRecord>>, KplError> {
    if !data.starts_with(&KPL_MAGIC) {
        return Ok(None);
    }
    let (framed, expected_digest) = match data.split_last_chunk::<DIGEST_LEN>() {
        Some((framed, digest)) if framed.len() >= KPL_MAGIC.len() => (framed, digest),
        _ => return Err(KplError::TooShort { len: data.len() }),
    };
    // In range: KPL_MAGIC.len() <= framed.len() <= data.len().
    let body = data.slice(KPL_MAGIC.len()..framed.len());
    if Md5::digest(&body).as_slice() != expected_digest.as_slice() {
        return Err(KplError::DigestMismatch);
    }

    let message = AggregatedRecord::decode(body).map_err(KplError::Decode)?;
    for record in &message.records {
        if record.partition_key_index.is_none() {
            return Err(KplError::MissingField {
                field: "Record.partition_key_index",
            });
        }
        if record.data.is_none() {
            return Err(KplError::MissingField {
                field: "Record.data",
            });
        }
        if record.tags.iter().any(|tag| tag.key.is_none()) {
            return Err(KplError::MissingField { field: "Tag.key" });
        }
    }
    if message.records.is_empty() {
        return Err(KplError::NoRecords);
    }

    let partition_keys = lossy_strings(&message.partition_key_table);
    let explicit_hash_keys = lossy_strings(&message.explicit_hash_key_table);
    let mut user_records = Vec::with_capacity(message.records.len());
    for (sub_sequence_number, record) in (0u64..).zip(message.records) {
        let pk_index = record.partition_key_index.unwrap_or_default();
        let partition_key = lookup(&partition_keys, pk_index)
            .ok_or(KplError::PartitionKeyIndexOutOfRange {
                index: pk_index,
                table_len: partition_keys.len(),
            })?
            .to_owned();
        let explicit_hash_key = match record.explicit_hash_key_index {
            None => None,
            Some(index) => Some(
                lookup(&explicit_hash_keys, index)
                    .ok_or(KplError::ExplicitHashKeyIndexOutOfRange {
                        index,
                        table_len: explicit_hash_keys.len(),
                    })?
                    .to_owned(),
            ),
        };
        user_records.push(UserRecord {
            sub_sequence_number,
            partition_key,
            explicit_hash_key,
            data: record.data.unwrap_or_default(),
        });
    }
    Ok(Some(user_records))
}

/// Builds a KPL aggregated record (magic, protobuf, MD5) from
/// `(partition_key, explicit_hash_key, data)` triples, in order; user record
/// `i` gets sub-sequence number `i` when deaggregated.
///
/// Partition keys and explicit hash keys are each deduplicated into their
/// table in first-seen order, as the KPL does (`KinesisRecord::after_add` in
/// awslabs/amazon-kinesis-producer); `explicit_hash_key_index` is set only
/// for records with an explicit hash key. Unlike the KPL, a single record is
/// still wrapped in an aggregate, an empty slice gives an aggregate with no
/// user records (which [`deaggregate`] rejects with [`KplError::NoRecords`]),
/// and no Kinesis limit (1 MiB per record, 256-byte keys) is enforced.
/// Used by tests (the end-to-end producer has its own, written
/// independently).
///
/// Source: `aggregation-format.md` in awslabs/amazon-kinesis-producer.
#[cfg(test)]
#[must_use]
pub fn aggregate(records: &[(String, Option<String>, Vec<u8>)]) -> Vec<u8> {
    let mut partition_keys = KeyTable::default();
    let mut explicit_hash_keys = KeyTable::default();
    let mut message = AggregatedRecord {
        records: Vec::with_capacity(records.len()),
        ..AggregatedRecord::default()
    };
    for (partition_key, explicit_hash_key, data) in records {
        message.records.push(Record {
            partition_key_index: Some(partition_keys.index_of(partition_key)),
            explicit_hash_key_index: explicit_hash_key
                .as_deref()
                .map(|key| explicit_hash_keys.index_of(key)),
            data: Some(Bytes::copy_from_slice(data)),
            tags: Vec::new(),
        });
    }
    message.partition_key_table = partition_keys.keys;
    message.explicit_hash_key_table = explicit_hash_keys.keys;

    let body = message.encode_to_vec();
    let mut out = Vec::with_capacity(MIN_AGGREGATE_LEN + body.len());
    out.extend_from_slice(&KPL_MAGIC);
    out.extend_from_slice(&body);
    out.extend_from_slice(Md5::digest(&body).as_slice());
    out
}

/// Converts protobuf string bytes to `String`s, replacing invalid UTF-8.
fn lossy_strings(table: &[Bytes]) -> Vec<String> {
    table
        .iter()
        .map(|key| String::from_utf8_lossy(key).into_owned())
        .collect()
}

/// The table entry at a protobuf `uint64` index, if in range.
fn lookup(table: &[String], index: u64) -> Option<&str> {
    let index = usize::try_from(index).ok()?;
    table.get(index).map(String::as_str)
}

/// A key table under construction: keys in first-seen order, deduplicated.
#[derive(Default)]
#[cfg(test)]
struct KeyTable<'a> {
    keys: Vec<Bytes>,
    index: HashMap<&'a str, u64>,
}

#[cfg(test)]
impl<'a> KeyTable<'a> {
    /// Index of `key` in the table, appending it if new.
    fn index_of(&mut self, key: &'a str) -> u64 {
        let next = self.index.len() as u64;
        *self.index.entry(key).or_insert_with(|| {
            self.keys.push(Bytes::copy_from_slice(key.as_bytes()));
            next
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::error::Error as _;

    use proptest::prelude::*;

    use super::*;

    type Triple = (String, Option<String>, Vec<u8>);

    fn triple(pk: &str, ehk: Option<&str>, data: &[u8]) -> Triple {
        (pk.to_owned(), ehk.map(str::to_owned), data.to_vec())
    }

    /// Wraps protobuf bytes in magic and a correct digest.
    fn frame(body: &[u8]) -> Bytes {
        let mut out = KPL_MAGIC.to_vec();
        out.extend_from_slice(body);
        out.extend_from_slice(Md5::digest(body).as_slice());
        Bytes::from(out)
    }

    fn record(pk_index: Option<u64>, ehk_index: Option<u64>, data: Option<&[u8]>) -> Record {
        Record {
            partition_key_index: pk_index,
            explicit_hash_key_index: ehk_index,
            data: data.map(Bytes::copy_from_slice),
            tags: Vec::new(),
        }
    }

    fn message(pks: &[&str], ehks: &[&str], records: Vec<Record>) -> Bytes {
        let table = |keys: &[&str]| {
            keys.iter()
                .map(|k| Bytes::copy_from_slice(k.as_bytes()))
                .collect()
        };
        let msg = AggregatedRecord {
            partition_key_table: table(pks),
            explicit_hash_key_table: table(ehks),
            records,
        };
        frame(&msg.encode_to_vec())
    }

    fn body_of(aggregate: &[u8]) -> AggregatedRecord {
        let body = &aggregate[KPL_MAGIC.len()..aggregate.len() - DIGEST_LEN];
        AggregatedRecord::decode(body).unwrap()
    }

    fn assert_shares_buffer(input: &Bytes, records: &[UserRecord]) {
        let range = input.as_ptr_range();
        for r in records.iter().filter(|r| !r.data.is_empty()) {
            let data = r.data.as_ptr_range();
            assert!(
                range.start <= data.start && data.end <= range.end,
                "user record {} data was copied",
                r.sub_sequence_number
            );
        }
    }

    #[test]
    fn magic_matches_format_doc() {
        assert_eq!(KPL_MAGIC, [0xF3, 0x89, 0x9A, 0xC2]);
        // The KCL's Java constant {-13, -119, -102, -62}.
        assert_eq!(
            KPL_MAGIC,
            [-13i8, -119, -102, -62].map(|b| b.to_ne_bytes()[0])
        );
    }

    #[test]
    fn plain_records_are_not_aggregated() {
        for data in [
            &b""[..],
            &b"hello world"[..],
            &KPL_MAGIC[..3],
            &[
                0xF3, 0x89, 0x9A, 0x00, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
            ][..],
            &[0x89, 0xF3, 0x9A, 0xC2][..],
        ] {
            assert!(matches!(
                deaggregate(&Bytes::copy_from_slice(data)),
                Ok(None)
            ));
        }
        // The first three magic bytes followed by an otherwise valid frame.
        let mut almost = aggregate(&[triple("pk", None, b"x")]);
        almost[3] = 0;
        assert!(matches!(deaggregate(&Bytes::from(almost)), Ok(None)));
    }

    #[test]
    fn decodes_hand_encoded_wire_bytes() {
        // partition_key_table = ["a", "b"], explicit_hash_key_table = ["7"],
        // records = [{pk 1, ehk 0, data "hi"}, {pk 0, data ""}].
        let body = [
            0x0A, 0x01, b'a', // field 1, "a"
            0x0A, 0x01, b'b', // field 1, "b"
            0x12, 0x01, b'7', // field 2, "7"
            0x1A, 0x08, 0x08, 0x01, 0x10, 0x00, 0x1A, 0x02, b'h', b'i', // field 3
            0x1A, 0x04, 0x08, 0x00, 0x1A, 0x00, // field 3
        ];
        let records = deaggregate(&frame(&body)).unwrap().unwrap();
        assert_eq!(
            records,
            vec![
                UserRecord {
                    sub_sequence_number: 0,
                    partition_key: "b".into(),
                    explicit_hash_key: Some("7".into()),
                    data: Bytes::from_static(b"hi"),
                },
                UserRecord {
                    sub_sequence_number: 1,
                    partition_key: "a".into(),
                    explicit_hash_key: None,
                    data: Bytes::new(),
                },
            ]
        );
    }

    #[test]
    fn aggregate_emits_expected_wire_bytes() {
        let out = aggregate(&[triple("a", Some("7"), b"hi"), triple("a", None, b"")]);
        let body = [
            0x0A, 0x01, b'a', 0x12, 0x01, b'7', 0x1A, 0x08, 0x08, 0x00, 0x10, 0x00, 0x1A, 0x02,
            b'h', b'i', 0x1A, 0x04, 0x08, 0x00, 0x1A, 0x00,
        ];
        assert_eq!(out, frame(&body));
    }

    #[test]
    fn sub_sequence_numbers_follow_record_order() {
        let input: Vec<Triple> = (0..10)
            .map(|i| triple(&format!("pk{}", i % 3), None, &[i]))
            .collect();
        let records = deaggregate(&Bytes::from(aggregate(&input)))
            .unwrap()
            .unwrap();
        assert_eq!(records.len(), 10);
        for (i, r) in records.iter().enumerate() {
            assert_eq!(r.sub_sequence_number, i as u64);
            assert_eq!(r.data.as_ref(), &[i as u8]);
            assert_eq!(r.partition_key, format!("pk{}", i % 3));
        }
    }

    #[test]
    fn single_record_is_still_aggregated() {
        let out = Bytes::from(aggregate(&[triple("k", None, b"only")]));
        assert!(out.starts_with(&KPL_MAGIC));
        let records = deaggregate(&out).unwrap().unwrap();
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].sub_sequence_number, 0);
        assert_eq!(records[0].data, Bytes::from_static(b"only"));
    }

    #[test]
    fn explicit_hash_keys_are_optional_and_deduplicated() {
        let input = [
            triple("a", Some("340282366920938463463374607431768211455"), b"1"),
            triple("b", None, b"2"),
            triple("c", Some("0"), b"3"),
            triple("a", Some("340282366920938463463374607431768211455"), b"4"),
        ];
        let out = aggregate(&input);
        let msg = body_of(&out);
        assert_eq!(msg.explicit_hash_key_table.len(), 2);
        assert_eq!(msg.records[1].explicit_hash_key_index, None);
        assert_eq!(msg.records[3].explicit_hash_key_index, Some(0));
        let records = deaggregate(&Bytes::from(out)).unwrap().unwrap();
        let ehks: Vec<_> = records
            .iter()
            .map(|r| r.explicit_hash_key.as_deref())
            .collect();
        assert_eq!(
            ehks,
            [
                Some("340282366920938463463374607431768211455"),
                None,
                Some("0"),
                Some("340282366920938463463374607431768211455"),
            ]
        );
    }

    #[test]
    fn partition_keys_are_deduplicated_in_first_seen_order() {
        let input = [
            triple("b", None, b""),
            triple("a", None, b""),
            triple("b", None, b""),
            triple("", None, b""),
            triple("a", None, b""),
        ];
        let msg = body_of(&aggregate(&input));
        let table: Vec<&[u8]> = msg.partition_key_table.iter().map(|k| k.as_ref()).collect();
        assert_eq!(table, [&b"b"[..], b"a", b""]);
        let indices: Vec<_> = msg.records.iter().map(|r| r.partition_key_index).collect();
        assert_eq!(indices, [Some(0), Some(1), Some(0), Some(2), Some(1)]);
    }

    #[test]
    fn data_is_not_copied() {
        let input: Vec<Triple> = (0..20u8)
            .map(|i| triple("pk", None, &vec![i; usize::from(i) * 7]))
            .collect();
        let bytes = Bytes::from(aggregate(&input));
        let records = deaggregate(&bytes).unwrap().unwrap();
        assert_eq!(records.len(), 20);
        assert_shares_buffer(&bytes, &records);
    }

    #[test]
    fn tags_are_ignored() {
        #[derive(Clone, PartialEq, Message)]
        struct FullTag {
            #[prost(string, optional, tag = "1")]
            key: Option<String>,
            #[prost(string, optional, tag = "2")]
            value: Option<String>,
        }
        let tag = FullTag {
            key: Some("k".into()),
            value: Some("v".into()),
        };
        let keyless = FullTag {
            key: None,
            value: Some("v".into()),
        };
        // Record {pk 0, data "d", tags [tag, valueless tag]}.
        let mut rec = vec![0x08, 0x00, 0x1A, 0x01, b'd'];
        for t in [
            tag.clone(),
            FullTag {
                key: Some("k2".into()),
                value: None,
            },
        ] {
            rec.push(0x22);
            t.encode_length_delimited(&mut rec).unwrap();
        }
        let mut body = vec![0x0A, 0x01, b'p', 0x1A, rec.len() as u8];
        body.extend_from_slice(&rec);
        let records = deaggregate(&frame(&body)).unwrap().unwrap();
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].data, Bytes::from_static(b"d"));

        // A tag without its required key makes the message invalid.
        let mut rec = vec![0x08, 0x00, 0x1A, 0x01, b'd', 0x22];
        keyless.encode_length_delimited(&mut rec).unwrap();
        let mut body = vec![0x0A, 0x01, b'p', 0x1A, rec.len() as u8];
        body.extend_from_slice(&rec);
        assert!(matches!(
            deaggregate(&frame(&body)),
            Err(KplError::MissingField { field: "Tag.key" })
        ));
    }

    #[test]
    fn invalid_utf8_keys_are_replaced_like_protobuf_java() {
        let body = [
            0x0A, 0x02, b'a', 0xFF, // partition key "a\xFF"
            0x12, 0x01, 0xC3, // explicit hash key "\xC3"
            0x1A, 0x07, 0x08, 0x00, 0x10, 0x00, 0x1A, 0x01, b'x',
        ];
        let records = deaggregate(&frame(&body)).unwrap().unwrap();
        assert_eq!(records[0].partition_key, "a\u{FFFD}");
        assert_eq!(records[0].explicit_hash_key.as_deref(), Some("\u{FFFD}"));
    }

    #[test]
    fn unknown_fields_are_skipped() {
        // Field 9 (varint) at top level and field 7 (bytes) inside the record.
        let body = [
            0x48, 0x05, 0x0A, 0x01, b'p', 0x1A, 0x08, 0x08, 0x00, 0x3A, 0x01, b'z', 0x1A, 0x01,
            b'x',
        ];
        let records = deaggregate(&frame(&body)).unwrap().unwrap();
        assert_eq!(records[0].data, Bytes::from_static(b"x"));
    }

    #[test]
    fn error_too_short() {
        for len in 0..=15 {
            let mut data = KPL_MAGIC.to_vec();
            data.resize(KPL_MAGIC.len() + len, 0);
            let err = deaggregate(&Bytes::from(data)).unwrap_err();
            assert!(
                matches!(err, KplError::TooShort { len: l } if l == len + 4),
                "{err:?}"
            );
        }
        let err = deaggregate(&Bytes::from_static(&KPL_MAGIC)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kpl record too short: 4 bytes, need at least 20"
        );
    }

    #[test]
    fn error_digest_mismatch() {
        let mut data = aggregate(&[triple("pk", None, b"payload")]);
        let last = data.len() - 1;
        data[last] ^= 1;
        let err = deaggregate(&Bytes::from(data)).unwrap_err();
        assert!(matches!(err, KplError::DigestMismatch));
        assert_eq!(err.to_string(), "kpl digest mismatch");

        let mut data = aggregate(&[triple("pk", None, b"payload")]);
        data[6] ^= 0x40;
        assert!(matches!(
            deaggregate(&Bytes::from(data)),
            Err(KplError::DigestMismatch)
        ));
    }

    #[test]
    fn error_decode() {
        // Field 1 announces 10 bytes but only 1 follows.
        let err = deaggregate(&frame(&[0x0A, 0x0A, b'a'])).unwrap_err();
        assert!(matches!(err, KplError::Decode(_)), "{err:?}");
        assert_eq!(err.to_string(), "kpl protobuf decode error");
        assert!(err.source().is_some());
        // Invalid wire type 7.
        assert!(matches!(
            deaggregate(&frame(&[0x0F])),
            Err(KplError::Decode(_))
        ));
        // Unterminated varint.
        assert!(matches!(
            deaggregate(&frame(&[0x1A, 0x03, 0x08, 0xFF, 0xFF])),
            Err(KplError::Decode(_))
        ));
    }

    #[test]
    fn error_missing_required_fields() {
        let no_pk = message(&["p"], &[], vec![record(None, None, Some(b"d"))]);
        assert!(matches!(
            deaggregate(&no_pk),
            Err(KplError::MissingField {
                field: "Record.partition_key_index"
            })
        ));
        let no_data = message(&["p"], &[], vec![record(Some(0), None, None)]);
        let err = deaggregate(&no_data).unwrap_err();
        assert!(matches!(
            err,
            KplError::MissingField {
                field: "Record.data"
            }
        ));
        assert_eq!(err.to_string(), "kpl required field missing: Record.data");
        // A missing field anywhere wins over a bad index earlier on, as in
        // protobuf-java where parsing fails before any lookup.
        let both = message(
            &[],
            &[],
            vec![
                record(Some(5), None, Some(b"")),
                record(Some(0), None, None),
            ],
        );
        assert!(matches!(
            deaggregate(&both),
            Err(KplError::MissingField { .. })
        ));
    }

    #[test]
    fn error_partition_key_index_out_of_range() {
        let bad = message(
            &["a", "b"],
            &[],
            vec![
                record(Some(1), None, Some(b"ok")),
                record(Some(2), None, Some(b"bad")),
            ],
        );
        let err = deaggregate(&bad).unwrap_err();
        assert!(matches!(
            err,
            KplError::PartitionKeyIndexOutOfRange {
                index: 2,
                table_len: 2
            }
        ));
        assert_eq!(
            err.to_string(),
            "kpl partition key index out of range: index 2, table length 2"
        );
        // Empty partition key table.
        let empty = message(&[], &[], vec![record(Some(0), None, Some(b""))]);
        assert!(matches!(
            deaggregate(&empty),
            Err(KplError::PartitionKeyIndexOutOfRange {
                index: 0,
                table_len: 0
            })
        ));
        // An index that does not fit 32 bits is not truncated.
        let huge = message(&["a"], &[], vec![record(Some(1 << 32), None, Some(b""))]);
        assert!(matches!(
            deaggregate(&huge),
            Err(KplError::PartitionKeyIndexOutOfRange {
                index: 0x1_0000_0000,
                table_len: 1
            })
        ));
        let max = message(&["a"], &[], vec![record(Some(u64::MAX), None, Some(b""))]);
        assert!(matches!(
            deaggregate(&max),
            Err(KplError::PartitionKeyIndexOutOfRange {
                index: u64::MAX,
                ..
            })
        ));
    }

    #[test]
    fn error_explicit_hash_key_index_out_of_range() {
        let bad = message(&["a"], &["1"], vec![record(Some(0), Some(1), Some(b"x"))]);
        let err = deaggregate(&bad).unwrap_err();
        assert!(matches!(
            err,
            KplError::ExplicitHashKeyIndexOutOfRange {
                index: 1,
                table_len: 1
            }
        ));
        assert_eq!(
            err.to_string(),
            "kpl explicit hash key index out of range: index 1, table length 1"
        );
        let empty = message(&["a"], &[], vec![record(Some(0), Some(0), Some(b"x"))]);
        assert!(matches!(
            deaggregate(&empty),
            Err(KplError::ExplicitHashKeyIndexOutOfRange {
                index: 0,
                table_len: 0
            })
        ));
        // The partition key is looked up first, as in the KCL.
        let both = message(&[], &[], vec![record(Some(0), Some(0), Some(b"x"))]);
        assert!(matches!(
            deaggregate(&both),
            Err(KplError::PartitionKeyIndexOutOfRange { .. })
        ));
    }

    #[test]
    fn error_no_records() {
        let err = deaggregate(&Bytes::from(aggregate(&[]))).unwrap_err();
        assert!(matches!(err, KplError::NoRecords));
        assert_eq!(err.to_string(), "kpl aggregate has no user records");
        // Exactly magic + digest of the empty message: 20 bytes.
        assert_eq!(frame(&[]).len(), MIN_AGGREGATE_LEN);
        assert!(matches!(deaggregate(&frame(&[])), Err(KplError::NoRecords)));
        // Key tables but no records.
        let tables_only = message(&["a", "b"], &["1"], vec![]);
        assert!(matches!(
            deaggregate(&tables_only),
            Err(KplError::NoRecords)
        ));
    }

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => "[a-c]{0,2}",
            1 => "\\PC{0,12}",
        ]
    }

    fn triples() -> impl Strategy<Value = Vec<Triple>> {
        proptest::collection::vec(
            (
                key(),
                proptest::option::of(prop_oneof!["[0-9]{1,3}", "\\PC{0,8}"]),
                proptest::collection::vec(any::<u8>(), 0..48),
            ),
            0..24,
        )
    }

    proptest! {
        #[test]
        fn round_trip(input in triples()) {
            let bytes = Bytes::from(aggregate(&input));
            prop_assert!(bytes.starts_with(&KPL_MAGIC));
            let result = deaggregate(&bytes);
            if input.is_empty() {
                prop_assert!(matches!(result, Err(KplError::NoRecords)));
                return Ok(());
            }
            let records = result.unwrap().unwrap();
            prop_assert_eq!(records.len(), input.len());
            for (i, (r, (pk, ehk, data))) in records.iter().zip(&input).enumerate() {
                prop_assert_eq!(r.sub_sequence_number, i as u64);
                prop_assert_eq!(&r.partition_key, pk);
                prop_assert_eq!(&r.explicit_hash_key, ehk);
                prop_assert_eq!(r.data.as_ref(), data.as_slice());
            }
            assert_shares_buffer(&bytes, &records);

            // Tables hold each distinct key exactly once.
            let msg = body_of(&bytes);
            let pks: HashSet<&String> = input.iter().map(|t| &t.0).collect();
            let ehks: HashSet<&String> = input.iter().filter_map(|t| t.1.as_ref()).collect();
            prop_assert_eq!(msg.partition_key_table.len(), pks.len());
            prop_assert_eq!(msg.explicit_hash_key_table.len(), ehks.len());
        }

        #[test]
        fn indices_checked_against_tables(
            pk_table_len in 0usize..4,
            ehk_table_len in 0usize..4,
            recs in proptest::collection::vec(
                (0u64..6, proptest::option::of(0u64..6), proptest::collection::vec(any::<u8>(), 0..8)),
                0..8,
            ),
        ) {
            let pks: Vec<String> = (0..pk_table_len).map(|i| format!("pk{i}")).collect();
            let ehks: Vec<String> = (0..ehk_table_len).map(|i| i.to_string()).collect();
            let pk_refs: Vec<&str> = pks.iter().map(String::as_str).collect();
            let ehk_refs: Vec<&str> = ehks.iter().map(String::as_str).collect();
            let bytes = message(
                &pk_refs,
                &ehk_refs,
                recs.iter().map(|(p, e, d)| record(Some(*p), *e, Some(d))).collect(),
            );
            let result = deaggregate(&bytes);

            // Model: the first bad index in record order, partition key first.
            let first_bad = recs.iter().find_map(|(p, e, _)| {
                if *p >= pk_table_len as u64 {
                    Some((true, *p))
                } else {
                    e.filter(|e| *e >= ehk_table_len as u64).map(|e| (false, e))
                }
            });
            match (recs.is_empty(), first_bad, result) {
                (true, _, Err(KplError::NoRecords)) => {}
                (false, Some((true, i)), Err(KplError::PartitionKeyIndexOutOfRange { index, table_len })) => {
                    prop_assert_eq!((index, table_len), (i, pk_table_len));
                }
                (false, Some((false, i)), Err(KplError::ExplicitHashKeyIndexOutOfRange { index, table_len })) => {
                    prop_assert_eq!((index, table_len), (i, ehk_table_len));
                }
                (false, None, Ok(Some(records))) => {
                    prop_assert_eq!(records.len(), recs.len());
                    for (r, (p, e, d)) in records.iter().zip(&recs) {
                        prop_assert_eq!(&r.partition_key, &pks[*p as usize]);
                        prop_assert_eq!(r.explicit_hash_key.as_ref(), e.map(|e| &ehks[e as usize]));
                        prop_assert_eq!(r.data.as_ref(), d.as_slice());
                    }
                }
                (empty, bad, other) => {
                    prop_assert!(false, "empty={} bad={:?} got {:?}", empty, bad, other);
                }
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..256)) {
            let bytes = Bytes::from(data);
            let result = deaggregate(&bytes);
            if !bytes.starts_with(&KPL_MAGIC) {
                prop_assert!(matches!(result, Ok(None)));
            }
        }

        #[test]
        fn arbitrary_bytes_after_magic_never_panic(
            tail in proptest::collection::vec(any::<u8>(), 0..256),
        ) {
            let mut data = KPL_MAGIC.to_vec();
            data.extend_from_slice(&tail);
            let result = deaggregate(&Bytes::from(data));
            prop_assert!(!matches!(result, Ok(None)));
            if tail.len() < DIGEST_LEN {
                prop_assert!(matches!(result, Err(KplError::TooShort { .. })), "{:?}", result);
            }
        }

        #[test]
        fn arbitrary_body_with_valid_digest_never_panics(
            body in proptest::collection::vec(any::<u8>(), 0..256),
        ) {
            let bytes = frame(&body);
            match deaggregate(&bytes) {
                Ok(Some(records)) => {
                    prop_assert!(!records.is_empty());
                    assert_shares_buffer(&bytes, &records);
                }
                Ok(None) | Err(KplError::TooShort { .. } | KplError::DigestMismatch) => {
                    prop_assert!(false, "framing not accepted");
                }
                Err(_) => {}
            }
        }

        #[test]
        fn mutated_aggregates_never_panic(
            input in triples(),
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6),
        ) {
            let out = aggregate(&input);
            let mut body = out[KPL_MAGIC.len()..out.len() - DIGEST_LEN].to_vec();
            for (at, byte, op) in edits {
                let i = at.index(body.len() + 1);
                match op {
                    0 if i < body.len() => body[i] = byte,
                    1 => body.insert(i, byte),
                    _ if i < body.len() => { body.remove(i); }
                    _ => {}
                }
            }
            let bytes = frame(&body);
            if let Ok(Some(records)) = deaggregate(&bytes) {
                prop_assert!(!records.is_empty());
                for (i, r) in records.iter().enumerate() {
                    prop_assert_eq!(r.sub_sequence_number, i as u64);
                }
                assert_shares_buffer(&bytes, &records);
            }
        }
    }
}

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
mod tests;

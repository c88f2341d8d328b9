//! A KPL aggregated-record builder, independent of the daemon's own code, so
//! the end-to-end tests check the daemon's deaggregation against a second
//! implementation of the format.
//!
//! Format (`aggregation-format.md` in awslabs/amazon-kinesis-producer,
//! <https://github.com/awslabs/amazon-kinesis-producer/blob/master/aggregation-format.md>):
//! the magic bytes `F3 89 9A C2`, a protobuf `AggregatedRecord`, and the
//! 16-byte MD5 digest of the protobuf bytes.
//!
//! ```text
//! message AggregatedRecord {
//!   repeated string partition_key_table     = 1;
//!   repeated string explicit_hash_key_table = 2;
//!   repeated Record records                 = 3;
//! }
//! message Record {
//!   required uint64 partition_key_index     = 1;
//!   optional uint64 explicit_hash_key_index = 2;
//!   required bytes  data                    = 3;
//! }
//! ```
//!
//! The protobuf is encoded by hand (varints and length-delimited fields).

use md5::{Digest as _, Md5};

/// The 4 bytes that start every KPL aggregated record.
pub const KPL_MAGIC: [u8; 4] = [0xF3, 0x89, 0x9A, 0xC2];

/// Protobuf wire type 0: varint.
const WIRE_VARINT: u8 = 0;
/// Protobuf wire type 2: length-delimited.
const WIRE_LEN: u8 = 2;

/// Builds one KPL aggregated record from user records
/// `(partition key, explicit hash key, data)`, in order: user record `i`
/// gets sub-sequence number `i`. Equal keys share one table entry, as the
/// KPL does.
pub fn aggregate(records: &[(String, Option<String>, Vec<u8>)]) -> Vec<u8> {
    let mut partition_keys: Vec<&str> = Vec::new();
    let mut hash_keys: Vec<&str> = Vec::new();
    let mut encoded_records = Vec::with_capacity(records.len());
    for (partition_key, explicit_hash_key, data) in records {
        let pk_index = index_of(&mut partition_keys, partition_key);
        let mut record = Vec::with_capacity(data.len() + 16);
        put_tag(&mut record, 1, WIRE_VARINT);
        put_varint(&mut record, pk_index);
        if let Some(ehk) = explicit_hash_key {
            let ehk_index = index_of(&mut hash_keys, ehk);
            put_tag(&mut record, 2, WIRE_VARINT);
            put_varint(&mut record, ehk_index);
        }
        // `data` is required: written even when empty.
        put_bytes_field(&mut record, 3, data);
        encoded_records.push(record);
    }

    let mut message = Vec::new();
    for key in &partition_keys {
        put_bytes_field(&mut message, 1, key.as_bytes());
    }
    for key in &hash_keys {
        put_bytes_field(&mut message, 2, key.as_bytes());
    }
    for record in &encoded_records {
        put_bytes_field(&mut message, 3, record);
    }

    let digest = Md5::digest(&message);
    let mut out = Vec::with_capacity(KPL_MAGIC.len() + message.len() + digest.len());
    out.extend_from_slice(&KPL_MAGIC);
    out.extend_from_slice(&message);
    out.extend_from_slice(&digest);
    out
}

/// Bytes [`aggregate`] adds around the user data for one record with the
/// given key sizes (an upper bound, for staying under the 1 MiB limit).
pub fn overhead_bound(
    partition_key_len: usize,
    explicit_hash_key_len: usize,
    data_len: usize,
) -> usize {
    // Tags and varint lengths: at most 1 + 10 bytes per field.
    partition_key_len + explicit_hash_key_len + data_len + 6 * 11
}

fn index_of<'a>(table: &mut Vec<&'a str>, key: &'a str) -> u64 {
    let position = match table.iter().position(|k| *k == key) {
        Some(position) => position,
        None => {
            table.push(key);
            table.len() - 1
        }
    };
    u64::try_from(position).expect("a table index fits in u64")
}

fn put_tag(out: &mut Vec<u8>, field: u64, wire_type: u8) {
    put_varint(out, (field << 3) | u64::from(wire_type));
}

fn put_bytes_field(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    put_tag(out, field, WIRE_LEN);
    put_varint(
        out,
        u64::try_from(bytes.len()).expect("a length fits in u64"),
    );
    out.extend_from_slice(bytes);
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        // Low 7 bits with the continuation bit; the cast keeps those bits.
        out.push((value as u8 & 0x7F) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints() {
        let mut out = Vec::new();
        put_varint(&mut out, 0);
        put_varint(&mut out, 1);
        put_varint(&mut out, 127);
        put_varint(&mut out, 128);
        put_varint(&mut out, 300);
        put_varint(&mut out, u64::MAX);
        assert_eq!(
            out,
            [
                0x00, 0x01, 0x7F, 0x80, 0x01, 0xAC, 0x02, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
                0xFF, 0xFF, 0x01
            ]
        );
    }

    #[test]
    fn known_layout() {
        let records = vec![
            ("a".to_owned(), None, b"xy".to_vec()),
            ("b".to_owned(), Some("7".to_owned()), Vec::new()),
            ("a".to_owned(), None, b"z".to_vec()),
        ];
        let bytes = aggregate(&records);
        let message = &bytes[4..bytes.len() - 16];
        assert_eq!(&bytes[..4], &KPL_MAGIC);
        #[rustfmt::skip]
        let expected: &[u8] = &[
            0x0A, 1, b'a',                  // partition_key_table[0]
            0x0A, 1, b'b',                  // partition_key_table[1]
            0x12, 1, b'7',                  // explicit_hash_key_table[0]
            0x1A, 6, 0x08, 0, 0x1A, 2, b'x', b'y',   // records[0]
            0x1A, 6, 0x08, 1, 0x10, 0, 0x1A, 0,      // records[1]
            0x1A, 5, 0x08, 0, 0x1A, 1, b'z',         // records[2]
        ];
        assert_eq!(message, expected);
        assert_eq!(&bytes[bytes.len() - 16..], Md5::digest(message).as_slice());
    }
}

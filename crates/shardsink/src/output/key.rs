//! Object keys: `{prefix}/{yyyy}/{MM}/{dd}/{HH}/{mm}/{shardId}/{sorter}-{first}-{last}{ext}`.
//!
//! - The minute path is the UTC minute of the records' arrival time, so the
//!   same records always land under the same prefix.
//! - The shard id keeps ranges of different shards apart (sequence numbers
//!   are unique only within a shard).
//! - `first` and `last` are the batch's first and last Kinesis sequence
//!   numbers in the ascending length-prefixed form of
//!   [`sequence_range::key_encoding`] (`9` → `0019`, `10` → `00210`).
//! - `sorter` is the descending form of `first`: S3 lists keys in ascending
//!   byte order, so under one shard-minute prefix the newest batch lists first.
//!
//! A key is a pure function of the batch's records (C5 in docs/DESIGN.md).
//! Parsing accepts exactly what [`object_name`] writes; anything else is a
//! [`KeyParseError`], which dedup logs and ignores.

use sequence_range::key_encoding::{
    decode_ascending, decode_descending, encode_ascending, encode_descending,
};
use sequence_range::{KeyDecodeError, SequenceRange};

use crate::config::CompressionCodec;
use crate::output::compression::{codec_from_extension, extension};
use crate::output::minute::Minute;

/// Builds keys under one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLayout {
    /// Validated prefix without trailing slash; may be empty.
    prefix: String,
}

impl KeyLayout {
    /// A layout under `prefix` (no leading or trailing slash; may be empty).
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    /// The prefix (no trailing slash; may be empty).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `{prefix}/{yyyy}/{MM}/{dd}/{HH}/{mm}/{shardId}/`: everything one shard
    /// writes in one minute, and what dedup lists.
    pub fn shard_minute_prefix(&self, minute: Minute, shard_id: &str) -> String {
        if self.prefix.is_empty() {
            format!("{}/{shard_id}/", minute.path())
        } else {
            format!("{}/{}/{shard_id}/", self.prefix, minute.path())
        }
    }

    /// The full key of a batch.
    pub fn object_key(
        &self,
        minute: Minute,
        shard_id: &str,
        range: &SequenceRange,
        codec: CompressionCodec,
    ) -> String {
        let mut key = self.shard_minute_prefix(minute, shard_id);
        key.push_str(&object_name(range, codec));
        key
    }
}

/// What a full object key says: the inverse of [`KeyLayout::object_key`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedKey {
    /// The arrival minute of its records.
    pub minute: Minute,
    /// The shard.
    pub shard_id: String,
    /// The sequence range of the batch.
    pub range: SequenceRange,
    /// The compression of the body.
    pub codec: CompressionCodec,
}

impl KeyLayout {
    /// `{prefix}/`, or nothing for an empty prefix: what every key of this
    /// layout starts with, and what lists them all.
    pub fn list_prefix(&self) -> String {
        if self.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", self.prefix)
        }
    }

    /// Parses a full key written under this layout:
    /// `{prefix}/{yyyy}/{MM}/{dd}/{HH}/{mm}/{shardId}/{name}`.
    ///
    /// # Errors
    /// Why the key is not one this layout writes, for a log line or a
    /// report.
    pub fn parse_key(&self, key: &str) -> Result<ParsedKey, String> {
        let list_prefix = self.list_prefix();
        let rest = key
            .strip_prefix(&list_prefix)
            .ok_or_else(|| format!("not under {list_prefix:?}"))?;
        let segments: Vec<&str> = rest.split('/').collect();
        let [year, month, day, hour, minute, shard_id, name] = segments[..] else {
            return Err(format!(
                "{} path segments after the prefix, not yyyy/MM/dd/HH/mm/shardId/name",
                segments.len()
            ));
        };
        let minute = Minute::parse_path([year, month, day, hour, minute])
            .ok_or_else(|| format!("{year}/{month}/{day}/{hour}/{minute} is not a UTC minute"))?;
        if !is_shard_id(shard_id) {
            return Err(format!("{shard_id:?} is not a shard id"));
        }
        let parsed = parse_object_name(name).map_err(|err| err.to_string())?;
        Ok(ParsedKey {
            minute,
            shard_id: shard_id.to_owned(),
            range: parsed.range,
            codec: parsed.codec,
        })
    }
}

/// A Kinesis shard id: 1-128 of `a-z A-Z 0-9 _ . -` (Kinesis API reference,
/// `ShardId`).
fn is_shard_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// The last key segment: `{sorter}-{first}-{last}{ext}`.
pub fn object_name(range: &SequenceRange, codec: CompressionCodec) -> String {
    let mut name = String::with_capacity(3 * 62 + 12);
    encode_descending(range.first(), &mut name);
    name.push('-');
    encode_ascending(range.first(), &mut name);
    name.push('-');
    encode_ascending(range.last(), &mut name);
    name.push_str(extension(codec));
    name
}

/// What an object name says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectName {
    /// The sequence range of the batch.
    pub range: SequenceRange,
    /// The compression of the body.
    pub codec: CompressionCodec,
}

/// An object name that is not one shardsink writes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyParseError {
    /// Not `{sorter}-{first}-{last}.jsonl[.gz|.zst]`.
    #[error("object name {name:?} is not sorter-first-last.jsonl[.gz|.zst]")]
    Shape {
        /// The name.
        name: String,
    },
    /// A number does not decode.
    #[error("object name {name:?}: {source}")]
    Number {
        /// The name.
        name: String,
        /// The decode error.
        #[source]
        source: KeyDecodeError,
    },
    /// The sorter is not the descending form of `first`, or `first > last`.
    #[error("object name {name:?} is inconsistent: {reason}")]
    Inconsistent {
        /// The name.
        name: String,
        /// What does not match.
        reason: &'static str,
    },
}

/// Parses the last key segment.
///
/// # Errors
/// [`KeyParseError`] for any name [`object_name`] would not produce.
pub fn parse_object_name(name: &str) -> Result<ObjectName, KeyParseError> {
    let shape = || KeyParseError::Shape {
        name: name.to_owned(),
    };
    let dot = name.find('.').ok_or_else(shape)?;
    let (stem, ext) = name.split_at(dot);
    let codec = codec_from_extension(ext).ok_or_else(shape)?;
    let mut parts = stem.split('-');
    let (Some(sorter), Some(first), Some(last), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(shape());
    };
    let number = |source| KeyParseError::Number {
        name: name.to_owned(),
        source,
    };
    let sorted_first = decode_descending(sorter).map_err(number)?;
    let first = decode_ascending(first).map_err(number)?;
    let last = decode_ascending(last).map_err(number)?;
    if sorted_first != first {
        return Err(KeyParseError::Inconsistent {
            name: name.to_owned(),
            reason: "sorter does not match first",
        });
    }
    let range = SequenceRange::new(first, last).map_err(|_| KeyParseError::Inconsistent {
        name: name.to_owned(),
        reason: "first is greater than last",
    })?;
    Ok(ObjectName { range, codec })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use sequence_range::SequenceNumber;

    use super::*;

    fn range(first: &str, last: &str) -> SequenceRange {
        SequenceRange::new(
            SequenceNumber::parse(first).unwrap(),
            SequenceNumber::parse(last).unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn parse_key_inverts_object_key() {
        let minute = Minute::from_millis(1_795_238_823_045);
        for prefix in ["raw/orders", ""] {
            let layout = KeyLayout::new(prefix);
            let key = layout.object_key(
                minute,
                "shardId-000000000003",
                &range("9", "10"),
                CompressionCodec::Gzip,
            );
            assert_eq!(
                layout.parse_key(&key),
                Ok(ParsedKey {
                    minute,
                    shard_id: "shardId-000000000003".to_owned(),
                    range: range("9", "10"),
                    codec: CompressionCodec::Gzip,
                })
            );
        }
        let layout = KeyLayout::new("raw/orders");
        assert!(
            layout
                .parse_key("other/2026/11/21/05/27/s/9980-0019-00210.jsonl")
                .is_err()
        );
        assert!(
            layout
                .parse_key("raw/orders/2026/11/21/05/27/s/notes.txt")
                .is_err()
        );
    }

    #[test]
    fn builds_the_documented_layout() {
        let layout = KeyLayout::new("raw/orders");
        let minute = Minute::from_millis(1_795_238_823_045);
        let key = layout.object_key(
            minute,
            "shardId-000000000003",
            &range("9", "10"),
            CompressionCodec::Zstd,
        );
        assert_eq!(
            key,
            "raw/orders/2026/11/21/05/27/shardId-000000000003/9980-0019-00210.jsonl.zst"
        );
        let bare = KeyLayout::new("").shard_minute_prefix(minute, "shardId-000000000003");
        assert_eq!(bare, "2026/11/21/05/27/shardId-000000000003/");
    }

    #[test]
    fn newest_batch_lists_first_within_a_prefix() {
        let older = object_name(&range("9", "9"), CompressionCodec::None);
        let newer = object_name(&range("10", "12"), CompressionCodec::None);
        let newest = object_name(&range("100", "100"), CompressionCodec::None);
        let mut listed = vec![older.clone(), newest.clone(), newer.clone()];
        listed.sort(); // S3's ascending byte order
        assert_eq!(listed, vec![newest, newer, older]);
    }

    #[test]
    fn rejects_foreign_and_inconsistent_names() {
        for name in [
            "notes.txt",
            "9980-0019-00210",
            "9980-0019-00210.json",
            "9980-0019.jsonl",
            "9980-0019-00210-1.jsonl",
            "abc-0019-00210.jsonl",
            "9980-0019-0019x.jsonl",
        ] {
            assert!(
                parse_object_name(name).is_err(),
                "{name:?} must be rejected"
            );
        }
        // Sorter of 10 with first 9.
        assert!(matches!(
            parse_object_name("99789-0019-00210.jsonl"),
            Err(KeyParseError::Inconsistent { .. })
        ));
        // first > last.
        assert!(matches!(
            parse_object_name("99789-00210-0019.jsonl"),
            Err(KeyParseError::Inconsistent { .. })
        ));
    }

    proptest! {
        #[test]
        fn names_round_trip(a in "[1-9][0-9]{0,60}", b in "[1-9][0-9]{0,60}", codec in 0usize..3) {
            let (a, b) = (SequenceNumber::parse(&a).unwrap(), SequenceNumber::parse(&b).unwrap());
            let (first, last) = if a <= b { (a, b) } else { (b, a) };
            let codec = [CompressionCodec::None, CompressionCodec::Gzip, CompressionCodec::Zstd][codec];
            let r = SequenceRange::new(first, last).unwrap();
            let parsed = parse_object_name(&object_name(&r, codec)).unwrap();
            prop_assert_eq!(parsed, ObjectName { range: r, codec });
        }

        #[test]
        fn parse_never_panics(name in "\\PC{0,200}") {
            let _ = parse_object_name(&name);
        }
    }
}

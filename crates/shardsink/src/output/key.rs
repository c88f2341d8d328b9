//! Object keys:
//! `{prefix}/{time path}/{shardId}/{sorter}-{first}-{last}{ext}`.
//!
//! - The time path is the UTC minute or hour of the records' arrival time
//!   ([`Bucket::path`]: `yyyy/MM/dd/HH[/mm]`, or Hive-style
//!   `year=yyyy/month=MM/day=dd/hour=HH[/minute=mm]`), so the same records
//!   always land under the same prefix.
//! - The shard id keeps ranges of different shards apart (sequence numbers
//!   are unique only within a shard).
//! - `first` and `last` are the batch's first and last Kinesis sequence
//!   numbers in the ascending length-prefixed form of
//!   [`sequence_range::key_encoding`] (`9` → `0019`, `10` → `00210`).
//! - `sorter` is the descending form of `first`: S3 lists keys in ascending
//!   byte order, so under one shard's time prefix the newest batch lists
//!   first.
//! - `ext` names the body: [`BodyKind::extension`].
//!
//! A key is a pure function of the batch's records and the layout (C5 in
//! docs/DESIGN.md). Parsing accepts exactly what [`object_name`] writes;
//! anything else is a [`KeyParseError`], which the resume skip logs and ignores.

use sequence_range::key_encoding::{
    decode_ascending, decode_descending, encode_ascending, encode_descending,
};
use sequence_range::{KeyDecodeError, SequenceRange};

use crate::output::body_kind::BodyKind;
pub use crate::output::bucket::KeyStyle;
use crate::output::bucket::{Bucket, TimeBucket};

/// Builds and parses keys under one prefix, with one time bucket and key
/// style.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLayout {
    /// Validated prefix without trailing slash; may be empty.
    prefix: String,
    style: KeyStyle,
    bucket: TimeBucket,
}

impl KeyLayout {
    /// A layout under `prefix` (no leading or trailing slash; may be empty).
    pub fn new(prefix: impl Into<String>, style: KeyStyle, bucket: TimeBucket) -> Self {
        Self {
            prefix: prefix.into(),
            style,
            bucket,
        }
    }

    /// The plain, per-minute layout under `prefix` (the only one before
    /// the layout was a setting).
    pub fn plain(prefix: impl Into<String>) -> Self {
        Self::new(prefix, KeyStyle::Plain, TimeBucket::Minute)
    }

    /// The same style and bucket under another prefix (the error prefix).
    pub fn with_prefix(&self, prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            ..self.clone()
        }
    }

    /// The prefix (no trailing slash; may be empty).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The key style.
    pub fn style(&self) -> KeyStyle {
        self.style
    }

    /// The time bucket.
    pub fn time_bucket(&self) -> TimeBucket {
        self.bucket
    }

    /// The bucket of a record arriving at `arrival_millis`.
    pub fn bucket_of(&self, arrival_millis: i64) -> Bucket {
        Bucket::of(self.bucket, arrival_millis)
    }

    /// `{prefix}/{time path}/{shardId}/`: everything one shard writes in one
    /// bucket, and what the resume skip lists.
    pub fn shard_bucket_prefix(&self, bucket: Bucket, shard_id: &str) -> String {
        debug_assert_eq!(bucket.size(), self.bucket, "bucket of another layout");
        format!(
            "{}{}/{shard_id}/",
            self.list_prefix(),
            bucket.path(self.style)
        )
    }

    /// The full key of a batch.
    pub fn object_key(
        &self,
        bucket: Bucket,
        shard_id: &str,
        range: &SequenceRange,
        body: BodyKind,
    ) -> String {
        let mut key = self.shard_bucket_prefix(bucket, shard_id);
        key.push_str(&object_name(range, body));
        key
    }

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
    /// `{prefix}/{time path}/{shardId}/{name}`.
    ///
    /// # Errors
    /// Why the key is not one this layout writes, for a log line or a
    /// report.
    pub fn parse_key(&self, key: &str) -> Result<ParsedKey, String> {
        let (bucket, shard_id, parsed) = self.parse_key_named(key, parse_object_name)?;
        Ok(ParsedKey {
            bucket,
            shard_id,
            range: parsed.range,
            body: parsed.body,
        })
    }

    /// Parses a full key `{prefix}/{time path}/{shardId}/{name}` of this
    /// layout whose name `parse_name` reads (a main or error object's
    /// [`parse_object_name`], or the name of another object of the batch):
    /// its bucket, shard id and what the name says.
    ///
    /// # Errors
    /// Why the key is not one this layout writes, for a log line or a
    /// report.
    pub fn parse_key_named<T>(
        &self,
        key: &str,
        parse_name: impl FnOnce(&str) -> Result<T, KeyParseError>,
    ) -> Result<(Bucket, String, T), String> {
        let list_prefix = self.list_prefix();
        let rest = key
            .strip_prefix(&list_prefix)
            .ok_or_else(|| format!("not under {list_prefix:?}"))?;
        let segments: Vec<&str> = rest.split('/').collect();
        let time_segments = self.bucket.segment_count();
        let [time @ .., shard_id, name] = &segments[..] else {
            return Err("no shard id and name".to_owned());
        };
        if time.len() != time_segments {
            return Err(format!(
                "{} path segments after the prefix, not {} of time, a shard id and a name ({} {} layout)",
                segments.len(),
                time_segments,
                self.style.as_str(),
                self.bucket.as_str(),
            ));
        }
        let bucket = Bucket::parse_path(self.bucket, self.style, time).ok_or_else(|| {
            format!(
                "{} is not a UTC {} path of the {} layout",
                time.join("/"),
                self.bucket.as_str(),
                self.style.as_str()
            )
        })?;
        if !is_shard_id(shard_id) {
            return Err(format!("{shard_id:?} is not a shard id"));
        }
        let parsed = parse_name(name).map_err(|err| err.to_string())?;
        Ok((bucket, (*shard_id).to_owned(), parsed))
    }
}

/// What a full object key says: the inverse of [`KeyLayout::object_key`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedKey {
    /// The arrival minute or hour of its records.
    pub bucket: Bucket,
    /// The shard.
    pub shard_id: String,
    /// The sequence range of the batch.
    pub range: SequenceRange,
    /// The body's shape and compression.
    pub body: BodyKind,
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
pub fn object_name(range: &SequenceRange, body: BodyKind) -> String {
    named(range, body.extension())
}

/// `{sorter}-{first}-{last}{extension}`: the name of any object that
/// belongs to the batch of `range`.
pub fn named(range: &SequenceRange, extension: &str) -> String {
    let mut name = String::with_capacity(3 * 62 + extension.len());
    encode_descending(range.first(), &mut name);
    name.push('-');
    encode_ascending(range.first(), &mut name);
    name.push('-');
    encode_ascending(range.last(), &mut name);
    name.push_str(extension);
    name
}

/// What an object name says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectName {
    /// The sequence range of the batch.
    pub range: SequenceRange,
    /// The body's shape and compression.
    pub body: BodyKind,
}

/// An object name that is not one shardsink writes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyParseError {
    /// Not `{sorter}-{first}-{last}{ext}` with an extension of
    /// [`BodyKind::extension`].
    #[error(
        "object name {name:?} is not sorter-first-last with .jsonl[.gz|.zst], .raw[.gz|.zst] or .parquet"
    )]
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
    let body = BodyKind::from_extension(ext).ok_or_else(shape)?;
    let range = parse_stem(name, stem)?;
    Ok(ObjectName { range, body })
}

/// Parses `{stem}{extension}` where the stem is `{sorter}-{first}-{last}`
/// and the extension is exactly `extension`.
///
/// # Errors
/// [`KeyParseError`] for any name [`named`] would not produce with it.
pub fn parse_named(name: &str, extension: &str) -> Result<SequenceRange, KeyParseError> {
    let stem = name
        .strip_suffix(extension)
        .filter(|stem| !stem.contains('.'))
        .ok_or_else(|| KeyParseError::Shape {
            name: name.to_owned(),
        })?;
    parse_stem(name, stem)
}

fn parse_stem(name: &str, stem: &str) -> Result<SequenceRange, KeyParseError> {
    let shape = || KeyParseError::Shape {
        name: name.to_owned(),
    };
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
    SequenceRange::new(first, last).map_err(|_| KeyParseError::Inconsistent {
        name: name.to_owned(),
        reason: "first is greater than last",
    })
}

/// The body kind a whole key (`{prefix}/…/{name}`) names, if its name is
/// one shardsink writes: a recorded pending batch's key says what its body
/// was written as.
pub fn body_kind_of_key(key: &str) -> Option<BodyKind> {
    let name = key.rsplit('/').next()?;
    parse_object_name(name).ok().map(|name| name.body)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use sequence_range::SequenceNumber;

    use super::*;
    use crate::output::compression::CompressionCodec;

    fn range(first: &str, last: &str) -> SequenceRange {
        SequenceRange::new(
            SequenceNumber::parse(first).unwrap(),
            SequenceNumber::parse(last).unwrap(),
        )
        .unwrap()
    }

    const ZSTD_LINES: BodyKind = BodyKind::lines(CompressionCodec::Zstd);

    #[test]
    fn parse_key_inverts_object_key() {
        let arrival = 1_795_238_823_045;
        for style in [KeyStyle::Plain, KeyStyle::Hive] {
            for size in [TimeBucket::Minute, TimeBucket::Hour] {
                for prefix in ["raw/orders", ""] {
                    for body in BodyKind::ALL {
                        let layout = KeyLayout::new(prefix, style, size);
                        let bucket = layout.bucket_of(arrival);
                        let key = layout.object_key(
                            bucket,
                            "shardId-000000000003",
                            &range("9", "10"),
                            body,
                        );
                        assert_eq!(
                            layout.parse_key(&key),
                            Ok(ParsedKey {
                                bucket,
                                shard_id: "shardId-000000000003".to_owned(),
                                range: range("9", "10"),
                                body,
                            }),
                            "{key}"
                        );
                        // Another layout does not take it for one of its own.
                        let other = KeyLayout::new(
                            prefix,
                            if style == KeyStyle::Plain {
                                KeyStyle::Hive
                            } else {
                                KeyStyle::Plain
                            },
                            size,
                        );
                        assert!(other.parse_key(&key).is_err(), "{key}");
                        let other = KeyLayout::new(
                            prefix,
                            style,
                            if size == TimeBucket::Minute {
                                TimeBucket::Hour
                            } else {
                                TimeBucket::Minute
                            },
                        );
                        assert!(other.parse_key(&key).is_err(), "{key}");
                    }
                }
            }
        }
        let layout = KeyLayout::plain("raw/orders");
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
        assert!(layout.parse_key("raw/orders/_shardsink.json").is_err());
    }

    #[test]
    fn builds_the_documented_layouts() {
        let arrival = 1_795_238_823_045; // 2026-11-21T05:27:03.045Z
        let key = |style, size| {
            let layout = KeyLayout::new("raw/orders", style, size);
            layout.object_key(
                layout.bucket_of(arrival),
                "shardId-000000000003",
                &range("9", "10"),
                ZSTD_LINES,
            )
        };
        assert_eq!(
            key(KeyStyle::Plain, TimeBucket::Minute),
            "raw/orders/2026/11/21/05/27/shardId-000000000003/9980-0019-00210.jsonl.zst"
        );
        assert_eq!(
            key(KeyStyle::Plain, TimeBucket::Hour),
            "raw/orders/2026/11/21/05/shardId-000000000003/9980-0019-00210.jsonl.zst"
        );
        assert_eq!(
            key(KeyStyle::Hive, TimeBucket::Minute),
            "raw/orders/year=2026/month=11/day=21/hour=05/minute=27/shardId-000000000003/9980-0019-00210.jsonl.zst"
        );
        assert_eq!(
            key(KeyStyle::Hive, TimeBucket::Hour),
            "raw/orders/year=2026/month=11/day=21/hour=05/shardId-000000000003/9980-0019-00210.jsonl.zst"
        );
        let bare = KeyLayout::plain("")
            .shard_bucket_prefix(Bucket::minute(arrival), "shardId-000000000003");
        assert_eq!(bare, "2026/11/21/05/27/shardId-000000000003/");
    }

    #[test]
    fn newest_batch_lists_first_within_a_prefix() {
        let plain = BodyKind::lines(CompressionCodec::None);
        let older = object_name(&range("9", "9"), plain);
        let newer = object_name(&range("10", "12"), plain);
        let newest = object_name(&range("100", "100"), plain);
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
        fn names_round_trip(a in "[1-9][0-9]{0,60}", b in "[1-9][0-9]{0,60}", body in 0usize..BodyKind::ALL.len()) {
            let (a, b) = (SequenceNumber::parse(&a).unwrap(), SequenceNumber::parse(&b).unwrap());
            let (first, last) = if a <= b { (a, b) } else { (b, a) };
            let body = BodyKind::ALL[body];
            let r = SequenceRange::new(first, last).unwrap();
            let parsed = parse_object_name(&object_name(&r, body)).unwrap();
            prop_assert_eq!(parsed, ObjectName { range: r, body });
        }

        #[test]
        fn parse_never_panics(name in "\\PC{0,200}") {
            let _ = parse_object_name(&name);
        }
    }
}

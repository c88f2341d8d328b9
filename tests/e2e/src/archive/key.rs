//! Object keys: building the key the contract prescribes and parsing one
//! strictly (prefix, time path of the layout, shard id, sorter, range,
//! extension).

use chrono::{DateTime, Utc};

use super::Compression;
use super::layout::KeyLayout;
use crate::seq::Seq;

/// What a body is before its compression suffix, from the key's extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Shape {
    /// JSON Lines (`.jsonl`): the `envelope` and `json` formats, and error
    /// objects.
    Lines,
    /// Payloads and delimiters (`.raw`).
    Raw,
    /// Apache Parquet (`.parquet`, compressed inside, by page).
    Parquet,
    /// A batch's event decisions (`.events.zst`, always zstd): JSON lines
    /// under `{prefix}/_events`, one per user record of the batch.
    Decisions,
}

impl Shape {
    /// The extension of a body of this shape compressed with `compression`
    /// (Parquet: always `.parquet`; decisions: always `.events.zst`).
    pub fn extension(self, compression: Compression) -> &'static str {
        match (self, compression) {
            (Self::Decisions, _) => DECISIONS_EXTENSION,
            (Self::Lines, c) => c.extension(),
            (Self::Raw, Compression::None) => ".raw",
            (Self::Raw, Compression::Gzip) => ".raw.gz",
            (Self::Raw, Compression::Zstd) => ".raw.zst",
            (Self::Parquet, _) => ".parquet",
        }
    }

    /// Every (shape, compression) a key of records may name (decisions
    /// objects aside).
    pub const KINDS: [(Self, Compression); 7] = [
        (Self::Lines, Compression::None),
        (Self::Lines, Compression::Gzip),
        (Self::Lines, Compression::Zstd),
        (Self::Raw, Compression::None),
        (Self::Raw, Compression::Gzip),
        (Self::Raw, Compression::Zstd),
        (Self::Parquet, Compression::None),
    ];

    /// The shape and compression `extension` names.
    pub fn from_extension(extension: &str) -> Option<(Self, Compression)> {
        if extension == DECISIONS_EXTENSION {
            return Some((Self::Decisions, Compression::Zstd));
        }
        Self::KINDS
            .into_iter()
            .find(|(shape, compression)| shape.extension(*compression) == extension)
    }
}

/// The extension of decisions objects: not `.jsonl…`, so that a query
/// engine reading `{prefix}/**/*.jsonl.zst` never reads them.
pub const DECISIONS_EXTENSION: &str = ".events.zst";

/// An object key, parsed:
/// `{prefix}/{time path}/{shardId}/{sorter}-{first}-{last}{ext}`, the time
/// path being the layout's (`yyyy/MM/dd/HH[/mm]` or
/// `year=yyyy/month=MM/day=dd/hour=HH[/minute=mm]`) and `ext` one of
/// `.jsonl`, `.raw` (each with `.gz` or `.zst`) or `.parquet`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectKey {
    /// The whole key.
    pub key: String,
    /// The layout the key was parsed with.
    pub layout: KeyLayout,
    /// The start of the key's time bucket: a UTC minute, or an hour with
    /// `--time-bucket hour`.
    pub bucket_start: DateTime<Utc>,
    /// The shard id of the key's path.
    pub shard_id: String,
    /// The sorter as written (descending form of `first`).
    pub sorter: String,
    /// The batch's first sequence number.
    pub first: Seq,
    /// The batch's last sequence number.
    pub last: Seq,
    /// From the extension.
    pub shape: Shape,
    /// From the extension (always [`Compression::None`] for Parquet).
    pub compression: Compression,
}

impl ObjectKey {
    /// Builds the key of a JSON Lines object in the plain, per-minute
    /// layout (for tests that write or predict keys).
    pub fn format(
        prefix: &str,
        minute: DateTime<Utc>,
        shard_id: &str,
        first: &Seq,
        last: &Seq,
        compression: Compression,
    ) -> String {
        Self::format_in(
            KeyLayout::default(),
            prefix,
            minute,
            shard_id,
            first,
            last,
            Shape::Lines.extension(compression),
        )
    }

    /// Builds the key of an object in `layout` whose bucket starts at
    /// `bucket_start`, with the extension `extension` (leading dot).
    pub fn format_in(
        layout: KeyLayout,
        prefix: &str,
        bucket_start: DateTime<Utc>,
        shard_id: &str,
        first: &Seq,
        last: &Seq,
        extension: &str,
    ) -> String {
        format!(
            "{prefix}/{}/{shard_id}/{}-{}-{}{extension}",
            layout.path(bucket_start),
            first.encode_descending(),
            first.encode_ascending(),
            last.encode_ascending(),
        )
    }

    /// Parses `key` in the plain, per-minute layout; it must start with
    /// `{prefix}/`.
    ///
    /// # Errors
    /// A description of the first deviation from the key format.
    pub fn parse(prefix: &str, key: &str) -> Result<Self, String> {
        Self::parse_in(KeyLayout::default(), prefix, key)
    }

    /// Parses `key` in `layout`; it must start with `{prefix}/`.
    ///
    /// # Errors
    /// A description of the first deviation from the key format.
    pub fn parse_in(layout: KeyLayout, prefix: &str, key: &str) -> Result<Self, String> {
        let rest = key
            .strip_prefix(prefix)
            .and_then(|r| r.strip_prefix('/'))
            .ok_or_else(|| format!("not under the prefix {prefix:?}/"))?;
        let parts: Vec<&str> = rest.split('/').collect();
        let [time @ .., shard_id, file] = &parts[..] else {
            return Err("no shard id and file name after the prefix".to_owned());
        };
        if time.len() != layout.bucket.segment_count() {
            return Err(format!(
                "expected {} time segments, a shard id and a file after the prefix ({layout}), \
                 found {} path segments",
                layout.bucket.segment_count(),
                parts.len()
            ));
        }
        let bucket_start = layout.parse_path(time)?;
        if shard_id.is_empty() {
            return Err("empty shard id".to_owned());
        }
        let dot = file
            .find('.')
            .ok_or_else(|| format!("file name {file:?} has no extension"))?;
        let (stem, extension) = file.split_at(dot);
        let (shape, compression) = Shape::from_extension(extension).ok_or_else(|| {
            format!(
                "file name {file:?} does not end in .jsonl, .raw (each with .gz or .zst), \
                 .parquet or {DECISIONS_EXTENSION}"
            )
        })?;
        let fields: Vec<&str> = stem.split('-').collect();
        let [sorter, first, last] = fields[..] else {
            return Err(format!("file name {file:?} is not sorter-first-last"));
        };
        let sorted = Seq::decode_descending(sorter).map_err(|e| format!("sorter: {e}"))?;
        let first = Seq::decode_ascending(first).map_err(|e| format!("first: {e}"))?;
        let last = Seq::decode_ascending(last).map_err(|e| format!("last: {e}"))?;
        if sorted != first {
            return Err(format!(
                "sorter {sorter:?} encodes {sorted}, not the first sequence number {first}"
            ));
        }
        if first > last {
            return Err(format!("first {first} is after last {last}"));
        }
        Ok(Self {
            key: key.to_owned(),
            layout,
            bucket_start,
            shard_id: (*shard_id).to_owned(),
            sorter: sorter.to_owned(),
            first,
            last,
            shape,
            compression,
        })
    }

    /// The key's extension (leading dot).
    pub fn extension(&self) -> &'static str {
        self.shape.extension(self.compression)
    }

    /// `{time path}/{shardId}/{sorter}-{first}-{last}`: the part of the key
    /// a batch's main object and its error object share.
    pub fn batch_path(&self) -> String {
        format!(
            "{}/{}/{}-{}-{}",
            self.layout.path(self.bucket_start),
            self.shard_id,
            self.sorter,
            self.first.encode_ascending(),
            self.last.encode_ascending()
        )
    }

    /// The extension of the error object of a batch whose main object has
    /// this key: `.jsonl` with the main key's compression, `.jsonl.zst` for
    /// Parquet.
    pub fn error_extension(&self) -> &'static str {
        match self.shape {
            Shape::Lines | Shape::Raw => Shape::Lines.extension(self.compression),
            Shape::Parquet | Shape::Decisions => Shape::Lines.extension(Compression::Zstd),
        }
    }

    /// The extension of the duplicates object of a batch whose main object
    /// has this key: that of its error object (JSON Lines, compressed as
    /// error objects are).
    pub fn duplicates_extension(&self) -> &'static str {
        self.error_extension()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::test_support::{minute, seq};

    #[test]
    fn key_round_trip() {
        let key = ObjectKey::format(
            "p/q",
            minute(),
            "shardId-000000000001",
            &seq("9"),
            &seq("10"),
            Compression::Zstd,
        );
        assert_eq!(
            key,
            "p/q/2026/11/21/05/27/shardId-000000000001/9980-0019-00210.jsonl.zst"
        );
        let parsed = ObjectKey::parse("p/q", &key).unwrap();
        assert_eq!(parsed.bucket_start, minute());
        assert_eq!(parsed.shard_id, "shardId-000000000001");
        assert_eq!((parsed.first, parsed.last), (seq("9"), seq("10")));
        assert_eq!(parsed.compression, Compression::Zstd);
    }

    #[test]
    fn bad_keys() {
        for bad in [
            "other/2026/11/21/05/27/s/9980-0019-00210.jsonl",
            "p/2026/11/21/05/27/s/9980-0019-00210.json",
            "p/2026/11/21/05/27/s/9979-0019-00210.jsonl",
            "p/2026/11/21/05/27/s/99789-00210-0019.jsonl",
            "p/2026/11/21/5/27/s/9980-0019-00210.jsonl",
            "p/2026/13/21/05/27/s/9980-0019-00210.jsonl",
            "p/2026/11/21/05/27/9980-0019-00210.jsonl",
            "p/2026/11/21/05/27/s/0019-00210.jsonl",
        ] {
            assert!(ObjectKey::parse("p", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_layout_and_extension() {
        use crate::archive::layout::{KeyStyle, TimeBucket};
        let hive_hour = KeyLayout::new(KeyStyle::Hive, TimeBucket::Hour);
        let start = TimeBucket::Hour.truncate(minute());
        for (shape, compression) in Shape::KINDS {
            let key = ObjectKey::format_in(
                hive_hour,
                "p",
                start,
                "s-1",
                &seq("9"),
                &seq("10"),
                shape.extension(compression),
            );
            let parsed = ObjectKey::parse_in(hive_hour, "p", &key).unwrap();
            assert_eq!((parsed.shape, parsed.compression), (shape, compression));
            assert_eq!(parsed.bucket_start, start);
            assert_eq!(parsed.extension(), shape.extension(compression));
            assert_eq!(
                parsed.batch_path(),
                "year=2026/month=11/day=21/hour=05/s-1/9980-0019-00210"
            );
            assert!(ObjectKey::parse("p", &key).is_err(), "{key}");
        }
        assert_eq!(
            ObjectKey::format_in(
                hive_hour,
                "p",
                start,
                "s-1",
                &seq("9"),
                &seq("10"),
                ".parquet"
            ),
            "p/year=2026/month=11/day=21/hour=05/s-1/9980-0019-00210.parquet"
        );
        for bad in [
            "p/year=2026/month=11/day=21/hour=05/s-1/9980-0019-00210.parquet.zst",
            "p/year=2026/month=11/day=21/hour=05/minute=27/s-1/9980-0019-00210.raw",
            "p/2026/11/21/05/s-1/9980-0019-00210.raw",
            "p/year=2026/month=11/day=21/h=05/s-1/9980-0019-00210.raw",
        ] {
            assert!(ObjectKey::parse_in(hive_hour, "p", bad).is_err(), "{bad}");
        }
        let parquet = ObjectKey::parse_in(
            hive_hour,
            "p",
            "p/year=2026/month=11/day=21/hour=05/s-1/9980-0019-00210.parquet",
        )
        .unwrap();
        assert_eq!(parquet.error_extension(), ".jsonl.zst");
        let raw = ObjectKey::parse_in(
            hive_hour,
            "p",
            "p/year=2026/month=11/day=21/hour=05/s-1/9980-0019-00210.raw.gz",
        )
        .unwrap();
        assert_eq!(raw.error_extension(), ".jsonl.gz");
    }
}

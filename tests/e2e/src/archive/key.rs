//! Object keys: building the key the contract prescribes and parsing one
//! strictly (prefix, UTC minute, shard id, sorter, range, extension).

use chrono::{DateTime, NaiveDate, Utc};

use super::Compression;
use crate::seq::Seq;

/// An object key, parsed:
/// `{prefix}/{yyyy}/{MM}/{dd}/{HH}/{mm}/{shardId}/{sorter}-{first}-{last}.jsonl[.gz|.zst]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectKey {
    /// The whole key.
    pub key: String,
    /// The UTC minute of the key's path.
    pub minute: DateTime<Utc>,
    /// The shard id of the key's path.
    pub shard_id: String,
    /// The sorter as written (descending form of `first`).
    pub sorter: String,
    /// The batch's first sequence number.
    pub first: Seq,
    /// The batch's last sequence number.
    pub last: Seq,
    /// From the extension.
    pub compression: Compression,
}

impl ObjectKey {
    /// Builds the key the contract prescribes (for tests that write or
    /// predict keys).
    pub fn format(
        prefix: &str,
        minute: DateTime<Utc>,
        shard_id: &str,
        first: &Seq,
        last: &Seq,
        compression: Compression,
    ) -> String {
        format!(
            "{prefix}/{}/{shard_id}/{}-{}-{}{}",
            minute.format("%Y/%m/%d/%H/%M"),
            first.encode_descending(),
            first.encode_ascending(),
            last.encode_ascending(),
            compression.extension()
        )
    }

    /// Parses `key`, which must start with `{prefix}/`.
    ///
    /// # Errors
    /// A description of the first deviation from the key format.
    pub fn parse(prefix: &str, key: &str) -> Result<Self, String> {
        let rest = key
            .strip_prefix(prefix)
            .and_then(|r| r.strip_prefix('/'))
            .ok_or_else(|| format!("not under the prefix {prefix:?}/"))?;
        let parts: Vec<&str> = rest.split('/').collect();
        let [year, month, day, hour, minute, shard_id, file] = parts[..] else {
            return Err(format!(
                "expected yyyy/MM/dd/HH/mm/shardId/file after the prefix, found {} path segments",
                parts.len()
            ));
        };
        let number = |text: &str, width: usize, what: &str| -> Result<u32, String> {
            if text.len() != width || !text.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("{what} {text:?} is not {width} digits"));
            }
            text.parse()
                .map_err(|_| format!("{what} {text:?} is not a number"))
        };
        let date = NaiveDate::from_ymd_opt(
            i32::try_from(number(year, 4, "year")?).map_err(|e| e.to_string())?,
            number(month, 2, "month")?,
            number(day, 2, "day")?,
        )
        .ok_or_else(|| format!("{year}/{month}/{day} is not a date"))?;
        let minute = date
            .and_hms_opt(number(hour, 2, "hour")?, number(minute, 2, "minute")?, 0)
            .ok_or_else(|| format!("{hour}:{minute} is not a time"))?
            .and_utc();
        if shard_id.is_empty() {
            return Err("empty shard id".to_owned());
        }
        let (stem, compression) = [Compression::Gzip, Compression::Zstd, Compression::None]
            .into_iter()
            .find_map(|c| file.strip_suffix(c.extension()).map(|stem| (stem, c)))
            .ok_or_else(|| {
                format!("file name {file:?} does not end in .jsonl, .jsonl.gz or .jsonl.zst")
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
            minute,
            shard_id: shard_id.to_owned(),
            sorter: sorter.to_owned(),
            first,
            last,
            compression,
        })
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
        assert_eq!(parsed.minute, minute());
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
}

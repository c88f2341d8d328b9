//! [`Bucket`]: a UTC minute or hour of arrival time, the span one object's
//! records share, and its path in a key.

use std::fmt;

use chrono::{DateTime, Datelike, Timelike, Utc};
use clap::ValueEnum;

/// How the time part of a key is written.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum KeyStyle {
    /// `2026/11/21/05/27/`.
    Plain,
    /// `year=2026/month=11/day=21/hour=05/minute=27/`: Hive-style
    /// partitions, recognised by Athena, Glue, Spark and DuckDB.
    Hive,
}

impl KeyStyle {
    /// The name, as `--key-layout` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plain => "plain",
            Self::Hive => "hive",
        }
    }
}

/// The span of arrival time one object's records share.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum TimeBucket {
    /// A UTC minute.
    Minute,
    /// A UTC hour.
    Hour,
}

impl TimeBucket {
    /// The name, as `--time-bucket` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Minute => "minute",
            Self::Hour => "hour",
        }
    }
}

/// Milliseconds in a minute.
const MINUTE_MILLIS: i64 = 60_000;
/// Milliseconds in an hour.
const HOUR_MILLIS: i64 = 3_600_000;

impl TimeBucket {
    /// The bucket's length in milliseconds.
    pub fn millis(self) -> i64 {
        match self {
            Self::Minute => MINUTE_MILLIS,
            Self::Hour => HOUR_MILLIS,
        }
    }

    /// Path segments of a bucket in a key: `yyyy/MM/dd/HH[/mm]`.
    pub fn segment_count(self) -> usize {
        match self {
            Self::Minute => 5,
            Self::Hour => 4,
        }
    }
}

/// A UTC minute or hour, counted from the Unix epoch.
///
/// A record belongs to the bucket of its `ApproximateArrivalTimestamp`, which
/// Kinesis sets when it accepts the record and never changes: the same record
/// lands under the same key prefix however often it is processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bucket {
    size: TimeBucket,
    /// Buckets of `size` since the epoch.
    index: i64,
}

impl Bucket {
    /// The bucket of `size` holding `millis` milliseconds since the Unix
    /// epoch.
    pub fn of(size: TimeBucket, millis: i64) -> Self {
        Self {
            size,
            index: millis.div_euclid(size.millis()),
        }
    }

    /// The minute holding `millis`.
    pub fn minute(millis: i64) -> Self {
        Self::of(TimeBucket::Minute, millis)
    }

    /// Minute or hour.
    pub fn size(self) -> TimeBucket {
        self.size
    }

    /// First millisecond of the bucket, since the epoch.
    pub fn start_millis(self) -> i64 {
        self.index * self.size.millis()
    }

    /// The bucket's start as ISO 8601 text to its own precision:
    /// `yyyy-MM-ddTHH:mmZ` for a minute, `yyyy-MM-ddTHHZ` for an hour.
    pub fn iso_text(self) -> String {
        DateTime::from_timestamp_millis(self.start_millis())
            .unwrap_or_default()
            .format(match self.size {
                TimeBucket::Minute => "%Y-%m-%dT%H:%MZ",
                TimeBucket::Hour => "%Y-%m-%dT%HZ",
            })
            .to_string()
    }

    /// First millisecond of the next bucket, since the epoch.
    pub fn end_millis(self) -> i64 {
        (self.index + 1) * self.size.millis()
    }

    fn start(self) -> DateTime<Utc> {
        // In range for any bucket chrono can represent; records carry
        // timestamps from the Kinesis API, well inside that range.
        DateTime::from_timestamp_millis(self.start_millis()).unwrap_or_default()
    }

    /// The key path: `yyyy/MM/dd/HH[/mm]` (plain) or
    /// `year=yyyy/month=MM/day=dd/hour=HH[/minute=mm]` (Hive-style).
    pub fn path(self, style: KeyStyle) -> String {
        let t = self.start();
        let values = [
            t.year().unsigned_abs(),
            t.month(),
            t.day(),
            t.hour(),
            t.minute(),
        ];
        let mut path = String::with_capacity(48);
        for (i, (value, name)) in values
            .into_iter()
            .zip(NAMES)
            .take(self.size.segment_count())
            .enumerate()
        {
            if i > 0 {
                path.push('/');
            }
            if style == KeyStyle::Hive {
                path.push_str(name);
                path.push('=');
            }
            let width = if i == 0 { 4 } else { 2 };
            path.push_str(&format!("{value:0width$}"));
        }
        path
    }

    /// The bucket a path names (the inverse of [`path`](Self::path)):
    /// exactly [`TimeBucket::segment_count`] segments of 4 and 2 digits
    /// (after `name=` for Hive-style), a real date and time; `None` for
    /// anything else.
    pub fn parse_path(size: TimeBucket, style: KeyStyle, segments: &[&str]) -> Option<Self> {
        if segments.len() != size.segment_count() {
            return None;
        }
        let mut values = [0u32, 1, 1, 0, 0];
        for (i, (segment, name)) in segments.iter().zip(NAMES).enumerate() {
            let digits = match style {
                KeyStyle::Plain => *segment,
                KeyStyle::Hive => segment.strip_prefix(name)?.strip_prefix('=')?,
            };
            let width = if i == 0 { 4 } else { 2 };
            if digits.len() != width || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            values[i] = digits.parse().ok()?;
        }
        let [year, month, day, hour, minute] = values;
        let date = chrono::NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, month, day)?;
        let time = date.and_hms_opt(hour, minute, 0)?;
        Some(Self::of(size, time.and_utc().timestamp_millis()))
    }
}

/// Hive-style partition names, in path order.
const NAMES: [&str; 5] = ["year", "month", "day", "hour", "minute"];

impl fmt::Display for Bucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.path(KeyStyle::Plain))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn millis(text: &str) -> i64 {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .timestamp_millis()
    }

    #[test]
    fn floors_to_the_utc_minute() {
        let minute = Bucket::minute(millis("2026-11-21T05:27:59.999Z"));
        assert_eq!(minute.path(KeyStyle::Plain), "2026/11/21/05/27");
        assert_eq!(
            Bucket::minute(minute.end_millis()).path(KeyStyle::Plain),
            "2026/11/21/05/28"
        );
        assert_eq!(Bucket::minute(minute.end_millis() - 1), minute);
    }

    #[test]
    fn iso_text_is_as_precise_as_the_bucket() {
        let at = millis("2026-11-21T05:27:59.999Z");
        assert_eq!(
            Bucket::of(TimeBucket::Minute, at).iso_text(),
            "2026-11-21T05:27Z"
        );
        assert_eq!(
            Bucket::of(TimeBucket::Hour, at).iso_text(),
            "2026-11-21T05Z"
        );
    }

    #[test]
    fn floors_to_the_utc_hour() {
        let hour = Bucket::of(TimeBucket::Hour, millis("2026-11-21T05:59:59.999Z"));
        assert_eq!(hour.path(KeyStyle::Plain), "2026/11/21/05");
        assert_eq!(hour.start_millis(), millis("2026-11-21T05:00:00Z"));
        assert_eq!(hour.end_millis(), millis("2026-11-21T06:00:00Z"));
        assert_eq!(
            hour.path(KeyStyle::Hive),
            "year=2026/month=11/day=21/hour=05"
        );
    }

    #[test]
    fn hive_paths_name_each_partition() {
        let minute = Bucket::minute(millis("2026-01-02T03:04:05Z"));
        assert_eq!(
            minute.path(KeyStyle::Hive),
            "year=2026/month=01/day=02/hour=03/minute=04"
        );
    }

    #[test]
    fn paths_parse_back() {
        for size in [TimeBucket::Minute, TimeBucket::Hour] {
            for style in [KeyStyle::Plain, KeyStyle::Hive] {
                let bucket = Bucket::of(size, millis("2026-02-28T23:59:00Z"));
                let path = bucket.path(style);
                let segments: Vec<&str> = path.split('/').collect();
                assert_eq!(Bucket::parse_path(size, style, &segments), Some(bucket));
                let other = if style == KeyStyle::Plain {
                    KeyStyle::Hive
                } else {
                    KeyStyle::Plain
                };
                assert_eq!(Bucket::parse_path(size, other, &segments), None);
            }
        }
        for bad in [
            "2026/02/30/00/00",
            "2026/2/28/00/00",
            "2026/02/28/24/00",
            "2026/02/28/00",
        ] {
            let segments: Vec<&str> = bad.split('/').collect();
            assert_eq!(
                Bucket::parse_path(TimeBucket::Minute, KeyStyle::Plain, &segments),
                None,
                "{bad}"
            );
        }
    }

    #[test]
    fn before_the_epoch_floors_down() {
        assert_eq!(Bucket::minute(-1).path(KeyStyle::Plain), "1969/12/31/23/59");
    }
}

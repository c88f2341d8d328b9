//! Key layouts: the time part of a key (`--key-layout plain|hive`,
//! `--time-bucket minute|hour`), built and parsed independently of the
//! daemon's code, and the layout record the daemon keeps under its prefix.

use std::fmt;

use chrono::{DateTime, NaiveDate, Timelike as _, Utc};

use crate::daemon::Settings;

/// `--key-layout`: how the time path is spelled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum KeyStyle {
    /// `2026/11/21/05/27`
    #[default]
    Plain,
    /// `year=2026/month=11/day=21/hour=05/minute=27`
    Hive,
}

/// `--time-bucket`: the span of arrival time one object holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TimeBucket {
    /// A UTC minute (five time segments).
    #[default]
    Minute,
    /// A UTC hour (four time segments, no minute).
    Hour,
}

/// Hive-style partition names, in path order.
const NAMES: [&str; 5] = ["year", "month", "day", "hour", "minute"];

/// A key layout: style and time bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct KeyLayout {
    /// `--key-layout`.
    pub style: KeyStyle,
    /// `--time-bucket`.
    pub bucket: TimeBucket,
}

impl KeyStyle {
    /// The `--key-layout` value.
    pub fn setting(self) -> &'static str {
        match self {
            Self::Plain => "plain",
            Self::Hive => "hive",
        }
    }
}

impl TimeBucket {
    /// The `--time-bucket` value.
    pub fn setting(self) -> &'static str {
        match self {
            Self::Minute => "minute",
            Self::Hour => "hour",
        }
    }

    /// Time segments in a key.
    pub fn segment_count(self) -> usize {
        match self {
            Self::Minute => 5,
            Self::Hour => 4,
        }
    }

    /// The start of the bucket holding `t`.
    pub fn truncate(self, t: DateTime<Utc>) -> DateTime<Utc> {
        let t = t
            .with_second(0)
            .and_then(|t| t.with_nanosecond(0))
            .expect("second 0 and nanosecond 0 always exist");
        match self {
            Self::Minute => t,
            Self::Hour => t.with_minute(0).expect("minute 0 always exists"),
        }
    }
}

impl KeyLayout {
    /// A layout.
    pub fn new(style: KeyStyle, bucket: TimeBucket) -> Self {
        Self { style, bucket }
    }

    /// The layout `settings` ask for (`--key-layout`, `--time-bucket`, each
    /// at the daemon's default when not set).
    ///
    /// # Panics
    /// On a value the daemon does not accept either (a test's typo).
    pub fn of_settings(settings: &Settings) -> Self {
        let style = match settings.get("key-layout").unwrap_or("plain") {
            "plain" => KeyStyle::Plain,
            "hive" => KeyStyle::Hive,
            other => panic!("unknown --key-layout {other:?} in the test's settings"),
        };
        let bucket = match settings.get("time-bucket").unwrap_or("minute") {
            "minute" => TimeBucket::Minute,
            "hour" => TimeBucket::Hour,
            other => panic!("unknown --time-bucket {other:?} in the test's settings"),
        };
        Self { style, bucket }
    }

    /// The body of `{prefix}/_shardsink.json` for this layout, as the
    /// documentation gives it: `{"keyLayout":"hive","timeBucket":"hour"}`.
    pub fn record(self) -> String {
        format!(
            "{{\"keyLayout\":\"{}\",\"timeBucket\":\"{}\"}}",
            self.style.setting(),
            self.bucket.setting()
        )
    }

    /// The time path of the bucket starting at `start`:
    /// `yyyy/MM/dd/HH[/mm]` or `year=yyyy/month=MM/day=dd/hour=HH[/minute=mm]`.
    pub fn path(self, start: DateTime<Utc>) -> String {
        let text = start.format("%Y %m %d %H %M").to_string();
        text.split(' ')
            .zip(NAMES)
            .take(self.bucket.segment_count())
            .map(|(value, name)| match self.style {
                KeyStyle::Plain => value.to_owned(),
                KeyStyle::Hive => format!("{name}={value}"),
            })
            .collect::<Vec<_>>()
            .join("/")
    }

    /// The start of the bucket `segments` name: exactly
    /// [`TimeBucket::segment_count`] segments of 4 and 2 digits (after
    /// `name=` in the hive style) naming a real UTC date and time.
    ///
    /// # Errors
    /// A description of the first deviation.
    pub fn parse_path(self, segments: &[&str]) -> Result<DateTime<Utc>, String> {
        if segments.len() != self.bucket.segment_count() {
            return Err(format!(
                "{} time segments, not {} ({self})",
                segments.len(),
                self.bucket.segment_count()
            ));
        }
        let mut values = [0u32, 1, 1, 0, 0];
        for (i, (segment, name)) in segments.iter().zip(NAMES).enumerate() {
            let digits = match self.style {
                KeyStyle::Plain => *segment,
                KeyStyle::Hive => segment
                    .strip_prefix(name)
                    .and_then(|s| s.strip_prefix('='))
                    .ok_or_else(|| format!("{segment:?} is not {name}=…"))?,
            };
            let width = if i == 0 { 4 } else { 2 };
            if digits.len() != width || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("{name} {digits:?} is not {width} digits"));
            }
            values[i] = digits
                .parse()
                .map_err(|_| format!("{name} {digits:?} is not a number"))?;
        }
        let [year, month, day, hour, minute] = values;
        let date =
            NaiveDate::from_ymd_opt(i32::try_from(year).map_err(|e| e.to_string())?, month, day)
                .ok_or_else(|| format!("{} is not a date", segments[..3].join("/")))?;
        Ok(date
            .and_hms_opt(hour, minute, 0)
            .ok_or_else(|| format!("{hour}:{minute} is not a time"))?
            .and_utc())
    }
}

impl fmt::Display for KeyLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "--key-layout {} --time-bucket {}",
            self.style.setting(),
            self.bucket.setting()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::test_support::minute;

    #[test]
    fn paths_of_every_layout() {
        let t = minute();
        let cases = [
            (KeyStyle::Plain, TimeBucket::Minute, "2026/11/21/05/27"),
            (KeyStyle::Plain, TimeBucket::Hour, "2026/11/21/05"),
            (
                KeyStyle::Hive,
                TimeBucket::Minute,
                "year=2026/month=11/day=21/hour=05/minute=27",
            ),
            (
                KeyStyle::Hive,
                TimeBucket::Hour,
                "year=2026/month=11/day=21/hour=05",
            ),
        ];
        for (style, bucket, path) in cases {
            let layout = KeyLayout::new(style, bucket);
            let start = bucket.truncate(t);
            assert_eq!(layout.path(start), path);
            let segments: Vec<&str> = path.split('/').collect();
            assert_eq!(layout.parse_path(&segments), Ok(start), "{path}");
            for other in [
                KeyLayout::new(style, other_bucket(bucket)),
                KeyLayout::new(other_style(style), bucket),
            ] {
                assert!(other.parse_path(&segments).is_err(), "{other} {path}");
            }
        }
        assert_eq!(
            KeyLayout::new(KeyStyle::Hive, TimeBucket::Hour).record(),
            r#"{"keyLayout":"hive","timeBucket":"hour"}"#
        );
        let bad: Vec<&str> = "year=2026/month=13/day=21/hour=05".split('/').collect();
        assert!(
            KeyLayout::new(KeyStyle::Hive, TimeBucket::Hour)
                .parse_path(&bad)
                .is_err()
        );
    }

    fn other_bucket(bucket: TimeBucket) -> TimeBucket {
        match bucket {
            TimeBucket::Minute => TimeBucket::Hour,
            TimeBucket::Hour => TimeBucket::Minute,
        }
    }

    fn other_style(style: KeyStyle) -> KeyStyle {
        match style {
            KeyStyle::Plain => KeyStyle::Hive,
            KeyStyle::Hive => KeyStyle::Plain,
        }
    }
}

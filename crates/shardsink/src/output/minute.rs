//! [`Minute`]: a UTC minute, the unit records are grouped by.

use std::fmt;

use chrono::{DateTime, Datelike, Timelike, Utc};

/// Milliseconds in a minute.
const MINUTE_MILLIS: i64 = 60_000;

/// A UTC minute, counted from the Unix epoch.
///
/// A record belongs to the minute of its `ApproximateArrivalTimestamp`, which
/// Kinesis sets when it accepts the record and never changes: the same record
/// lands under the same minute prefix however often it is processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Minute(i64);

impl Minute {
    /// The minute holding `millis` milliseconds since the Unix epoch.
    pub fn from_millis(millis: i64) -> Self {
        Self(millis.div_euclid(MINUTE_MILLIS))
    }

    /// The minute holding `time`.
    pub fn from_datetime(time: DateTime<Utc>) -> Self {
        Self::from_millis(time.timestamp_millis())
    }

    /// First millisecond of the minute, since the epoch.
    pub fn start_millis(self) -> i64 {
        self.0 * MINUTE_MILLIS
    }

    /// First millisecond of the next minute, since the epoch.
    pub fn end_millis(self) -> i64 {
        (self.0 + 1) * MINUTE_MILLIS
    }

    fn start(self) -> DateTime<Utc> {
        // In range for any i64 minute chrono can represent; records carry
        // timestamps from the Kinesis API, well inside that range.
        DateTime::from_timestamp_millis(self.start_millis()).unwrap_or_default()
    }

    /// The key path `yyyy/MM/dd/HH/mm`.
    pub fn path(self) -> String {
        let t = self.start();
        format!(
            "{:04}/{:02}/{:02}/{:02}/{:02}",
            t.year(),
            t.month(),
            t.day(),
            t.hour(),
            t.minute()
        )
    }

    /// The minute a `yyyy/MM/dd/HH/mm` path names (the inverse of
    /// [`path`](Self::path)): exactly 4 and 2 digits, a real date and time;
    /// `None` for anything else.
    pub fn parse_path([year, month, day, hour, minute]: [&str; 5]) -> Option<Self> {
        let number = |text: &str, width: usize| -> Option<u32> {
            if text.len() == width && text.bytes().all(|b| b.is_ascii_digit()) {
                text.parse().ok()
            } else {
                None
            }
        };
        let date = chrono::NaiveDate::from_ymd_opt(
            i32::try_from(number(year, 4)?).ok()?,
            number(month, 2)?,
            number(day, 2)?,
        )?;
        let time = date.and_hms_opt(number(hour, 2)?, number(minute, 2)?, 0)?;
        Some(Self::from_datetime(time.and_utc()))
    }

    /// The RFC 3339 text up to the seconds, `yyyy-MM-ddTHH:mm:`, shared by
    /// every timestamp in the minute.
    pub fn rfc3339_prefix(self) -> String {
        let t = self.start();
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:",
            t.year(),
            t.month(),
            t.day(),
            t.hour(),
            t.minute()
        )
    }
}

impl fmt::Display for Minute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floors_to_the_utc_minute() {
        let t = DateTime::parse_from_rfc3339("2026-11-21T05:27:59.999Z")
            .unwrap()
            .with_timezone(&Utc);
        let minute = Minute::from_datetime(t);
        assert_eq!(minute.path(), "2026/11/21/05/27");
        assert_eq!(minute.rfc3339_prefix(), "2026-11-21T05:27:");
        assert_eq!(
            Minute::from_millis(minute.end_millis()).path(),
            "2026/11/21/05/28"
        );
        assert_eq!(Minute::from_millis(minute.end_millis() - 1), minute);
    }

    #[test]
    fn before_the_epoch_floors_down() {
        assert_eq!(Minute::from_millis(-1).path(), "1969/12/31/23/59");
    }
}

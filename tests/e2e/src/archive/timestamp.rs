//! `approximateArrivalTimestamp`: its exact text form and the UTC minute a
//! timestamp falls in (the key's minute).

use chrono::{DateTime, NaiveDateTime, Timelike as _, Utc};

/// The UTC minute containing `t`.
pub fn truncate_to_minute(t: DateTime<Utc>) -> DateTime<Utc> {
    t.with_second(0)
        .and_then(|t| t.with_nanosecond(0))
        .expect("second 0 and nanosecond 0 always exist")
}

/// Parses `approximateArrivalTimestamp`, which must be exactly
/// `YYYY-MM-DDTHH:MM:SS.mmmZ` (RFC 3339, UTC, milliseconds).
///
/// # Errors
/// Any other shape.
pub fn parse_timestamp(text: &str) -> Result<DateTime<Utc>, String> {
    let well_formed = text.len() == 24
        && text.ends_with('Z')
        && text.as_bytes().get(10) == Some(&b'T')
        && text.as_bytes().get(19) == Some(&b'.');
    if !well_formed {
        return Err(format!(
            "approximateArrivalTimestamp {text:?} is not YYYY-MM-DDTHH:MM:SS.mmmZ"
        ));
    }
    NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.3fZ")
        .map(|t| t.and_utc())
        .map_err(|e| format!("approximateArrivalTimestamp {text:?}: {e}"))
}

/// Formats a timestamp the way the contract wants it: RFC 3339, UTC,
/// milliseconds (truncated), `Z`.
pub fn format_timestamp(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        let t = parse_timestamp("2026-11-21T05:27:03.123Z").unwrap();
        assert_eq!(format_timestamp(t), "2026-11-21T05:27:03.123Z");
        assert!(parse_timestamp("2026-11-21T05:27:03.12Z").is_err());
        assert!(parse_timestamp("2026-11-21T05:27:03.123+00:00").is_err());
        assert!(parse_timestamp("2026-11-21 05:27:03.123Z").is_err());
    }
}

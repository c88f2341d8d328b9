//! Values shared by the unit tests of the archive modules.

use chrono::{DateTime, Utc};

use super::{Compression, ObjectKey};
use crate::seq::Seq;

pub(super) fn seq(text: &str) -> Seq {
    Seq::parse(text).unwrap()
}

pub(super) fn minute() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-21T05:27:00Z")
        .unwrap()
        .to_utc()
}

/// The parsed key of shard `s-1` under prefix `p`, in [`minute`], for the
/// range `first..=last`.
pub(super) fn key_of_s1(first: &str, last: &str, compression: Compression) -> ObjectKey {
    let key = ObjectKey::format("p", minute(), "s-1", &seq(first), &seq(last), compression);
    ObjectKey::parse("p", &key).unwrap()
}

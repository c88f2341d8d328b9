//! One item of the DynamoDB event table — the accepted copies of one event
//! (an id and, with `--event-fingerprint payload`, a payload), its version
//! and TTL — and its DynamoDB attributes. Pure: no request is made here.
//!
//! ```text
//! eventId  S  "9f2c…41ab"       48 lowercase hex digits: 32 of EventKey::id,
//!                               16 of EventKey::fingerprint (0 without
//!                               fingerprints)
//! version  N  "3"               1 for a new item, +1 on every rewrite
//! ttl      N  "1795325223"      epoch seconds (DynamoDB Time to Live)
//! copies   L  [ M { a N  arrival (ApproximateArrivalTimestamp, ms),
//!                   w N  written (the wall clock when accepted, ms),
//!                   s S  shard id,
//!                   n S  sequence number,
//!                   u N  sub-sequence number (KPL only) }, … ]
//! ```
//!
//! Names are short because DynamoDB counts them in every item's size
//! ("DynamoDB item sizes and formats", Amazon DynamoDB Developer Guide):
//! with at most [`MAX_COPIES`](super::retention::MAX_COPIES) copies an item
//! is at most 1 KB, one write unit, whatever its ids and numbers.

use std::collections::HashMap;
use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use sequence_range::SequenceNumber;

use crate::events::rule::{AcceptedCopy, CopyRef, EventKey, Rule};

/// How long past a window's horizon the DynamoDB store keeps a copy after
/// it was written, by the wall clock: a day. A shard read more than this behind
/// the stream's tip may find its events' earlier copies dropped (or their
/// items deleted by TTL).
pub const LAG_ALLOWANCE_MILLIS: i64 = 24 * 3_600 * 1_000;

/// Attribute names.
pub mod attr {
    /// The partition key: the event's id and fingerprint hashes, 48 hex
    /// digits.
    pub const EVENT_ID: &str = "eventId";
    /// The item's version, for the conditional writes.
    pub const VERSION: &str = "version";
    /// DynamoDB Time to Live: when the item may be deleted, epoch seconds.
    pub const TTL: &str = "ttl";
    /// The accepted copies, a list of maps.
    pub const COPIES: &str = "copies";
    /// A copy's `ApproximateArrivalTimestamp`, ms since the Unix epoch.
    pub const ARRIVAL: &str = "a";
    /// When a copy was written (accepted), wall clock ms since the Unix
    /// epoch.
    pub const WRITTEN: &str = "w";
    /// A copy's shard.
    pub const SHARD_ID: &str = "s";
    /// A copy's Kinesis sequence number, as text.
    pub const SEQUENCE_NUMBER: &str = "n";
    /// A copy's position in a KPL aggregate (absent outside KPL).
    pub const SUB_SEQUENCE_NUMBER: &str = "u";
}

/// A DynamoDB item: attribute name → value.
pub type Item = HashMap<String, AttributeValue>;

/// The key of the item that holds the accepted copies matching `key` under
/// `rule`: `key` itself with fingerprints, its id alone (fingerprint 0)
/// without.
pub fn item_key(key: &EventKey, rule: &Rule) -> EventKey {
    EventKey {
        id: key.id,
        fingerprint: if rule.match_fingerprint {
            key.fingerprint
        } else {
            0
        },
    }
}

/// The `eventId` of an item key: 48 lowercase hex digits, the id's 32 then
/// the fingerprint's 16.
pub fn event_id(key: &EventKey) -> String {
    format!("{:032x}{:016x}", key.id, key.fingerprint)
}

/// An `eventId` read back ([`event_id`]'s inverse); `None` unless it is 48
/// hex digits (an item of an older layout has 32).
pub fn parse_event_id(text: &str) -> Option<EventKey> {
    if text.len() != 48 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let (id, fingerprint) = text.split_at(32);
    Some(EventKey {
        id: u128::from_str_radix(id, 16).ok()?,
        fingerprint: u64::from_str_radix(fingerprint, 16).ok()?,
    })
}

/// An accepted copy as the item holds it: the copy, and when it was
/// written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldCopy {
    /// The copy (its fingerprint is the item's).
    pub accepted: AcceptedCopy,
    /// The wall clock when the write that added it was made, ms since the
    /// Unix epoch.
    pub written_millis: i64,
}

/// What the DynamoDB store holds for one event, as last read or written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ItemState {
    /// The item's `version`; `None` when there is no item.
    pub version: Option<u64>,
    /// Its accepted copies, oldest write first.
    pub copies: Vec<HeldCopy>,
}

impl ItemState {
    /// The accepted copies, oldest write first.
    pub fn accepted(&self) -> impl Iterator<Item = &AcceptedCopy> + Clone {
        self.copies.iter().map(|held| &held.accepted)
    }

    /// Whether `copy` is among the accepted copies.
    pub fn holds(&self, copy: &CopyRef) -> bool {
        self.accepted().any(|held| held.copy == *copy)
    }

    /// The latest arrival among the copies (ms), if any.
    pub fn newest_arrival(&self) -> Option<i64> {
        self.accepted().map(|c| c.arrival_millis).max()
    }

    /// The item to put for `key` (its `version` must be set; `now_millis`,
    /// the wall clock, sets the TTL).
    pub fn to_item(&self, key: &EventKey, rule: &Rule, now_millis: i64) -> Item {
        let copies = self.copies.iter().map(copy_value).collect();
        HashMap::from([
            (attr::EVENT_ID.to_owned(), AttributeValue::S(event_id(key))),
            (
                attr::VERSION.to_owned(),
                AttributeValue::N(self.version.unwrap_or(1).to_string()),
            ),
            (
                attr::TTL.to_owned(),
                AttributeValue::N(ttl_seconds(self.newest_arrival(), rule, now_millis).to_string()),
            ),
            (attr::COPIES.to_owned(), AttributeValue::L(copies)),
        ])
    }

    /// Reads back the item of `key`; `shard_ids` are reused for the copies
    /// of those shards instead of allocating their ids again.
    ///
    /// # Errors
    /// A sentence saying what is missing or malformed.
    pub fn from_item(item: &Item, key: &EventKey, shard_ids: &[&Arc<str>]) -> Result<Self, String> {
        let version = number(item.get(attr::VERSION), attr::VERSION)?;
        let copies = match item.get(attr::COPIES) {
            Some(AttributeValue::L(list)) => list
                .iter()
                .map(|value| copy_from(value, key.fingerprint, shard_ids))
                .collect::<Result<_, _>>()?,
            _ => return Err(format!("{} is not a list", attr::COPIES)),
        };
        Ok(Self {
            version: Some(u64::try_from(version).map_err(|e| e.to_string())?),
            copies,
        })
    }

    /// About how many bytes the state takes in memory (the test of the
    /// cache's documented budget).
    #[cfg(test)]
    pub fn approximate_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self
                .copies
                .iter()
                .map(|c| {
                    std::mem::size_of::<HeldCopy>() + c.accepted.copy.sequence_number.as_str().len()
                })
                .sum::<usize>()
    }
}

/// The item's `ttl`, epoch seconds: (the newest copy's arrival or the wall
/// clock, whichever is later) + 2 × window + [`LAG_ALLOWANCE_MILLIS`],
/// rounded up — past the time any copy is kept by its write time
/// ([`retention`](super::retention)). DynamoDB deletes expired items
/// lazily (within days), and the rule ignores copies past the horizon, so a
/// late deletion changes nothing.
pub fn ttl_seconds(newest_arrival: Option<i64>, rule: &Rule, now_millis: i64) -> i64 {
    let base = newest_arrival.map_or(now_millis, |newest| newest.max(now_millis));
    let until = base
        .saturating_add(rule.horizon_millis())
        .saturating_add(LAG_ALLOWANCE_MILLIS);
    until.saturating_add(999).div_euclid(1_000)
}

/// A copy as a map attribute.
fn copy_value(held: &HeldCopy) -> AttributeValue {
    let copy = &held.accepted;
    let mut map = HashMap::from([
        (
            attr::ARRIVAL.to_owned(),
            AttributeValue::N(copy.arrival_millis.to_string()),
        ),
        (
            attr::WRITTEN.to_owned(),
            AttributeValue::N(held.written_millis.to_string()),
        ),
        (
            attr::SHARD_ID.to_owned(),
            AttributeValue::S(copy.copy.shard_id.to_string()),
        ),
        (
            attr::SEQUENCE_NUMBER.to_owned(),
            AttributeValue::S(copy.copy.sequence_number.as_str().to_owned()),
        ),
    ]);
    if let Some(sub) = copy.copy.sub_sequence_number {
        map.insert(
            attr::SUB_SEQUENCE_NUMBER.to_owned(),
            AttributeValue::N(sub.to_string()),
        );
    }
    AttributeValue::M(map)
}

/// A copy read back from its map attribute, with the item's `fingerprint`.
fn copy_from(
    value: &AttributeValue,
    fingerprint: u64,
    shard_ids: &[&Arc<str>],
) -> Result<HeldCopy, String> {
    let AttributeValue::M(map) = value else {
        return Err(format!("an element of {} is not a map", attr::COPIES));
    };
    let text = |name: &str| match map.get(name) {
        Some(AttributeValue::S(text)) => Ok(text.as_str()),
        _ => Err(format!("a copy's {name} is not a string")),
    };
    let arrival_millis = number(map.get(attr::ARRIVAL), attr::ARRIVAL)?;
    let written_millis = number(map.get(attr::WRITTEN), attr::WRITTEN)?;
    let shard = text(attr::SHARD_ID)?;
    let shard_id = shard_ids
        .iter()
        .find(|known| &****known == shard)
        .map_or_else(|| Arc::from(shard), |known| Arc::clone(known));
    let sequence_number = SequenceNumber::parse(text(attr::SEQUENCE_NUMBER)?)
        .map_err(|e| format!("a copy's {}: {e}", attr::SEQUENCE_NUMBER))?;
    let sub_sequence_number = match map.get(attr::SUB_SEQUENCE_NUMBER) {
        None => None,
        Some(value) => Some(
            u64::try_from(number(Some(value), attr::SUB_SEQUENCE_NUMBER)?)
                .map_err(|e| e.to_string())?,
        ),
    };
    Ok(HeldCopy {
        accepted: AcceptedCopy {
            fingerprint,
            arrival_millis,
            copy: CopyRef {
                shard_id,
                sequence_number,
                sub_sequence_number,
            },
        },
        written_millis,
    })
}

/// A whole number attribute.
fn number(value: Option<&AttributeValue>, name: &str) -> Result<i64, String> {
    match value {
        Some(AttributeValue::N(text)) => text
            .parse()
            .map_err(|e| format!("{name} {text:?} is not a whole number: {e}")),
        _ => Err(format!("{name} is missing or not a number")),
    }
}

#[cfg(test)]
mod tests {
    use shard_lease::test_util::item_size;

    use super::*;
    use crate::events::dynamodb::retention::MAX_COPIES;

    const W: i64 = 1_000;
    const RULE: Rule = Rule {
        window_millis: W,
        match_fingerprint: true,
    };

    fn held(shard: &str, n: &str, sub: Option<u64>, arrival: i64, written: i64) -> HeldCopy {
        HeldCopy {
            accepted: AcceptedCopy {
                fingerprint: 41,
                arrival_millis: arrival,
                copy: CopyRef {
                    shard_id: Arc::from(shard),
                    sequence_number: SequenceNumber::parse(n).unwrap(),
                    sub_sequence_number: sub,
                },
            },
            written_millis: written,
        }
    }

    #[test]
    fn event_ids_are_the_id_and_fingerprint_hashes() {
        let key = EventKey {
            id: u128::MAX - 1,
            fingerprint: 0x41ab,
        };
        let text = event_id(&key);
        assert_eq!(text, "fffffffffffffffffffffffffffffffe00000000000041ab");
        assert_eq!(parse_event_id(&text), Some(key));
        assert_eq!(parse_event_id(&text[..32]), None, "an older item's key");
        assert_eq!(parse_event_id(&text.replace('e', "g")), None);
        let without = item_key(
            &key,
            &Rule {
                match_fingerprint: false,
                ..RULE
            },
        );
        assert_eq!(
            without,
            EventKey {
                id: key.id,
                fingerprint: 0
            }
        );
        assert_eq!(item_key(&key, &RULE), key);
    }

    #[test]
    fn items_round_trip_their_attributes() {
        let key = EventKey {
            id: 7,
            fingerprint: 41,
        };
        let state = ItemState {
            version: Some(4),
            copies: vec![
                held(
                    "shardId-000000000001",
                    "7",
                    Some(2),
                    1_795_238_823_045,
                    1_795_238_823_100,
                ),
                held(
                    "shardId-000000000002",
                    "8",
                    None,
                    1_795_238_823_046,
                    1_795_238_823_200,
                ),
            ],
        };
        let now = 1_795_238_900_000;
        let item = state.to_item(&key, &RULE, now);
        assert_eq!(item[attr::EVENT_ID], AttributeValue::S(event_id(&key)));
        assert_eq!(
            item[attr::TTL],
            AttributeValue::N(((now + 2 * W + LAG_ALLOWANCE_MILLIS) / 1_000).to_string())
        );
        let own: Arc<str> = Arc::from("shardId-000000000001");
        let back = ItemState::from_item(&item, &key, &[&own]).unwrap();
        assert_eq!(back, state);
        assert!(Arc::ptr_eq(&back.copies[0].accepted.copy.shard_id, &own));
        let mut bad = item.clone();
        bad.insert(attr::COPIES.to_owned(), AttributeValue::S("x".to_owned()));
        assert!(ItemState::from_item(&bad, &key, &[]).is_err());
    }

    #[test]
    fn the_largest_item_is_one_write_unit() {
        // The longest of everything: a 128-character shard id and a
        // 129-digit sequence number (the Kinesis API's limits), and numbers
        // with as many digits as their types hold.
        let shard = "s".repeat(128);
        let sequence = "9".repeat(129);
        let copy = held(&shard, &sequence, Some(u64::MAX), i64::MAX - 1, i64::MIN);
        let state = ItemState {
            version: Some(u64::MAX),
            copies: vec![copy; MAX_COPIES],
        };
        let key = EventKey {
            id: u128::MAX,
            fingerprint: u64::MAX,
        };
        let item = state.to_item(&key, &RULE, i64::MAX);
        let size = item_size(&item);
        assert!(size <= 1_024, "{size} bytes");
        // Kinesis's own shard ids and 56-digit sequence numbers, today's
        // clock: under 200 bytes for one copy (the storage per event
        // docs/OPERATIONS.md states), under 400 for three.
        let usual = held(
            "shardId-000000000000",
            "49590338271490256608559692538361571095921575989136588898",
            None,
            1_795_238_823_045,
            1_795_238_823_100,
        );
        for (copies, bound) in [(1, 200), (MAX_COPIES, 400)] {
            let state = ItemState {
                version: Some(3),
                copies: vec![usual.clone(); copies],
            };
            let size = item_size(&state.to_item(&key, &RULE, 1_795_238_823_100));
            assert!(size <= bound, "{copies} copies: {size} bytes");
        }
    }

    #[test]
    fn ttl_counts_from_the_later_of_the_newest_copy_and_the_clock() {
        let day = LAG_ALLOWANCE_MILLIS;
        assert_eq!(
            ttl_seconds(Some(10_000), &RULE, 5_000),
            (10_000 + 2 * W + day) / 1_000
        );
        assert_eq!(
            ttl_seconds(Some(1), &RULE, 5_000),
            (5_000 + 2 * W + day) / 1_000
        );
        assert_eq!(
            ttl_seconds(None, &RULE, 1),
            (2 * W + day) / 1_000 + 1,
            "rounded up"
        );
    }
}

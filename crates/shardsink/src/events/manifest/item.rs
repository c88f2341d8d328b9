//! One manifest item — an event id's accepted copies, its version and TTL —
//! its DynamoDB attributes, and the decisions made against it. Pure: no
//! request is made here.
//!
//! ```text
//! eventId  S  "9f2c…"            32 lowercase hex digits of EventKey::id
//! version  N  "3"                1 for a new item, +1 on every rewrite
//! ttl      N  "1795325223"       epoch seconds (DynamoDB Time to Live)
//! copies   L  [ M { fingerprint S "41ab…" (16 hex), arrival N (ms),
//!                   shardId S, sequenceNumber S,
//!                   subSequenceNumber N (KPL only) }, … ]
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use sequence_range::SequenceNumber;

use crate::events::rule::{AcceptedCopy, CopyRef, Decision, Outcome, Rule};
use crate::events::store::{Candidate, precedes_in_shard};

/// Attribute names.
pub mod attr {
    /// The partition key: the event id's hash, 32 hex digits.
    pub const EVENT_ID: &str = "eventId";
    /// The item's version, for the conditional writes.
    pub const VERSION: &str = "version";
    /// DynamoDB Time to Live: when the item may be deleted, epoch seconds.
    pub const TTL: &str = "ttl";
    /// The accepted copies, a list of maps.
    pub const COPIES: &str = "copies";
    /// A copy's payload fingerprint, 16 hex digits.
    pub const FINGERPRINT: &str = "fingerprint";
    /// A copy's `ApproximateArrivalTimestamp`, ms since the Unix epoch.
    pub const ARRIVAL: &str = "arrival";
    /// A copy's shard.
    pub const SHARD_ID: &str = "shardId";
    /// A copy's Kinesis sequence number, as text.
    pub const SEQUENCE_NUMBER: &str = "sequenceNumber";
    /// A copy's position in a KPL aggregate (absent outside KPL).
    pub const SUB_SEQUENCE_NUMBER: &str = "subSequenceNumber";
}

/// How long past a window's horizon the manifest remembers a copy, by the
/// wall clock: a day. A shard read more than this behind the stream's tip
/// may find the items of its events' earlier copies deleted by TTL.
pub const LAG_ALLOWANCE_MILLIS: i64 = 24 * 3_600 * 1_000;

/// A DynamoDB item: attribute name → value.
pub type Item = HashMap<String, AttributeValue>;

/// The `eventId` of an event id hash: 32 lowercase hex digits.
pub fn event_id(id: u128) -> String {
    format!("{id:032x}")
}

/// What the manifest holds for one event id, as last read or written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ItemState {
    /// The item's `version`; `None` when there is no item.
    pub version: Option<u64>,
    /// Its accepted copies, oldest write first.
    pub copies: Vec<AcceptedCopy>,
}

impl ItemState {
    /// The state after adding `accepted` (copies not already there), with
    /// the copies no candidate can consult any more dropped (see
    /// [`keeps`]), one version later. `now_millis`: the wall clock.
    pub fn with_copies(&self, accepted: Vec<AcceptedCopy>, rule: &Rule, now_millis: i64) -> Self {
        let mut copies = self.copies.clone();
        for copy in accepted {
            if !copies.iter().any(|held| held.copy == copy.copy) {
                copies.push(copy);
            }
        }
        let newest = copies.iter().map(|c| c.arrival_millis).max().unwrap_or(0);
        copies.retain(|copy| keeps(copy.arrival_millis, newest, rule, now_millis));
        Self {
            version: Some(self.version.map_or(1, |v| v + 1)),
            copies,
        }
    }

    /// The latest arrival among the copies (ms), if any.
    fn newest_arrival(&self) -> Option<i64> {
        self.copies.iter().map(|c| c.arrival_millis).max()
    }

    /// The item to put for event id `id` (its `version` must be set).
    pub fn to_item(&self, id: u128, rule: &Rule, now_millis: i64) -> Item {
        let copies = self.copies.iter().map(copy_value).collect();
        HashMap::from([
            (attr::EVENT_ID.to_owned(), AttributeValue::S(event_id(id))),
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

    /// Reads an item back; `shard_ids` are reused for the copies of those
    /// shards instead of allocating their ids again.
    ///
    /// # Errors
    /// A sentence saying what is missing or malformed.
    pub fn from_item(item: &Item, shard_ids: &[&Arc<str>]) -> Result<Self, String> {
        let version = number(item.get(attr::VERSION), attr::VERSION)?;
        let copies = match item.get(attr::COPIES) {
            Some(AttributeValue::L(list)) => list
                .iter()
                .map(|value| copy_from(value, shard_ids))
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
                    std::mem::size_of::<AcceptedCopy>() + c.copy.sequence_number.as_str().len()
                })
                .sum::<usize>()
    }
}

/// Whether a rewrite keeps a copy that arrived at `arrival`: dropped only
/// when no decision can consult it any more — more than the rule's horizon
/// (2 × window) before the item's newest copy, *and* more than the horizon
/// plus [`LAG_ALLOWANCE_MILLIS`] before the wall clock. The second
/// condition protects a shard read behind another: its records arrived
/// long before the newest copy, and still need the copies near them.
pub fn keeps(arrival: i64, newest: i64, rule: &Rule, now_millis: i64) -> bool {
    let horizon = rule.horizon_millis();
    newest.saturating_sub(arrival) <= horizon
        || now_millis.saturating_sub(arrival) <= horizon.saturating_add(LAG_ALLOWANCE_MILLIS)
}

/// The item's `ttl`, epoch seconds: (the newest copy's arrival or the wall
/// clock, whichever is later) + 2 × window + [`LAG_ALLOWANCE_MILLIS`],
/// rounded up. DynamoDB deletes expired items lazily (within days), and
/// the rule ignores copies past the horizon, so a late deletion changes
/// nothing.
pub fn ttl_seconds(newest_arrival: Option<i64>, rule: &Rule, now_millis: i64) -> i64 {
    let base = newest_arrival.map_or(now_millis, |newest| newest.max(now_millis));
    let until = base
        .saturating_add(rule.horizon_millis())
        .saturating_add(LAG_ALLOWANCE_MILLIS);
    until.saturating_add(999).div_euclid(1_000)
}

/// How the manifest decides one candidate against the copies of its event
/// id that it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The decision.
    pub decision: Decision,
    /// The candidate is itself among the copies: accepted by an earlier
    /// attempt (a rerun), so nothing is written.
    pub accepted_before: bool,
}

/// Decides `candidate` of shard `shard_id` against `copies` (all the held
/// copies of its event id). Its prior copies are the copies of other shards
/// (stream scope) and those of its own shard that precede it
/// ([`precedes_in_shard`]).
///
/// When the candidate is itself among the copies, an earlier attempt
/// accepted it: it stays accepted, with the rule's outcome over its prior
/// copies, or [`Outcome::Unique`] when copies of other shards recorded
/// since would now make it a duplicate (such a copy was accepted with this
/// one in its prior, so the two cannot be the same event within the window
/// as that copy's worker saw it). A rerun never sees its own write as a
/// duplicate.
pub fn verdict(
    shard_id: &str,
    rule: &Rule,
    candidate: &Candidate,
    copies: &[AcceptedCopy],
) -> Verdict {
    let prior = copies.iter().filter(|held| {
        &*held.copy.shard_id != shard_id || precedes_in_shard(&held.copy, &candidate.copy)
    });
    let decision = rule.decide(&candidate.key, candidate.arrival_millis, prior);
    let accepted_before = copies.iter().any(|held| held.copy == candidate.copy);
    let decision = match (accepted_before, decision.accepts()) {
        (true, false) => Decision::Keep(Outcome::Unique),
        _ => decision,
    };
    Verdict {
        decision,
        accepted_before,
    }
}

/// Decides the candidates of one event id, in order, against `copies`:
/// each accepted candidate is a prior copy of the later ones. Returns the
/// decisions and the copies to add (accepted now, not before).
pub fn decide_in_order(
    shard_id: &str,
    rule: &Rule,
    candidates: &[&Candidate],
    copies: &[AcceptedCopy],
) -> (Vec<Decision>, Vec<AcceptedCopy>) {
    let mut held = copies.to_vec();
    let mut added = Vec::new();
    let decisions = candidates
        .iter()
        .map(|candidate| {
            let verdict = verdict(shard_id, rule, candidate, &held);
            if verdict.decision.accepts() && !verdict.accepted_before {
                held.push(candidate.accepted());
                added.push(candidate.accepted());
            }
            verdict.decision
        })
        .collect();
    (decisions, added)
}

/// A copy as a map attribute.
fn copy_value(copy: &AcceptedCopy) -> AttributeValue {
    let mut map = HashMap::from([
        (
            attr::FINGERPRINT.to_owned(),
            AttributeValue::S(format!("{:016x}", copy.fingerprint)),
        ),
        (
            attr::ARRIVAL.to_owned(),
            AttributeValue::N(copy.arrival_millis.to_string()),
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

/// A copy read back from its map attribute.
fn copy_from(value: &AttributeValue, shard_ids: &[&Arc<str>]) -> Result<AcceptedCopy, String> {
    let AttributeValue::M(map) = value else {
        return Err(format!("an element of {} is not a map", attr::COPIES));
    };
    let text = |name: &str| match map.get(name) {
        Some(AttributeValue::S(text)) => Ok(text.as_str()),
        _ => Err(format!("a copy's {name} is not a string")),
    };
    let fingerprint = u64::from_str_radix(text(attr::FINGERPRINT)?, 16)
        .map_err(|e| format!("a copy's {}: {e}", attr::FINGERPRINT))?;
    let arrival_millis = number(map.get(attr::ARRIVAL), attr::ARRIVAL)?;
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
    Ok(AcceptedCopy {
        fingerprint,
        arrival_millis,
        copy: CopyRef {
            shard_id,
            sequence_number,
            sub_sequence_number,
        },
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
    use super::*;
    use crate::events::rule::EventKey;

    const W: i64 = 1_000;
    const RULE: Rule = Rule {
        window_millis: W,
        match_fingerprint: true,
    };

    fn candidate(shard: &str, n: u64, fingerprint: u64, arrival_millis: i64) -> Candidate {
        Candidate {
            key: EventKey { id: 9, fingerprint },
            copy: CopyRef {
                shard_id: Arc::from(shard),
                sequence_number: SequenceNumber::from(n),
                sub_sequence_number: n.is_multiple_of(2).then_some(n),
            },
            arrival_millis,
        }
    }

    #[test]
    fn items_round_trip_their_attributes() {
        let copies = vec![
            candidate("shardId-000000000001", 7, u64::MAX, 1_795_238_823_045).accepted(),
            candidate("shardId-000000000002", 8, 1, 1_795_238_823_046).accepted(),
        ];
        let state = ItemState {
            version: Some(4),
            copies,
        };
        let now = 1_795_238_900_000;
        let item = state.to_item(u128::MAX - 1, &RULE, now);
        assert_eq!(
            item[attr::EVENT_ID],
            AttributeValue::S("fffffffffffffffffffffffffffffffe".to_owned())
        );
        assert_eq!(
            item[attr::TTL],
            AttributeValue::N(((now + 2 * W + LAG_ALLOWANCE_MILLIS) / 1_000).to_string())
        );
        let own: Arc<str> = Arc::from("shardId-000000000001");
        let back = ItemState::from_item(&item, &[&own]).unwrap();
        assert_eq!(back, state);
        assert!(Arc::ptr_eq(&back.copies[0].copy.shard_id, &own));
        let mut bad = item.clone();
        bad.insert(attr::COPIES.to_owned(), AttributeValue::S("x".to_owned()));
        assert!(ItemState::from_item(&bad, &[]).is_err());
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

    #[test]
    fn rewrites_drop_only_copies_no_decision_can_consult() {
        let day = LAG_ALLOWANCE_MILLIS;
        let old = candidate("s", 1, 5, 0).accepted();
        let state = ItemState {
            version: Some(1),
            copies: vec![old],
        };
        let newer = candidate("s", 3, 5, 2 * W + 1).accepted();
        // Past the horizon of the newest copy, but within a day of the clock:
        // a shard read behind may still need it.
        let kept = state.with_copies(vec![newer.clone()], &RULE, 2 * W + 1);
        assert_eq!((kept.version, kept.copies.len()), (Some(2), 2));
        let dropped = state.with_copies(vec![newer.clone()], &RULE, 2 * W + day + 1);
        assert_eq!(dropped.copies, vec![newer.clone()]);
        // Adding a copy that is there already changes nothing but the version.
        let again = kept.with_copies(vec![newer], &RULE, 0);
        assert_eq!((again.version, again.copies), (Some(3), kept.copies));
        assert_eq!(
            ItemState::default().with_copies(vec![], &RULE, 0).version,
            Some(1)
        );
    }

    #[test]
    fn verdicts_see_other_shards_and_earlier_records_of_their_own() {
        let mine = candidate("a", 5, 1, 100);
        let later_own = candidate("a", 9, 1, 50).accepted();
        let other = candidate("b", 99, 1, 60).accepted();
        assert_eq!(
            verdict("a", &RULE, &mine, std::slice::from_ref(&later_own)).decision,
            Decision::Keep(Outcome::Unique),
            "a later record of the same shard does not precede"
        );
        assert_eq!(
            verdict("a", &RULE, &mine, &[later_own.clone(), other.clone()]).decision,
            Decision::Duplicate {
                of: other.copy.clone()
            },
            "any copy of another shard precedes"
        );
        // The candidate itself: accepted before, never its own duplicate,
        // even when a copy recorded since would make it one.
        let itself = mine.accepted();
        let rerun = verdict("a", &RULE, &mine, &[itself.clone(), other]);
        assert_eq!(rerun.decision, Decision::Keep(Outcome::Unique));
        assert!(rerun.accepted_before);
        let expired = candidate("a", 1, 1, 100 - W - 1).accepted();
        let rerun = verdict("a", &RULE, &mine, &[expired, itself]);
        assert_eq!(
            rerun.decision,
            Decision::Keep(Outcome::Expired),
            "the rule's outcome"
        );
    }

    #[test]
    fn candidates_of_one_id_see_those_accepted_before_them() {
        let (first, second, third) = (
            candidate("a", 1, 1, 0),
            candidate("a", 2, 1, 10),
            candidate("a", 3, 2, 20),
        );
        let (decisions, added) =
            decide_in_order("a", &RULE, &[&first, &second, &third], &[first.accepted()]);
        assert_eq!(
            decisions,
            vec![
                Decision::Keep(Outcome::Unique),
                Decision::Duplicate {
                    of: first.copy.clone()
                },
                Decision::Keep(Outcome::IdReused),
            ]
        );
        assert_eq!(
            added,
            vec![third.accepted()],
            "the first was accepted before"
        );
    }
}

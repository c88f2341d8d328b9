//! Which accepted copies a rewrite of an item keeps: the copies a decision
//! may still consult, by arrival and by write time, then at most
//! [`MAX_COPIES`], the oldest arrivals evicted first.
//!
//! Accepted copies of one item (one id and payload) are pairwise more than
//! a window apart (E2), so at most two lie within 2 × window of the newest:
//! an item that holds [`MAX_COPIES`] copies holds every copy the decisions
//! of records that arrived near its newest copy consult. A copy is kept
//! longer for two kinds of late decisions:
//! - a shard read behind another, whose records arrived long before the
//!   newest copy: copies are kept for 2 × window + [`LAG_ALLOWANCE_MILLIS`]
//!   after they were *written*;
//! - a replay (after a crash, a lost lease) of records decided before: it
//!   must find every copy that preceded them the first time. By write time,
//!   not arrival, a replay minutes later finds what the first attempt
//!   wrote even for a backlog that arrived days ago.
//!
//! The cap then bounds the item: a copy the time rule would keep is evicted
//! only when the same event was accepted [`MAX_COPIES`] times since (by
//! arrival), each more than a window after the one before; such an
//! eviction is returned, to be counted. Copies this rewrite adds go last:
//! a copy just accepted is the one the next records of its shard need.

use super::item::{HeldCopy, ItemState, LAG_ALLOWANCE_MILLIS};
use crate::events::rule::{AcceptedCopy, Rule};

/// The most copies an item holds: with the longest shard ids (128
/// characters) and sequence numbers (129 digits) the Kinesis API allows,
/// three copies make an item of at most 1 KB (one write unit); a fourth
/// would not fit. Two are what decisions near the newest copy consult.
pub const MAX_COPIES: usize = 3;

/// An item's state after a rewrite, and the copies the cap evicted though
/// the time rule would have kept them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewrite {
    /// The state to write, one version later.
    pub state: ItemState,
    /// Copies dropped only to keep the item within [`MAX_COPIES`].
    pub evicted: Vec<HeldCopy>,
}

impl ItemState {
    /// The state after adding `added` (copies not already there, written
    /// at `now_millis`, the wall clock), keeping the copies [`keeps`]
    /// keeps and then at most [`MAX_COPIES`], one version later.
    pub fn with_copies(&self, added: Vec<AcceptedCopy>, rule: &Rule, now_millis: i64) -> Rewrite {
        let mut new: Vec<HeldCopy> = Vec::with_capacity(added.len());
        for accepted in added {
            if !self.holds(&accepted.copy) && !new.iter().any(|h| h.accepted.copy == accepted.copy)
            {
                new.push(HeldCopy {
                    accepted,
                    written_millis: now_millis,
                });
            }
        }
        let newest = self
            .copies
            .iter()
            .chain(&new)
            .map(|held| held.accepted.arrival_millis)
            .max()
            .unwrap_or(0);
        let mut old: Vec<HeldCopy> = self
            .copies
            .iter()
            .filter(|held| keeps(held, newest, rule, now_millis))
            .cloned()
            .collect();
        let mut evicted = Vec::new();
        while old.len() + new.len() > MAX_COPIES {
            let from = if old.is_empty() { &mut new } else { &mut old };
            evicted.push(from.remove(oldest_arrival(from)));
        }
        old.append(&mut new);
        Rewrite {
            state: ItemState {
                version: Some(self.version.map_or(1, |v| v + 1)),
                copies: old,
            },
            evicted,
        }
    }
}

/// Whether a rewrite at `now_millis` may keep `held`, by time: within the
/// rule's horizon (2 × window) of the item's `newest` arrival, or written
/// less than the horizon plus [`LAG_ALLOWANCE_MILLIS`] ago.
pub fn keeps(held: &HeldCopy, newest: i64, rule: &Rule, now_millis: i64) -> bool {
    let horizon = rule.horizon_millis();
    newest.saturating_sub(held.accepted.arrival_millis) <= horizon
        || now_millis.saturating_sub(held.written_millis)
            <= horizon.saturating_add(LAG_ALLOWANCE_MILLIS)
}

/// The index of the copy that arrived first (the earlier position on a
/// tie); 0 for an empty list.
fn oldest_arrival(copies: &[HeldCopy]) -> usize {
    copies
        .iter()
        .enumerate()
        .min_by(|(_, a), (_, b)| {
            a.accepted
                .arrival_millis
                .cmp(&b.accepted.arrival_millis)
                .then_with(|| a.accepted.copy.position_cmp(&b.accepted.copy))
        })
        .map_or(0, |(index, _)| index)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use sequence_range::SequenceNumber;

    use super::*;
    use crate::events::rule::CopyRef;

    const W: i64 = 1_000;
    const DAY: i64 = LAG_ALLOWANCE_MILLIS;
    const RULE: Rule = Rule {
        window_millis: W,
        match_fingerprint: true,
    };

    fn copy(n: u64, arrival_millis: i64) -> AcceptedCopy {
        AcceptedCopy {
            fingerprint: 5,
            arrival_millis,
            copy: CopyRef {
                shard_id: Arc::from("shardId-000000000000"),
                sequence_number: SequenceNumber::from(n),
                sub_sequence_number: None,
            },
        }
    }

    fn arrivals(state: &ItemState) -> Vec<i64> {
        state.accepted().map(|c| c.arrival_millis).collect()
    }

    #[test]
    fn copies_are_kept_by_arrival_or_by_write_time() {
        let state = ItemState::default()
            .with_copies(vec![copy(1, 0)], &RULE, 10_000)
            .state;
        assert_eq!(state.copies[0].written_millis, 10_000);
        let newer = copy(3, 2 * W + 1);
        // Past the horizon of the newest copy, but written less than the
        // horizon and a day ago: a replay or a shard read behind may need it.
        let kept = state.with_copies(vec![newer.clone()], &RULE, 10_000 + 2 * W + DAY);
        assert_eq!(arrivals(&kept.state), [0, 2 * W + 1]);
        assert_eq!(kept.state.version, Some(2));
        let dropped = state.with_copies(vec![newer.clone()], &RULE, 10_000 + 2 * W + DAY + 1);
        assert_eq!(arrivals(&dropped.state), [2 * W + 1]);
        assert!(dropped.evicted.is_empty(), "dropped by time, not evicted");
        // A backlog that arrived long ago: kept by its write time whatever
        // its arrival, so a replay minutes later finds it.
        let backlog = ItemState::default()
            .with_copies(vec![copy(1, 0)], &RULE, 30 * DAY)
            .state;
        let later = backlog.with_copies(vec![copy(2, 5 * W)], &RULE, 30 * DAY + 60_000);
        assert_eq!(arrivals(&later.state), [0, 5 * W]);
        // Within the horizon of the newest copy: kept however long ago it
        // was written.
        let close = backlog.with_copies(vec![copy(2, 2 * W)], &RULE, 90 * DAY);
        assert_eq!(arrivals(&close.state), [0, 2 * W]);
        // A copy that is there already changes nothing but the version.
        let again = kept.state.with_copies(vec![newer], &RULE, 0);
        assert_eq!(again.state.copies, kept.state.copies);
        assert_eq!(again.state.version, Some(3));
        assert_eq!(
            ItemState::default()
                .with_copies(vec![], &RULE, 0)
                .state
                .version,
            Some(1)
        );
    }

    #[test]
    fn the_cap_evicts_the_oldest_arrivals_and_keeps_new_copies() {
        // One event accepted again and again, each more than a window after
        // the one before, all written within the day.
        let mut state = ItemState::default();
        let mut evicted = Vec::new();
        for n in 0..6_u64 {
            let arrival = i64::try_from(n).unwrap() * (W + 1);
            let rewrite = state.with_copies(vec![copy(n, arrival)], &RULE, 10_000);
            evicted.extend(rewrite.evicted);
            state = rewrite.state;
            assert!(state.copies.len() <= MAX_COPIES);
        }
        assert_eq!(arrivals(&state), [3 * (W + 1), 4 * (W + 1), 5 * (W + 1)]);
        let gone: Vec<i64> = evicted.iter().map(|h| h.accepted.arrival_millis).collect();
        assert_eq!(gone, [0, W + 1, 2 * (W + 1)]);
        // A copy of a shard read far behind goes in; the oldest of the
        // others makes room.
        let behind = copy(100, -10 * DAY);
        let rewrite = state.with_copies(vec![behind.clone()], &RULE, 10_000);
        assert_eq!(
            arrivals(&rewrite.state),
            [4 * (W + 1), 5 * (W + 1), behind.arrival_millis]
        );
        // More new copies than the cap: the newest of them.
        let run: Vec<AcceptedCopy> = (0..5)
            .map(|n| copy(200 + n, 100 * W * (n as i64 + 1)))
            .collect();
        let rewrite = ItemState::default().with_copies(run, &RULE, 10_000);
        assert_eq!(arrivals(&rewrite.state), [300 * W, 400 * W, 500 * W]);
        assert_eq!(rewrite.evicted.len(), 2);
    }
}

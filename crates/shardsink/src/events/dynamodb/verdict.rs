//! How the DynamoDB store decides candidates against the copies an item
//! holds — the accepted copies of the candidates' event (id and payload) — with
//! the rule ([`Rule::decide`]). Pure: no request is made here.

use crate::events::rule::{AcceptedCopy, Decision, Outcome, Rule};
use crate::events::store::{Candidate, precedes_in_shard};

use super::item::ItemState;

/// How the DynamoDB store decides one candidate against the copies its item
/// holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The decision.
    pub decision: Decision,
    /// The candidate is itself among the copies: accepted by an earlier
    /// attempt (a rerun), so nothing is written.
    pub accepted_before: bool,
}

/// Decides `candidate` of shard `shard_id` against `copies` (the held
/// copies of its item). Its prior copies are the copies of other shards
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
pub fn verdict<'a>(
    shard_id: &str,
    rule: &Rule,
    candidate: &Candidate,
    copies: impl Iterator<Item = &'a AcceptedCopy> + Clone,
) -> Verdict {
    let accepted_before = copies.clone().any(|held| held.copy == candidate.copy);
    let prior = copies.filter(|held| {
        &*held.copy.shard_id != shard_id || precedes_in_shard(&held.copy, &candidate.copy)
    });
    let decision = rule.decide(&candidate.key, candidate.arrival_millis, prior);
    let decision = match (accepted_before, decision.accepts()) {
        (true, false) => Decision::Keep(Outcome::Unique),
        _ => decision,
    };
    Verdict {
        decision,
        accepted_before,
    }
}

/// Decides the candidates of one item, in order, against its `state`:
/// each accepted candidate is a prior copy of the later ones. Returns the
/// decisions and the copies to add (accepted now, not before).
pub fn decide_in_order(
    shard_id: &str,
    rule: &Rule,
    candidates: &[&Candidate],
    state: &ItemState,
) -> (Vec<Decision>, Vec<AcceptedCopy>) {
    let mut added: Vec<AcceptedCopy> = Vec::new();
    let decisions = candidates
        .iter()
        .map(|candidate| {
            let verdict = verdict(shard_id, rule, candidate, state.accepted().chain(&added));
            if verdict.decision.accepts() && !verdict.accepted_before {
                added.push(candidate.accepted());
            }
            verdict.decision
        })
        .collect();
    (decisions, added)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use sequence_range::SequenceNumber;

    use super::*;
    use crate::events::dynamodb::item::HeldCopy;
    use crate::events::rule::{CopyRef, EventKey};

    const W: i64 = 1_000;
    const RULE: Rule = Rule {
        window_millis: W,
        match_fingerprint: true,
    };

    fn candidate(shard: &str, n: u64, arrival_millis: i64) -> Candidate {
        Candidate {
            key: EventKey {
                id: 9,
                fingerprint: 5,
            },
            copy: CopyRef {
                shard_id: Arc::from(shard),
                sequence_number: SequenceNumber::from(n),
                sub_sequence_number: n.is_multiple_of(2).then_some(n),
            },
            arrival_millis,
        }
    }

    fn state(copies: &[AcceptedCopy]) -> ItemState {
        ItemState {
            version: Some(1),
            copies: copies
                .iter()
                .map(|accepted| HeldCopy {
                    accepted: accepted.clone(),
                    written_millis: 0,
                })
                .collect(),
        }
    }

    #[test]
    fn verdicts_see_other_shards_and_earlier_records_of_their_own() {
        let mine = candidate("a", 5, 100);
        let later_own = candidate("a", 9, 50).accepted();
        let other = candidate("b", 99, 60).accepted();
        assert_eq!(
            verdict("a", &RULE, &mine, [&later_own].into_iter()).decision,
            Decision::Keep(Outcome::Unique),
            "a later record of the same shard does not precede"
        );
        assert_eq!(
            verdict("a", &RULE, &mine, [&later_own, &other].into_iter()).decision,
            Decision::Duplicate {
                of: other.copy.clone()
            },
            "any copy of another shard precedes"
        );
        // The candidate itself: accepted before, never its own duplicate,
        // even when a copy recorded since would make it one.
        let itself = mine.accepted();
        let rerun = verdict("a", &RULE, &mine, [&itself, &other].into_iter());
        assert_eq!(rerun.decision, Decision::Keep(Outcome::Unique));
        assert!(rerun.accepted_before);
        let expired = candidate("a", 1, 100 - W - 1).accepted();
        let rerun = verdict("a", &RULE, &mine, [&expired, &itself].into_iter());
        assert_eq!(
            rerun.decision,
            Decision::Keep(Outcome::Expired),
            "the rule's outcome"
        );
    }

    #[test]
    fn candidates_of_one_item_see_those_accepted_before_them() {
        let (first, second, third) = (
            candidate("a", 1, 0),
            candidate("a", 2, 10),
            candidate("a", 3, 20 + W),
        );
        let (decisions, added) = decide_in_order(
            "a",
            &RULE,
            &[&first, &second, &third],
            &state(&[first.accepted()]),
        );
        assert_eq!(
            decisions,
            vec![
                Decision::Keep(Outcome::Unique),
                Decision::Duplicate {
                    of: first.copy.clone()
                },
                Decision::Keep(Outcome::Expired),
            ]
        );
        assert_eq!(
            added,
            vec![third.accepted()],
            "the first was accepted before"
        );
    }
}

//! The event decision rule: whether a user record is the accepted copy of
//! its event or a duplicate of an earlier accepted copy — a pure function of
//! the record's [`EventKey`], its arrival time and the accepted copies that
//! precede it. Both stores (the local store and the DynamoDB store) only
//! find those copies; this module decides.
//!
//! For a record `r` with key `(id, fingerprint)` arriving at `t`, and the
//! *prior* accepted copies of `id` (copies that precede `r`; see the stores
//! for what precedes means), with `Δ = t − arrival(copy)` — negative for a
//! prior copy that arrived later (a lagging shard's record decided after
//! another shard's copy, or an arrival time that went back) — and the
//! distance `|Δ|`:
//! - copies with `|Δ| > 2 × window` are forgotten (stores keep copies at
//!   least that long, and never consult older ones);
//! - a copy *matches* when fingerprints are ignored (`--event-fingerprint
//!   none`) or its fingerprint is `r`'s;
//! - a matching copy with `|Δ| ≤ window` makes `r` a **duplicate** of the
//!   latest such copy;
//! - otherwise a matching copy (outside the window, earlier or later) makes
//!   `r` **expired**: kept, and accepted again;
//! - otherwise a copy of another fingerprint within the window makes `r`
//!   **id reused**: kept and accepted;
//! - otherwise `r` is **unique**: kept and accepted.
//!
//! A record whose id cannot be found (`id_missing`) is kept and never
//! accepted: it has nothing to match.
//!
//! The window is symmetric, as `shardsink verify` and every reader of the
//! archive measure it: two copies are within the window when they arrived at
//! most a window apart, whichever came first.
//!
//! Consequence (checked by the property test below): no two kept copies with
//! the same id and matching fingerprints are within the window of each
//! other, whatever the order the records come in.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use sequence_range::SequenceNumber;

/// What identifies an event: a 128-bit hash of its id and a 64-bit hash of
/// its payload (0 when fingerprints are ignored). XXH3 (the `xxhash-rust`
/// crate): two distinct ids share a hash with probability 2⁻¹²⁸.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventKey {
    /// XXH3-128 of the id's bytes.
    pub id: u128,
    /// XXH3-64 of the payload, or 0 with `--event-fingerprint none`.
    pub fingerprint: u64,
}

/// One user record's place in the stream: the copy of an event it is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CopyRef {
    /// The shard it was read from (Kinesis `ShardId`).
    pub shard_id: Arc<str>,
    /// Its Kinesis record's sequence number.
    pub sequence_number: SequenceNumber,
    /// Its position in a KPL aggregate; `None` outside KPL.
    pub sub_sequence_number: Option<u64>,
}

impl CopyRef {
    /// Order within one shard: sequence number, then sub-sequence number.
    /// Copies of different shards are ordered by shard id first (only to
    /// make choices deterministic; the stores decide what precedes).
    pub fn position_cmp(&self, other: &Self) -> Ordering {
        self.shard_id
            .cmp(&other.shard_id)
            .then_with(|| self.sequence_number.cmp(&other.sequence_number))
            .then_with(|| {
                self.sub_sequence_number
                    .unwrap_or(0)
                    .cmp(&other.sub_sequence_number.unwrap_or(0))
            })
    }
}

impl fmt::Display for CopyRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.shard_id, self.sequence_number)?;
        if let Some(sub) = self.sub_sequence_number {
            write!(f, "/{sub}")?;
        }
        Ok(())
    }
}

/// An accepted copy of an event, as the stores keep it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptedCopy {
    /// The copy's [`EventKey::fingerprint`].
    pub fingerprint: u64,
    /// Its `ApproximateArrivalTimestamp`, ms since the Unix epoch.
    pub arrival_millis: i64,
    /// Where it is.
    pub copy: CopyRef,
}

/// What happened to a user record; the `outcome` label of
/// `shardsink_events_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// No accepted copy of the event: kept (main prefix) and accepted.
    Unique,
    /// An accepted copy within the window: written to the duplicates prefix.
    Duplicate,
    /// Accepted copies, all older than the window: kept and accepted again.
    Expired,
    /// Accepted copies of the id within the window, all with other payloads:
    /// kept and accepted. Only the local store tells it from [`Self::Unique`]:
    /// the DynamoDB store keeps each payload's copies in an item of their
    /// own and reports such a record as unique.
    IdReused,
    /// No id could be read from the record: kept, not accepted.
    IdMissing,
}

impl Outcome {
    /// Every outcome, for metrics.
    pub const ALL: [Self; 5] = [
        Self::Unique,
        Self::Duplicate,
        Self::Expired,
        Self::IdReused,
        Self::IdMissing,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unique => "unique",
            Self::Duplicate => "duplicate",
            Self::Expired => "expired",
            Self::IdReused => "id_reused",
            Self::IdMissing => "id_missing",
        }
    }

    /// The outcome a label names.
    pub fn from_str_label(label: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|outcome| outcome.as_str() == label)
    }
}

/// The decision for one user record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Kept: written in the main format (or, when the format rejects it, to
    /// the error prefix). Accepted unless the outcome is
    /// [`Outcome::IdMissing`].
    Keep(Outcome),
    /// A duplicate of the accepted copy `of`: written to the duplicates
    /// prefix.
    Duplicate {
        /// The accepted copy it repeats.
        of: CopyRef,
    },
}

impl Decision {
    /// The metric outcome.
    pub fn outcome(&self) -> Outcome {
        match self {
            Self::Keep(outcome) => *outcome,
            Self::Duplicate { .. } => Outcome::Duplicate,
        }
    }

    /// Whether the record becomes an accepted copy.
    pub fn accepts(&self) -> bool {
        matches!(
            self,
            Self::Keep(Outcome::Unique | Outcome::Expired | Outcome::IdReused)
        )
    }
}

/// The rule's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// `--event-dedup-window`, in ms (at least 1).
    pub window_millis: i64,
    /// `--event-fingerprint payload`: a duplicate needs the same payload.
    pub match_fingerprint: bool,
}

impl Rule {
    /// How far back stores must keep accepted copies, in ms: twice the
    /// window (older copies are never consulted).
    pub fn horizon_millis(&self) -> i64 {
        self.window_millis.saturating_mul(2)
    }

    /// Decides a record with `key` arriving at `arrival_millis`, given the
    /// accepted copies of its id that precede it (`prior`; any order, may
    /// include copies further than the horizon away, earlier or later, which
    /// are ignored). Distances are `|Δ|` (see the module documentation).
    pub fn decide<'a>(
        &self,
        key: &EventKey,
        arrival_millis: i64,
        prior: impl IntoIterator<Item = &'a AcceptedCopy>,
    ) -> Decision {
        let mut duplicate_of: Option<&AcceptedCopy> = None;
        let (mut expired, mut reused) = (false, false);
        for copy in prior {
            let distance = arrival_millis
                .saturating_sub(copy.arrival_millis)
                .saturating_abs();
            if distance > self.horizon_millis() {
                continue;
            }
            let matches = !self.match_fingerprint || copy.fingerprint == key.fingerprint;
            let within = distance <= self.window_millis;
            match (matches, within) {
                (true, true) => {
                    if duplicate_of.is_none_or(|best| later(copy, best)) {
                        duplicate_of = Some(copy);
                    }
                }
                (true, false) => expired = true,
                (false, true) => reused = true,
                (false, false) => {}
            }
        }
        match duplicate_of {
            Some(copy) => Decision::Duplicate {
                of: copy.copy.clone(),
            },
            None if expired => Decision::Keep(Outcome::Expired),
            None if reused => Decision::Keep(Outcome::IdReused),
            None => Decision::Keep(Outcome::Unique),
        }
    }
}

/// Whether `a` is the later accepted copy: later arrival, then later
/// position (a total order, so the choice never depends on listing order).
fn later(a: &AcceptedCopy, b: &AcceptedCopy) -> bool {
    a.arrival_millis
        .cmp(&b.arrival_millis)
        .then_with(|| a.copy.position_cmp(&b.copy))
        == Ordering::Greater
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const W: i64 = 1_000;

    fn copy(n: u64, fingerprint: u64, arrival_millis: i64) -> AcceptedCopy {
        AcceptedCopy {
            fingerprint,
            arrival_millis,
            copy: CopyRef {
                shard_id: Arc::from("shardId-000000000000"),
                sequence_number: SequenceNumber::from(n),
                sub_sequence_number: None,
            },
        }
    }

    fn key(fingerprint: u64) -> EventKey {
        EventKey { id: 7, fingerprint }
    }

    fn rule(match_fingerprint: bool) -> Rule {
        Rule {
            window_millis: W,
            match_fingerprint,
        }
    }

    #[test]
    fn the_latest_matching_copy_within_the_window_is_the_original() {
        let prior = [copy(1, 5, 0), copy(2, 5, 400), copy(3, 6, 900)];
        assert_eq!(
            rule(true).decide(&key(5), 1_000, &prior),
            Decision::Duplicate {
                of: prior[1].copy.clone()
            }
        );
        // Without fingerprints the other payload matches too.
        assert_eq!(
            rule(false).decide(&key(5), 1_000, &prior),
            Decision::Duplicate {
                of: prior[2].copy.clone()
            }
        );
        // The window's edge is inside it.
        assert_eq!(
            rule(true).decide(&key(5), 1_400, &prior),
            Decision::Duplicate {
                of: prior[1].copy.clone()
            }
        );
    }

    #[test]
    fn older_matches_expire_and_other_payloads_reuse_the_id() {
        let prior = [copy(1, 5, 0)];
        assert_eq!(
            rule(true).decide(&key(5), W + 1, &prior),
            Decision::Keep(Outcome::Expired)
        );
        assert_eq!(
            rule(true).decide(&key(6), 10, &prior),
            Decision::Keep(Outcome::IdReused)
        );
        assert_eq!(
            rule(true).decide(&key(6), W + 1, &prior),
            Decision::Keep(Outcome::Unique),
            "another payload past the window is forgotten"
        );
        assert_eq!(
            rule(true).decide(&key(5), 2 * W + 1, &prior),
            Decision::Keep(Outcome::Unique),
            "a match past twice the window is forgotten"
        );
        // A prior copy that arrived later (a lagging shard's record): the
        // distance counts, not the order.
        assert_eq!(
            rule(true).decide(&key(5), -W, &prior),
            Decision::Duplicate {
                of: prior[0].copy.clone()
            },
            "a copy that arrived a window later is within the window"
        );
        assert_eq!(
            rule(true).decide(&key(5), -W - 1, &prior),
            Decision::Keep(Outcome::Expired),
            "a copy that arrived more than a window later is outside it"
        );
        assert_eq!(
            rule(true).decide(&key(6), -W + 1, &prior),
            Decision::Keep(Outcome::IdReused)
        );
        assert_eq!(
            rule(true).decide(&key(5), -2 * W - 1, &prior),
            Decision::Keep(Outcome::Unique),
            "a copy that arrived more than twice the window later is forgotten"
        );
        assert_eq!(
            rule(true).decide(&key(5), 0, []),
            Decision::Keep(Outcome::Unique)
        );
    }

    #[test]
    fn outcomes_round_trip_their_labels() {
        for outcome in Outcome::ALL {
            assert_eq!(Outcome::from_str_label(outcome.as_str()), Some(outcome));
        }
        assert!(Decision::Keep(Outcome::Expired).accepts());
        assert!(!Decision::Keep(Outcome::IdMissing).accepts());
        assert!(
            !Decision::Duplicate {
                of: copy(1, 0, 0).copy
            }
            .accepts()
        );
    }

    /// One record of a generated stream: (id, payload, arrival).
    fn events() -> impl Strategy<Value = Vec<(u8, u8, i64)>> {
        prop::collection::vec((0u8..6, 0u8..3, 0i64..4_000), 0..80)
    }

    proptest! {
        /// The rule against its definition, scanning every accepted copy in
        /// a naive list; and the statement it exists for: kept copies of a
        /// matching key are never within the window of each other.
        #[test]
        fn agrees_with_the_naive_model(
            events in events(),
            match_fingerprint in any::<bool>(),
        ) {
            let rule = rule(match_fingerprint);
            let mut accepted: Vec<(u8, AcceptedCopy)> = Vec::new();
            let mut kept: Vec<(u8, u8, i64)> = Vec::new();
            for (n, (id, payload, arrival)) in events.iter().copied().enumerate() {
                let fingerprint = u64::from(payload);
                let prior: Vec<&AcceptedCopy> = accepted
                    .iter()
                    .filter(|(other, _)| *other == id)
                    .map(|(_, copy)| copy)
                    .collect();
                let decision = rule.decide(
                    &EventKey { id: u128::from(id), fingerprint },
                    arrival,
                    prior.iter().copied(),
                );
                // The definition, written out plainly.
                let fp_ok = |c: &AcceptedCopy| !match_fingerprint || c.fingerprint == fingerprint;
                let remembered = |c: &AcceptedCopy| (arrival - c.arrival_millis).abs() <= 2 * W;
                let in_window = |c: &AcceptedCopy| (arrival - c.arrival_millis).abs() <= W;
                let original = prior
                    .iter()
                    .filter(|c| fp_ok(c) && in_window(c))
                    .max_by_key(|c| (c.arrival_millis, c.copy.sequence_number.clone()));
                let expected = match original {
                    Some(c) => Decision::Duplicate { of: c.copy.clone() },
                    None if prior.iter().any(|c| fp_ok(c) && remembered(c)) => {
                        Decision::Keep(Outcome::Expired)
                    }
                    None if prior.iter().any(|c| in_window(c)) => Decision::Keep(Outcome::IdReused),
                    None => Decision::Keep(Outcome::Unique),
                };
                prop_assert_eq!(&decision, &expected);
                if decision.accepts() {
                    accepted.push((id, copy(n as u64, fingerprint, arrival)));
                    for &(other_id, other_payload, other_arrival) in &kept {
                        let same = other_id == id && (!match_fingerprint || other_payload == payload);
                        prop_assert!(
                            !same || (arrival - other_arrival).abs() > W,
                            "two kept copies of one event within the window"
                        );
                    }
                    kept.push((id, payload, arrival));
                }
            }
        }
    }
}

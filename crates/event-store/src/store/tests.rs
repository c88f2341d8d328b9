//! Tests of the store: decisions against a naive model, replays, reopening,
//! expiry, epochs and filters.

use proptest::prelude::*;

use std::time::Duration;

use std::sync::Arc;

use sequence_range::SequenceNumber;

use super::*;
use crate::decide::{holding, write_epoch};
use crate::epochs::Epoch;
use crate::lineage::{Candidate, Lineage, precedes_in_shard};
use crate::rule::{AcceptedCopy, CopyRef, Decision, EventKey, Outcome, Rule};
use crate::runs::Run;
use crate::shards::Watermark;

const W: i64 = 1_000;
const SETTINGS: &str = "events;id=partition-key;fingerprint=payload";

fn rule(match_fingerprint: bool) -> Rule {
    Rule {
        window_millis: W,
        match_fingerprint,
    }
}

/// Epochs of 16 keys: most tests read keys across several epochs.
fn options() -> LocalOptions {
    LocalOptions {
        epoch_keys: 16,
        ..LocalOptions::default()
    }
}

fn open(dir: &tempfile::TempDir) -> LocalStore {
    LocalStore::open(dir.path(), options()).unwrap()
}

/// A candidate of `shard`: (id, fingerprint, arrival) at `(sequence, sub)`.
fn candidate(
    shard: &Arc<str>,
    (id, fingerprint, arrival): (u8, u8, i64),
    sequence: u64,
    sub: Option<u64>,
) -> Candidate {
    Candidate {
        key: EventKey {
            id: u128::from(id) << 100 | 0xfeed,
            fingerprint: u64::from(fingerprint),
        },
        copy: CopyRef {
            shard_id: Arc::clone(shard),
            sequence_number: SequenceNumber::from(sequence),
            sub_sequence_number: sub,
        },
        arrival_millis: arrival,
    }
}

fn through(run: &[Candidate]) -> SequenceNumber {
    run.last().map_or_else(SequenceNumber::zero, |last| {
        last.copy.sequence_number.clone()
    })
}

/// The naive model: every accepted copy in a list; the prior copies of a
/// candidate are the preceding ones of its shard and all of its
/// ancestors'.
#[derive(Default)]
struct Model {
    accepted: Vec<(u128, AcceptedCopy)>,
}

impl Model {
    fn decide(&mut self, lineage: &Lineage, rule: &Rule, run: &[Candidate]) -> Vec<Decision> {
        run.iter()
            .map(|candidate| {
                let prior: Vec<&AcceptedCopy> = self
                    .accepted
                    .iter()
                    .filter(|(id, copy)| {
                        *id == candidate.key.id
                            && if copy.copy.shard_id == lineage.shard_id {
                                precedes_in_shard(&copy.copy, &candidate.copy)
                            } else {
                                lineage.ancestors.contains(&copy.copy.shard_id)
                            }
                    })
                    .map(|(_, copy)| copy)
                    .collect();
                let decision = rule.decide(&candidate.key, candidate.arrival_millis, prior);
                if decision.accepts() {
                    self.accepted.push((candidate.key.id, candidate.accepted()));
                }
                decision
            })
            .collect()
    }
}

/// One generated run: its records `(id, fingerprint, arrival, same
/// aggregate as the previous record)`, whether the store is reopened
/// before it, and which earlier run of the same shard to replay after
/// it (an index, reduced modulo the runs so far).
type RunSpec = (Vec<(u8, u8, i64, bool)>, bool, Option<usize>);

fn runs() -> impl Strategy<Value = Vec<RunSpec>> {
    prop::collection::vec(
        (
            prop::collection::vec(
                (0u8..6, 0u8..3, 0i64..4_000, prop::bool::weighted(0.2)),
                0..25,
            ),
            prop::bool::weighted(0.3),
            prop::option::weighted(0.3, 0usize..8),
        ),
        1..6,
    )
}

/// Turns specs into candidates of `shard`, sequence numbers increasing
/// (KPL aggregates share one and count sub-sequence numbers).
fn build(shard: &Arc<str>, specs: &[RunSpec], next: &mut u64) -> Vec<Vec<Candidate>> {
    let mut previous: Option<(u64, Option<u64>)> = None;
    specs
        .iter()
        .map(|(records, _, _)| {
            records
                .iter()
                .map(|&(id, fingerprint, arrival, aggregate)| {
                    let (sequence, sub) = match previous {
                        Some((sequence, sub)) if aggregate => {
                            (sequence, Some(sub.map_or(1, |sub| sub + 1)))
                        }
                        _ => {
                            *next += 1 + u64::from(id);
                            (*next, None)
                        }
                    };
                    previous = Some((sequence, sub));
                    candidate(shard, (id, fingerprint, arrival), sequence, sub)
                })
                .collect()
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    /// Runs on a parent shard, then on its child, decided through the
    /// store (reopened between some runs, some earlier runs replayed)
    /// decide as the naive model does, and replays decide as the first
    /// time.
    #[test]
    fn agrees_with_the_naive_model(
        parent_specs in runs(),
        child_specs in runs(),
        match_fingerprint in any::<bool>(),
    ) {
        let rule = rule(match_fingerprint);
        let dir = tempfile::tempdir().unwrap();
        let mut store = Some(open(&dir));
        let mut model = Model::default();
        let parent = Lineage::root("shardId-000000000000");
        let child = Lineage {
            shard_id: Arc::from("shardId-000000000001"),
            ancestors: vec![Arc::clone(&parent.shard_id)],
        };
        let mut next = 0;
        for (lineage, specs) in [(&parent, &parent_specs), (&child, &child_specs)] {
            let runs = build(&lineage.shard_id, specs, &mut next);
            let mut decided: Vec<Vec<Decision>> = Vec::new();
            for (run, (_, reopen, replay)) in runs.iter().zip(specs) {
                if *reopen {
                    drop(store.take());
                    store = Some(open(&dir));
                }
                let local = store.as_ref().unwrap();
                let decisions = local
                    .decide(lineage, &rule, SETTINGS, run, &through(run))
                    .unwrap();
                prop_assert_eq!(&decisions, &model.decide(lineage, &rule, run));
                decided.push(decisions);
                if let Some(replay) = replay {
                    let index = replay % decided.len();
                    let again = local
                        .decide(lineage, &rule, SETTINGS, &runs[index], &through(&runs[index]))
                        .unwrap();
                    prop_assert_eq!(&again, &decided[index], "replay of run {}", index);
                }
            }
        }
    }
}

#[test]
fn a_preceding_copy_that_arrived_later_counts_by_its_distance() {
    // A parent's last copies arrived after its child's first records
    // (a lagging clock, or arrival times that went back): the window is
    // the distance either way, as `verify` measures it.
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let rule = rule(true);
    let parent = Lineage::root("shardId-000000000000");
    let child = Lineage {
        shard_id: Arc::from("shardId-000000000001"),
        ancestors: vec![Arc::clone(&parent.shard_id)],
    };
    let parent_run = vec![
        candidate(&parent.shard_id, (1, 0, 10 * W), 1, None),
        candidate(&parent.shard_id, (2, 0, 10 * W), 2, None),
    ];
    store
        .decide(&parent, &rule, SETTINGS, &parent_run, &through(&parent_run))
        .unwrap();
    let child_run = vec![
        // Two windows and a bit before the parent's copy: forgotten.
        candidate(&child.shard_id, (1, 0, 8 * W - 1), 10, None),
        // A window and a bit before it: outside the window.
        candidate(&child.shard_id, (2, 0, 9 * W - 1), 11, None),
        // A window before it: within, and the parent's is the latest
        // copy within the window.
        candidate(&child.shard_id, (2, 0, 9 * W), 12, None),
    ];
    assert_eq!(
        store
            .decide(&child, &rule, SETTINGS, &child_run, &through(&child_run))
            .unwrap(),
        vec![
            Decision::Keep(Outcome::Unique),
            Decision::Keep(Outcome::Expired),
            Decision::Duplicate {
                of: parent_run[1].copy.clone()
            },
        ]
    );
}

#[test]
fn a_replay_decides_as_the_first_attempt_after_later_runs() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let rule = rule(true);
    let lineage = Lineage::root("shardId-000000000000");
    let shard = &lineage.shard_id;
    // Run A: event 1 twice, event 2 with two payloads.
    let a = vec![
        candidate(shard, (1, 0, 100), 10, None),
        candidate(shard, (1, 0, 150), 11, None),
        candidate(shard, (2, 0, 200), 12, None),
        candidate(shard, (2, 1, 210), 13, None),
    ];
    // Run B: event 3, and event 1 again past the window.
    let b = vec![
        candidate(shard, (3, 0, 300), 20, Some(0)),
        candidate(shard, (3, 0, 300), 20, Some(1)),
        candidate(shard, (1, 0, 100 + W + 1), 21, None),
    ];
    let first = store
        .decide(&lineage, &rule, SETTINGS, &a, &through(&a))
        .unwrap();
    assert_eq!(
        first,
        vec![
            Decision::Keep(Outcome::Unique),
            Decision::Duplicate {
                of: a[0].copy.clone()
            },
            Decision::Keep(Outcome::Unique),
            Decision::Keep(Outcome::IdReused),
        ]
    );
    assert_eq!(
        store
            .decide(&lineage, &rule, SETTINGS, &a, &through(&a))
            .unwrap(),
        first,
        "replayed at once"
    );
    let second = store
        .decide(&lineage, &rule, SETTINGS, &b, &through(&b))
        .unwrap();
    assert_eq!(
        second,
        vec![
            Decision::Keep(Outcome::Unique),
            Decision::Duplicate {
                of: b[0].copy.clone()
            },
            Decision::Keep(Outcome::Expired),
        ]
    );
    drop(store);
    let store = open(&dir);
    assert_eq!(
        store
            .decide(&lineage, &rule, SETTINGS, &a, &through(&a))
            .unwrap(),
        first,
        "replayed after run B and a reopen"
    );
    assert_eq!(
        store
            .decide(&lineage, &rule, SETTINGS, &b, &through(&b))
            .unwrap(),
        second
    );
    // Nothing was stored twice: event 1 has its two accepted copies.
    assert_eq!(store.stored(shard, a[0].key.id).len(), 2);
}

#[test]
fn watermarks_and_ended_marks_persist_and_insert_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let shard: Arc<str> = Arc::from("shardId-000000000003");
    assert_eq!(store.watermark(&shard).unwrap(), None);
    let watermark = Watermark {
        settings: SETTINGS.to_owned(),
        through: SequenceNumber::from(42_u64),
    };
    store.set_watermark(&shard, &watermark).unwrap();
    store.mark_ended(&shard, SETTINGS).unwrap();
    let copies: Vec<(EventKey, AcceptedCopy)> = (0..3)
        .map(|n| {
            let candidate = candidate(&shard, (n, 0, 5), u64::from(n) + 1, None);
            (candidate.key, candidate.accepted())
        })
        .collect();
    store.insert(&copies).unwrap();
    store.insert(&copies).unwrap();
    store.insert(&copies[..1]).unwrap();

    let second = LocalStore::open(dir.path(), LocalOptions::default());
    assert!(
        matches!(&second, Err(LocalStoreError::Locked { path }) if path == dir.path()),
        "{:?}",
        second.err()
    );
    let clone = store.clone();
    drop(store);
    assert_eq!(clone.watermark(&shard).unwrap(), Some(watermark.clone()));
    drop(clone);

    let store = open(&dir);
    assert_eq!(store.watermark(&shard).unwrap(), Some(watermark));
    assert!(store.is_ended(&shard, SETTINGS).unwrap());
    assert!(
        !store
            .is_ended(&shard, "events;id=payload;fingerprint=none")
            .unwrap()
    );
    assert!(!store.is_ended("shardId-000000000004", SETTINGS).unwrap());
    for (event, copy) in &copies {
        assert_eq!(store.stored(&shard, event.id), vec![copy.clone()]);
    }
    // A record of a child finds the inserted copy of its parent.
    let child = Lineage {
        shard_id: Arc::from("shardId-000000000005"),
        ancestors: vec![Arc::clone(&shard)],
    };
    let run = [candidate(&child.shard_id, (1, 0, 6), 100, None)];
    assert_eq!(
        store
            .decide(&child, &rule(true), SETTINGS, &run, &through(&run))
            .unwrap(),
        vec![Decision::Duplicate {
            of: copies[1].1.copy.clone()
        }]
    );
}

#[test]
fn a_corrupt_value_is_reported_with_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let lineage = Lineage::root("shardId-000000000000");
    let run = [candidate(&lineage.shard_id, (1, 0, 0), 1, None)];
    let tenant = store.inner.tenant(&lineage.shard_id).unwrap();
    let key = codec::copies_key(tenant, run[0].key.id);
    {
        let epochs = store.inner.epochs.read();
        let mut corrupt = Run::default();
        corrupt.put(&key, &[9_u8]);
        let mut batch = store.inner.batch();
        write_epoch(&epochs).stage(&mut batch, &corrupt);
        batch.commit().unwrap();
        write_epoch(&epochs).applied(&corrupt);
        write_epoch(&epochs).note_written(tenant, 1, 0);
    }
    // Written behind the store's back: its filter learns of it.
    store.inner.filters.insert(tenant, &[(run[0].key.id, 0)], 0);
    let error = store
        .decide(&lineage, &rule(true), SETTINGS, &run, &through(&run))
        .unwrap_err();
    assert!(
        matches!(&error, LocalStoreError::Corrupt { key, .. } if key.starts_with("shardId-000000000000/")),
        "{error:?}"
    );
}

impl LocalStore {
    /// Closes every epoch (their keys loaded into their keyspaces),
    /// flushes the memtables and compacts everything into the last
    /// level.
    fn compact(&self) {
        self.inner.epochs.close_all(&self.inner.db);
        for epoch in self.inner.epochs.read().iter() {
            epoch.keyspace.rotate_memtable_and_wait().unwrap();
            epoch.keyspace.major_compact().unwrap();
        }
    }

    fn stored(&self, shard: &Arc<str>, id: u128) -> Vec<AcceptedCopy> {
        let Some(tenant) = self.inner.tenants.get(shard) else {
            return Vec::new();
        };
        let epochs = self.inner.epochs.read();
        self.inner
            .read_copies(
                &holding(&epochs, Some(tenant)),
                write_epoch(&epochs),
                &codec::copies_key(tenant, id),
                shard,
            )
            .unwrap()
            .0
    }
}

#[test]
fn compaction_drops_values_below_the_horizon() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let lineage = Lineage::root("shardId-000000000000");
    let other = Lineage::root("shardId-000000000009");
    let shard = &lineage.shard_id;
    // Ids 0..50 arrive at 1_000, ids 50..100 at 10_000; id 0 arrives
    // again at 10_000 (its value keeps both until it is rewritten).
    let mut run: Vec<Candidate> = (0..100)
        .map(|n| {
            let arrival = if n < 50 { 1_000 } else { 10_000 };
            candidate(shard, (n, 0, arrival), u64::from(n) + 1, None)
        })
        .collect();
    run.push(candidate(shard, (0, 1, 10_000), 200, None));
    let rule = Rule {
        window_millis: 100,
        match_fingerprint: true,
    };
    store
        .decide(&lineage, &rule, SETTINGS, &run, &through(&run))
        .unwrap();
    let others: Vec<Candidate> = (0..10)
        .map(|n| candidate(&other.shard_id, (n, 0, 1_000), u64::from(n) + 1, None))
        .collect();
    store
        .decide(&other, &rule, SETTINGS, &others, &through(&others))
        .unwrap();

    store.advance_horizon(shard, 5_000).unwrap();
    store.advance_horizon(shard, 4_000).unwrap();
    assert_eq!(store.horizon(shard), Some(5_000), "never moves back");
    store.compact();
    assert_eq!(
        stored_keys(&store),
        1 + 50 + 10,
        "ids 1..50 of the shard are gone, id 0 and 50..100 and the other shard's stay"
    );
    for n in 1_u8..50 {
        assert!(
            store.stored(shard, run[usize::from(n)].key.id).is_empty(),
            "id {n}"
        );
    }
    for n in 50_u8..100 {
        assert_eq!(
            store.stored(shard, run[usize::from(n)].key.id).len(),
            1,
            "id {n}"
        );
    }
    assert_eq!(
        store.stored(shard, run[0].key.id).len(),
        1,
        "its value stays (its newest copy is recent); reads leave out its old copy"
    );
    for candidate in &others {
        assert_eq!(
            store.stored(&other.shard_id, candidate.key.id).len(),
            1,
            "no horizon"
        );
    }

    // Reads leave out the copies below the horizon; the horizon persists.
    let again = [candidate(shard, (0, 2, 10_050), 300, None)];
    store
        .decide(&lineage, &rule, SETTINGS, &again, &through(&again))
        .unwrap();
    drop(store);
    let store = open(&dir);
    assert_eq!(store.horizon(shard), Some(5_000));
    let kept = store.stored(shard, run[0].key.id);
    assert_eq!(
        kept.iter()
            .map(|copy| copy.arrival_millis)
            .collect::<Vec<_>>(),
        vec![10_000, 10_050]
    );
}

#[test]
fn shards_not_written_for_long_are_forgotten_and_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let lineage = Lineage::root("shardId-000000000000");
    let shard = &lineage.shard_id;
    let run = [candidate(shard, (1, 0, 1_000), 1, None)];
    store
        .decide(&lineage, &rule(true), SETTINGS, &run, &through(&run))
        .unwrap();
    store.mark_ended(shard, SETTINGS).unwrap();
    drop(store);

    let store = open(&dir);
    assert!(
        store.watermark(shard).unwrap().is_some(),
        "written just now"
    );
    drop(store);
    let forgetful = LocalOptions {
        forget_after: Duration::ZERO,
        ..options()
    };
    let store = LocalStore::open(dir.path(), forgetful).unwrap();
    assert_eq!(store.watermark(shard).unwrap(), None);
    assert!(!store.is_ended(shard, SETTINGS).unwrap());
    assert_eq!(store.horizon(shard), Some(FORGOTTEN));
    store.compact();
    assert!(store.stored(shard, run[0].key.id).is_empty());
    drop(store);

    // Written again, the shard is back: its new copies stay.
    let store = open(&dir);
    assert_eq!(store.horizon(shard), Some(FORGOTTEN), "persisted");
    let later = [candidate(shard, (2, 0, 2_000), 2, None)];
    store
        .decide(&lineage, &rule(true), SETTINGS, &later, &through(&later))
        .unwrap();
    assert_eq!(store.horizon(shard), None);
    store.compact();
    assert_eq!(store.stored(shard, later[0].key.id).len(), 1);
    drop(store);
    let store = open(&dir);
    assert_eq!(store.horizon(shard), None, "persisted");
    assert!(store.watermark(shard).unwrap().is_some());
}

/// The keys and values of `epoch`, open or closed.
fn entries(epoch: &Epoch) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut entries = Vec::new();
    epoch
        .for_each_with_prefix(&[], |key, value| {
            entries.push((key.to_vec(), value.to_vec()));
        })
        .unwrap();
    entries
}

/// The keys in all epochs, a key of several epochs once per epoch.
fn stored_keys(store: &LocalStore) -> usize {
    store
        .inner
        .epochs
        .read()
        .iter()
        .map(|epoch| entries(epoch).len())
        .sum()
}

/// Every key of `copies` whose newest copy is not below its tenant's
/// horizon, by tenant.
fn live_keys(store: &LocalStore) -> Vec<(u32, u128)> {
    let horizons = store.inner.tenants.horizons();
    let mut keys: Vec<(u32, u128)> = store
        .inner
        .epochs
        .read()
        .iter()
        .flat_map(|epoch| entries(epoch))
        .filter_map(|(key, value)| {
            let tenant = codec::key_tenant(&key).unwrap();
            let newest = codec::newest_arrival(&value).unwrap();
            Tenants::keeps(horizons.get(&tenant).copied(), newest)
                .then(|| (tenant, codec::key_id(&key).unwrap()))
        })
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

#[test]
fn the_filters_never_miss_a_live_key_after_writes_inserts_reopens_and_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let lineage = Lineage::root("shardId-000000000000");
    let shard = &lineage.shard_id;
    let run: Vec<Candidate> = (0..200_u8)
        .map(|n| candidate(shard, (n, 0, i64::from(n) * 10), u64::from(n) + 1, None))
        .collect();
    store
        .decide(&lineage, &rule(true), SETTINGS, &run, &through(&run))
        .unwrap();
    let other: Arc<str> = Arc::from("shardId-000000000007");
    let copies: Vec<(EventKey, AcceptedCopy)> = (0..50_u8)
        .map(|n| {
            let candidate = candidate(&other, (n, 1, 5_000), u64::from(n) + 1, None);
            (candidate.key, candidate.accepted())
        })
        .collect();
    store.insert(&copies).unwrap();
    let check = |store: &LocalStore, expected: usize| {
        let keys = live_keys(store);
        assert_eq!(keys.len(), expected);
        for (tenant, id) in keys {
            assert!(
                store.inner.filters.may_contain(tenant, id),
                "{tenant} {id:x}"
            );
        }
    };
    check(&store, 250);
    drop(store);
    let store = open(&dir);
    check(&store, 250);
    // New ids of an unknown shard: the filter answers "absent".
    let fresh = (0..200_u8)
        .filter(|n| {
            let id = candidate(shard, (*n, 0, 0), 1, None).key.id;
            store.inner.filters.may_contain(99, id)
        })
        .count();
    assert_eq!(fresh, 0);

    store.advance_horizon(shard, 1_000).unwrap();
    check(&store, 150);
    store.compact();
    check(&store, 150);
    drop(store);
    let store = open(&dir);
    check(&store, 150);
    // Below the horizon, ids are new again to the filter and to fjall.
    let again = [candidate(shard, (1, 0, 2_100), 1_000, None)];
    assert_eq!(
        store
            .decide(&lineage, &rule(true), SETTINGS, &again, &through(&again))
            .unwrap(),
        vec![Decision::Keep(Outcome::Unique)]
    );
    check(&store, 151);
}

/// The numbers of the store's epochs, oldest first.
fn epoch_numbers(store: &LocalStore) -> Vec<u32> {
    store
        .inner
        .epochs
        .read()
        .iter()
        .map(|epoch| epoch.number)
        .collect()
}

/// Decides ids `ids` of `lineage` arriving at `arrival`, sequence
/// numbers from `first_sequence` on.
fn decide_ids(
    store: &LocalStore,
    lineage: &Lineage,
    ids: std::ops::Range<u8>,
    arrival: i64,
    first_sequence: u64,
) -> Vec<Decision> {
    let run: Vec<Candidate> = ids
        .enumerate()
        .map(|(n, id)| {
            candidate(
                &lineage.shard_id,
                (id, 0, arrival),
                first_sequence + n as u64,
                None,
            )
        })
        .collect();
    store
        .decide(lineage, &rule(true), SETTINGS, &run, &through(&run))
        .unwrap()
}

/// Decides copies of ids `ids` of `lineage` arriving later (at 1,100,
/// sequence numbers from 100 on) and checks each is a duplicate.
fn assert_known(store: &LocalStore, lineage: &Lineage, ids: std::ops::Range<u8>) {
    let decisions = decide_ids(store, lineage, ids, 1_100, 100);
    assert!(
        decisions
            .iter()
            .all(|decision| matches!(decision, Decision::Duplicate { .. })),
        "{decisions:?}"
    );
}

fn has_keyspace(store: &LocalStore, name: &str) -> bool {
    store.inner.db.keyspace_exists(name)
}

#[test]
fn the_write_epoch_is_read_back_from_its_runs_after_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let lineage = Lineage::root("shardId-000000000000");
    let store = open(&dir);
    // Five keys: the epoch (of 16) stays open.
    decide_ids(&store, &lineage, 0..5, 1_000, 1);
    let epochs = store.inner.epochs.read();
    assert!(epochs[0].is_open());
    assert!(epochs[0].keyspace.is_empty().unwrap(), "keys are in runs");
    assert!(has_keyspace(&store, "copies.0.runs"));
    drop(epochs);
    drop(store);

    let store = open(&dir);
    assert_eq!(epoch_numbers(&store), vec![0]);
    assert!(store.inner.epochs.read()[0].is_open());
    // Not from the recent keys (a new process has none): from the
    // index, read again from the runs.
    assert_known(&store, &lineage, 0..5);
}

#[test]
fn a_closed_epoch_is_loaded_into_its_keyspace_and_its_runs_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let lineage = Lineage::root("shardId-000000000000");
    let store = open(&dir);
    // Twenty keys fill the epoch of 16: the next starts, this one
    // closes.
    decide_ids(&store, &lineage, 0..20, 1_000, 1);
    assert_eq!(epoch_numbers(&store), vec![0, 1]);
    let epochs = store.inner.epochs.read();
    assert!(!epochs[0].is_open());
    assert!(epochs[1].is_open());
    assert_eq!(epochs[0].keyspace.len().unwrap(), 20);
    assert!(!has_keyspace(&store, "copies.0.runs"));
    assert!(has_keyspace(&store, "copies.1.runs"));
    drop(epochs);
    drop(store);
    let store = open(&dir);
    assert_known(&store, &lineage, 0..20);
}

#[test]
fn a_crash_after_loading_an_epoch_deletes_its_runs_at_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let lineage = Lineage::root("shardId-000000000000");
    let store = open(&dir);
    decide_ids(&store, &lineage, 0..5, 1_000, 1);
    store.inner.epochs.read()[0].load_without_closing();
    drop(store);

    let store = open(&dir);
    // Epoch 0 was loaded: closed, its runs deleted; a new write epoch.
    assert_eq!(epoch_numbers(&store), vec![0, 1]);
    assert!(!store.inner.epochs.read()[0].is_open());
    assert!(!has_keyspace(&store, "copies.0.runs"));
    assert_known(&store, &lineage, 0..5);
    let id = candidate(&lineage.shard_id, (0, 0, 0), 1, None).key.id;
    assert_eq!(store.stored(&lineage.shard_id, id).len(), 1, "held once");
}

#[test]
fn an_epoch_left_open_before_the_last_is_closed_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let lineage = Lineage::root("shardId-000000000000");
    let store = open(&dir);
    decide_ids(&store, &lineage, 0..5, 1_000, 1);
    // As a crash leaves it: a later epoch was started, epoch 0 not yet
    // loaded; and the runs keyspace of an epoch that is gone.
    store
        .inner
        .db
        .keyspace("copies.1", || epochs::create_options(1 << 20))
        .unwrap();
    store
        .inner
        .db
        .keyspace("copies.7.runs", KeyspaceCreateOptions::default)
        .unwrap();
    drop(store);

    let store = open(&dir);
    // Epoch 1 has no runs: closed; epoch 2 takes the writes.
    assert_eq!(epoch_numbers(&store), vec![0, 1, 2]);
    let epochs = store.inner.epochs.read();
    assert!(!epochs[0].is_open());
    assert_eq!(epochs[0].keyspace.len().unwrap(), 5);
    assert!(epochs[2].is_open());
    drop(epochs);
    assert!(!has_keyspace(&store, "copies.0.runs"));
    assert!(!has_keyspace(&store, "copies.7.runs"));
    assert_known(&store, &lineage, 0..5);
}

#[test]
fn an_epoch_also_ends_after_its_value_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let lineage = Lineage::root("shardId-000000000000");
    let store = LocalStore::open(
        dir.path(),
        LocalOptions {
            epoch_keys: 1_000_000,
            epoch_value_bytes: 300,
            ..LocalOptions::default()
        },
    )
    .unwrap();
    // Ten keys of one copy each (20 bytes a value with these short
    // sequence numbers) stay below; twenty do not.
    decide_ids(&store, &lineage, 0..10, 1_000, 1);
    assert_eq!(epoch_numbers(&store), vec![0]);
    decide_ids(&store, &lineage, 10..20, 1_000, 11);
    assert_eq!(epoch_numbers(&store), vec![0, 1]);
    assert!(!store.inner.epochs.read()[0].is_open());
    assert_known(&store, &lineage, 0..20);
}

#[test]
fn a_large_insert_fills_epochs_in_turn() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let shard: Arc<str> = Arc::from("shardId-000000000000");
    let copies: Vec<(EventKey, AcceptedCopy)> = (0..40)
        .map(|n| {
            let candidate = candidate(&shard, (n, 0, 1_000), u64::from(n) + 1, None);
            (candidate.key, candidate.accepted())
        })
        .collect();
    store.insert(&copies).unwrap();
    // Batches of two keys (an eighth of 16): the epochs end as they
    // fill, not once after all 40 keys.
    assert!(
        epoch_numbers(&store).len() >= 3,
        "{:?}",
        epoch_numbers(&store)
    );
    for (key, copy) in &copies {
        assert_eq!(store.stored(&shard, key.id), vec![copy.clone()]);
    }
    store.insert(&copies).unwrap();
    for (key, _) in &copies {
        assert_eq!(store.stored(&shard, key.id).len(), 1, "idempotent");
    }
}

#[test]
fn epochs_are_closed_after_a_panic_while_closing() {
    let dir = tempfile::tempdir().unwrap();
    let lineage = Lineage::root("shardId-000000000000");
    let store = open(&dir);
    store.inner.epochs.poison_closing();
    decide_ids(&store, &lineage, 0..20, 1_000, 1);
    assert_eq!(epoch_numbers(&store), vec![0, 1]);
    assert!(!store.inner.epochs.read()[0].is_open());
}

#[test]
fn expired_epochs_are_deleted_whole_and_the_others_stay() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let a = Lineage::root("shardId-000000000000");
    let b = Lineage::root("shardId-000000000001");
    let run_of = |lineage: &Lineage, ids: std::ops::Range<u8>, arrival: i64| -> Vec<Candidate> {
        ids.map(|n| candidate(&lineage.shard_id, (n, 0, arrival), u64::from(n) + 1, None))
            .collect()
    };
    let decide = |store: &LocalStore, lineage: &Lineage, run: &[Candidate]| {
        store
            .decide(lineage, &rule(true), SETTINGS, run, &through(run))
            .unwrap()
    };
    // 20 keys of each shard fill an epoch of 16 each.
    decide(&store, &a, &run_of(&a, 0..20, 1_000));
    decide(&store, &b, &run_of(&b, 0..20, 1_000));
    assert_eq!(epoch_numbers(&store), vec![0, 1, 2]);

    // Epoch 0 holds only shard a's copies, all below its horizon: the
    // next epoch's start deletes it. Epoch 1 holds shard b's, which has
    // no horizon: it stays.
    store.advance_horizon(&a.shard_id, 5_000).unwrap();
    decide(&store, &a, &run_of(&a, 20..40, 10_000));
    assert_eq!(epoch_numbers(&store), vec![1, 2, 3]);
    let names = store.inner.db.list_keyspace_names();
    assert!(!names.iter().any(|name| &**name == "copies"), "{names:?}");
    let again = [candidate(&b.shard_id, (0, 0, 1_050), 100, None)];
    assert!(
        matches!(decide(&store, &b, &again)[..], [Decision::Duplicate { .. }]),
        "shard b's copies stay"
    );

    // After a reopen, the epochs and what they hold are found again.
    drop(store);
    let store = open(&dir);
    assert_eq!(epoch_numbers(&store), vec![1, 2, 3]);
    store.advance_horizon(&b.shard_id, 5_000).unwrap();
    decide(&store, &b, &run_of(&b, 40..60, 10_000));
    assert_eq!(epoch_numbers(&store), vec![2, 3, 4]);
    let late = [candidate(&a.shard_id, (25, 0, 10_010), 500, None)];
    assert!(
        matches!(decide(&store, &a, &late)[..], [Decision::Duplicate { .. }]),
        "shard a's recent copies stay"
    );
}

#[test]
fn a_key_written_in_several_epochs_keeps_all_its_copies_recent_or_read() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let lineage = Lineage::root("shardId-000000000000");
    let shard = &lineage.shard_id;
    let rule = Rule {
        window_millis: 10_000,
        match_fingerprint: true,
    };
    let decide = |store: &LocalStore, run: &[Candidate]| {
        store
            .decide(&lineage, &rule, SETTINGS, run, &through(run))
            .unwrap()
    };
    // Id 0 with fingerprint 1 in epoch 0, then enough other ids to end
    // two epochs of 16, then id 0 with fingerprint 2 (another payload:
    // kept) in the write epoch.
    decide(&store, &[candidate(shard, (0, 1, 1_000), 1, None)]);
    let others: Vec<Candidate> = (1..40)
        .map(|n| candidate(shard, (n, 0, 1_100), u64::from(n) + 1, None))
        .collect();
    decide(&store, &others[..20]);
    decide(&store, &others[20..]);
    assert!(epoch_numbers(&store).len() >= 3);
    assert_eq!(
        decide(&store, &[candidate(shard, (0, 2, 1_200), 100, None)]),
        vec![Decision::Keep(Outcome::IdReused)]
    );
    let first = |store: &LocalStore, sequence: u64| {
        decide(store, &[candidate(shard, (0, 1, 1_300), sequence, None)])
    };
    let duplicate_of_the_first = vec![Decision::Duplicate {
        of: candidate(shard, (0, 1, 1_000), 1, None).copy,
    }];
    assert_eq!(
        first(&store, 101),
        duplicate_of_the_first,
        "from the recent keys"
    );
    drop(store);
    let store = open(&dir);
    assert_eq!(
        first(&store, 102),
        duplicate_of_the_first,
        "read from both epochs"
    );
    assert_eq!(
        store
            .stored(shard, candidate(shard, (0, 0, 0), 1, None).key.id)
            .len(),
        2
    );
}

#[test]
fn the_store_is_send_sync_and_clone() {
    fn check<T: Send + Sync + Clone>() {}
    check::<LocalStore>();
}

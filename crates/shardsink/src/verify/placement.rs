//! E1 across a batch's objects (`--deep`; docs/DESIGN.md, "Each event
//! once"): every user record of a batch is in exactly one of its objects —
//! main, error or duplicates — and a batch written with event decisions
//! holds, in those objects together, every user record its decisions
//! object recorded. Without I/O: the objects are read by `body.rs`.

use std::collections::HashMap;

use sequence_range::SequenceRange;

use super::body::{Found, Position, Role};
use super::keys::ArchivedKey;

/// A user record found in two objects of its batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Twice {
    pub(super) shard_id: String,
    pub(super) position: Position,
    /// The two objects, in the order main, error, duplicates.
    pub(super) keys: [String; 2],
}

/// A batch whose objects do not add up to what its decisions object
/// recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Miscount {
    /// The decisions object, or the duplicates object that has none.
    pub(super) key: String,
    pub(super) reason: String,
}

/// What the check across batches found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Placement {
    /// Committed batches with a decisions object, whose counts were
    /// checked.
    pub(super) decided_batches: usize,
    pub(super) twice: Vec<Twice>,
    pub(super) miscounted: Vec<Miscount>,
}

impl Placement {
    /// Whether E1 holds for every batch read.
    pub(super) fn is_clean(&self) -> bool {
        self.twice.is_empty() && self.miscounted.is_empty()
    }
}

/// One object read, with its role in its batch.
pub(super) type ReadObject<'a> = (Role, &'a ArchivedKey, &'a Found);

/// Checks every batch of `objects` (main, error, duplicates and decisions
/// objects, read): no user record in two of the batch's objects; and for a
/// committed batch (its main object exists) with a decisions object, the
/// decisions object's stored count (`x-amz-meta-shardsink-records`) is
/// the records of its main, error and duplicates objects, and its
/// duplicate decisions are the duplicates object's records. A duplicates
/// object of a committed batch without a decisions object is miscounted
/// too: duplicates are only written after their decisions.
pub(super) fn check_batches<'a>(objects: impl IntoIterator<Item = ReadObject<'a>>) -> Placement {
    let mut batches: HashMap<(&str, &SequenceRange), Vec<ReadObject<'a>>> = HashMap::new();
    for object in objects {
        batches
            .entry((object.1.shard_id.as_str(), &object.1.range))
            .or_default()
            .push(object);
    }
    let mut sorted: Vec<_> = batches.into_iter().collect();
    sorted.sort_by(|((a_shard, a), _), ((b_shard, b), _)| {
        (a_shard, a.first(), a.last()).cmp(&(b_shard, b.first(), b.last()))
    });
    let mut placement = Placement::default();
    for ((shard_id, _), mut batch) in sorted {
        batch.sort_by_key(|(role, object, _)| (rank(*role), object.key.clone()));
        find_twice(shard_id, &batch, &mut placement.twice);
        if !batch.iter().any(|(role, ..)| *role == Role::Main) {
            // Not committed: the daemon replays the batch.
            continue;
        }
        let decisions = batch.iter().find(|(role, ..)| *role == Role::Decisions);
        let records = |wanted: Role| -> u64 {
            batch
                .iter()
                .filter(|(role, ..)| *role == wanted)
                .map(|(_, _, found)| found.records)
                .sum()
        };
        let (main, errors, duplicates) = (
            records(Role::Main),
            records(Role::Errors),
            records(Role::Duplicates),
        );
        let Some((_, key, found)) = decisions else {
            if let Some((_, key, _)) = batch.iter().find(|(role, ..)| *role == Role::Duplicates) {
                placement.miscounted.push(Miscount {
                    key: key.key.clone(),
                    reason: "a duplicates object whose batch has no decisions object".to_owned(),
                });
            }
            continue;
        };
        placement.decided_batches += 1;
        let recorded = found.stored_records.unwrap_or(found.records);
        if recorded != main + errors + duplicates {
            placement.miscounted.push(Miscount {
                key: key.key.clone(),
                reason: format!(
                    "{recorded} user records decided, but the batch's objects hold {} \
                     ({main} main, {errors} error, {duplicates} duplicates)",
                    main + errors + duplicates
                ),
            });
        } else if found.decided_duplicates != duplicates {
            placement.miscounted.push(Miscount {
                key: key.key.clone(),
                reason: format!(
                    "{} duplicates decided, but the duplicates object holds {duplicates}",
                    found.decided_duplicates
                ),
            });
        }
    }
    placement
}

/// The order a batch's objects are compared and named in.
fn rank(role: Role) -> u8 {
    match role {
        Role::Main => 0,
        Role::Errors => 1,
        Role::Duplicates => 2,
        Role::Decisions => 3,
    }
}

/// User records in two of a batch's objects (a record twice within one
/// object is the body check's).
fn find_twice(shard_id: &str, batch: &[ReadObject<'_>], twice: &mut Vec<Twice>) {
    let with_positions = batch
        .iter()
        .filter(|(_, _, found)| !found.positions.is_empty())
        .count();
    if with_positions < 2 {
        return;
    }
    let mut seen: HashMap<&Position, usize> = HashMap::new();
    for (index, (_, object, found)) in batch.iter().enumerate() {
        for position in &found.positions {
            match seen.get(position) {
                Some(&first) if first != index => twice.push(Twice {
                    shard_id: shard_id.to_owned(),
                    position: position.clone(),
                    keys: [batch[first].1.key.clone(), object.key.clone()],
                }),
                Some(_) => {}
                None => {
                    seen.insert(position, index);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::test_support::{n, object};

    /// The batch's object of `role` (`first..=last`), under its prefix.
    fn of(role: &str, first: u64, last: u64) -> ArchivedKey {
        let mut object = object(first, last);
        object.key = object.key.replacen("p/", &format!("p-{role}/"), 1);
        object
    }

    fn found(records: u64, positions: &[u64]) -> Found {
        Found {
            records,
            positions: positions.iter().map(|&p| (n(p), None)).collect(),
            ..Found::default()
        }
    }

    fn decisions(recorded: u64, duplicates: u64) -> Found {
        Found {
            records: recorded,
            stored_records: Some(recorded),
            decided_duplicates: duplicates,
            ..Found::default()
        }
    }

    #[test]
    fn a_record_in_two_objects_of_its_batch_is_there_twice() {
        let (main, dups, decided) = (object(1, 3), of("duplicates", 1, 3), of("events", 1, 3));
        let (main_found, dups_found) = (found(3, &[1, 2, 3]), found(1, &[2]));
        let decided_found = decisions(4, 1);
        let placement = check_batches([
            (Role::Main, &main, &main_found),
            (Role::Duplicates, &dups, &dups_found),
            (Role::Decisions, &decided, &decided_found),
        ]);
        assert_eq!(placement.twice.len(), 1, "{placement:?}");
        assert_eq!(placement.twice[0].position, (n(2), None));
        assert!(placement.miscounted.is_empty(), "4 = 3 + 1: {placement:?}");
        assert!(!placement.is_clean());

        // Each record once: clean.
        let main_found = found(2, &[1, 3]);
        let decided_found = decisions(3, 1);
        let placement = check_batches([
            (Role::Main, &main, &main_found),
            (Role::Duplicates, &dups, &dups_found),
            (Role::Decisions, &decided, &decided_found),
        ]);
        assert!(placement.is_clean(), "{placement:?}");
        assert_eq!(placement.decided_batches, 1);
    }

    #[test]
    fn decisions_must_add_up_to_the_batch_s_objects() {
        let (main, errors, dups, decided) = (
            object(1, 5),
            of("errors", 1, 5),
            of("duplicates", 1, 5),
            of("events", 1, 5),
        );
        let (main_found, errors_found, dups_found) =
            (found(3, &[]), found(1, &[5]), found(1, &[4]));
        let lost = decisions(6, 1);
        let placement = check_batches([
            (Role::Main, &main, &main_found),
            (Role::Errors, &errors, &errors_found),
            (Role::Duplicates, &dups, &dups_found),
            (Role::Decisions, &decided, &lost),
        ]);
        assert_eq!(
            placement.miscounted,
            vec![Miscount {
                key: decided.key.clone(),
                reason: "6 user records decided, but the batch's objects hold 5 (3 main, 1 error, \
                         1 duplicates)"
                    .to_owned()
            }]
        );
        let two_duplicates = decisions(5, 2);
        let placement = check_batches([
            (Role::Main, &main, &main_found),
            (Role::Errors, &errors, &errors_found),
            (Role::Duplicates, &dups, &dups_found),
            (Role::Decisions, &decided, &two_duplicates),
        ]);
        assert_eq!(placement.miscounted.len(), 1, "{placement:?}");
        // A batch not committed yet is the daemon's to replay.
        let placement = check_batches([
            (Role::Duplicates, &dups, &dups_found),
            (Role::Decisions, &decided, &lost),
        ]);
        assert!(placement.is_clean() && placement.decided_batches == 0);
        // Duplicates without decisions.
        let placement = check_batches([
            (Role::Main, &main, &main_found),
            (Role::Duplicates, &dups, &dups_found),
        ]);
        assert_eq!(placement.miscounted[0].key, dups.key);
    }
}

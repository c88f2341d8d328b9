//! Check 2, overlaps: two objects of one shard whose sequence ranges share
//! a number, that is, a record archived twice.

use std::collections::BTreeMap;

use sequence_range::SequenceRange;

use super::keys::ArchivedKey;

/// Two objects of one shard whose ranges share at least one sequence number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Overlap {
    pub(super) shard_id: String,
    /// The object that sorts first (by first, then last, then key).
    pub(super) earlier: (String, SequenceRange),
    /// The object that overlaps it.
    pub(super) later: (String, SequenceRange),
}

/// The overlaps among `objects`, shard by shard.
///
/// Objects are sorted by (first, last, key) and swept once: an object that
/// shares a number with any object before it is reported together with the
/// one among those that reaches furthest. That names every object involved
/// in some overlap — the first later object overlapping X always finds X
/// reaching furthest — and reports at most one pair per object, so the cost
/// is O(n log n) however many pairs overlap. No overlap reported ⇔ no two
/// objects of a shard share a number.
pub(super) fn overlaps(objects: &[ArchivedKey]) -> Vec<Overlap> {
    let mut by_shard: BTreeMap<&str, Vec<&ArchivedKey>> = BTreeMap::new();
    for object in objects {
        by_shard.entry(&object.shard_id).or_default().push(object);
    }
    let mut found = Vec::new();
    for (shard_id, mut shard_objects) in by_shard {
        shard_objects.sort_by(|a, b| {
            (a.range.first(), a.range.last(), &a.key).cmp(&(
                b.range.first(),
                b.range.last(),
                &b.key,
            ))
        });
        let mut reach: Option<&ArchivedKey> = None;
        for object in shard_objects {
            match reach {
                Some(furthest) if furthest.range.last() >= object.range.first() => {
                    found.push(Overlap {
                        shard_id: shard_id.to_owned(),
                        earlier: (furthest.key.clone(), furthest.range.clone()),
                        later: (object.key.clone(), object.range.clone()),
                    });
                    if object.range.last() > furthest.range.last() {
                        reach = Some(object);
                    }
                }
                _ => reach = Some(object),
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use proptest::prelude::*;

    use super::*;
    use crate::config::CompressionCodec;
    use crate::verify::test_support::{MINUTE_MILLIS, SHARD, object, object_in};

    fn overlap_keys(objects: &[ArchivedKey]) -> Vec<(String, String)> {
        overlaps(objects)
            .into_iter()
            .map(|o| (o.earlier.0, o.later.0))
            .collect()
    }

    #[test]
    fn overlap_table() {
        let a = object(1, 5);
        // Objects, and the pairs (by index) that must be reported.
        type Case = (Vec<ArchivedKey>, Vec<(usize, usize)>);
        let cases: Vec<Case> = vec![
            // Adjacent and disjoint ranges do not overlap.
            (vec![object(1, 5), object(6, 9), object(20, 20)], vec![]),
            // Touching at one number does.
            (vec![object(1, 5), object(5, 9)], vec![(0, 1)]),
            // Containment.
            (vec![object(1, 10), object(3, 4)], vec![(0, 1)]),
            // A chain is reported pairwise against the furthest reach.
            (
                vec![object(1, 10), object(2, 3), object(9, 12), object(11, 11)],
                vec![(0, 1), (0, 2), (2, 3)],
            ),
            // The same range in another codec (another key).
            (
                vec![
                    a.clone(),
                    object_in(SHARD, MINUTE_MILLIS, 1, 5, CompressionCodec::Gzip),
                ],
                vec![(0, 1)],
            ),
            // Another minute's object of the same shard still overlaps.
            (
                vec![
                    a.clone(),
                    object_in(SHARD, MINUTE_MILLIS + 60_000, 5, 6, CompressionCodec::None),
                ],
                vec![(0, 1)],
            ),
            // Another shard never does.
            (
                vec![
                    a.clone(),
                    object_in(
                        "shardId-000000000002",
                        MINUTE_MILLIS,
                        1,
                        5,
                        CompressionCodec::None,
                    ),
                ],
                vec![],
            ),
        ];
        for (objects, expected) in cases {
            let expected: Vec<(String, String)> = expected
                .iter()
                .map(|&(i, j)| (objects[i].key.clone(), objects[j].key.clone()))
                .collect();
            let mut found = overlap_keys(&objects);
            found.sort();
            let mut expected_sorted = expected.clone();
            expected_sorted.sort();
            assert_eq!(found, expected_sorted, "{objects:?}");
        }
    }

    proptest! {
        /// Against the naive model — every pair compared: reported pairs
        /// overlap, and the objects named are exactly those in some
        /// overlapping pair.
        #[test]
        fn overlaps_match_the_naive_model(
            specs in prop::collection::vec((0usize..2, 0u64..60, 0u64..8, 0usize..3), 0..40)
        ) {
            let objects: Vec<ArchivedKey> = specs
                .iter()
                .enumerate()
                .map(|(i, &(shard, first, len, codec))| {
                    let codec = [CompressionCodec::None, CompressionCodec::Gzip, CompressionCodec::Zstd][codec];
                    // A minute per object keeps keys unique.
                    object_in(&format!("shardId-{shard:012}"), MINUTE_MILLIS + 60_000 * i as i64, first, first + len, codec)
                })
                .collect();
            let mut naive: HashSet<&str> = HashSet::new();
            for (i, a) in objects.iter().enumerate() {
                for b in &objects[i + 1..] {
                    if a.shard_id == b.shard_id && a.range.overlaps(&b.range) {
                        naive.insert(&a.key);
                        naive.insert(&b.key);
                    }
                }
            }
            let found = overlaps(&objects);
            let by_key: HashMap<&str, &ArchivedKey> = objects.iter().map(|o| (o.key.as_str(), o)).collect();
            let mut named: HashSet<&str> = HashSet::new();
            for overlap in &found {
                let (a, b) = (by_key[overlap.earlier.0.as_str()], by_key[overlap.later.0.as_str()]);
                prop_assert!(a.key != b.key);
                prop_assert_eq!(&a.shard_id, &b.shard_id);
                prop_assert_eq!(&overlap.shard_id, &a.shard_id);
                prop_assert!(a.range.overlaps(&b.range), "{:?} does not overlap {:?}", a.range, b.range);
                named.insert(&a.key);
                named.insert(&b.key);
            }
            prop_assert_eq!(named, naive);
            prop_assert!(found.len() < objects.len().max(1));
        }
    }
}

//! [`RangeSet`]: a set of sequence numbers stored as sorted, merged ranges.

use std::fmt;

use crate::{SequenceNumber, SequenceRange};

/// A set of sequence numbers, stored as sorted, disjoint, non-adjacent closed
/// ranges.
///
/// Dedup collects the ranges of the objects already written under a shard's
/// minute or hour prefix into a `RangeSet` — in whatever order the listing returns
/// them — and asks, record by record, whether a sequence number is in it.
///
/// Invariant (checked by `debug_assert!` after every change): for consecutive
/// ranges `a`, `b`: `a.last + 1 < b.first`. Two ranges that touch or overlap
/// are merged, so the representation of a set is unique and `==` is set
/// equality.
///
/// Costs, for a set of `n` ranges: [`contains`](Self::contains) and
/// [`overlaps`](Self::overlaps) are O(log n) comparisons and allocate
/// nothing; [`insert`](Self::insert) and [`remove`](Self::remove) are
/// O(log n) comparisons plus an O(n) shift of the vector;
/// [`difference`](Self::difference) is O(n + m).
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct RangeSet {
    ranges: Vec<SequenceRange>,
}

impl RangeSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the set holds no sequence number.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Number of maximal ranges (not of sequence numbers).
    pub fn range_count(&self) -> usize {
        self.ranges.len()
    }

    /// The maximal ranges in ascending order.
    pub fn ranges(&self) -> &[SequenceRange] {
        &self.ranges
    }

    /// Iterates over the maximal ranges in ascending order.
    pub fn iter(&self) -> std::slice::Iter<'_, SequenceRange> {
        self.ranges.iter()
    }

    /// The smallest sequence number in the set.
    pub fn min(&self) -> Option<&SequenceNumber> {
        self.ranges.first().map(SequenceRange::first)
    }

    /// The largest sequence number in the set.
    pub fn max(&self) -> Option<&SequenceNumber> {
        self.ranges.last().map(SequenceRange::last)
    }

    /// Whether `n` is in the set. O(log n), no allocation.
    pub fn contains(&self, n: &SequenceNumber) -> bool {
        let index = self.ranges.partition_point(|range| range.last() < n);
        self.ranges
            .get(index)
            .is_some_and(|range| range.first() <= n)
    }

    /// Whether the set shares at least one sequence number with `range`.
    /// O(log n), no allocation.
    pub fn overlaps(&self, range: &SequenceRange) -> bool {
        let index = self.ranges.partition_point(|r| r.last() < range.first());
        self.ranges
            .get(index)
            .is_some_and(|r| r.first() <= range.last())
    }

    /// Adds every sequence number of `range` to the set, merging it with the
    /// ranges it overlaps or touches.
    pub fn insert(&mut self, range: SequenceRange) {
        // `lo..hi` are the ranges that overlap or touch `range`.
        let mut lo = self.ranges.partition_point(|r| r.last() < range.first());
        if lo > 0 && range.first().follows(self.ranges[lo - 1].last()) {
            lo -= 1;
        }
        let mut hi = self.ranges.partition_point(|r| r.first() <= range.last());
        if hi < self.ranges.len() && self.ranges[hi].first().follows(range.last()) {
            hi += 1;
        }
        let (mut first, mut last) = range.into_bounds();
        if lo < hi {
            if self.ranges[lo].first() < &first {
                first = self.ranges[lo].first().clone();
            }
            if self.ranges[hi - 1].last() > &last {
                last = self.ranges[hi - 1].last().clone();
            }
        }
        self.ranges
            .splice(lo..hi, [SequenceRange::from_ordered(first, last)]);
        self.debug_check();
    }

    /// Removes every sequence number of `range` from the set, splitting the
    /// ranges it cuts.
    pub fn remove(&mut self, range: &SequenceRange) {
        let lo = self.ranges.partition_point(|r| r.last() < range.first());
        let hi = self.ranges.partition_point(|r| r.first() <= range.last());
        if lo >= hi {
            return;
        }
        let mut kept = Vec::with_capacity(2);
        // Only the first and the last overlapping range can stick out.
        if let Some(before) = range.first().predecessor()
            && self.ranges[lo].first() <= &before
        {
            kept.push(SequenceRange::from_ordered(
                self.ranges[lo].first().clone(),
                before,
            ));
        }
        if self.ranges[hi - 1].last() > range.last() {
            kept.push(SequenceRange::from_ordered(
                range.last().successor(),
                self.ranges[hi - 1].last().clone(),
            ));
        }
        self.ranges.splice(lo..hi, kept);
        self.debug_check();
    }

    /// `self \ other`: the sequence numbers of `self` not in `other`, in one
    /// O(n + m) pass over both sets. Right for any order in which `other` was
    /// built, because a `RangeSet` is always sorted and merged.
    pub fn difference(&self, other: &RangeSet) -> RangeSet {
        let mut result = Vec::with_capacity(self.ranges.len());
        let mut cuts = other.ranges.iter().peekable();
        for range in &self.ranges {
            // `start` is the lowest sequence number of `range` not yet
            // decided; `None` once the whole range is cut away.
            let mut start = Some(range.first().clone());
            // Skip cuts that end before this range.
            while cuts.next_if(|cut| cut.last() < range.first()).is_some() {}
            while let (Some(from), Some(cut)) = (start.as_ref(), cuts.peek()) {
                if cut.first() > range.last() {
                    break;
                }
                if cut.first() > from {
                    // Invariant: `cut.first() > from >= 0`, so `cut.first()`
                    // is not 0 and has a predecessor, `cut.first() - 1 >=
                    // from`: the piece is ordered.
                    #[allow(clippy::expect_used, reason = "a number greater than another is not 0")]
                    let before = cut
                        .first()
                        .predecessor()
                        .expect("a number greater than another has a predecessor");
                    debug_assert!(&before >= from);
                    result.push(SequenceRange::from_ordered(from.clone(), before));
                }
                if cut.last() >= range.last() {
                    // The cut covers the rest of this range; it may cut the
                    // next range too, so keep it.
                    start = None;
                } else {
                    start = Some(cut.last().successor());
                    cuts.next();
                }
            }
            if let Some(from) = start {
                result.push(SequenceRange::from_ordered(from, range.last().clone()));
            }
        }
        let set = RangeSet { ranges: result };
        set.debug_check();
        set
    }

    /// Checks the invariant in debug builds.
    fn debug_check(&self) {
        debug_assert!(
            self.ranges
                .windows(2)
                .all(|pair| pair[0].last().successor() < *pair[1].first()),
            "range set invariant broken: {self:?}"
        );
    }
}

impl From<SequenceRange> for RangeSet {
    fn from(range: SequenceRange) -> Self {
        Self {
            ranges: vec![range],
        }
    }
}

impl FromIterator<SequenceRange> for RangeSet {
    fn from_iter<I: IntoIterator<Item = SequenceRange>>(iter: I) -> Self {
        let mut set = RangeSet::new();
        set.extend(iter);
        set
    }
}

impl Extend<SequenceRange> for RangeSet {
    fn extend<I: IntoIterator<Item = SequenceRange>>(&mut self, iter: I) {
        for range in iter {
            self.insert(range);
        }
    }
}

impl<'a> IntoIterator for &'a RangeSet {
    type Item = &'a SequenceRange;
    type IntoIter = std::slice::Iter<'a, SequenceRange>;

    fn into_iter(self) -> Self::IntoIter {
        self.ranges.iter()
    }
}

impl fmt::Debug for RangeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(&self.ranges).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    fn range(first: u64, last: u64) -> SequenceRange {
        SequenceRange::new(first.into(), last.into()).unwrap()
    }

    fn set(ranges: &[(u64, u64)]) -> RangeSet {
        ranges.iter().map(|&(a, b)| range(a, b)).collect()
    }

    fn bounds(set: &RangeSet) -> Vec<(String, String)> {
        set.iter()
            .map(|r| (r.first().to_string(), r.last().to_string()))
            .collect()
    }

    fn pairs(ranges: &[(u64, u64)]) -> Vec<(String, String)> {
        ranges
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn insert_merges_overlapping_and_adjacent_ranges() {
        let s = set(&[(10, 20), (30, 40), (21, 22), (50, 60), (35, 55)]);
        assert_eq!(bounds(&s), pairs(&[(10, 22), (30, 60)]));
    }

    #[test]
    fn insert_in_any_order_gives_the_same_set() {
        let forward = set(&[(1, 2), (5, 6), (9, 9), (3, 4)]);
        let backward = set(&[(3, 4), (9, 9), (5, 6), (1, 2)]);
        assert_eq!(forward, backward);
        assert_eq!(bounds(&forward), pairs(&[(1, 6), (9, 9)]));
    }

    #[test]
    fn remove_splits_a_range() {
        let mut s = set(&[(1, 10)]);
        s.remove(&range(4, 6));
        assert_eq!(bounds(&s), pairs(&[(1, 3), (7, 10)]));
        s.remove(&range(0, 1));
        assert_eq!(bounds(&s), pairs(&[(2, 3), (7, 10)]));
        s.remove(&range(3, 100));
        assert_eq!(bounds(&s), pairs(&[(2, 2)]));
    }

    #[test]
    fn difference_of_group_against_written_ranges() {
        // A group [100, 200] against written ranges listed newest first.
        let group = set(&[(100, 200)]);
        let written = set(&[(190, 250), (120, 130), (50, 100)]);
        let rest = group.difference(&written);
        assert_eq!(bounds(&rest), pairs(&[(101, 119), (131, 189)]));
    }

    #[test]
    fn one_cut_can_cover_several_ranges() {
        let s = set(&[(1, 2), (4, 5), (7, 8), (10, 12)]);
        let rest = s.difference(&set(&[(2, 11)]));
        assert_eq!(bounds(&rest), pairs(&[(1, 1), (12, 12)]));
    }

    #[test]
    fn contains_and_overlaps_on_big_numbers() {
        let big = |s: &str| SequenceNumber::parse(s).unwrap();
        let a = "49590338271490256608559692538361571095921575989136588898";
        let b = "49590338271490256608559692540925702759324208523137515618";
        let s = RangeSet::from(SequenceRange::new(big(a), big(b)).unwrap());
        assert!(s.contains(&big(a)));
        assert!(s.contains(&big(b)));
        assert!(!s.contains(&big(a).predecessor().unwrap()));
        assert!(!s.contains(&big(b).successor()));
        assert!(
            !s.contains(&big("9")),
            "short numbers are smaller, not lexically larger"
        );
        assert!(s.overlaps(&SequenceRange::new(big("1"), big(a)).unwrap()));
    }

    /// Naive model: the set of integers itself.
    fn model(ranges: &[(u64, u64)]) -> BTreeSet<u64> {
        ranges.iter().flat_map(|&(a, b)| a..=b).collect()
    }

    fn arb_ranges() -> impl Strategy<Value = Vec<(u64, u64)>> {
        prop::collection::vec((0u64..60, 0u64..8).prop_map(|(a, len)| (a, a + len)), 0..12)
    }

    proptest! {
        #[test]
        fn matches_model_for_insert_contains_overlaps(ranges in arb_ranges(), probe in (0u64..70, 0u64..6)) {
            let s = set(&ranges);
            let m = model(&ranges);
            for n in 0u64..72 {
                prop_assert_eq!(s.contains(&n.into()), m.contains(&n), "n = {}", n);
            }
            let (a, len) = probe;
            let expected = (a..=a + len).any(|n| m.contains(&n));
            prop_assert_eq!(s.overlaps(&range(a, a + len)), expected);
            // Canonical form: the minimum number of ranges.
            let runs = m.iter().zip(m.iter().skip(1)).filter(|(x, y)| **y != **x + 1).count()
                + usize::from(!m.is_empty());
            prop_assert_eq!(s.range_count(), runs);
        }

        #[test]
        fn matches_model_for_difference_and_remove(left in arb_ranges(), right in arb_ranges()) {
            let (a, b) = (set(&left), set(&right));
            let expected: BTreeSet<u64> = model(&left).difference(&model(&right)).copied().collect();
            let diff = a.difference(&b);
            let mut removed = a.clone();
            for r in b.iter() {
                removed.remove(r);
            }
            prop_assert_eq!(&diff, &removed);
            for n in 0u64..72 {
                prop_assert_eq!(diff.contains(&n.into()), expected.contains(&n), "n = {}", n);
            }
        }

        #[test]
        fn insertion_order_does_not_matter(mut ranges in arb_ranges(), seed in any::<u64>()) {
            let a = set(&ranges);
            // Deterministic shuffle.
            let len = ranges.len();
            for i in (1..len).rev() {
                let j = (seed.wrapping_mul(i as u64 + 7) % (i as u64 + 1)) as usize;
                ranges.swap(i, j);
            }
            prop_assert_eq!(a, set(&ranges));
        }
    }
}

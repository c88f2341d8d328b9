//! [`SequenceRange`]: a closed interval of sequence numbers.

use std::fmt;

use crate::SequenceNumber;

/// A closed interval `[first, last]` of sequence numbers, `first <= last`.
///
/// A batch of one shard's records covers the range from its first record's
/// sequence number to its last; the object key carries that range. The range
/// is a set of integers, not of records: Kinesis leaves gaps between the
/// sequence numbers it hands out.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SequenceRange {
    first: SequenceNumber,
    last: SequenceNumber,
}

impl SequenceRange {
    /// The range `[first, last]`.
    ///
    /// # Errors
    /// [`InvertedRangeError`] when `first > last`.
    pub fn new(first: SequenceNumber, last: SequenceNumber) -> Result<Self, InvertedRangeError> {
        if first > last {
            return Err(InvertedRangeError { first, last });
        }
        Ok(Self { first, last })
    }

    /// The range holding only `n`.
    pub fn single(n: SequenceNumber) -> Self {
        Self {
            first: n.clone(),
            last: n,
        }
    }

    /// The smallest sequence number in the range.
    pub fn first(&self) -> &SequenceNumber {
        &self.first
    }

    /// The largest sequence number in the range.
    pub fn last(&self) -> &SequenceNumber {
        &self.last
    }

    /// Whether `first <= n <= last`.
    pub fn contains(&self, n: &SequenceNumber) -> bool {
        &self.first <= n && n <= &self.last
    }

    /// Whether the two ranges share at least one sequence number.
    pub fn overlaps(&self, other: &Self) -> bool {
        self.first <= other.last && other.first <= self.last
    }

    /// Whether `self` ends exactly one before `other` starts (or the reverse),
    /// so that their union is one range.
    pub fn is_adjacent_to(&self, other: &Self) -> bool {
        other.first.follows(&self.last) || self.first.follows(&other.last)
    }

    /// Ends the range at `n` when `n` is past its end; a smaller `n` changes
    /// nothing. Reuses the end's buffers, so growing a range record by record
    /// allocates nothing.
    pub fn extend_to(&mut self, n: &SequenceNumber) {
        if *n > self.last {
            self.last.clone_from(n);
        }
    }

    /// Splits the range into its two ends.
    pub fn into_bounds(self) -> (SequenceNumber, SequenceNumber) {
        (self.first, self.last)
    }

    /// Builds a range from bounds the caller has already ordered.
    pub(crate) fn from_ordered(first: SequenceNumber, last: SequenceNumber) -> Self {
        debug_assert!(first <= last, "from_ordered called with {first} > {last}");
        Self { first, last }
    }
}

/// Writes `first-last`, e.g. `49590…98-49590…12`.
impl fmt::Display for SequenceRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

impl fmt::Debug for SequenceRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}, {}]", self.first, self.last)
    }
}

/// `first > last` in a range that must be ordered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("inverted sequence range: first {first} is greater than last {last}")]
pub struct InvertedRangeError {
    /// The given first bound.
    pub first: SequenceNumber,
    /// The given last bound.
    pub last: SequenceNumber,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(first: u64, last: u64) -> SequenceRange {
        SequenceRange::new(first.into(), last.into()).unwrap()
    }

    #[test]
    fn rejects_inverted_bounds() {
        let err = SequenceRange::new(5u64.into(), 4u64.into()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "inverted sequence range: first 5 is greater than last 4"
        );
    }

    #[test]
    fn contains_is_closed_on_both_ends() {
        let r = range(10, 20);
        assert!(r.contains(&10u64.into()));
        assert!(r.contains(&20u64.into()));
        assert!(!r.contains(&9u64.into()));
        assert!(!r.contains(&21u64.into()));
    }

    #[test]
    fn overlap_and_adjacency() {
        assert!(range(1, 5).overlaps(&range(5, 9)));
        assert!(range(5, 9).overlaps(&range(1, 5)));
        assert!(range(1, 9).overlaps(&range(3, 4)));
        assert!(!range(1, 4).overlaps(&range(5, 9)));
        assert!(range(1, 4).is_adjacent_to(&range(5, 9)));
        assert!(range(5, 9).is_adjacent_to(&range(1, 4)));
        assert!(!range(1, 3).is_adjacent_to(&range(5, 9)));
    }

    #[test]
    fn displays_as_first_dash_last() {
        assert_eq!(range(9, 10).to_string(), "9-10");
    }

    #[test]
    fn extends_only_forward() {
        let mut r = range(9, 10);
        r.extend_to(&SequenceNumber::from(12u64));
        assert_eq!(r.to_string(), "9-12");
        r.extend_to(&SequenceNumber::from(3u64));
        assert_eq!(r.to_string(), "9-12", "a smaller number changes nothing");
    }
}

//! Check 4, gaps, without I/O: a shard's *bound* (checkpoint or highest
//! archived record) and its records, in order, against its objects' ranges.
//! Reading the stream is in `stream.rs`.

use sequence_range::{RangeSet, SequenceNumber, SequenceRange};
use shard_lease::Checkpoint;

use super::keys::ArchivedKey;
use crate::output::bucket::Bucket;

/// Up to where a shard's records must be archived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Bound {
    /// Every record: the checkpoint is `SHARD_END`.
    ShardEnd,
    /// Every record up to and including this sequence number.
    UpTo(SequenceNumber),
}

/// The bound of a shard: the checkpoint or the highest archived sequence
/// number, whichever is larger; `SHARD_END` is the whole shard; a sentinel
/// checkpoint (nothing written yet) counts as none. `None`: nothing to check.
pub(super) fn shard_bound(
    checkpoint: Option<&Checkpoint>,
    highest_archived: Option<&SequenceNumber>,
) -> Option<Bound> {
    if checkpoint.is_some_and(Checkpoint::is_shard_end) {
        return Some(Bound::ShardEnd);
    }
    let checkpointed = checkpoint.and_then(Checkpoint::sequence_number);
    checkpointed
        .into_iter()
        .chain(highest_archived)
        .max()
        .map(|n| Bound::UpTo(n.clone()))
}

/// A run of consecutive records of a shard that are in no object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Gap {
    pub(super) shard_id: String,
    pub(super) first: SequenceNumber,
    pub(super) last: SequenceNumber,
    pub(super) records: u64,
    pub(super) first_arrival: Bucket,
    pub(super) last_arrival: Bucket,
    /// The object ending just below the gap, if any.
    pub(super) before: Option<(String, SequenceRange)>,
    /// The object starting just above the gap, if any.
    pub(super) after: Option<(String, SequenceRange)>,
    /// Whether the gap lies before the shard's first object.
    before_first_object: bool,
    /// Indices of `before` and `after` in the shard's sorted objects: a run
    /// continues only between the same two objects.
    around: (Option<usize>, Option<usize>),
}

/// Whether to read on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flow {
    Continue,
    /// The bound is reached; later records are not checked.
    Done,
}

/// How reading a shard ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ReadEnd {
    /// A record at or past the bound was read.
    Bound,
    /// The shard is closed and every record was read.
    ShardEnd,
    /// The read reached the tip (`MillisBehindLatest` 0): nothing more to
    /// read for now.
    CaughtUp,
    /// Kinesis kept failing.
    Failed(String),
}

/// The gap check of one shard, fed the shard's records in order.
#[derive(Debug)]
pub(super) struct ShardGapCheck {
    pub(super) shard_id: String,
    bound: Bound,
    covered: RangeSet,
    /// The shard's objects sorted by first, to name the objects around a gap.
    objects: Vec<(SequenceRange, String)>,
    /// Records below this are not checked (`--initial-position` LATEST or
    /// AT_TIMESTAMP: the first archived record).
    check_from: Option<SequenceNumber>,
    checked: u64,
    not_expected: u64,
    oldest: Option<(SequenceNumber, i64)>,
    last_read: Option<SequenceNumber>,
    gaps: Vec<Gap>,
    in_run: bool,
}

/// What the gap check of one shard found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ShardGapResult {
    pub(super) shard_id: String,
    pub(super) bound: Bound,
    /// Records at or below the bound that were checked.
    pub(super) checked: u64,
    /// Records before the first archived one, not checked
    /// (`--initial-position` LATEST or AT_TIMESTAMP).
    pub(super) not_expected: u64,
    /// The oldest retained record and its arrival (ms since the epoch).
    pub(super) oldest: Option<(SequenceNumber, i64)>,
    pub(super) gaps: Vec<Gap>,
    /// Facts that limit what the check could see.
    pub(super) notes: Vec<String>,
}

impl ShardGapCheck {
    pub(super) fn new(
        shard_id: &str,
        bound: Bound,
        objects: &[&ArchivedKey],
        from_first_archived: bool,
    ) -> Self {
        let mut sorted: Vec<(SequenceRange, String)> = objects
            .iter()
            .map(|o| (o.range.clone(), o.key.clone()))
            .collect();
        sorted
            .sort_by(|a, b| (a.0.first(), a.0.last(), &a.1).cmp(&(b.0.first(), b.0.last(), &b.1)));
        let covered: RangeSet = sorted.iter().map(|(range, _)| range.clone()).collect();
        let check_from = if from_first_archived {
            covered.min().cloned()
        } else {
            None
        };
        Self {
            shard_id: shard_id.to_owned(),
            bound,
            covered,
            objects: sorted,
            check_from,
            checked: 0,
            not_expected: 0,
            oldest: None,
            last_read: None,
            gaps: Vec::new(),
            in_run: false,
        }
    }

    /// The next record of the shard (in sequence order).
    pub(super) fn observe(&mut self, sequence_number: SequenceNumber, arrival_millis: i64) -> Flow {
        if let Bound::UpTo(bound) = &self.bound
            && &sequence_number > bound
        {
            return Flow::Done;
        }
        if self.oldest.is_none() {
            self.oldest = Some((sequence_number.clone(), arrival_millis));
        }
        let at_bound = matches!(&self.bound, Bound::UpTo(b) if *b == sequence_number);
        if self
            .check_from
            .as_ref()
            .is_some_and(|from| &sequence_number < from)
        {
            self.not_expected += 1;
        } else {
            self.checked += 1;
            if self.covered.contains(&sequence_number) {
                self.in_run = false;
            } else {
                self.missing(&sequence_number, arrival_millis);
            }
        }
        self.last_read = Some(sequence_number);
        if at_bound { Flow::Done } else { Flow::Continue }
    }

    fn missing(&mut self, sequence_number: &SequenceNumber, arrival_millis: i64) {
        let minute = Bucket::minute(arrival_millis);
        let above = self
            .objects
            .partition_point(|(range, _)| range.first() <= sequence_number);
        let around = (
            above.checked_sub(1),
            (above < self.objects.len()).then_some(above),
        );
        if let Some(gap) = self.gaps.last_mut()
            && self.in_run
            && gap.around == around
        {
            gap.last = sequence_number.clone();
            gap.records += 1;
            gap.last_arrival = minute;
            return;
        }
        let object = |index: Option<usize>| {
            index.map(|i| (self.objects[i].1.clone(), self.objects[i].0.clone()))
        };
        self.gaps.push(Gap {
            shard_id: self.shard_id.clone(),
            first: sequence_number.clone(),
            last: sequence_number.clone(),
            records: 1,
            first_arrival: minute,
            last_arrival: minute,
            before: object(around.0),
            after: object(around.1),
            before_first_object: around.0.is_none(),
            around,
        });
        self.in_run = true;
    }

    pub(super) fn finish(self, end: ReadEnd) -> ShardGapResult {
        let mut notes = Vec::new();
        match (&end, &self.bound) {
            (ReadEnd::Failed(reason), _) => notes.push(format!(
                "check incomplete: Kinesis kept failing after {} records ({reason})",
                self.checked + self.not_expected
            )),
            (ReadEnd::CaughtUp, Bound::ShardEnd) => notes.push(
                "the checkpoint is SHARD_END but the shard is still open (a lease table of another stream?)"
                    .to_owned(),
            ),
            (ReadEnd::CaughtUp | ReadEnd::ShardEnd, Bound::UpTo(bound))
                if self.last_read.as_ref() != Some(bound) =>
            {
                notes.push(format!(
                    "the bound {bound} is not a record of the shard: the stream ended at {} \
                     (archive or lease table of an earlier stream of that name?)",
                    self.last_read
                        .as_ref()
                        .map_or_else(|| "its start".to_owned(), ToString::to_string)
                ));
            }
            _ => {}
        }
        match (&self.oldest, self.covered.min()) {
            (None, Some(_)) => notes.push(
                "no record retained: every archived record is past retention, none checked"
                    .to_owned(),
            ),
            (Some((oldest, _)), Some(lowest)) if lowest < oldest => notes.push(format!(
                "archived records below the oldest retained record {oldest} were trimmed from the \
                 stream and are not checked"
            )),
            _ => {}
        }
        ShardGapResult {
            shard_id: self.shard_id,
            bound: self.bound,
            checked: self.checked,
            not_expected: self.not_expected,
            oldest: self.oldest,
            gaps: self.gaps,
            notes,
        }
    }
}

/// The gaps of one shard's `records` (sequence number, arrival ms) against
/// its `objects` up to `bound`: the pure form of the gap check.
#[cfg(test)]
pub(super) fn gaps(
    shard_id: &str,
    records: impl IntoIterator<Item = (SequenceNumber, i64)>,
    objects: &[&ArchivedKey],
    bound: Bound,
    from_first_archived: bool,
) -> ShardGapResult {
    let mut check = ShardGapCheck::new(shard_id, bound, objects, from_first_archived);
    for (sequence_number, arrival) in records {
        if check.observe(sequence_number, arrival) == Flow::Done {
            return check.finish(ReadEnd::Bound);
        }
    }
    check.finish(ReadEnd::CaughtUp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::test_support::{MINUTE_MILLIS, SHARD, missing, n, object, stream};

    #[test]
    fn bounds_follow_checkpoints_and_the_archive() {
        let seq = |v| Checkpoint::SequenceNumber(n(v));
        assert_eq!(shard_bound(None, None), None);
        assert_eq!(shard_bound(Some(&Checkpoint::TrimHorizon), None), None);
        assert_eq!(
            shard_bound(Some(&Checkpoint::Latest), Some(&n(4))),
            Some(Bound::UpTo(n(4)))
        );
        assert_eq!(
            shard_bound(Some(&seq(9)), Some(&n(4))),
            Some(Bound::UpTo(n(9)))
        );
        assert_eq!(
            shard_bound(Some(&seq(3)), Some(&n(4))),
            Some(Bound::UpTo(n(4)))
        );
        assert_eq!(shard_bound(Some(&seq(3)), None), Some(Bound::UpTo(n(3))));
        assert_eq!(
            shard_bound(Some(&Checkpoint::ShardEnd), Some(&n(4))),
            Some(Bound::ShardEnd)
        );
    }

    #[test]
    fn gap_table() {
        let objects = [object(10, 20), object(30, 40), object(70, 80)];
        let refs: Vec<&ArchivedKey> = objects.iter().collect();
        // A missing object in the middle: 50 and 60, between the 2nd and 3rd.
        let result = gaps(SHARD, stream(10), &refs, Bound::UpTo(n(80)), false);
        assert_eq!(missing(&result), vec![(50, 60, 2)]);
        assert_eq!(result.checked, 8);
        let gap = &result.gaps[0];
        assert_eq!(gap.before.as_ref().unwrap().0, objects[1].key);
        assert_eq!(gap.after.as_ref().unwrap().0, objects[2].key);
        assert_eq!(gap.first_arrival.iso_text(), "2026-11-21T05:31Z");
        assert_eq!(gap.last_arrival.iso_text(), "2026-11-21T05:32Z");
        assert_eq!(result.oldest, Some((n(10), MINUTE_MILLIS)));
        assert!(result.notes.is_empty(), "{:?}", result.notes);

        // A checkpoint past the newest object: its records are missing too.
        let result = gaps(SHARD, stream(10), &refs, Bound::UpTo(n(100)), false);
        assert_eq!(missing(&result), vec![(50, 60, 2), (90, 100, 2)]);
        assert!(result.gaps[1].after.is_none());

        // SHARD_END: every record.
        let result = gaps(SHARD, stream(12), &refs, Bound::ShardEnd, false);
        assert_eq!(missing(&result), vec![(50, 60, 2), (90, 120, 4)]);

        // A lost first object (TRIM_HORIZON), unless the daemon started later.
        let later = [object(30, 40), object(50, 60)];
        let later: Vec<&ArchivedKey> = later.iter().collect();
        let result = gaps(SHARD, stream(6), &later, Bound::UpTo(n(60)), false);
        assert_eq!(missing(&result), vec![(10, 20, 2)]);
        assert!(result.gaps[0].before_first_object);
        let result = gaps(SHARD, stream(6), &later, Bound::UpTo(n(60)), true);
        assert_eq!(missing(&result), vec![]);
        assert_eq!((result.checked, result.not_expected), (4, 2));

        // Trimmed by retention: the check starts at the oldest retained record.
        let trimmed = stream(10).into_iter().skip(3);
        let result = gaps(SHARD, trimmed, &refs, Bound::UpTo(n(80)), false);
        assert_eq!(missing(&result), vec![(50, 60, 2)]);
        assert_eq!(result.oldest, Some((n(40), MINUTE_MILLIS + 180_000)));
        assert!(result.notes[0].contains("trimmed"), "{:?}", result.notes);

        // A bound that is not a record of the stream.
        let result = gaps(SHARD, stream(3), &refs, Bound::UpTo(n(80)), false);
        assert!(
            result.notes[0].contains("not a record of the shard"),
            "{:?}",
            result.notes
        );

        // Exact.
        let all = [object(10, 50), object(60, 60), object(70, 100)];
        let all: Vec<&ArchivedKey> = all.iter().collect();
        let result = gaps(SHARD, stream(10), &all, Bound::UpTo(n(100)), false);
        assert_eq!((missing(&result), result.checked), (vec![], 10));
    }

    #[test]
    fn a_gap_run_ends_at_a_covered_record_or_an_object_boundary() {
        // Ranges with holes that hold no record: 25 lies between objects but
        // is not a record, so 10..40 read as exact.
        let objects = [object(10, 20), object(30, 40)];
        let refs: Vec<&ArchivedKey> = objects.iter().collect();
        let records = [10, 20, 30, 40, 50, 60].map(|v| (n(v), MINUTE_MILLIS));
        let result = gaps(SHARD, records, &refs, Bound::UpTo(n(60)), false);
        assert_eq!(missing(&result), vec![(50, 60, 2)]);
        // Missing records on both sides of an object are two runs.
        let objects = [object(30, 30)];
        let refs: Vec<&ArchivedKey> = objects.iter().collect();
        let records = [10, 20, 30, 40].map(|v| (n(v), MINUTE_MILLIS));
        let result = gaps(SHARD, records, &refs, Bound::UpTo(n(40)), false);
        assert_eq!(missing(&result), vec![(10, 20, 2), (40, 40, 1)]);
    }
}

//! The gap check of an Iceberg table, without I/O: a shard's records, in
//! order, up to its committed end, against the table's live rows and the
//! records of its error and duplicates objects (`TableShardCheck`).
//! Reading the stream is `stream.rs`'s; the shards are read by
//! `table_io.rs`.
//!
//! A KPL aggregate is one Kinesis record (counted once, as the archive's
//! gap check counts it) whose user records are each a row of their own,
//! keyed by the aggregate's sequence number and their sub-sequence number
//! (`read::record::ShardRecord::views`): each must be in the table, or in
//! an error or duplicates object.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use sequence_range::SequenceNumber;

use super::body::Position;
use super::gaps::{Flow, ReadEnd};
use crate::read::record::ShardRecord;

/// Most missing records a shard's finding names (all are counted).
pub(super) const MAX_NAMED: usize = 5;

/// A live row's record within its shard: sequence number and sub-sequence
/// number (none for a record that was not aggregated), as the table holds
/// them.
pub(super) type RowKey = (SequenceNumber, Option<i64>);

/// Each shard's live rows, by shard id.
pub(super) type LiveRecords = HashMap<String, HashSet<RowKey>>;

/// The user records of each shard's error and duplicates objects (`--deep`
/// reads them), by shard id: kept out of the table on purpose.
pub(super) type SideRecords = HashMap<String, HashSet<Position>>;

/// What became of the gap check of a table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) enum TableGaps {
    /// No `--stream`.
    #[default]
    NotRequested,
    /// Kinesis did not answer (ListShards failed): why.
    Skipped(String),
    /// Checked shard by shard.
    Checked {
        /// By shard id.
        shards: Vec<TableShardGaps>,
        /// Shards not checked, and why.
        notes: Vec<String>,
        /// `--since`: where each shard was read from, if not its oldest
        /// retained record.
        since: Option<DateTime<Utc>>,
    },
}

/// What the gap check of one shard of a table found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TableShardGaps {
    pub(super) shard_id: String,
    /// The shard's committed end: records up to it were checked.
    pub(super) committed_end: SequenceNumber,
    /// Kinesis records at or below the committed end that were checked.
    pub(super) checked: u64,
    /// Their user records (a KPL aggregate's each; a plain record itself).
    pub(super) user_records: u64,
    /// Of those, the ones found in an error or duplicates object.
    pub(super) in_sides: u64,
    /// Kinesis records before the shard's lowest kept record, not checked
    /// (`--initial-position` LATEST or AT_TIMESTAMP).
    pub(super) not_expected: u64,
    /// The oldest record read and its arrival (ms since the epoch).
    pub(super) oldest: Option<(SequenceNumber, i64)>,
    /// User records in no live row and no error or duplicates object.
    pub(super) missing: u64,
    /// The first [`MAX_NAMED`] of them, in stream order.
    pub(super) first_missing: Vec<Position>,
    /// Facts that limit what the check could see.
    pub(super) notes: Vec<String>,
}

/// The gap check of one shard of a table, fed the shard's records in order.
#[derive(Debug)]
pub(super) struct TableShardCheck {
    result: TableShardGaps,
    /// The shard's live rows.
    live: HashSet<RowKey>,
    /// The shard's error and duplicates records.
    sides: HashSet<Position>,
    /// The lowest record kept (a live row or a side record).
    lowest_kept: Option<SequenceNumber>,
    /// Records below this are not checked (`--initial-position` LATEST or
    /// AT_TIMESTAMP: the lowest record kept).
    check_from: Option<SequenceNumber>,
    last_read: Option<SequenceNumber>,
}

impl TableShardCheck {
    /// The check of `shard_id` up to `committed_end`, against its `live`
    /// rows and its error and duplicates records `sides`; with
    /// `from_first_kept`, records before the lowest of those are not
    /// expected.
    pub(super) fn new(
        shard_id: &str,
        committed_end: SequenceNumber,
        live: HashSet<RowKey>,
        sides: HashSet<Position>,
        from_first_kept: bool,
    ) -> Self {
        let lowest_kept = live
            .iter()
            .map(|(sequence_number, _)| sequence_number)
            .chain(sides.iter().map(|(sequence_number, _)| sequence_number))
            .min()
            .cloned();
        Self {
            result: TableShardGaps {
                shard_id: shard_id.to_owned(),
                committed_end,
                checked: 0,
                user_records: 0,
                in_sides: 0,
                not_expected: 0,
                oldest: None,
                missing: 0,
                first_missing: Vec::new(),
                notes: Vec::new(),
            },
            live,
            sides,
            check_from: if from_first_kept {
                lowest_kept.clone()
            } else {
                None
            },
            lowest_kept,
            last_read: None,
        }
    }

    pub(super) fn shard_id(&self) -> &str {
        &self.result.shard_id
    }

    /// The next record of the shard (in sequence order).
    pub(super) fn observe(&mut self, record: &ShardRecord) -> Flow {
        let end = &self.result.committed_end;
        let sequence_number = &record.sequence_number;
        if sequence_number > end {
            return Flow::Done;
        }
        let at_end = sequence_number == end;
        if self.result.oldest.is_none() {
            self.result.oldest = Some((sequence_number.clone(), record.arrival_millis));
        }
        if self
            .check_from
            .as_ref()
            .is_some_and(|from| sequence_number < from)
        {
            self.result.not_expected += 1;
        } else {
            self.result.checked += 1;
            for view in record.views(&self.result.shard_id) {
                self.result.user_records += 1;
                let sub = view.sub_sequence_number;
                // A sub-sequence number beyond i64 cannot be a row.
                let row = sub.map(i64::try_from).transpose();
                let position = (sequence_number.clone(), sub);
                if let Ok(row) = row
                    && self.live.contains(&(sequence_number.clone(), row))
                {
                    continue;
                }
                if self.sides.contains(&position) {
                    self.result.in_sides += 1;
                    continue;
                }
                self.result.missing += 1;
                if self.result.first_missing.len() < MAX_NAMED {
                    self.result.first_missing.push(position);
                }
            }
        }
        self.last_read = Some(sequence_number.clone());
        if at_end { Flow::Done } else { Flow::Continue }
    }

    /// The result, with notes on how reading ended.
    pub(super) fn finish(mut self, end: ReadEnd) -> TableShardGaps {
        let result = &mut self.result;
        match &end {
            ReadEnd::Failed(reason) => result.notes.push(format!(
                "check incomplete: Kinesis kept failing after {} records ({reason})",
                result.checked + result.not_expected
            )),
            ReadEnd::CaughtUp | ReadEnd::ShardEnd
                if self.last_read.as_ref() != Some(&result.committed_end) =>
            {
                result.notes.push(format!(
                    "the committed end {} is not a record of the shard: the stream ended at {} \
                     (a table of an earlier stream of that name?)",
                    result.committed_end,
                    self.last_read
                        .as_ref()
                        .map_or_else(|| "its start".to_owned(), ToString::to_string)
                ));
            }
            _ => {}
        }
        match (&result.oldest, &self.lowest_kept) {
            (None, Some(_)) => result.notes.push(
                "no record retained: every kept record is past retention, none checked".to_owned(),
            ),
            (Some((oldest, _)), Some(lowest)) if lowest < oldest => result.notes.push(format!(
                "kept records below the oldest retained record {oldest} were trimmed from the \
                 stream and are not checked"
            )),
            _ => {}
        }
        self.result
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::read::kpl::UserRecord;
    use crate::verify::test_support::{SHARD, n};

    fn record(value: u64, subs: Option<&[u64]>) -> ShardRecord {
        ShardRecord {
            sequence_number: n(value),
            arrival_millis: 1_000 * value as i64,
            partition_key: "pk".to_owned(),
            data: Bytes::from_static(b"x"),
            user_records: subs.map(|subs| {
                subs.iter()
                    .map(|&sub| UserRecord {
                        sub_sequence_number: sub,
                        partition_key: "pk".to_owned(),
                        explicit_hash_key: None,
                        data: Bytes::from_static(b"x"),
                    })
                    .collect()
            }),
        }
    }

    fn check(
        records: &[ShardRecord],
        end: u64,
        live: &[(u64, Option<i64>)],
        sides: &[(u64, Option<u64>)],
        from_first_kept: bool,
    ) -> TableShardGaps {
        let mut check = TableShardCheck::new(
            SHARD,
            n(end),
            live.iter().map(|&(v, sub)| (n(v), sub)).collect(),
            sides.iter().map(|&(v, sub)| (n(v), sub)).collect(),
            from_first_kept,
        );
        for record in records {
            if check.observe(record) == Flow::Done {
                return check.finish(ReadEnd::Bound);
            }
        }
        check.finish(ReadEnd::CaughtUp)
    }

    #[test]
    fn each_user_record_up_to_the_end_is_a_row_or_in_a_side_object() {
        let records = [
            record(10, None),
            record(20, Some(&[0, 1, 2])),
            record(30, None),
            record(40, None),
        ];
        // Complete: 20's user records are rows, 30 is in an error object,
        // 40 is after the committed end.
        let all = [(10, None), (20, Some(0)), (20, Some(1)), (20, Some(2))];
        let result = check(&records, 30, &all, &[(30, None)], false);
        assert_eq!((result.missing, result.checked), (0, 3));
        assert_eq!((result.user_records, result.in_sides), (5, 1));
        assert!(result.notes.is_empty(), "{:?}", result.notes);

        // One user record of the aggregate missing, and 30.
        let some = [(10, None), (20, Some(0)), (20, Some(2))];
        let result = check(&records, 30, &some, &[], false);
        assert_eq!(result.missing, 2);
        assert_eq!(result.first_missing, [(n(20), Some(1)), (n(30), None)]);

        // A row without its sub-sequence number is not the user record.
        let result = check(&records[..2], 20, &[(10, None), (20, None)], &[], false);
        assert_eq!(result.missing, 3);
    }

    #[test]
    fn records_before_the_first_kept_one_are_expected_only_from_the_start() {
        let records = [record(10, None), record(20, None), record(30, None)];
        let result = check(&records, 30, &[(20, None), (30, None)], &[], false);
        assert_eq!(result.first_missing, [(n(10), None)]);
        let result = check(&records, 30, &[(20, None), (30, None)], &[], true);
        assert_eq!((result.missing, result.not_expected), (0, 1));
        // An end that is no record of the stream.
        let result = check(
            &records,
            40,
            &[(10, None), (20, None), (30, None)],
            &[],
            false,
        );
        assert!(
            result.notes[0].contains("not a record of the shard"),
            "{:?}",
            result.notes
        );
    }
}

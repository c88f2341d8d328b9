//! [`ResumeCheck`]: whether the records a fresh shard iterator was asked for
//! are still in the shard, decided by the records it returns.
//!
//! Kinesis does not say reliably that a position was trimmed by retention.
//! GetShardIterator may reject a trimmed sequence number with
//! `InvalidArgumentException` ([`crate::aws::kinesis::is_expired_position`]),
//! but it may also grant an iterator that returns records from after the
//! trim horizon, with empty responses first (reported for Kinesis in
//! harlow/kinesis-consumer#125; kinesis-mock starts an unknown
//! `AT_SEQUENCE_NUMBER` at the oldest record), and `AT_TIMESTAMP` always
//! starts silently at the oldest record left. So every fresh iterator at a
//! position that retention could have passed is checked against what it
//! returns:
//!
//! - A sequence number `n` is asked for `AT_SEQUENCE_NUMBER n`, also when
//!   reading is to resume after it (the record `n` is then skipped: it is
//!   archived already). If `n` comes first, nothing was trimmed. If a later
//!   record comes first, the records between were trimmed: a gap.
//! - A start time `t` older than the stream's retention (`now − retention`,
//!   less [`CLOCK_SLACK`]) is read from `TRIM_HORIZON` instead of
//!   `AT_TIMESTAMP`. A record that arrived before `t` is skipped and shows
//!   the shard still holds records from before `t`, so none after it was
//!   trimmed; if the first record has arrived at or after `t`, it is the
//!   oldest one in the shard and records between `t` and it may have been
//!   trimmed: a gap. Younger start times are read `AT_TIMESTAMP` unchecked:
//!   Kinesis keeps every record for at least the retention period
//!   (DescribeStreamSummary `RetentionPeriodHours`).
//!
//! A record before the position (from a server that starts at the trim
//! horizon, or after a rejected position fell back to `TRIM_HORIZON`) is
//! skipped and proves that nothing at the position was trimmed, since
//! trimming removes the oldest records first. Empty responses prove nothing:
//! the check waits for a record, for `MillisBehindLatest` 0 or for
//! `SHARD_END`; caught up without a record at or past the position, every
//! record from it on was trimmed — or none ever arrived, which the shard
//! cannot tell apart. Either way the gap is reported: a gap is never missed,
//! and a gap without a first retained record may have held no record.
//!
//! The cost is one record per fresh iterator at a sequence number (the
//! position's own record, read again) and, for a start time older than the
//! retention, the records Kinesis has not trimmed yet though they are past
//! it; never a call per GetRecords.

use std::cmp::Ordering;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use sequence_range::SequenceNumber;
use tracing::info;

use crate::aws::StartingPosition;
use crate::read::record::ShardRecord;
use crate::read::retention::RetentionGap;

/// How far the local clock may lag Kinesis's when a start time is compared
/// with the stream's retention: a start time within this of the retention
/// is checked too. The cost of a check that finds nothing trimmed is the
/// records of this stretch, read and skipped.
pub const CLOCK_SLACK: Duration = Duration::from_secs(5 * 60);

/// What the first records of a fresh iterator must show for the position
/// it was asked at to be still in the shard.
#[derive(Debug, Clone)]
pub struct ResumeCheck {
    shard_id: String,
    /// The position reading was to resume at, as a gap names it.
    position: StartingPosition,
    expect: Expect,
    /// A record before the position was read: nothing was trimmed.
    saw_earlier: bool,
    /// GetShardIterator rejected the position as expired, and the iterator
    /// is at `TRIM_HORIZON` instead.
    rejected: bool,
}

/// The record that shows the position is still in the shard.
#[derive(Debug, Clone)]
enum Expect {
    /// The record with this sequence number comes first. `deliver`: whether
    /// it is the caller's (`AT_SEQUENCE_NUMBER`) or archived already and
    /// skipped (`AFTER_SEQUENCE_NUMBER`).
    Record {
        sequence_number: SequenceNumber,
        deliver: bool,
    },
    /// A record that arrived before this time (ms since the epoch).
    ArrivedBefore(i64),
}

/// What a record read under a [`ResumeCheck`] is.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Before the position: skipped; the check goes on.
    Earlier,
    /// The check is over.
    Done {
        /// Whether the record is the caller's: `false` only for the record
        /// an `AFTER_SEQUENCE_NUMBER` position names (archived already).
        deliver: bool,
        /// Records trimmed between the position and this record.
        gap: Option<RetentionGap>,
    },
}

impl ResumeCheck {
    /// The iterator to ask for to read `shard_id` from `position`, and the
    /// check its first records must pass (`None`: nothing to check —
    /// `TRIM_HORIZON`, `LATEST`, or a start time within the retention).
    /// `retention` is the stream's (DescribeStreamSummary
    /// `RetentionPeriodHours`); without it start times are not checked.
    /// `now` is the local clock.
    pub fn plan(
        shard_id: &str,
        position: &StartingPosition,
        retention: Option<Duration>,
        now: DateTime<Utc>,
    ) -> (StartingPosition, Option<Self>) {
        let (sequence_number, deliver) = match position {
            StartingPosition::AtSequenceNumber(n) => (n.clone(), true),
            StartingPosition::AfterSequenceNumber(n) => (n.clone(), false),
            StartingPosition::AtTimestamp(start)
                if retention.is_some_and(|retention| may_be_trimmed(*start, retention, now)) =>
            {
                let check = Self::new(
                    shard_id,
                    position,
                    Expect::ArrivedBefore(start.timestamp_millis()),
                );
                return (StartingPosition::TrimHorizon, Some(check));
            }
            _ => return (position.clone(), None),
        };
        let check = Self::new(
            shard_id,
            position,
            Expect::Record {
                sequence_number: sequence_number.clone(),
                deliver,
            },
        );
        (
            StartingPosition::AtSequenceNumber(sequence_number),
            Some(check),
        )
    }

    fn new(shard_id: &str, position: &StartingPosition, expect: Expect) -> Self {
        Self {
            shard_id: shard_id.to_owned(),
            position: position.clone(),
            expect,
            saw_earlier: false,
            rejected: false,
        }
    }

    /// GetShardIterator rejected the position as expired; the iterator is
    /// at `TRIM_HORIZON` instead, and the check decides as before.
    pub fn rejected(&mut self) {
        self.rejected = true;
    }

    /// Judges the next record the iterator returned.
    pub fn on_record(&mut self, record: &ShardRecord) -> Verdict {
        let (is_earlier, is_own) = match &self.expect {
            Expect::Record {
                sequence_number, ..
            } => match record.sequence_number.cmp(sequence_number) {
                Ordering::Less => (true, false),
                Ordering::Equal => (false, true),
                Ordering::Greater => (false, false),
            },
            Expect::ArrivedBefore(start) => (record.arrival_millis < *start, false),
        };
        if is_earlier {
            self.saw_earlier = true;
            return Verdict::Earlier;
        }
        let deliver = match &self.expect {
            Expect::Record { deliver, .. } => !is_own || *deliver,
            Expect::ArrivedBefore(_) => true,
        };
        let gap = self.settle(is_own, Some(record));
        Verdict::Done { deliver, gap }
    }

    /// The shard is caught up (`MillisBehindLatest` 0) or at `SHARD_END`
    /// and no record at or past the position came: every record from it on
    /// was trimmed, unless one before it was read.
    pub fn exhausted(self) -> Option<RetentionGap> {
        self.settle(false, None)
    }

    /// The gap, given whether the position's own record came (`own`) and
    /// the first record at or past the position (`None`: there is none);
    /// `None` when the position's own record or one before it was read.
    fn settle(&self, own: bool, first_retained: Option<&ShardRecord>) -> Option<RetentionGap> {
        if own || self.saw_earlier {
            if self.rejected {
                info!(shard_id = %self.shard_id, "the position was still in the shard: nothing expired");
            }
            return None;
        }
        Some(RetentionGap::trimmed(
            &self.shard_id,
            self.position.clone(),
            first_retained,
        ))
    }
}

/// Whether records that arrived at `start` may have been trimmed by `now`,
/// given the stream's `retention`: Kinesis keeps every record at least that
/// long; [`CLOCK_SLACK`] covers a local clock that lags Kinesis's.
fn may_be_trimmed(start: DateTime<Utc>, retention: Duration, now: DateTime<Utc>) -> bool {
    let Ok(kept) = TimeDelta::from_std(retention.saturating_sub(CLOCK_SLACK)) else {
        return false;
    };
    now.checked_sub_signed(kept)
        .is_some_and(|horizon| start < horizon)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    const DAY: Duration = Duration::from_secs(24 * 3_600);

    fn record(n: u64, arrival_millis: i64) -> ShardRecord {
        ShardRecord {
            sequence_number: SequenceNumber::from(n),
            arrival_millis,
            partition_key: "pk".to_owned(),
            data: Bytes::from_static(b"x"),
            user_records: None,
        }
    }

    fn at(millis: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(millis).unwrap()
    }

    fn check(position: StartingPosition) -> ResumeCheck {
        let now = at(10 * DAY.as_millis() as i64);
        ResumeCheck::plan("shard", &position, Some(DAY), now)
            .1
            .unwrap()
    }

    #[test]
    fn sequence_numbers_are_asked_for_at_their_own_record() {
        let n = SequenceNumber::from(7u64);
        for position in [
            StartingPosition::AtSequenceNumber(n.clone()),
            StartingPosition::AfterSequenceNumber(n.clone()),
        ] {
            let (request, check) = ResumeCheck::plan("shard", &position, None, Utc::now());
            assert_eq!(request, StartingPosition::AtSequenceNumber(n.clone()));
            assert!(check.is_some());
        }
        for position in [StartingPosition::TrimHorizon, StartingPosition::Latest] {
            let (request, check) = ResumeCheck::plan("shard", &position, Some(DAY), Utc::now());
            assert_eq!(request, position);
            assert!(check.is_none());
        }
    }

    #[test]
    fn the_position_s_own_record_is_delivered_only_at_it() {
        let n = SequenceNumber::from(7u64);
        let mut after = check(StartingPosition::AfterSequenceNumber(n.clone()));
        assert_eq!(
            after.on_record(&record(7, 0)),
            Verdict::Done {
                deliver: false,
                gap: None
            }
        );
        let mut at = check(StartingPosition::AtSequenceNumber(n));
        assert_eq!(
            at.on_record(&record(7, 0)),
            Verdict::Done {
                deliver: true,
                gap: None
            }
        );
    }

    #[test]
    fn a_later_record_first_is_a_gap_unless_an_earlier_one_came() {
        let position = StartingPosition::AfterSequenceNumber(SequenceNumber::from(7u64));
        let Verdict::Done { deliver, gap } = check(position.clone()).on_record(&record(9, 5))
        else {
            panic!("a later record ends the check");
        };
        assert!(deliver);
        let gap = gap.expect("7 was trimmed");
        assert_eq!(gap.expired, position);
        assert_eq!(gap.first_retained, Some((SequenceNumber::from(9u64), 5)));

        let mut check = check(position);
        assert_eq!(check.on_record(&record(3, 0)), Verdict::Earlier);
        assert_eq!(
            check.on_record(&record(9, 0)),
            Verdict::Done {
                deliver: true,
                gap: None
            }
        );
    }

    #[test]
    fn nothing_at_or_past_the_position_is_a_gap_unless_an_earlier_record_came() {
        let position = StartingPosition::AtSequenceNumber(SequenceNumber::from(7u64));
        let gap = check(position.clone()).exhausted().expect("all trimmed");
        assert_eq!(gap.first_retained, None);
        let mut check = check(position);
        assert_eq!(check.on_record(&record(3, 0)), Verdict::Earlier);
        assert_eq!(check.exhausted(), None);
    }

    #[test]
    fn a_start_time_is_checked_once_it_may_have_been_trimmed() {
        let now = at(10 * DAY.as_millis() as i64);
        let slack = CLOCK_SLACK.as_millis() as i64;
        let horizon = now.timestamp_millis() - DAY.as_millis() as i64;
        let plan = |start: i64, retention| {
            ResumeCheck::plan(
                "shard",
                &StartingPosition::AtTimestamp(at(start)),
                retention,
                now,
            )
        };
        // Within the retention, even counting the clock slack: unchecked.
        let (request, check) = plan(horizon + slack, Some(DAY));
        assert_eq!(request, StartingPosition::AtTimestamp(at(horizon + slack)));
        assert!(check.is_none());
        // Within the slack of the retention, or past it: from TRIM_HORIZON.
        for start in [horizon + slack - 1, horizon - 1] {
            let (request, check) = plan(start, Some(DAY));
            assert_eq!(request, StartingPosition::TrimHorizon);
            assert!(check.is_some());
        }
        // The retention unknown: unchecked.
        assert!(plan(horizon - 1, None).1.is_none());
    }

    #[test]
    fn a_start_time_is_kept_when_a_record_before_it_is_retained() {
        let start = 10 * DAY.as_millis() as i64 - 3 * DAY.as_millis() as i64;
        let position = StartingPosition::AtTimestamp(at(start));
        let mut kept = check(position.clone());
        assert_eq!(kept.on_record(&record(1, start - 1)), Verdict::Earlier);
        assert_eq!(
            kept.on_record(&record(2, start)),
            Verdict::Done {
                deliver: true,
                gap: None
            }
        );
        let Verdict::Done { deliver, gap } = check(position).on_record(&record(2, start + 1))
        else {
            panic!("a record at or after the start ends the check");
        };
        assert!(deliver);
        assert_eq!(
            gap.expect("the oldest record is past the start")
                .first_retained,
            Some((SequenceNumber::from(2u64), start + 1))
        );
    }
}

//! [`RetentionGap`]: records of a shard that expired from the stream before
//! shardsink read them, and the marker object that says so in S3.
//!
//! Kinesis keeps records for the stream's retention period (24 hours by
//! default, DescribeStreamSummary `RetentionPeriodHours`). When shardsink
//! cannot read a shard for longer — an outage, a stopped service — the
//! position it resumes at is trimmed. The reader finds out from what a fresh
//! iterator returns ([`crate::read::resume_check`]): a later record than the
//! position's own first, nothing at all once caught up, or a start time past
//! the retention with no older record left; GetShardIterator may also reject
//! the sequence number ([`crate::aws::kinesis::is_expired_position`]), or the
//! shard itself may have left the stream (ResourceNotFoundException).
//! Reading goes on from the oldest record still there, and whatever arrived
//! in between and was trimmed is gone. shardsink cannot tell how many records
//! that was (sequence numbers are not consecutive), but it says loudly that
//! it happened: an error log, `shardsink_retention_gaps_total`, and a marker
//! object in the archive ([`crate::output::gap_marker`]).

use chrono::{DateTime, Utc};
use sequence_range::SequenceNumber;
use shard_lease::{Checkpoint, Lease};

use crate::aws::StartingPosition;
use crate::read::record::ShardRecord;

/// Records of one shard that expired from the stream unread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionGap {
    /// The shard.
    pub shard_id: String,
    /// Where reading was to resume: this position had expired.
    pub expired: StartingPosition,
    /// The oldest record the shard still held when the gap was found:
    /// sequence number and arrival time (ms since the epoch). `None` when
    /// the shard held no record at all, or has left the stream.
    pub first_retained: Option<(SequenceNumber, i64)>,
    /// The shard itself has left the stream (every record trimmed after it
    /// was closed by a reshard).
    pub shard_left_stream: bool,
}

impl RetentionGap {
    /// `(position name, sequence number)` of the expired position: the
    /// GetShardIterator `ShardIteratorType` and, for the two sequence-number
    /// types, the number.
    pub fn position(&self) -> (&'static str, Option<&str>) {
        match &self.expired {
            StartingPosition::AtSequenceNumber(n) => ("AT_SEQUENCE_NUMBER", Some(n.as_str())),
            StartingPosition::AfterSequenceNumber(n) => ("AFTER_SEQUENCE_NUMBER", Some(n.as_str())),
            StartingPosition::TrimHorizon => ("TRIM_HORIZON", None),
            StartingPosition::Latest => ("LATEST", None),
            StartingPosition::AtTimestamp(_) => ("AT_TIMESTAMP", None),
        }
    }
}

impl RetentionGap {
    /// Records of `shard_id` trimmed from `expired` on, up to `first_retained`,
    /// the oldest record the shard still holds (`None`: it holds none past
    /// the position).
    pub fn trimmed(
        shard_id: &str,
        expired: StartingPosition,
        first_retained: Option<&ShardRecord>,
    ) -> Self {
        Self {
            shard_id: shard_id.to_owned(),
            expired,
            first_retained: first_retained
                .map(|record| (record.sequence_number.clone(), record.arrival_millis)),
            shard_left_stream: false,
        }
    }

    /// Every record of `shard_id` from `expired` on: the shard has left the
    /// stream (closed, then trimmed) before it was read to its end.
    pub fn shard_gone(shard_id: &str, expired: StartingPosition) -> Self {
        Self {
            shard_id: shard_id.to_owned(),
            expired,
            first_retained: None,
            shard_left_stream: true,
        }
    }

    /// The gap of a lease whose shard left the stream before it was read to
    /// its end: every record after its checkpoint.
    pub fn of_unread_lease(lease: &Lease) -> Self {
        let expired = match &lease.checkpoint {
            Checkpoint::SequenceNumber(n) => StartingPosition::AfterSequenceNumber(n.clone()),
            Checkpoint::TrimHorizon | Checkpoint::ShardEnd => StartingPosition::TrimHorizon,
            Checkpoint::Latest => StartingPosition::Latest,
            Checkpoint::AtTimestamp => StartingPosition::AtTimestamp(
                lease
                    .initial_timestamp
                    .as_deref()
                    .and_then(|text| DateTime::parse_from_rfc3339(text).ok())
                    .map(|time| time.with_timezone(&Utc))
                    .unwrap_or_default(),
            ),
        };
        Self::shard_gone(&lease.lease_key, expired)
    }
}

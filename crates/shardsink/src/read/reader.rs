//! [`ShardReader`]: one shard's records, in order, through GetShardIterator
//! and GetRecords.

use std::time::Duration;

use aws_sdk_kinesis::operation::get_records::GetRecordsOutput;

use crate::aws::{Kinesis, KinesisError, ShardInfo, StartingPosition};
use crate::read::batch::ReadBatch;
use crate::read::position::ReadPosition;

/// Kinesis allows 5 GetRecords calls a second per shard (GetRecords API
/// reference); a busy shard is read at most this often.
pub const MIN_READ_INTERVAL: Duration = Duration::from_millis(200);

/// Reads one shard from a starting position, keeping its shard iterator.
///
/// After `ExpiredIteratorException` the next [`read`](Self::read) gets a new
/// iterator after the last record returned (or at the starting position when
/// none was), so no record is skipped or repeated.
///
/// Every fresh iterator at a position retention could have passed is
/// checked against the records it returns ([`ResumeCheck`]): a sequence
/// number is asked for `AT_SEQUENCE_NUMBER` and its own record must come
/// first; a start time older than the stream's retention is read from
/// `TRIM_HORIZON` and a record from before it must come first. Records
/// before the position are skipped. When the check fails, the read that
/// shows it carries a [`RetentionGap`]: records were lost. When
/// GetShardIterator rejects the sequence number as expired, the reader
/// falls back to `TRIM_HORIZON` and the same check decides, so a rejection
/// of a position that is in fact still there changes nothing.
///
/// [`ResumeCheck`]: crate::read::resume_check::ResumeCheck
#[derive(Debug)]
pub struct ShardReader {
    kinesis: Kinesis,
    position: ReadPosition,
    iterator: Option<String>,
    limit: i32,
}

impl ShardReader {
    /// A reader of `shard_id` from `start`, asking for up to `limit` records a
    /// call.
    pub fn new(
        kinesis: Kinesis,
        shard_id: impl Into<String>,
        start: StartingPosition,
        limit: i32,
    ) -> Self {
        Self::at(kinesis, ReadPosition::new(shard_id, start), limit)
    }

    /// A reader that goes on from `position` (another reader's), asking for
    /// up to `limit` records a call.
    pub fn at(kinesis: Kinesis, position: ReadPosition, limit: i32) -> Self {
        Self {
            kinesis,
            position,
            iterator: None,
            limit,
        }
    }

    /// Checks a start time against the stream's retention (see
    /// [`ReadPosition::with_stream_retention`]; the daemon's readers are
    /// built on such a position).
    #[cfg(test)]
    pub fn with_stream_retention(mut self, retention: Option<Duration>) -> Self {
        self.position = self.position.with_stream_retention(retention);
        self
    }

    /// A fresh GetShardIterator at the reading position, whose first
    /// records are checked; falls back to `TRIM_HORIZON` when the
    /// position's sequence number is rejected as expired from the shard.
    async fn fresh_iterator(&mut self) -> Result<String, KinesisError> {
        let kinesis = &self.kinesis;
        let shard_id = self.position.shard_id().to_owned();
        self.position
            .open_fresh(|position| {
                let shard_id = shard_id.clone();
                async move { kinesis.get_shard_iterator(&shard_id, &position).await }
            })
            .await
    }

    /// The reading position, to go on from by another reader.
    pub fn into_position(self) -> ReadPosition {
        self.position
    }

    /// Where the next fresh iterator starts: after the last record
    /// returned, or the starting position when none was.
    pub fn position(&self) -> StartingPosition {
        self.position.next()
    }

    /// Forgets the iterator; the next read gets a fresh one.
    pub fn reset_iterator(&mut self) {
        self.iterator = None;
    }

    /// One GetRecords call (plus GetShardIterator when needed).
    ///
    /// # Errors
    /// [`KinesisError`]; on `ExpiredIterator` and `NotFound` the iterator is
    /// already reset.
    pub async fn read(&mut self) -> Result<ReadBatch, KinesisError> {
        let iterator = match self.iterator.take() {
            Some(iterator) => iterator,
            None => self.fresh_iterator().await?,
        };
        let output = match self.kinesis.get_records(&iterator, self.limit).await {
            Ok(output) => output,
            // A new iterator next time: GetShardIterator tells whether the
            // shard is gone.
            Err(err @ (KinesisError::ExpiredIterator | KinesisError::NotFound(_))) => {
                return Err(err);
            }
            Err(err) => {
                // Keep the iterator: it is still valid for retries within
                // five minutes; past that, Kinesis says it expired.
                self.iterator = Some(iterator);
                return Err(err);
            }
        };
        self.iterator = output.next_shard_iterator.clone();
        let mut batch = ReadBatch {
            millis_behind_latest: output.millis_behind_latest(),
            shard_end: output.next_shard_iterator().is_none(),
            records: Vec::new(),
            bytes: 0,
            child_shards: child_shards(&output),
            retention_gap: None,
        };
        self.position.deliver(output.records, &mut batch);
        Ok(batch)
    }
}

/// The `ChildShards` of a GetRecords response (a shard at `SHARD_END` after
/// a split or merge), parents sorted.
fn child_shards(output: &GetRecordsOutput) -> Vec<ShardInfo> {
    output
        .child_shards()
        .iter()
        .map(|child| {
            let mut parent_shard_ids = child.parent_shards().to_vec();
            parent_shard_ids.sort();
            ShardInfo {
                shard_id: child.shard_id().to_owned(),
                parent_shard_ids,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;

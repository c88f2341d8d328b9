//! [`ShardReader`]: one shard's records, in order, through GetShardIterator
//! and GetRecords.

use std::time::Duration;

use aws_sdk_kinesis::operation::get_records::GetRecordsOutput;
use chrono::Utc;
use sequence_range::SequenceNumber;
use tracing::{error, info, warn};

use crate::aws::{Kinesis, KinesisError, ShardInfo, StartingPosition};
use crate::read::record::ShardRecord;
use crate::read::resume_check::{ResumeCheck, Verdict};
use crate::read::retention::RetentionGap;

/// What one GetRecords call returned.
#[derive(Debug, Default)]
pub struct ReadBatch {
    /// Records in sequence order (KPL aggregates unpacked).
    pub records: Vec<ShardRecord>,
    /// `MillisBehindLatest`: how far the shard's newest record is ahead of
    /// the last one returned; 0 when caught up.
    pub millis_behind_latest: Option<i64>,
    /// No `NextShardIterator`: the shard is closed and fully read (`SHARD_END`).
    pub shard_end: bool,
    /// Data bytes in the response.
    pub bytes: u64,
    /// `ChildShards` of a shard at `SHARD_END` (after a split or merge).
    pub child_shards: Vec<ShardInfo>,
    /// Set on the read that found the position expired (see
    /// [`ResumeCheck`]): records between it and the first record of this
    /// read (or the shard's end) were trimmed unread.
    pub retention_gap: Option<RetentionGap>,
}

impl ReadBatch {
    /// Whether the shard is caught up: `MillisBehindLatest` is 0. An empty
    /// response alone is not: "it might take multiple calls to get to a
    /// portion of the shard that contains records" (GetRecords API
    /// reference), so a shard behind the tip is read on at the busy rate.
    /// Only a server that sends no `MillisBehindLatest` falls back to "no
    /// records returned".
    pub fn is_caught_up(&self) -> bool {
        match self.millis_behind_latest {
            Some(behind) => behind == 0,
            None => self.records.is_empty(),
        }
    }
}

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
#[derive(Debug)]
pub struct ShardReader {
    kinesis: Kinesis,
    shard_id: String,
    start: StartingPosition,
    iterator: Option<String>,
    last_sequence_number: Option<SequenceNumber>,
    limit: i32,
    /// The stream's retention, against which a start time is checked.
    stream_retention: Option<Duration>,
    /// The check of the fresh iterator, until a record or the shard's end
    /// settles it.
    check: Option<ResumeCheck>,
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
        Self {
            kinesis,
            shard_id: shard_id.into(),
            start,
            iterator: None,
            last_sequence_number: None,
            limit,
            stream_retention: None,
            check: None,
        }
    }

    /// Checks a start time (`AT_TIMESTAMP`) against the stream's retention
    /// (DescribeStreamSummary `RetentionPeriodHours`; `None`: unknown, and a
    /// start time is read unchecked).
    pub fn with_stream_retention(mut self, retention: Option<Duration>) -> Self {
        self.stream_retention = retention;
        self
    }

    /// A fresh GetShardIterator for `position`, with the check of what it
    /// returns; falls back to `TRIM_HORIZON` when the position's sequence
    /// number is rejected as expired from the shard.
    async fn iterator_at(&mut self, position: &StartingPosition) -> Result<String, KinesisError> {
        let (request, mut check) =
            ResumeCheck::plan(&self.shard_id, position, self.stream_retention, Utc::now());
        if matches!(position, StartingPosition::AtTimestamp(_)) && check.is_some() {
            info!(
                shard_id = %self.shard_id,
                position = ?position,
                "the start time is past the stream's retention; reading from TRIM_HORIZON to see whether records after it expired"
            );
        }
        let iterator = match self
            .kinesis
            .get_shard_iterator(&self.shard_id, &request)
            .await
        {
            Err(KinesisError::ExpiredPosition(source)) => {
                let Some(check) = check.as_mut() else {
                    return Err(KinesisError::ExpiredPosition(source));
                };
                warn!(
                    shard_id = %self.shard_id,
                    position = ?position,
                    error = %source,
                    "the position to read from has expired from the stream; reading from TRIM_HORIZON"
                );
                check.rejected();
                self.kinesis
                    .get_shard_iterator(&self.shard_id, &StartingPosition::TrimHorizon)
                    .await?
            }
            other => other?,
        };
        self.check = check;
        Ok(iterator)
    }

    /// Where the next fresh iterator starts: after the last record
    /// returned, or the starting position when none was.
    pub fn position(&self) -> StartingPosition {
        match &self.last_sequence_number {
            Some(last) => StartingPosition::AfterSequenceNumber(last.clone()),
            None => self.start.clone(),
        }
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
            None => self.iterator_at(&self.position()).await?,
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
            records: Vec::with_capacity(output.records.len()),
            bytes: 0,
            child_shards: child_shards(&output),
            retention_gap: None,
        };
        for record in output.records {
            let bytes = record.data().as_ref().len() as u64;
            let record = match ShardRecord::from_kinesis(&self.shard_id, record) {
                Ok(record) => record,
                // Kinesis never returns such a record; if a server did, it
                // could not be placed in any range.
                Err(err) => {
                    error!(shard_id = %self.shard_id, error = %err, "skipping record with invalid sequence number");
                    continue;
                }
            };
            if !self.passes_check(&record, &mut batch) {
                continue;
            }
            batch.bytes += bytes;
            self.last_sequence_number = Some(record.sequence_number.clone());
            batch.records.push(record);
        }
        // Caught up or at the end with the check still open: nothing at or
        // past the position is left in the shard.
        if (batch.is_caught_up() || batch.shard_end)
            && let Some(check) = self.check.take()
        {
            batch.retention_gap = check.exhausted();
        }
        Ok(batch)
    }

    /// Applies the fresh iterator's check, if still open, to `record`:
    /// whether the record is returned; a gap it shows goes into `batch`.
    fn passes_check(&mut self, record: &ShardRecord, batch: &mut ReadBatch) -> bool {
        let Some(check) = &mut self.check else {
            return true;
        };
        match check.on_record(record) {
            // Archived already, or before the start: the position asked
            // for is past it.
            Verdict::Earlier => false,
            Verdict::Done { deliver, gap } => {
                self.check = None;
                batch.retention_gap = gap;
                deliver
            }
        }
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

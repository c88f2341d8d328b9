//! [`ReadPosition`]: where one shard's reading stands — the position it
//! started at, the last record delivered, and the check of a fresh
//! position ([`ResumeCheck`]) until a record settles it. The polling reader
//! and the fan-out reader share it, so both hand the shard task the same
//! records from the same position, checked the same way.

use std::time::Duration;

use aws_sdk_kinesis::types::Record;
use chrono::Utc;
use sequence_range::SequenceNumber;
use tracing::{error, info, warn};

use crate::aws::{KinesisError, StartingPosition};
use crate::read::batch::ReadBatch;
use crate::read::record::ShardRecord;
use crate::read::resume_check::{ResumeCheck, Verdict};

/// One shard's reading position.
#[derive(Debug, Clone)]
pub struct ReadPosition {
    shard_id: String,
    start: StartingPosition,
    last_sequence_number: Option<SequenceNumber>,
    /// The stream's retention, against which a start time is checked.
    stream_retention: Option<Duration>,
    /// The check of the fresh position, until a record or the shard's end
    /// settles it.
    check: Option<ResumeCheck>,
}

impl ReadPosition {
    /// Reading `shard_id` from `start`, nothing delivered yet.
    pub fn new(shard_id: impl Into<String>, start: StartingPosition) -> Self {
        Self {
            shard_id: shard_id.into(),
            start,
            last_sequence_number: None,
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

    /// The shard.
    pub fn shard_id(&self) -> &str {
        &self.shard_id
    }

    /// Where a fresh read starts: after the last record delivered, or the
    /// starting position when none was.
    pub fn next(&self) -> StartingPosition {
        match &self.last_sequence_number {
            Some(last) => StartingPosition::AfterSequenceNumber(last.clone()),
            None => self.start.clone(),
        }
    }

    /// A fresh read (a new shard iterator or subscription) at
    /// [`next`](Self::next): the position to ask Kinesis for, whose first
    /// records are then checked (see [`ResumeCheck::plan`]).
    fn plan_fresh(&mut self) -> StartingPosition {
        let position = self.next();
        let (request, check) =
            ResumeCheck::plan(&self.shard_id, &position, self.stream_retention, Utc::now());
        if matches!(position, StartingPosition::AtTimestamp(_)) && check.is_some() {
            info!(
                shard_id = %self.shard_id,
                position = ?position,
                "the start time is past the stream's retention; reading from TRIM_HORIZON to see whether records after it expired"
            );
        }
        self.check = check;
        request
    }

    /// A fresh read at a position Kinesis gave as still held (a
    /// subscription's continuation): nothing to check.
    pub fn plan_unchecked(&mut self) {
        self.check = None;
    }

    /// Opens a fresh read (a shard iterator, a subscription) with `open` at
    /// the position [`plan_fresh`](Self::plan_fresh) gives. When Kinesis
    /// rejects that position as expired from the shard and it is one the
    /// check covers, opens at `TRIM_HORIZON` instead, the check deciding
    /// what was lost; a rejection of a position that is in fact still there
    /// then changes nothing.
    ///
    /// # Errors
    /// What `open` returns; [`KinesisError::ExpiredPosition`] for a
    /// position the check does not cover.
    pub async fn open_fresh<T, F, Fut>(&mut self, open: F) -> Result<T, KinesisError>
    where
        F: Fn(StartingPosition) -> Fut,
        Fut: Future<Output = Result<T, KinesisError>>,
    {
        let request = self.plan_fresh();
        match open(request.clone()).await {
            Err(KinesisError::ExpiredPosition(source)) => {
                let Some(check) = &mut self.check else {
                    return Err(KinesisError::ExpiredPosition(source));
                };
                check.rejected();
                warn!(
                    shard_id = %self.shard_id,
                    position = ?request,
                    error = %source,
                    "the position to read from has expired from the stream; reading from TRIM_HORIZON"
                );
                open(StartingPosition::TrimHorizon).await
            }
            other => other,
        }
    }

    /// Moves `records` (in sequence order, as Kinesis returned them) into
    /// `batch`, skipping those before the position and recording a gap the
    /// open check finds.
    pub fn deliver(&mut self, records: Vec<Record>, batch: &mut ReadBatch) {
        batch.records.reserve(records.len());
        for record in records {
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
            if !self.passes_check(&record, batch) {
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
    }

    /// Applies the open check, if any, to `record`: whether the record is
    /// delivered; a gap it shows goes into `batch`.
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

//! [`ShardReader`]: one shard's records, in order, through GetShardIterator
//! and GetRecords.

use sequence_range::SequenceNumber;
use tracing::{error, info, warn};

use crate::aws::{Kinesis, KinesisError, ShardInfo, StartingPosition};
use crate::read::record::ShardRecord;
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
    /// Set on the read that found the position expired: records between it
    /// and the first record of this read were trimmed unread.
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
/// iterator `AFTER_SEQUENCE_NUMBER` the last record returned (or at the
/// starting position when none was), so no record is skipped or repeated.
///
/// When GetShardIterator says that sequence number has expired from the
/// shard (retention), the reader falls back to `TRIM_HORIZON`. It still
/// returns only records past the position it asked for, so a rejection of a
/// position that is in fact still there changes nothing; and the read that
/// shows where the shard now starts carries a [`RetentionGap`] if that is
/// past the expired position (or the shard is empty): records were lost.
#[derive(Debug)]
pub struct ShardReader {
    kinesis: Kinesis,
    shard_id: String,
    start: StartingPosition,
    iterator: Option<String>,
    last_sequence_number: Option<SequenceNumber>,
    limit: i32,
    /// The expired position after a fall back to `TRIM_HORIZON`, until a
    /// read shows where the shard now starts.
    fallback: Option<Fallback>,
}

/// A position GetShardIterator rejected as expired.
#[derive(Debug)]
struct Fallback {
    position: StartingPosition,
    /// Records at or below this were asked not to be read again
    /// (`AFTER_SEQUENCE_NUMBER`), or records below it
    /// (`AT_SEQUENCE_NUMBER`).
    sequence_number: SequenceNumber,
    at: bool,
    /// A record before the position was read: the position was not trimmed.
    saw_earlier: bool,
}

impl Fallback {
    fn new(position: &StartingPosition) -> Option<Self> {
        let (sequence_number, at) = match position {
            StartingPosition::AtSequenceNumber(n) => (n.clone(), true),
            StartingPosition::AfterSequenceNumber(n) => (n.clone(), false),
            _ => return None,
        };
        Some(Self {
            position: position.clone(),
            sequence_number,
            at,
            saw_earlier: false,
        })
    }

    /// Whether records were lost, given the first record read at or past
    /// the position (`None`: the shard holds none). Trimming removes the
    /// oldest records first, so the position's records were trimmed exactly
    /// when nothing before it is left and — for `AT_SEQUENCE_NUMBER` — the
    /// first record left is not the position's own.
    fn lost(&self, first: Option<&SequenceNumber>) -> bool {
        let position_retained = self.at && first == Some(&self.sequence_number);
        !(self.saw_earlier || position_retained)
    }

    /// Whether a record read from `TRIM_HORIZON` comes before the position
    /// asked for.
    fn is_before(&self, n: &SequenceNumber) -> bool {
        if self.at {
            *n < self.sequence_number
        } else {
            *n <= self.sequence_number
        }
    }
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
            fallback: None,
        }
    }

    /// GetShardIterator at `position`, falling back to `TRIM_HORIZON` when
    /// the position's sequence number has expired from the shard.
    async fn iterator_at(&mut self, position: StartingPosition) -> Result<String, KinesisError> {
        match self
            .kinesis
            .get_shard_iterator(&self.shard_id, &position)
            .await
        {
            Err(KinesisError::ExpiredPosition(source)) => {
                let Some(fallback) = Fallback::new(&position) else {
                    return Err(KinesisError::ExpiredPosition(source));
                };
                warn!(
                    shard_id = %self.shard_id,
                    position = ?position,
                    error = %source,
                    "the position to read from has expired from the stream; reading from TRIM_HORIZON"
                );
                self.fallback = Some(fallback);
                self.kinesis
                    .get_shard_iterator(&self.shard_id, &StartingPosition::TrimHorizon)
                    .await
            }
            other => other,
        }
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
            None => self.iterator_at(self.position()).await?,
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
        let millis_behind_latest = output.millis_behind_latest();
        let shard_end = output.next_shard_iterator().is_none();
        self.iterator = output.next_shard_iterator.clone();
        let child_shards = output
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
            .collect();
        let mut batch = ReadBatch {
            millis_behind_latest,
            shard_end,
            records: Vec::with_capacity(output.records.len()),
            bytes: 0,
            child_shards,
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
            if let Some(fallback) = &mut self.fallback {
                if fallback.is_before(&record.sequence_number) {
                    // Archived already: the position asked for is past it.
                    fallback.saw_earlier = true;
                    continue;
                }
                let lost = fallback.lost(Some(&record.sequence_number));
                let expired = fallback.position.clone();
                self.fallback = None;
                if lost {
                    batch.retention_gap = Some(RetentionGap {
                        shard_id: self.shard_id.clone(),
                        expired,
                        first_retained: Some((
                            record.sequence_number.clone(),
                            record.arrival_millis,
                        )),
                        shard_left_stream: false,
                    });
                } else {
                    info!(shard_id = %self.shard_id, "the position was still in the shard: nothing expired");
                }
            }
            batch.bytes += bytes;
            self.last_sequence_number = Some(record.sequence_number.clone());
            batch.records.push(record);
        }
        // Nothing left in the shard past the expired position: everything
        // after it was trimmed.
        if batch.records.is_empty()
            && (batch.is_caught_up() || batch.shard_end)
            && let Some(fallback) = self.fallback.take()
            && fallback.lost(None)
        {
            batch.retention_gap = Some(RetentionGap {
                shard_id: self.shard_id.clone(),
                expired: fallback.position,
                first_retained: None,
                shard_left_stream: false,
            });
        }
        Ok(batch)
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_kinesis::Client;
    use aws_sdk_kinesis::operation::get_records::{GetRecordsError, GetRecordsOutput};
    use aws_sdk_kinesis::operation::get_shard_iterator::GetShardIteratorOutput;
    use aws_sdk_kinesis::types::error::ExpiredIteratorException;
    use aws_sdk_kinesis::types::{Record, ShardIteratorType};
    use aws_smithy_mocks::{RuleMode, mock, mock_client};
    use aws_smithy_types::error::ErrorMetadata;
    use aws_smithy_types::{Blob, DateTime};

    use super::*;
    use crate::config::StreamRef;

    fn record(sequence_number: &str) -> Record {
        Record::builder()
            .sequence_number(sequence_number)
            .approximate_arrival_timestamp(DateTime::from_millis(1_000))
            .data(Blob::new(b"x".to_vec()))
            .partition_key("pk")
            .build()
            .unwrap()
    }

    #[tokio::test]
    async fn resumes_after_the_last_record_when_the_iterator_expires() {
        let first_iterator = mock!(Client::get_shard_iterator)
            .match_requests(|input| {
                input.shard_iterator_type() == Some(&ShardIteratorType::TrimHorizon)
            })
            .then_output(|| {
                GetShardIteratorOutput::builder()
                    .shard_iterator("it-1")
                    .build()
            });
        let read1 = mock!(Client::get_records)
            .match_requests(|input| input.shard_iterator() == Some("it-1"))
            .then_output(|| {
                GetRecordsOutput::builder()
                    .records(record("5"))
                    .records(record("9"))
                    .next_shard_iterator("it-2")
                    .millis_behind_latest(1_000)
                    .build()
                    .unwrap()
            });
        let expired = mock!(Client::get_records)
            .match_requests(|input| input.shard_iterator() == Some("it-2"))
            .then_error(|| {
                GetRecordsError::ExpiredIteratorException(
                    ExpiredIteratorException::builder()
                        .meta(
                            ErrorMetadata::builder()
                                .code("ExpiredIteratorException")
                                .build(),
                        )
                        .build(),
                )
            });
        let reacquire = mock!(Client::get_shard_iterator)
            .match_requests(|input| {
                input.shard_iterator_type() == Some(&ShardIteratorType::AfterSequenceNumber)
                    && input.starting_sequence_number() == Some("9")
            })
            .then_output(|| {
                GetShardIteratorOutput::builder()
                    .shard_iterator("it-3")
                    .build()
            });
        let read2 = mock!(Client::get_records)
            .match_requests(|input| input.shard_iterator() == Some("it-3"))
            .then_output(|| {
                GetRecordsOutput::builder()
                    .records(record("12"))
                    .millis_behind_latest(0)
                    .build()
                    .unwrap()
            });
        let client = mock_client!(
            aws_sdk_kinesis,
            RuleMode::Sequential,
            [&first_iterator, &read1, &expired, &reacquire, &read2]
        );
        let kinesis = Kinesis::new(client, StreamRef::Name("s".to_owned()));
        let mut reader = ShardReader::new(
            kinesis,
            "shardId-000000000000",
            StartingPosition::TrimHorizon,
            100,
        );

        let batch = reader.read().await.unwrap();
        assert_eq!(batch.records.len(), 2);
        assert!(!batch.shard_end);
        assert!(matches!(
            reader.read().await,
            Err(KinesisError::ExpiredIterator)
        ));
        let batch = reader.read().await.unwrap();
        assert_eq!(batch.records[0].sequence_number.as_str(), "12");
        assert!(batch.shard_end, "no NextShardIterator means SHARD_END");
        assert_eq!(batch.millis_behind_latest, Some(0));
        assert_eq!(reacquire.num_calls(), 1);
    }
}

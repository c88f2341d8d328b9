//! [`ShardRecord`]: one Kinesis record as shardsink handles it, and
//! [`UserRecordView`]: one user record of it as every output format sees it.

use aws_sdk_kinesis::types::Record;
use bytes::Bytes;
use sequence_range::{ParseSequenceNumberError, SequenceNumber};
use tracing::warn;

use crate::read::kpl::{self, UserRecord};

/// One user record — a plain Kinesis record, or one user record of a KPL
/// aggregate — with the metadata every format may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserRecordView<'a> {
    /// The shard the record was read from (Kinesis `ShardId`).
    pub shard_id: &'a str,
    /// The Kinesis record's sequence number: canonical decimal text, up to
    /// 128 digits (Kinesis API reference, `Record.SequenceNumber`).
    pub sequence_number: &'a str,
    /// The user record's position in its KPL aggregate; `None` for a record
    /// that is not a KPL aggregate.
    pub sub_sequence_number: Option<u64>,
    /// The (user) record's partition key.
    pub partition_key: &'a str,
    /// `ApproximateArrivalTimestamp`, milliseconds since the Unix epoch
    /// (UTC).
    pub arrival_millis: i64,
    /// The payload bytes.
    pub data: &'a [u8],
}

/// One Kinesis record: the unit of sequence ranges, checkpoints and batch
/// boundaries. A KPL aggregated record carries several user records, written
/// as separate lines with their `subSequenceNumber`; they are never split
/// across batches, so ranges and checkpoints stay whole Kinesis records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardRecord {
    /// The sequence number, parsed once here (it keeps Kinesis's text for
    /// output).
    pub sequence_number: SequenceNumber,
    /// `ApproximateArrivalTimestamp`, milliseconds since the Unix epoch.
    pub arrival_millis: i64,
    /// The record's partition key.
    pub partition_key: String,
    /// The record's data blob (for a KPL record, the whole aggregate).
    pub data: Bytes,
    /// The user records, when the data is a valid KPL aggregate.
    pub user_records: Option<Vec<UserRecord>>,
}

/// A record Kinesis returned that shardsink cannot place.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The sequence number is not a decimal number.
    #[error("record has an invalid sequence number")]
    SequenceNumber(#[from] ParseSequenceNumberError),
}

impl ShardRecord {
    /// Converts a GetRecords record, unpacking KPL aggregates. A record whose
    /// data starts with the KPL magic but does not decode is kept whole (and
    /// logged), as the KCL does. A record without an arrival timestamp (the
    /// API always sets one), or with one beyond ±292 million years (not a
    /// whole number of milliseconds in an `i64`), is placed at the epoch and
    /// logged.
    ///
    /// # Errors
    /// [`RecordError`] when the sequence number is not canonical decimal text.
    pub fn from_kinesis(shard_id: &str, record: Record) -> Result<Self, RecordError> {
        let Record {
            sequence_number,
            approximate_arrival_timestamp,
            data,
            partition_key,
            ..
        } = record;
        let sequence_number = SequenceNumber::try_from(sequence_number)?;
        let arrival_millis = match approximate_arrival_timestamp {
            Some(time) => match time.to_millis() {
                Ok(millis) => millis,
                Err(error) => {
                    warn!(
                        shard_id,
                        sequence_number = sequence_number.as_str(),
                        arrival = %time,
                        error = %error,
                        "record's arrival timestamp is out of range; placed at the epoch"
                    );
                    0
                }
            },
            None => {
                warn!(
                    shard_id,
                    sequence_number = sequence_number.as_str(),
                    "record has no arrival timestamp; placed at the epoch"
                );
                0
            }
        };
        let data = Bytes::from(data.into_inner());
        let user_records = match kpl::deaggregate(&data) {
            Ok(records) => records,
            Err(error) => {
                warn!(shard_id, sequence_number = sequence_number.as_str(), error = %error, "invalid kpl aggregate kept as one record");
                None
            }
        };
        Ok(Self {
            sequence_number,
            arrival_millis,
            partition_key: partition_key.unwrap_or_default(),
            data,
            user_records,
        })
    }

    /// The user records as every format sees them: the record itself, or
    /// each user record of its KPL aggregate.
    pub fn views<'a>(&'a self, shard_id: &'a str) -> impl Iterator<Item = UserRecordView<'a>> + 'a {
        let whole = self.user_records.is_none().then(|| UserRecordView {
            shard_id,
            sequence_number: self.sequence_number.as_str(),
            sub_sequence_number: None,
            partition_key: &self.partition_key,
            arrival_millis: self.arrival_millis,
            data: &self.data,
        });
        let users = self
            .user_records
            .iter()
            .flatten()
            .map(move |user| UserRecordView {
                shard_id,
                sequence_number: self.sequence_number.as_str(),
                sub_sequence_number: Some(user.sub_sequence_number),
                partition_key: &user.partition_key,
                arrival_millis: self.arrival_millis,
                data: &user.data,
            });
        whole.into_iter().chain(users)
    }

    /// How many lines the record becomes.
    pub fn user_record_count(&self) -> usize {
        self.user_records.as_ref().map_or(1, Vec::len)
    }
}

#[cfg(test)]
mod tests {
    use aws_smithy_types::{Blob, DateTime};

    use super::*;

    fn sdk_record(sequence_number: &str, data: Vec<u8>) -> Record {
        Record::builder()
            .sequence_number(sequence_number)
            .approximate_arrival_timestamp(DateTime::from_millis(1_763_702_823_123))
            .data(Blob::new(data))
            .partition_key("pk")
            .build()
            .unwrap()
    }

    #[test]
    fn converts_a_plain_record() {
        let record =
            ShardRecord::from_kinesis("shardId-0", sdk_record("42", b"hello".to_vec())).unwrap();
        assert_eq!(record.sequence_number.as_str(), "42");
        assert_eq!(record.arrival_millis, 1_763_702_823_123);
        assert_eq!(&record.data[..], b"hello");
        assert_eq!(record.user_record_count(), 1);
        let views: Vec<_> = record.views("shardId-0").collect();
        assert_eq!(views.len(), 1);
        assert_eq!(views[0].sub_sequence_number, None);
        assert_eq!(views[0].data, b"hello");
    }

    #[test]
    fn unpacks_kpl_aggregates() {
        let aggregate = kpl::aggregate(&[
            ("a".to_owned(), None, b"one".to_vec()),
            ("b".to_owned(), None, b"two".to_vec()),
        ]);
        let record = ShardRecord::from_kinesis("shardId-0", sdk_record("7", aggregate)).unwrap();
        assert_eq!(record.user_record_count(), 2);
        let views: Vec<_> = record.views("shardId-0").collect();
        assert_eq!(views.len(), 2);
        assert_eq!(
            (
                views[1].sub_sequence_number,
                views[1].partition_key,
                views[1].data
            ),
            (Some(1), "b", &b"two"[..])
        );
        assert_eq!(
            (views[0].shard_id, views[0].sequence_number),
            ("shardId-0", "7")
        );
    }

    #[test]
    fn an_arrival_out_of_the_millisecond_range_is_placed_at_the_epoch() {
        let mut record = sdk_record("42", b"x".to_vec());
        record.approximate_arrival_timestamp = Some(DateTime::from_secs(i64::MAX));
        let record = ShardRecord::from_kinesis("shardId-0", record).unwrap();
        assert_eq!(record.arrival_millis, 0);
    }

    #[test]
    fn rejects_non_decimal_sequence_numbers() {
        assert!(ShardRecord::from_kinesis("shardId-0", sdk_record("12ab", vec![])).is_err());
    }
}

//! Kinesis Data Streams calls: DescribeStreamSummary, ListShards,
//! GetShardIterator, GetRecords.

use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::operation::get_records::{GetRecordsError, GetRecordsOutput};
use aws_sdk_kinesis::types::{ShardIteratorType, StreamStatus};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use chrono::{DateTime, Utc};
use shard_lease::retry::is_retriable;

use super::BoxError;
use crate::config::StreamRef;

/// A Kinesis call that failed.
#[derive(Debug, thiserror::Error)]
pub enum KinesisError {
    /// The shard iterator is older than five minutes
    /// (`ExpiredIteratorException`): get a new one.
    #[error("shard iterator expired")]
    ExpiredIterator,
    /// Read throughput exceeded (`ProvisionedThroughputExceededException`:
    /// 5 GetRecords calls or 2 MiB a second per shard): back off.
    #[error("kinesis read throughput exceeded")]
    Throttled(#[source] BoxError),
    /// The stream or shard does not exist (`ResourceNotFoundException`).
    #[error("kinesis stream or shard not found")]
    NotFound(#[source] BoxError),
    /// Any other failure; `retriable` per [`is_retriable`].
    #[error("kinesis {operation} failed")]
    Other {
        /// The API operation.
        operation: &'static str,
        /// Whether a retry after a backoff may succeed.
        retriable: bool,
        /// The SDK error.
        #[source]
        source: BoxError,
    },
}

impl KinesisError {
    /// Whether a retry after a backoff may succeed.
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::ExpiredIterator | Self::Throttled(_) => true,
            Self::NotFound(_) => false,
            Self::Other { retriable, .. } => *retriable,
        }
    }

    fn from_sdk<E>(operation: &'static str, err: SdkError<E, HttpResponse>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let code = match &err {
            SdkError::ServiceError(context) => context.err().code().map(str::to_owned),
            _ => None,
        };
        match code.as_deref() {
            Some("ExpiredIteratorException") => Self::ExpiredIterator,
            Some("ProvisionedThroughputExceededException") => Self::Throttled(Box::new(err)),
            Some("ResourceNotFoundException") => Self::NotFound(Box::new(err)),
            _ => Self::Other {
                operation,
                retriable: is_retriable(&err),
                source: Box::new(err),
            },
        }
    }
}

/// Where a shard iterator starts (GetShardIterator `ShardIteratorType`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartingPosition {
    /// The oldest record in the shard.
    TrimHorizon,
    /// Just after the newest record.
    Latest,
    /// The first record at or after this time.
    AtTimestamp(DateTime<Utc>),
    /// The record with this sequence number.
    AtSequenceNumber(String),
    /// The record after this sequence number.
    AfterSequenceNumber(String),
}

/// A shard as ListShards describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardInfo {
    /// `ShardId`.
    pub shard_id: String,
    /// `ParentShardId` and `AdjacentParentShardId` (after a merge), sorted.
    pub parent_shard_ids: Vec<String>,
}

/// The stream, and the client to read it.
#[derive(Debug, Clone)]
pub struct Kinesis {
    client: Client,
    stream: StreamRef,
}

impl Kinesis {
    /// A handle on `stream`.
    pub fn new(client: Client, stream: StreamRef) -> Self {
        Self { client, stream }
    }

    /// The stream.
    pub fn stream(&self) -> &StreamRef {
        &self.stream
    }

    /// The stream's status ([DescribeStreamSummary]); used at start to fail
    /// early on a wrong stream name.
    ///
    /// [DescribeStreamSummary]: https://docs.aws.amazon.com/kinesis/latest/APIReference/API_DescribeStreamSummary.html
    ///
    /// # Errors
    /// [`KinesisError::NotFound`] when the stream does not exist.
    pub async fn describe_stream_summary(&self) -> Result<StreamStatus, KinesisError> {
        let output = self
            .client
            .describe_stream_summary()
            .set_stream_name(self.stream.stream_name())
            .set_stream_arn(self.stream.stream_arn())
            .send()
            .await
            .map_err(|err| KinesisError::from_sdk("DescribeStreamSummary", err))?;
        Ok(output
            .stream_description_summary()
            .map(|summary| summary.stream_status().clone())
            .unwrap_or(StreamStatus::Active))
    }

    /// Every shard of the stream, open and closed, still within retention
    /// ([ListShards], all pages).
    ///
    /// [ListShards]: https://docs.aws.amazon.com/kinesis/latest/APIReference/API_ListShards.html
    ///
    /// # Errors
    /// [`KinesisError`] from any page.
    pub async fn list_shards(&self) -> Result<Vec<ShardInfo>, KinesisError> {
        let mut shards = Vec::new();
        let mut next_token: Option<String> = None;
        loop {
            // With NextToken the stream must not be named (ListShards API).
            let request = match &next_token {
                Some(token) => self.client.list_shards().next_token(token),
                None => self
                    .client
                    .list_shards()
                    .set_stream_name(self.stream.stream_name())
                    .set_stream_arn(self.stream.stream_arn()),
            };
            let page = request
                .send()
                .await
                .map_err(|err| KinesisError::from_sdk("ListShards", err))?;
            for shard in page.shards() {
                let mut parent_shard_ids: Vec<String> = shard
                    .parent_shard_id()
                    .into_iter()
                    .chain(shard.adjacent_parent_shard_id())
                    .map(str::to_owned)
                    .collect();
                parent_shard_ids.sort();
                shards.push(ShardInfo {
                    shard_id: shard.shard_id().to_owned(),
                    parent_shard_ids,
                });
            }
            match page.next_token() {
                Some(token) if !token.is_empty() => next_token = Some(token.to_owned()),
                _ => break,
            }
        }
        shards.sort_by(|a, b| a.shard_id.cmp(&b.shard_id));
        Ok(shards)
    }

    /// A shard iterator at `position` ([GetShardIterator]); valid for five
    /// minutes.
    ///
    /// [GetShardIterator]: https://docs.aws.amazon.com/kinesis/latest/APIReference/API_GetShardIterator.html
    ///
    /// # Errors
    /// [`KinesisError`]; `Throttled` past 5 calls a second per shard.
    pub async fn get_shard_iterator(
        &self,
        shard_id: &str,
        position: &StartingPosition,
    ) -> Result<String, KinesisError> {
        let request = self
            .client
            .get_shard_iterator()
            .set_stream_name(self.stream.stream_name())
            .set_stream_arn(self.stream.stream_arn())
            .shard_id(shard_id);
        let request = match position {
            StartingPosition::TrimHorizon => {
                request.shard_iterator_type(ShardIteratorType::TrimHorizon)
            }
            StartingPosition::Latest => request.shard_iterator_type(ShardIteratorType::Latest),
            StartingPosition::AtTimestamp(time) => request
                .shard_iterator_type(ShardIteratorType::AtTimestamp)
                .timestamp(aws_smithy_types::DateTime::from_millis(
                    time.timestamp_millis(),
                )),
            StartingPosition::AtSequenceNumber(sequence_number) => request
                .shard_iterator_type(ShardIteratorType::AtSequenceNumber)
                .starting_sequence_number(sequence_number),
            StartingPosition::AfterSequenceNumber(sequence_number) => request
                .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                .starting_sequence_number(sequence_number),
        };
        let output = request
            .send()
            .await
            .map_err(|err| KinesisError::from_sdk("GetShardIterator", err))?;
        output.shard_iterator.ok_or_else(|| KinesisError::Other {
            operation: "GetShardIterator",
            retriable: true,
            source: "response has no ShardIterator".into(),
        })
    }

    /// Up to `limit` records from `shard_iterator` ([GetRecords]). No
    /// `NextShardIterator` in the output means `SHARD_END`: the shard is
    /// closed and every record has been returned.
    ///
    /// [GetRecords]: https://docs.aws.amazon.com/kinesis/latest/APIReference/API_GetRecords.html
    ///
    /// # Errors
    /// [`KinesisError::ExpiredIterator`], [`KinesisError::Throttled`], others.
    pub async fn get_records(
        &self,
        shard_iterator: &str,
        limit: i32,
    ) -> Result<GetRecordsOutput, KinesisError> {
        self.client
            .get_records()
            .shard_iterator(shard_iterator)
            .set_stream_arn(self.stream.stream_arn())
            .limit(limit)
            .send()
            .await
            .map_err(|err: SdkError<GetRecordsError, HttpResponse>| {
                KinesisError::from_sdk("GetRecords", err)
            })
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_kinesis::operation::list_shards::ListShardsOutput;
    use aws_sdk_kinesis::types::Shard;
    use aws_smithy_mocks::{RuleMode, mock, mock_client};

    use super::*;

    fn shard(id: &str, parent: Option<&str>, adjacent: Option<&str>) -> Shard {
        let mut shard = Shard::builder().shard_id(id);
        if let Some(parent) = parent {
            shard = shard.parent_shard_id(parent);
        }
        if let Some(adjacent) = adjacent {
            shard = shard.adjacent_parent_shard_id(adjacent);
        }
        shard.build().unwrap()
    }

    #[tokio::test]
    async fn list_shards_reads_every_page_without_naming_the_stream_after_the_first() {
        let first = mock!(Client::list_shards)
            .match_requests(|input| {
                input.stream_name() == Some("orders") && input.next_token().is_none()
            })
            .then_output(|| {
                ListShardsOutput::builder()
                    .shards(shard("shardId-000000000000", None, None))
                    .next_token("page-2")
                    .build()
            });
        // The ListShards API refuses StreamName together with NextToken.
        let second = mock!(Client::list_shards)
            .match_requests(|input| {
                input.stream_name().is_none() && input.next_token() == Some("page-2")
            })
            .then_output(|| {
                ListShardsOutput::builder()
                    .shards(shard(
                        "shardId-000000000002",
                        Some("shardId-000000000001"),
                        Some("shardId-000000000000"),
                    ))
                    .build()
            });
        let client = mock_client!(aws_sdk_kinesis, RuleMode::Sequential, [&first, &second]);
        let kinesis = Kinesis::new(client, StreamRef::Name("orders".to_owned()));
        let shards = kinesis.list_shards().await.unwrap();
        assert_eq!(
            shards,
            vec![
                ShardInfo {
                    shard_id: "shardId-000000000000".to_owned(),
                    parent_shard_ids: vec![],
                },
                ShardInfo {
                    shard_id: "shardId-000000000002".to_owned(),
                    parent_shard_ids: vec![
                        "shardId-000000000000".to_owned(),
                        "shardId-000000000001".to_owned()
                    ],
                },
            ]
        );
        assert_eq!((first.num_calls(), second.num_calls()), (1, 1));
    }
}

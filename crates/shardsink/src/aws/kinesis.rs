//! Kinesis Data Streams calls: DescribeStreamSummary, ListShards,
//! GetShardIterator, GetRecords; and how every Kinesis call's failures,
//! the enhanced fan-out calls' included (`fan_out`), are classified.

use std::time::Duration;

use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::operation::describe_stream_consumer::DescribeStreamConsumerError;
use aws_sdk_kinesis::operation::describe_stream_summary::DescribeStreamSummaryError;
use aws_sdk_kinesis::operation::get_records::{GetRecordsError, GetRecordsOutput};
use aws_sdk_kinesis::operation::get_shard_iterator::GetShardIteratorError;
use aws_sdk_kinesis::operation::list_shards::ListShardsError;
use aws_sdk_kinesis::operation::register_stream_consumer::RegisterStreamConsumerError;
use aws_sdk_kinesis::operation::subscribe_to_shard::SubscribeToShardError;
use aws_sdk_kinesis::types::error::SubscribeToShardEventStreamError;
use aws_sdk_kinesis::types::{Shard, ShardIteratorType, StreamStatus};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use chrono::{DateTime, Utc};
use sequence_range::SequenceNumber;
use shard_lease::retry::is_transport_or_server_failure;

use super::BoxError;

/// The stream as the Kinesis API takes it: `StreamName` or `StreamARN`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamRef {
    /// A stream name.
    Name(String),
    /// A stream ARN, with the name parsed out of it.
    Arn {
        /// The full ARN.
        arn: String,
        /// The stream name (after `stream/`).
        name: String,
    },
}

impl StreamRef {
    /// The stream's name.
    pub fn name(&self) -> &str {
        match self {
            Self::Name(name) | Self::Arn { name, .. } => name,
        }
    }

    /// The `StreamName` parameter (None when the ARN is used).
    pub fn stream_name(&self) -> Option<String> {
        match self {
            Self::Name(name) => Some(name.clone()),
            Self::Arn { .. } => None,
        }
    }

    /// The `StreamARN` parameter (None when the name is used).
    pub fn stream_arn(&self) -> Option<String> {
        match self {
            Self::Name(_) => None,
            Self::Arn { arn, .. } => Some(arn.clone()),
        }
    }
}

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
    /// The sequence number GetShardIterator was to start at (or after) is
    /// no longer in the shard: the stream's retention trimmed it. See
    /// [`is_expired_position`].
    #[error("the starting sequence number is no longer in the shard")]
    ExpiredPosition(#[source] BoxError),
    /// The resource is busy (`ResourceInUseException`): the stream consumer
    /// is being created or deleted, or the shard already has an open
    /// SubscribeToShard subscription for this consumer (a previous owner's,
    /// after a lease move). Retry after a backoff.
    #[error("kinesis resource in use")]
    ResourceInUse(#[source] BoxError),
    /// The stream consumer did not become `ACTIVE` within the wait
    /// (DescribeStreamConsumer kept answering another `ConsumerStatus`).
    #[error("stream consumer {consumer_name} not ACTIVE after {waited:?} (last status {status})")]
    ConsumerNotActive {
        /// The consumer's name.
        consumer_name: String,
        /// The last `ConsumerStatus` seen (`CREATING`, `DELETING`).
        status: String,
        /// How long the wait lasted.
        waited: Duration,
    },
    /// Any other failure; `retriable` for internal failures and transport or
    /// server failures (timeouts, 5xx, 429).
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
            Self::ExpiredIterator
            | Self::Throttled(_)
            | Self::ResourceInUse(_)
            | Self::ConsumerNotActive { .. } => true,
            Self::NotFound(_) | Self::ExpiredPosition(_) => false,
            Self::Other { retriable, .. } => *retriable,
        }
    }

    pub(super) fn from_sdk<E>(operation: &'static str, err: SdkError<E, HttpResponse>) -> Self
    where
        E: Modeled + ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let kind = match err.as_service_error().map(Modeled::kind) {
            // Kinesis' common errors (API reference, "Common Errors") are not
            // modeled per operation: `ThrottlingException` comes with 400.
            Some(Kind::Other) if err.code() == Some("ThrottlingException") => Some(Kind::Throttled),
            kind => kind,
        };
        match kind {
            Some(Kind::ExpiredIterator) => Self::ExpiredIterator,
            Some(Kind::Throttled) => Self::Throttled(Box::new(err)),
            Some(Kind::NotFound) => Self::NotFound(Box::new(err)),
            Some(Kind::ResourceInUse) => Self::ResourceInUse(Box::new(err)),
            Some(Kind::InvalidArgument)
                if is_expired_position_of(
                    operation,
                    err.as_service_error()
                        .and_then(ProvideErrorMetadata::message),
                ) =>
            {
                Self::ExpiredPosition(Box::new(err))
            }
            Some(Kind::InternalFailure) => Self::Other {
                operation,
                retriable: true,
                source: Box::new(err),
            },
            _ => Self::Other {
                operation,
                retriable: is_transport_or_server_failure(&err),
                source: Box::new(err),
            },
        }
    }
}

/// What a Kinesis operation's modeled error is, for [`KinesisError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// `ExpiredIteratorException`.
    ExpiredIterator,
    /// `ProvisionedThroughputExceededException`, `KMSThrottlingException`,
    /// `LimitExceededException`.
    Throttled,
    /// `ResourceNotFoundException`.
    NotFound,
    /// `ResourceInUseException`.
    ResourceInUse,
    /// `InvalidArgumentException`.
    InvalidArgument,
    /// `InternalFailureException`.
    InternalFailure,
    /// Anything else (access denied, KMS, …).
    Other,
}

/// The errors each Kinesis operation models (Kinesis API reference, each
/// operation's "Errors"), matched as typed variants.
pub(super) trait Modeled {
    /// What this error is; [`Kind::Other`] for the variants not listed.
    fn kind(&self) -> Kind;
}

shard_lease::modeled_kinds! {
    Modeled => Kind;
    GetRecordsError => {
        ExpiredIteratorException => ExpiredIterator,
        ProvisionedThroughputExceededException => Throttled,
        KmsThrottlingException => Throttled,
        ResourceNotFoundException => NotFound,
        InvalidArgumentException => InvalidArgument,
        InternalFailureException => InternalFailure,
    }
    GetShardIteratorError => {
        ProvisionedThroughputExceededException => Throttled,
        ResourceNotFoundException => NotFound,
        InvalidArgumentException => InvalidArgument,
        InternalFailureException => InternalFailure,
    }
    ListShardsError, DescribeStreamSummaryError, DescribeStreamConsumerError => {
        LimitExceededException => Throttled,
        ResourceNotFoundException => NotFound,
        InvalidArgumentException => InvalidArgument,
    }
    RegisterStreamConsumerError => {
        LimitExceededException => Throttled,
        ResourceInUseException => ResourceInUse,
        ResourceNotFoundException => NotFound,
        InvalidArgumentException => InvalidArgument,
    }
    SubscribeToShardError => {
        LimitExceededException => Throttled,
        ResourceInUseException => ResourceInUse,
        ResourceNotFoundException => NotFound,
        InvalidArgumentException => InvalidArgument,
        InternalFailureException => InternalFailure,
        KmsThrottlingException => Throttled,
    }
    SubscribeToShardEventStreamError => {
        ResourceInUseException => ResourceInUse,
        ResourceNotFoundException => NotFound,
        InternalFailureException => InternalFailure,
        KmsThrottlingException => Throttled,
    }
}

/// Whether the message of a GetShardIterator `InvalidArgumentException` says
/// its `StartingSequenceNumber` has expired from the shard (trimmed by
/// retention).
///
/// Kinesis answers `AT_SEQUENCE_NUMBER` / `AFTER_SEQUENCE_NUMBER` for a
/// trimmed sequence number with `InvalidArgumentException` and a message
/// about the `StartingSequenceNumber` (GetShardIterator API reference,
/// Errors; consumers fall back to `TRIM_HORIZON` on it, e.g.
/// harlow/kinesis-consumer #175). The same code and field also come with
/// messages about a sequence number that belongs to another shard ("It
/// encodes shardId-…") or another stream ("did not come from this stream"),
/// and about a malformed request ("Must either specify …"): those are bugs or
/// bad state, not expiry, and stay errors. This is one sign of a trimmed
/// position, not the only one — Kinesis may also grant an iterator that
/// starts past it — so the reader decides a gap from the records it reads
/// either way ([`crate::read::resume_check`]): after a fall back to
/// `TRIM_HORIZON`, a position that is in fact still there is no gap.
pub fn is_expired_position(message: Option<&str>) -> bool {
    let message = message.unwrap_or_default().to_ascii_lowercase();
    let about_starting_number =
        message.contains("startingsequencenumber") || message.contains("starting sequence number");
    let other_cause = [
        "encodes",
        "did not come from this stream",
        "must either specify",
    ]
    .iter()
    .any(|cause| message.contains(cause));
    about_starting_number && !other_cause
}

/// Whether an `InvalidArgumentException` of `operation` rejects its
/// starting sequence number as expired: GetShardIterator's as
/// [`is_expired_position`] says; SubscribeToShard's whenever it is about
/// the sequence number of its `StartingPosition`, whose wording the API
/// reference does not give. Taking a rejection for an expiry is safe: the
/// reader then reads from `TRIM_HORIZON` and its check finds nothing lost
/// when the position is still there.
fn is_expired_position_of(operation: &str, message: Option<&str>) -> bool {
    match operation {
        "GetShardIterator" => is_expired_position(message),
        "SubscribeToShard" => {
            let message = message.unwrap_or_default().to_ascii_lowercase();
            message.contains("sequencenumber") || message.contains("sequence number")
        }
        _ => false,
    }
}

/// The stream, as DescribeStreamSummary describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSummary {
    /// `StreamStatus`.
    pub status: StreamStatus,
    /// `RetentionPeriodHours`: how long records stay in the stream (24 h to
    /// 365 days).
    pub retention: Duration,
    /// `StreamARN`, which the enhanced fan-out consumer calls name the
    /// stream by; empty from a server that leaves the required field out.
    pub arn: String,
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
    AtSequenceNumber(SequenceNumber),
    /// The record after this sequence number.
    AfterSequenceNumber(SequenceNumber),
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
    pub(super) client: Client,
    stream: StreamRef,
}

impl Kinesis {
    /// A handle on `stream`.
    pub fn new(client: Client, stream: StreamRef) -> Self {
        Self { client, stream }
    }

    /// The stream's status and retention period ([DescribeStreamSummary]);
    /// used at start to fail early on a wrong stream name, and then to know
    /// how long unread records survive.
    ///
    /// [DescribeStreamSummary]: https://docs.aws.amazon.com/kinesis/latest/APIReference/API_DescribeStreamSummary.html
    ///
    /// # Errors
    /// [`KinesisError::NotFound`] when the stream does not exist.
    pub async fn describe_stream_summary(&self) -> Result<StreamSummary, KinesisError> {
        let output = self
            .client
            .describe_stream_summary()
            .set_stream_name(self.stream.stream_name())
            .set_stream_arn(self.stream.stream_arn())
            .send()
            .await
            .map_err(|err| KinesisError::from_sdk("DescribeStreamSummary", err))?;
        // The field is required; a server that leaves it out gets the
        // smallest retention Kinesis allows (24 h).
        let summary = output.stream_description_summary();
        let hours = summary.map_or(24, |summary| summary.retention_period_hours());
        Ok(StreamSummary {
            status: summary.map_or(StreamStatus::Active, |summary| {
                summary.stream_status().clone()
            }),
            retention: Duration::from_secs(u64::try_from(hours.max(1)).unwrap_or(24) * 3_600),
            arn: summary.map_or_else(String::new, |summary| summary.stream_arn().to_owned()),
        })
    }

    /// Every shard of the stream, open and closed, still within retention
    /// ([ListShards], all pages).
    ///
    /// [ListShards]: https://docs.aws.amazon.com/kinesis/latest/APIReference/API_ListShards.html
    ///
    /// # Errors
    /// [`KinesisError`] from any page.
    pub async fn list_shards(&self) -> Result<Vec<ShardInfo>, KinesisError> {
        let mut shards: Vec<ShardInfo> = self
            .list_shard_pages()
            .await?
            .iter()
            .map(|shard| {
                let mut parent_shard_ids: Vec<String> = shard
                    .parent_shard_id()
                    .into_iter()
                    .chain(shard.adjacent_parent_shard_id())
                    .map(str::to_owned)
                    .collect();
                parent_shard_ids.sort();
                ShardInfo {
                    shard_id: shard.shard_id().to_owned(),
                    parent_shard_ids,
                }
            })
            .collect();
        shards.sort_by(|a, b| a.shard_id.cmp(&b.shard_id));
        Ok(shards)
    }

    /// Whether ListShards shows `shard_id` closed: its
    /// `SequenceNumberRange` has an `EndingSequenceNumber` (a split or
    /// merge closed it; it takes no more records). `None` when the shard
    /// is not listed.
    ///
    /// # Errors
    /// [`KinesisError`] from any page.
    pub async fn is_shard_closed(&self, shard_id: &str) -> Result<Option<bool>, KinesisError> {
        Ok(self
            .list_shard_pages()
            .await?
            .iter()
            .find(|shard| shard.shard_id() == shard_id)
            .map(|shard| {
                shard
                    .sequence_number_range()
                    .and_then(|range| range.ending_sequence_number())
                    .is_some_and(|ending| !ending.is_empty())
            }))
    }

    /// The shards of every ListShards page, in the order listed.
    async fn list_shard_pages(&self) -> Result<Vec<Shard>, KinesisError> {
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
            next_token = page
                .next_token()
                .filter(|token| !token.is_empty())
                .map(str::to_owned);
            shards.extend(page.shards.unwrap_or_default());
            if next_token.is_none() {
                return Ok(shards);
            }
        }
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
                .starting_sequence_number(sequence_number.as_str()),
            StartingPosition::AfterSequenceNumber(sequence_number) => request
                .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                .starting_sequence_number(sequence_number.as_str()),
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

    #[test]
    fn only_an_expired_starting_sequence_number_is_an_expired_position() {
        for expired in [
            "StartingSequenceNumber 49590338271490256608559692538361571095921575989136588898 used in GetShardIterator on shard shardId-000000000000 in stream orders under account 123456789012 is invalid because it is past the trim horizon.",
            "The starting sequence number has expired.",
        ] {
            assert!(is_expired_position(Some(expired)), "{expired}");
        }
        for other in [
            "Invalid StartingSequenceNumber. It encodes shardId-000000000007, while it was used in a call to shardId-000000000000",
            "StartingSequenceNumber 495… used in GetShardIterator on shard shardId-000000000001 in stream orders under account 123 is invalid because it did not come from this stream.",
            "Must either specify (1) AT_SEQUENCE_NUMBER or AFTER_SEQUENCE_NUMBER and StartingSequenceNumber or (2) TRIM_HORIZON or LATEST and no StartingSequenceNumber.",
            "1 validation error detected: Value 'x' at 'shardId' failed to satisfy constraint",
        ] {
            assert!(!is_expired_position(Some(other)), "{other}");
        }
        assert!(!is_expired_position(None));
    }

    fn kinesis_answering(status: u16, error_type: &str, message: &str) -> Kinesis {
        let body = format!(r#"{{"__type":"{error_type}","message":"{message}"}}"#);
        let records = mock!(Client::get_records)
            .then_http_response(move || crate::fake_aws::http(status, &body));
        let body = format!(r#"{{"__type":"{error_type}","message":"{message}"}}"#);
        let iterator = mock!(Client::get_shard_iterator)
            .then_http_response(move || crate::fake_aws::http(status, &body));
        let client = mock_client!(
            aws_sdk_kinesis,
            RuleMode::MatchAny,
            [&records, &iterator],
            |c| c.retry_config(aws_smithy_types::retry::RetryConfig::disabled())
        );
        Kinesis::new(client, StreamRef::Name("orders".to_owned()))
    }

    #[tokio::test]
    async fn modeled_errors_become_typed_kinesis_errors() {
        let expired = kinesis_answering(400, "ExpiredIteratorException", "Iterator expired");
        let err = expired.get_records("it", 10).await.unwrap_err();
        assert!(matches!(err, KinesisError::ExpiredIterator), "{err:?}");

        let throttled = kinesis_answering(
            400,
            "ProvisionedThroughputExceededException",
            "Rate exceeded for shard",
        );
        let err = throttled.get_records("it", 10).await.unwrap_err();
        assert!(matches!(err, KinesisError::Throttled(_)), "{err:?}");
        assert!(err.is_retriable());

        // A common error, not modeled by the operation.
        let common = kinesis_answering(400, "ThrottlingException", "Rate exceeded");
        let err = common.get_records("it", 10).await.unwrap_err();
        assert!(matches!(err, KinesisError::Throttled(_)), "{err:?}");

        let internal = kinesis_answering(400, "InternalFailureException", "oops");
        let err = internal.get_records("it", 10).await.unwrap_err();
        assert!(err.is_retriable(), "{err:?}");

        let denied = kinesis_answering(400, "AccessDeniedException", "no");
        let err = denied.get_records("it", 10).await.unwrap_err();
        assert!(!err.is_retriable(), "{err:?}");

        let unavailable = kinesis_answering(503, "ServiceUnavailable", "busy");
        let err = unavailable.get_records("it", 10).await.unwrap_err();
        assert!(err.is_retriable(), "{err:?}");
    }

    #[tokio::test]
    async fn only_get_shard_iterator_reports_an_expired_position() {
        let position = StartingPosition::AfterSequenceNumber(
            SequenceNumber::parse("49590338271490256608559692538361571095921575989136588898")
                .unwrap(),
        );
        let trimmed = kinesis_answering(
            400,
            "InvalidArgumentException",
            "StartingSequenceNumber 4959 used in GetShardIterator on shard shardId-000000000000 in stream orders under account 1 is invalid because it is past the trim horizon.",
        );
        let err = trimmed
            .get_shard_iterator("shardId-000000000000", &position)
            .await
            .unwrap_err();
        assert!(matches!(err, KinesisError::ExpiredPosition(_)), "{err:?}");
        assert!(!err.is_retriable());
        let err = trimmed.get_records("it", 10).await.unwrap_err();
        assert!(
            matches!(
                err,
                KinesisError::Other {
                    retriable: false,
                    ..
                }
            ),
            "{err:?}"
        );
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

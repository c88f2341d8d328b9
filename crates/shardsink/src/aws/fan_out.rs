//! Kinesis enhanced fan-out calls: DescribeStreamConsumer,
//! RegisterStreamConsumer, SubscribeToShard.
//!
//! An enhanced fan-out consumer has its own 2 MB/s per shard, pushed over
//! HTTP/2 ([Developing Enhanced Fan-Out Consumers with the Kinesis Data
//! Streams API]). [`ensure_consumer`] makes sure the consumer exists and is
//! `ACTIVE`; [`subscribe_to_shard`] opens one subscription (at most five
//! minutes) and [`Subscription::next`] yields its events one at a time.
//! Failures are classified as every other Kinesis call's ([`KinesisError`]).
//!
//! [Developing Enhanced Fan-Out Consumers with the Kinesis Data Streams API]: https://docs.aws.amazon.com/streams/latest/dev/building-enhanced-consumers-api.html

use std::time::Duration;

use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::primitives::event_stream::EventReceiver;
use aws_sdk_kinesis::types::error::SubscribeToShardEventStreamError;
use aws_sdk_kinesis::types::{
    ConsumerStatus, Record, ShardIteratorType, SubscribeToShardEvent, SubscribeToShardEventStream,
};
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::event_stream::RawMessage;

use super::kinesis::{Kind, Kinesis, KinesisError, Modeled};
use super::{ShardInfo, StartingPosition};

impl Kinesis {
    /// The ARN of the `ACTIVE` enhanced fan-out consumer `consumer_name`
    /// of the stream `stream_arn`, registered if missing (see
    /// [`ensure_consumer`]).
    ///
    /// # Errors
    /// As [`ensure_consumer`].
    pub async fn ensure_consumer(
        &self,
        stream_arn: &str,
        consumer_name: &str,
        wait: ConsumerWait,
    ) -> Result<String, KinesisError> {
        ensure_consumer(&self.client, stream_arn, consumer_name, wait).await
    }

    /// A SubscribeToShard subscription of `consumer_arn` to `shard_id` from
    /// `position` (see [`subscribe_to_shard`]).
    ///
    /// # Errors
    /// As [`subscribe_to_shard`].
    pub async fn subscribe_to_shard(
        &self,
        consumer_arn: &str,
        shard_id: &str,
        position: &StartingPosition,
    ) -> Result<Subscription, KinesisError> {
        subscribe_to_shard(&self.client, consumer_arn, shard_id, position).await
    }
}

/// How long [`ensure_consumer`] waits for a consumer to become `ACTIVE`:
/// DescribeStreamConsumer every `interval`, at most `attempts` times after
/// the first look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerWait {
    /// The pause between two DescribeStreamConsumer calls.
    pub interval: Duration,
    /// How many times to look again before giving up.
    pub attempts: u32,
}

impl Default for ConsumerWait {
    /// Every second for a minute: a consumer is usually `ACTIVE` within a
    /// few seconds of RegisterStreamConsumer.
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(1),
            attempts: 60,
        }
    }
}

/// The ARN of the stream consumer `consumer_name` of the stream
/// `stream_arn`, once it is `ACTIVE`; registered first if it does not exist.
///
/// [DescribeStreamConsumer] by `StreamARN` and `ConsumerName`; on
/// `ResourceNotFoundException`, [RegisterStreamConsumer]. A
/// `ResourceInUseException` from RegisterStreamConsumer means another worker
/// registered the same name at the same moment, which is as good. Then
/// DescribeStreamConsumer until the status is `ACTIVE` (`CREATING` →
/// `ACTIVE`), as `wait` says. Idempotent: workers starting together all get
/// the same ARN. The consumer is never deregistered here.
///
/// [DescribeStreamConsumer]: https://docs.aws.amazon.com/kinesis/latest/APIReference/API_DescribeStreamConsumer.html
/// [RegisterStreamConsumer]: https://docs.aws.amazon.com/kinesis/latest/APIReference/API_RegisterStreamConsumer.html
///
/// # Errors
/// [`KinesisError::ConsumerNotActive`] when the wait ends first;
/// [`KinesisError::NotFound`] when the stream does not exist; any other
/// [`KinesisError`] of the two calls (`Throttled` past their limits: 20
/// DescribeStreamConsumer calls a second per stream, 5
/// RegisterStreamConsumer calls a second per account).
pub async fn ensure_consumer(
    client: &Client,
    stream_arn: &str,
    consumer_name: &str,
    wait: ConsumerWait,
) -> Result<String, KinesisError> {
    let mut status = match describe_consumer(client, stream_arn, consumer_name).await {
        Ok(found) => found,
        Err(KinesisError::NotFound(_)) => {
            register_consumer(client, stream_arn, consumer_name).await?;
            describe_consumer(client, stream_arn, consumer_name).await?
        }
        Err(err) => return Err(err),
    };
    for _ in 0..wait.attempts {
        if status.status == ConsumerStatus::Active {
            break;
        }
        tokio::time::sleep(wait.interval).await;
        status = describe_consumer(client, stream_arn, consumer_name).await?;
    }
    if status.status == ConsumerStatus::Active {
        Ok(status.arn)
    } else {
        Err(KinesisError::ConsumerNotActive {
            consumer_name: consumer_name.to_owned(),
            status: status.status.as_str().to_owned(),
            waited: wait.interval * wait.attempts,
        })
    }
}

/// A consumer's ARN and status, as DescribeStreamConsumer gives them.
struct ConsumerState {
    arn: String,
    status: ConsumerStatus,
}

/// [DescribeStreamConsumer] by `StreamARN` and `ConsumerName`.
///
/// [DescribeStreamConsumer]: https://docs.aws.amazon.com/kinesis/latest/APIReference/API_DescribeStreamConsumer.html
async fn describe_consumer(
    client: &Client,
    stream_arn: &str,
    consumer_name: &str,
) -> Result<ConsumerState, KinesisError> {
    let output = client
        .describe_stream_consumer()
        .stream_arn(stream_arn)
        .consumer_name(consumer_name)
        .send()
        .await
        .map_err(|err| KinesisError::from_sdk("DescribeStreamConsumer", err))?;
    let description = output
        .consumer_description()
        .ok_or_else(|| KinesisError::Other {
            operation: "DescribeStreamConsumer",
            retriable: true,
            source: "response has no ConsumerDescription".into(),
        })?;
    Ok(ConsumerState {
        arn: description.consumer_arn().to_owned(),
        status: description.consumer_status().clone(),
    })
}

/// [RegisterStreamConsumer]; `Ok` also when another caller registered the
/// same name first (`ResourceInUseException`).
///
/// [RegisterStreamConsumer]: https://docs.aws.amazon.com/kinesis/latest/APIReference/API_RegisterStreamConsumer.html
async fn register_consumer(
    client: &Client,
    stream_arn: &str,
    consumer_name: &str,
) -> Result<(), KinesisError> {
    let registered = client
        .register_stream_consumer()
        .stream_arn(stream_arn)
        .consumer_name(consumer_name)
        .send()
        .await
        .map_err(|err| KinesisError::from_sdk("RegisterStreamConsumer", err));
    match registered {
        Ok(_) | Err(KinesisError::ResourceInUse(_)) => Ok(()),
        Err(err) => Err(err),
    }
}

/// One event of a subscription, as [`Subscription::next`] yields it.
#[derive(Debug)]
pub enum FanOutEvent {
    /// A `SubscribeToShardEvent`: Kinesis sends one about every second,
    /// with or without records.
    Event {
        /// `Records`, in sequence-number order (the same type GetRecords
        /// returns).
        records: Vec<Record>,
        /// `ContinuationSequenceNumber`: where to resubscribe
        /// (`AFTER_SEQUENCE_NUMBER`) once the subscription ends. `None`
        /// when the shard is closed and every record has been sent (the
        /// service sends null, which the SDK reads as an empty string).
        continuation: Option<String>,
        /// `MillisBehindLatest`: how far the event is behind the shard's tip.
        millis_behind: i64,
        /// `ChildShards`: with no `continuation`, the shard ended and these
        /// are its children (parents sorted, as [`ShardInfo`] from
        /// ListShards).
        child_shards: Vec<ShardInfo>,
    },
    /// The body ended cleanly: the subscription expired (after five
    /// minutes). Resubscribe from the last `continuation`.
    End,
    /// The subscription failed: an exception event
    /// (`ResourceInUseException`, …), a cut-off or malformed body. Nothing
    /// more comes from it.
    Error(KinesisError),
}

/// An open SubscribeToShard subscription.
#[derive(Debug)]
pub struct Subscription {
    receiver: EventReceiver<SubscribeToShardEventStream, SubscribeToShardEventStreamError>,
    done: bool,
}

impl Subscription {
    /// The next event; [`FanOutEvent::End`] after the body ends, and after an
    /// error, on every later call.
    pub async fn next(&mut self) -> FanOutEvent {
        if self.done {
            return FanOutEvent::End;
        }
        loop {
            match self.receiver.recv().await {
                Ok(Some(SubscribeToShardEventStream::SubscribeToShardEvent(event))) => {
                    return event_of(event);
                }
                // A kind of event this SDK does not know: skip it.
                Ok(Some(_)) => {}
                Ok(None) => {
                    self.done = true;
                    return FanOutEvent::End;
                }
                Err(err) => {
                    self.done = true;
                    return FanOutEvent::Error(stream_error(err));
                }
            }
        }
    }
}

/// Opens a subscription to `shard_id` for the consumer `consumer_arn`,
/// starting at `position` ([SubscribeToShard]). The subscription lasts at
/// most five minutes; a consumer may subscribe to a shard once a second,
/// and only one subscription per consumer and shard may be open.
///
/// [SubscribeToShard]: https://docs.aws.amazon.com/kinesis/latest/APIReference/API_SubscribeToShard.html
///
/// # Errors
/// [`KinesisError::ResourceInUse`] while another subscription of the
/// consumer to the shard is open; `Throttled` on more than one call a
/// second (`LimitExceededException`); others.
pub async fn subscribe_to_shard(
    client: &Client,
    consumer_arn: &str,
    shard_id: &str,
    position: &StartingPosition,
) -> Result<Subscription, KinesisError> {
    let output = client
        .subscribe_to_shard()
        .consumer_arn(consumer_arn)
        .shard_id(shard_id)
        .starting_position(starting_position(position)?)
        .send()
        .await
        .map_err(|err| KinesisError::from_sdk("SubscribeToShard", err))?;
    Ok(Subscription {
        receiver: output.event_stream,
        done: false,
    })
}

/// The SDK's `StartingPosition` for `position`.
fn starting_position(
    position: &StartingPosition,
) -> Result<aws_sdk_kinesis::types::StartingPosition, KinesisError> {
    let builder = aws_sdk_kinesis::types::StartingPosition::builder();
    let builder = match position {
        StartingPosition::TrimHorizon => builder.r#type(ShardIteratorType::TrimHorizon),
        StartingPosition::Latest => builder.r#type(ShardIteratorType::Latest),
        StartingPosition::AtTimestamp(time) => {
            builder.r#type(ShardIteratorType::AtTimestamp).timestamp(
                aws_smithy_types::DateTime::from_millis(time.timestamp_millis()),
            )
        }
        StartingPosition::AtSequenceNumber(sequence_number) => builder
            .r#type(ShardIteratorType::AtSequenceNumber)
            .sequence_number(sequence_number.as_str()),
        StartingPosition::AfterSequenceNumber(sequence_number) => builder
            .r#type(ShardIteratorType::AfterSequenceNumber)
            .sequence_number(sequence_number.as_str()),
    };
    // `Type`, the one required field, is set in every arm above: the
    // builder cannot fail.
    builder.build().map_err(|err| KinesisError::Other {
        operation: "SubscribeToShard",
        retriable: false,
        source: Box::new(err),
    })
}

/// The daemon's view of one `SubscribeToShardEvent`.
fn event_of(event: SubscribeToShardEvent) -> FanOutEvent {
    let child_shards = event
        .child_shards
        .unwrap_or_default()
        .into_iter()
        .map(|child| {
            let mut parent_shard_ids = child.parent_shards;
            parent_shard_ids.sort();
            ShardInfo {
                shard_id: child.shard_id,
                parent_shard_ids,
            }
        })
        .collect();
    let continuation = Some(event.continuation_sequence_number).filter(|next| !next.is_empty());
    FanOutEvent::Event {
        records: event.records,
        continuation,
        millis_behind: event.millis_behind_latest,
        child_shards,
    }
}

/// A failed subscription as a [`KinesisError`]: the exception events by
/// their type, as the other Kinesis calls' errors; a cut-off body or a
/// transport failure is retriable.
fn stream_error(err: SdkError<SubscribeToShardEventStreamError, RawMessage>) -> KinesisError {
    let operation = "SubscribeToShard";
    match err.as_service_error().map(Modeled::kind) {
        Some(Kind::ResourceInUse) => KinesisError::ResourceInUse(Box::new(err)),
        Some(Kind::NotFound) => KinesisError::NotFound(Box::new(err)),
        Some(Kind::Throttled) => KinesisError::Throttled(Box::new(err)),
        Some(Kind::InternalFailure) => KinesisError::Other {
            operation,
            retriable: true,
            source: Box::new(err),
        },
        Some(_) => KinesisError::Other {
            operation,
            retriable: false,
            source: Box::new(err),
        },
        None => KinesisError::Other {
            operation,
            retriable: matches!(
                err,
                SdkError::ResponseError(_)
                    | SdkError::DispatchFailure(_)
                    | SdkError::TimeoutError(_)
            ),
            source: Box::new(err),
        },
    }
}

#[cfg(test)]
mod tests;

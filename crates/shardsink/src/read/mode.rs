//! [`ReadMode`]: how shards are read — polled with GetRecords, or pushed by
//! an enhanced fan-out subscription (SubscribeToShard) —, [`ReadSource`],
//! the mode with what it needs at run time, and [`Reader`], one shard's
//! reader in either mode.

use std::sync::Arc;
use std::time::Duration;

use clap::ValueEnum;
use tokio::time::Instant;

use crate::aws::{Kinesis, KinesisError, StartingPosition};
use crate::ops::metrics::Metrics;
use crate::read::batch::ReadBatch;
use crate::read::fan_out::FanOutReader;
use crate::read::position::ReadPosition;
use crate::read::reader::{MIN_READ_INTERVAL, ShardReader};

/// How a shard's records are read (`--read-mode`).
///
/// Both give the shard task the same records in the same order; only the
/// throughput and the latency differ ([Kinesis Data Streams consumers]).
///
/// [Kinesis Data Streams consumers]: https://docs.aws.amazon.com/streams/latest/dev/amazon-kinesis-consumers.html
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReadMode {
    /// GetShardIterator and GetRecords: each shard's 5 reads a second and
    /// 2 MB/s are shared with every other polling consumer of the stream.
    Polling,
    /// Enhanced fan-out: SubscribeToShard through a registered stream
    /// consumer, with the consumer's own 2 MB/s per shard, pushed over
    /// HTTP/2.
    #[value(name = "fan-out")]
    FanOut,
}

impl ReadMode {
    /// The setting's value, as `--read-mode` takes it and the
    /// `shardsink_read_mode{mode}` label shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Polling => "polling",
            Self::FanOut => "fan-out",
        }
    }
}

/// The read mode as the shard tasks use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadSource {
    /// GetRecords.
    Polling,
    /// SubscribeToShard for this stream consumer.
    FanOut {
        /// The `ACTIVE` consumer's ARN (DescribeStreamConsumer
        /// `ConsumerARN`).
        consumer_arn: String,
    },
}

impl ReadSource {
    /// The mode this source reads in.
    pub fn mode(&self) -> ReadMode {
        match self {
            Self::Polling => ReadMode::Polling,
            Self::FanOut { .. } => ReadMode::FanOut,
        }
    }
}

/// One shard's reader, in the process's read mode.
#[derive(Debug)]
pub enum Reader {
    /// GetShardIterator and GetRecords.
    Polling(Box<ShardReader>),
    /// SubscribeToShard.
    FanOut(Box<FanOutReader>),
}

/// What a [`Reader`] is built from.
#[derive(Debug)]
pub struct ReaderOptions<'a> {
    /// The read mode, with the consumer's ARN for fan-out.
    pub source: &'a ReadSource,
    /// The stream.
    pub kinesis: Kinesis,
    /// GetRecords `Limit`.
    pub limit: i32,
    /// The stream's retention (see [`ReadPosition::with_stream_retention`]).
    pub stream_retention: Option<Duration>,
    /// Where subscriptions and events are counted.
    pub metrics: Arc<Metrics>,
}

impl Reader {
    /// A reader of `shard_id` from `start`.
    pub fn new(options: ReaderOptions<'_>, shard_id: &str, start: StartingPosition) -> Self {
        let position =
            ReadPosition::new(shard_id, start).with_stream_retention(options.stream_retention);
        match options.source {
            ReadSource::Polling => Self::Polling(Box::new(ShardReader::at(
                options.kinesis,
                position,
                options.limit,
            ))),
            ReadSource::FanOut { consumer_arn } => Self::FanOut(Box::new(FanOutReader::new(
                options.kinesis,
                consumer_arn.as_str(),
                position,
                options.limit,
                options.metrics,
            ))),
        }
    }

    /// The next records: one GetRecords response, or one
    /// SubscribeToShardEvent.
    ///
    /// # Errors
    /// [`KinesisError`] of the read.
    pub async fn read(&mut self) -> Result<ReadBatch, KinesisError> {
        match self {
            Self::Polling(reader) => reader.read().await,
            Self::FanOut(reader) => reader.read().await,
        }
    }

    /// Where a fresh read would start: after the last record delivered, or
    /// the starting position when none was.
    pub fn position(&self) -> StartingPosition {
        match self {
            Self::Polling(reader) => reader.position(),
            Self::FanOut(reader) => reader.position(),
        }
    }

    /// Forgets an expired shard iterator (`ExpiredIteratorException`); the
    /// next read gets a fresh one.
    pub fn reset_iterator(&mut self) {
        match self {
            Self::Polling(reader) => reader.reset_iterator(),
            Self::FanOut(reader) => reader.reset_iterator(),
        }
    }

    /// How long to wait after a read that `started` and was `caught_up`
    /// before the next: a caught-up polled shard waits `idle`, a busy one
    /// keeps to Kinesis' 5 GetRecords calls a second; a subscription
    /// pushes its events, so fan-out asks for the next at once.
    pub fn pause(&self, caught_up: bool, idle: Duration, started: Instant) -> Duration {
        let polled = match self {
            Self::Polling(_) => true,
            Self::FanOut(reader) => reader.is_polling(),
        };
        match (polled, caught_up) {
            (false, _) => Duration::ZERO,
            (true, true) => idle,
            (true, false) => MIN_READ_INTERVAL.saturating_sub(started.elapsed()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_values_are_the_documented_names() {
        for mode in ReadMode::value_variants() {
            let value = mode.to_possible_value().unwrap();
            assert_eq!(value.get_name(), mode.as_str());
        }
        assert_eq!(
            ReadMode::from_str("fan-out", true),
            Ok(ReadMode::FanOut),
            "the value with a hyphen"
        );
    }
}

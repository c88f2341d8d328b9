//! Thin wrappers around the AWS calls shardsink makes, one file per service,
//! one documented function per call. The rest of the daemon calls these, not
//! the SDK builders.
//!
//! - `clients`: [`AwsClients`], built from the standard AWS configuration;
//! - `attempts`: an interceptor that counts each attempt of the worker
//!   loop's long steps as progress, for liveness;
//! - `kinesis`: [`Kinesis`] — DescribeStreamSummary, ListShards,
//!   GetShardIterator, GetRecords;
//! - `fan_out`: enhanced fan-out — the stream consumer made sure of
//!   (DescribeStreamConsumer, RegisterStreamConsumer) and SubscribeToShard,
//!   its events one at a time;
//! - `s3`: [`ObjectStore`] — HeadBucket, conditional PutObject, GetObject,
//!   ListObjectsV2;
//! - `table_storage`: [`table_storage::S3TableStorage`] — Iceberg's file I/O
//!   (`iceberg::io::Storage`) over the same S3 client: HeadObject, ranged
//!   GetObject, conditional PutObject, DeleteObject(s), ListObjectsV2;
//! - `retry`: the one retry loop every call goes through, and how each
//!   service's failures are classified; `backoff`: its delays;
//! - `tracked_read`: a GetObject body read on a blocking thread that tells
//!   a failed download from bytes that do not decode;
//! - `recorder` (test builds): every AWS operation a run makes, for the IAM
//!   policy test.

pub(crate) mod attempts;
pub(crate) mod backoff;
pub(crate) mod clients;
pub(crate) mod fan_out;
pub(crate) mod kinesis;
#[cfg(feature = "failpoints")]
pub(crate) mod recorder;
pub(crate) mod retry;
pub(crate) mod s3;
pub mod table_storage;
pub(crate) mod tracked_read;

/// An SDK error, boxed.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

pub(crate) use clients::AwsClients;
pub(crate) use kinesis::{Kinesis, KinesisError, ShardInfo, StartingPosition};
pub(crate) use s3::{ObjectStore, PutOutcome, S3Error};

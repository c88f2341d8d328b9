//! Thin wrappers around the AWS calls shardsink makes, one file per service,
//! one documented function per call. The rest of the daemon calls these, not
//! the SDK builders.

pub mod clients;
pub mod kinesis;
#[cfg(feature = "failpoints")]
pub mod recorder;
pub mod s3;

/// An SDK error, boxed.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

pub use clients::AwsClients;
pub use kinesis::{Kinesis, KinesisError, ShardInfo, StartingPosition, StreamSummary};
pub use s3::{ObjectStore, PutOutcome, S3Error};

//! The label sets and label values of [`Metrics`](super::Metrics).

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};

/// How a batch's PUT ended.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Outcome {
    /// The object was created.
    #[allow(non_camel_case_types)]
    created,
    /// The object existed (412) with the same records: a replay.
    #[allow(non_camel_case_types)]
    already_present,
}

/// Label set with `outcome`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// The outcome.
    pub outcome: Outcome,
}

/// Label set with `result`: `ok` or `failed`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// `ok` or `failed`.
    pub result: &'static str,
}

/// Why a call was retried.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum RetryCause {
    /// Kinesis `ProvisionedThroughputExceededException` and other throttling.
    kinesis_throttled,
    /// Kinesis `ExpiredIteratorException`.
    kinesis_expired_iterator,
    /// Kinesis `ResourceInUseException`: most often a SubscribeToShard
    /// while another subscription of the consumer to the shard is still
    /// open (a previous owner's, after a lease move or a crash).
    kinesis_resource_in_use,
    /// Any other Kinesis failure.
    kinesis_error,
    /// S3 `SlowDown` / 503.
    s3_throttled,
    /// Any other S3 failure.
    s3_error,
    /// DynamoDB throttling.
    dynamodb_throttled,
    /// Any other DynamoDB failure.
    dynamodb_error,
    /// DynamoDB event table throttling
    /// (`ProvisionedThroughputExceededException`, `ThrottlingException`,
    /// `RequestLimitExceeded`, BatchGetItem keys left unprocessed). This
    /// label and the next keep the table's older name, as its metrics do.
    event_manifest_throttled,
    /// Any other DynamoDB event table failure.
    event_manifest_error,
    /// An Iceberg catalog or table file that could not be read or
    /// committed.
    iceberg_error,
}

/// Label set with `cause`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CauseLabel {
    /// The cause.
    pub cause: RetryCause,
}

/// Label set with `reason`: why a format rejected a record (the format's
/// reject reason as text).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// `not_utf8`, `not_json_object`, `metadata_field_present` or
    /// `schema_mismatch`.
    pub reason: &'static str,
}

/// Label set with `outcome`: what event deduplication decided of a user
/// record (the rule's outcome as text).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventOutcomeLabel {
    /// `unique`, `duplicate`, `expired`, `id_reused` or `id_missing`.
    pub outcome: &'static str,
}

/// Label set with `operation`: a DynamoDB API operation, e.g. `PutItem`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabel {
    /// The operation's name in the DynamoDB API reference.
    pub operation: &'static str,
}

/// Label set with `shard_id`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShardLabel {
    /// The shard id.
    pub shard_id: String,
}

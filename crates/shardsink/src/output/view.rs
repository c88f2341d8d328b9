//! [`UserRecordView`]: one user record as every output format sees it, and
//! [`Rejection`]: why a format cannot represent one.

use std::fmt;

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

/// Why a record could not be written in the chosen format. Such a record is
/// written to the error prefix instead, never dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The reason, a metric label.
    pub reason: RejectReason,
    /// A sentence for the error line's `errorMessage`.
    pub message: String,
}

impl Rejection {
    /// A rejection for `reason` with a message.
    pub fn new(reason: RejectReason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

/// The reasons a format rejects a record; the `reason` label of
/// `shardsink_records_errored_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// The payload is not UTF-8 (`json`, or `parquet` with a schema).
    NotUtf8,
    /// The payload is not one JSON object (`json`, or `parquet` with a
    /// schema).
    NotJsonObject,
    /// The payload already has the metadata field (`json`).
    MetadataFieldPresent,
    /// A payload field does not have its schema column's type (`parquet`
    /// with a schema).
    SchemaMismatch,
}

impl RejectReason {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotUtf8 => "not_utf8",
            Self::NotJsonObject => "not_json_object",
            Self::MetadataFieldPresent => "metadata_field_present",
            Self::SchemaMismatch => "schema_mismatch",
        }
    }
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

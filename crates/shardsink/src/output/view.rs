//! [`Rejection`]: why a format cannot represent a user record
//! ([`UserRecordView`](crate::read::record::UserRecordView)).

use std::fmt;

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
    /// The payload is not UTF-8 (`json`, `parquet` with a schema, Iceberg
    /// data files with payload columns or a `string` `data` column).
    NotUtf8,
    /// The payload is not one JSON object (`json`, `parquet` with a
    /// schema, Iceberg data files with payload columns).
    NotJsonObject,
    /// The payload already has the metadata field (`json`).
    MetadataFieldPresent,
    /// A payload field does not have its schema column's type (`parquet`
    /// with a schema), or does not fit its Iceberg table column (wrong type,
    /// or missing from a required column).
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

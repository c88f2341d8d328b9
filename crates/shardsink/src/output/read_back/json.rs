//! `json` lines read back — the lines `output::format::json` writes: the
//! payload (one JSON object) with the record's metadata under one member.
//!
//! - [`metadata_of`]: the metadata member of a line, found by its shape
//!   (whatever `--metadata-field` named it), for `verify`.

/// The metadata member of a `json` line: the envelope's fields without
/// `data` (`output/format/envelope.rs`, `encode_metadata`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Metadata {
    /// `shardId`.
    pub shard_id: String,
    /// `sequenceNumber`, as written (not validated).
    pub sequence_number: String,
    /// `subSequenceNumber`: KPL user records only.
    pub sub_sequence_number: Option<u64>,
    /// `partitionKey`.
    pub partition_key: String,
    /// `approximateArrivalTimestamp`: RFC 3339 text, as written.
    pub approximate_arrival_timestamp: String,
}

/// The first member of `line` (a `json` line read as an object) that is a
/// metadata object; `None` for a line written without metadata.
pub fn metadata_of(line: &serde_json::Map<String, serde_json::Value>) -> Option<Metadata> {
    line.values()
        .find_map(|value| serde_json::from_value::<Metadata>(value.clone()).ok())
}

//! Reading what shardsink wrote: list every object in the bucket, HEAD and
//! GET it, decode it by the format its metadata names (envelope and json
//! lines, raw payloads, Parquet rows; error objects' lines), and parse the
//! key in the settings' layout — so tests can check every record against
//! its key (shard, range, time bucket) and against what was produced.
//!
//! Nothing here panics or stops on bad output: every deviation from the
//! contract's format becomes an [`ArchiveProblem`] that the checker reports.
//!
//! One concept per module, everything re-exported here:
//! - [`objects`](mod@objects): plain S3 calls (list, get, put, delete);
//! - [`versions`](mod@versions): object versions and overwritten keys;
//! - [`layout`](mod@layout): key layouts (plain or hive, minute or hour)
//!   and the layout record;
//! - [`key`](mod@key): building and strictly parsing object keys;
//! - [`compression`](mod@compression): the three encodings by extension;
//! - [`format`](mod@format): the format an object's metadata names;
//! - [`timestamp`](mod@timestamp): the arrival timestamp's text form;
//! - [`line`](mod@line): one JSON line, encoded and parsed field by field;
//! - [`decode`](mod@decode): a JSON Lines object (envelope, error and
//!   duplicate lines) checked against its key, and the checks every format
//!   shares;
//! - [`decisions`](mod@decisions): a batch's decisions object (event
//!   deduplication);
//! - [`json`](mod@json), [`raw`](mod@raw), [`parquet`](mod@parquet): the
//!   other formats' objects; [`schema`](mod@schema): a Parquet schema file;
//! - [`snapshot`](mod@snapshot): the [`Archive`] a read returns;
//! - [`reader`](mod@reader): the [`ArchiveReader`] that builds it.

pub mod compression;
pub mod decisions;
pub mod decode;
pub mod format;
pub mod json;
pub mod key;
pub mod layout;
pub mod line;
pub mod objects;
pub mod parquet;
pub mod raw;
pub mod reader;
pub mod schema;
pub mod snapshot;
pub mod timestamp;
pub mod versions;

#[cfg(test)]
mod test_support;

pub use compression::Compression;
pub use decisions::{DecisionLine, DecisionsObject, Outcome};
pub use decode::decode_object;
pub use format::ObjectFormat;
pub use key::{DECISIONS_EXTENSION, ObjectKey, Shape};
pub use layout::{KeyLayout, KeyStyle, TimeBucket};
pub use line::{encode_duplicate_line, encode_line, encode_metadata};
pub use objects::{
    ListedObject, delete_object, get_object, head_object_metadata, list_objects, put_object,
    put_object_with_metadata,
};
pub use reader::{ArchiveReader, ReaderOptions, read_archive};
pub use schema::ParquetSchema;
pub use snapshot::{Archive, ArchiveProblem, ArchivedObject, ArchivedRecord, CopyRef, PayloadForm};
pub use timestamp::{format_timestamp, parse_timestamp, truncate_to_minute};
pub use versions::{ObjectVersion, list_object_versions, overwritten_keys};

//! Reading what shardsink wrote: list every object in the bucket, GET it,
//! decompress by extension, parse each JSON line strictly, and parse the key
//! — so tests can check every line against its key (shard, range, minute)
//! and every record against what was produced.
//!
//! Nothing here panics or stops on bad output: every deviation from the
//! contract's format becomes an [`ArchiveProblem`] that the checker reports.
//!
//! One concept per module, everything re-exported here:
//! - [`objects`](mod@objects): plain S3 calls (list, get, put, delete);
//! - [`versions`](mod@versions): object versions and overwritten keys;
//! - [`key`](mod@key): building and strictly parsing object keys;
//! - [`compression`](mod@compression): the three encodings by extension;
//! - [`timestamp`](mod@timestamp): the arrival timestamp's text form;
//! - [`line`](mod@line): one JSON line, encoded and parsed field by field;
//! - [`decode`](mod@decode): one object's body checked against its key;
//! - [`snapshot`](mod@snapshot): the [`Archive`] a read returns;
//! - [`reader`](mod@reader): the [`ArchiveReader`] that builds it.

pub mod compression;
pub mod decode;
pub mod key;
pub mod line;
pub mod objects;
pub mod reader;
pub mod snapshot;
pub mod timestamp;
pub mod versions;

#[cfg(test)]
mod test_support;

pub use compression::Compression;
pub use decode::decode_object;
pub use key::ObjectKey;
pub use line::encode_line;
pub use objects::{ListedObject, delete_object, get_object, list_objects, put_object};
pub use reader::{ArchiveReader, read_archive};
pub use snapshot::{Archive, ArchiveProblem, ArchivedObject, ArchivedRecord};
pub use timestamp::{format_timestamp, parse_timestamp, truncate_to_minute};
pub use versions::{ObjectVersion, list_object_versions, overwritten_keys};

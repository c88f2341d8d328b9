//! The names of the user metadata stored with every object
//! (`x-amz-meta-shardsink-*`, [PutObject](https://docs.aws.amazon.com/AmazonS3/latest/API/API_PutObject.html)
//! `x-amz-meta-*` headers) and the fixed codec of decisions objects: what
//! the writer (`commit::body`) stores and every reader (a 412's check,
//! rebuilds, `verify`) reads by.

use crate::output::compression::Compression;

/// User metadata name (`x-amz-meta-shardsink-format`): the format and its
/// settings ([`Format::description`](crate::output::format::Format::description)),
/// or `errors` for an error object.
pub const FORMAT_METADATA: &str = "shardsink-format";
/// User metadata name (`x-amz-meta-shardsink-records`): the user records
/// (lines or rows) in the object, decimal.
pub const RECORDS_METADATA: &str = "shardsink-records";
/// [`FORMAT_METADATA`] of error objects.
pub const ERRORS_FORMAT: &str = "errors";
/// [`FORMAT_METADATA`] of duplicates objects.
pub const DUPLICATES_FORMAT: &str = "duplicates";
/// User metadata name of error objects
/// (`x-amz-meta-shardsink-main-format`): the format of their batch's main
/// object, so that a replay after a change of settings writes the main
/// object as the error object was written for.
pub const MAIN_FORMAT_METADATA: &str = "shardsink-main-format";

/// User metadata name of decisions objects
/// (`x-amz-meta-shardsink-main-extension`): their batch's main key
/// extension (shape and codec), so that an uncommitted batch found by its
/// decisions object is rebuilt under the main key it was meant for.
pub const MAIN_EXTENSION_METADATA: &str = "shardsink-main-extension";

/// The codec of decisions objects: always zstd at level 3, so that their
/// bytes depend on the decisions alone.
pub const DECISIONS_COMPRESSION: Compression = Compression::Zstd(3);

//! Reading the archive back: the one reader every part of shardsink that
//! looks at what is already in S3 calls — the shard's resume-skip, the
//! check of an object already at a key after a 412, a replay that adopts a
//! batch's decisions, a rebuild of the event window, and `verify`.
//!
//! - `metadata`: the names of the user metadata stored with each object,
//!   and the codec of decisions objects — what the writer stores and the
//!   readers read by;
//! - `envelope`: envelope lines (also error and duplicates objects), and
//!   the record identity of a line;
//! - `json`: `json` lines and their metadata member;
//! - `lines`: a JSON Lines body's records (envelope or `json` lines) and
//!   the lines that are not records;
//! - `parquet`: Parquet files compared row by row, their rows' identities
//!   and their records;
//! - `raw`: raw payloads split at their delimiter;
//! - `row`: a record's identity and metadata as a body holds it, and a
//!   record decoded with its payload;
//! - `compare`: whether an object's lines hold the same records as ours;
//! - `decisions`: a decisions object's name and lines;
//! - `listing`: the one paginated walk of a prefix, and a shard's time
//!   bucket read into the batch ranges its keys name.
//!
//! Each format's decoder (`envelope`, `json`, `raw`, `parquet`: `decode`)
//! is the inverse of its encoder in `output::format`, checked by a
//! round-trip property test in its file: adding a format is one encoder
//! there and one decoder here.
//!
//! The end-to-end tests keep their own reader on purpose
//! (`tests/e2e/src/archive/reader.rs`): it shares no code with this one.

pub(crate) mod compare;
pub(crate) mod decisions;
pub(crate) mod envelope;
pub(crate) mod json;
pub(crate) mod lines;
pub(crate) mod listing;
pub(crate) mod metadata;
pub(crate) mod parquet;
pub(crate) mod raw;
pub(crate) mod row;

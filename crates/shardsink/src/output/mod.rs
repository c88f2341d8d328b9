//! Output: what a batch of records becomes in S3 — the body in its format,
//! its compression, the object key and the arrival minute or hour it lives
//! under.
//!
//! - `batch`: [`Batch`](batch::Batch), one shard's records of one minute or
//!   hour, encoded as they arrive and held against the memory budget;
//! - `view`: a user record as every format sees it, and why a format
//!   rejects one;
//! - `format`: the formats (envelope, json, raw, Parquet), and what a key's
//!   extension says of a body;
//! - `compression`: the codec of an object body;
//! - `body_kind`: what a body is (shape and whole-body codec), as a key's
//!   extension names it;
//! - `key`: the key layout and its inverse (parsing a key back into its
//!   bucket, shard, range and body kind);
//! - `bucket`: a record's UTC arrival minute or hour;
//! - `marker`: the archive's key layout, recorded under its prefix
//!   (`_shardsink.json`), read at every start and by `verify`;
//! - `gap_marker`: the object that records a retention gap
//!   (`_retention-gaps/`);
//! - `decisions`: a batch's event decisions and the decisions object that
//!   records them first (`_events/`);
//! - `read_back`: reading the archive back — the one reader of what is
//!   already in S3, beside the writers.

pub(crate) mod batch;
pub(crate) mod body_kind;
pub(crate) mod bucket;
pub(crate) mod compression;
pub(crate) mod decisions;
pub(crate) mod format;
pub(crate) mod gap_marker;
pub(crate) mod key;
pub(crate) mod marker;
pub(crate) mod read_back;
pub(crate) mod view;

use self::compression::Compression;
use self::format::{BodyKind, Format};
use self::key::KeyLayout;

/// How batches become objects.
#[derive(Debug, Clone)]
pub struct Output {
    /// The format of new batches.
    pub format: Format,
    /// Codec and level of new batches (of the whole body, or of Parquet's
    /// pages).
    pub compression: Compression,
    /// Keys of the main objects, under `--prefix`.
    pub layout: KeyLayout,
    /// Keys of the error objects, under `--error-prefix`: the same style and
    /// time bucket.
    pub error_layout: KeyLayout,
    /// Keys of the duplicates objects, under `--duplicates-prefix`: the same
    /// style and time bucket.
    pub duplicates_layout: KeyLayout,
    /// Keys of the decisions objects, under `{prefix}/_events`.
    pub decisions_layout: KeyLayout,
}

impl Output {
    /// Objects in `format` under `layout`, errors under `error_prefix`,
    /// duplicates under `duplicates_prefix`; zstd at its default level.
    pub fn new(
        layout: KeyLayout,
        error_prefix: impl Into<String>,
        duplicates_prefix: impl Into<String>,
        format: Format,
    ) -> Self {
        Self {
            format,
            compression: Compression::Zstd(3),
            error_layout: layout.with_prefix(error_prefix),
            duplicates_layout: layout.with_prefix(duplicates_prefix),
            decisions_layout: decisions::decisions_layout(&layout),
            layout,
        }
    }

    /// The same with `compression`.
    pub fn with_compression(self, compression: Compression) -> Self {
        Self {
            compression,
            ..self
        }
    }

    /// The kind of new main bodies.
    pub fn body_kind(&self) -> BodyKind {
        self.format.body_kind(self.compression.codec())
    }
}

#[cfg(test)]
impl Output {
    /// `envelope`, zstd level 3, plain per-minute keys under `prefix`,
    /// errors under `{prefix}-errors`.
    pub(crate) fn for_tests(prefix: &str) -> Self {
        Self::new(
            KeyLayout::plain(prefix),
            format!("{prefix}-errors"),
            format!("{prefix}-duplicates"),
            Format::Envelope,
        )
    }
}

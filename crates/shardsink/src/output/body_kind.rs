//! [`BodyKind`]: what an object body is — its shape and the compression of
//! the whole body — as a key's extension names it.

use crate::output::compression::CompressionCodec;

/// The shape of an object body: what its key's extension says before the
/// compression suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BodyShape {
    /// JSON Lines (`.jsonl`): the `envelope` and `json` formats, and error
    /// objects.
    JsonLines,
    /// Payload bytes and delimiters (`.raw`).
    Raw,
    /// Apache Parquet (`.parquet`); compressed inside, by page.
    Parquet,
}

/// What an object body is: its shape and the compression of the whole body
/// (always none for Parquet, which compresses its pages). The key's
/// extension says both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BodyKind {
    /// The shape.
    pub shape: BodyShape,
    /// The compression of the whole body.
    pub codec: CompressionCodec,
}

impl BodyKind {
    /// Every kind a key may name.
    pub const ALL: [Self; 7] = [
        Self::lines(CompressionCodec::None),
        Self::lines(CompressionCodec::Gzip),
        Self::lines(CompressionCodec::Zstd),
        Self::raw(CompressionCodec::None),
        Self::raw(CompressionCodec::Gzip),
        Self::raw(CompressionCodec::Zstd),
        Self::PARQUET,
    ];

    /// A Parquet file.
    pub const PARQUET: Self = Self {
        shape: BodyShape::Parquet,
        codec: CompressionCodec::None,
    };

    /// JSON Lines compressed with `codec`.
    pub const fn lines(codec: CompressionCodec) -> Self {
        Self {
            shape: BodyShape::JsonLines,
            codec,
        }
    }

    /// Raw payloads compressed with `codec`.
    pub const fn raw(codec: CompressionCodec) -> Self {
        Self {
            shape: BodyShape::Raw,
            codec,
        }
    }

    /// The key extension: `.jsonl`, `.raw` or `.parquet`, then `.gz` or
    /// `.zst` when the whole body is compressed.
    pub fn extension(self) -> &'static str {
        use CompressionCodec::{Gzip, None, Zstd};
        match (self.shape, self.codec) {
            (BodyShape::JsonLines, None) => ".jsonl",
            (BodyShape::JsonLines, Gzip) => ".jsonl.gz",
            (BodyShape::JsonLines, Zstd) => ".jsonl.zst",
            (BodyShape::Raw, None) => ".raw",
            (BodyShape::Raw, Gzip) => ".raw.gz",
            (BodyShape::Raw, Zstd) => ".raw.zst",
            (BodyShape::Parquet, _) => ".parquet",
        }
    }

    /// The kind an extension names (the inverse of
    /// [`extension`](Self::extension)).
    pub fn from_extension(extension: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|kind| kind.extension() == extension)
    }

    /// The object's `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match (self.shape, self.codec) {
            (BodyShape::Parquet, _) => "application/vnd.apache.parquet",
            (_, CompressionCodec::Gzip) => "application/gzip",
            (_, CompressionCodec::Zstd) => "application/zstd",
            (BodyShape::JsonLines, CompressionCodec::None) => "application/x-ndjson",
            (BodyShape::Raw, CompressionCodec::None) => "application/octet-stream",
        }
    }
}

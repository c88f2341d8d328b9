//! Compression of an object, from its key's extension: compressing (for
//! tests that write objects) and decompressing with a magic-byte check.

use std::io::Read as _;

use anyhow::Result;

/// Compression of an object, from its key's extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Compression {
    /// `.jsonl`
    None,
    /// `.jsonl.gz`
    Gzip,
    /// `.jsonl.zst`
    Zstd,
}

impl Compression {
    /// The key's file extension, with the leading dot.
    pub fn extension(self) -> &'static str {
        match self {
            Self::None => ".jsonl",
            Self::Gzip => ".jsonl.gz",
            Self::Zstd => ".jsonl.zst",
        }
    }

    /// The `--compression` value that produces this extension.
    pub fn setting(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Gzip => "gzip",
            Self::Zstd => "zstd",
        }
    }

    /// Compresses `body` (for tests that write objects themselves).
    ///
    /// # Errors
    /// An encoder I/O error.
    pub fn compress(self, body: &[u8]) -> Result<Vec<u8>> {
        Ok(match self {
            Self::None => body.to_vec(),
            Self::Gzip => {
                let mut encoder =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                std::io::Write::write_all(&mut encoder, body)?;
                encoder.finish()?
            }
            Self::Zstd => zstd::encode_all(body, 3)?,
        })
    }

    /// Decompresses `body`, checking the format's magic bytes first.
    ///
    /// # Errors
    /// Wrong magic bytes, or a corrupt stream.
    pub fn decompress(self, body: &[u8]) -> Result<Vec<u8>, String> {
        match self {
            Self::None => Ok(body.to_vec()),
            Self::Gzip => {
                if !body.starts_with(&[0x1F, 0x8B]) {
                    return Err("a .gz object without the gzip magic bytes".to_owned());
                }
                let mut out = Vec::new();
                flate2::read::MultiGzDecoder::new(body)
                    .read_to_end(&mut out)
                    .map_err(|e| format!("gzip decode failed: {e}"))?;
                Ok(out)
            }
            Self::Zstd => {
                if !body.starts_with(&[0x28, 0xB5, 0x2F, 0xFD]) {
                    return Err("a .zst object without the zstd magic bytes".to_owned());
                }
                zstd::decode_all(body).map_err(|e| format!("zstd decode failed: {e}"))
            }
        }
    }
}

//! [`Compression`]: how object bodies are compressed (the key's extension
//! says so: [`BodyKind`](crate::output::format::BodyKind)).

use std::io::{self, Read as _, Write as _};

use clap::ValueEnum;

/// Object compression. For `envelope`, `json` and `raw` the whole object is
/// compressed (and the key says so); for `parquet`, its pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum)]
pub enum CompressionCodec {
    /// No compression.
    None,
    /// gzip (`.gz`).
    Gzip,
    /// Zstandard (`.zst`).
    Zstd,
}

/// zstd level when none is set: cheap enough not to dominate (measured ~6 µs a
/// 1 KiB record at level 3, against ~107 µs for gzip at level 6; see
/// docs/DESIGN.md, "Performance").
pub const DEFAULT_ZSTD_LEVEL: i32 = 3;
/// gzip level when none is set (gzip's own default).
pub const DEFAULT_GZIP_LEVEL: u32 = 6;

/// A codec with its level.
///
/// Compression is deterministic for a given codec, level and library version
/// (zstd one-shot frames; gzip with mtime 0 and no file name in the header),
/// so a replayed batch has the same bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// No compression.
    None,
    /// gzip at a level 0-9.
    Gzip(u32),
    /// zstd at a level 1-22.
    Zstd(i32),
}

impl Compression {
    /// From the settings; `level` must already be validated for `codec`.
    pub fn new(codec: CompressionCodec, level: Option<i32>) -> Self {
        match codec {
            CompressionCodec::None => Self::None,
            CompressionCodec::Gzip => Self::Gzip(
                level
                    .and_then(|l| u32::try_from(l).ok())
                    .unwrap_or(DEFAULT_GZIP_LEVEL),
            ),
            CompressionCodec::Zstd => Self::Zstd(level.unwrap_or(DEFAULT_ZSTD_LEVEL)),
        }
    }

    /// The codec.
    pub fn codec(self) -> CompressionCodec {
        match self {
            Self::None => CompressionCodec::None,
            Self::Gzip(_) => CompressionCodec::Gzip,
            Self::Zstd(_) => CompressionCodec::Zstd,
        }
    }

    /// Compresses a whole object body.
    ///
    /// # Errors
    /// I/O errors from the codec (none expected for in-memory buffers).
    pub fn compress(self, lines: &[u8]) -> io::Result<Vec<u8>> {
        match self {
            Self::None => Ok(lines.to_vec()),
            Self::Gzip(level) => {
                // GzEncoder writes mtime 0 and no name: deterministic headers.
                let mut encoder = flate2::write::GzEncoder::new(
                    Vec::with_capacity(lines.len() / 3),
                    flate2::Compression::new(level),
                );
                encoder.write_all(lines)?;
                encoder.finish()
            }
            Self::Zstd(level) => zstd::bulk::compress(lines, level),
        }
    }
}

/// A streaming reader of the lines in a body written with `codec`, read
/// from `body` a buffer at a time (a whole object is never in memory).
///
/// # Errors
/// When the codec's header cannot be read.
pub fn decoder<'a>(
    codec: CompressionCodec,
    body: impl io::BufRead + 'a,
) -> io::Result<Box<dyn io::Read + 'a>> {
    Ok(match codec {
        CompressionCodec::None => Box::new(body),
        CompressionCodec::Gzip => Box::new(flate2::bufread::GzDecoder::new(body)),
        CompressionCodec::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(body)?),
    })
}

/// Decompresses an object body written with `codec`.
///
/// # Errors
/// When the body is not valid for the codec.
pub fn decompress(codec: CompressionCodec, body: &[u8]) -> io::Result<Vec<u8>> {
    match codec {
        CompressionCodec::None => Ok(body.to_vec()),
        CompressionCodec::Gzip => {
            let mut out = Vec::with_capacity(body.len() * 3);
            flate2::read::GzDecoder::new(body).read_to_end(&mut out)?;
            Ok(out)
        }
        CompressionCodec::Zstd => zstd::stream::decode_all(body),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        (0..2_000)
            .map(|i| format!("{{\"sequenceNumber\":\"{i}\",\"data\":\"aGVsbG8=\"}}\n"))
            .collect::<String>()
            .into_bytes()
    }

    #[test]
    fn every_codec_round_trips_and_is_deterministic() {
        for compression in [
            Compression::None,
            Compression::Gzip(6),
            Compression::Zstd(3),
            Compression::Zstd(19),
        ] {
            let body = sample();
            let first = compression.compress(&body).unwrap();
            let second = compression.compress(&body).unwrap();
            assert_eq!(first, second, "{compression:?} must be deterministic");
            assert_eq!(decompress(compression.codec(), &first).unwrap(), body);
            if compression != Compression::None {
                assert!(first.len() < body.len() / 4, "{compression:?} compresses");
            }
        }
    }

    #[test]
    fn the_streaming_decoder_reads_what_compress_wrote() {
        for compression in [
            Compression::None,
            Compression::Gzip(6),
            Compression::Zstd(3),
        ] {
            let body = compression.compress(&sample()).unwrap();
            let mut out = Vec::new();
            decoder(compression.codec(), &body[..])
                .unwrap()
                .read_to_end(&mut out)
                .unwrap();
            assert_eq!(out, sample(), "{compression:?}");
        }
    }

    #[test]
    fn corrupt_bodies_are_errors() {
        assert!(decompress(CompressionCodec::Gzip, b"not gzip").is_err());
        assert!(decompress(CompressionCodec::Zstd, b"not zstd").is_err());
    }
}

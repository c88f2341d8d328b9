//! Whether an object already at a batch's key holds the batch's records —
//! the check after a PUT with `If-None-Match: *` answered 412. The object is
//! streamed, decompressed and compared line by line, so neither it nor its
//! decompressed copy is ever held whole.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use serde_json::Value;
use tokio_util::io::SyncIoBridge;
use tracing::warn;

use crate::aws::{BoxError, ObjectStore, S3Error};
use crate::config::CompressionCodec;
use crate::output::compression;

/// Whether the existing object `key` holds the same records as `lines`,
/// line by line: byte-equal, or else the same sequence number,
/// sub-sequence number and data (an older shardsink may have encoded the
/// same records differently). The object is streamed and decompressed a
/// buffer at a time, so neither it nor its decompressed copy is ever held
/// whole.
pub(crate) async fn same_records(
    store: &ObjectStore,
    key: &str,
    codec: CompressionCodec,
    lines: &Bytes,
) -> Result<bool, S3Error> {
    let body = store.get_stream(key).await?.into_async_read();
    let expected = lines.clone();
    let compared = tokio::task::spawn_blocking(move || {
        let source = TrackedRead::new(SyncIoBridge::new(body));
        let read_failed = source.failed.clone();
        let result = compare_lines(codec, std::io::BufReader::new(source), &expected);
        (result, read_failed.load(Ordering::Relaxed))
    })
    .await;
    let retriable = |source: BoxError| S3Error::Other {
        operation: "GetObject",
        bucket: store.bucket().to_owned(),
        key: key.to_owned(),
        retriable: true,
        throttled: false,
        source,
    };
    match compared {
        Ok((Ok(comparison), _)) => {
            if comparison == Comparison::SameRecords {
                warn!(
                    key,
                    "existing object holds the same records in another encoding"
                );
            }
            Ok(comparison != Comparison::Different)
        }
        // Reading the object failed (a dropped connection): try again.
        Ok((Err(err), true)) => Err(retriable(Box::new(err))),
        // The bytes arrived but do not decode: not these records.
        Ok((Err(err), false)) => {
            warn!(key, error = %err, "existing object does not decompress");
            Ok(false)
        }
        Err(join_error) => Err(retriable(Box::new(join_error))),
    }
}

/// How an existing object's lines compare with a batch's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Comparison {
    /// Byte for byte.
    SameBytes,
    /// The same records, encoded differently.
    SameRecords,
    /// Other records.
    Different,
}

/// Compares the lines `existing` decodes to (with `codec`) with `expected`,
/// one line at a time.
///
/// # Errors
/// I/O errors from reading or decoding `existing`.
fn compare_lines(
    codec: CompressionCodec,
    existing: impl std::io::BufRead,
    expected: &[u8],
) -> std::io::Result<Comparison> {
    use std::io::BufRead as _;

    let mut existing = std::io::BufReader::new(compression::decoder(codec, existing)?);
    let mut expected = expected.split_inclusive(|b| *b == b'\n');
    let mut line = Vec::new();
    let mut comparison = Comparison::SameBytes;
    loop {
        line.clear();
        existing.read_until(b'\n', &mut line)?;
        match (line.is_empty(), expected.next()) {
            (true, None) => return Ok(comparison),
            (true, Some(_)) | (false, None) => return Ok(Comparison::Different),
            (false, Some(want)) if line == want => {}
            (false, Some(want)) => match (identity(&line), identity(want)) {
                (Some(have), Some(want)) if have == want => {
                    comparison = Comparison::SameRecords;
                }
                _ => return Ok(Comparison::Different),
            },
        }
    }
}

/// A line's record identity: sequence number, sub-sequence number, data.
fn identity(line: &[u8]) -> Option<(Value, Value, Value)> {
    let value: Value = serde_json::from_slice(line).ok()?;
    Some((
        value.get("sequenceNumber")?.clone(),
        value
            .get("subSequenceNumber")
            .cloned()
            .unwrap_or(Value::Null),
        value.get("data")?.clone(),
    ))
}

/// A reader that remembers whether it failed, to tell a failed download
/// from a body that does not decode.
struct TrackedRead<R> {
    inner: R,
    failed: Arc<AtomicBool>,
}

impl<R> TrackedRead<R> {
    fn new(inner: R) -> Self {
        Self {
            inner,
            failed: Arc::default(),
        }
    }
}

impl<R: std::io::Read> std::io::Read for TrackedRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(buf).inspect_err(|_| {
            self.failed.store(true, Ordering::Relaxed);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::compression::Compression;

    fn compare(existing: &[u8], expected: &[u8]) -> std::io::Result<Comparison> {
        let body = Compression::Zstd(3).compress(existing).unwrap();
        compare_lines(CompressionCodec::Zstd, &body[..], expected)
    }

    #[test]
    fn an_existing_object_is_compared_line_by_line() {
        let lines = b"{\"sequenceNumber\":\"1\",\"partitionKey\":\"a\",\"data\":\"eA==\"}\n\
                      {\"sequenceNumber\":\"2\",\"partitionKey\":\"b\",\"data\":\"eQ==\"}\n";
        assert_eq!(compare(lines, lines).unwrap(), Comparison::SameBytes);
        // The same records with the fields in another order.
        let reencoded = b"{\"data\":\"eA==\",\"sequenceNumber\":\"1\"}\n\
                          {\"data\":\"eQ==\",\"sequenceNumber\":\"2\"}\n";
        assert_eq!(compare(reencoded, lines).unwrap(), Comparison::SameRecords);
        let other_data = b"{\"sequenceNumber\":\"1\",\"partitionKey\":\"a\",\"data\":\"eA==\"}\n\
                           {\"sequenceNumber\":\"2\",\"partitionKey\":\"b\",\"data\":\"eg==\"}\n";
        assert_eq!(compare(other_data, lines).unwrap(), Comparison::Different);
        let first_only = &lines[..lines.iter().position(|b| *b == b'\n').unwrap() + 1];
        assert_eq!(compare(first_only, lines).unwrap(), Comparison::Different);
        assert_eq!(compare(lines, first_only).unwrap(), Comparison::Different);
        assert!(
            compare_lines(CompressionCodec::Zstd, &b"not zstd"[..], lines).is_err(),
            "a body that does not decode is an error, not a match"
        );
    }
}

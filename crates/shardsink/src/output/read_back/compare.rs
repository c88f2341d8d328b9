//! Whether an object already in S3 holds the same records as a body we
//! meant to put under its key, compared line by line
//! ([`compare_lines`], for JSON Lines and raw bodies; Parquet files are
//! compared row by row by `parquet::same_rows`) — for the check after a
//! PUT with `If-None-Match: *` answered 412.

use super::envelope::identity;
use crate::output::compression;
use crate::output::compression::CompressionCodec;

/// How an existing object's lines compare with a batch's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    /// Byte for byte.
    SameBytes,
    /// The same records, encoded differently.
    SameRecords,
    /// Other records.
    Different,
}

/// Compares the lines `existing` decodes to (with `codec`) with `expected`,
/// one line at a time; with `envelope_identity`, lines that differ in bytes
/// but hold the same envelope record (sequence number, sub-sequence number,
/// data) still match.
///
/// # Errors
/// I/O errors from reading or decoding `existing`.
pub fn compare_lines(
    codec: CompressionCodec,
    existing: impl std::io::BufRead,
    expected: &[u8],
    envelope_identity: bool,
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
            (false, Some(_)) if !envelope_identity => return Ok(Comparison::Different),
            (false, Some(want)) => match (identity(&line), identity(want)) {
                (Some(have), Some(want)) if have == want => {
                    comparison = Comparison::SameRecords;
                }
                _ => return Ok(Comparison::Different),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::compression::Compression;

    fn compare(existing: &[u8], expected: &[u8]) -> std::io::Result<Comparison> {
        let body = Compression::Zstd(3).compress(existing).unwrap();
        compare_lines(CompressionCodec::Zstd, &body[..], expected, true)
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
        let body = Compression::Zstd(3).compress(reencoded).unwrap();
        assert_eq!(
            compare_lines(CompressionCodec::Zstd, &body[..], lines, false).unwrap(),
            Comparison::Different,
            "raw payloads are compared byte for byte"
        );
        let other_data = b"{\"sequenceNumber\":\"1\",\"partitionKey\":\"a\",\"data\":\"eA==\"}\n\
                           {\"sequenceNumber\":\"2\",\"partitionKey\":\"b\",\"data\":\"eg==\"}\n";
        assert_eq!(compare(other_data, lines).unwrap(), Comparison::Different);
        let first_only = &lines[..lines.iter().position(|b| *b == b'\n').unwrap() + 1];
        assert_eq!(compare(first_only, lines).unwrap(), Comparison::Different);
        assert_eq!(compare(lines, first_only).unwrap(), Comparison::Different);
        assert!(
            compare_lines(CompressionCodec::Zstd, &b"not zstd"[..], lines, true).is_err(),
            "a body that does not decode is an error, not a match"
        );
    }
}

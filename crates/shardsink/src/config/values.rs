//! The parsers of the values settings take: durations, byte sizes, times
//! and record delimiters. The enums a setting takes live with the module
//! that owns them (the format, codec, key layout and time bucket in
//! `output`, the initial position in `read`, the log format in `ops`).

use std::time::Duration;

use chrono::{DateTime, Utc};

pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|err| format!("{err} (examples: 500ms, 10s, 5m)"))
}

pub(crate) fn parse_byte_size(text: &str) -> Result<u64, String> {
    text.trim()
        .parse::<bytesize::ByteSize>()
        .map(|size| size.as_u64())
        .map_err(|err| format!("{err} (examples: 64MiB, 512KiB, 1048576)"))
}

/// A record delimiter: the bytes written after each payload of the `raw`
/// format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordDelimiter(pub Vec<u8>);

/// Parses a record delimiter: text in which `\n`, `\r`, `\t`, `\0`,
/// `\\` and `\xHH` are escapes (so that a newline fits in a flag or an
/// environment variable); any other character stands for its UTF-8 bytes.
/// The empty text is no delimiter.
///
/// # Errors
/// An unknown or incomplete escape, for clap to show.
pub(crate) fn parse_delimiter(text: &str) -> Result<RecordDelimiter, String> {
    let mut out = Vec::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            let mut buffer = [0; 4];
            out.extend_from_slice(c.encode_utf8(&mut buffer).as_bytes());
            continue;
        }
        match chars.next() {
            Some('n') => out.push(b'\n'),
            Some('r') => out.push(b'\r'),
            Some('t') => out.push(b'\t'),
            Some('0') => out.push(0),
            Some('\\') => out.push(b'\\'),
            Some('x') => {
                let hex: String = chars.by_ref().take(2).collect();
                match u8::from_str_radix(&hex, 16) {
                    Ok(byte) if hex.len() == 2 && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
                        out.push(byte);
                    }
                    _ => return Err(format!("\\x{hex} is not \\x and two hex digits")),
                }
            }
            Some(other) => {
                return Err(format!(
                    "\\{other} is not an escape (\\n \\r \\t \\0 \\\\ \\xHH)"
                ));
            }
            None => return Err("ends with a lone \\ (write \\\\ for a backslash)".to_owned()),
        }
    }
    Ok(RecordDelimiter(out))
}

/// Parses an RFC 3339 time (`2026-11-21T00:00:00Z`, any offset) to UTC.
///
/// # Errors
/// The parse error with an example, for clap to show.
pub(crate) fn parse_timestamp(text: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(text)
        .map(|time| time.with_timezone(&Utc))
        .map_err(|err| format!("{err} (example: 2026-11-21T00:00:00Z)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delimiters_take_escapes() {
        let parse = |text| parse_delimiter(text).unwrap().0;
        assert_eq!(parse("\\n"), b"\n");
        assert_eq!(parse("\\r\\n"), b"\r\n");
        assert_eq!(parse(""), b"");
        assert_eq!(parse("|\\x1e\\\\"), b"|\x1e\\");
        assert_eq!(parse("é"), "é".as_bytes());
        for bad in ["\\q", "\\", "\\x1", "\\xzz", "\\x+1"] {
            assert!(parse_delimiter(bad).is_err(), "{bad:?}");
        }
    }
}

//! The format an object says it holds (`x-amz-meta-shardsink-format`), and
//! the format a test's settings ask for.

use std::fmt;

use crate::daemon::Settings;

/// User metadata naming an object's format and its settings.
pub const FORMAT_METADATA: &str = "shardsink-format";
/// User metadata holding an object's number of user records.
pub const RECORDS_METADATA: &str = "shardsink-records";
/// User metadata of error, duplicates and decisions objects naming the
/// format of their batch's main object.
pub const MAIN_FORMAT_METADATA: &str = "shardsink-main-format";

/// An object's format with its settings, as its
/// `x-amz-meta-shardsink-format` names it: `envelope`, `json` or
/// `json;metadata-field=NAME`, `raw;delimiter=HEX`, `parquet` or
/// `parquet;schema=FINGERPRINT`, `errors` for error objects and
/// `duplicates` for duplicates objects.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ObjectFormat {
    /// JSON Lines, payload in base64 beside the metadata.
    Envelope,
    /// JSON Lines of the payloads with the metadata under a member
    /// (`None`: no metadata).
    Json {
        /// The metadata member.
        metadata_field: Option<String>,
    },
    /// Payloads, each followed by the delimiter.
    Raw {
        /// The record delimiter.
        delimiter: Vec<u8>,
    },
    /// Apache Parquet; with a schema, its fingerprint.
    Parquet {
        /// The schema's fingerprint as the daemon wrote it (from
        /// [`ObjectFormat::parse`]), or `Some("")` for "some schema" (from
        /// [`ObjectFormat::of_settings`]).
        schema: Option<String>,
    },
    /// Envelope lines with an `errorMessage`: an error object.
    Errors,
    /// Envelope lines with a `duplicateOf`: a duplicates object.
    Duplicates,
}

impl ObjectFormat {
    /// Parses the metadata's value.
    ///
    /// # Errors
    /// A value of no known format.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (name, setting) = match text.split_once(';') {
            Some((name, setting)) => (name, Some(setting)),
            None => (text, None),
        };
        match (name, setting) {
            ("envelope", None) => Ok(Self::Envelope),
            ("errors", None) => Ok(Self::Errors),
            ("duplicates", None) => Ok(Self::Duplicates),
            ("json", None) => Ok(Self::Json {
                metadata_field: None,
            }),
            ("json", Some(setting)) => setting
                .strip_prefix("metadata-field=")
                .map(|field| Self::Json {
                    metadata_field: Some(field.to_owned()),
                })
                .ok_or_else(|| format!("format {text:?}: unknown json setting")),
            ("raw", Some(setting)) => setting
                .strip_prefix("delimiter=")
                .and_then(decode_hex)
                .map(|delimiter| Self::Raw { delimiter })
                .ok_or_else(|| format!("format {text:?}: not raw;delimiter=HEX")),
            ("parquet", None) => Ok(Self::Parquet { schema: None }),
            ("parquet", Some(setting)) => setting
                .strip_prefix("schema=")
                .filter(|fingerprint| !fingerprint.is_empty())
                .map(|fingerprint| Self::Parquet {
                    schema: Some(fingerprint.to_owned()),
                })
                .ok_or_else(|| format!("format {text:?}: not parquet;schema=FINGERPRINT")),
            _ => Err(format!("unknown format {text:?}")),
        }
    }

    /// The format `settings` ask for: `--format` (default `envelope`) with
    /// `--metadata-field` (default `_kinesis`; empty: none),
    /// `--record-delimiter` (default `\n`, escapes decoded) or
    /// `--parquet-schema` (any fingerprint).
    ///
    /// # Panics
    /// On a `--format` or delimiter the daemon does not accept either.
    pub fn of_settings(settings: &Settings) -> Self {
        match settings.get("format").unwrap_or("envelope") {
            "envelope" => Self::Envelope,
            "json" => match settings.get("metadata-field").unwrap_or("_kinesis") {
                "" => Self::Json {
                    metadata_field: None,
                },
                field => Self::Json {
                    metadata_field: Some(field.to_owned()),
                },
            },
            "raw" => Self::Raw {
                delimiter: parse_delimiter(settings.get("record-delimiter").unwrap_or("\\n"))
                    .unwrap_or_else(|e| panic!("--record-delimiter in the test's settings: {e}")),
            },
            "parquet" => Self::Parquet {
                schema: settings.get("parquet-schema").map(|_| String::new()),
            },
            other => panic!("unknown --format {other:?} in the test's settings"),
        }
    }

    /// Whether an object of this format is what `expected` (typically
    /// [`ObjectFormat::of_settings`]) asks for: equal, except that any
    /// schema fingerprint matches `Some("")`.
    pub fn conforms_to(&self, expected: &Self) -> bool {
        match (self, expected) {
            (Self::Parquet { schema: Some(_) }, Self::Parquet { schema: Some(any) })
                if any.is_empty() =>
            {
                true
            }
            _ => self == expected,
        }
    }
}

impl fmt::Display for ObjectFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Envelope => f.write_str("envelope"),
            Self::Errors => f.write_str("errors"),
            Self::Duplicates => f.write_str("duplicates"),
            Self::Json {
                metadata_field: None,
            } => f.write_str("json"),
            Self::Json {
                metadata_field: Some(field),
            } => write!(f, "json;metadata-field={field}"),
            Self::Raw { delimiter } => {
                f.write_str("raw;delimiter=")?;
                delimiter.iter().try_for_each(|b| write!(f, "{b:02x}"))
            }
            Self::Parquet { schema: None } => f.write_str("parquet"),
            Self::Parquet {
                schema: Some(fingerprint),
            } => write!(f, "parquet;schema={fingerprint}"),
        }
    }
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Decodes a `--record-delimiter` value: `\n`, `\r`, `\t`, `\0`, `\\` and
/// `\xHH` are escapes, anything else stands for its UTF-8 bytes.
///
/// # Errors
/// An unknown or cut-off escape.
pub fn parse_delimiter(text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        rest = &rest[c.len_utf8()..];
        if c != '\\' {
            let mut buffer = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buffer).as_bytes());
            continue;
        }
        let escape = rest
            .chars()
            .next()
            .ok_or_else(|| format!("{text:?} ends in a lone backslash"))?;
        rest = &rest[escape.len_utf8()..];
        out.push(match escape {
            'n' => b'\n',
            'r' => b'\r',
            't' => b'\t',
            '0' => 0,
            '\\' => b'\\',
            'x' => {
                let hex = rest
                    .get(..2)
                    .ok_or_else(|| format!("{text:?}: \\x needs two hex digits"))?;
                rest = &rest[2..];
                u8::from_str_radix(hex, 16)
                    .map_err(|_| format!("{text:?}: \\x{hex} is not hexadecimal"))?
            }
            other => return Err(format!("{text:?}: unknown escape \\{other}")),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_round_trip() {
        for text in [
            "envelope",
            "errors",
            "duplicates",
            "json",
            "json;metadata-field=_kinesis",
            "raw;delimiter=0a",
            "raw;delimiter=",
            "raw;delimiter=1e0d",
            "parquet",
            "parquet;schema=0123abcd",
        ] {
            assert_eq!(ObjectFormat::parse(text).unwrap().to_string(), text);
        }
        for bad in [
            "",
            "csv",
            "raw",
            "raw;delimiter=1",
            "parquet;schema=",
            "json;x=1",
        ] {
            assert!(ObjectFormat::parse(bad).is_err(), "{bad}");
        }
        let any = ObjectFormat::Parquet {
            schema: Some(String::new()),
        };
        assert!(
            ObjectFormat::parse("parquet;schema=ab")
                .unwrap()
                .conforms_to(&any)
        );
        assert!(!ObjectFormat::parse("parquet").unwrap().conforms_to(&any));
    }

    #[test]
    fn delimiters() {
        assert_eq!(parse_delimiter("\\n").unwrap(), b"\n");
        assert_eq!(parse_delimiter("").unwrap(), b"");
        assert_eq!(parse_delimiter("\\x1e").unwrap(), [0x1e]);
        assert_eq!(
            parse_delimiter("a\\\\\\t\\0é").unwrap(),
            "a\\\t\0é".as_bytes()
        );
        assert!(parse_delimiter("\\q").is_err());
        assert!(parse_delimiter("\\x1").is_err());
        assert!(parse_delimiter("\\").is_err());
    }

    #[test]
    fn settings() {
        let base = Settings::new("s", "b");
        assert_eq!(ObjectFormat::of_settings(&base), ObjectFormat::Envelope);
        assert_eq!(
            ObjectFormat::of_settings(&base.clone().set("format", "json")).to_string(),
            "json;metadata-field=_kinesis"
        );
        assert_eq!(
            ObjectFormat::of_settings(
                &base
                    .clone()
                    .set("format", "raw")
                    .set("record-delimiter", "\\x1e")
            )
            .to_string(),
            "raw;delimiter=1e"
        );
        assert_eq!(
            ObjectFormat::of_settings(&base.set("format", "parquet").set("parquet-schema", "f")),
            ObjectFormat::Parquet {
                schema: Some(String::new())
            }
        );
    }
}

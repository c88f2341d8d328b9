//! The records of a JSON Lines body read back, for `verify`: envelope lines
//! (also error and duplicates objects), or `json` lines with their metadata
//! member — which of the two, the first line says.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::envelope::parse_line;
use super::json::metadata_of;
use super::row::{Place, Row};

/// What reading a JSON Lines body found.
#[derive(Debug, Default)]
pub struct LineRows {
    /// Lines that are records (user records), with or without an identity.
    pub lines: u64,
    /// The records with an identity (envelope lines; `json` lines with a
    /// metadata member), in body order.
    pub rows: Vec<Row>,
    /// The lines that are not records, in body order.
    pub problems: Vec<LineProblem>,
}

/// A line of a JSON Lines body that is not a record as shardsink writes it.
#[derive(Debug)]
pub enum LineProblem {
    /// An empty line before the body's end.
    Empty {
        /// The line's number, from 1.
        line: usize,
    },
    /// Not a JSON object.
    NotObject {
        /// The line's number, from 1.
        line: usize,
        /// Why.
        error: serde_json::Error,
    },
    /// A JSON object, but not an envelope line in a body of envelope
    /// lines.
    NotEnvelope {
        /// The line's number, from 1.
        line: usize,
        /// Why.
        error: serde_json::Error,
    },
    /// An envelope line whose `data` is not standard base64 (the line is
    /// still a record).
    DataNotBase64 {
        /// The line's number, from 1.
        line: usize,
        /// Why.
        error: base64::DecodeError,
    },
}

impl fmt::Display for LineProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty { line } => write!(f, "line {line} is empty"),
            Self::NotObject { line, error } => {
                write!(f, "line {line} is not a JSON object: {error}")
            }
            Self::NotEnvelope { line, error } => {
                write!(f, "line {line} is not a shardsink JSON line: {error}")
            }
            Self::DataNotBase64 { line, error } => {
                write!(f, "line {line}: data is not base64: {error}")
            }
        }
    }
}

/// Reads a JSON Lines body (uncompressed): envelope lines (checked member
/// by member, `data` base64), or `json` lines with their metadata member (a
/// line without one is counted, with no identity). The body is envelope
/// lines when its first line is one, or is an object with a
/// `sequenceNumber`.
pub fn read_lines(text: &[u8]) -> LineRows {
    let mut read = LineRows::default();
    let mut data = Vec::new();
    // Envelope lines or `json` lines, as the first line says.
    let mut envelope_object = None;
    let pieces: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
    for (index, raw) in pieces.iter().enumerate() {
        let n = index + 1;
        if raw.is_empty() {
            // The piece after the final newline is empty; any other is not.
            if index + 1 < pieces.len() {
                read.problems.push(LineProblem::Empty { line: n });
            }
            continue;
        }
        let envelope = parse_line(raw);
        let is_envelope = *envelope_object.get_or_insert_with(|| {
            envelope.is_ok()
                || serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(raw)
                    .is_ok_and(|object| object.contains_key("sequenceNumber"))
        });
        if let Ok(line) = envelope {
            read.lines += 1;
            data.clear();
            if let Err(error) = STANDARD.decode_vec(line.data.as_bytes(), &mut data) {
                read.problems
                    .push(LineProblem::DataNotBase64 { line: n, error });
            }
            read.rows.push(Row {
                at: Place::Line(n),
                shard_id: Some(line.shard_id.into_owned()),
                sequence_number: line.sequence_number.into_owned(),
                sub_sequence_number: line.sub_sequence_number,
                arrival: Some(line.approximate_arrival_timestamp.into_owned()),
                duplicate_of: line.duplicate_of.map(|of| {
                    (
                        of.shard_id.into_owned(),
                        of.sequence_number.into_owned(),
                        of.sub_sequence_number,
                    )
                }),
            });
            continue;
        }
        let object: serde_json::Map<String, serde_json::Value> = match serde_json::from_slice(raw) {
            Ok(object) => object,
            Err(error) => {
                read.problems
                    .push(LineProblem::NotObject { line: n, error });
                continue;
            }
        };
        if let (Err(error), true) = (envelope, is_envelope) {
            read.problems
                .push(LineProblem::NotEnvelope { line: n, error });
            continue;
        }
        read.lines += 1;
        if let Some(metadata) = metadata_of(&object) {
            read.rows.push(Row {
                at: Place::Line(n),
                shard_id: Some(metadata.shard_id),
                sequence_number: metadata.sequence_number,
                sub_sequence_number: metadata.sub_sequence_number,
                arrival: Some(metadata.approximate_arrival_timestamp),
                duplicate_of: None,
            });
        }
    }
    read
}

//! Output formats: what a batch's records become in an object body
//! ([`Format`], [`BodyEncoder`]) and what a key's extension says of a body
//! ([`BodyKind`]).
//!
//! - `envelope`: JSON Lines with the payload in base64 and the Kinesis
//!   metadata beside it; also the lines of error objects;
//! - `json`: JSON Lines of the payloads themselves, with the metadata under
//!   one field;
//! - raw payloads with a delimiter (here);
//! - `parquet`: one row per user record, with the payload as bytes or, with
//!   a schema, as typed columns; `schema`: that schema;
//! - `iceberg`: the rows of an Iceberg table, one Parquet data file per
//!   partition value.
//!
//! Every format's bytes are a pure function of the records and the
//! [`Format`] (C5 in docs/DESIGN.md).

pub(crate) mod envelope;
pub(crate) mod iceberg;
pub(crate) mod json;
pub(crate) mod parquet;
pub(crate) mod schema;

use std::sync::Arc;

use clap::ValueEnum;

use self::envelope::LineEncoder;
use self::iceberg::{IcebergBatch, IcebergLayout};
use self::parquet::ParquetBatch;
use self::schema::ParquetSchema;
pub use crate::output::body_kind::{BodyKind, BodyShape};
use crate::output::compression::CompressionCodec;
use crate::output::decisions::{self, UserDecision};
use crate::output::view::{RejectReason, Rejection};
use crate::read::record::ShardRecord;
use crate::read::record::UserRecordView;
use event_store::{Decision, Outcome};

/// What each record becomes in an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum)]
pub enum OutputFormat {
    /// JSON Lines: the payload in base64 beside the Kinesis metadata
    /// (`.jsonl`).
    Envelope,
    /// JSON Lines: the payload itself, a JSON object, with the metadata
    /// under one field (`.jsonl`).
    Json,
    /// The payload bytes, each followed by the record delimiter (`.raw`).
    Raw,
    /// Apache Parquet, one row per record (`.parquet`).
    Parquet,
    /// Rows of an Apache Iceberg table: Parquet data files committed to
    /// the table.
    Iceberg,
}

impl OutputFormat {
    /// The name, as `--format` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Envelope => "envelope",
            Self::Json => "json",
            Self::Raw => "raw",
            Self::Parquet => "parquet",
            Self::Iceberg => "iceberg",
        }
    }
}

/// The default `--metadata-field` of the `json` format.
pub const DEFAULT_METADATA_FIELD: &str = "_kinesis";

/// A format with its settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Format {
    /// JSON Lines, payload in base64 beside the metadata.
    Envelope,
    /// JSON Lines of the payloads (JSON objects).
    Json {
        /// The member the metadata goes under; `None`: no metadata.
        metadata_field: Option<String>,
    },
    /// Payload bytes, each followed by `delimiter` (may be empty).
    Raw {
        /// The record delimiter.
        delimiter: Vec<u8>,
    },
    /// Apache Parquet.
    Parquet {
        /// Typed columns from the JSON payload instead of `data`.
        schema: Option<Arc<ParquetSchema>>,
    },
    /// Rows of an Iceberg table: one Parquet data file per partition value,
    /// committed to the table instead of written as an object.
    Iceberg {
        /// The table's columns and partition spec.
        layout: Arc<IcebergLayout>,
    },
}

impl Format {
    /// Whether it may reject a record (then batches may have error
    /// objects): `json`, `parquet` with a schema, and `iceberg`.
    pub fn can_reject(&self) -> bool {
        matches!(
            self,
            Self::Json { .. } | Self::Parquet { schema: Some(_) } | Self::Iceberg { .. }
        )
    }

    /// The shape of the bodies a [`description`](Self::description) names.
    pub fn shape_of_description(text: &str) -> Option<BodyShape> {
        match text.split(';').next()? {
            "envelope" | "json" => Some(BodyShape::JsonLines),
            "raw" => Some(BodyShape::Raw),
            "parquet" | "iceberg" => Some(BodyShape::Parquet),
            _ => None,
        }
    }

    /// The shape of its bodies.
    pub fn shape(&self) -> BodyShape {
        match self {
            Self::Envelope | Self::Json { .. } => BodyShape::JsonLines,
            Self::Raw { .. } => BodyShape::Raw,
            Self::Parquet { .. } | Self::Iceberg { .. } => BodyShape::Parquet,
        }
    }

    /// The kind of its bodies when compressed with `codec` (Parquet
    /// compresses its pages instead).
    pub fn body_kind(&self, codec: CompressionCodec) -> BodyKind {
        match self.shape() {
            BodyShape::JsonLines => BodyKind::lines(codec),
            BodyShape::Raw => BodyKind::raw(codec),
            BodyShape::Parquet => BodyKind::PARQUET,
        }
    }

    /// The format to write a body of `shape` with: this one if it has that
    /// shape, else that shape's format with default settings (a replay of a
    /// batch recorded before the format was changed).
    pub fn for_shape(&self, shape: BodyShape) -> Self {
        if self.shape() == shape {
            return self.clone();
        }
        match shape {
            BodyShape::JsonLines => Self::Envelope,
            BodyShape::Raw => Self::Raw {
                delimiter: b"\n".to_vec(),
            },
            BodyShape::Parquet => Self::Parquet { schema: None },
        }
    }

    /// The format and its settings as one text, stored with each object
    /// (`x-amz-meta-shardsink-format`): `envelope`, `json` or
    /// `json;metadata-field=NAME`, `raw;delimiter=HEX`, `parquet` or
    /// `parquet;schema=MD5`, `iceberg;schema=ID;spec=ID` (the table's
    /// schema and partition spec ids). Two objects with the same text were
    /// encoded alike.
    pub fn description(&self) -> String {
        match self {
            Self::Envelope => "envelope".to_owned(),
            Self::Json {
                metadata_field: None,
            } => "json".to_owned(),
            Self::Json {
                metadata_field: Some(field),
            } => format!("json;metadata-field={field}"),
            Self::Raw { delimiter } => {
                let hex: String = delimiter.iter().map(|b| format!("{b:02x}")).collect();
                format!("raw;delimiter={hex}")
            }
            Self::Parquet { schema: None } => "parquet".to_owned(),
            Self::Parquet {
                schema: Some(schema),
            } => format!("parquet;schema={}", schema.fingerprint()),
            Self::Iceberg { layout } => format!(
                "iceberg;schema={};spec={}",
                layout.schema().schema_id(),
                layout.spec().spec_id()
            ),
        }
    }
}

impl Format {
    /// The format a [`description`](Self::description) names, when it can be
    /// rebuilt from the text alone: every format but Parquet with a schema
    /// (whose description holds only the schema's fingerprint).
    pub fn from_description(text: &str) -> Option<Self> {
        let (name, setting) = match text.split_once(';') {
            Some((name, setting)) => (name, Some(setting)),
            None => (text, None),
        };
        match (name, setting) {
            ("envelope", None) => Some(Self::Envelope),
            ("json", None) => Some(Self::Json {
                metadata_field: None,
            }),
            ("json", Some(setting)) => Some(Self::Json {
                metadata_field: Some(setting.strip_prefix("metadata-field=")?.to_owned()),
            }),
            ("raw", Some(setting)) => {
                let hex = setting.strip_prefix("delimiter=")?;
                if hex.len() % 2 != 0 {
                    return None;
                }
                let delimiter = (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
                    .collect::<Option<Vec<u8>>>()?;
                Some(Self::Raw { delimiter })
            }
            ("parquet", None) => Some(Self::Parquet { schema: None }),
            _ => None,
        }
    }
}

/// One batch's bodies being built: the main body in the batch's format,
/// the error lines of the records the format rejected and, with event
/// decisions, the duplicate lines and the decisions lines.
#[derive(Debug)]
pub struct BodyEncoder {
    shard_id: String,
    envelope: LineEncoder,
    format: Format,
    main: MainBody,
    /// Envelope lines with `errorMessage`, uncompressed.
    errors: Vec<u8>,
    /// Envelope lines with `duplicateOf`, uncompressed.
    duplicates: Vec<u8>,
    /// The decisions lines, uncompressed: `Some` when the batch's records
    /// come with event decisions.
    decisions: Option<Vec<u8>>,
    main_records: usize,
    rejected: Vec<(RejectReason, u64)>,
    /// User records by event outcome, in [`Outcome::ALL`] order.
    outcomes: [u64; Outcome::ALL.len()],
}

/// A batch's bodies, encoded but not yet compressed.
#[derive(Debug)]
pub struct Bodies {
    /// The main body.
    pub main: MainBody,
    /// User records in the main body.
    pub main_records: usize,
    /// The error object's lines (envelope lines with `errorMessage`),
    /// uncompressed; empty when no record was rejected.
    pub errors: Vec<u8>,
    /// Rejected records by reason.
    pub rejected: Vec<(RejectReason, u64)>,
    /// The duplicates object's lines (envelope lines with `duplicateOf`),
    /// uncompressed; empty when no record was a duplicate.
    pub duplicates: Vec<u8>,
    /// User records in the duplicates object.
    pub duplicate_records: usize,
    /// The decisions object's lines, uncompressed, when the batch's records
    /// came with event decisions.
    pub decisions: Option<Vec<u8>>,
    /// User records by event outcome (only with decisions).
    pub outcomes: Vec<(Outcome, u64)>,
}

impl Bodies {
    /// User records in the error object.
    pub fn error_records(&self) -> u64 {
        self.rejected.iter().map(|(_, n)| n).sum()
    }
}

/// The main body of a batch.
#[derive(Debug)]
pub enum MainBody {
    /// JSON Lines or raw payloads, uncompressed.
    Bytes(Vec<u8>),
    /// Parquet rows, to be written as a file.
    Parquet(ParquetBatch),
    /// An Iceberg table's rows, to be written as data files.
    Iceberg(IcebergBatch),
}

impl BodyEncoder {
    /// Bodies of `shard_id`'s records in `format`.
    pub fn new(shard_id: &str, format: &Format) -> Self {
        let main = match format {
            Format::Parquet { schema } => MainBody::Parquet(ParquetBatch::new(schema.clone())),
            Format::Iceberg { layout } => {
                MainBody::Iceberg(IcebergBatch::new(layout.clone(), shard_id))
            }
            _ => MainBody::Bytes(Vec::new()),
        };
        Self {
            shard_id: shard_id.to_owned(),
            envelope: LineEncoder::new(shard_id),
            format: format.clone(),
            main,
            errors: Vec::new(),
            duplicates: Vec::new(),
            decisions: None,
            main_records: 0,
            rejected: Vec::new(),
            outcomes: [0; Outcome::ALL.len()],
        }
    }

    /// Appends a record's user records: to the main body, or to the error
    /// lines when the format rejects one, or — with `decisions`, one per
    /// user record — to the duplicate lines when it is a duplicate. Every
    /// record of a batch comes with decisions, or none does.
    pub fn push(&mut self, record: &ShardRecord, decisions: Option<&[UserDecision]>) {
        debug_assert!(
            decisions.is_none_or(|d| d.len() == record.user_record_count()),
            "one decision per user record"
        );
        if decisions.is_some() && self.decisions.is_none() {
            debug_assert!(
                self.main_records == 0 && self.errors.is_empty(),
                "decisions from the first record on"
            );
            self.decisions = Some(Vec::new());
        }
        let shard_id = std::mem::take(&mut self.shard_id);
        for (i, user) in record.views(&shard_id).enumerate() {
            if let Some(decision) = decisions.and_then(|d| d.get(i)) {
                if let Some(lines) = &mut self.decisions {
                    decisions::encode_line(&user, decision, lines);
                }
                let outcome = decision.decision.outcome();
                if let Some(at) = Outcome::ALL.iter().position(|o| *o == outcome) {
                    self.outcomes[at] += 1;
                }
                if let Decision::Duplicate { of } = &decision.decision {
                    self.envelope
                        .encode_duplicate(&user, of, &mut self.duplicates);
                    continue;
                }
            }
            match self.push_user(&user) {
                Ok(()) => self.main_records += 1,
                Err(rejection) => {
                    self.envelope
                        .encode_error(&user, &rejection.message, &mut self.errors);
                    match self
                        .rejected
                        .iter_mut()
                        .find(|(reason, _)| *reason == rejection.reason)
                    {
                        Some((_, n)) => *n += 1,
                        None => self.rejected.push((rejection.reason, 1)),
                    }
                }
            }
        }
        self.shard_id = shard_id;
    }

    fn push_user(&mut self, user: &UserRecordView<'_>) -> Result<(), Rejection> {
        let out = match &mut self.main {
            MainBody::Parquet(rows) => return rows.push(user),
            MainBody::Iceberg(rows) => return rows.push(user),
            MainBody::Bytes(out) => out,
        };
        match &self.format {
            Format::Json { metadata_field } => {
                json::encode_line(&mut self.envelope, metadata_field.as_deref(), user, out)
            }
            Format::Raw { delimiter } => {
                out.extend_from_slice(user.data);
                out.extend_from_slice(delimiter);
                Ok(())
            }
            // Parquet and Iceberg have their own bodies (`new`).
            Format::Envelope | Format::Parquet { .. } | Format::Iceberg { .. } => {
                self.envelope.encode_line(user, out);
                Ok(())
            }
        }
    }

    /// Bytes held, for the memory budget.
    pub fn memory_bytes(&self) -> u64 {
        let main = match &self.main {
            MainBody::Bytes(out) => out.len() as u64,
            MainBody::Parquet(rows) => rows.memory_bytes(),
            MainBody::Iceberg(rows) => rows.memory_bytes(),
        };
        main + (self.errors.len()
            + self.duplicates.len()
            + self.decisions.as_ref().map_or(0, Vec::len)) as u64
    }

    /// The bodies.
    pub fn finish(self) -> Bodies {
        let duplicate_records = self.outcomes[Outcome::ALL
            .iter()
            .position(|o| *o == Outcome::Duplicate)
            .unwrap_or_default()] as usize;
        Bodies {
            main: self.main,
            main_records: self.main_records,
            errors: self.errors,
            rejected: self.rejected,
            duplicates: self.duplicates,
            duplicate_records,
            outcomes: match self.decisions {
                None => Vec::new(),
                Some(_) => Outcome::ALL
                    .into_iter()
                    .zip(self.outcomes)
                    .filter(|(_, n)| *n > 0)
                    .collect(),
            },
            decisions: self.decisions,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_shape_is_written_with_its_defaults() {
        let json = Format::Json {
            metadata_field: None,
        };
        assert_eq!(json.for_shape(BodyShape::JsonLines), json);
        assert_eq!(
            json.for_shape(BodyShape::Raw),
            Format::Raw {
                delimiter: b"\n".to_vec()
            }
        );
        assert_eq!(
            json.for_shape(BodyShape::Parquet),
            Format::Parquet { schema: None }
        );
        assert_eq!(
            Format::Parquet { schema: None }.for_shape(BodyShape::JsonLines),
            Format::Envelope
        );
    }

    #[test]
    fn descriptions_name_the_format_and_its_settings() {
        for format in [
            Format::Envelope,
            Format::Json {
                metadata_field: None,
            },
            Format::Json {
                metadata_field: Some("meta;data=x".to_owned()),
            },
            Format::Raw {
                delimiter: Vec::new(),
            },
            Format::Raw {
                delimiter: b"\r\n\x1e".to_vec(),
            },
            Format::Parquet { schema: None },
        ] {
            let text = format.description();
            assert_eq!(Format::from_description(&text), Some(format), "{text}");
        }
        for text in [
            "parquet;schema=0123",
            "raw;delimiter=0",
            "xml",
            "json;other=1",
            "errors",
        ] {
            assert_eq!(Format::from_description(text), None, "{text}");
        }
    }

    #[test]
    fn extensions_map_both_ways() {
        for kind in BodyKind::ALL {
            assert_eq!(BodyKind::from_extension(kind.extension()), Some(kind));
        }
        let distinct: std::collections::HashSet<_> =
            BodyKind::ALL.iter().map(|kind| kind.extension()).collect();
        assert_eq!(distinct.len(), BodyKind::ALL.len());
        assert_eq!(BodyKind::from_extension(".json"), None);
        assert_eq!(BodyKind::from_extension(".parquet.zst"), None);
    }
}

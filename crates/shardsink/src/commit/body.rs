//! [`EncodedBatch`]: a batch's bodies as they are PUT — the main object in
//! the batch's format and, when the format rejected records, the error
//! object — with what a 412 compares each by and the user metadata stored
//! with it.

use std::sync::Arc;

use bytes::Bytes;

use crate::events::rule::Outcome;
use crate::memory::MemoryBudget;
use crate::output::compression::Compression;
use crate::output::compression::CompressionCodec;
use crate::output::format::iceberg::PartitionFile;
use crate::output::format::{Bodies, BodyKind, BodyShape, Format, MainBody};
use crate::output::read_back::metadata::{
    DECISIONS_COMPRESSION, DUPLICATES_FORMAT, ERRORS_FORMAT, FORMAT_METADATA,
    MAIN_EXTENSION_METADATA, MAIN_FORMAT_METADATA, RECORDS_METADATA,
};
use crate::output::view::RejectReason;

/// One object body, ready to PUT.
#[derive(Debug, Clone)]
pub struct ObjectBody {
    /// Shape and compression, as the key's extension says.
    pub kind: BodyKind,
    /// The bytes PUT.
    pub bytes: Bytes,
    /// What an existing object is compared with: the uncompressed lines or
    /// payloads, or the Parquet file.
    pub plain: Bytes,
    /// User records in it.
    pub records: usize,
    /// [`FORMAT_METADATA`].
    pub format: String,
    /// [`MAIN_FORMAT_METADATA`], for an error, duplicates or decisions
    /// object.
    pub main_format: Option<String>,
    /// [`MAIN_EXTENSION_METADATA`], for a decisions object.
    pub main_extension: Option<&'static str>,
    /// The budget a check of an object already at the key counts what it
    /// holds of that object against (see [`with_budget`](Self::with_budget));
    /// `None` until set.
    pub budget: Option<Arc<MemoryBudget>>,
}

impl ObjectBody {
    /// The user metadata stored with it.
    pub fn metadata(&self) -> Vec<(&'static str, String)> {
        let mut metadata = vec![
            (FORMAT_METADATA, self.format.clone()),
            (RECORDS_METADATA, self.records.to_string()),
        ];
        if let Some(main) = &self.main_format {
            metadata.push((MAIN_FORMAT_METADATA, main.clone()));
        }
        if let Some(extension) = self.main_extension {
            metadata.push((MAIN_EXTENSION_METADATA, extension.to_owned()));
        }
        metadata
    }

    /// This body, whose check of an object already at its key (after a 412)
    /// counts what it holds of that object against `budget`.
    pub fn with_budget(self, budget: &Arc<MemoryBudget>) -> Self {
        Self {
            budget: Some(budget.clone()),
            ..self
        }
    }

    /// Bytes held: the body and, when compressed, its plain form.
    pub fn held_bytes(&self) -> u64 {
        let plain = if self.kind.codec == CompressionCodec::None {
            0
        } else {
            self.plain.len()
        };
        (self.bytes.len() + plain) as u64
    }
}

/// A batch's bodies, ready to PUT: the decisions object first, then the
/// error and duplicates objects, the main object last (it is the batch's
/// commit marker).
#[derive(Debug)]
pub struct EncodedBatch {
    /// The main object's body; written even when every record was rejected.
    /// For a table batch it holds no bytes and is not written: the batch's
    /// rows are in `table_files`.
    pub main: ObjectBody,
    /// A table batch's data files, one per partition value (none when every
    /// record was rejected or a duplicate); `None` for an object batch.
    pub table_files: Option<Vec<PartitionFile>>,
    /// A table batch's payload members that no column reads.
    pub ignored_fields: u64,
    /// The error object's body, when a record was rejected.
    pub errors: Option<ObjectBody>,
    /// The duplicates object's body, when a record was a duplicate.
    pub duplicates: Option<ObjectBody>,
    /// The decisions object's body, when the batch came with decisions.
    pub decisions: Option<ObjectBody>,
    /// Rejected user records by reason.
    pub rejected: Vec<(RejectReason, u64)>,
    /// User records by event outcome (with decisions).
    pub outcomes: Vec<(Outcome, u64)>,
}

impl EncodedBatch {
    /// The objects to PUT, in order: decisions, errors, duplicates, main.
    pub fn objects(&self) -> impl Iterator<Item = (ObjectRole, &ObjectBody)> {
        [
            (ObjectRole::Decisions, self.decisions.as_ref()),
            (ObjectRole::Errors, self.errors.as_ref()),
            (ObjectRole::Duplicates, self.duplicates.as_ref()),
            (
                ObjectRole::Main,
                self.table_files.is_none().then_some(&self.main),
            ),
        ]
        .into_iter()
        .filter_map(|(role, body)| Some((role, body?)))
    }
}

/// Which of a batch's objects a body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectRole {
    /// The decisions object, under `{prefix}/_events`.
    Decisions,
    /// The error object, under the error prefix.
    Errors,
    /// The duplicates object, under the duplicates prefix.
    Duplicates,
    /// The main object, under the prefix: the commit marker.
    Main,
}

/// The codec of a batch's error object: the main key's codec, or zstd when
/// the main body is Parquet (whose key names no codec) — so the error key
/// is a function of the main key, whatever the settings of a replay.
pub fn error_codec(main: BodyKind) -> CompressionCodec {
    match main.shape {
        BodyShape::Parquet => CompressionCodec::Zstd,
        BodyShape::JsonLines | BodyShape::Raw => main.codec,
    }
}

/// Compresses (or, for Parquet, writes) a batch's bodies. CPU-bound: call it
/// off the async threads.
///
/// `kind` is the main key's body kind; `compression` is the codec and level
/// of the settings, used where it matches the kind (else the kind's codec
/// at its default level). `events`: the event settings' description
/// ([`settings_description`](crate::events::id::settings_description)),
/// stored with the decisions object.
///
/// # Errors
/// I/O errors from a codec, or the Parquet writer's.
pub fn encode(
    bodies: Bodies,
    format: &Format,
    kind: BodyKind,
    compression: Compression,
    events: Option<&str>,
) -> std::io::Result<EncodedBatch> {
    let at = |codec: CompressionCodec| {
        if codec == compression.codec() {
            compression
        } else {
            Compression::new(codec, None)
        }
    };
    let plain_and_bytes = |plain: Vec<u8>, codec| -> std::io::Result<(Bytes, Bytes)> {
        let plain = Bytes::from(plain);
        let bytes = match at(codec) {
            Compression::None => plain.clone(),
            compression => Bytes::from(compression.compress(&plain)?),
        };
        Ok((plain, bytes))
    };
    let error_records = usize::try_from(bodies.error_records()).unwrap_or(usize::MAX);
    let (mut table_files, mut ignored_fields) = (None, 0);
    let (plain, bytes) = match bodies.main {
        MainBody::Bytes(plain) => plain_and_bytes(plain, kind.codec)?,
        MainBody::Parquet(rows) => {
            let file = Bytes::from(rows.finish(compression).map_err(std::io::Error::other)?);
            (file.clone(), file)
        }
        MainBody::Iceberg(rows) => {
            ignored_fields = rows.ignored_fields();
            table_files = Some(rows.finish(compression).map_err(std::io::Error::other)?);
            (Bytes::new(), Bytes::new())
        }
    };
    let main = ObjectBody {
        kind,
        bytes,
        plain,
        records: bodies.main_records,
        format: format.description(),
        main_format: None,
        main_extension: None,
        budget: None,
    };
    let side = |lines: Vec<u8>, records: usize, format: &str| -> std::io::Result<ObjectBody> {
        let codec = error_codec(kind);
        let (plain, bytes) = plain_and_bytes(lines, codec)?;
        Ok(ObjectBody {
            kind: BodyKind::lines(codec),
            bytes,
            plain,
            records,
            format: format.to_owned(),
            main_format: Some(main.format.clone()),
            main_extension: None,
            budget: None,
        })
    };
    let errors = (!bodies.errors.is_empty())
        .then(|| side(bodies.errors, error_records, ERRORS_FORMAT))
        .transpose()?;
    let duplicates = (!bodies.duplicates.is_empty())
        .then(|| {
            side(
                bodies.duplicates,
                bodies.duplicate_records,
                DUPLICATES_FORMAT,
            )
        })
        .transpose()?;
    let user_records = bodies.main_records + error_records + bodies.duplicate_records;
    let decisions = match bodies.decisions {
        None => None,
        Some(lines) => {
            let plain = Bytes::from(lines);
            Some(ObjectBody {
                kind: BodyKind::lines(DECISIONS_COMPRESSION.codec()),
                bytes: Bytes::from(DECISIONS_COMPRESSION.compress(&plain)?),
                plain,
                records: user_records,
                format: events.unwrap_or_default().to_owned(),
                main_format: Some(main.format.clone()),
                main_extension: Some(kind.extension()),
                budget: None,
            })
        }
    };
    Ok(EncodedBatch {
        main,
        table_files,
        ignored_fields,
        errors,
        duplicates,
        decisions,
        rejected: bodies.rejected,
        outcomes: bodies.outcomes,
    })
}

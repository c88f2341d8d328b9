//! The Iceberg data files of a batch: [`IcebergLayout`] maps an Apache
//! Iceberg table's columns to what a user record holds, and
//! [`IcebergBatch`] gathers a batch's user records into one Parquet data
//! file per partition value of the table's partition spec
//! ([`PartitionFile`]), ready to be appended to the table.
//!
//! # Columns
//! Every top-level column of the table's schema is filled, in schema order,
//! from (Iceberg spec, "Schemas and Data Types"):
//!
//! | column                          | Iceberg type              | value |
//! |---------------------------------|---------------------------|-------|
//! | `shard_id`                      | `string`                  | the shard read from |
//! | `sequence_number`               | `string`                  | the Kinesis sequence number, decimal text |
//! | `sub_sequence_number`           | `long` or `int`, optional | the index in a KPL aggregate; null outside one |
//! | `partition_key`                 | `string`                  | the record's partition key |
//! | `approximate_arrival_timestamp` | `timestamptz` or `timestamp` | `ApproximateArrivalTimestamp` in microseconds (Kinesis gives milliseconds) |
//! | `data`                          | `binary`                  | the payload bytes |
//! | `data`                          | `string`                  | the payload as text; a payload that is not UTF-8 is rejected |
//! | any other (and `data` of another type) | a primitive type   | the payload member of the same name |
//!
//! A metadata column (the first five names) of another type is refused
//! when the layout is made ([`IcebergLayoutError::MetadataType`]); so is a
//! required `sub_sequence_number`, which records outside KPL aggregates
//! could not fill.
//!
//! # Payload columns
//! With at least one payload column the payload must be one JSON object
//! (else the record is rejected); its members are matched to columns by
//! exact name, converted as follows, and members no payload column reads
//! (those named like a metadata column or `data` included) are skipped and
//! counted ([`IcebergBatch::ignored_fields`]):
//!
//! | Iceberg type            | JSON value accepted                                       | Arrow type |
//! |-------------------------|-----------------------------------------------------------|------------|
//! | `string`                | a string                                                  | Utf8 |
//! | `boolean`               | `true` or `false`                                         | Boolean |
//! | `int`, `long`           | an integer in range (no fraction, no exponent)            | Int32, Int64 |
//! | `float`, `double`       | a number in range, rounded to nearest                     | Float32, Float64 |
//! | `decimal(P,S)`          | a number, or a string holding one, exactly representable (no non-zero digit beyond S, at most P digits) | Decimal128(P, S) |
//! | `date`                  | `YYYY-MM-DD` text                                         | Date32 |
//! | `timestamp`, `timestamptz` | RFC 3339 text with any offset (stored as the UTC instant, finer than microseconds truncated), or integer epoch milliseconds | Timestamp(Microsecond, none / "+00:00") |
//! | `binary`                | base64 text (RFC 4648 section 4, standard alphabet, padded) | LargeBinary (Binary in memory) |
//! | `uuid`                  | UUID text, `8-4-4-4-12` hex digits                        | FixedSizeBinary(16) |
//!
//! A missing member or a JSON `null` is a null; in a required column the
//! record is rejected (`required column "x" is missing or null`). A member
//! of the wrong JSON type or out of range is rejected as the `parquet`
//! format rejects it. The types `time`, `fixed(L)`, `timestamp_ns`,
//! `timestamptz_ns` are refused when the layout is made
//! ([`IcebergLayoutError::Unsupported`]); so are required nested columns
//! (`struct`, `list`, `map`), while an optional nested column is always
//! written null (its payload member, if any, is counted as ignored).
//!
//! The Arrow types are exactly those `iceberg::arrow::schema_to_arrow_schema`
//! gives, each field carrying its Iceberg field id as `PARQUET:field_id`,
//! so that readers (iceberg-rust, pyiceberg, Spark, DuckDB) map the Parquet
//! columns to the table's by id. One exception, in memory only: a `binary`
//! column (`data`, or a base64 payload column) is built as `Binary`, with
//! 32-bit offsets as the `parquet` format's `data`, and written under its
//! `LargeBinary` field; the `parquet` crate writes either array as the same
//! `BYTE_ARRAY` column, so the file, the Arrow schema in its footer
//! included, is the same byte for byte.
//!
//! # Partitions
//! Each partition field's source must be a top-level primitive column. The
//! partition value of each row is computed with Iceberg's own transforms
//! (identity, year, month, day, hour, bucket\[N\], truncate\[W\], void) by
//! `iceberg::arrow::RecordBatchPartitionSplitter`; rows keep their push
//! order within a file, and files come in ascending order of partition
//! value (nulls first, field by field). Each file's
//! [`partition_path`](PartitionFile::partition_path) names its partition
//! as Iceberg's Java and Python writers do.
//!
//! # Determinism
//! As for the `parquet` format: the same writer settings (fixed
//! `created_by`, format 1.0, one row group up to 2^20 rows), so the bytes
//! of each file are a pure function of its rows, the table's schema and
//! the compression.

#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use ::parquet::arrow::ArrowWriter;
use ::parquet::errors::ParquetError;
use ::parquet::file::metadata::ParquetMetaData;
use ::parquet::file::statistics::Statistics;
use arrow_array::cast::AsArray;
use arrow_array::types::{Date32Type, Int32Type};
use arrow_array::{Array, ArrayRef, RecordBatch, new_null_array};
use arrow_schema::{ArrowError, DataType, Fields};
use bytes::Bytes;
use iceberg::arrow::{RecordBatchPartitionSplitter, schema_to_arrow_schema};
use iceberg::spec::{
    DataContentType, DataFile, DataFileBuilder, DataFileBuilderError, DataFileFormat, Datum,
    Literal, PartitionSpecRef, PrimitiveLiteral, PrimitiveType, Schema as IcebergSchema, SchemaRef,
    Struct, Transform, Type,
};
use iceberg::transform::create_transform_function;

use super::parquet::column::ColumnBuilder;
use super::parquet::row::{Cell, CellType, MAX_DECIMAL_PRECISION, RowColumns, parse_row};
use super::parquet::writer_properties;
use super::schema::{
    APPROXIMATE_ARRIVAL_TIMESTAMP, DATA, PARTITION_KEY, SEQUENCE_NUMBER, SHARD_ID,
    SUB_SEQUENCE_NUMBER,
};
use crate::output::compression::Compression;
use crate::output::view::{RejectReason, Rejection};
use crate::read::record::UserRecordView;

/// Why a table's schema and partition spec cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum IcebergLayoutError {
    /// A column of a type this writer does not fill: a required nested
    /// column, or `time`, `fixed(L)`, `timestamp_ns`, `timestamptz_ns`.
    #[error("column `{column}` has type {column_type}, which shardsink cannot write")]
    Unsupported {
        /// The column's name.
        column: String,
        /// Its Iceberg type, as the spec spells it.
        column_type: String,
    },
    /// A metadata column (`shard_id`, …) of a type that cannot hold it.
    #[error("column `{column}` has type {found}, expected {expected}")]
    MetadataType {
        /// The column's name.
        column: String,
        /// The types it may have.
        expected: &'static str,
        /// Its Iceberg type.
        found: String,
    },
    /// `sub_sequence_number` is required, but records outside KPL
    /// aggregates have none.
    #[error("column `{column}` must be optional: records outside KPL aggregates have no value")]
    MustBeOptional {
        /// The column's name.
        column: String,
    },
    /// A partition field whose source is not a top-level primitive column
    /// of the schema.
    #[error(
        "partition field `{field}`: source field id {source_id} is not a top-level primitive column"
    )]
    PartitionSource {
        /// The partition field's name.
        field: String,
        /// Its source field id.
        source_id: i32,
    },
    /// The schema or spec that iceberg itself refuses (a transform that
    /// does not apply to its source type, an Arrow conversion failure).
    #[error("invalid table schema or partition spec: {0}")]
    Iceberg(#[from] iceberg::Error),
}

/// Why a batch's files could not be written.
#[derive(Debug, thiserror::Error)]
pub enum IcebergBatchError {
    /// The columns do not form a record batch of the table's Arrow schema
    /// (not expected: the builders are made from that schema).
    #[error("shard {shard_id}: failed to assemble the batch's columns: {source}")]
    Arrow {
        /// The batch's shard.
        shard_id: String,
        /// The Arrow error.
        source: ArrowError,
    },
    /// Computing or splitting by the partition values failed.
    #[error("shard {shard_id}: failed to partition the batch: {source}")]
    Partition {
        /// The batch's shard.
        shard_id: String,
        /// iceberg's error (boxed: it is large).
        source: Box<iceberg::Error>,
    },
    /// The Parquet writer failed, or the compression level is out of its
    /// codec's range (gzip above 9, zstd above 22).
    #[error("shard {shard_id}: failed to write a Parquet data file: {source}")]
    Parquet {
        /// The batch's shard.
        shard_id: String,
        /// The writer's error.
        source: ParquetError,
    },
}

/// Where a table column's values come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    ShardId,
    SequenceNumber,
    SubSequenceNumber,
    PartitionKey,
    /// `approximate_arrival_timestamp`, in microseconds.
    Arrival,
    /// `data` of type `binary`: the payload bytes.
    DataBytes,
    /// `data` of type `string`: the payload as UTF-8 text.
    DataText,
    /// The payload member of the column's name: an index into
    /// [`PayloadColumns`].
    Payload(usize),
    /// An optional nested column: always null.
    Null,
}

/// One payload column: the member it reads and what it accepts.
#[derive(Debug)]
struct PayloadColumn {
    name: String,
    cell_type: CellType,
    /// The Iceberg type as the spec spells it, for messages.
    type_name: String,
    required: bool,
}

/// The payload columns, in schema order.
#[derive(Debug, Default)]
struct PayloadColumns {
    columns: Vec<PayloadColumn>,
    by_name: HashMap<String, usize>,
}

impl RowColumns for PayloadColumns {
    fn len(&self) -> usize {
        self.columns.len()
    }

    fn index_of(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    fn name(&self, index: usize) -> &str {
        self.columns.get(index).map_or("", |column| &column.name)
    }

    fn cell_type(&self, index: usize) -> CellType {
        self.columns
            .get(index)
            .map_or(CellType::Json, |column| column.cell_type)
    }

    fn type_name(&self, index: usize) -> Cow<'_, str> {
        Cow::Borrowed(
            self.columns
                .get(index)
                .map_or("", |column| &column.type_name),
        )
    }
}

/// How a table's columns are filled from user records, and how its rows
/// are partitioned (see the module documentation). Made once per table
/// schema and spec, shared by every batch.
#[derive(Debug)]
pub struct IcebergLayout {
    schema: SchemaRef,
    spec: PartitionSpecRef,
    /// The table's Arrow schema, with field ids: the files' schema.
    arrow_schema: arrow_schema::SchemaRef,
    /// The schema of the columns as built ([`built_schema`]).
    built_schema: arrow_schema::SchemaRef,
    /// Each top-level column's source, in schema order.
    sources: Vec<Source>,
    payload: PayloadColumns,
}

/// Two layouts are alike when they are of the same schema and spec.
impl PartialEq for IcebergLayout {
    fn eq(&self, other: &Self) -> bool {
        self.schema == other.schema && self.spec == other.spec
    }
}

impl Eq for IcebergLayout {}

impl IcebergLayout {
    /// The layout of a table with `schema` and partition `spec` (a spec of
    /// that schema).
    ///
    /// # Errors
    /// [`IcebergLayoutError::Unsupported`] for a column type this writer
    /// cannot fill, [`MetadataType`](IcebergLayoutError::MetadataType) for
    /// a metadata column of the wrong type,
    /// [`MustBeOptional`](IcebergLayoutError::MustBeOptional) for a required
    /// `sub_sequence_number`,
    /// [`PartitionSource`](IcebergLayoutError::PartitionSource) for a
    /// partition field whose source is not a top-level primitive column,
    /// [`Iceberg`](IcebergLayoutError::Iceberg) when iceberg refuses the
    /// spec (e.g. `day` of a `string`).
    pub fn new(schema: SchemaRef, spec: PartitionSpecRef) -> Result<Self, IcebergLayoutError> {
        let mut sources = Vec::new();
        let mut payload = PayloadColumns::default();
        for field in schema.as_struct().fields() {
            let name = field.name.as_str();
            let primitive = match field.field_type.as_ref() {
                Type::Primitive(primitive) => primitive,
                nested if field.required => {
                    return Err(IcebergLayoutError::Unsupported {
                        column: field.name.clone(),
                        column_type: nested.to_string(),
                    });
                }
                _ => {
                    sources.push(Source::Null);
                    continue;
                }
            };
            let metadata_type = |expected: &'static str| IcebergLayoutError::MetadataType {
                column: field.name.clone(),
                expected,
                found: primitive.to_string(),
            };
            let source = match (name, primitive) {
                (SHARD_ID, PrimitiveType::String) => Source::ShardId,
                (SEQUENCE_NUMBER, PrimitiveType::String) => Source::SequenceNumber,
                (PARTITION_KEY, PrimitiveType::String) => Source::PartitionKey,
                (SHARD_ID | SEQUENCE_NUMBER | PARTITION_KEY, _) => {
                    return Err(metadata_type("string"));
                }
                (SUB_SEQUENCE_NUMBER, PrimitiveType::Long | PrimitiveType::Int) => {
                    if field.required {
                        return Err(IcebergLayoutError::MustBeOptional {
                            column: field.name.clone(),
                        });
                    }
                    Source::SubSequenceNumber
                }
                (SUB_SEQUENCE_NUMBER, _) => return Err(metadata_type("long or int")),
                (
                    APPROXIMATE_ARRIVAL_TIMESTAMP,
                    PrimitiveType::Timestamptz | PrimitiveType::Timestamp,
                ) => Source::Arrival,
                (APPROXIMATE_ARRIVAL_TIMESTAMP, _) => {
                    return Err(metadata_type("timestamptz or timestamp"));
                }
                (DATA, PrimitiveType::Binary) => Source::DataBytes,
                (DATA, PrimitiveType::String) => Source::DataText,
                (_, PrimitiveType::String) if field.doc.as_deref() == Some(JSON_COLUMN_DOC) => {
                    let index = payload.columns.len();
                    payload.by_name.insert(field.name.clone(), index);
                    payload.columns.push(PayloadColumn {
                        name: field.name.clone(),
                        cell_type: CellType::Json,
                        type_name: "json".to_owned(),
                        required: field.required,
                    });
                    Source::Payload(index)
                }
                _ => {
                    let cell_type = payload_cell_type(primitive).ok_or_else(|| {
                        IcebergLayoutError::Unsupported {
                            column: field.name.clone(),
                            column_type: primitive.to_string(),
                        }
                    })?;
                    let index = payload.columns.len();
                    payload.by_name.insert(field.name.clone(), index);
                    payload.columns.push(PayloadColumn {
                        name: field.name.clone(),
                        cell_type,
                        type_name: primitive.to_string(),
                        required: field.required,
                    });
                    Source::Payload(index)
                }
            };
            sources.push(source);
        }
        for partition_field in spec.fields() {
            let top_level_primitive = schema.as_struct().fields().iter().any(|field| {
                field.id == partition_field.source_id
                    && matches!(field.field_type.as_ref(), Type::Primitive(_))
            });
            if !top_level_primitive {
                return Err(IcebergLayoutError::PartitionSource {
                    field: partition_field.name.clone(),
                    source_id: partition_field.source_id,
                });
            }
        }
        // Checks each transform against its source type.
        spec.partition_type(&schema)?;
        if !spec.is_unpartitioned() {
            RecordBatchPartitionSplitter::try_new_with_computed_values(
                schema.clone(),
                spec.clone(),
            )?;
        }
        let arrow_schema = Arc::new(schema_to_arrow_schema(&schema)?);
        let built_schema = built_schema(&arrow_schema);
        // Every column filled (not always null) has a builder of its Arrow
        // type: what `IcebergBatch::new` relies on.
        for ((source, field), arrow_field) in sources
            .iter()
            .zip(schema.as_struct().fields())
            .zip(built_schema.fields())
        {
            if *source != Source::Null
                && ColumnBuilder::for_arrow(arrow_field.data_type()).is_none()
            {
                return Err(IcebergLayoutError::Unsupported {
                    column: field.name.clone(),
                    column_type: field.field_type.to_string(),
                });
            }
        }
        Ok(Self {
            schema,
            spec,
            arrow_schema,
            built_schema,
            sources,
            payload,
        })
    }

    /// The table's schema.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The table's partition spec.
    pub fn spec(&self) -> &PartitionSpecRef {
        &self.spec
    }

    /// The record batch of `columns` (one per top-level column, `None` for
    /// a column always null) holding `rows` rows, under [`built_schema`].
    ///
    /// # Errors
    /// Arrow's, when a column's length is not `rows` (none expected).
    fn record_batch(
        &self,
        columns: Vec<Option<ColumnBuilder>>,
        rows: usize,
    ) -> Result<RecordBatch, ArrowError> {
        let arrays: Vec<ArrayRef> = columns
            .into_iter()
            .zip(self.built_schema.fields())
            .map(|(builder, field)| match builder {
                Some(mut builder) => builder.finish(),
                None => new_null_array(field.data_type(), rows),
            })
            .collect();
        RecordBatch::try_new(self.built_schema.clone(), arrays)
    }

    /// The Arrow schema of the data files: `schema_to_arrow_schema` of the
    /// table's schema, each field with its `PARQUET:field_id`.
    #[cfg(test)]
    pub fn arrow_schema(&self) -> &arrow_schema::SchemaRef {
        &self.arrow_schema
    }
}

/// `files`, the Arrow schema of the data files, with each top-level
/// `LargeBinary` field (Iceberg `binary`) as `Binary`, its metadata (the
/// field id) kept: the schema of the columns as [`IcebergBatch`] builds
/// them. The `parquet` crate's writer takes a `Binary` array for a
/// `LargeBinary` field and writes the same `BYTE_ARRAY` values (its
/// `LevelInfoBuilder::types_compatible`; the encoders read either), so the
/// files are those of `files`; the builder copies 4-byte offsets instead
/// of 8, and a batch's `binary` column holds at most 2 GiB, as the
/// `parquet` format's `data` column.
fn built_schema(files: &arrow_schema::Schema) -> arrow_schema::SchemaRef {
    let fields: Fields = files
        .fields()
        .iter()
        .map(|field| match field.data_type() {
            DataType::LargeBinary => {
                Arc::new(field.as_ref().clone().with_data_type(DataType::Binary))
            }
            _ => field.clone(),
        })
        .collect();
    Arc::new(arrow_schema::Schema::new_with_metadata(
        fields,
        files.metadata().clone(),
    ))
}

/// The doc of a `string` column that holds a payload member's JSON text,
/// whatever its JSON type (a `json` column of `--parquet-schema`, in a table
/// shardsink creates): the member's compact JSON, as the `parquet` format
/// writes a `json` column. Any other `string` column takes JSON strings
/// only.
pub const JSON_COLUMN_DOC: &str = "JSON text of the payload member (any JSON value)";

/// What a payload column of Iceberg type `primitive` accepts, or `None`
/// when this writer does not fill that type.
fn payload_cell_type(primitive: &PrimitiveType) -> Option<CellType> {
    Some(match primitive {
        PrimitiveType::String => CellType::String,
        PrimitiveType::Boolean => CellType::Boolean,
        PrimitiveType::Int => CellType::Int32,
        PrimitiveType::Long => CellType::Int64,
        PrimitiveType::Float => CellType::Float32,
        PrimitiveType::Double => CellType::Float64,
        PrimitiveType::Date => CellType::Date,
        PrimitiveType::Timestamp | PrimitiveType::Timestamptz => CellType::TimestampMicros,
        PrimitiveType::Decimal { precision, scale } if *precision <= MAX_DECIMAL_PRECISION => {
            CellType::Decimal {
                precision: *precision,
                scale: *scale,
            }
        }
        PrimitiveType::Binary => CellType::Base64,
        PrimitiveType::Uuid => CellType::Uuid,
        _ => return None,
    })
}

/// A batch's user records being gathered into the table's columns, to be
/// split into one data file per partition value by
/// [`finish`](Self::finish).
#[derive(Debug)]
pub struct IcebergBatch {
    layout: Arc<IcebergLayout>,
    shard_id: String,
    /// One builder per table column, in schema order; `None` for a column
    /// always null.
    columns: Vec<Option<ColumnBuilder>>,
    rows: usize,
    memory_bytes: u64,
    ignored_fields: u64,
}

impl IcebergBatch {
    /// An empty batch of the records of shard `shard_id`, for the table
    /// `layout` describes.
    pub fn new(layout: Arc<IcebergLayout>, shard_id: &str) -> Self {
        let columns = layout
            .sources
            .iter()
            .zip(layout.built_schema.fields())
            .map(|(source, field)| match source {
                Source::Null => None,
                // Checked by `IcebergLayout::new`.
                _ => ColumnBuilder::for_arrow(field.data_type()),
            })
            .collect();
        Self {
            layout,
            shard_id: shard_id.to_owned(),
            columns,
            rows: 0,
            memory_bytes: 0,
            ignored_fields: 0,
        }
    }

    /// Appends `user` as one row.
    ///
    /// # Errors
    /// [`RejectReason::NotUtf8`] when the payload must be text (payload
    /// columns, or `data` of type `string`) and is not UTF-8;
    /// [`RejectReason::NotJsonObject`] when the table has payload columns
    /// and the payload is not exactly one JSON object;
    /// [`RejectReason::SchemaMismatch`] when a member does not have its
    /// column's type (`field "user_id" is a string, not long`) or a
    /// required column is missing or null (`required column "user_id" is
    /// missing or null`). A rejected record leaves the batch unchanged.
    pub fn push(&mut self, user: &UserRecordView<'_>) -> Result<(), Rejection> {
        let layout = &*self.layout;
        let mut row = if layout.payload.columns.is_empty() {
            None
        } else {
            Some(parse_row(&layout.payload, user.data)?)
        };
        if let Some(row) = &row {
            let missing = layout
                .payload
                .columns
                .iter()
                .zip(&row.cells)
                .find(|(column, cell)| column.required && **cell == Cell::Null);
            if let Some((column, _)) = missing {
                return Err(Rejection::new(
                    RejectReason::SchemaMismatch,
                    format!("required column {:?} is missing or null", column.name),
                ));
            }
        }
        let text = if layout.sources.contains(&Source::DataText) {
            Some(std::str::from_utf8(user.data).map_err(|err| {
                Rejection::new(
                    RejectReason::NotUtf8,
                    format!("payload is not UTF-8: {err}"),
                )
            })?)
        } else {
            None
        };
        let mut bytes = 0;
        for (source, builder) in layout.sources.iter().zip(&mut self.columns) {
            let Some(builder) = builder else {
                continue;
            };
            let cell = match *source {
                Source::ShardId => Cell::Text(Cow::Borrowed(user.shard_id)),
                Source::SequenceNumber => Cell::Text(Cow::Borrowed(user.sequence_number)),
                Source::PartitionKey => Cell::Text(Cow::Borrowed(user.partition_key)),
                // The index of a user record in an aggregate of at most
                // 1 MiB: always far below 2^31.
                Source::SubSequenceNumber => match (&*builder, user.sub_sequence_number) {
                    (_, None) => Cell::Null,
                    (ColumnBuilder::Int32(_), Some(sub)) => {
                        Cell::Int32(i32::try_from(sub).unwrap_or(i32::MAX))
                    }
                    (_, Some(sub)) => Cell::Int64(i64::try_from(sub).unwrap_or(i64::MAX)),
                },
                Source::Arrival => Cell::TimestampMicros(user.arrival_millis.saturating_mul(1000)),
                Source::DataBytes => Cell::Bytes(Cow::Borrowed(user.data)),
                Source::DataText => text.map_or(Cell::Null, |text| Cell::Text(Cow::Borrowed(text))),
                Source::Payload(index) => row
                    .as_mut()
                    .and_then(|row| row.cells.get_mut(index))
                    .map_or(Cell::Null, |cell| std::mem::replace(cell, Cell::Null)),
                Source::Null => Cell::Null,
            };
            bytes += builder.append(cell);
        }
        self.rows += 1;
        self.memory_bytes += bytes;
        self.ignored_fields += row.map_or(0, |row| row.ignored_members);
        Ok(())
    }

    /// Rows pushed so far.
    #[cfg(test)]
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Payload members, over all rows pushed so far, that no payload column
    /// reads (each skipped member of each row counts once; rejected records
    /// count none).
    pub fn ignored_fields(&self) -> u64 {
        self.ignored_fields
    }

    /// An estimate of the bytes the columns hold, kept as rows are pushed
    /// (constant time): each value's own bytes, plus 4 bytes of offset per
    /// variable-width value and the fixed width per null;
    /// null bitmaps are left out, as in the `parquet` format.
    pub fn memory_bytes(&self) -> u64 {
        self.memory_bytes
    }

    /// The rows as Parquet data files, one per distinct partition value, in
    /// ascending order of partition value; rows keep their push order
    /// within a file. Pages are compressed with `compression`. No rows give
    /// no files. The same rows, layout and compression always give the same
    /// files, byte for byte.
    ///
    /// # Errors
    /// A compression level out of its codec's range
    /// ([`IcebergBatchError::Parquet`]); errors of the partition transforms
    /// or the writer, none expected.
    pub fn finish(self, compression: Compression) -> Result<Vec<PartitionFile>, IcebergBatchError> {
        let Self {
            layout,
            shard_id,
            columns,
            rows,
            ..
        } = self;
        if rows == 0 {
            return Ok(Vec::new());
        }
        let batch =
            layout
                .record_batch(columns, rows)
                .map_err(|source| IcebergBatchError::Arrow {
                    shard_id: shard_id.clone(),
                    source,
                })?;
        let partition_error = |source| IcebergBatchError::Partition {
            shard_id: shard_id.clone(),
            source: Box::new(source),
        };
        let spec = &layout.spec;
        let groups = if spec.is_unpartitioned() {
            // No fields, or only `void` ones: every value null.
            let partition = spec.fields().iter().map(|_| None).collect::<Struct>();
            vec![(partition, batch)]
        } else {
            let splitter = RecordBatchPartitionSplitter::try_new_with_computed_values(
                layout.schema.clone(),
                spec.clone(),
            )
            .map_err(partition_error)?;
            if is_one_partition(&layout, &batch) {
                // The partition of the first row is every row's: split one
                // row for it, and keep the batch whole.
                let first = splitter
                    .split(&batch.slice(0, 1))
                    .map_err(partition_error)?
                    .into_iter()
                    .map(|(key, _)| key.data().clone());
                first.map(|partition| (partition, batch.clone())).collect()
            } else {
                splitter
                    .split(&batch)
                    .map_err(partition_error)?
                    .into_iter()
                    .map(|(key, batch)| (key.data().clone(), batch))
                    .collect()
            }
        };
        let mut files = groups
            .into_iter()
            .map(|(partition, batch)| {
                let partition_path = partition_path(&layout, &partition);
                (partition, partition_path, batch)
            })
            .collect::<Vec<_>>();
        files.sort_by(|(a, a_path, _), (b, b_path, _)| {
            compare_partitions(a, b).then_with(|| a_path.cmp(b_path))
        });
        let parquet_error = |source| IcebergBatchError::Parquet {
            shard_id: shard_id.clone(),
            source,
        };
        let properties = writer_properties(compression).map_err(parquet_error)?;
        files
            .into_iter()
            .map(|(partition, partition_path, batch)| {
                let (bytes, metadata) =
                    write_parquet(&layout.arrow_schema, &batch, properties.clone())
                        .map_err(parquet_error)?;
                Ok(PartitionFile {
                    partition,
                    partition_path,
                    record_count: batch.num_rows() as u64,
                    column_stats: ColumnStats::of(&metadata, &layout.schema),
                    bytes,
                })
            })
            .collect()
    }
}

/// Whether every row of `batch` falls in one partition, as far as can be
/// told cheaply: each partition field's transform of its (top-level)
/// source column gives one value, without nulls. Checked for the `int` and
/// `date` results of the time and truncate transforms; any other result
/// says no (iceberg's splitter then groups the rows). A batch's records
/// are most often of one arrival day or hour, and the splitter copies
/// every column of every row into the partition's batch.
fn is_one_partition(layout: &IcebergLayout, batch: &RecordBatch) -> bool {
    let fields = layout.schema.as_struct().fields();
    layout.spec.fields().iter().all(|field| {
        let Some(column) = fields
            .iter()
            .position(|source| source.id == field.source_id)
            .and_then(|at| batch.columns().get(at))
        else {
            return false;
        };
        let Ok(values) = create_transform_function(&field.transform)
            .and_then(|transform| transform.transform(column.clone()))
        else {
            return false;
        };
        values.null_count() == 0 && is_uniform(&values)
    })
}

/// Whether every value of `values` (an `Int32` or `Date32` array) is the
/// first one.
fn is_uniform(values: &ArrayRef) -> bool {
    fn same<T: Copy + PartialEq>(values: &[T]) -> bool {
        values
            .first()
            .is_none_or(|first| values.iter().all(|v| v == first))
    }
    if let Some(ints) = values.as_primitive_opt::<Int32Type>() {
        return same(ints.values());
    }
    if let Some(dates) = values.as_primitive_opt::<Date32Type>() {
        return same(dates.values());
    }
    false
}

/// The partition value `partition` as a path of `name=value` segments
/// joined by `/`, as Iceberg's Java and Python writers name partition
/// directories (Java `PartitionSpec.partitionToPath`, pyiceberg
/// `PartitionSpec.partition_to_path`): `year`, `month` and `hour` values as
/// `2026`, `2026-11`, `2026-11-28-05` (iceberg-rust's own
/// `partition_to_path` gives their ordinals: `56`, `682`, …), other values
/// as iceberg's `Transform::to_human_string` gives them (`day` as
/// `2026-11-28`, a null as `null`); names and values form-URL-encoded
/// (`URLEncoder`, UTF-8) so that a `/` in a value stays in its segment.
fn partition_path(layout: &IcebergLayout, partition: &Struct) -> String {
    let Ok(partition_type) = layout.spec.partition_type(&layout.schema) else {
        // Checked when the layout was made.
        return String::new();
    };
    layout
        .spec
        .fields()
        .iter()
        .zip(partition_type.fields())
        .zip(partition.iter())
        .map(|((field, result), value)| {
            let ordinal = match value {
                Some(Literal::Primitive(PrimitiveLiteral::Int(ordinal))) => Some(*ordinal),
                _ => None,
            };
            let human = match (&field.transform, ordinal) {
                (Transform::Year, Some(years)) => format!("{:04}", 1970 + i64::from(years)),
                (Transform::Month, Some(months)) => {
                    let months = i64::from(months);
                    format!(
                        "{:04}-{:02}",
                        1970 + months.div_euclid(12),
                        months.rem_euclid(12) + 1
                    )
                }
                (Transform::Hour, Some(hours)) => {
                    chrono::DateTime::from_timestamp(i64::from(hours) * 3600, 0).map_or_else(
                        || hours.to_string(),
                        |at| at.format("%Y-%m-%d-%H").to_string(),
                    )
                }
                (transform, _) => transform.to_human_string(&result.field_type, value),
            };
            format!(
                "{}={}",
                form_url_encode(&field.name),
                form_url_encode(&human)
            )
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// `text` form-URL-encoded as Java's `URLEncoder` does with UTF-8: ASCII
/// letters, digits and `.-*_` kept, a space as `+`, every other byte as
/// `%XX`.
fn form_url_encode(text: &str) -> Cow<'_, str> {
    let kept = |byte: u8| byte.is_ascii_alphanumeric() || b".-*_".contains(&byte);
    if text.bytes().all(kept) {
        return Cow::Borrowed(text);
    }
    let mut encoded = String::with_capacity(text.len() * 3);
    for byte in text.bytes() {
        match byte {
            b' ' => encoded.push('+'),
            byte if kept(byte) => encoded.push(char::from(byte)),
            byte => encoded.push_str(&format!("%{byte:02X}")),
        }
    }
    Cow::Owned(encoded)
}

/// `batch` as one Parquet file of Arrow schema `schema` written with
/// `properties`, and the file's footer as the writer made it (the same
/// metadata that parsing the footer back gives, without the parse).
fn write_parquet(
    schema: &arrow_schema::SchemaRef,
    batch: &RecordBatch,
    properties: ::parquet::file::properties::WriterProperties,
) -> Result<(Bytes, ParquetMetaData), ParquetError> {
    let mut bytes = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut bytes, schema.clone(), Some(properties))?;
    writer.write(batch)?;
    let metadata = writer.close()?;
    Ok((Bytes::from(bytes), metadata))
}

/// The order of partition values: field by field, a null before any
/// value, values in their natural order (numbers, text by bytes).
fn compare_partitions(a: &Struct, b: &Struct) -> Ordering {
    a.iter()
        .zip(b.iter())
        .map(|(a, b)| match (a, b) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Less,
            (Some(_), None) => Ordering::Greater,
            (Some(Literal::Primitive(a)), Some(Literal::Primitive(b))) => {
                a.partial_cmp(b).unwrap_or(Ordering::Equal)
            }
            // Transforms give primitive values only.
            (Some(_), Some(_)) => Ordering::Equal,
        })
        .find(|ordering| ordering.is_ne())
        .unwrap_or(Ordering::Equal)
}

/// Most characters of a string bound: Iceberg's default metrics mode,
/// `truncate(16)` (table property `write.metadata.metrics.default`).
const STRING_BOUND_CHARS: usize = 16;

/// Per-column metrics of a data file, keyed by Iceberg field id (leaf
/// columns), as a manifest's data file holds them (Iceberg spec,
/// "Manifests": `column_sizes`, `value_counts`, `null_value_counts`,
/// `lower_bounds`, `upper_bounds`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ColumnStats {
    /// Bytes of each column's chunks, compressed, headers included.
    pub column_sizes: HashMap<i32, u64>,
    /// Values of each column, nulls included.
    pub value_counts: HashMap<i32, u64>,
    /// Nulls of each column.
    pub null_value_counts: HashMap<i32, u64>,
    /// The least value of each top-level column of type `boolean`, `int`,
    /// `long`, `float`, `double`, `date`, `timestamp`, `timestamptz` or
    /// `string` that has a non-null value; a string's first 16 characters
    /// (as `truncate(16)`, Iceberg's default metrics mode).
    pub lower_bounds: HashMap<i32, Datum>,
    /// The greatest value of the same columns; a string longer than 16
    /// characters is cut to 16 with the last one incremented (left out
    /// when no character can be).
    pub upper_bounds: HashMap<i32, Datum>,
}

impl ColumnStats {
    /// The metrics of the file whose footer is `metadata`, written with
    /// `schema`; columns without a field id are left out.
    fn of(metadata: &ParquetMetaData, schema: &IcebergSchema) -> Self {
        let mut stats = Self::default();
        for row_group in metadata.row_groups() {
            for column in row_group.columns() {
                let info = column.column_descr().self_type().get_basic_info();
                if !info.has_id() {
                    continue;
                }
                let id = info.id();
                *stats.column_sizes.entry(id).or_default() +=
                    u64::try_from(column.compressed_size()).unwrap_or(0);
                *stats.value_counts.entry(id).or_default() +=
                    u64::try_from(column.num_values()).unwrap_or(0);
                let Some(statistics) = column.statistics() else {
                    continue;
                };
                if let Some(nulls) = statistics.null_count_opt() {
                    *stats.null_value_counts.entry(id).or_default() += nulls;
                }
                let primitive = schema
                    .as_struct()
                    .field_by_id(id)
                    .and_then(|field| field.field_type.as_primitive_type());
                let Some((lower, upper)) = primitive.and_then(|ty| bounds(ty, statistics)) else {
                    continue;
                };
                merge_bound(&mut stats.lower_bounds, id, lower, Ordering::Less);
                merge_bound(&mut stats.upper_bounds, id, upper, Ordering::Greater);
            }
        }
        stats
    }
}

/// Keeps in `bounds[id]` whichever of its value and `value` comes first in
/// `order` (`Less`: the least).
fn merge_bound(bounds: &mut HashMap<i32, Datum>, id: i32, value: Datum, order: Ordering) {
    match bounds.get(&id) {
        Some(kept) if kept.partial_cmp(&value) != Some(order.reverse()) => {}
        _ => {
            bounds.insert(id, value);
        }
    }
}

/// The lower and upper bounds of a column chunk of Iceberg type
/// `primitive` from its Parquet `statistics`, when both are known and the
/// type is one bounds are kept for.
fn bounds(primitive: &PrimitiveType, statistics: &Statistics) -> Option<(Datum, Datum)> {
    Some(match (primitive, statistics) {
        (PrimitiveType::Boolean, Statistics::Boolean(s)) => {
            (Datum::bool(*s.min_opt()?), Datum::bool(*s.max_opt()?))
        }
        (PrimitiveType::Int, Statistics::Int32(s)) => {
            (Datum::int(*s.min_opt()?), Datum::int(*s.max_opt()?))
        }
        (PrimitiveType::Date, Statistics::Int32(s)) => {
            (Datum::date(*s.min_opt()?), Datum::date(*s.max_opt()?))
        }
        (PrimitiveType::Long, Statistics::Int64(s)) => {
            (Datum::long(*s.min_opt()?), Datum::long(*s.max_opt()?))
        }
        (PrimitiveType::Timestamp, Statistics::Int64(s)) => (
            Datum::timestamp_micros(*s.min_opt()?),
            Datum::timestamp_micros(*s.max_opt()?),
        ),
        (PrimitiveType::Timestamptz, Statistics::Int64(s)) => (
            Datum::timestamptz_micros(*s.min_opt()?),
            Datum::timestamptz_micros(*s.max_opt()?),
        ),
        // Values are finite (the payload's numbers are checked), so the
        // bounds are never NaN.
        (PrimitiveType::Float, Statistics::Float(s)) => {
            (Datum::float(*s.min_opt()?), Datum::float(*s.max_opt()?))
        }
        (PrimitiveType::Double, Statistics::Double(s)) => {
            (Datum::double(*s.min_opt()?), Datum::double(*s.max_opt()?))
        }
        (PrimitiveType::String, Statistics::ByteArray(s)) => {
            let min = s.min_opt()?.as_utf8().ok()?;
            let max = s.max_opt()?.as_utf8().ok()?;
            (
                Datum::string(truncate_chars(min, STRING_BOUND_CHARS)),
                Datum::string(string_upper_bound(max, STRING_BOUND_CHARS)?),
            )
        }
        _ => return None,
    })
}

/// `text`'s first `chars` characters.
fn truncate_chars(text: &str, chars: usize) -> &str {
    text.char_indices()
        .nth(chars)
        .map_or(text, |(end, _)| &text[..end])
}

/// An upper bound of `max` of at most `chars` characters: `max` itself
/// when short enough, else its first `chars` characters with the last
/// that can be incremented incremented (and those after it dropped), as
/// Iceberg's `truncate(L)` metrics mode does; `None` when none can be.
fn string_upper_bound(max: &str, chars: usize) -> Option<String> {
    if max.chars().nth(chars).is_none() {
        return Some(max.to_owned());
    }
    let mut prefix: Vec<char> = max.chars().take(chars).collect();
    while let Some(last) = prefix.pop() {
        // The next code point, skipping the surrogates.
        let next = (u32::from(last) + 1..=u32::from(char::MAX)).find_map(char::from_u32);
        if let Some(next) = next {
            prefix.push(next);
            return Some(prefix.into_iter().collect());
        }
    }
    None
}

/// One Parquet data file of a batch: the rows of one partition value.
#[derive(Debug, Clone)]
pub struct PartitionFile {
    /// The partition value, one entry per field of the spec (the tuple a
    /// manifest entry's `partition` holds).
    pub partition: Struct,
    /// The partition as a path, as Iceberg's Java and Python writers name
    /// partition directories: `approximate_arrival_timestamp_day=2026-11-28`,
    /// `…_hour=2026-11-28-05`, `region=eu%2Fwest`; empty for a spec without
    /// fields.
    pub partition_path: String,
    /// Rows in the file.
    pub record_count: u64,
    /// The file's bytes.
    pub bytes: Bytes,
    /// The file's per-column metrics.
    pub column_stats: ColumnStats,
}

impl PartitionFile {
    /// The manifest entry's data file for this file once stored at `path`
    /// (a full URI, e.g. `s3://bucket/table/data/…parquet`), written for
    /// partition spec `spec_id`: content `data`, format Parquet, its size,
    /// rows, partition and column metrics ([`ColumnStats`]; Iceberg spec,
    /// "Manifests").
    ///
    /// # Errors
    /// None expected: every field the builder requires is set.
    pub fn data_file(&self, path: &str, spec_id: i32) -> Result<DataFile, DataFileBuilderError> {
        DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path(path.to_owned())
            .file_format(DataFileFormat::Parquet)
            .file_size_in_bytes(self.bytes.len() as u64)
            .record_count(self.record_count)
            .partition(self.partition.clone())
            .partition_spec_id(spec_id)
            .column_sizes(self.column_stats.column_sizes.clone())
            .value_counts(self.column_stats.value_counts.clone())
            .null_value_counts(self.column_stats.null_value_counts.clone())
            .lower_bounds(self.column_stats.lower_bounds.clone())
            .upper_bounds(self.column_stats.upper_bounds.clone())
            .build()
    }
}

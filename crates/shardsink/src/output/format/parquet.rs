//! The `parquet` format: [`ParquetBatch`], a batch's user records as the
//! rows of one Apache Parquet file, and the read-back used to compare and
//! audit such files ([`same_rows`], [`row_identities`]).
//!
//! # Columns
//! One row per user record (a plain Kinesis record, or one user record of a
//! KPL aggregate), in the order pushed. The columns, in this order:
//!
//! | column                          | Parquet type                          | Arrow type                       | null |
//! |---------------------------------|---------------------------------------|----------------------------------|------|
//! | `shard_id`                      | `BYTE_ARRAY` `STRING`                 | Utf8                             | no   |
//! | `sequence_number`               | `BYTE_ARRAY` `STRING`                 | Utf8                             | no   |
//! | `sub_sequence_number`           | `INT64`                               | Int64                            | outside KPL aggregates |
//! | `partition_key`                 | `BYTE_ARRAY` `STRING`                 | Utf8                             | no   |
//! | `approximate_arrival_timestamp` | `INT64` `TIMESTAMP(MILLIS, UTC)`      | Timestamp(Millisecond, "UTC")    | no   |
//! | `data`                          | `BYTE_ARRAY`                          | Binary                           | no   |
//!
//! The sequence number is decimal text: at up to 128 digits it fits no
//! Parquet integer or decimal type. With a [`ParquetSchema`], `data` is
//! replaced by the schema's columns, in schema order, read from the payload
//! (one JSON object); see the `schema` module for their types. A payload
//! that does not fit the schema is rejected with a [`Rejection`] and the
//! record goes to the error prefix instead.
//!
//! # Determinism
//! The bytes of a file are a pure function of its rows, the schema and the
//! [`Compression`] (for a given version of the `parquet` crate): the writer's
//! `created_by` is the fixed text [`CREATED_BY`] without a version, and
//! nothing in the file comes from the clock or a random source (no
//! encryption, no bloom filters; dictionary pages list values in the order
//! they first appear, whatever the seed of the writer's hash table).
//! A replayed batch therefore gives the same bytes, and when it does not
//! (after an upgrade of the writer) [`same_rows`] still recognises the rows.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use ::parquet::arrow::arrow_reader::{
    ArrowReaderOptions, ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder,
};
use ::parquet::arrow::{ArrowWriter, ProjectionMask};
use ::parquet::basic::{Compression as PageCompression, GzipLevel, ZstdLevel};
use ::parquet::errors::ParquetError;
use ::parquet::file::properties::{WriterProperties, WriterVersion};
use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Date32Builder, Float32Builder, Float64Builder, Int32Builder,
    Int64Builder, StringBuilder, TimestampMillisecondBuilder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use bytes::Bytes;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::schema::{ColumnType, ParquetSchema, SchemaColumn};
use crate::output::compression::Compression;
use crate::output::view::{RejectReason, Rejection, UserRecordView};

/// Column: the shard the record was read from.
pub const SHARD_ID: &str = "shard_id";
/// Column: the Kinesis record's sequence number, decimal text.
pub const SEQUENCE_NUMBER: &str = "sequence_number";
/// Column: the user record's index in its KPL aggregate; null outside KPL.
pub const SUB_SEQUENCE_NUMBER: &str = "sub_sequence_number";
/// Column: the (user) record's partition key.
pub const PARTITION_KEY: &str = "partition_key";
/// Column: `ApproximateArrivalTimestamp`, UTC milliseconds.
pub const APPROXIMATE_ARRIVAL_TIMESTAMP: &str = "approximate_arrival_timestamp";
/// Column: the payload bytes, written when there is no schema.
pub const DATA: &str = "data";
/// The metadata columns, first in every file in this order; a schema column
/// may not take one of these names.
pub const METADATA_COLUMNS: [&str; 5] = [
    SHARD_ID,
    SEQUENCE_NUMBER,
    SUB_SEQUENCE_NUMBER,
    PARTITION_KEY,
    APPROXIMATE_ARRIVAL_TIMESTAMP,
];

/// The `created_by` of every file: fixed, with no version, so that the
/// bytes do not change with the build.
pub const CREATED_BY: &str = "shardsink";

/// Most rows in one row group: 2^20. A file holds at most tens of MiB, so it
/// is normally one row group, which readers (Athena, Spark, DuckDB) handle
/// best.
pub const MAX_ROW_GROUP_ROWS: usize = 1 << 20;

/// The time zone of the arrival and `timestamp` columns.
const UTC: &str = "UTC";

/// Bytes a variable-width value costs besides its own: its 4-byte offset.
const OFFSET_BYTES: u64 = 4;

/// Days from 0001-01-01 (day 1 of the common era) to 1970-01-01.
const UNIX_EPOCH_DAYS_FROM_CE: i32 = 719_163;

/// How much of a text value a rejection message quotes, in characters.
const EXCERPT_CHARS: usize = 40;

/// The Arrow schema of the files written with `schema`: the five
/// [`METADATA_COLUMNS`], then `data` (Binary, not null) without a schema,
/// or the schema's columns (all nullable) in schema order.
pub fn arrow_schema(schema: Option<&ParquetSchema>) -> SchemaRef {
    let mut fields = vec![
        Field::new(SHARD_ID, DataType::Utf8, false),
        Field::new(SEQUENCE_NUMBER, DataType::Utf8, false),
        Field::new(SUB_SEQUENCE_NUMBER, DataType::Int64, true),
        Field::new(PARTITION_KEY, DataType::Utf8, false),
        Field::new(APPROXIMATE_ARRIVAL_TIMESTAMP, timestamp_type(), false),
    ];
    match schema {
        None => fields.push(Field::new(DATA, DataType::Binary, false)),
        Some(schema) => fields.extend(
            schema
                .columns()
                .iter()
                .map(|column| Field::new(&column.name, data_type(column.column_type), true)),
        ),
    }
    Arc::new(Schema::new(fields))
}

/// Timestamp(Millisecond, "UTC").
fn timestamp_type() -> DataType {
    DataType::Timestamp(TimeUnit::Millisecond, Some(UTC.into()))
}

/// The Arrow type a schema column is written as.
fn data_type(column_type: ColumnType) -> DataType {
    match column_type {
        ColumnType::String | ColumnType::Json => DataType::Utf8,
        ColumnType::Boolean => DataType::Boolean,
        ColumnType::Int32 => DataType::Int32,
        ColumnType::Int64 => DataType::Int64,
        ColumnType::Float32 => DataType::Float32,
        ColumnType::Float64 => DataType::Float64,
        ColumnType::Timestamp => timestamp_type(),
        ColumnType::Date => DataType::Date32,
    }
}

/// The writer settings of every file, with pages compressed by
/// `compression`.
///
/// # Errors
/// A gzip level above 9 or a zstd level above 22.
fn writer_properties(compression: Compression) -> Result<WriterProperties, ParquetError> {
    let codec = match compression {
        Compression::None => PageCompression::UNCOMPRESSED,
        Compression::Gzip(level) => PageCompression::GZIP(GzipLevel::try_new(level)?),
        Compression::Zstd(level) => PageCompression::ZSTD(ZstdLevel::try_new(level)?),
    };
    Ok(WriterProperties::builder()
        .set_created_by(CREATED_BY.to_owned())
        // Format version 1.0 (data page v1, PLAIN and dictionary encodings
        // only) rather than 2.0's delta encodings and v2 data pages: every
        // reader of the archive (Athena, Spark, DuckDB, older Hive and
        // Presto readers) reads 1.0 pages, not all read 2.0 ones. Logical
        // types (STRING, TIMESTAMP, DATE) are written either way.
        .set_writer_version(WriterVersion::PARQUET_1_0)
        .set_compression(codec)
        .set_max_row_group_row_count(Some(MAX_ROW_GROUP_ROWS))
        .set_max_row_group_bytes(None)
        .build())
}

/// A batch's user records being gathered into the columns of one Parquet
/// file (see the module documentation for the columns).
#[derive(Debug)]
pub struct ParquetBatch {
    /// Boxed: the builders are large inline, and a batch is moved about
    /// as a variant of the body beside a plain byte vector.
    columns: Box<Columns>,
    rows: usize,
    memory_bytes: u64,
}

/// The builders of the columns, in file order.
#[derive(Debug)]
struct Columns {
    shard_id: StringBuilder,
    sequence_number: StringBuilder,
    sub_sequence_number: Int64Builder,
    partition_key: StringBuilder,
    arrival: TimestampMillisecondBuilder,
    payload: Payload,
}

/// The payload's columns.
#[derive(Debug)]
enum Payload {
    /// The bytes as they are, in `data`.
    Data(BinaryBuilder),
    /// The schema's columns, one builder per schema column, in order.
    Typed {
        schema: Arc<ParquetSchema>,
        columns: Vec<ColumnBuilder>,
    },
}

impl ParquetBatch {
    /// An empty batch: payloads in a `data` column without a schema, or as
    /// the schema's typed columns.
    pub fn new(schema: Option<Arc<ParquetSchema>>) -> Self {
        let payload = match schema {
            None => Payload::Data(BinaryBuilder::with_capacity(0, 0)),
            Some(schema) => {
                let columns = schema
                    .columns()
                    .iter()
                    .map(|column| ColumnBuilder::new(column.column_type))
                    .collect();
                Payload::Typed { schema, columns }
            }
        };
        Self {
            columns: Box::new(Columns {
                shard_id: StringBuilder::with_capacity(0, 0),
                sequence_number: StringBuilder::with_capacity(0, 0),
                sub_sequence_number: Int64Builder::with_capacity(0),
                partition_key: StringBuilder::with_capacity(0, 0),
                arrival: TimestampMillisecondBuilder::with_capacity(0).with_timezone(UTC),
                payload,
            }),
            rows: 0,
            memory_bytes: 0,
        }
    }

    /// Appends `record` as one row.
    ///
    /// # Errors
    /// Only with a schema: [`RejectReason::NotUtf8`] when the payload is not
    /// UTF-8, [`RejectReason::NotJsonObject`] when it is not exactly one
    /// JSON object, [`RejectReason::SchemaMismatch`] when a member named by
    /// the schema does not have its column's type (the message names the
    /// member, the type and what was found, e.g. `field "user_id" is a
    /// string, not int64`). The whole payload is checked before any column
    /// is appended to, so a rejected record leaves the batch unchanged.
    pub fn push(&mut self, record: &UserRecordView<'_>) -> Result<(), Rejection> {
        let columns = &mut *self.columns;
        let payload_bytes = match &mut columns.payload {
            Payload::Data(data) => {
                data.append_value(record.data);
                record.data.len() as u64 + OFFSET_BYTES
            }
            Payload::Typed {
                schema,
                columns: typed,
            } => {
                let cells = parse_row(schema, record.data)?;
                typed
                    .iter_mut()
                    .zip(cells)
                    .map(|(column, cell)| column.append(cell))
                    .sum()
            }
        };
        columns.shard_id.append_value(record.shard_id);
        columns.sequence_number.append_value(record.sequence_number);
        // The index of a user record in an aggregate of at most 1 MiB:
        // always far below 2^63.
        columns.sub_sequence_number.append_option(
            record
                .sub_sequence_number
                .map(|sub| i64::try_from(sub).unwrap_or(i64::MAX)),
        );
        columns.partition_key.append_value(record.partition_key);
        columns.arrival.append_value(record.arrival_millis);
        self.rows += 1;
        self.memory_bytes += payload_bytes
            + record.shard_id.len() as u64
            + record.sequence_number.len() as u64
            + record.partition_key.len() as u64
            + 3 * OFFSET_BYTES
            + 8 // sub_sequence_number
            + 8; // approximate_arrival_timestamp
        Ok(())
    }

    /// Rows pushed so far.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// An estimate of the bytes the columns hold, kept as rows are pushed
    /// (constant time): each value's own bytes, plus 4 bytes of offset per
    /// variable-width value and the fixed width (1, 4 or 8 bytes) per
    /// null; null bitmaps (a bit a value) are left out. The builders start
    /// empty and grow their buffers by doubling, so what they allocate
    /// stays below about twice this.
    pub fn memory_bytes(&self) -> u64 {
        self.memory_bytes
    }

    /// The rows as one Parquet file, its pages compressed with
    /// `compression` (`None`: UNCOMPRESSED; `Gzip(level)`: GZIP;
    /// `Zstd(level)`: ZSTD). A batch without rows gives a valid file with
    /// the columns and no rows. The same rows, schema and compression
    /// always give the same bytes.
    ///
    /// # Errors
    /// A level out of its codec's range (gzip above 9, zstd above 22);
    /// errors of the writer, none expected when writing to memory.
    pub fn finish(self, compression: Compression) -> Result<Vec<u8>, ParquetError> {
        self.write(writer_properties(compression)?)
    }

    /// The file written with `properties`.
    fn write(self, properties: WriterProperties) -> Result<Vec<u8>, ParquetError> {
        let mut builders = *self.columns;
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(builders.shard_id.finish()),
            Arc::new(builders.sequence_number.finish()),
            Arc::new(builders.sub_sequence_number.finish()),
            Arc::new(builders.partition_key.finish()),
            Arc::new(builders.arrival.finish()),
        ];
        let schema = match &mut builders.payload {
            Payload::Data(data) => {
                columns.push(Arc::new(data.finish()));
                arrow_schema(None)
            }
            Payload::Typed {
                schema,
                columns: typed,
            } => {
                columns.extend(typed.iter_mut().map(ColumnBuilder::finish));
                arrow_schema(Some(schema))
            }
        };
        let batch = RecordBatch::try_new(schema.clone(), columns)?;
        let mut writer = ArrowWriter::try_new(Vec::new(), schema, Some(properties))?;
        writer.write(&batch)?;
        writer.into_inner()
    }
}

/// Whether two Parquet files hold the same rows: the same column names,
/// types and nullability in the same order, and the same values (nulls
/// included) in the same row order — whatever their row groups, pages,
/// page compression, `created_by` or key-value metadata. Types are compared
/// as the Parquet schema gives them (the embedded Arrow schema is ignored).
///
/// Reads both files a batch at a time; `existing` is typically the object
/// already in S3 under the key, `ours` the body we meant to put there.
///
/// # Errors
/// When either is not a readable Parquet file.
pub fn same_rows(existing: Bytes, ours: Bytes) -> Result<bool, ParquetError> {
    compare_rows(existing, ours, COMPARE_BATCH_ROWS, COMPARE_BATCH_ROWS)
}

/// Rows read at a time by [`same_rows`].
const COMPARE_BATCH_ROWS: usize = 1024;

/// [`same_rows`], reading each file `existing_batch` and `ours_batch` rows
/// at a time.
fn compare_rows(
    existing: Bytes,
    ours: Bytes,
    existing_batch: usize,
    ours_batch: usize,
) -> Result<bool, ParquetError> {
    let existing = reader(existing)?.with_batch_size(existing_batch);
    let ours = reader(ours)?.with_batch_size(ours_batch);
    if existing.metadata().file_metadata().num_rows() != ours.metadata().file_metadata().num_rows()
        || !same_columns(existing.schema(), ours.schema())
    {
        return Ok(false);
    }
    let mut existing = Rows::new(existing.build()?);
    let mut ours = Rows::new(ours.build()?);
    loop {
        match (existing.remaining()?, ours.remaining()?) {
            (None, None) => return Ok(true),
            (Some(a), Some(b)) => {
                let n = a.min(b);
                match (existing.take(n), ours.take(n)) {
                    (Some(a), Some(b)) if same_values(&a, &b) => {}
                    _ => return Ok(false),
                }
            }
            _ => return Ok(false),
        }
    }
}

/// The (`sequence_number`, `sub_sequence_number`) of every row of a file
/// written by [`ParquetBatch::finish`], in row order, reading only those
/// two columns. `sub_sequence_number` is `None` outside KPL aggregates.
///
/// # Errors
/// When `body` is not a readable Parquet file, lacks either column, or
/// they do not have the types written (Utf8 and Int64), or a sequence
/// number is null.
pub fn row_identities(body: Bytes) -> Result<Vec<(String, Option<i64>)>, ParquetError> {
    let builder = reader(body)?;
    let rows = usize::try_from(builder.metadata().file_metadata().num_rows()).unwrap_or(0);
    let descriptor = builder.parquet_schema();
    let mut leaves = Vec::with_capacity(2);
    for name in [SEQUENCE_NUMBER, SUB_SEQUENCE_NUMBER] {
        let index = descriptor
            .columns()
            .iter()
            .position(|column| column.path().parts() == [name])
            .ok_or_else(|| ParquetError::General(format!("the file has no {name:?} column")))?;
        leaves.push(index);
    }
    let mask = ProjectionMask::leaves(descriptor, leaves);
    // The footer's count, trusted only so far.
    let mut identities = Vec::with_capacity(rows.min(MAX_ROW_GROUP_ROWS));
    for batch in builder.with_projection(mask).build()? {
        let batch = batch?;
        let sequence_numbers = batch
            .column_by_name(SEQUENCE_NUMBER)
            .and_then(|column| column.as_string_opt::<i32>())
            .ok_or_else(|| wrong_type(SEQUENCE_NUMBER, "Utf8"))?;
        let sub_sequence_numbers = batch
            .column_by_name(SUB_SEQUENCE_NUMBER)
            .and_then(|column| column.as_primitive_opt::<Int64Type>())
            .ok_or_else(|| wrong_type(SUB_SEQUENCE_NUMBER, "Int64"))?;
        for row in 0..batch.num_rows() {
            if sequence_numbers.is_null(row) {
                return Err(ParquetError::General(format!(
                    "a row of the file has a null {SEQUENCE_NUMBER:?}"
                )));
            }
            identities.push((
                sequence_numbers.value(row).to_owned(),
                sub_sequence_numbers
                    .is_valid(row)
                    .then(|| sub_sequence_numbers.value(row)),
            ));
        }
    }
    Ok(identities)
}

/// A reader of `body` that types its columns from the Parquet schema alone.
fn reader(body: Bytes) -> Result<ParquetRecordBatchReaderBuilder<Bytes>, ParquetError> {
    ParquetRecordBatchReaderBuilder::try_new_with_options(
        body,
        ArrowReaderOptions::new().with_skip_arrow_metadata(true),
    )
}

fn wrong_type(column: &str, expected: &str) -> ParquetError {
    ParquetError::General(format!("the {column:?} column is not {expected}"))
}

/// Same names, types and nullability, in the same order.
fn same_columns(a: &Schema, b: &Schema) -> bool {
    a.fields().len() == b.fields().len()
        && a.fields().iter().zip(b.fields()).all(|(a, b)| {
            a.name() == b.name()
                && a.data_type() == b.data_type()
                && a.is_nullable() == b.is_nullable()
        })
}

/// Same values in every column (batches of equal length).
fn same_values(a: &RecordBatch, b: &RecordBatch) -> bool {
    a.num_rows() == b.num_rows()
        && a.num_columns() == b.num_columns()
        && a.columns()
            .iter()
            .zip(b.columns())
            .all(|(a, b)| a.as_ref() == b.as_ref())
}

/// A file's rows, consumed a slice at a time whatever its batch sizes.
struct Rows {
    reader: ParquetRecordBatchReader,
    batch: Option<RecordBatch>,
    /// Rows of `batch` already taken.
    offset: usize,
}

impl Rows {
    fn new(reader: ParquetRecordBatchReader) -> Self {
        Self {
            reader,
            batch: None,
            offset: 0,
        }
    }

    /// Rows left in the current batch, reading the next non-empty batch when
    /// it is used up; `None` at the end of the file.
    fn remaining(&mut self) -> Result<Option<usize>, ParquetError> {
        loop {
            if let Some(batch) = &self.batch
                && self.offset < batch.num_rows()
            {
                return Ok(Some(batch.num_rows() - self.offset));
            }
            match self.reader.next() {
                None => {
                    self.batch = None;
                    return Ok(None);
                }
                Some(batch) => {
                    self.batch = Some(batch?);
                    self.offset = 0;
                }
            }
        }
    }

    /// The next `n` rows (at most [`remaining`](Self::remaining)).
    fn take(&mut self, n: usize) -> Option<RecordBatch> {
        let slice = self.batch.as_ref()?.slice(self.offset, n);
        self.offset += n;
        Some(slice)
    }
}

/// The builder of one schema column.
#[derive(Debug)]
enum ColumnBuilder {
    /// `string` and `json`.
    Utf8(StringBuilder),
    Boolean(BooleanBuilder),
    Int32(Int32Builder),
    Int64(Int64Builder),
    Float32(Float32Builder),
    Float64(Float64Builder),
    Timestamp(TimestampMillisecondBuilder),
    Date(Date32Builder),
}

impl ColumnBuilder {
    /// An empty builder (no capacity reserved) of a column of
    /// `column_type`.
    fn new(column_type: ColumnType) -> Self {
        match column_type {
            ColumnType::String | ColumnType::Json => Self::Utf8(StringBuilder::with_capacity(0, 0)),
            ColumnType::Boolean => Self::Boolean(BooleanBuilder::with_capacity(0)),
            ColumnType::Int32 => Self::Int32(Int32Builder::with_capacity(0)),
            ColumnType::Int64 => Self::Int64(Int64Builder::with_capacity(0)),
            ColumnType::Float32 => Self::Float32(Float32Builder::with_capacity(0)),
            ColumnType::Float64 => Self::Float64(Float64Builder::with_capacity(0)),
            ColumnType::Timestamp => {
                Self::Timestamp(TimestampMillisecondBuilder::with_capacity(0).with_timezone(UTC))
            }
            ColumnType::Date => Self::Date(Date32Builder::with_capacity(0)),
        }
    }

    /// Appends `cell` (made for this column's type); the bytes it adds.
    fn append(&mut self, cell: Cell<'_>) -> u64 {
        match (self, cell) {
            (Self::Utf8(builder), Cell::Text(text)) => {
                builder.append_value(&text);
                text.len() as u64 + OFFSET_BYTES
            }
            (Self::Boolean(builder), Cell::Bool(value)) => {
                builder.append_value(value);
                1
            }
            (Self::Int32(builder), Cell::Int32(value)) => {
                builder.append_value(value);
                4
            }
            (Self::Int64(builder), Cell::Int64(value)) => {
                builder.append_value(value);
                8
            }
            (Self::Float32(builder), Cell::Float32(value)) => {
                builder.append_value(value);
                4
            }
            (Self::Float64(builder), Cell::Float64(value)) => {
                builder.append_value(value);
                8
            }
            (Self::Timestamp(builder), Cell::TimestampMillis(value)) => {
                builder.append_value(value);
                8
            }
            (Self::Date(builder), Cell::Date(days)) => {
                builder.append_value(days);
                4
            }
            (builder, cell) => {
                // Cells are made for their column's type (`cell`), so only
                // a null gets here.
                debug_assert_eq!(cell, Cell::Null, "a cell of another column's type");
                builder.append_null()
            }
        }
    }

    /// Appends a null; the bytes it adds.
    fn append_null(&mut self) -> u64 {
        match self {
            Self::Utf8(builder) => {
                builder.append_null();
                OFFSET_BYTES
            }
            Self::Boolean(builder) => {
                builder.append_null();
                1
            }
            Self::Int32(builder) => {
                builder.append_null();
                4
            }
            Self::Int64(builder) => {
                builder.append_null();
                8
            }
            Self::Float32(builder) => {
                builder.append_null();
                4
            }
            Self::Float64(builder) => {
                builder.append_null();
                8
            }
            Self::Timestamp(builder) => {
                builder.append_null();
                8
            }
            Self::Date(builder) => {
                builder.append_null();
                4
            }
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            Self::Utf8(builder) => Arc::new(builder.finish()),
            Self::Boolean(builder) => Arc::new(builder.finish()),
            Self::Int32(builder) => Arc::new(builder.finish()),
            Self::Int64(builder) => Arc::new(builder.finish()),
            Self::Float32(builder) => Arc::new(builder.finish()),
            Self::Float64(builder) => Arc::new(builder.finish()),
            Self::Timestamp(builder) => Arc::new(builder.finish()),
            Self::Date(builder) => Arc::new(builder.finish()),
        }
    }
}

/// One schema column's value of one row, checked and converted.
#[derive(Debug, Clone, PartialEq)]
enum Cell<'a> {
    Null,
    Bool(bool),
    Int32(i32),
    Int64(i64),
    Float32(f32),
    Float64(f64),
    /// `string` text, or a `json` value's compact text.
    Text(Cow<'a, str>),
    /// `timestamp`: UTC milliseconds since the epoch.
    TimestampMillis(i64),
    /// `date`: days since 1970-01-01.
    Date(i32),
}

/// The schema's cells of a payload, one per schema column.
fn parse_row<'d>(schema: &ParquetSchema, data: &'d [u8]) -> Result<Vec<Cell<'d>>, Rejection> {
    let text = std::str::from_utf8(data).map_err(|err| {
        Rejection::new(
            RejectReason::NotUtf8,
            format!("payload is not UTF-8: {err}"),
        )
    })?;
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let row = RowSeed { schema }
        .deserialize(&mut deserializer)
        .and_then(|row| deserializer.end().map(|()| row));
    match row {
        Err(err) => Err(Rejection::new(
            RejectReason::NotJsonObject,
            format!("payload is not a JSON object: {err}"),
        )),
        Ok(Err((index, mismatch))) => Err(Rejection::new(
            RejectReason::SchemaMismatch,
            match schema.columns().get(index) {
                Some(column) => mismatch.message(column),
                None => mismatch.found,
            },
        )),
        Ok(Ok(cells)) => Ok(cells),
    }
}

/// Why a member does not fit its column.
#[derive(Debug)]
struct Mismatch {
    /// What the member holds: "a string", "the number 1.5", …
    found: String,
    /// A number of the right kind, but too large for the type.
    out_of_range: bool,
}

impl Mismatch {
    fn not(found: impl Into<String>) -> Self {
        Self {
            found: found.into(),
            out_of_range: false,
        }
    }

    fn out_of_range(found: String) -> Self {
        Self {
            found,
            out_of_range: true,
        }
    }

    /// `field "user_id" is a string, not int64`.
    fn message(&self, column: &SchemaColumn) -> String {
        let name = &column.name;
        let found = &self.found;
        let column_type = column.column_type;
        if self.out_of_range {
            return format!("field {name:?} is {found}, out of {column_type}'s range");
        }
        let expected = match column_type {
            ColumnType::Timestamp => "timestamp (RFC 3339 text or integer epoch milliseconds)",
            ColumnType::Date => "date (YYYY-MM-DD)",
            other => other.name(),
        };
        format!("field {name:?} is {found}, not {expected}")
    }
}

/// The top-level object of a payload: its cells, or the first member that
/// does not fit (its column index). Members the schema does not name are
/// skipped unread; a member given twice counts as its last value, each
/// value having to fit.
struct RowSeed<'s> {
    schema: &'s ParquetSchema,
}

type RowResult<'de> = Result<Vec<Cell<'de>>, (usize, Mismatch)>;

impl<'de> DeserializeSeed<'de> for RowSeed<'_> {
    type Value = RowResult<'de>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for RowSeed<'_> {
    type Value = RowResult<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let columns = self.schema.columns();
        let mut cells = vec![Cell::Null; columns.len()];
        // Reported only once the whole payload has parsed: invalid JSON
        // later on makes it `NotJsonObject` instead.
        let mut mismatch = None;
        while let Some(Text(key)) = map.next_key()? {
            let Some((index, column)) = self
                .schema
                .column_index(&key)
                .and_then(|index| Some((index, columns.get(index)?)))
            else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            // The value's JSON text, validated but not yet converted.
            let raw: &'de RawValue = map.next_value()?;
            match (cell(column.column_type, raw.get()), cells.get_mut(index)) {
                (Ok(cell), Some(slot)) => *slot = cell,
                (Err(found), _) => {
                    mismatch.get_or_insert((index, found));
                }
                (Ok(_), None) => {}
            }
        }
        Ok(match mismatch {
            Some(mismatch) => Err(mismatch),
            None => Ok(cells),
        })
    }
}

/// A JSON string's value (a member name, or a string member), borrowed
/// from the payload when it has no escapes.
struct Text<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Text<'de> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }

            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(TextVisitor)
    }
}

/// A member's value, `raw` (valid JSON text without surrounding
/// whitespace), as a cell of a column of `column_type`. Numbers are
/// converted from their text, so floats are correctly rounded and integers
/// exact.
fn cell(column_type: ColumnType, raw: &str) -> Result<Cell<'_>, Mismatch> {
    match raw.as_bytes().first() {
        Some(b'n') => Ok(Cell::Null),
        _ if column_type == ColumnType::Json => Ok(Cell::Text(compact_json(raw))),
        Some(b't') => boolean(column_type, true),
        Some(b'f') => boolean(column_type, false),
        Some(b'"') => string(column_type, raw),
        Some(b'[') => Err(Mismatch::not("an array")),
        Some(b'{') => Err(Mismatch::not("an object")),
        _ => number(column_type, raw),
    }
}

fn boolean<'a>(column_type: ColumnType, value: bool) -> Result<Cell<'a>, Mismatch> {
    match column_type {
        ColumnType::Boolean => Ok(Cell::Bool(value)),
        _ => Err(Mismatch::not("a boolean")),
    }
}

/// `raw`: a JSON string.
fn string(column_type: ColumnType, raw: &str) -> Result<Cell<'_>, Mismatch> {
    if !matches!(
        column_type,
        ColumnType::String | ColumnType::Timestamp | ColumnType::Date
    ) {
        return Err(Mismatch::not("a string"));
    }
    let Ok(Text(text)) = serde_json::from_str::<Text<'_>>(raw) else {
        // Cannot happen: `raw` was read as JSON.
        return Err(Mismatch::not("a string"));
    };
    let unparsed = |text: &str| Mismatch::not(format!("the string {:?}", cut(text)));
    match column_type {
        ColumnType::Timestamp => chrono::DateTime::parse_from_rfc3339(&text)
            .map(|at| Cell::TimestampMillis(at.timestamp_millis()))
            .map_err(|_| unparsed(&text)),
        ColumnType::Date => parse_date(&text)
            .map(Cell::Date)
            .ok_or_else(|| unparsed(&text)),
        _ => Ok(Cell::Text(text)),
    }
}

/// `raw`: a JSON number.
fn number(column_type: ColumnType, raw: &str) -> Result<Cell<'_>, Mismatch> {
    let found = || format!("the number {}", cut(raw));
    // JSON text without fraction or exponent.
    let integer = !raw.contains(['.', 'e', 'E']);
    let result = match column_type {
        ColumnType::Int32 if integer => raw.parse().map(Cell::Int32).ok(),
        ColumnType::Int64 if integer => raw.parse().map(Cell::Int64).ok(),
        ColumnType::Timestamp if integer => raw.parse().map(Cell::TimestampMillis).ok(),
        ColumnType::Float32 => raw
            .parse::<f32>()
            .ok()
            .filter(|value| value.is_finite())
            .map(Cell::Float32),
        ColumnType::Float64 => raw
            .parse::<f64>()
            .ok()
            .filter(|value| value.is_finite())
            .map(Cell::Float64),
        _ => return Err(Mismatch::not(found())),
    };
    // The right kind of number, but too large for the type.
    result.ok_or_else(|| Mismatch::out_of_range(found()))
}

/// `raw` (valid JSON) without the whitespace outside strings: the value's
/// compact text, member order and numbers as written.
fn compact_json(raw: &str) -> Cow<'_, str> {
    let is_space = |c: char| matches!(c, ' ' | '\t' | '\n' | '\r');
    if !raw.contains(is_space) {
        return Cow::Borrowed(raw);
    }
    let mut compact = String::with_capacity(raw.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in raw.chars() {
        if in_string {
            compact.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if !is_space(c) {
            in_string = c == '"';
            compact.push(c);
        }
    }
    Cow::Owned(compact)
}

/// Days since 1970-01-01 of exactly `YYYY-MM-DD` (a real date).
fn parse_date(text: &str) -> Option<i32> {
    let bytes = text.as_bytes();
    if bytes.len() != 10 || bytes.get(4) != Some(&b'-') || bytes.get(7) != Some(&b'-') {
        return None;
    }
    let digits = |range: std::ops::Range<usize>| -> Option<u32> {
        text.get(range)
            .filter(|part| part.bytes().all(|b| b.is_ascii_digit()))?
            .parse()
            .ok()
    };
    let year = i32::try_from(digits(0..4)?).ok()?;
    let date = chrono::NaiveDate::from_ymd_opt(year, digits(5..7)?, digits(8..10)?)?;
    Some(chrono::Datelike::num_days_from_ce(&date) - UNIX_EPOCH_DAYS_FROM_CE)
}

/// `text` cut to its first [`EXCERPT_CHARS`] characters, with `…` when
/// cut, for messages.
fn cut(text: &str) -> Cow<'_, str> {
    match text.char_indices().nth(EXCERPT_CHARS) {
        None => Cow::Borrowed(text),
        Some((end, _)) => Cow::Owned(format!("{}…", &text[..end])),
    }
}

#[cfg(test)]
mod tests {
    use ::parquet::file::reader::{FileReader, SerializedFileReader};
    use arrow_array::types::{
        Date32Type, Float32Type, Float64Type, Int32Type, TimestampMillisecondType,
    };
    use proptest::prelude::*;

    use super::*;

    const SHARD: &str = "shardId-000000000001";
    /// 2026-11-21T05:27:03.045Z.
    const ARRIVAL: i64 = 1_795_238_823_045;

    fn view<'a>(sequence_number: &'a str, sub: Option<u64>, data: &'a [u8]) -> UserRecordView<'a> {
        UserRecordView {
            shard_id: SHARD,
            sequence_number,
            sub_sequence_number: sub,
            partition_key: "pk-1",
            arrival_millis: ARRIVAL,
            data,
        }
    }

    fn schema(text: &str) -> Arc<ParquetSchema> {
        Arc::new(ParquetSchema::from_json(text).unwrap())
    }

    /// The file's schema (from its embedded Arrow schema) and batches.
    fn read(file: &[u8]) -> (SchemaRef, Vec<RecordBatch>) {
        let builder =
            ParquetRecordBatchReaderBuilder::try_new(Bytes::copy_from_slice(file)).unwrap();
        let schema = builder.schema().clone();
        let batches = builder
            .build()
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        (schema, batches)
    }

    fn footer_rows(body: &Bytes) -> i64 {
        SerializedFileReader::new(body.clone())
            .unwrap()
            .metadata()
            .file_metadata()
            .num_rows()
    }

    fn one_batch(file: &[u8]) -> RecordBatch {
        let (_, mut batches) = read(file);
        assert_eq!(batches.len(), 1);
        batches.remove(0)
    }

    fn names(schema: &Schema) -> Vec<&str> {
        schema
            .fields()
            .iter()
            .map(|field| field.name().as_str())
            .collect()
    }

    fn strings(batch: &RecordBatch, column: &str) -> Vec<Option<String>> {
        batch
            .column_by_name(column)
            .unwrap()
            .as_string::<i32>()
            .iter()
            .map(|value| value.map(str::to_owned))
            .collect()
    }

    fn column<T: arrow_array::ArrowPrimitiveType>(
        batch: &RecordBatch,
        column: &str,
    ) -> Vec<Option<T::Native>> {
        batch
            .column_by_name(column)
            .unwrap()
            .as_primitive::<T>()
            .iter()
            .collect()
    }

    #[test]
    fn without_a_schema_rows_hold_the_metadata_and_the_payload_bytes() {
        let mut batch = ParquetBatch::new(None);
        batch
            .push(&view(
                "49590338271490256608559692538361571095921575989136588898",
                None,
                b"\xff\x00not utf-8",
            ))
            .unwrap();
        let mut kpl = view(
            "49590338271490256608559692538361571095921575989136588899",
            Some(0),
            b"{}",
        );
        kpl.partition_key = "user-7";
        kpl.arrival_millis = -1;
        batch.push(&kpl).unwrap();
        kpl.sub_sequence_number = Some(1);
        kpl.data = b"";
        batch.push(&kpl).unwrap();
        assert_eq!(batch.rows(), 3);
        let file = batch.finish(Compression::Zstd(3)).unwrap();

        let (schema, _) = read(&file);
        let expected = arrow_schema(None);
        assert_eq!(
            names(&schema),
            [
                "shard_id",
                "sequence_number",
                "sub_sequence_number",
                "partition_key",
                "approximate_arrival_timestamp",
                "data"
            ]
        );
        assert_eq!(schema.fields(), expected.fields());
        let types: Vec<(DataType, bool)> = schema
            .fields()
            .iter()
            .map(|field| (field.data_type().clone(), field.is_nullable()))
            .collect();
        assert_eq!(
            types,
            [
                (DataType::Utf8, false),
                (DataType::Utf8, false),
                (DataType::Int64, true),
                (DataType::Utf8, false),
                (
                    DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
                    false
                ),
                (DataType::Binary, false),
            ]
        );

        let rows = one_batch(&file);
        assert_eq!(strings(&rows, SHARD_ID), vec![Some(SHARD.to_owned()); 3]);
        assert_eq!(
            strings(&rows, SEQUENCE_NUMBER),
            [
                Some("49590338271490256608559692538361571095921575989136588898".to_owned()),
                Some("49590338271490256608559692538361571095921575989136588899".to_owned()),
                Some("49590338271490256608559692538361571095921575989136588899".to_owned()),
            ]
        );
        assert_eq!(
            column::<Int64Type>(&rows, SUB_SEQUENCE_NUMBER),
            [None, Some(0), Some(1)]
        );
        assert_eq!(
            strings(&rows, PARTITION_KEY),
            [
                Some("pk-1".to_owned()),
                Some("user-7".to_owned()),
                Some("user-7".to_owned())
            ]
        );
        assert_eq!(
            column::<TimestampMillisecondType>(&rows, APPROXIMATE_ARRIVAL_TIMESTAMP),
            [Some(ARRIVAL), Some(-1), Some(-1)]
        );
        let data: Vec<&[u8]> = rows
            .column_by_name(DATA)
            .unwrap()
            .as_binary::<i32>()
            .iter()
            .map(Option::unwrap)
            .collect();
        assert_eq!(data, [&b"\xff\x00not utf-8"[..], b"{}", b""]);
    }

    #[test]
    fn the_parquet_types_are_utc_timestamps_and_strings() {
        let mut batch = ParquetBatch::new(Some(schema(
            r#"[{"name": "at", "type": "timestamp"}, {"name": "day", "type": "date"}, {"name": "j", "type": "json"}]"#,
        )));
        batch.push(&view("1", None, b"{}")).unwrap();
        let file = batch.finish(Compression::None).unwrap();
        // Without the embedded Arrow schema, from the Parquet types alone:
        // UTC-adjusted millisecond timestamps, STRING byte arrays, DATE.
        let builder = reader(Bytes::from(file)).unwrap();
        let types: Vec<DataType> = builder
            .schema()
            .fields()
            .iter()
            .map(|field| field.data_type().clone())
            .collect();
        let utc = DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()));
        assert_eq!(
            types,
            [
                DataType::Utf8,
                DataType::Utf8,
                DataType::Int64,
                DataType::Utf8,
                utc.clone(),
                utc,
                DataType::Date32,
                DataType::Utf8,
            ]
        );
    }

    const EVERY_TYPE: &str = r#"[
        {"name": "s", "type": "string"},
        {"name": "b", "type": "boolean"},
        {"name": "i32", "type": "int32"},
        {"name": "i64", "type": "int64"},
        {"name": "f32", "type": "float32"},
        {"name": "f64", "type": "float64"},
        {"name": "at", "type": "timestamp"},
        {"name": "day", "type": "date"},
        {"name": "j", "type": "json"}
    ]"#;

    #[test]
    fn with_a_schema_payload_members_become_typed_columns() {
        let mut batch = ParquetBatch::new(Some(schema(EVERY_TYPE)));
        let payloads: [&str; 4] = [
            // Every member, in another order than the schema, with extras.
            r#"{"extra": [1, {"x": 2}], "day": "2026-11-21", "s": "h\u00e9 \"q\"", "b": true, "i32": -2147483648,
                "i64": 9223372036854775807, "f32": 1.5, "f64": -2.5e-3, "at": "2026-11-21T06:27:03.045+01:00",
                "j": {"z": 1, "a": [true, null, "x y"], "n": 1.0}}"#,
            // Nulls and missing members.
            r#"{"s": null, "b": null, "at": null, "j": null}"#,
            // Integers where floats are expected, epoch milliseconds,
            // sub-millisecond precision, a scalar json value.
            r#"{"f32": 3, "f64": 18446744073709551615, "at": 1795238823045, "day": "1969-12-31", "j": "text", "i64": -1}"#,
            r#"{"at": "1969-12-31T23:59:59.9999Z", "j": [ 1 ,2 ], "day": "1970-01-01", "b": false}"#,
        ];
        for (i, payload) in payloads.iter().enumerate() {
            let sequence_number = (i + 1).to_string();
            batch
                .push(&view(&sequence_number, None, payload.as_bytes()))
                .unwrap();
        }
        let file = batch.finish(Compression::Gzip(6)).unwrap();

        let (file_schema, _) = read(&file);
        assert_eq!(
            names(&file_schema),
            [
                "shard_id",
                "sequence_number",
                "sub_sequence_number",
                "partition_key",
                "approximate_arrival_timestamp",
                "s",
                "b",
                "i32",
                "i64",
                "f32",
                "f64",
                "at",
                "day",
                "j"
            ]
        );
        let typed: Vec<(DataType, bool)> = file_schema.fields()[5..]
            .iter()
            .map(|field| (field.data_type().clone(), field.is_nullable()))
            .collect();
        assert_eq!(
            typed,
            [
                (DataType::Utf8, true),
                (DataType::Boolean, true),
                (DataType::Int32, true),
                (DataType::Int64, true),
                (DataType::Float32, true),
                (DataType::Float64, true),
                (
                    DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
                    true
                ),
                (DataType::Date32, true),
                (DataType::Utf8, true),
            ]
        );

        let rows = one_batch(&file);
        assert_eq!(rows.num_rows(), 4);
        assert_eq!(
            strings(&rows, "s"),
            [Some("hé \"q\"".to_owned()), None, None, None]
        );
        let booleans: Vec<Option<bool>> = rows
            .column_by_name("b")
            .unwrap()
            .as_boolean()
            .iter()
            .collect();
        assert_eq!(booleans, [Some(true), None, None, Some(false)]);
        assert_eq!(
            column::<Int32Type>(&rows, "i32"),
            [Some(i32::MIN), None, None, None]
        );
        assert_eq!(
            column::<Int64Type>(&rows, "i64"),
            [Some(i64::MAX), None, Some(-1), None]
        );
        assert_eq!(
            column::<Float32Type>(&rows, "f32"),
            [Some(1.5), None, Some(3.0), None]
        );
        assert_eq!(
            column::<Float64Type>(&rows, "f64"),
            [
                Some(-2.5e-3),
                None,
                Some(18_446_744_073_709_551_615.0),
                None
            ]
        );
        assert_eq!(
            column::<TimestampMillisecondType>(&rows, "at"),
            [Some(ARRIVAL), None, Some(ARRIVAL), Some(-1)]
        );
        assert_eq!(
            column::<Date32Type>(&rows, "day"),
            [Some(20_778), None, Some(-1), Some(0)]
        );
        assert_eq!(
            strings(&rows, "j"),
            [
                Some(r#"{"z":1,"a":[true,null,"x y"],"n":1.0}"#.to_owned()),
                None,
                Some(r#""text""#.to_owned()),
                Some("[1,2]".to_owned()),
            ],
            "json values keep their member order and number text, without whitespace"
        );
        assert_eq!(
            strings(&rows, SEQUENCE_NUMBER),
            ["1", "2", "3", "4"].map(|s| Some(s.to_owned()))
        );
    }

    fn rejection(schema_text: &str, payload: &[u8]) -> Rejection {
        let mut batch = ParquetBatch::new(Some(schema(schema_text)));
        batch.push(&view("1", None, br#"{"n": 1}"#)).unwrap();
        let before = batch.memory_bytes();
        let rejection = batch.push(&view("2", Some(5), payload)).unwrap_err();
        assert_eq!(batch.rows(), 1, "{rejection:?}");
        assert_eq!(batch.memory_bytes(), before, "{rejection:?}");
        batch.push(&view("3", None, br#"{"n": 3}"#)).unwrap();
        // Every column has exactly the two accepted rows, in order.
        let rows = one_batch(&batch.finish(Compression::None).unwrap());
        assert_eq!(rows.num_rows(), 2);
        assert_eq!(
            strings(&rows, SEQUENCE_NUMBER),
            [Some("1".to_owned()), Some("3".to_owned())]
        );
        assert_eq!(
            column::<Int64Type>(&rows, SUB_SEQUENCE_NUMBER),
            [None, None]
        );
        rejection
    }

    #[test]
    fn each_rejection_reason_leaves_no_partial_row() {
        let schema_text = r#"[{"name": "s", "type": "string"}, {"name": "n", "type": "int64"}]"#;
        for (payload, reason) in [
            (&b"{\"s\": \"\xff\"}"[..], RejectReason::NotUtf8),
            (b"[1, 2]", RejectReason::NotJsonObject),
            (b"", RejectReason::NotJsonObject),
            (b"{\"s\": \"a\"} {}", RejectReason::NotJsonObject),
            (b"{\"s\": \"a\", \"n\": ", RejectReason::NotJsonObject),
            // Invalid JSON after a mismatch is still not JSON.
            (b"{\"n\": \"x\", \"s\": tru}", RejectReason::NotJsonObject),
            // The first column fits, the second does not: nothing appended.
            (
                b"{\"s\": \"fits\", \"n\": \"1\"}",
                RejectReason::SchemaMismatch,
            ),
            (b"{\"n\": 1.5}", RejectReason::SchemaMismatch),
        ] {
            let rejection = rejection(schema_text, payload);
            assert_eq!(
                rejection.reason,
                reason,
                "{:?}",
                String::from_utf8_lossy(payload)
            );
            assert!(!rejection.message.is_empty());
        }
    }

    #[test]
    fn mismatch_messages_name_the_field_the_type_and_the_value() {
        for (column_type, value, message) in [
            ("int64", r#""1""#, r#"field "f" is a string, not int64"#),
            ("int64", "1.5", r#"field "f" is the number 1.5, not int64"#),
            ("int64", "1.0", r#"field "f" is the number 1.0, not int64"#),
            ("int64", "1e3", r#"field "f" is the number 1e3, not int64"#),
            ("int64", "true", r#"field "f" is a boolean, not int64"#),
            ("int64", "[1]", r#"field "f" is an array, not int64"#),
            (
                "int64",
                r#"{"a": 1}"#,
                r#"field "f" is an object, not int64"#,
            ),
            (
                "int64",
                "9223372036854775808",
                r#"field "f" is the number 9223372036854775808, out of int64's range"#,
            ),
            (
                "int32",
                "2147483648",
                r#"field "f" is the number 2147483648, out of int32's range"#,
            ),
            (
                "int32",
                "-2147483649",
                r#"field "f" is the number -2147483649, out of int32's range"#,
            ),
            (
                "float32",
                "1e300",
                r#"field "f" is the number 1e300, out of float32's range"#,
            ),
            (
                "float64",
                r#""1.5""#,
                r#"field "f" is a string, not float64"#,
            ),
            ("string", "5", r#"field "f" is the number 5, not string"#),
            ("string", "{}", r#"field "f" is an object, not string"#),
            (
                "boolean",
                r#""true""#,
                r#"field "f" is a string, not boolean"#,
            ),
            ("boolean", "0", r#"field "f" is the number 0, not boolean"#),
            (
                "timestamp",
                r#""yesterday""#,
                r#"field "f" is the string "yesterday", not timestamp (RFC 3339 text or integer epoch milliseconds)"#,
            ),
            (
                "timestamp",
                r#""2026-11-21 05:27""#,
                r#"field "f" is the string "2026-11-21 05:27", not timestamp (RFC 3339 text or integer epoch milliseconds)"#,
            ),
            (
                "timestamp",
                "1795238823045.5",
                r#"field "f" is the number 1795238823045.5, not timestamp (RFC 3339 text or integer epoch milliseconds)"#,
            ),
            (
                "date",
                r#""2026-1-05""#,
                r#"field "f" is the string "2026-1-05", not date (YYYY-MM-DD)"#,
            ),
            (
                "date",
                r#""2026-02-30""#,
                r#"field "f" is the string "2026-02-30", not date (YYYY-MM-DD)"#,
            ),
            (
                "date",
                r#""2026-11-21T00:00:00Z""#,
                r#"field "f" is the string "2026-11-21T00:00:00Z", not date (YYYY-MM-DD)"#,
            ),
            (
                "date",
                "20778",
                r#"field "f" is the number 20778, not date (YYYY-MM-DD)"#,
            ),
        ] {
            let schema_text = format!(
                r#"[{{"name": "n", "type": "int64"}}, {{"name": "f", "type": "{column_type}"}}]"#
            );
            let payload = format!(r#"{{"f": {value}}}"#);
            let rejection = rejection(&schema_text, payload.as_bytes());
            assert_eq!(rejection.reason, RejectReason::SchemaMismatch, "{payload}");
            assert_eq!(rejection.message, message, "{column_type} {payload}");
        }
        // Long strings are cut in the message.
        let long = format!(r#"{{"f": "{}"}}"#, "x".repeat(1000));
        let message = rejection(r#"[{"name": "f", "type": "date"}]"#, long.as_bytes()).message;
        assert!(message.len() < 120, "{message}");
        assert!(
            message.contains(&format!("\"{}…\"", "x".repeat(EXCERPT_CHARS))),
            "{message}"
        );
    }

    #[test]
    fn a_member_given_twice_counts_as_its_last_value() {
        let mut batch = ParquetBatch::new(Some(schema(r#"[{"name": "n", "type": "int64"}]"#)));
        batch
            .push(&view("1", None, br#"{"n": 1, "n": 2}"#))
            .unwrap();
        let rows = one_batch(&batch.finish(Compression::None).unwrap());
        assert_eq!(column::<Int64Type>(&rows, "n"), [Some(2)]);
    }

    #[test]
    fn an_empty_batch_is_a_valid_file_with_the_columns_and_no_rows() {
        for schema in [None, Some(schema(EVERY_TYPE))] {
            let expected = arrow_schema(schema.as_deref());
            let file = ParquetBatch::new(schema)
                .finish(Compression::Zstd(3))
                .unwrap();
            let (file_schema, batches) = read(&file);
            assert_eq!(file_schema.fields(), expected.fields());
            assert_eq!(batches.iter().map(RecordBatch::num_rows).sum::<usize>(), 0);
            let body = Bytes::from(file);
            assert_eq!(footer_rows(&body), 0);
            assert_eq!(row_identities(body.clone()).unwrap(), []);
            assert!(same_rows(body.clone(), body).unwrap());
        }
    }

    /// `n` rows with KPL sub-sequence numbers on every third.
    fn batch_of(n: usize, schema: Option<Arc<ParquetSchema>>) -> ParquetBatch {
        let mut batch = ParquetBatch::new(schema);
        for i in 0..n {
            let sequence_number =
                format!("4959033827149025660855969253836157109592157598913658{i:04}");
            let data = format!(r#"{{"n": {i}, "s": "value {}"}}"#, i % 7);
            let sub = (i % 3 == 0).then_some(i as u64);
            batch
                .push(&view(&sequence_number, sub, data.as_bytes()))
                .unwrap();
        }
        batch
    }

    #[test]
    fn the_same_rows_give_the_same_bytes() {
        let typed = schema(r#"[{"name": "n", "type": "int64"}, {"name": "s", "type": "string"}]"#);
        for schema in [None, Some(typed)] {
            for compression in [
                Compression::None,
                Compression::Gzip(6),
                Compression::Zstd(3),
            ] {
                let first = batch_of(500, schema.clone()).finish(compression).unwrap();
                let second = batch_of(500, schema.clone()).finish(compression).unwrap();
                assert_eq!(first, second, "{compression:?}");
                let other = batch_of(499, schema.clone()).finish(compression).unwrap();
                assert_ne!(first, other);
            }
        }
    }

    #[test]
    fn the_file_metadata_is_fixed_and_pages_are_compressed_as_asked() {
        use ::parquet::basic::Compression as Codec;
        for (compression, matches) in [
            (
                Compression::None,
                (|c| matches!(c, Codec::UNCOMPRESSED)) as fn(Codec) -> bool,
            ),
            (Compression::Gzip(9), |c| matches!(c, Codec::GZIP(_))),
            (Compression::Zstd(19), |c| matches!(c, Codec::ZSTD(_))),
        ] {
            let file = batch_of(2_000, None).finish(compression).unwrap();
            let reader = SerializedFileReader::new(Bytes::from(file)).unwrap();
            let metadata = reader.metadata();
            let file_metadata = metadata.file_metadata();
            assert_eq!(file_metadata.created_by(), Some("shardsink"));
            assert_eq!(file_metadata.version(), 1, "format version 1.0");
            assert_eq!(file_metadata.num_rows(), 2_000);
            assert_eq!(metadata.num_row_groups(), 1);
            let keys: Vec<&str> = file_metadata
                .key_value_metadata()
                .into_iter()
                .flatten()
                .map(|kv| kv.key.as_str())
                .collect();
            assert_eq!(keys, ["ARROW:schema"], "no other metadata");
            for column in metadata.row_group(0).columns() {
                assert!(
                    matches(column.compression()),
                    "{compression:?}: {:?}",
                    column.compression()
                );
            }
        }
    }

    #[test]
    fn levels_out_of_range_are_errors() {
        assert!(batch_of(1, None).finish(Compression::Gzip(10)).is_err());
        assert!(batch_of(1, None).finish(Compression::Zstd(23)).is_err());
    }

    /// The same rows written with small row groups and pages, another
    /// codec and another `created_by`.
    fn relaid(n: usize, schema: Option<Arc<ParquetSchema>>) -> Bytes {
        let properties = WriterProperties::builder()
            .set_created_by("another writer".to_owned())
            .set_writer_version(WriterVersion::PARQUET_2_0)
            .set_compression(PageCompression::GZIP(GzipLevel::try_new(1).unwrap()))
            .set_max_row_group_row_count(Some(7))
            .set_data_page_row_count_limit(3)
            .set_dictionary_enabled(false)
            .build();
        let file = Bytes::from(batch_of(n, schema).write(properties).unwrap());
        let groups = SerializedFileReader::new(file.clone())
            .unwrap()
            .metadata()
            .num_row_groups();
        assert_eq!(groups, n.div_ceil(7));
        file
    }

    #[test]
    fn same_rows_ignores_layout_and_compression_but_not_rows() {
        let base = Bytes::from(batch_of(100, None).finish(Compression::Zstd(3)).unwrap());
        for compression in [
            Compression::None,
            Compression::Gzip(1),
            Compression::Zstd(19),
        ] {
            let other = Bytes::from(batch_of(100, None).finish(compression).unwrap());
            assert_ne!(other, base);
            assert!(
                same_rows(base.clone(), other.clone()).unwrap(),
                "{compression:?}"
            );
            assert!(same_rows(other, base.clone()).unwrap(), "{compression:?}");
        }
        let small_groups = relaid(100, None);
        assert!(same_rows(base.clone(), small_groups.clone()).unwrap());
        // Batches of different lengths on each side.
        for (a, b) in [(1, 1024), (7, 3), (100, 33), (64, 64)] {
            assert!(
                compare_rows(base.clone(), small_groups.clone(), a, b).unwrap(),
                "{a} {b}"
            );
        }

        let missing = Bytes::from(batch_of(99, None).finish(Compression::Zstd(3)).unwrap());
        assert!(
            !same_rows(base.clone(), missing.clone()).unwrap(),
            "a missing row"
        );
        assert!(!same_rows(missing, base.clone()).unwrap(), "an extra row");
        // A changed value, in one column of the last row only.
        let mut changed = batch_of(99, None);
        changed
            .push(&view(
                "49590338271490256608559692538361571095921575989136580099",
                Some(99),
                br#"{"n": 99, "s": "value X"}"#,
            ))
            .unwrap();
        let changed = Bytes::from(changed.finish(Compression::Zstd(3)).unwrap());
        assert!(!same_rows(base.clone(), changed.clone()).unwrap(), "data");
        for (a, b) in [(1, 1024), (7, 3)] {
            assert!(!compare_rows(base.clone(), changed.clone(), a, b).unwrap());
        }
        // The same rows in another order.
        let mut reordered = ParquetBatch::new(None);
        for i in [1_u64, 0] {
            let sequence_number =
                format!("4959033827149025660855969253836157109592157598913658{i:04}");
            let data = format!(r#"{{"n": {i}, "s": "value {i}"}}"#);
            reordered
                .push(&view(
                    &sequence_number,
                    (i == 0).then_some(0),
                    data.as_bytes(),
                ))
                .unwrap();
        }
        let reordered = Bytes::from(reordered.finish(Compression::None).unwrap());
        let two = Bytes::from(batch_of(2, None).finish(Compression::None).unwrap());
        assert!(!same_rows(two, reordered).unwrap(), "row order counts");
        // The same payloads as typed columns: other columns.
        let typed = schema(r#"[{"name": "n", "type": "int64"}, {"name": "s", "type": "string"}]"#);
        let as_typed = Bytes::from(
            batch_of(100, Some(typed.clone()))
                .finish(Compression::Zstd(3))
                .unwrap(),
        );
        assert!(!same_rows(base.clone(), as_typed.clone()).unwrap());
        assert!(same_rows(as_typed, relaid(100, Some(typed))).unwrap());
        // Not Parquet.
        assert!(same_rows(base.clone(), Bytes::from_static(b"PAR1 not really PAR1")).is_err());
    }

    #[test]
    fn row_identities_read_the_rows_in_order() {
        let expected: Vec<(String, Option<i64>)> = (0..3_000_i64)
            .map(|i| {
                (
                    format!("4959033827149025660855969253836157109592157598913658{i:04}"),
                    (i % 3 == 0).then_some(i),
                )
            })
            .collect();
        for body in [
            Bytes::from(batch_of(3_000, None).finish(Compression::Gzip(6)).unwrap()),
            relaid(3_000, None),
            Bytes::from(
                batch_of(3_000, Some(schema(r#"[{"name": "n", "type": "int64"}]"#)))
                    .finish(Compression::None)
                    .unwrap(),
            ),
        ] {
            assert_eq!(row_identities(body.clone()).unwrap(), expected);
            assert_eq!(footer_rows(&body), 3_000);
        }
        assert!(row_identities(Bytes::from_static(b"not parquet")).is_err());
    }

    #[test]
    fn row_identities_need_both_columns() {
        let schema = Arc::new(Schema::new(vec![Field::new(
            SEQUENCE_NUMBER,
            DataType::Utf8,
            false,
        )]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(arrow_array::StringArray::from(vec!["1"])) as ArrayRef],
        )
        .unwrap();
        let mut writer = ArrowWriter::try_new(Vec::new(), schema, None).unwrap();
        writer.write(&batch).unwrap();
        let body = Bytes::from(writer.into_inner().unwrap());
        let err = row_identities(body).unwrap_err().to_string();
        assert!(err.contains("sub_sequence_number"), "{err}");
    }

    #[test]
    fn memory_bytes_counts_what_the_columns_hold() {
        let mut batch = ParquetBatch::new(None);
        assert_eq!(batch.memory_bytes(), 0);
        batch.push(&view("12345", None, &[7; 1000])).unwrap();
        // 1000 + 20 + 5 + 4 bytes of values, 4 offsets, two 8-byte values.
        assert_eq!(batch.memory_bytes(), 1000 + 20 + 5 + 4 + 4 * 4 + 16);
        let mut previous = batch.memory_bytes();
        for i in 0..100_u64 {
            batch.push(&view("12345", Some(i), &[1; 10])).unwrap();
            assert!(batch.memory_bytes() > previous);
            previous = batch.memory_bytes();
        }

        let mut typed = ParquetBatch::new(Some(schema(EVERY_TYPE)));
        typed
            .push(&view(
                "1",
                None,
                br#"{"s": "abc", "ignored": "a long value that is not kept"}"#,
            ))
            .unwrap();
        // Metadata: 20 + 1 + 4 + 3 offsets + 16; s: 3 + 4; nulls: b 1,
        // i32 4, i64 8, f32 4, f64 8, at 8, day 4, j 4.
        assert_eq!(
            typed.memory_bytes(),
            20 + 1 + 4 + 12 + 16 + 7 + 1 + 4 + 8 + 4 + 8 + 8 + 4 + 4
        );
    }

    fn arb_record() -> impl Strategy<Value = (String, Option<u64>, String, i64, Vec<u8>)> {
        (
            "[1-9][0-9]{0,127}",
            prop::option::of(0_u64..100_000),
            "\\PC{0,16}",
            any::<i64>(),
            prop::collection::vec(any::<u8>(), 0..64),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        #[test]
        fn records_read_back_as_written(records in prop::collection::vec(arb_record(), 0..40)) {
            let write = |compression| {
                let mut batch = ParquetBatch::new(None);
                for (sequence_number, sub, partition_key, arrival_millis, data) in &records {
                    batch.push(&UserRecordView {
                        shard_id: SHARD,
                        sequence_number,
                        sub_sequence_number: *sub,
                        partition_key,
                        arrival_millis: *arrival_millis,
                        data,
                    }).unwrap();
                }
                prop_assert_eq!(batch.rows(), records.len());
                Ok(Bytes::from(batch.finish(compression).unwrap()))
            };
            let file = write(Compression::Zstd(3))?;
            prop_assert_eq!(&file, &write(Compression::Zstd(3))?);
            let (_, batches) = read(&file);
            let mut read_back = Vec::new();
            for rows in &batches {
                let sequence_numbers = strings(rows, SEQUENCE_NUMBER);
                let subs = column::<Int64Type>(rows, SUB_SEQUENCE_NUMBER);
                let keys = strings(rows, PARTITION_KEY);
                let arrivals = column::<TimestampMillisecondType>(rows, APPROXIMATE_ARRIVAL_TIMESTAMP);
                let data = rows.column_by_name(DATA).unwrap().as_binary::<i32>();
                for i in 0..rows.num_rows() {
                    read_back.push((
                        sequence_numbers[i].clone().unwrap(),
                        subs[i].map(|sub| u64::try_from(sub).unwrap()),
                        keys[i].clone().unwrap(),
                        arrivals[i].unwrap(),
                        data.value(i).to_vec(),
                    ));
                }
            }
            prop_assert_eq!(&read_back, &records);
            let identities: Vec<(String, Option<i64>)> = records
                .iter()
                .map(|(sequence_number, sub, ..)| (sequence_number.clone(), sub.map(|sub| sub as i64)))
                .collect();
            prop_assert_eq!(row_identities(file.clone()).unwrap(), identities);
            prop_assert!(same_rows(file.clone(), write(Compression::Gzip(1))?).unwrap());
            prop_assert_eq!(footer_rows(&file), records.len() as i64);
        }

        #[test]
        fn typed_members_read_back_as_written(
            rows in prop::collection::vec(
                (
                    prop::option::of(any::<i64>()),
                    prop::option::of(-1e300_f64..1e300),
                    prop::option::of("\\PC{0,12}"),
                    prop::option::of(any::<bool>()),
                    prop::option::of(-2_208_988_800_000_i64..7_258_118_400_000),
                ),
                1..20,
            ),
        ) {
            let typed = schema(r#"[{"name": "i", "type": "int64"}, {"name": "f", "type": "float64"}, {"name": "s", "type": "string"}, {"name": "b", "type": "boolean"}, {"name": "at", "type": "timestamp"}]"#);
            let mut batch = ParquetBatch::new(Some(typed));
            for (i, f, s, b, at) in &rows {
                let mut members = serde_json::Map::new();
                if let Some(i) = i { members.insert("i".into(), (*i).into()); }
                if let Some(f) = f { members.insert("f".into(), (*f).into()); }
                if let Some(s) = s { members.insert("s".into(), s.clone().into()); }
                if let Some(b) = b { members.insert("b".into(), (*b).into()); }
                // Timestamps as RFC 3339 text with an offset.
                if let Some(at) = at {
                    let text = chrono::DateTime::from_timestamp_millis(*at)
                        .unwrap()
                        .with_timezone(&chrono::FixedOffset::east_opt(-5 * 3600).unwrap())
                        .to_rfc3339_opts(chrono::SecondsFormat::Millis, false);
                    members.insert("at".into(), text.into());
                }
                let payload = serde_json::to_vec(&serde_json::Value::Object(members)).unwrap();
                batch.push(&view("1", None, &payload)).unwrap();
            }
            let file = batch.finish(Compression::None).unwrap();
            let read_back = one_batch(&file);
            prop_assert_eq!(column::<Int64Type>(&read_back, "i"), rows.iter().map(|r| r.0).collect::<Vec<_>>());
            prop_assert_eq!(column::<Float64Type>(&read_back, "f"), rows.iter().map(|r| r.1).collect::<Vec<_>>());
            prop_assert_eq!(strings(&read_back, "s"), rows.iter().map(|r| r.2.clone()).collect::<Vec<_>>());
            let booleans: Vec<Option<bool>> = read_back.column_by_name("b").unwrap().as_boolean().iter().collect();
            prop_assert_eq!(booleans, rows.iter().map(|r| r.3).collect::<Vec<_>>());
            prop_assert_eq!(column::<TimestampMillisecondType>(&read_back, "at"), rows.iter().map(|r| r.4).collect::<Vec<_>>());
        }
    }
}

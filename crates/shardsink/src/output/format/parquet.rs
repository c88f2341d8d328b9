//! The `parquet` format: [`ParquetBatch`], a batch's user records as the
//! rows of one Apache Parquet file. Reading such files back (comparing
//! them, their rows' identities, their records) is
//! `output::read_back::parquet`.
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
//! (after an upgrade of the writer) `same_rows` (in
//! `output::read_back::parquet`) still recognises the rows.
//!
//! # Layout
//! - this file: the columns, the writer settings and [`ParquetBatch`];
//! - `column`: the builder of one schema column;
//! - `row`: a payload decoded into a schema's typed cells, or a
//!   [`Rejection`].

pub(crate) mod column;
pub(crate) mod row;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use ::parquet::arrow::ArrowWriter;
use ::parquet::basic::{Compression as PageCompression, GzipLevel, ZstdLevel};
use ::parquet::errors::ParquetError;
use ::parquet::file::properties::{WriterProperties, WriterVersion};
use arrow_array::builder::{
    BinaryBuilder, Int64Builder, StringBuilder, TimestampMillisecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};

use self::column::ColumnBuilder;
use self::row::parse_row;
use super::schema::{
    APPROXIMATE_ARRIVAL_TIMESTAMP, ColumnType, DATA, PARTITION_KEY, ParquetSchema, SEQUENCE_NUMBER,
    SHARD_ID, SUB_SEQUENCE_NUMBER,
};
use crate::output::compression::Compression;
use crate::output::view::Rejection;
use crate::read::record::UserRecordView;

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
pub(crate) const OFFSET_BYTES: u64 = 4;

/// The Arrow schema of the files written with `schema`: the five
/// [`METADATA_COLUMNS`](super::schema::METADATA_COLUMNS), then `data` (Binary, not null) without a schema,
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
pub(crate) fn writer_properties(
    compression: Compression,
) -> Result<WriterProperties, ParquetError> {
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
                let cells = parse_row(schema.as_ref(), record.data)?.cells;
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
    #[cfg(test)]
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

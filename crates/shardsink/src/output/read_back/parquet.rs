//! Reading a batch's Parquet file back (the files
//! `output::format::parquet` writes): whether two files hold the same rows
//! ([`same_rows`], for the check of an object already under a key), and
//! the identities of a file's rows — the `sequence_number` and
//! `sub_sequence_number` columns read back ([`row_identities`], and as
//! [`Row`]s for `verify`: [`identity_rows`]), and its records ([`decode`],
//! the inverse of the writer, checked by a round-trip test). Each reads a
//! batch of rows at a time.

use ::parquet::arrow::ProjectionMask;
use ::parquet::arrow::arrow_reader::{
    ArrowReaderOptions, ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder,
};
use ::parquet::errors::ParquetError;
use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, TimestampMillisecondType};
use arrow_array::{Array, PrimitiveArray, RecordBatch, StringArray};
use arrow_schema::Schema;
use bytes::Bytes;

use super::row::{Place, Record, Row};
use crate::output::format::parquet::MAX_ROW_GROUP_ROWS;
use crate::output::format::schema::{
    APPROXIMATE_ARRIVAL_TIMESTAMP, DATA, PARTITION_KEY, SEQUENCE_NUMBER, SHARD_ID,
    SUB_SEQUENCE_NUMBER,
};

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
pub(crate) fn compare_rows(
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
/// written by [`ParquetBatch::finish`](crate::output::format::parquet::ParquetBatch::finish), in row
/// order, reading only those two columns. `sub_sequence_number` is `None` outside KPL aggregates.
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
        let (sequence_numbers, sub_sequence_numbers) = identity_columns(&batch)?;
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

/// [`row_identities`] as the [`Row`]s `verify` checks: `row 1`, `row 2`…,
/// with no shard id or arrival text (a sub-sequence number below zero,
/// which shardsink never writes, reads as none).
///
/// # Errors
/// As [`row_identities`].
pub fn identity_rows(body: Bytes) -> Result<Vec<Row>, ParquetError> {
    Ok(row_identities(body)?
        .into_iter()
        .enumerate()
        .map(|(index, (sequence_number, sub))| Row {
            at: Place::Row(index + 1),
            shard_id: None,
            sequence_number,
            sub_sequence_number: sub.and_then(|sub| u64::try_from(sub).ok()),
            arrival: None,
            duplicate_of: None,
        })
        .collect())
}

/// The records of a file written without a schema (its payloads are the
/// `data` column), in row order. A file written with a schema holds typed
/// columns instead of the payload: it has no `data` column.
///
/// # Errors
/// When `body` is not a readable Parquet file, lacks a column or has one
/// of another type than written, or a column but `sub_sequence_number`
/// holds a null.
#[cfg_attr(not(test), allow(dead_code))] // only the round-trip test needs payloads today
pub fn decode(body: Bytes) -> Result<Vec<Record>, ParquetError> {
    let mut records = Vec::new();
    for batch in reader(body)?.build()? {
        let batch = batch?;
        let (sequence_numbers, sub_sequence_numbers) = identity_columns(&batch)?;
        let text = |name: &str| {
            batch
                .column_by_name(name)
                .and_then(|column| column.as_string_opt::<i32>())
                .ok_or_else(|| wrong_type(name, "Utf8"))
        };
        let (shard_ids, partition_keys) = (text(SHARD_ID)?, text(PARTITION_KEY)?);
        let arrivals = batch
            .column_by_name(APPROXIMATE_ARRIVAL_TIMESTAMP)
            .and_then(|column| column.as_primitive_opt::<TimestampMillisecondType>())
            .ok_or_else(|| wrong_type(APPROXIMATE_ARRIVAL_TIMESTAMP, "Timestamp(Millisecond)"))?;
        let data = batch
            .column_by_name(DATA)
            .and_then(|column| column.as_binary_opt::<i32>())
            .ok_or_else(|| wrong_type(DATA, "Binary"))?;
        for row in 0..batch.num_rows() {
            if [
                shard_ids.is_null(row),
                sequence_numbers.is_null(row),
                partition_keys.is_null(row),
                arrivals.is_null(row),
                data.is_null(row),
            ]
            .contains(&true)
            {
                return Err(ParquetError::General(
                    "a row of the file has a null metadata or data column".to_owned(),
                ));
            }
            records.push(Record {
                shard_id: shard_ids.value(row).to_owned(),
                sequence_number: sequence_numbers.value(row).to_owned(),
                sub_sequence_number: sub_sequence_numbers
                    .is_valid(row)
                    .then(|| u64::try_from(sub_sequence_numbers.value(row)))
                    .transpose()
                    .map_err(|err| {
                        ParquetError::General(format!("{SUB_SEQUENCE_NUMBER}: {err}"))
                    })?,
                partition_key: partition_keys.value(row).to_owned(),
                arrival_millis: arrivals.value(row),
                payload: data.value(row).to_vec(),
            });
        }
    }
    Ok(records)
}

/// The `sequence_number` (Utf8) and `sub_sequence_number` (Int64) columns
/// of a batch of rows.
///
/// # Errors
/// When either is missing or of another type.
fn identity_columns(
    batch: &RecordBatch,
) -> Result<(&StringArray, &PrimitiveArray<Int64Type>), ParquetError> {
    let sequence_numbers = batch
        .column_by_name(SEQUENCE_NUMBER)
        .and_then(|column| column.as_string_opt::<i32>())
        .ok_or_else(|| wrong_type(SEQUENCE_NUMBER, "Utf8"))?;
    let sub_sequence_numbers = batch
        .column_by_name(SUB_SEQUENCE_NUMBER)
        .and_then(|column| column.as_primitive_opt::<Int64Type>())
        .ok_or_else(|| wrong_type(SUB_SEQUENCE_NUMBER, "Int64"))?;
    Ok((sequence_numbers, sub_sequence_numbers))
}

/// A reader of `body` that types its columns from the Parquet schema alone.
pub(crate) fn reader(body: Bytes) -> Result<ParquetRecordBatchReaderBuilder<Bytes>, ParquetError> {
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::output::compression::Compression;
    use crate::output::format::parquet::ParquetBatch;
    use crate::output::read_back::row::strategy::records;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// A file's rows decode to the records written, and their
        /// identities to the records' own.
        #[test]
        fn parquet_rows_decode_to_the_records_written(
            records in records(prop::collection::vec(any::<u8>(), 0..64)),
        ) {
            let mut batch = ParquetBatch::new(None);
            for record in &records {
                batch.push(&record.view()).unwrap();
            }
            let file = Bytes::from(batch.finish(Compression::Zstd(3)).unwrap());
            prop_assert_eq!(&decode(file.clone()).unwrap(), &records);
            let rows = identity_rows(file).unwrap();
            prop_assert_eq!(rows.len(), records.len());
            for (row, record) in rows.iter().zip(&records) {
                prop_assert_eq!(&row.sequence_number, &record.sequence_number);
                prop_assert_eq!(row.sub_sequence_number, record.sub_sequence_number);
            }
        }
    }
}

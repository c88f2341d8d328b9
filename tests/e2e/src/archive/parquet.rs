//! Decoding a `parquet` object with the `parquet` crate's Arrow reader: one
//! row per user record, identity from the metadata columns, the payload
//! from `data` or, with a schema, from the typed columns.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Float32Type, Float64Type, Int32Type, Int64Type, TimestampMillisecondType,
};
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, Field, TimeUnit};
use bytes::Bytes;
use chrono::DateTime;
use parquet::arrow::arrow_reader::{ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use serde_json::{Map, Number, Value};

use super::decode::Checker;
use super::schema::{ColumnType, ParquetSchema};
use super::{ArchiveProblem, ArchivedRecord, ObjectKey, PayloadForm, format_timestamp};

/// The columns every file starts with, in order: name, Arrow type (read
/// from the Parquet schema alone), nullable.
fn metadata_fields() -> Vec<Field> {
    vec![
        Field::new("shard_id", DataType::Utf8, false),
        Field::new("sequence_number", DataType::Utf8, false),
        Field::new("sub_sequence_number", DataType::Int64, true),
        Field::new("partition_key", DataType::Utf8, false),
        Field::new(
            "approximate_arrival_timestamp",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            false,
        ),
    ]
}

/// The columns a file written with `schema` must have, in order.
pub fn expected_fields(schema: Option<&ParquetSchema>) -> Vec<Field> {
    let mut fields = metadata_fields();
    match schema {
        None => fields.push(Field::new("data", DataType::Binary, false)),
        Some(schema) => fields.extend(
            schema
                .columns
                .iter()
                .map(|(name, ty)| Field::new(name, ty.arrow_type(), true)),
        ),
    }
    fields
}

/// Decodes a `parquet` object against its key: a readable file of at most
/// one row group whose columns (names, types from the Parquet schema alone,
/// nullability, order) are [`expected_fields`] of `schema`; every row's
/// identity passes the [`Checker`]'s checks. Without a schema the payload
/// is the `data` column ([`PayloadForm::Bytes`]); with one it is a JSON
/// object of the typed columns ([`PayloadForm::Row`]): strings, booleans
/// and numbers as such, `timestamp` as epoch milliseconds, `date` as days
/// since 1970-01-01, `json` as the value its text parses to.
pub fn decode_parquet(
    key: &ObjectKey,
    body: &[u8],
    schema: Option<&Arc<ParquetSchema>>,
) -> (Vec<ArchivedRecord>, Vec<ArchiveProblem>) {
    let mut checker = Checker::new(key);
    let builder = match ParquetRecordBatchReaderBuilder::try_new_with_options(
        Bytes::copy_from_slice(body),
        ArrowReaderOptions::new().with_skip_arrow_metadata(true),
    ) {
        Ok(builder) => builder,
        Err(error) => {
            checker.problem(None, format!("not a readable Parquet file: {error}"));
            return (Vec::new(), checker.problems);
        }
    };
    let row_groups = builder.metadata().num_row_groups();
    if row_groups > 1 {
        checker.problem(None, format!("{row_groups} row groups, not one"));
    }
    let expected = expected_fields(schema.map(AsRef::as_ref));
    let found: Vec<Field> = builder
        .schema()
        .fields()
        .iter()
        .map(|field| Field::new(field.name(), field.data_type().clone(), field.is_nullable()))
        .collect();
    if found != expected {
        let describe = |fields: &[Field]| -> Vec<String> {
            fields
                .iter()
                .map(|f| {
                    let null = if f.is_nullable() { " null" } else { "" };
                    format!("{} {}{null}", f.name(), f.data_type())
                })
                .collect()
        };
        checker.problem(
            None,
            format!(
                "columns are {:?}, expected {:?}",
                describe(&found),
                describe(&expected)
            ),
        );
        return (Vec::new(), checker.problems);
    }
    let reader = match builder.build() {
        Ok(reader) => reader,
        Err(error) => {
            checker.problem(None, format!("cannot read the rows: {error}"));
            return (Vec::new(), checker.problems);
        }
    };
    let mut records = Vec::new();
    for batch in reader {
        match batch {
            Ok(batch) => rows(&mut checker, &batch, schema, &mut records),
            Err(error) => {
                checker.problem(None, format!("cannot read the rows: {error}"));
                break;
            }
        }
    }
    (records, checker.problems)
}

/// Appends the records of `batch` (whose columns have the expected types).
fn rows(
    checker: &mut Checker<'_>,
    batch: &RecordBatch,
    schema: Option<&Arc<ParquetSchema>>,
    records: &mut Vec<ArchivedRecord>,
) {
    let text = |i: usize| batch.column(i).as_string::<i32>();
    let (shard_ids, sequence_numbers, partition_keys) = (text(0), text(1), text(3));
    let subs = batch.column(2).as_primitive::<Int64Type>();
    let arrivals = batch.column(4).as_primitive::<TimestampMillisecondType>();
    for row in 0..batch.num_rows() {
        let line = records.len() + 1;
        let shard_id = shard_ids.value(row).to_owned();
        let sequence_number = sequence_numbers.value(row).to_owned();
        let sub_sequence_number = if subs.is_valid(row) {
            let sub = subs.value(row);
            u64::try_from(sub).ok().or_else(|| {
                checker.problem(Some(line), format!("sub_sequence_number {sub} < 0"));
                None
            })
        } else {
            None
        };
        checker.identity(line, &shard_id, &sequence_number, sub_sequence_number);
        let millis = arrivals.value(row);
        let approximate_arrival_timestamp = DateTime::from_timestamp_millis(millis)
            .map(format_timestamp)
            .unwrap_or_else(|| format!("{millis} ms (out of range)"));
        checker.arrival(line, &approximate_arrival_timestamp);
        let (data, payload) = match schema {
            None => (
                batch.column(5).as_binary::<i32>().value(row).to_vec(),
                PayloadForm::Bytes,
            ),
            Some(schema) => {
                let mut object = Map::new();
                for (index, (name, ty)) in schema.columns.iter().enumerate() {
                    let cell = cell(batch.column(5 + index).as_ref(), *ty, row).unwrap_or_else(
                        |message| {
                            checker.problem(Some(line), format!("column {name:?}: {message}"));
                            Value::Null
                        },
                    );
                    object.insert(name.clone(), cell);
                }
                (
                    serde_json::to_vec(&Value::Object(object)).expect("a value always serializes"),
                    PayloadForm::Row(Arc::clone(schema)),
                )
            }
        };
        records.push(ArchivedRecord {
            object_key: Arc::clone(&checker.object_key),
            line,
            shard_id,
            sequence_number,
            sub_sequence_number,
            partition_key: partition_keys.value(row).to_owned(),
            approximate_arrival_timestamp,
            data,
            payload,
            error_message: None,
            duplicate_of: None,
        });
    }
}

/// A typed column's value at `row`, as [`decode_parquet`] describes.
fn cell(column: &dyn Array, ty: ColumnType, row: usize) -> Result<Value, String> {
    if column.is_null(row) {
        return Ok(Value::Null);
    }
    let float = |v: f64| {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| format!("{v} is not a JSON number"))
    };
    Ok(match ty {
        ColumnType::String => Value::String(column.as_string::<i32>().value(row).to_owned()),
        ColumnType::Json => {
            let text = column.as_string::<i32>().value(row);
            serde_json::from_str(text).map_err(|e| format!("{text:?} is not JSON: {e}"))?
        }
        ColumnType::Boolean => Value::Bool(column.as_boolean().value(row)),
        ColumnType::Int32 => Value::from(column.as_primitive::<Int32Type>().value(row)),
        ColumnType::Int64 => Value::from(column.as_primitive::<Int64Type>().value(row)),
        ColumnType::Float32 => float(f64::from(column.as_primitive::<Float32Type>().value(row)))?,
        ColumnType::Float64 => float(column.as_primitive::<Float64Type>().value(row))?,
        ColumnType::Timestamp => {
            Value::from(column.as_primitive::<TimestampMillisecondType>().value(row))
        }
        ColumnType::Date => Value::from(column.as_primitive::<Date32Type>().value(row)),
    })
}

#[cfg(test)]
mod tests {
    use arrow_array::builder::{
        BinaryBuilder, Float64Builder, Int64Builder, StringBuilder, TimestampMillisecondBuilder,
    };
    use arrow_array::{ArrayRef, RecordBatch};
    use arrow_schema::Schema;
    use parquet::arrow::ArrowWriter;
    use serde_json::json;

    use super::*;
    use crate::archive::test_support::{minute, seq};
    use crate::archive::{Compression, Shape};

    /// (sequence number, sub-sequence number, arrival second, payload)
    type Row<'a> = (&'a str, Option<i64>, i64, &'a [u8]);

    fn key(first: &str, last: &str) -> ObjectKey {
        let text = ObjectKey::format_in(
            Default::default(),
            "p",
            minute(),
            "s-1",
            &seq(first),
            &seq(last),
            Shape::Parquet.extension(Compression::None),
        );
        ObjectKey::parse("p", &text).unwrap()
    }

    /// A file as the daemon writes it: metadata columns, then `payload`.
    fn file(rows: &[Row<'_>], payload: Vec<(Field, ArrayRef)>) -> Vec<u8> {
        let mut shard = StringBuilder::new();
        let mut seqs = StringBuilder::new();
        let mut subs = Int64Builder::new();
        let mut keys = StringBuilder::new();
        let mut arrivals = TimestampMillisecondBuilder::new().with_timezone("UTC");
        for (seq, sub, second, _) in rows {
            shard.append_value("s-1");
            seqs.append_value(seq);
            subs.append_option(*sub);
            keys.append_value(format!("pk-{seq}"));
            arrivals.append_value(minute().timestamp_millis() + second * 1000 + 7);
        }
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(shard.finish()),
            Arc::new(seqs.finish()),
            Arc::new(subs.finish()),
            Arc::new(keys.finish()),
            Arc::new(arrivals.finish()),
        ];
        let mut fields = metadata_fields();
        for (field, column) in payload {
            fields.push(field);
            columns.push(column);
        }
        let schema = Arc::new(Schema::new(fields));
        let batch = RecordBatch::try_new(Arc::clone(&schema), columns).unwrap();
        let mut writer = ArrowWriter::try_new(Vec::new(), schema, None).unwrap();
        writer.write(&batch).unwrap();
        writer.into_inner().unwrap()
    }

    fn data(rows: &[Row<'_>]) -> Vec<(Field, ArrayRef)> {
        let mut data = BinaryBuilder::new();
        for (_, _, _, payload) in rows {
            data.append_value(payload);
        }
        vec![(
            Field::new("data", DataType::Binary, false),
            Arc::new(data.finish()),
        )]
    }

    #[test]
    fn reads_rows_of_the_data_column() {
        let rows: [Row<'_>; 3] = [
            ("9", None, 1, b"\x00\xff"),
            ("10", Some(0), 2, b""),
            ("10", Some(1), 3, b"x"),
        ];
        let (records, problems) = decode_parquet(&key("9", "10"), &file(&rows, data(&rows)), None);
        assert!(problems.is_empty(), "{problems:#?}");
        assert_eq!(records.len(), 3);
        assert_eq!(records[0].data, b"\x00\xff");
        assert_eq!(
            records[0].approximate_arrival_timestamp,
            "2026-11-21T05:27:01.007Z"
        );
        assert_eq!(records[2].sub_sequence_number, Some(1));
        assert_eq!(records[1].partition_key, "pk-10");
    }

    #[test]
    fn reads_typed_columns_with_a_schema() {
        let schema = Arc::new(
            ParquetSchema::parse(
                r#"[{"name":"id","type":"int64"},{"name":"score","type":"float64"}]"#,
            )
            .unwrap(),
        );
        let rows: [Row<'_>; 2] = [("9", None, 1, b""), ("10", None, 2, b"")];
        let mut ids = Int64Builder::new();
        ids.append_value(7);
        ids.append_null();
        let mut scores = Float64Builder::new();
        scores.append_value(0.5);
        scores.append_value(-1.0);
        let typed: Vec<(Field, ArrayRef)> = vec![
            (
                Field::new("id", DataType::Int64, true),
                Arc::new(ids.finish()),
            ),
            (
                Field::new("score", DataType::Float64, true),
                Arc::new(scores.finish()),
            ),
        ];
        let body = file(&rows, typed);
        let (records, problems) = decode_parquet(&key("9", "10"), &body, Some(&schema));
        assert!(problems.is_empty(), "{problems:#?}");
        let row: Value = serde_json::from_slice(&records[1].data).unwrap();
        assert_eq!(row, json!({"id": null, "score": -1.0}));
        assert_eq!(records[0].payload, PayloadForm::Row(Arc::clone(&schema)));
        // Read without the schema, the columns are not the expected ones.
        let (records, problems) = decode_parquet(&key("9", "10"), &body, None);
        assert!(records.is_empty());
        assert!(problems[0].message.contains("columns are"), "{problems:#?}");
    }

    #[test]
    fn reports_rows_outside_the_key() {
        let rows: [Row<'_>; 2] = [("9", None, 1, b"a"), ("12", None, 61, b"b")];
        let (_, problems) = decode_parquet(&key("9", "10"), &file(&rows, data(&rows)), None);
        let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert!(
            text.iter().any(|t| t.contains("outside the key's range")),
            "{text:#?}"
        );
        assert!(
            text.iter().any(|t| t.contains("not in the key's minute")),
            "{text:#?}"
        );
        let (_, problems) = decode_parquet(&key("9", "10"), b"PAR1 not a file", None);
        assert!(problems[0].message.contains("not a readable Parquet file"));
    }
}

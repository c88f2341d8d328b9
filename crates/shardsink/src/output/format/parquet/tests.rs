//! Unit tests of the `parquet` format.

use ::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use ::parquet::file::reader::{FileReader, SerializedFileReader};
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Float32Type, Float64Type, Int32Type, Int64Type, TimestampMillisecondType,
};
use bytes::Bytes;
use proptest::prelude::*;

use super::row::EXCERPT_CHARS;
use super::*;
use crate::output::read_back::parquet::{compare_rows, reader, row_identities, same_rows};
use crate::output::view::RejectReason;

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
    let builder = ParquetRecordBatchReaderBuilder::try_new(Bytes::copy_from_slice(file)).unwrap();
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
        let sequence_number = format!("4959033827149025660855969253836157109592157598913658{i:04}");
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
        let sequence_number = format!("4959033827149025660855969253836157109592157598913658{i:04}");
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

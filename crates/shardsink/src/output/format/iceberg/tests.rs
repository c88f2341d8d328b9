//! Unit tests of the Iceberg data files.

use ::parquet::arrow::PARQUET_FIELD_ID_META_KEY;
use ::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use arrow_array::cast::AsArray;
use arrow_array::types::{Decimal128Type, Int32Type, Int64Type, TimestampMicrosecondType};
use arrow_schema::{DataType, TimeUnit};
use iceberg::arrow::arrow_schema_to_schema;
use iceberg::spec::{
    Datum, NestedField, PartitionSpec, PrimitiveType, Schema, StructType, Transform,
};

use super::*;

const SHARD: &str = "shardId-000000000001";
/// 2026-11-27T23:59:59.999Z.
const NOV_27_LAST_MS: i64 = 1_795_823_999_999;
/// 2026-11-28T00:00:00.000Z.
const NOV_28_MS: i64 = 1_795_824_000_000;

fn view<'a>(
    sequence_number: &'a str,
    sub: Option<u64>,
    arrival_millis: i64,
    data: &'a [u8],
) -> UserRecordView<'a> {
    UserRecordView {
        shard_id: SHARD,
        sequence_number,
        sub_sequence_number: sub,
        partition_key: "pk-1",
        arrival_millis,
        data,
    }
}

/// The five metadata columns (ids 1 to 5), then `extra` from id 6.
fn schema_with(extra: Vec<NestedField>) -> SchemaRef {
    let mut fields = vec![
        NestedField::required(1, SHARD_ID, Type::Primitive(PrimitiveType::String)),
        NestedField::required(2, SEQUENCE_NUMBER, Type::Primitive(PrimitiveType::String)),
        NestedField::optional(3, SUB_SEQUENCE_NUMBER, Type::Primitive(PrimitiveType::Long)),
        NestedField::required(4, PARTITION_KEY, Type::Primitive(PrimitiveType::String)),
        NestedField::required(
            5,
            APPROXIMATE_ARRIVAL_TIMESTAMP,
            Type::Primitive(PrimitiveType::Timestamptz),
        ),
    ];
    fields.extend(extra);
    Arc::new(
        Schema::builder()
            .with_fields(fields.into_iter().map(Arc::new))
            .build()
            .unwrap(),
    )
}

/// The daemon's default table: the metadata columns and `data` binary.
fn default_schema() -> SchemaRef {
    schema_with(vec![NestedField::required(
        6,
        DATA,
        Type::Primitive(PrimitiveType::Binary),
    )])
}

fn spec(schema: &SchemaRef, fields: &[(&str, &str, Transform)]) -> PartitionSpecRef {
    let mut builder = PartitionSpec::builder(schema.clone()).with_spec_id(0);
    for (source, name, transform) in fields {
        builder = builder
            .add_partition_field(*source, *name, *transform)
            .unwrap();
    }
    Arc::new(builder.build().unwrap())
}

fn by_day(schema: &SchemaRef) -> PartitionSpecRef {
    spec(
        schema,
        &[(
            APPROXIMATE_ARRIVAL_TIMESTAMP,
            "approximate_arrival_timestamp_day",
            Transform::Day,
        )],
    )
}

fn layout(schema: SchemaRef, spec: PartitionSpecRef) -> Arc<IcebergLayout> {
    Arc::new(IcebergLayout::new(schema, spec).unwrap())
}

fn read(file: &Bytes) -> RecordBatch {
    let reader = ParquetRecordBatchReaderBuilder::try_new(file.clone())
        .unwrap()
        .build()
        .unwrap();
    let mut batches = reader.collect::<Result<Vec<_>, _>>().unwrap();
    assert_eq!(batches.len(), 1);
    batches.remove(0)
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

fn micros(batch: &RecordBatch, column: &str) -> Vec<Option<i64>> {
    batch
        .column_by_name(column)
        .unwrap()
        .as_primitive::<TimestampMicrosecondType>()
        .iter()
        .collect()
}

fn rejection(layout: &Arc<IcebergLayout>, data: &[u8]) -> Rejection {
    let mut batch = IcebergBatch::new(layout.clone(), SHARD);
    let rejection = batch.push(&view("1", None, NOV_28_MS, data)).unwrap_err();
    assert_eq!(batch.rows(), 0);
    rejection
}

#[test]
fn default_table_by_day_gives_one_file_per_day_with_all_rows() {
    let schema = default_schema();
    let layout = layout(schema.clone(), by_day(&schema));
    let mut batch = IcebergBatch::new(layout, SHARD);
    // Pushed out of day order: the 28th first.
    batch
        .push(&view("10", None, NOV_28_MS, b"\x00\xffa"))
        .unwrap();
    batch
        .push(&view("11", Some(0), NOV_27_LAST_MS, b"b"))
        .unwrap();
    batch
        .push(&view("11", Some(1), NOV_28_MS + 5, b"c"))
        .unwrap();
    assert!(batch.memory_bytes() > 0);
    let files = batch.finish(Compression::Zstd(3)).unwrap();

    let paths: Vec<_> = files
        .iter()
        .map(|file| file.partition_path.as_str())
        .collect();
    assert_eq!(
        paths,
        [
            "approximate_arrival_timestamp_day=2026-11-27",
            "approximate_arrival_timestamp_day=2026-11-28"
        ]
    );
    // Days since the epoch.
    let days = NOV_28_MS / 86_400_000;
    assert_eq!(
        files[0].partition,
        Struct::from_iter([Some(Literal::date(i32::try_from(days - 1).unwrap()))])
    );
    assert_eq!(
        files[1].partition,
        Struct::from_iter([Some(Literal::date(i32::try_from(days).unwrap()))])
    );
    assert_eq!(
        files
            .iter()
            .map(|file| file.record_count)
            .collect::<Vec<_>>(),
        [1, 2]
    );

    let first = read(&files[0].bytes);
    assert_eq!(strings(&first, SEQUENCE_NUMBER), [Some("11".to_owned())]);
    assert_eq!(
        micros(&first, APPROXIMATE_ARRIVAL_TIMESTAMP),
        [Some(NOV_27_LAST_MS * 1000)]
    );
    let second = read(&files[1].bytes);
    // Push order kept within the file.
    assert_eq!(
        strings(&second, SEQUENCE_NUMBER),
        [Some("10".to_owned()), Some("11".to_owned())]
    );
    assert_eq!(
        strings(&second, SHARD_ID),
        [Some(SHARD.to_owned()), Some(SHARD.to_owned())]
    );
    assert_eq!(
        strings(&second, PARTITION_KEY),
        [Some("pk-1".to_owned()), Some("pk-1".to_owned())]
    );
    assert_eq!(
        micros(&second, APPROXIMATE_ARRIVAL_TIMESTAMP),
        [Some(NOV_28_MS * 1000), Some((NOV_28_MS + 5) * 1000)]
    );
    let subs: Vec<_> = second
        .column_by_name(SUB_SEQUENCE_NUMBER)
        .unwrap()
        .as_primitive::<Int64Type>()
        .iter()
        .collect();
    assert_eq!(subs, [None, Some(1)]);
    let data: Vec<_> = second
        .column_by_name(DATA)
        .unwrap()
        .as_binary::<i64>()
        .iter()
        .collect();
    assert_eq!(data, [Some(&b"\x00\xffa"[..]), Some(&b"c"[..])]);
}

#[test]
fn files_carry_the_field_ids_and_the_table_types() {
    let schema = default_schema();
    let layout = layout(schema.clone(), by_day(&schema));
    let mut batch = IcebergBatch::new(layout, SHARD);
    batch.push(&view("1", None, NOV_28_MS, b"x")).unwrap();
    let files = batch.finish(Compression::None).unwrap();
    let builder = ParquetRecordBatchReaderBuilder::try_new(files[0].bytes.clone()).unwrap();
    let arrow = builder.schema().clone();
    let ids: Vec<_> = arrow
        .fields()
        .iter()
        .map(|field| field.metadata().get(PARQUET_FIELD_ID_META_KEY).cloned())
        .collect();
    assert_eq!(
        ids,
        (1..=6).map(|id| Some(id.to_string())).collect::<Vec<_>>()
    );
    // The Parquet schema itself holds the ids, which is what readers
    // without the embedded Arrow schema (Spark, pyiceberg) use.
    let parquet_ids: Vec<_> = builder
        .parquet_schema()
        .columns()
        .iter()
        .map(|column| column.self_type().get_basic_info().id())
        .collect();
    assert_eq!(parquet_ids, [1, 2, 3, 4, 5, 6]);
    assert_eq!(
        arrow
            .field_with_name(APPROXIMATE_ARRIVAL_TIMESTAMP)
            .unwrap()
            .data_type(),
        &DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()))
    );
    assert_eq!(
        arrow.field_with_name(DATA).unwrap().data_type(),
        &DataType::LargeBinary
    );
    // Read back as iceberg reads a file's schema: the table's own.
    assert_eq!(
        arrow_schema_to_schema(&arrow).unwrap().as_struct(),
        schema.as_struct()
    );
}

#[test]
fn the_same_rows_give_the_same_bytes() {
    let schema = default_schema();
    let layout = layout(schema.clone(), by_day(&schema));
    let write = || {
        let mut batch = IcebergBatch::new(layout.clone(), SHARD);
        for (index, at) in [NOV_28_MS, NOV_27_LAST_MS, NOV_28_MS + 1]
            .into_iter()
            .enumerate()
        {
            let sequence = index.to_string();
            batch
                .push(&view(&sequence, None, at, sequence.as_bytes()))
                .unwrap();
        }
        batch.finish(Compression::Gzip(6)).unwrap()
    };
    let first = write();
    let second = write();
    assert_eq!(first.len(), 2);
    for (a, b) in first.iter().zip(&second) {
        assert_eq!(a.bytes, b.bytes);
        assert_eq!(a.partition, b.partition);
    }
}

#[test]
fn typed_payload_columns_are_converted_from_the_payload() {
    let schema = schema_with(vec![
        NestedField::required(6, "user_id", Type::Primitive(PrimitiveType::Long)),
        NestedField::optional(7, "event", Type::Primitive(PrimitiveType::String)),
        NestedField::optional(8, "at", Type::Primitive(PrimitiveType::Timestamp)),
        NestedField::optional(
            9,
            "price",
            Type::Primitive(PrimitiveType::Decimal {
                precision: 9,
                scale: 2,
            }),
        ),
        NestedField::optional(10, "blob", Type::Primitive(PrimitiveType::Binary)),
        NestedField::optional(11, "id", Type::Primitive(PrimitiveType::Uuid)),
        NestedField::optional(12, "count", Type::Primitive(PrimitiveType::Int)),
    ]);
    let layout = layout(schema.clone(), Arc::new(PartitionSpec::unpartition_spec()));
    let mut batch = IcebergBatch::new(layout, SHARD);
    batch
        .push(&view(
            "1",
            None,
            NOV_28_MS,
            br#"{"user_id": 7, "event": "a", "at": "2026-11-28T01:02:03.456789+01:00",
                 "price": 12.5, "blob": "AAH/", "id": "0123456789ab-cdef-0123-456789abcdef",
                 "count": 3, "extra": 1}"#,
        ))
        .unwrap_err();
    batch
        .push(&view(
            "2",
            None,
            NOV_28_MS,
            br#"{"user_id": 7, "event": "a", "at": "2026-11-28T01:02:03.456789+01:00",
                 "price": "12.50", "blob": "AAH/", "id": "01234567-89AB-cdef-0123-456789abcdef",
                 "count": 3, "extra": 1, "more": [1]}"#,
        ))
        .unwrap();
    batch
        .push(&view(
            "3",
            None,
            NOV_28_MS,
            br#"{"user_id": -1, "at": 1795824000123, "price": -3}"#,
        ))
        .unwrap();
    assert_eq!(batch.ignored_fields(), 2);
    let files = batch.finish(Compression::None).unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].partition, Struct::empty());
    assert_eq!(files[0].partition_path, "");
    let rows = read(&files[0].bytes);
    assert_eq!(
        strings(&rows, SEQUENCE_NUMBER),
        [Some("2".to_owned()), Some("3".to_owned())]
    );
    let users: Vec<_> = rows
        .column_by_name("user_id")
        .unwrap()
        .as_primitive::<Int64Type>()
        .iter()
        .collect();
    assert_eq!(users, [Some(7), Some(-1)]);
    assert_eq!(strings(&rows, "event"), [Some("a".to_owned()), None]);
    // 2026-11-28T00:02:03.456789Z, to the microsecond; epoch milliseconds.
    assert_eq!(
        micros(&rows, "at"),
        [Some(1_795_824_123_456_789), Some(1_795_824_000_123_000)]
    );
    let prices: Vec<_> = rows
        .column_by_name("price")
        .unwrap()
        .as_primitive::<Decimal128Type>()
        .iter()
        .collect();
    assert_eq!(prices, [Some(1250), Some(-300)]);
    let blobs: Vec<_> = rows
        .column_by_name("blob")
        .unwrap()
        .as_binary::<i64>()
        .iter()
        .collect();
    assert_eq!(blobs, [Some(&[0u8, 1, 255][..]), None]);
    let ids: Vec<_> = rows
        .column_by_name("id")
        .unwrap()
        .as_fixed_size_binary()
        .iter()
        .collect();
    assert_eq!(
        ids,
        [
            Some(
                &[
                    0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89,
                    0xab, 0xcd, 0xef
                ][..]
            ),
            None
        ]
    );
    let counts: Vec<_> = rows
        .column_by_name("count")
        .unwrap()
        .as_primitive::<Int32Type>()
        .iter()
        .collect();
    assert_eq!(counts, [Some(3), None]);
}

#[test]
fn payloads_that_do_not_fit_the_table_are_rejected() {
    let schema = schema_with(vec![
        NestedField::required(6, "user_id", Type::Primitive(PrimitiveType::Long)),
        NestedField::optional(
            7,
            "price",
            Type::Primitive(PrimitiveType::Decimal {
                precision: 4,
                scale: 2,
            }),
        ),
    ]);
    let layout = layout(schema, Arc::new(PartitionSpec::unpartition_spec()));
    let cases: [(&[u8], RejectReason, &str); 7] = [
        (
            br#"{"price": 1}"#,
            RejectReason::SchemaMismatch,
            r#"required column "user_id" is missing or null"#,
        ),
        (
            br#"{"user_id": null}"#,
            RejectReason::SchemaMismatch,
            r#"required column "user_id" is missing or null"#,
        ),
        (
            br#"{"user_id": "7"}"#,
            RejectReason::SchemaMismatch,
            r#"field "user_id" is a string, not long"#,
        ),
        (
            br#"{"user_id": 7, "price": 1.234}"#,
            RejectReason::SchemaMismatch,
            r#"field "price" is the number 1.234, out of decimal(4, 2)'s range"#,
        ),
        (
            br#"{"user_id": 7, "price": "100.00"}"#,
            RejectReason::SchemaMismatch,
            r#"field "price" is the string "100.00", out of decimal(4, 2)'s range"#,
        ),
        (
            b"[1]",
            RejectReason::NotJsonObject,
            "payload is not a JSON object",
        ),
        (b"\xff", RejectReason::NotUtf8, "payload is not UTF-8"),
    ];
    for (data, reason, message) in cases {
        let rejection = rejection(&layout, data);
        assert_eq!(rejection.reason, reason, "{message}");
        assert!(
            rejection.message.starts_with(message),
            "{:?} does not start with {message:?}",
            rejection.message
        );
    }
}

#[test]
fn a_text_data_column_holds_the_payload_text() {
    let schema = schema_with(vec![NestedField::optional(
        6,
        DATA,
        Type::Primitive(PrimitiveType::String),
    )]);
    let layout = layout(schema, Arc::new(PartitionSpec::unpartition_spec()));
    assert_eq!(rejection(&layout, b"\xff").reason, RejectReason::NotUtf8);
    let mut batch = IcebergBatch::new(layout, SHARD);
    // Not JSON: there are no payload columns to read.
    batch
        .push(&view("1", None, NOV_28_MS, b"plain text"))
        .unwrap();
    let files = batch.finish(Compression::None).unwrap();
    assert_eq!(
        strings(&read(&files[0].bytes), DATA),
        [Some("plain text".to_owned())]
    );
}

#[test]
fn identity_and_bucket_partitions_on_a_payload_column() {
    let schema = schema_with(vec![
        NestedField::optional(6, "region", Type::Primitive(PrimitiveType::String)),
        NestedField::required(7, "user_id", Type::Primitive(PrimitiveType::Long)),
    ]);
    let spec = spec(
        &schema,
        &[
            ("region", "region", Transform::Identity),
            ("user_id", "user_bucket", Transform::Bucket(4)),
        ],
    );
    let layout = layout(schema, spec);
    let mut batch = IcebergBatch::new(layout, SHARD);
    // Iceberg's bucket of a long: murmur3_x86_32 of its 8 little-endian
    // bytes, mod N (spec, "Bucket Transform Details").
    let bucket = |value: i64| {
        iceberg::transform::create_transform_function(&Transform::Bucket(4))
            .unwrap()
            .transform_literal(&Datum::long(value))
            .unwrap()
            .unwrap()
    };
    // A user in another bucket than user 1.
    let other = (2..100).find(|&user| bucket(user) != bucket(1)).unwrap();
    let payloads = [
        r#"{"region": "eu", "user_id": 1}"#.to_owned(),
        r#"{"user_id": 1}"#.to_owned(),
        format!(r#"{{"region": "eu", "user_id": {other}}}"#),
        r#"{"region": "eu", "user_id": 1}"#.to_owned(),
    ];
    for (index, payload) in payloads.iter().enumerate() {
        batch
            .push(&view(
                &index.to_string(),
                None,
                NOV_28_MS,
                payload.as_bytes(),
            ))
            .unwrap();
    }
    let files = batch.finish(Compression::None).unwrap();
    let expected = |region: Option<&str>, user: i64| -> Struct {
        Struct::from_iter([
            region.map(Literal::string),
            Some(Literal::Primitive(bucket(user).literal().clone())),
        ])
    };
    let partitions: Vec<_> = files.iter().map(|file| file.partition.clone()).collect();
    let mut wanted = vec![
        expected(Some("eu"), other),
        expected(Some("eu"), 1),
        expected(None, 1),
    ];
    wanted.sort_by(compare_partitions);
    assert_eq!(partitions, wanted);
    // Nulls first.
    assert_eq!(wanted[0], expected(None, 1));
    let sequences: Vec<_> = files
        .iter()
        .map(|file| strings(&read(&file.bytes), SEQUENCE_NUMBER))
        .collect();
    let eu_1 = partitions
        .iter()
        .position(|partition| *partition == expected(Some("eu"), 1))
        .unwrap();
    assert_eq!(
        sequences[eu_1],
        [Some("0".to_owned()), Some("3".to_owned())]
    );
    assert!(
        files[0]
            .partition_path
            .starts_with("region=null/user_bucket=")
    );
}

#[test]
fn layouts_the_writer_cannot_fill_are_refused() {
    let nested = Type::Struct(StructType::new(vec![Arc::new(NestedField::optional(
        20,
        "inner",
        Type::Primitive(PrimitiveType::String),
    ))]));
    let unpartitioned = || Arc::new(PartitionSpec::unpartition_spec());
    let refused = |extra: Vec<NestedField>| {
        IcebergLayout::new(schema_with(extra), unpartitioned()).unwrap_err()
    };
    assert!(matches!(
        refused(vec![NestedField::required(6, "s", nested.clone())]),
        IcebergLayoutError::Unsupported { column, .. } if column == "s"
    ));
    assert!(matches!(
        refused(vec![NestedField::optional(6, "t", Type::Primitive(PrimitiveType::Time))]),
        IcebergLayoutError::Unsupported { column, column_type } if column == "t" && column_type == "time"
    ));
    // An optional nested column is allowed, and written null.
    let schema = schema_with(vec![NestedField::optional(6, "s", nested)]);
    let layout = layout(schema, unpartitioned());
    let mut batch = IcebergBatch::new(layout, SHARD);
    batch
        .push(&view("1", None, NOV_28_MS, br#"{"s": {"inner": "x"}}"#))
        .unwrap();
    let files = batch.finish(Compression::None).unwrap();
    assert_eq!(
        read(&files[0].bytes)
            .column_by_name("s")
            .unwrap()
            .null_count(),
        1
    );

    let wrong_metadata = Arc::new(
        Schema::builder()
            .with_fields(vec![Arc::new(NestedField::required(
                1,
                APPROXIMATE_ARRIVAL_TIMESTAMP,
                Type::Primitive(PrimitiveType::Long),
            ))])
            .build()
            .unwrap(),
    );
    assert!(matches!(
        IcebergLayout::new(wrong_metadata, unpartitioned()).unwrap_err(),
        IcebergLayoutError::MetadataType { column, .. } if column == APPROXIMATE_ARRIVAL_TIMESTAMP
    ));
    let required_sub = Arc::new(
        Schema::builder()
            .with_fields(vec![Arc::new(NestedField::required(
                1,
                SUB_SEQUENCE_NUMBER,
                Type::Primitive(PrimitiveType::Long),
            ))])
            .build()
            .unwrap(),
    );
    assert!(matches!(
        IcebergLayout::new(required_sub, unpartitioned()).unwrap_err(),
        IcebergLayoutError::MustBeOptional { .. }
    ));
}

#[test]
fn every_supported_type_has_a_builder_of_its_arrow_type() {
    let types = [
        PrimitiveType::String,
        PrimitiveType::Boolean,
        PrimitiveType::Int,
        PrimitiveType::Long,
        PrimitiveType::Float,
        PrimitiveType::Double,
        PrimitiveType::Date,
        PrimitiveType::Timestamp,
        PrimitiveType::Timestamptz,
        PrimitiveType::Decimal {
            precision: 38,
            scale: 10,
        },
        PrimitiveType::Binary,
        PrimitiveType::Uuid,
    ];
    let extra = types
        .iter()
        .zip(6..)
        .map(|(ty, id)| NestedField::optional(id, format!("c{id}"), Type::Primitive(ty.clone())))
        .collect();
    let layout = layout(
        schema_with(extra),
        Arc::new(PartitionSpec::unpartition_spec()),
    );
    let batch = IcebergBatch::new(layout.clone(), SHARD);
    assert!(batch.columns.iter().all(Option::is_some));
}

#[test]
fn data_file_describes_the_file() {
    let schema = default_schema();
    let layout = layout(schema.clone(), by_day(&schema));
    let mut batch = IcebergBatch::new(layout, SHARD);
    batch.push(&view("1", None, NOV_28_MS + 9, b"x")).unwrap();
    batch.push(&view("2", Some(3), NOV_28_MS, b"yz")).unwrap();
    let files = batch.finish(Compression::None).unwrap();
    let file = &files[0];
    let data_file = file.data_file("s3://b/t/data/f.parquet", 7).unwrap();
    assert_eq!(data_file.file_path(), "s3://b/t/data/f.parquet");
    assert_eq!(data_file.record_count(), 2);
    assert_eq!(data_file.file_size_in_bytes(), file.bytes.len() as u64);
    assert_eq!(data_file.partition(), &file.partition);
    assert_eq!(data_file.file_format(), DataFileFormat::Parquet);
    assert_eq!(data_file.null_value_counts().get(&3), Some(&1));
    assert_eq!(data_file.value_counts().get(&6), Some(&2));
    assert!(
        data_file
            .column_sizes()
            .get(&6)
            .is_some_and(|size| *size > 0)
    );
}

#[test]
fn an_empty_batch_gives_no_files() {
    let schema = default_schema();
    let layout = layout(schema.clone(), by_day(&schema));
    let batch = IcebergBatch::new(layout, SHARD);
    assert!(batch.finish(Compression::None).unwrap().is_empty());
}

#[test]
fn partition_values_order_nulls_first_then_values() {
    let a = Struct::from_iter([None, Some(Literal::int(2))]);
    let b = Struct::from_iter([Some(Literal::int(1)), Some(Literal::int(0))]);
    let c = Struct::from_iter([Some(Literal::int(1)), Some(Literal::int(5))]);
    assert_eq!(compare_partitions(&a, &b), Ordering::Less);
    assert_eq!(compare_partitions(&b, &c), Ordering::Less);
    assert_eq!(compare_partitions(&c, &b), Ordering::Greater);
}

#[tokio::test]
async fn iceberg_reads_the_files_back_by_field_id() {
    use futures::{StreamExt, TryStreamExt};
    use iceberg::arrow::ArrowReaderBuilder;
    use iceberg::io::FileIO;
    use iceberg::scan::FileScanTask;

    let schema = default_schema();
    let layout = layout(schema.clone(), by_day(&schema));
    assert_eq!(layout.schema(), &schema);
    assert_eq!(layout.spec().fields().len(), 1);
    let mut batch = IcebergBatch::new(layout.clone(), SHARD);
    batch
        .push(&view("7", Some(2), NOV_28_MS + 1, b"p"))
        .unwrap();
    batch.push(&view("8", None, NOV_28_MS + 2, b"q")).unwrap();
    let file = batch.finish(Compression::Zstd(1)).unwrap().remove(0);

    let file_io = FileIO::new_with_memory();
    let path = "memory://table/data/f.parquet";
    file_io
        .new_output(path)
        .unwrap()
        .write(file.bytes.clone())
        .await
        .unwrap();
    let task = FileScanTask::builder()
        .with_file_size_in_bytes(file.bytes.len() as u64)
        .with_start(0)
        .with_length(file.bytes.len() as u64)
        .with_record_count(Some(file.record_count))
        .with_data_file_path(path.to_owned())
        .with_data_file_format(DataFileFormat::Parquet)
        .with_schema(schema.clone())
        // `data` and the arrival time, in another order than the file's.
        .with_project_field_ids(vec![6, 5, 2])
        .with_partition(Some(file.partition.clone()))
        .with_partition_spec(Some(layout.spec().clone()))
        .with_case_sensitive(true)
        .build();
    let reader = ArrowReaderBuilder::new(file_io, iceberg::Runtime::current()).build();
    let batches: Vec<RecordBatch> = reader
        .read(futures::stream::iter([Ok(task)]).boxed())
        .unwrap()
        .stream()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(batches.len(), 1);
    let rows = &batches[0];
    let names: Vec<_> = rows
        .schema()
        .fields()
        .iter()
        .map(|field| field.name().clone())
        .collect();
    assert_eq!(
        names,
        [DATA, APPROXIMATE_ARRIVAL_TIMESTAMP, SEQUENCE_NUMBER]
    );
    assert_eq!(
        micros(rows, APPROXIMATE_ARRIVAL_TIMESTAMP),
        [Some((NOV_28_MS + 1) * 1000), Some((NOV_28_MS + 2) * 1000)]
    );
    assert_eq!(
        strings(rows, SEQUENCE_NUMBER),
        [Some("7".to_owned()), Some("8".to_owned())]
    );
    let data: Vec<_> = rows
        .column_by_name(DATA)
        .unwrap()
        .as_binary::<i64>()
        .iter()
        .collect();
    assert_eq!(data, [Some(&b"p"[..]), Some(&b"q"[..])]);
    assert_eq!(layout.arrow_schema().fields().len(), 6);
}

#[test]
fn string_upper_bounds_are_cut_and_incremented() {
    assert_eq!(string_upper_bound("abc", 3).as_deref(), Some("abc"));
    assert_eq!(string_upper_bound("abcd", 3).as_deref(), Some("abd"));
    assert_eq!(
        string_upper_bound("ab\u{10FFFF}d", 3).as_deref(),
        Some("ac")
    );
    assert_eq!(
        string_upper_bound("a\u{D7FF}xy", 2).as_deref(),
        Some("a\u{E000}")
    );
    assert_eq!(string_upper_bound("\u{10FFFF}\u{10FFFF}x", 2), None);
    assert_eq!(truncate_chars("ééé", 2), "éé");
}

#[test]
fn iceberg_transforms_give_the_partition_values_and_paths() {
    let hours = i32::try_from(NOV_28_MS / 3_600_000).unwrap();
    let years = 2026 - 1970;
    let cases = [
        (
            APPROXIMATE_ARRIVAL_TIMESTAMP,
            Transform::Year,
            vec![("x=2026", Literal::int(years))],
        ),
        (
            APPROXIMATE_ARRIVAL_TIMESTAMP,
            Transform::Month,
            vec![("x=2026-11", Literal::int(years * 12 + 10))],
        ),
        (
            APPROXIMATE_ARRIVAL_TIMESTAMP,
            Transform::Hour,
            vec![
                ("x=2026-11-28-00", Literal::int(hours)),
                ("x=2026-11-28-01", Literal::int(hours + 1)),
            ],
        ),
        (
            PARTITION_KEY,
            Transform::Truncate(2),
            vec![("x=pk", Literal::string("pk"))],
        ),
    ];
    for (source, transform, expected) in cases {
        let schema = default_schema();
        let layout = layout(schema.clone(), spec(&schema, &[(source, "x", transform)]));
        let mut batch = IcebergBatch::new(layout, SHARD);
        // 2026-11-28T01:00Z, then 00:00Z: two hours of the same month.
        batch
            .push(&view("1", None, NOV_28_MS + 3_600_000, b"a"))
            .unwrap();
        batch.push(&view("2", None, NOV_28_MS, b"b")).unwrap();
        let files = batch.finish(Compression::None).unwrap();
        let found: Vec<_> = files
            .iter()
            .map(|file| (file.partition_path.as_str(), file.partition.clone()))
            .collect();
        let expected: Vec<_> = expected
            .into_iter()
            .map(|(path, value)| (path, Struct::from_iter([Some(value)])))
            .collect();
        assert_eq!(found, expected, "{transform}");
    }
}

#[test]
fn a_spec_of_void_fields_gives_one_file_of_null_values() {
    let schema = default_schema();
    let spec = spec(&schema, &[(SHARD_ID, "nothing", Transform::Void)]);
    let layout = layout(schema, spec);
    let mut batch = IcebergBatch::new(layout, SHARD);
    batch.push(&view("1", None, NOV_28_MS, b"a")).unwrap();
    batch.push(&view("2", None, NOV_27_LAST_MS, b"b")).unwrap();
    let files = batch.finish(Compression::None).unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].partition, Struct::from_iter([None]));
    assert_eq!(files[0].partition_path, "nothing=null");
    assert_eq!(files[0].record_count, 2);
}

#[test]
fn partition_paths_are_url_encoded() {
    assert_eq!(form_url_encode("eu-west_1.*"), "eu-west_1.*");
    assert_eq!(form_url_encode("a/b c+é"), "a%2Fb+c%2B%C3%A9");
    let schema = schema_with(vec![NestedField::optional(
        6,
        "region",
        Type::Primitive(PrimitiveType::String),
    )]);
    let layout = layout(
        schema.clone(),
        spec(&schema, &[("region", "region", Transform::Identity)]),
    );
    let mut batch = IcebergBatch::new(layout, SHARD);
    batch
        .push(&view("1", None, NOV_28_MS, br#"{"region": "eu/west"}"#))
        .unwrap();
    let files = batch.finish(Compression::None).unwrap();
    assert_eq!(files[0].partition_path, "region=eu%2Fwest");
}

#[test]
fn memory_bytes_counts_what_the_columns_hold() {
    let schema = default_schema();
    let layout = layout(schema.clone(), by_day(&schema));
    let mut batch = IcebergBatch::new(layout, SHARD);
    batch.push(&view("1", None, NOV_28_MS, b"xyz")).unwrap();
    // shard id 20 + 4, sequence number 1 + 4, a null long 8, partition key
    // 4 + 4, arrival 8, data 3 + 4 (built as Binary: a 32-bit offset).
    assert_eq!(batch.memory_bytes(), 24 + 5 + 8 + 8 + 8 + 7);
    batch.push(&view("2", Some(1), NOV_28_MS, b"")).unwrap();
    assert_eq!(batch.memory_bytes(), 60 + 24 + 5 + 8 + 8 + 8 + 4);
}

#[test]
fn a_batch_of_one_day_is_written_whole_and_a_batch_of_two_is_split() {
    let schema = default_schema();
    let layout = layout(schema.clone(), by_day(&schema));
    let batch_of = |arrivals: &[i64]| {
        let mut batch = IcebergBatch::new(layout.clone(), SHARD);
        let numbers: Vec<String> = (0..arrivals.len()).map(|n| (n + 1).to_string()).collect();
        for (number, arrival) in numbers.iter().zip(arrivals) {
            batch.push(&view(number, None, *arrival, b"x")).unwrap();
        }
        batch
    };
    let one_day = [NOV_28_MS, NOV_28_MS + 1, NOV_28_MS + 86_399_999];
    assert!(is_one_partition(
        &layout,
        &record_batch_of(&layout, &one_day)
    ));
    assert!(!is_one_partition(
        &layout,
        &record_batch_of(&layout, &[NOV_27_LAST_MS, NOV_28_MS])
    ));

    let files = batch_of(&one_day).finish(Compression::None).unwrap();
    assert_eq!(files.len(), 1);
    let days = i32::try_from(NOV_28_MS / 86_400_000).unwrap();
    assert_eq!(
        files[0].partition,
        Struct::from_iter([Some(Literal::date(days))])
    );
    assert_eq!(
        strings(&read(&files[0].bytes), SEQUENCE_NUMBER),
        [Some("1".into()), Some("2".into()), Some("3".into())]
    );
    let split = batch_of(&[NOV_27_LAST_MS, NOV_28_MS, NOV_27_LAST_MS])
        .finish(Compression::None)
        .unwrap();
    assert_eq!(
        split.iter().map(|f| f.record_count).collect::<Vec<_>>(),
        [2, 1]
    );
}

/// The record batch `finish` would split, of rows arriving at `arrivals`.
fn record_batch_of(layout: &Arc<IcebergLayout>, arrivals: &[i64]) -> RecordBatch {
    let mut batch = IcebergBatch::new(layout.clone(), SHARD);
    let numbers: Vec<String> = (0..arrivals.len()).map(|n| (n + 1).to_string()).collect();
    for (number, arrival) in numbers.iter().zip(arrivals) {
        batch.push(&view(number, None, *arrival, b"x")).unwrap();
    }
    layout.record_batch(batch.columns, arrivals.len()).unwrap()
}

#[test]
fn a_json_string_column_takes_any_json_value_as_its_text() {
    let schema = schema_with(vec![
        NestedField::optional(6, "nested", Type::Primitive(PrimitiveType::String))
            .with_doc(JSON_COLUMN_DOC),
        NestedField::optional(7, "name", Type::Primitive(PrimitiveType::String)),
    ]);
    let layout = layout(schema, Arc::new(PartitionSpec::unpartition_spec()));
    let mut batch = IcebergBatch::new(layout.clone(), SHARD);
    batch
        .push(&view(
            "1",
            None,
            NOV_28_MS,
            br#"{"nested": {"a": [1, 2]}, "name": "x"}"#,
        ))
        .unwrap();
    batch
        .push(&view("2", None, NOV_28_MS, br#"{"nested": 42}"#))
        .unwrap();
    batch
        .push(&view("3", None, NOV_28_MS, br#"{"nested": "text"}"#))
        .unwrap();
    // A plain string column still takes JSON strings only.
    assert_eq!(
        rejection(&layout, br#"{"name": {"a": 1}}"#).reason,
        RejectReason::SchemaMismatch
    );
    let files = batch.finish(Compression::None).unwrap();
    assert_eq!(
        strings(&read(&files[0].bytes), "nested"),
        [
            Some(r#"{"a":[1,2]}"#.to_owned()),
            Some("42".to_owned()),
            Some(r#""text""#.to_owned())
        ]
    );
}

#[test]
fn binary_columns_built_as_binary_give_the_files_of_their_large_binary_fields() {
    // `data` holds the payload's bytes, `blob` its member's base64 text
    // decoded.
    let schema = schema_with(vec![
        NestedField::required(6, DATA, Type::Primitive(PrimitiveType::Binary)),
        NestedField::optional(7, "blob", Type::Primitive(PrimitiveType::Binary)),
    ]);
    let layout = layout(schema.clone(), by_day(&schema));
    for name in [DATA, "blob"] {
        let built = layout.built_schema.field_with_name(name).unwrap();
        assert_eq!(built.data_type(), &DataType::Binary);
        let file = layout.arrow_schema.field_with_name(name).unwrap();
        assert_eq!(file.data_type(), &DataType::LargeBinary);
        assert_eq!(built.metadata(), file.metadata());
    }
    let mut batch = IcebergBatch::new(layout.clone(), SHARD);
    batch
        .push(&view("1", None, NOV_28_MS, br#"{"blob":"AP9h"}"#))
        .unwrap();
    batch
        .push(&view("2", Some(4), NOV_28_MS + 1, b"{}"))
        .unwrap();
    let files = batch.finish(Compression::Zstd(3)).unwrap();
    // Read back as LargeBinary (the footer's Arrow schema) and written
    // again from those arrays: the same bytes.
    let rows = read(&files[0].bytes);
    let blob = rows.column_by_name("blob").unwrap().as_binary::<i64>();
    assert_eq!(
        blob.iter().collect::<Vec<_>>(),
        [Some(&b"\x00\xffa"[..]), None]
    );
    let properties = writer_properties(Compression::Zstd(3)).unwrap();
    let (again, _) = write_parquet(&layout.arrow_schema, &rows, properties).unwrap();
    assert_eq!(again, files[0].bytes);
}

#[test]
fn column_metrics_are_those_of_the_footer_read_back() {
    let schema = schema_with(vec![
        NestedField::optional(6, "name", Type::Primitive(PrimitiveType::String)),
        NestedField::optional(7, "count", Type::Primitive(PrimitiveType::Long)),
        NestedField::optional(8, "ratio", Type::Primitive(PrimitiveType::Double)),
        NestedField::optional(9, "ok", Type::Primitive(PrimitiveType::Boolean)),
        NestedField::optional(10, "day", Type::Primitive(PrimitiveType::Date)),
    ]);
    let layout = layout(schema.clone(), by_day(&schema));
    let long = "x".repeat(100);
    let payloads = [
        format!(r#"{{"name":"{long}","count":-3,"ratio":0.5,"ok":true,"day":"2026-11-28"}}"#),
        r#"{"name":"émile","count":9,"ok":false}"#.to_owned(),
        r#"{"ratio":-1.25,"day":"2026-01-02"}"#.to_owned(),
    ];
    let mut batch = IcebergBatch::new(layout, SHARD);
    for (index, (payload, at)) in payloads
        .iter()
        .zip([NOV_28_MS, NOV_27_LAST_MS, NOV_28_MS + 5])
        .enumerate()
    {
        let sequence = format!("4959{index}");
        let sub = (index == 1).then_some(2);
        batch
            .push(&view(&sequence, sub, at, payload.as_bytes()))
            .unwrap();
    }
    let files = batch.finish(Compression::Gzip(6)).unwrap();
    assert_eq!(files.len(), 2);
    for file in &files {
        let footer = ::parquet::file::metadata::ParquetMetaDataReader::new()
            .parse_and_finish(&file.bytes)
            .unwrap();
        let read_back = ColumnStats::of(&footer, &schema);
        assert_eq!(file.column_stats, read_back);
        assert!(!read_back.upper_bounds.is_empty());
    }
    // The long name is cut to 16 characters, the upper bound incremented.
    let day = &files[1].column_stats;
    assert_eq!(
        day.lower_bounds.get(&6),
        Some(&Datum::string("x".repeat(16)))
    );
    assert_eq!(
        day.upper_bounds.get(&6),
        Some(&Datum::string(format!("{}y", "x".repeat(15))))
    );
    assert_eq!(day.null_value_counts.get(&7), Some(&1));
}

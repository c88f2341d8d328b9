//! An in-memory catalog, staged batches and small Parquet data files for
//! the tests.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{
    ArrayRef, Int64Array, LargeBinaryArray, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow_schema::DataType;
use iceberg::CatalogBuilder;
use iceberg::memory::{MEMORY_CATALOG_WAREHOUSE, MemoryCatalog, MemoryCatalogBuilder};
use iceberg::spec::{
    DataContentType, DataFile, DataFileBuilder, DataFileFormat, Literal, Struct,
    serialize_data_file_to_json,
};
use iceberg::table::Table;
use iceberg::{Catalog, TableIdent};
use parquet::arrow::ArrowWriter;

use tokio::sync::watch;

use super::commit::commit_staged;
use super::create::{Instants, NewTable, default_partition_spec, default_schema, find_or_create};
use super::sink::{Published, TableSink};
use super::state::{CommitState, StagedBatch, StagedFile};
use crate::aws::table_storage::S3TableStorageFactory;
use crate::output::bucket::TimeBucket;
use crate::output::format::iceberg::IcebergLayout;
use crate::output::format::schema::{
    APPROXIMATE_ARRIVAL_TIMESTAMP, DATA, PARTITION_KEY, SEQUENCE_NUMBER, SHARD_ID,
    SUB_SEQUENCE_NUMBER,
};

/// A memory catalog with an in-memory warehouse.
pub(crate) async fn memory_catalog() -> MemoryCatalog {
    MemoryCatalogBuilder::default()
        .load(
            "memory",
            HashMap::from([(
                MEMORY_CATALOG_WAREHOUSE.to_owned(),
                "memory://warehouse".to_owned(),
            )]),
        )
        .await
        .expect("a memory catalog")
}

/// A memory catalog whose warehouse is `s3://wh`, its files read and
/// written through `s3` (a fake bucket's client): the table's metadata,
/// manifests and the data files the writer PUTs are all in that bucket.
pub(crate) async fn s3_memory_catalog(s3: aws_sdk_s3::Client) -> MemoryCatalog {
    MemoryCatalogBuilder::default()
        .with_storage_factory(Arc::new(S3TableStorageFactory::new(s3)))
        .load(
            "memory",
            HashMap::from([(MEMORY_CATALOG_WAREHOUSE.to_owned(), "s3://wh".to_owned())]),
        )
        .await
        .expect("a memory catalog")
}

/// `archive.events` in a memory catalog over the fake bucket `s3` serves
/// (created as shardsink creates it), with what a shard's writer and task
/// need of it.
pub(crate) struct S3Table {
    /// The catalog.
    pub catalog: Arc<MemoryCatalog>,
    /// The table's name.
    pub ident: TableIdent,
    /// The sink the writers use.
    pub sink: Arc<TableSink>,
    /// Publishes commit states to the sink, as the committer does.
    pub publish: watch::Sender<Published>,
    /// The table's layout, for `Format::Iceberg`.
    pub layout: Arc<IcebergLayout>,
}

impl S3Table {
    /// Creates the table as `new` says in a new catalog over `s3`.
    pub(crate) async fn create(s3: aws_sdk_s3::Client, new: NewTable) -> Self {
        let catalog = Arc::new(s3_memory_catalog(s3.clone()).await);
        let ident = TableIdent::from_strs(["archive", "events"]).expect("a table name");
        let table = find_or_create(catalog.as_ref(), &ident, new)
            .await
            .expect("the table");
        let metadata = table.metadata();
        let layout = Arc::new(
            IcebergLayout::new(
                metadata.current_schema().clone(),
                metadata.default_partition_spec().clone(),
            )
            .expect("the table's layout"),
        );
        let (publish, published) = watch::channel(None);
        let sink = TableSink::new(catalog.clone(), &table, s3, published).expect("a table sink");
        Self {
            catalog,
            ident,
            sink: Arc::new(sink),
            publish,
            layout,
        }
    }

    /// Commits `entries` (staged entries as a lease row holds them) and
    /// returns the state the table holds after it.
    pub(crate) async fn commit(&self, entries: &[String]) -> CommitState {
        let staged: Vec<StagedBatch> = entries
            .iter()
            .map(|entry| serde_json::from_str(entry).expect("a staged entry"))
            .collect();
        commit_staged(self.catalog.as_ref(), &self.ident, &staged)
            .await
            .expect("a commit")
            .state()
            .clone()
    }

    /// The table as the catalog has it now.
    pub(crate) async fn load(&self) -> Table {
        self.catalog
            .load_table(&self.ident)
            .await
            .expect("the table")
    }

    /// The `sequence_number` of every row of the table's current snapshot,
    /// read from its data files, in the order the scan gives them.
    pub(crate) async fn sequence_numbers(&self) -> Vec<String> {
        use arrow_array::cast::AsArray;
        use futures::TryStreamExt;
        let table = self.load().await;
        if table.metadata().current_snapshot().is_none() {
            return Vec::new();
        }
        let batches: Vec<RecordBatch> = table
            .scan()
            .select([SEQUENCE_NUMBER])
            .build()
            .expect("a scan")
            .to_arrow()
            .await
            .expect("a record batch stream")
            .try_collect()
            .await
            .expect("the rows");
        batches
            .iter()
            .flat_map(|batch| {
                batch
                    .column(0)
                    .as_string::<i32>()
                    .iter()
                    .map(|value| value.expect("a sequence number").to_owned())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Publishes `state` to the sink, as the committer does after a round.
    pub(crate) fn publish(&self, state: CommitState) {
        self.publish.send_replace(Some(Arc::new(state)));
    }
}

/// The table shardsink creates by default: the `data` column, partitioned
/// by arrival day.
pub(crate) fn default_new_table() -> NewTable {
    NewTable {
        schema: default_schema(None, Instants::WithZone).expect("the default schema"),
        partition_spec: default_partition_spec(TimeBucket::Minute).expect("the default spec"),
        location: None,
    }
}

/// `archive.events`, found or created in `catalog` as shardsink creates it.
pub(crate) async fn events_table(catalog: &dyn Catalog) -> (TableIdent, Table) {
    let ident = TableIdent::from_strs(["archive", "events"]).expect("a table name");
    let table = find_or_create(catalog, &ident, default_new_table())
        .await
        .expect("the table");
    (ident, table)
}

/// A staged batch of `shard` after `after` up to `last`, with one data file
/// of `records` rows in the partition of day `day` (days since 1970-01-01)
/// of `table`'s default spec. The file is named, not written.
pub(crate) fn staged(table: &Table, shard: &str, after: &str, last: &str, day: i32) -> StagedBatch {
    let metadata = table.metadata();
    let spec = metadata.default_partition_spec();
    let file = DataFileBuilder::default()
        .content(DataContentType::Data)
        .file_path(format!(
            "{}/data/day={day}/{shard}-{after}-{last}.parquet",
            metadata.location()
        ))
        .file_format(DataFileFormat::Parquet)
        .file_size_in_bytes(100)
        .record_count(3)
        .partition(Struct::from_iter([Some(Literal::int(day))]))
        .partition_spec_id(spec.spec_id())
        .build()
        .expect("a data file");
    staged_with(table, shard, after, last, file)
}

/// A staged batch of `shard` after `after` up to `last` whose one data file
/// is `file` (of `table`'s default spec).
pub(crate) fn staged_with(
    table: &Table,
    shard: &str,
    after: &str,
    last: &str,
    file: DataFile,
) -> StagedBatch {
    let metadata = table.metadata();
    let spec = metadata.default_partition_spec();
    let partition_type = spec
        .partition_type(metadata.current_schema())
        .expect("a partition type");
    StagedBatch {
        shard_id: shard.to_owned(),
        after: after.to_owned(),
        last: last.to_owned(),
        files: vec![StagedFile {
            spec_id: spec.spec_id(),
            data_file: serialize_data_file_to_json(
                file,
                &partition_type,
                metadata.format_version(),
            )
            .expect("a data file as JSON"),
        }],
    }
}

/// Writes a real Parquet data file named `name` in the partition of day
/// `day` of `table` (a table with the default schema of `data` payloads and
/// the default day spec), through the table's file I/O, holding one row per
/// `(shard id, sequence number)` (no sub-sequence number), with Iceberg field
/// ids; returns its path and its data file entry.
pub(crate) async fn write_data_file(
    table: &Table,
    name: &str,
    day: i32,
    rows: &[(&str, &str)],
) -> (String, DataFile) {
    let metadata = table.metadata();
    let schema = Arc::new(
        iceberg::arrow::schema_to_arrow_schema(metadata.current_schema()).expect("an arrow schema"),
    );
    let micros = i64::from(day) * 86_400 * 1_000_000;
    let columns: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .map(|field| -> ArrayRef {
            match (field.name().as_str(), field.data_type()) {
                (SHARD_ID, _) => Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
                (SEQUENCE_NUMBER, _) => {
                    Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1)))
                }
                (SUB_SEQUENCE_NUMBER, _) => Arc::new(Int64Array::from(vec![None; rows.len()])),
                (PARTITION_KEY, _) => {
                    Arc::new(StringArray::from_iter_values(rows.iter().map(|_| "key")))
                }
                (APPROXIMATE_ARRIVAL_TIMESTAMP, DataType::Timestamp(_, zone)) => Arc::new(
                    TimestampMicrosecondArray::from(vec![micros; rows.len()])
                        .with_timezone_opt(zone.clone()),
                ),
                (DATA, _) => Arc::new(LargeBinaryArray::from_iter_values(
                    rows.iter().map(|_| b"{}"),
                )),
                (other, _) => panic!("no test values for column {other}"),
            }
        })
        .collect();
    let batch = RecordBatch::try_new(schema.clone(), columns).expect("a record batch");
    let mut bytes = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut bytes, schema, None).expect("a parquet writer");
    writer.write(&batch).expect("rows written");
    writer.close().expect("a parquet file");
    let path = format!("{}/data/day={day}/{name}.parquet", metadata.location());
    let size = bytes.len() as u64;
    table
        .file_io()
        .new_output(&path)
        .expect("an output file")
        .write(bytes.into())
        .await
        .expect("the file written");
    let file = DataFileBuilder::default()
        .content(DataContentType::Data)
        .file_path(path.clone())
        .file_format(DataFileFormat::Parquet)
        .file_size_in_bytes(size)
        .record_count(rows.len() as u64)
        .partition(Struct::from_iter([Some(Literal::int(day))]))
        .partition_spec_id(metadata.default_partition_spec().spec_id())
        .build()
        .expect("a data file");
    (path, file)
}

/// The paths of the live data files of the table's current snapshot,
/// sorted; a path listed twice means a file appended twice.
pub(crate) async fn live_files(table: &Table) -> Vec<String> {
    use futures::TryStreamExt;
    let Some(_) = table.metadata().current_snapshot() else {
        return Vec::new();
    };
    let tasks: Vec<_> = table
        .scan()
        .build()
        .expect("a scan")
        .plan_files()
        .await
        .expect("planned files")
        .try_collect()
        .await
        .expect("file tasks");
    let mut paths: Vec<String> = tasks.into_iter().map(|t| t.data_file_path).collect();
    paths.sort();
    paths
}

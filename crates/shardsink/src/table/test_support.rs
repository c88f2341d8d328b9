//! An in-memory catalog and staged batches for the tests.

use std::collections::HashMap;

use iceberg::CatalogBuilder;
use iceberg::memory::{MEMORY_CATALOG_WAREHOUSE, MemoryCatalog, MemoryCatalogBuilder};
use iceberg::spec::{
    DataContentType, DataFileBuilder, DataFileFormat, Literal, Struct, serialize_data_file_to_json,
};
use iceberg::table::Table;

use iceberg::{Catalog, TableIdent};

use super::create::{NewTable, default_partition_spec, default_schema, find_or_create};
use super::state::{StagedBatch, StagedFile};
use crate::output::bucket::TimeBucket;

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

/// The table shardsink creates by default: the `data` column, partitioned
/// by arrival day.
pub(crate) fn default_new_table() -> NewTable {
    NewTable {
        schema: default_schema(None).expect("the default schema"),
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
/// of `table`'s default spec.
pub(crate) fn staged(table: &Table, shard: &str, after: &str, last: &str, day: i32) -> StagedBatch {
    let metadata = table.metadata();
    let spec = metadata.default_partition_spec();
    let partition_type = spec
        .partition_type(metadata.current_schema())
        .expect("a partition type");
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

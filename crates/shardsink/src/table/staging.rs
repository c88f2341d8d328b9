//! A batch's data files as written and staged: their paths, and the
//! [`StagedBatch`] the owner records in its lease row.
//!
//! A data file's path is a function of the batch and its partition value:
//! `<table location>/data/<partition path>/<shard id>-<first>-<last>.parquet`,
//! so a replay of the batch writes the same path (and, the encoding being
//! deterministic, the same bytes), and `If-None-Match: *` finds the first
//! write.

use iceberg::spec::{TableMetadata, serialize_data_file_to_json};
use iceberg::{Error as IcebergError, ErrorKind, Result as IcebergResult};
use sequence_range::SequenceNumber;
use shard_lease::Checkpoint;

use super::state::{StagedBatch, StagedFile};
use crate::output::format::iceberg::PartitionFile;

/// The path of a batch's data file for one partition value: under the
/// table's `data/` directory, in the partition's directory (none for an
/// unpartitioned table).
pub fn data_file_path(
    location: &str,
    partition_path: &str,
    shard_id: &str,
    first: &SequenceNumber,
    last: &SequenceNumber,
) -> String {
    let location = location.trim_end_matches('/');
    let name = format!("{shard_id}-{first}-{last}.parquet");
    if partition_path.is_empty() {
        format!("{location}/data/{name}")
    } else {
        format!("{location}/data/{partition_path}/{name}")
    }
}

/// The staged batch of `shard_id`'s records after `after` up to `last`,
/// whose files are `files` (each written at its path), for the table's
/// default partition spec.
///
/// # Errors
/// A data file that iceberg cannot describe (not expected: every field is
/// set).
pub fn staged_batch(
    metadata: &TableMetadata,
    shard_id: &str,
    after: &Checkpoint,
    last: &SequenceNumber,
    files: &[(String, PartitionFile)],
) -> IcebergResult<StagedBatch> {
    let spec = metadata.default_partition_spec();
    let partition_type = spec.partition_type(metadata.current_schema())?;
    let files = files
        .iter()
        .map(|(path, file)| {
            let data_file = file.data_file(path, spec.spec_id()).map_err(|err| {
                IcebergError::new(ErrorKind::DataInvalid, format!("data file {path}"))
                    .with_source(err)
            })?;
            Ok(StagedFile {
                spec_id: spec.spec_id(),
                data_file: serialize_data_file_to_json(
                    data_file,
                    &partition_type,
                    metadata.format_version(),
                )?,
            })
        })
        .collect::<IcebergResult<Vec<_>>>()?;
    Ok(StagedBatch {
        shard_id: shard_id.to_owned(),
        after: after.to_attribute(),
        last: last.to_string(),
        files,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::cast::AsArray;
    use futures::TryStreamExt;
    use iceberg::Catalog;

    use super::*;
    use crate::output::compression::Compression;
    use crate::output::format::iceberg::{IcebergBatch, IcebergLayout};
    use crate::read::record::UserRecordView;
    use crate::table::commit::commit_staged;
    use crate::table::test_support::{events_table, memory_catalog};

    /// 2026-11-27T23:59:59.999Z and a millisecond later, in milliseconds.
    const NOV_27_LAST_MS: i64 = 1_795_823_999_999;

    #[tokio::test]
    async fn a_batch_encoded_written_staged_and_committed_reads_back_as_its_records() {
        let catalog = memory_catalog().await;
        let (ident, table) = events_table(&catalog).await;
        let metadata = table.metadata();
        let layout = IcebergLayout::new(
            metadata.current_schema().clone(),
            metadata.default_partition_spec().clone(),
        )
        .unwrap();
        let mut batch = IcebergBatch::new(Arc::new(layout), "s0");
        for (seq, millis) in [
            ("7", NOV_27_LAST_MS),
            ("8", NOV_27_LAST_MS + 1),
            ("9", NOV_27_LAST_MS + 2),
        ] {
            batch
                .push(&UserRecordView {
                    shard_id: "s0",
                    sequence_number: seq,
                    sub_sequence_number: None,
                    partition_key: "pk",
                    arrival_millis: millis,
                    data: seq.as_bytes(),
                })
                .unwrap();
        }
        // Two arrival days: two files.
        let files: Vec<_> = batch
            .finish(Compression::None)
            .unwrap()
            .into_iter()
            .map(|file| {
                let path = data_file_path(
                    metadata.location(),
                    &file.partition_path,
                    "s0",
                    &seq("7"),
                    &seq("9"),
                );
                (path, file)
            })
            .collect();
        assert_eq!(files.len(), 2);
        for (path, file) in &files {
            table
                .file_io()
                .new_output(path)
                .unwrap()
                .write(file.bytes.clone())
                .await
                .unwrap();
        }
        let staged =
            staged_batch(metadata, "s0", &Checkpoint::TrimHorizon, &seq("9"), &files).unwrap();
        assert_eq!(
            (staged.after.as_str(), staged.last.as_str()),
            ("TRIM_HORIZON", "9")
        );
        // The entry survives the lease row's JSON.
        let entry = serde_json::to_string(&staged).unwrap();
        let staged: StagedBatch = serde_json::from_str(&entry).unwrap();
        commit_staged(&catalog, &ident, &[staged]).await.unwrap();

        let table = catalog.load_table(&ident).await.unwrap();
        let batches: Vec<_> = table
            .scan()
            .select(["sequence_number"])
            .build()
            .unwrap()
            .to_arrow()
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        let mut read: Vec<String> = batches
            .iter()
            .flat_map(|b| {
                b.column(0)
                    .as_string::<i32>()
                    .iter()
                    .map(|v| v.unwrap().to_owned())
                    .collect::<Vec<_>>()
            })
            .collect();
        read.sort();
        assert_eq!(read, ["7", "8", "9"]);
    }

    fn seq(text: &str) -> SequenceNumber {
        text.parse().unwrap()
    }

    #[test]
    fn a_batch_s_file_path_is_its_shard_range_and_partition() {
        assert_eq!(
            data_file_path(
                "s3://wh/archive/events/",
                "approximate_arrival_timestamp_day=2026-11-28",
                "shardId-000000000001",
                &seq("100"),
                &seq("200"),
            ),
            "s3://wh/archive/events/data/approximate_arrival_timestamp_day=2026-11-28/shardId-000000000001-100-200.parquet"
        );
        assert_eq!(
            data_file_path("s3://wh/t", "", "s0", &seq("1"), &seq("2")),
            "s3://wh/t/data/s0-1-2.parquet"
        );
    }
}

//! [`TableSink`]: what a shard's writer needs of the table it writes into —
//! where a batch's data files go (the warehouse bucket and their keys),
//! the staged entry recording them in the lease row, the table's committed
//! end of a shard, and the states the committer publishes.

use std::sync::Arc;

use iceberg::spec::TableMetadataRef;
use iceberg::table::Table;
use iceberg::{Catalog, Error as IcebergError, ErrorKind, Result as IcebergResult, TableIdent};
use sequence_range::SequenceNumber;
use shard_lease::Checkpoint;
use tokio::sync::watch;

use super::commit::read_state;
use super::staging::{data_file_path, staged_batch};
use super::state::CommitState;
use crate::aws::ObjectStore;
use crate::output::format::iceberg::PartitionFile;

/// The latest published commit state, as the committer row holds it
/// (`None` until one was read).
pub type Published = Option<Arc<CommitState>>;

/// One table, shared by every shard task of the worker.
#[derive(Debug)]
pub struct TableSink {
    catalog: Arc<dyn Catalog>,
    ident: TableIdent,
    /// The table's metadata when the worker opened it: the partition spec
    /// and schema the data files are written for.
    metadata: TableMetadataRef,
    /// The bucket of the table's location.
    store: ObjectStore,
    /// The table's location without the trailing slash: `s3://bucket/path`.
    location: String,
    published: watch::Receiver<Published>,
}

/// The bucket and the key prefix of an `s3://` (or `s3a://`) location.
///
/// # Errors
/// Another scheme, or no bucket.
pub fn split_s3_location(location: &str) -> Result<(&str, &str), String> {
    let rest = location
        .strip_prefix("s3://")
        .or_else(|| location.strip_prefix("s3a://"))
        .ok_or_else(|| format!("the table's location `{location}` is not an s3:// URI"))?;
    let (bucket, path) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(format!("the table's location `{location}` names no bucket"));
    }
    Ok((bucket, path.trim_end_matches('/')))
}

impl TableSink {
    /// The sink of `table` (as loaded from `catalog`), whose files are
    /// written with `s3`; `published` follows the committer row.
    ///
    /// # Errors
    /// The table's location is not in S3.
    pub fn new(
        catalog: Arc<dyn Catalog>,
        table: &Table,
        s3: aws_sdk_s3::Client,
        published: watch::Receiver<Published>,
    ) -> IcebergResult<Self> {
        let location = table.metadata().location().trim_end_matches('/').to_owned();
        let (bucket, _) = split_s3_location(&location)
            .map_err(|message| IcebergError::new(ErrorKind::DataInvalid, message))?;
        Ok(Self {
            catalog,
            ident: table.identifier().clone(),
            metadata: table.metadata_ref(),
            store: ObjectStore::new(s3, bucket),
            location,
            published,
        })
    }

    /// The table's name.
    pub fn ident(&self) -> &TableIdent {
        &self.ident
    }

    /// The warehouse bucket the data files are PUT to.
    pub fn store(&self) -> &ObjectStore {
        &self.store
    }

    /// A batch's data file for `file`'s partition: its path (an `s3://`
    /// URI, as the manifest names it) and its key in [`store`](Self::store).
    pub fn data_file(
        &self,
        file: &PartitionFile,
        shard_id: &str,
        first: &SequenceNumber,
        last: &SequenceNumber,
    ) -> (String, String) {
        let path = data_file_path(&self.location, &file.partition_path, shard_id, first, last);
        let key = split_s3_location(&path)
            .map(|(_, key)| key.to_owned())
            .unwrap_or_default();
        (path, key)
    }

    /// The lease row's entry for a batch of `shard_id` after `after` up to
    /// `last`, whose `files` are written at their paths: the JSON of a
    /// [`StagedBatch`](super::state::StagedBatch).
    ///
    /// # Errors
    /// A data file iceberg cannot describe (not expected).
    pub fn staged_entry(
        &self,
        shard_id: &str,
        after: &Checkpoint,
        last: &SequenceNumber,
        files: &[(String, PartitionFile)],
    ) -> IcebergResult<String> {
        let staged = staged_batch(&self.metadata, shard_id, after, last, files)?;
        serde_json::to_string(&staged).map_err(|err| {
            IcebergError::new(ErrorKind::Unexpected, "a staged entry").with_source(err)
        })
    }

    /// The shard's committed end as the table records it now (loaded from
    /// the catalog).
    ///
    /// # Errors
    /// The catalog or the state object cannot be read.
    pub async fn committed_end(&self, shard_id: &str) -> IcebergResult<Option<SequenceNumber>> {
        let table = self.catalog.load_table(&self.ident).await?;
        let state = read_state(&table).await?;
        state
            .committed_end(shard_id)
            .map_err(|err| IcebergError::new(ErrorKind::DataInvalid, err.to_string()))
    }

    /// The latest published state, if any was read.
    pub fn published(&self) -> Published {
        self.published.borrow().clone()
    }

    /// A receiver of the published states, to wait for the next one.
    pub fn subscribe(&self) -> watch::Receiver<Published> {
        self.published.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_split_into_bucket_and_key_prefix() {
        assert_eq!(
            split_s3_location("s3://wh/tables/ns/t/").unwrap(),
            ("wh", "tables/ns/t")
        );
        assert_eq!(split_s3_location("s3a://wh").unwrap(), ("wh", ""));
        assert!(split_s3_location("file:///tmp/wh").is_err());
        assert!(split_s3_location("s3:///path").is_err());
    }
}

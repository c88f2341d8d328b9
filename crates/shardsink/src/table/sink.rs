//! [`TableSink`]: what a shard's writer needs of the table it writes into —
//! where a batch's data files go (the warehouse bucket and their keys),
//! the staged entry recording them in the lease row, the table's committed
//! end of a shard, and the states the committer publishes.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use iceberg::spec::TableMetadataRef;
use iceberg::table::Table;
use iceberg::{Catalog, Error as IcebergError, ErrorKind, Result as IcebergResult, TableIdent};
use sequence_range::SequenceNumber;
use shard_lease::Checkpoint;
use tokio::sync::watch;

use super::catalog::load_table;
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
    /// The table's state, read for shard tasks starting together at once
    /// (see [`committed_end`](Self::committed_end)).
    state: FreshRead<Arc<CommitState>>,
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
            state: FreshRead::default(),
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

    /// The shard's committed end as the table records it now: from a read
    /// of the table (a catalog load, then the state object) that began
    /// after this call did. Calls made while a read is under way wait for
    /// it and then share the next one, so shard tasks starting together —
    /// hundreds, when a worker starts — load the table about twice, not
    /// once each; none gets a state older than its call.
    ///
    /// # Errors
    /// The catalog or the state object cannot be read.
    pub async fn committed_end(&self, shard_id: &str) -> IcebergResult<Option<SequenceNumber>> {
        let state = self
            .state
            .get(|| async {
                let table = load_table(self.catalog.as_ref(), &self.ident).await?;
                Ok::<_, IcebergError>(Arc::new(read_state(&table).await?))
            })
            .await?;
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

/// A value read for calls that overlap: each call gets the result of a
/// read that began after the call did — the last one, if it did, else one
/// it makes — so calls made while a read is under way share the next one,
/// and none gets a value older than itself. A failed read is returned to
/// its caller only.
struct FreshRead<T> {
    /// Reads begun so far (a read's number is the count once it began).
    begun: AtomicU64,
    /// The last read that succeeded: its number and value.
    last: tokio::sync::Mutex<Option<(u64, T)>>,
}

impl<T> Default for FreshRead<T> {
    fn default() -> Self {
        Self {
            begun: AtomicU64::new(0),
            last: tokio::sync::Mutex::new(None),
        }
    }
}

impl<T> std::fmt::Debug for FreshRead<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FreshRead")
            .field("begun", &self.begun)
            .finish_non_exhaustive()
    }
}

impl<T: Clone> FreshRead<T> {
    /// The value of a read that began after this call: the last one's when
    /// it did, else `read`'s.
    async fn get<F, Fut, E>(&self, read: F) -> Result<T, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        // Reads numbered above this began after the call.
        let begun_before = self.begun.load(Ordering::SeqCst);
        let mut last = self.last.lock().await;
        if let Some((number, value)) = &*last
            && *number > begun_before
        {
            return Ok(value.clone());
        }
        let number = self.begun.fetch_add(1, Ordering::SeqCst) + 1;
        let value = read().await?;
        *last = Some((number, value.clone()));
        Ok(value)
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
        assert!(split_s3_location("s3://").is_err());
        assert_eq!(split_s3_location("s3://wh/a/b").unwrap(), ("wh", "a/b"));
        assert_eq!(split_s3_location("s3://wh/").unwrap(), ("wh", ""));
        assert!(
            split_s3_location("s3n://wh/t").is_err(),
            "not a scheme the sink writes"
        );
    }

    fn file(partition_path: &str) -> PartitionFile {
        PartitionFile {
            partition: iceberg::spec::Struct::empty(),
            partition_path: partition_path.to_owned(),
            record_count: 1,
            bytes: bytes::Bytes::new(),
            column_stats: Default::default(),
        }
    }

    #[tokio::test]
    async fn a_data_file_is_named_by_its_batch_and_partition_in_the_table_s_bucket() {
        use crate::fake_aws::{self, FakeBucket};
        use crate::table::test_support::{S3Table, default_new_table};

        let bucket = std::sync::Arc::new(FakeBucket::default());
        let s3 = fake_aws::clients(Default::default(), bucket, Default::default()).s3;
        let table = S3Table::create(s3, default_new_table()).await;
        let sink = &table.sink;
        assert_eq!(
            sink.store().bucket(),
            "wh",
            "the bucket of the table's location"
        );
        let (first, last) = ("100".parse().unwrap(), "200".parse().unwrap());
        let day = "approximate_arrival_timestamp_day=2026-11-28";
        assert_eq!(
            sink.data_file(&file(day), "shardId-000000000001", &first, &last),
            (
                format!("s3://wh/archive/events/data/{day}/shardId-000000000001-100-200.parquet"),
                format!("archive/events/data/{day}/shardId-000000000001-100-200.parquet"),
            )
        );
        assert_eq!(
            sink.data_file(&file(""), "s0", &first, &last),
            (
                "s3://wh/archive/events/data/s0-100-200.parquet".to_owned(),
                "archive/events/data/s0-100-200.parquet".to_owned(),
            ),
            "unpartitioned"
        );
    }

    #[tokio::test]
    async fn published_states_reach_the_sink_and_its_subscribers() {
        use crate::fake_aws::{self, FakeBucket};
        use crate::table::test_support::{S3Table, default_new_table};

        let bucket = std::sync::Arc::new(FakeBucket::default());
        let s3 = fake_aws::clients(Default::default(), bucket, Default::default()).s3;
        let table = S3Table::create(s3, default_new_table()).await;
        assert_eq!(table.sink.published(), None);
        let mut subscriber = table.sink.subscribe();
        let state = CommitState {
            commit: 2,
            shards: [("s0".to_owned(), "7".to_owned())].into(),
        };
        table.publish(state.clone());
        subscriber.changed().await.unwrap();
        assert_eq!(subscriber.borrow().as_deref(), Some(&state));
        assert_eq!(table.sink.published().as_deref(), Some(&state));
        assert_eq!(
            table.sink.committed_end("s0").await.unwrap(),
            None,
            "the committed end is the table's, not the published state's"
        );
    }

    #[tokio::test]
    async fn the_committed_end_is_read_from_the_table() {
        use crate::fake_aws::{self, FakeBucket};
        use crate::table::test_support::{S3Table, default_new_table, staged};

        let bucket = std::sync::Arc::new(FakeBucket::default());
        let s3 = fake_aws::clients(Default::default(), bucket, Default::default()).s3;
        let table = S3Table::create(s3, default_new_table()).await;
        let loaded = table.load().await;
        let entry = serde_json::to_string(&staged(&loaded, "s0", "TRIM_HORIZON", "9", 1)).unwrap();
        table.commit(&[entry]).await;
        assert_eq!(
            table.sink.committed_end("s0").await.unwrap(),
            Some("9".parse().unwrap())
        );
        assert_eq!(table.sink.committed_end("s1").await.unwrap(), None);
    }

    /// Calls made while a read is under way share the next read; a call
    /// after the reads reads again.
    #[tokio::test]
    async fn calls_during_a_read_share_the_next_one() {
        use std::sync::atomic::AtomicUsize;

        let fresh: FreshRead<u32> = FreshRead::default();
        let reads = AtomicUsize::new(0);
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let first = fresh.get(|| async {
            reads.fetch_add(1, Ordering::SeqCst);
            released.await.unwrap();
            Ok::<_, ()>(1)
        });
        tokio::pin!(first);
        assert!(futures::poll!(first.as_mut()).is_pending(), "reading");
        let during = futures::future::join_all((0..9).map(|_| {
            fresh.get(|| async {
                reads.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ()>(2)
            })
        }));
        tokio::pin!(during);
        assert!(futures::poll!(during.as_mut()).is_pending(), "waiting");
        release.send(()).unwrap();
        assert_eq!(first.await, Ok(1));
        assert_eq!(
            during.await,
            vec![Ok(2); 9],
            "none gets the read begun before it"
        );
        assert_eq!(reads.load(Ordering::SeqCst), 2);

        // Later calls read again; a failed read is its caller's only.
        assert_eq!(
            fresh.get(|| async { Err::<u32, _>("lost") }).await,
            Err("lost")
        );
        assert_eq!(fresh.get(|| async { Ok::<_, ()>(3) }).await, Ok(3));
    }
}

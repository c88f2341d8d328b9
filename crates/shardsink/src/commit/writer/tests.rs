//! The writer's table path (`--format iceberg`), against the fakes of
//! `fake_aws` and a memory catalog whose table lives in the fake bucket.

use arrow_array::cast::AsArray;
use bytes::Bytes;
use iceberg::spec::{Transform, UnboundPartitionSpec};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use shard_lease::{Lease, LeaseTable};
use tokio::time::Instant;

use super::*;
use crate::fake_aws::{self, FakeBucket, FakeTable};
use crate::memory::MemoryBudget;
use crate::output::format::schema::{
    APPROXIMATE_ARRIVAL_TIMESTAMP, PARTITION_KEY, SEQUENCE_NUMBER,
};
use crate::read::record::ShardRecord;
use crate::table::create::{Instants, NewTable, default_schema};
use crate::table::state::{CommitState, StagedFile};
use crate::table::test_support::S3Table;
use crate::test_wait;

const SHARD: &str = "shardId-000000000000";
/// 2026-11-27T12:00:00Z, in milliseconds.
const NOV_27_NOON: i64 = 1_795_780_800_000;
/// Where the table's data files are, as keys of the fake bucket.
const DATA: &str = "archive/events/data/";
/// The partition directory of arrival day 2026-11-27.
const DAY: &str = "approximate_arrival_timestamp_day=2026-11-27";

/// The default table, partitioned by arrival day and then by partition
/// key: records of one batch (one minute) can fall into several partition
/// values.
fn partitioned_by_day_and_key() -> NewTable {
    let spec = UnboundPartitionSpec::builder()
        .add_partition_field(
            5,
            format!("{APPROXIMATE_ARRIVAL_TIMESTAMP}_day"),
            Transform::Day,
        )
        .and_then(|spec| spec.add_partition_field(4, PARTITION_KEY, Transform::Identity))
        .unwrap()
        .build();
    NewTable {
        schema: default_schema(None, Instants::WithZone).unwrap(),
        partition_spec: spec,
        location: None,
    }
}

fn seq(n: u64) -> SequenceNumber {
    SequenceNumber::from(n)
}

/// A writer into a table, with the fakes behind it.
struct Fixture {
    bucket: Arc<FakeBucket>,
    leases: LeaseTable,
    table: S3Table,
    writer: BatchWriter,
    budget: Arc<MemoryBudget>,
}

/// A writer holding a new lease at `checkpoint` with `staged` entries in
/// its row.
async fn fixture(checkpoint: Checkpoint, staged: Vec<String>) -> Fixture {
    let bucket = Arc::new(FakeBucket::default());
    let rows = Arc::new(FakeTable::default());
    let clients = fake_aws::clients(Default::default(), bucket.clone(), rows);
    let table = S3Table::create(clients.s3.clone(), partitioned_by_day_and_key()).await;
    let mut output = Output::for_tests("p");
    output.format = Format::Iceberg {
        layout: table.layout.clone(),
    };
    let leases = LeaseTable::new(clients.dynamodb, "leases");
    let mut lease = Lease::new(SHARD, checkpoint, vec![]);
    lease.staged_batches = staged;
    leases.create_lease(&lease).await.unwrap();
    let taken = leases.take_lease(&lease, "worker-1").await.unwrap();
    let held = Arc::new(HeldLease::new(leases.clone(), taken, Instant::now()));
    let writer = BatchWriter::new(
        ObjectStore::new(clients.s3, "bucket"),
        output,
        held,
        Arc::new(Metrics::new()),
        Duration::from_secs(10),
    )
    .with_table(table.sink.clone());
    Fixture {
        bucket,
        leases,
        table,
        writer,
        budget: MemoryBudget::new(1 << 30, 1 << 30),
    }
}

impl Fixture {
    /// A batch of `(sequence number, partition key)` records, all arriving
    /// at noon on 2026-11-27.
    fn batch(&self, records: &[(u64, &str)]) -> Batch {
        let output = &self.writer.output;
        let bucket = output.layout.bucket_of(NOV_27_NOON);
        let record = |&(n, key): &(u64, &str)| ShardRecord {
            sequence_number: seq(n),
            arrival_millis: NOV_27_NOON,
            partition_key: key.to_owned(),
            data: Bytes::from(format!("record {n}")),
            user_records: None,
        };
        let mut batch = Batch::start(
            SHARD,
            &record(&records[0]),
            None,
            bucket,
            &output.format,
            self.budget.clone(),
        );
        for r in &records[1..] {
            batch.push(&record(r), None);
        }
        batch
    }

    async fn write(&self, records: &[(u64, &str)]) -> WrittenBatch {
        self.writer
            .write(self.batch(records), FlushReason::MaxRecords)
            .await
            .unwrap()
    }

    async fn row(&self) -> Lease {
        self.leases.get_lease(SHARD).await.unwrap().unwrap()
    }

    fn keys(&self) -> Vec<String> {
        lock(&self.bucket.objects).keys().cloned().collect()
    }

    fn data_keys(&self) -> Vec<String> {
        let mut keys = self.keys();
        keys.retain(|key| key.starts_with(DATA));
        keys
    }

    /// The `sequence_number` column of the Parquet object at `key`.
    fn sequence_numbers(&self, key: &str) -> Vec<String> {
        let body = lock(&self.bucket.objects)[key].clone();
        ParquetRecordBatchReaderBuilder::try_new(body)
            .unwrap()
            .build()
            .unwrap()
            .flat_map(|batch| {
                let batch = batch.unwrap();
                let column = batch.column_by_name(SEQUENCE_NUMBER).unwrap();
                column
                    .as_string::<i32>()
                    .iter()
                    .map(|v| v.unwrap().to_owned())
                    .collect::<Vec<_>>()
            })
            .collect()
    }
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap()
}

fn parse(entry: &str) -> StagedBatch {
    serde_json::from_str(entry).unwrap()
}

/// The paths of a staged entry's data files.
fn staged_paths(entry: &StagedBatch) -> Vec<String> {
    let mut paths: Vec<String> = entry
        .files
        .iter()
        .map(|file| {
            let json: serde_json::Value = serde_json::from_str(&file.data_file).unwrap();
            json["file_path"].as_str().unwrap().to_owned()
        })
        .collect();
    paths.sort();
    paths
}

fn state(end: &str) -> CommitState {
    CommitState {
        commit: 1,
        shards: [(SHARD.to_owned(), end.to_owned())].into(),
    }
}

#[tokio::test]
async fn a_table_batch_puts_a_data_file_per_partition_value_and_stages_it_after_the_checkpoint() {
    let f = fixture(Checkpoint::TrimHorizon, vec![]).await;
    let written = f.write(&[(1, "a"), (2, "b"), (3, "a")]).await;
    assert_eq!(
        (written.pending.first.clone(), written.pending.last.clone()),
        (seq(1), seq(3))
    );

    let file_a = format!("{DATA}{DAY}/partition_key=a/{SHARD}-1-3.parquet");
    let file_b = format!("{DATA}{DAY}/partition_key=b/{SHARD}-1-3.parquet");
    assert_eq!(f.data_keys(), [file_a.clone(), file_b.clone()]);
    assert_eq!(f.sequence_numbers(&file_a), ["1", "3"]);
    assert_eq!(f.sequence_numbers(&file_b), ["2"]);
    assert!(
        f.keys().iter().all(|key| !key.starts_with("p/")),
        "no main object under the prefix: {:?}",
        f.keys()
    );

    let row = f.row().await;
    assert_eq!(
        row.checkpoint,
        Checkpoint::TrimHorizon,
        "the checkpoint waits for a commit"
    );
    assert_eq!(row.pending_batch, None, "staging clears the pending batch");
    assert_eq!(row.staged_batches.len(), 1);
    let first = parse(&row.staged_batches[0]);
    assert_eq!(
        (
            first.shard_id.as_str(),
            first.after.as_str(),
            first.last.as_str()
        ),
        (SHARD, "TRIM_HORIZON", "3")
    );
    assert_eq!(
        staged_paths(&first),
        [format!("s3://wh/{file_a}"), format!("s3://wh/{file_b}")]
    );

    // The next batch continues from the staged one, not the checkpoint.
    f.write(&[(4, "a"), (5, "a")]).await;
    let row = f.row().await;
    assert_eq!(row.checkpoint, Checkpoint::TrimHorizon);
    assert_eq!(row.staged_batches.len(), 2);
    assert_eq!(row.staged_batches[0], parse_back(&first));
    let second = parse(&row.staged_batches[1]);
    assert_eq!((second.after.as_str(), second.last.as_str()), ("3", "5"));
    assert_eq!(
        staged_paths(&second),
        [format!(
            "s3://wh/{DATA}{DAY}/partition_key=a/{SHARD}-4-5.parquet"
        )]
    );
}

/// A staged batch as the row stores it.
fn parse_back(batch: &StagedBatch) -> String {
    serde_json::to_string(batch).unwrap()
}

#[tokio::test]
async fn a_first_batch_after_a_sequence_number_checkpoint_is_staged_after_it() {
    let f = fixture(Checkpoint::SequenceNumber(seq(7)), vec![]).await;
    f.write(&[(8, "a")]).await;
    let row = f.row().await;
    assert_eq!(row.checkpoint, Checkpoint::SequenceNumber(seq(7)));
    let entry = parse(&row.staged_batches[0]);
    assert_eq!((entry.after.as_str(), entry.last.as_str()), ("7", "8"));
}

#[tokio::test]
async fn the_checkpoint_moves_to_a_published_committed_end_and_drops_the_batches_it_covers() {
    let f = fixture(Checkpoint::TrimHorizon, vec![]).await;
    f.write(&[(1, "a"), (2, "b"), (3, "a")]).await;
    f.write(&[(4, "a"), (5, "a")]).await;
    let staged = f.row().await.staged_batches;
    assert!(
        !f.writer.apply_committed().await.unwrap(),
        "nothing published yet"
    );

    // Published state without this shard: nothing to do.
    f.table.publish(CommitState {
        commit: 1,
        shards: [("shardId-000000000009".to_owned(), "3".to_owned())].into(),
    });
    assert!(!f.writer.apply_committed().await.unwrap());
    assert_eq!(f.row().await.checkpoint, Checkpoint::TrimHorizon);

    f.table.publish(state("3"));
    assert!(f.writer.apply_committed().await.unwrap());
    let row = f.row().await;
    assert_eq!(row.checkpoint, Checkpoint::SequenceNumber(seq(3)));
    assert_eq!(
        row.staged_batches,
        staged[1..],
        "only the second stays staged"
    );

    // A state behind the checkpoint changes nothing.
    let counter = row.lease_counter;
    f.table.publish(state("2"));
    assert!(!f.writer.apply_committed().await.unwrap());
    assert!(
        !f.writer.move_to_committed(&seq(3)).await.unwrap(),
        "already there"
    );
    let row = f.row().await;
    assert_eq!(row.checkpoint, Checkpoint::SequenceNumber(seq(3)));
    assert_eq!(row.staged_batches, staged[1..]);
    assert_eq!(row.lease_counter, counter, "no write");

    // The next batch continues from the staged one.
    f.write(&[(6, "b")]).await;
    let entry = parse(f.row().await.staged_batches.last().unwrap());
    assert_eq!((entry.after.as_str(), entry.last.as_str()), ("5", "6"));

    f.table.publish(state("6"));
    assert!(f.writer.apply_committed().await.unwrap());
    let row = f.row().await;
    assert_eq!(row.checkpoint, Checkpoint::SequenceNumber(seq(6)));
    assert!(row.staged_batches.is_empty());
}

/// A staged entry of the shard after `after` up to `last`, without files.
fn entry(after: &str, last: &str) -> String {
    parse_back(&StagedBatch {
        shard_id: SHARD.to_owned(),
        after: after.to_owned(),
        last: last.to_owned(),
        files: vec![],
    })
}

#[tokio::test]
async fn staged_batches_at_the_checkpoint_are_dropped_without_moving_it() {
    let f = fixture(
        Checkpoint::SequenceNumber(seq(5)),
        vec![entry("3", "5"), entry("5", "9")],
    )
    .await;
    assert!(f.writer.move_to_committed(&seq(5)).await.unwrap());
    let row = f.row().await;
    assert_eq!(row.checkpoint, Checkpoint::SequenceNumber(seq(5)));
    assert_eq!(row.staged_batches, [entry("5", "9")]);
}

#[tokio::test]
async fn a_shard_at_shard_end_is_untouched_by_committed_ends() {
    let f = fixture(Checkpoint::ShardEnd, vec![entry("3", "5")]).await;
    let before = f.row().await;
    f.table.publish(state("9"));
    assert!(!f.writer.apply_committed().await.unwrap());
    assert!(!f.writer.move_to_committed(&seq(9)).await.unwrap());
    let row = f.row().await;
    assert_eq!(row.checkpoint, Checkpoint::ShardEnd);
    assert_eq!(row.staged_batches, before.staged_batches);
    assert_eq!(row.lease_counter, before.lease_counter);
}

#[tokio::test(start_paused = true)]
async fn a_batch_waits_for_a_commit_while_the_row_has_no_room_for_it() {
    // One staged batch that takes nearly all the room.
    let big = parse_back(&StagedBatch {
        shard_id: SHARD.to_owned(),
        after: "TRIM_HORIZON".to_owned(),
        last: "0".to_owned(),
        files: vec![StagedFile {
            spec_id: 0,
            data_file: "x".repeat(MAX_STAGED_BYTES - 200),
        }],
    });
    let f = Arc::new(fixture(Checkpoint::TrimHorizon, vec![big.clone()]).await);
    let batch = f.batch(&[(1, "a"), (2, "a")]);
    let writer = f.writer.clone();
    let write = tokio::spawn(async move { writer.write(batch, FlushReason::MaxRecords).await });
    test_wait::wait_until("the data file PUT", || !f.data_keys().is_empty()).await;
    assert!(!write.is_finished(), "the batch cannot be staged yet");
    assert_eq!(f.row().await.staged_batches, [big]);

    f.table.publish(state("0"));
    write.await.unwrap().unwrap();
    let row = f.row().await;
    assert_eq!(row.checkpoint, Checkpoint::SequenceNumber(seq(0)));
    assert_eq!(row.staged_batches.len(), 1);
    let entry = parse(&row.staged_batches[0]);
    assert_eq!((entry.after.as_str(), entry.last.as_str()), ("0", "2"));
}

#[test]
fn a_staged_batch_continues_from_the_last_staged_entry_else_the_checkpoint() {
    let at = |n| Checkpoint::SequenceNumber(seq(n));
    assert_eq!(staged_after(&[], &at(4)), at(4));
    assert_eq!(
        staged_after(&[], &Checkpoint::TrimHorizon),
        Checkpoint::TrimHorizon
    );
    assert_eq!(
        staged_after(
            &[entry("TRIM_HORIZON", "5"), entry("5", "9")],
            &Checkpoint::TrimHorizon
        ),
        at(9)
    );
    assert_eq!(staged_after(&[entry("4", "5")], &at(4)), at(5));
    // An entry that does not parse says nothing: the checkpoint.
    assert_eq!(staged_after(&["{}".to_owned()], &at(4)), at(4));
}

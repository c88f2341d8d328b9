//! The shard task writing into an Iceberg table (`--format iceberg`): the
//! checkpoint follows the table's commits, `SHARD_END` waits for the last
//! one, and a new owner starts after the table's committed end.

use std::sync::atomic::Ordering;

use sequence_range::SequenceNumber;
use shard_lease::{Checkpoint, Lease};

use super::events::deciding;
use super::{Harness, PAST, SHARD, harness, seq};
use crate::events::decider::EventStore;
use crate::fake_aws;
use crate::output::format::Format;
use crate::shard::context::ShardExit;
use crate::table::commit::commit_staged;
use crate::table::state::{CommitState, StagedBatch};
use crate::table::test_support::{S3Table, default_new_table, staged_with, write_data_file};

/// Where the table's data files are, as keys of the fake bucket.
const DATA: &str = "archive/events/data/";

/// A harness whose shard task writes into `archive.events` (the default
/// table, in the fake bucket), batches of `max_records`.
async fn with_table(max_records: usize) -> (Harness, S3Table) {
    let mut h = harness(max_records);
    let s3 = fake_aws::clients(Default::default(), h.bucket.clone(), h.table.clone()).s3;
    let table = S3Table::create(s3, default_new_table()).await;
    let mut ctx = (*h.ctx).clone();
    ctx.output.format = Format::Iceberg {
        layout: table.layout.clone(),
    };
    ctx.table = Some(table.sink.clone());
    h.ctx = std::sync::Arc::new(ctx);
    (h, table)
}

/// The lease row as the fake table holds it now (for a condition polled
/// while the task runs).
fn row_now(h: &Harness) -> Lease {
    let items = h.table.items.lock().unwrap();
    Lease::from_item(&items[SHARD]).unwrap()
}

fn at(i: u64) -> Checkpoint {
    Checkpoint::SequenceNumber(SequenceNumber::parse(&seq(i)).unwrap())
}

/// The `(after, last)` of each staged entry of the row.
fn staged_ranges(lease: &Lease) -> Vec<(String, String)> {
    lease
        .staged_batches
        .iter()
        .map(|entry| {
            let batch: StagedBatch = serde_json::from_str(entry).unwrap();
            (batch.after, batch.last)
        })
        .collect()
}

fn data_keys(h: &Harness) -> Vec<String> {
    let objects = h.bucket.objects.lock().unwrap();
    objects
        .keys()
        .filter(|key| key.starts_with(DATA))
        .cloned()
        .collect()
}

/// Sequence numbers in numeric order.
fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort_by(|a, b| SequenceNumber::cmp_text(a, b));
    v
}

#[tokio::test(start_paused = true)]
async fn the_checkpoint_follows_published_commits_and_shard_end_waits_for_the_last() {
    let (h, table) = with_table(3).await;
    for i in 1..=9 {
        h.shard.push(&seq(i), PAST + 1_000, b"x");
    }
    h.shard.close();
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    let mut run = h.start(lease);
    run.wait_until(&h, "three staged batches", |h| {
        row_now(h).staged_batches.len() == 3
    })
    .await;
    let row = row_now(&h);
    assert_eq!(
        staged_ranges(&row),
        [
            ("TRIM_HORIZON".to_owned(), seq(3)),
            (seq(3), seq(6)),
            (seq(6), seq(9)),
        ]
    );
    assert_eq!(
        row.checkpoint,
        Checkpoint::TrimHorizon,
        "nothing committed yet"
    );
    assert_eq!(data_keys(&h).len(), 3, "a data file a batch");
    assert!(
        h.bucket
            .objects
            .lock()
            .unwrap()
            .keys()
            .all(|key| !key.starts_with("p/")),
        "no main objects"
    );

    // The first batch is committed: the checkpoint moves to its end, the
    // shard (at its end) still waits for the others.
    let state = table.commit(&row.staged_batches[..1]).await;
    assert_eq!(state.shards[SHARD], seq(3));
    table.publish(state);
    run.wait_until(&h, "the checkpoint at the first commit", |h| {
        row_now(h).checkpoint == at(3)
    })
    .await;
    assert_eq!(
        staged_ranges(&row_now(&h)),
        [(seq(3), seq(6)), (seq(6), seq(9))]
    );
    assert!(!run.task.is_finished(), "SHARD_END waits for the rest");

    let rest = row_now(&h).staged_batches;
    let state = table.commit(&rest).await;
    table.publish(state);
    let exit = run.exit("the shard task ends").await.unwrap();
    assert_eq!(exit, ShardExit::ShardEnd(vec![]));
    let row = h.row().await;
    assert_eq!(row.checkpoint, Checkpoint::ShardEnd);
    assert!(row.staged_batches.is_empty());
    assert_eq!(
        sorted(table.sequence_numbers().await),
        (1..=9).map(seq).collect::<Vec<_>>(),
        "every record once in the table"
    );
}

#[tokio::test(start_paused = true)]
async fn an_idle_shard_checkpoints_what_a_published_commit_holds() {
    let (h, table) = with_table(3).await;
    for i in 1..=6 {
        h.shard.push(&seq(i), PAST + 1_000, b"x");
    }
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    let mut run = h.start(lease);
    run.wait_until(&h, "two staged batches", |h| {
        row_now(h).staged_batches.len() == 2
    })
    .await;
    let reads = h.shard.reads.load(Ordering::SeqCst);
    run.wait_until(&h, "reading on while nothing is committed", |h| {
        h.shard.reads.load(Ordering::SeqCst) > reads + 2
    })
    .await;
    assert_eq!(row_now(&h).checkpoint, Checkpoint::TrimHorizon);

    let state = table.commit(&row_now(&h).staged_batches).await;
    table.publish(state);
    run.wait_until(&h, "the checkpoint at the commit's end", |h| {
        row_now(h).checkpoint == at(6)
    })
    .await;
    assert!(row_now(&h).staged_batches.is_empty());
    assert_eq!(run.shutdown().await.unwrap(), ShardExit::Shutdown);
}

#[tokio::test(start_paused = true)]
async fn a_row_behind_the_table_reads_on_after_the_committed_end() {
    let (h, table) = with_table(1_000).await;
    for i in 1..=8 {
        h.shard.push(&seq(i), PAST + 1_000, b"x");
    }
    // A previous owner's records 1..=5 are in the table; its lease row
    // was lost (a new row at TRIM_HORIZON).
    let loaded = table.load().await;
    let rows: Vec<(&str, String)> = (1..=5).map(|i| (SHARD, seq(i))).collect();
    let rows: Vec<(&str, &str)> = rows.iter().map(|(s, n)| (*s, n.as_str())).collect();
    let (_, file) = write_data_file(&loaded, "previous", 18_262, &rows).await;
    let previous = staged_with(&loaded, SHARD, "TRIM_HORIZON", &seq(5), file);
    let state = commit_staged(table.catalog.as_ref(), &table.ident, &[previous])
        .await
        .unwrap()
        .state()
        .clone();
    assert_eq!(
        state,
        CommitState {
            commit: 1,
            shards: [(SHARD.to_owned(), seq(5))].into()
        }
    );
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    h.run_until(lease, "a staged batch", |h| {
        !row_now(h).staged_batches.is_empty()
    })
    .await
    .unwrap();

    let row = h.row().await;
    assert_eq!(row.checkpoint, at(5), "moved to the committed end first");
    assert_eq!(staged_ranges(&row), [(seq(5), seq(8))]);
    let day = format!("{DATA}approximate_arrival_timestamp_day=2020-01-01/");
    assert_eq!(
        data_keys(&h),
        [
            format!("{day}{SHARD}-{}-{}.parquet", seq(6), seq(8)),
            format!("{DATA}day=18262/previous.parquet"),
        ],
        "nothing at or below the committed end is written again"
    );
    table.commit(&row.staged_batches).await;
    assert_eq!(
        sorted(table.sequence_numbers().await),
        (1..=8).map(seq).collect::<Vec<_>>(),
        "every record once in the table"
    );
}

/// A staged entry of the shard after `after` up to `last`, without files.
fn entry(after: &str, last: &str) -> String {
    serde_json::to_string(&StagedBatch {
        shard_id: SHARD.to_owned(),
        after: after.to_owned(),
        last: last.to_owned(),
        files: vec![],
    })
    .unwrap()
}

#[tokio::test]
async fn reading_starts_after_the_last_staged_batch() {
    use crate::aws::StartingPosition;

    let (h, _table) = with_table(1_000).await;
    let n = |i: u64| SequenceNumber::parse(&seq(i)).unwrap();
    let mut lease = Lease::new(SHARD, at(2), vec![]);
    assert_eq!(
        h.ctx.start_position(&lease),
        StartingPosition::AfterSequenceNumber(n(2))
    );
    lease.staged_batches = vec![entry(&seq(2), &seq(5)), entry(&seq(5), &seq(9))];
    assert_eq!(
        h.ctx.start_position(&lease),
        StartingPosition::AfterSequenceNumber(n(9)),
        "the staged batches are written"
    );
    lease.checkpoint = Checkpoint::TrimHorizon;
    assert_eq!(
        h.ctx.start_position(&lease),
        StartingPosition::AfterSequenceNumber(n(9))
    );
    lease.pending_batch = Some(shard_lease::PendingBatch {
        key: "p/k".to_owned(),
        first: n(10),
        last: n(12),
    });
    assert_eq!(
        h.ctx.start_position(&lease),
        StartingPosition::AtSequenceNumber(n(10)),
        "a pending batch is replayed first"
    );
    lease.pending_batch = None;
    lease.staged_batches = vec!["not an entry".to_owned()];
    assert_eq!(
        h.ctx.start_position(&lease),
        StartingPosition::TrimHorizon,
        "an entry that does not parse names no position"
    );
}

#[tokio::test(start_paused = true)]
async fn a_new_owner_reads_on_after_the_row_s_staged_batches() {
    let (h, _table) = with_table(1_000).await;
    for i in 1..=8 {
        h.shard.push(&seq(i), PAST + 1_000, b"x");
    }
    // A previous owner staged 1..=5 (its data files are written).
    let mut lease = Lease::new(SHARD, Checkpoint::TrimHorizon, vec![]);
    lease.staged_batches = vec![entry("TRIM_HORIZON", &seq(5))];
    h.lease_table.create_lease(&lease).await.unwrap();
    let taken = h.lease_table.take_lease(&lease, "worker-1").await.unwrap();
    let held = std::sync::Arc::new(shard_lease::HeldLease::new(
        h.lease_table.clone(),
        taken,
        tokio::time::Instant::now(),
    ));
    h.run_until(held, "a second staged batch", |h| {
        row_now(h).staged_batches.len() == 2
    })
    .await
    .unwrap();
    let row = h.row().await;
    assert_eq!(row.checkpoint, Checkpoint::TrimHorizon);
    assert_eq!(
        staged_ranges(&row)[1],
        (seq(5), seq(8)),
        "the new batch continues the staged ones"
    );
    assert_eq!(
        data_keys(&h),
        [format!(
            "{DATA}approximate_arrival_timestamp_day=2020-01-01/{SHARD}-{}-{}.parquet",
            seq(6),
            seq(8)
        )],
        "only 6..=8 written"
    );
}

/// With event decisions, a new owner whose local store is empty (another
/// host) rebuilds its window from the decisions objects of the batches
/// staged before it — a table batch has no main object — and decides a
/// later copy of their events a duplicate.
#[tokio::test(start_paused = true)]
async fn with_events_a_new_owner_rebuilds_its_window_from_the_staged_batches() {
    let (h, _table) = with_table(2).await;
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let local = |dir: &tempfile::TempDir| {
        EventStore::Local(event_store::LocalStore::open(dir.path(), Default::default()).unwrap())
    };
    for (i, payload) in [b"a", b"b"].into_iter().enumerate() {
        h.shard.push(&seq(i as u64 + 1), PAST + 1_000, payload);
    }
    let first = deciding(&h, local(&dirs[0]));
    let lease = first.lease(Checkpoint::TrimHorizon, None).await;
    first
        .run_until(lease, "the first batch staged", |h| {
            row_now(h).staged_batches.len() == 1
        })
        .await
        .unwrap();

    // Another host's task, with an empty store: record 3 is a copy of 1.
    for (i, payload) in [b"a", b"c"].into_iter().enumerate() {
        h.shard.push(&seq(i as u64 + 3), PAST + 2_000, payload);
    }
    let second = deciding(&h, local(&dirs[1]));
    let row = second.row().await;
    let taken = second
        .lease_table
        .take_lease(&row, "worker-2")
        .await
        .unwrap();
    let held = std::sync::Arc::new(shard_lease::HeldLease::new(
        second.lease_table.clone(),
        taken,
        tokio::time::Instant::now(),
    ));
    second
        .run_until(held, "the second batch staged", |h| {
            row_now(h).staged_batches.len() == 2
        })
        .await
        .unwrap();
    let duplicates: Vec<serde_json::Value> = h
        .bucket
        .lines()
        .into_iter()
        .filter(|(key, _)| key.starts_with("p-duplicates/"))
        .map(|(_, line)| line)
        .collect();
    assert_eq!(duplicates.len(), 1, "{duplicates:#?}");
    assert_eq!(duplicates[0]["sequenceNumber"], seq(3));
    assert_eq!(duplicates[0]["duplicateOf"]["sequenceNumber"], seq(1));
}

//! The shard task's tests, with the fakes of `fake_aws`; more in the
//! modules below, by subject.

mod buckets;
mod events;
mod formats;
mod replays;
mod retention;
mod tables;

use std::sync::atomic::Ordering;

use bytes::Bytes;
use sequence_range::SequenceNumber;
use shard_lease::{Lease, LeaseTable, PendingBatch};

use tokio::time::Instant;

use super::*;
use crate::aws::{Kinesis, ObjectStore};
use crate::fake_aws::{self, FakeBucket, FakeShard, FakeStream, FakeTable};
use crate::memory::MemoryBudget;
use crate::ops::metrics::Metrics;
use crate::output::Output;
use crate::output::batch::BufferLimits;
use crate::output::compression::Compression;
use crate::output::compression::CompressionCodec;
use crate::output::format::BodyKind;
use crate::output::format::Format;
use crate::output::key::KeyLayout;
use crate::output::key::object_name;
use crate::read::mode::ReadSource;
use crate::test_wait;

const SHARD: &str = "shardId-000000000000";
/// 2020-01-01T00:00:00Z: a minute long over.
const PAST: i64 = 1_577_836_800_000;

/// The `i`-th sequence number: 56 digits, increasing, with gaps.
fn seq(i: u64) -> String {
    let base =
        SequenceNumber::parse("49590338271490256608559692538361571095921575989136588898").unwrap();
    SequenceNumber::from(base.to_biguint() + i * 12_345).to_string()
}

struct Harness {
    shard: Arc<FakeShard>,
    bucket: Arc<FakeBucket>,
    table: Arc<FakeTable>,
    ctx: Arc<ShardContext>,
    lease_table: LeaseTable,
}

fn harness(max_records: usize) -> Harness {
    let (stream, bucket, table) = (
        Arc::new(FakeStream::default()),
        Arc::new(FakeBucket::default()),
        Arc::new(FakeTable::default()),
    );
    let shard = stream.shard(SHARD);
    let clients = fake_aws::clients(stream, bucket.clone(), table.clone());
    let ctx = Arc::new(ShardContext {
        kinesis: Kinesis::new(
            clients.kinesis.clone(),
            crate::aws::kinesis::StreamRef::Name("s".to_owned()),
        ),
        store: ObjectStore::new(clients.s3.clone(), "bucket"),
        output: Output::for_tests("p"),
        limits: BufferLimits {
            max_bytes: 1 << 30,
            max_records,
            max_age: Duration::from_secs(3_600),
        },
        budget: MemoryBudget::new(1 << 30, 1 << 30),
        metrics: Arc::new(Metrics::new()),
        initial_timestamp: None,
        idle_time_between_reads: Duration::from_secs(1),
        max_records_per_read: 10_000,
        read_source: ReadSource::Polling,
        failover_time: Duration::from_secs(10),
        events: None,
        table: None,
    });
    Harness {
        lease_table: LeaseTable::new(clients.dynamodb, "leases"),
        shard,
        bucket,
        table,
        ctx,
    }
}

impl Harness {
    /// Creates and takes the lease, as the worker does.
    async fn lease(&self, checkpoint: Checkpoint, pending: Option<PendingBatch>) -> Arc<HeldLease> {
        let mut lease = Lease::new(SHARD, checkpoint, vec![]);
        lease.pending_batch = pending;
        self.lease_table.create_lease(&lease).await.unwrap();
        let taken = self
            .lease_table
            .take_lease(&lease, "worker-1")
            .await
            .unwrap();
        Arc::new(HeldLease::new(
            self.lease_table.clone(),
            taken,
            Instant::now(),
        ))
    }

    /// Starts the task on `lease`.
    fn start(&self, lease: Arc<HeldLease>) -> Running {
        let token = CancellationToken::new();
        let task = tokio::spawn(ShardTask::new(self.ctx.clone(), lease).run(token.clone()));
        Running { token, task }
    }

    /// Runs the task until `done` holds, then shuts it down: whatever
    /// `done` checks happened before the shutdown, which writes what
    /// is buffered.
    ///
    /// # Panics
    /// When the task ends by itself before `done` holds, or `done`
    /// does not hold within [`test_wait::DEFAULT_LIMIT`]; the message
    /// names `what`.
    async fn run_until(
        &self,
        lease: Arc<HeldLease>,
        what: &str,
        done: impl Fn(&Harness) -> bool,
    ) -> Result<ShardExit, ShardError> {
        let mut run = self.start(lease);
        run.wait_until(self, what, done).await;
        run.shutdown().await
    }

    /// Runs the task until it ends by itself (shard end, a lost lease,
    /// an error) and returns how.
    ///
    /// # Panics
    /// When it still runs after [`test_wait::DEFAULT_LIMIT`].
    async fn run_to_exit(
        &self,
        lease: Arc<HeldLease>,
        what: &str,
    ) -> Result<ShardExit, ShardError> {
        self.start(lease).exit(what).await
    }

    /// Runs the task until `done` holds (then shuts it down) or until
    /// it ends by itself, whichever comes first, for a test that
    /// accepts either and tells them apart by the exit.
    ///
    /// # Panics
    /// When neither happens within [`test_wait::DEFAULT_LIMIT`].
    async fn run_until_or_exit(
        &self,
        lease: Arc<HeldLease>,
        what: &str,
        done: impl Fn(&Harness) -> bool,
    ) -> Result<ShardExit, ShardError> {
        let run = self.start(lease);
        test_wait::wait_until(what, || done(self) || run.task.is_finished()).await;
        run.shutdown().await
    }

    async fn row(&self) -> Lease {
        self.lease_table.get_lease(SHARD).await.unwrap().unwrap()
    }

    /// Sequence numbers in S3, in key order then line order.
    fn written(&self) -> Vec<String> {
        self.bucket
            .lines()
            .into_iter()
            .map(|(_, line)| line["sequenceNumber"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// A running shard task.
struct Running {
    token: CancellationToken,
    task: tokio::task::JoinHandle<Result<ShardExit, ShardError>>,
}

impl Running {
    /// Waits until `done` holds while the task runs.
    ///
    /// # Panics
    /// When the task ends first (with its exit in the message), or
    /// `done` does not hold within [`test_wait::DEFAULT_LIMIT`].
    async fn wait_until(&mut self, h: &Harness, what: &str, done: impl Fn(&Harness) -> bool) {
        test_wait::wait_until(what, || done(h) || self.task.is_finished()).await;
        if !done(h) {
            let exit = (&mut self.task).await.unwrap();
            panic!("the shard task ended ({exit:?}) before {what}");
        }
    }

    /// Cancels the task (as SIGTERM does) and returns how it ended.
    async fn shutdown(self) -> Result<ShardExit, ShardError> {
        self.token.cancel();
        self.task.await.unwrap()
    }

    /// Waits for the task to end by itself and returns how it ended.
    ///
    /// # Panics
    /// When it still runs after [`test_wait::DEFAULT_LIMIT`].
    async fn exit(self, what: &str) -> Result<ShardExit, ShardError> {
        test_wait::wait_until(what, || self.task.is_finished()).await;
        self.task.await.unwrap()
    }
}

fn key_for(first: u64, last: u64, minute_millis: i64) -> String {
    let range = sequence_range::SequenceRange::new(
        SequenceNumber::parse(&seq(first)).unwrap(),
        SequenceNumber::parse(&seq(last)).unwrap(),
    )
    .unwrap();
    format!(
        "{}{}",
        KeyLayout::plain("p")
            .shard_bucket_prefix(crate::output::bucket::Bucket::minute(minute_millis), SHARD),
        object_name(&range, BodyKind::lines(CompressionCodec::Zstd))
    )
}

/// Sequence numbers in numeric order.
fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort_by(|a, b| SequenceNumber::cmp_text(a, b));
    v
}

/// Keys in byte order.
fn sorted_keys(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[tokio::test(start_paused = true)]
async fn shutdown_writes_the_buffer_and_checkpoints_it() {
    let h = harness(1_000);
    // Arrival in an hour: the minute is not over while the test runs.
    let future = Utc::now().timestamp_millis() + 3_600_000;
    for i in 1..=10 {
        h.shard.push(&seq(i), future, b"data");
    }
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    let mut run = h.start(lease);
    run.wait_until(&h, "two reads", |h| {
        h.shard.reads.load(Ordering::SeqCst) >= 2
    })
    .await;
    assert!(h.written().is_empty(), "nothing written before shutdown");
    let exit = run.shutdown().await.unwrap();
    assert_eq!(exit, ShardExit::Shutdown);
    assert_eq!(
        h.written(),
        (1..=10).map(seq).collect::<Vec<_>>(),
        "the buffer is written at shutdown"
    );
    assert_eq!(
        h.row().await.checkpoint,
        Checkpoint::SequenceNumber(SequenceNumber::parse(&seq(10)).unwrap())
    );
    assert!(h.row().await.pending_batch.is_none());
}

#[tokio::test(start_paused = true)]
async fn each_arrival_minute_gets_its_own_object() {
    let h = harness(1_000);
    for i in 1..=5 {
        h.shard.push(&seq(i), PAST + 1_000 * i as i64, b"a");
    }
    for i in 6..=10 {
        h.shard
            .push(&seq(i), PAST + 60_000 + 1_000 * i as i64, b"b");
    }
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    h.run_until(lease, "an object per minute", |h| lock_len(&h.bucket) == 2)
        .await
        .unwrap();
    let keys: Vec<String> = h.bucket.objects.lock().unwrap().keys().cloned().collect();
    assert_eq!(
        sorted_keys(keys),
        sorted_keys(vec![key_for(1, 5, PAST), key_for(6, 10, PAST + 60_000)])
    );
    assert_eq!(sorted(h.written()), (1..=10).map(seq).collect::<Vec<_>>());
}

fn lock_len(bucket: &FakeBucket) -> usize {
    bucket.objects.lock().unwrap().len()
}

#[tokio::test(start_paused = true)]
async fn dedup_skips_records_in_s3_and_writes_around_them() {
    let h = harness(1_000);
    for i in 1..=10 {
        h.shard.push(&seq(i), PAST + 1_000 * i as i64, b"x");
    }
    // A previous run wrote 3..=5 (listed ranges are all the resume skip reads).
    let existing = key_for(3, 5, PAST);
    h.bucket
        .objects
        .lock()
        .unwrap()
        .insert(existing.clone(), Bytes::from_static(b"not read"));
    // A foreign key under the prefix is ignored.
    let foreign = format!(
        "{}README.txt",
        KeyLayout::plain("p")
            .shard_bucket_prefix(crate::output::bucket::Bucket::minute(PAST), SHARD)
    );
    h.bucket
        .objects
        .lock()
        .unwrap()
        .insert(foreign.clone(), Bytes::from_static(b"hello"));
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    h.run_until(lease, "the two objects around the written range", |h| {
        lock_len(&h.bucket) == 4
    })
    .await
    .unwrap();
    let mut keys: Vec<String> = h.bucket.objects.lock().unwrap().keys().cloned().collect();
    keys.retain(|k| k != &existing && k != &foreign);
    assert_eq!(
        sorted_keys(keys),
        sorted_keys(vec![key_for(1, 2, PAST), key_for(6, 10, PAST)])
    );
    assert_eq!(h.ctx.metrics.duplicates_excluded.get(), 3);
}

#[tokio::test(start_paused = true)]
async fn the_pending_batch_is_replayed_exactly_first() {
    let h = harness(1_000);
    for i in 1..=10 {
        h.shard.push(&seq(i), PAST + 1_000 * i as i64, b"r");
    }
    // Crashed after recording 3..=6 and before the PUT; the new owner has
    // other buffering settings (max 2 records) but must write 3..=6 as one.
    let pending = PendingBatch {
        key: key_for(3, 6, PAST),
        first: SequenceNumber::parse(&seq(3)).unwrap(),
        last: SequenceNumber::parse(&seq(6)).unwrap(),
    };
    let h = Harness {
        ctx: Arc::new(ShardContext {
            limits: BufferLimits {
                max_records: 2,
                ..h.ctx.limits
            },
            ..(*h.ctx).clone()
        }),
        ..h
    };
    let lease = h
        .lease(
            Checkpoint::SequenceNumber(SequenceNumber::parse(&seq(2)).unwrap()),
            Some(pending.clone()),
        )
        .await;
    h.run_until(lease, "records 3 to 10 in S3", |h| h.written().len() == 8)
        .await
        .unwrap();
    let attempts = h.bucket.put_attempts.lock().unwrap().clone();
    assert_eq!(
        attempts[0], pending.key,
        "the pending batch is written first"
    );
    let replayed: Vec<String> = h
        .bucket
        .lines()
        .into_iter()
        .filter(|(k, _)| *k == pending.key)
        .map(|(_, l)| l["sequenceNumber"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(replayed, (3..=6).map(seq).collect::<Vec<_>>());
    assert_eq!(sorted(h.written()), (3..=10).map(seq).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn a_replayed_batch_that_exists_is_not_overwritten() {
    let h = harness(1_000);
    for i in 1..=4 {
        h.shard.push(&seq(i), PAST + 1_000 * i as i64, b"r");
    }
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    h.run_until(lease, "the first batch", |h| lock_len(&h.bucket) == 1)
        .await
        .unwrap();
    let key = key_for(1, 4, PAST);
    let original = h.bucket.objects.lock().unwrap()[&key].clone();
    // Pretend the checkpoint after that PUT was lost.
    let pending = PendingBatch {
        key: key.clone(),
        first: SequenceNumber::parse(&seq(1)).unwrap(),
        last: SequenceNumber::parse(&seq(4)).unwrap(),
    };
    h.table.items.lock().unwrap().clear();
    let lease = h.lease(Checkpoint::TrimHorizon, Some(pending)).await;
    h.run_until(lease, "the checkpoint at record 4", |h| {
        h.row_checkpoint_is(4)
    })
    .await
    .unwrap();
    assert_eq!(h.bucket.objects.lock().unwrap()[&key], original);
    assert_eq!(
        h.ctx
            .metrics
            .batches(crate::ops::metrics::Outcome::already_present),
        1,
        "412, then verified"
    );
}

impl Harness {
    fn row_checkpoint_is(&self, i: u64) -> bool {
        self.table
            .items
            .lock()
            .unwrap()
            .get(SHARD)
            .and_then(|item| item.get("checkpoint"))
            .and_then(|v| v.as_s().ok())
            .is_some_and(|c| *c == seq(i))
    }
}

/// `h` writing in `format` with `compression` under `layout`, errors
/// under `{prefix}-errors`.
fn writing(h: Harness, format: Format, compression: Compression, layout: KeyLayout) -> Harness {
    let (errors, duplicates) = (
        format!("{}-errors", layout.prefix()),
        format!("{}-duplicates", layout.prefix()),
    );
    let output = Output::new(layout, errors, duplicates, format).with_compression(compression);
    Harness {
        ctx: Arc::new(ShardContext {
            output,
            ..(*h.ctx).clone()
        }),
        ..h
    }
}

#[tokio::test(start_paused = true)]
async fn a_failing_put_holds_back_later_batches_and_the_checkpoint() {
    let h = harness(2);
    for i in 1..=6 {
        h.shard.push(&seq(i), PAST + 1_000 * i as i64, b"w");
    }
    h.bucket.failing_puts.store(3, Ordering::SeqCst);
    // At every applied PUT, the checkpoint must be below the new batch.
    let table = h.table.clone();
    *h.bucket.on_put.lock().unwrap() = Some(Box::new(move |key: &str, _creates: bool| {
        let checkpoint = table.items.lock().unwrap()[SHARD]["checkpoint"]
            .as_s()
            .unwrap()
            .clone();
        let first = crate::output::key::parse_object_name(key.rsplit('/').next().unwrap())
            .unwrap()
            .range
            .first()
            .clone();
        if let Ok(cp) = SequenceNumber::parse(&checkpoint) {
            assert!(
                cp < first,
                "checkpoint {cp} passed a record not yet in S3 ({first})"
            );
        }
    }));
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    h.run_until(lease, "three batches in S3", |h| lock_len(&h.bucket) == 3)
        .await
        .unwrap();
    let attempts = h.bucket.put_attempts.lock().unwrap().clone();
    let expected = [
        key_for(1, 2, PAST),
        key_for(3, 4, PAST),
        key_for(5, 6, PAST),
    ];
    assert_eq!(
        attempts[..4],
        [
            expected[0].clone(),
            expected[0].clone(),
            expected[0].clone(),
            expected[0].clone()
        ],
        "retried, nothing else tried meanwhile"
    );
    assert_eq!(attempts[4..], expected[1..]);
}

#[tokio::test(start_paused = true)]
async fn shard_end_writes_the_rest_and_checkpoints_shard_end() {
    let h = harness(1_000);
    let future = Utc::now().timestamp_millis() + 3_600_000;
    for i in 1..=3 {
        h.shard.push(&seq(i), future, b"e");
    }
    h.shard.close();
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    let exit = h.run_to_exit(lease, "the end of the shard").await.unwrap();
    assert_eq!(exit, ShardExit::ShardEnd(Vec::new()));
    assert_eq!(h.written(), (1..=3).map(seq).collect::<Vec<_>>());
    assert_eq!(h.row().await.checkpoint, Checkpoint::ShardEnd);
}

#[tokio::test(start_paused = true)]
async fn throttled_reads_back_off_and_lose_nothing() {
    let h = harness(1_000);
    let future = Utc::now().timestamp_millis() + 3_600_000;
    for i in 1..=5 {
        h.shard.push(&seq(i), future, b"t");
    }
    h.shard.failing_reads.store(6, Ordering::SeqCst);
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    let mut run = h.start(lease);
    run.wait_until(&h, "two reads past the throttled ones", |h| {
        h.shard.reads.load(Ordering::SeqCst) >= 8
    })
    .await;
    assert_eq!(h.shard.failing_reads.load(Ordering::SeqCst), 0);
    let exit = run.shutdown().await.unwrap();
    assert_eq!(exit, ShardExit::Shutdown, "throttling never ends the task");
    assert_eq!(
        h.written(),
        (1..=5).map(seq).collect::<Vec<_>>(),
        "every record read, and written at shutdown"
    );
}

#[tokio::test(start_paused = true)]
async fn throttled_lease_writes_are_retried() {
    let h = harness(2);
    for i in 1..=6 {
        h.shard.push(&seq(i), PAST + 1_000 * i as i64, b"d");
    }
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    // Every pending-batch and checkpoint write meets throttling first.
    h.table.failing_updates.store(5, Ordering::SeqCst);
    h.run_until(lease, "the checkpoint at record 6", |h| {
        h.row_checkpoint_is(6)
    })
    .await
    .unwrap();
    assert_eq!(h.table.failing_updates.load(Ordering::SeqCst), 0);
    assert_eq!(sorted(h.written()), (1..=6).map(seq).collect::<Vec<_>>());
    assert!(h.row().await.pending_batch.is_none());
}

/// GetRecords calls the task makes in `span` of (paused) time.
async fn reads_during(h: &Harness, lease: Arc<HeldLease>, span: Duration) -> usize {
    let token = CancellationToken::new();
    let task = tokio::spawn(ShardTask::new(h.ctx.clone(), lease).run(token.clone()));
    tokio::time::sleep(span).await;
    let reads = h.shard.reads.load(Ordering::SeqCst);
    token.cancel();
    task.await.unwrap().unwrap();
    reads
}

#[tokio::test(start_paused = true)]
async fn a_busy_shard_is_read_at_most_five_times_a_second() {
    let h = harness(1_000_000);
    let future = Utc::now().timestamp_millis() + 3_600_000;
    for i in 1..=1_000 {
        h.shard.push(&seq(i), future, b"b");
    }
    // One record a call keeps the shard behind for the whole test.
    let h = Harness {
        ctx: Arc::new(ShardContext {
            max_records_per_read: 1,
            ..(*h.ctx).clone()
        }),
        ..h
    };
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    let reads = reads_during(&h, lease, Duration::from_secs(10)).await;
    assert!(
        (45..=51).contains(&reads),
        "{reads} GetRecords calls in 10 s; Kinesis allows 5 a second"
    );
}

#[tokio::test(start_paused = true)]
async fn a_caught_up_shard_is_read_once_per_idle_interval() {
    let h = harness(1_000);
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    let reads = reads_during(&h, lease, Duration::from_secs(10)).await;
    assert!(
        (9..=11).contains(&reads),
        "{reads} GetRecords calls in 10 s with a 1 s idle time"
    );
}

#[tokio::test(start_paused = true)]
async fn empty_reads_behind_the_tip_are_not_caught_up() {
    // Records 1..=3 and 4..=6 arrive in one (long past) minute with a
    // stretch of empty responses between them, as in the middle of a
    // shard. Only MillisBehindLatest 0 is caught up: an early object
    // with 1..=3 alone would mean the minute was closed too soon.
    let h = harness(1_000);
    for i in 1..=6 {
        h.shard.push(&seq(i), PAST + 1_000 * i as i64, b"e");
    }
    let h = Harness {
        ctx: Arc::new(ShardContext {
            max_records_per_read: 3,
            ..(*h.ctx).clone()
        }),
        ..h
    };
    *h.shard.empty_reads_at.lock().unwrap() = Some((3, 25));
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    let token = CancellationToken::new();
    let task = tokio::spawn(ShardTask::new(h.ctx.clone(), lease).run(token.clone()));
    // 1 + 25 reads at the busy rate (5 a second) take about 5 s; at the
    // idle rate (one a second) they would take 25 s.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let reads = h.shard.reads.load(Ordering::SeqCst);
    assert!(
        reads >= 27,
        "{reads} GetRecords calls in 8 s: empty reads behind the tip must go at the busy rate"
    );
    let keys: Vec<String> = h.bucket.objects.lock().unwrap().keys().cloned().collect();
    assert_eq!(
        keys,
        vec![key_for(1, 6, PAST)],
        "one object, closed once caught up"
    );
    token.cancel();
    task.await.unwrap().unwrap();
}

/// The shard's `retention_used_ratio` series, if exported.
fn retention_ratio(h: &Harness) -> Option<f64> {
    let text = h.ctx.metrics.encode();
    let prefix = format!("shardsink_retention_used_ratio{{shard_id=\"{SHARD}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map(|value| value.parse().unwrap())
}

/// Starts the shard's task on a new lease at `TRIM_HORIZON`, in a
/// stream that keeps records 24 hours.
async fn start_with_day_retention(h: &Harness) -> Running {
    h.ctx
        .metrics
        .set_stream_retention(Duration::from_secs(24 * 3_600));
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    h.start(lease)
}

#[tokio::test(start_paused = true)]
async fn the_retention_gauge_ages_records_stuck_in_a_failing_write() {
    let h = harness(2);
    // Arrived a day and a half ago; S3 refuses every PUT.
    let arrival = Utc::now().timestamp_millis() - 36 * 3_600_000;
    for i in 1..=2 {
        h.shard.push(&seq(i), arrival + i as i64, b"o");
    }
    h.bucket.failing_puts.store(usize::MAX, Ordering::SeqCst);
    let mut run = start_with_day_retention(&h).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let ratio = retention_ratio(&h).expect("a series for the shard");
    assert!(
        (1.49..1.6).contains(&ratio),
        "a record a day and a half old in a 24 h stream: {ratio}"
    );
    h.bucket.failing_puts.store(0, Ordering::SeqCst);
    run.wait_until(
        &h,
        "the batch written once S3 accepts it, and a ratio of 0 (nothing waits)",
        |h| h.written().len() == 2 && retention_ratio(h) == Some(0.0),
    )
    .await;
    run.shutdown().await.unwrap();
}

/// A shard that was caught up, then whose reads fail for six hours (a
/// disabled KMS key, a revoked permission): records that arrived
/// since cannot be seen, and may expire, so the gauge counts from the
/// last read that succeeded instead of staying at 0.
#[tokio::test(start_paused = true)]
async fn the_retention_gauge_ages_while_reads_fail() {
    let h = harness(1_000);
    h.shard.push(&seq(1), PAST, b"r");
    let mut run = start_with_day_retention(&h).await;
    run.wait_until(&h, "the record archived, caught up", |h| {
        h.written().len() == 1 && retention_ratio(h) == Some(0.0)
    })
    .await;

    h.shard.failing_reads.store(usize::MAX, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(6 * 3_600)).await;
    let ratio = retention_ratio(&h).expect("a series for the shard");
    assert!(
        (0.24..0.26).contains(&ratio),
        "six hours without a read in a 24 h stream: {ratio}"
    );

    h.shard.failing_reads.store(0, Ordering::SeqCst);
    run.wait_until(&h, "read again and caught up: nothing waits", |h| {
        retention_ratio(h) == Some(0.0)
    })
    .await;
    run.shutdown().await.unwrap();
}

/// Reads that fail from the task's start: the backlog behind the
/// checkpoint is unknown, and the gauge counts from the start.
#[tokio::test(start_paused = true)]
async fn the_retention_gauge_ages_a_shard_never_read() {
    let h = harness(1_000);
    h.shard.failing_reads.store(usize::MAX, Ordering::SeqCst);
    let run = start_with_day_retention(&h).await;
    tokio::time::sleep(Duration::from_secs(12 * 3_600)).await;
    let ratio = retention_ratio(&h).expect("a series for the shard");
    assert!(
        (0.49..0.51).contains(&ratio),
        "twelve hours without a read in a 24 h stream: {ratio}"
    );
    run.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_shard_without_room_to_read_writes_its_batch_first() {
    // The next read needs the whole 1 MiB budget, and this shard's own
    // batch holds some of it: rather than wait with it (nobody else
    // would free anything), it writes the batch, though no buffering
    // limit is reached and its minute is still open.
    let h = harness(1_000);
    let future = Utc::now().timestamp_millis() + 3_600_000;
    for i in 1..=3 {
        h.shard.push(&seq(i), future, b"m");
    }
    let h = Harness {
        ctx: Arc::new(ShardContext {
            budget: MemoryBudget::new(1 << 20, 1 << 20),
            ..(*h.ctx).clone()
        }),
        ..h
    };
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    let mut run = h.start(lease);
    run.wait_until(&h, "the batch written to make room", |h| {
        lock_len(&h.bucket) == 1
    })
    .await;
    assert_eq!(h.written(), (1..=3).map(seq).collect::<Vec<_>>());
    run.shutdown().await.unwrap();
    assert_eq!(h.ctx.budget.used(), 0, "everything released");
}

#[tokio::test(start_paused = true)]
async fn reads_wait_while_the_memory_budget_is_exceeded() {
    let h = harness(1_000);
    h.shard.push(&seq(1), PAST, b"r");
    let h = Harness {
        ctx: Arc::new(ShardContext {
            budget: MemoryBudget::new(1_000, 1_000),
            ..(*h.ctx).clone()
        }),
        ..h
    };
    // Another shard's batch being written holds more than the limit.
    let mut other = h.ctx.budget.reserve();
    other.grow(1_001);
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    let reads = reads_during(&h, lease.clone(), Duration::from_secs(10)).await;
    assert_eq!(reads, 0, "no read while over the budget");
    drop(other);
    let reads = reads_during(&h, lease, Duration::from_secs(10)).await;
    assert!(reads > 0, "reads resume once the write released its bytes");
}

#[tokio::test(start_paused = true)]
async fn a_pending_batch_waits_for_its_turn_to_replay() {
    let h = harness(1_000);
    for i in 1..=4 {
        h.shard.push(&seq(i), PAST + 1_000 * i as i64, b"t");
    }
    let pending = PendingBatch {
        key: key_for(1, 4, PAST),
        first: SequenceNumber::parse(&seq(1)).unwrap(),
        last: SequenceNumber::parse(&seq(4)).unwrap(),
    };
    // One replay at a time (limit / max bytes = 1), and another shard's
    // replay is under way.
    let h = Harness {
        ctx: Arc::new(ShardContext {
            budget: MemoryBudget::new(1 << 20, 1 << 20),
            ..(*h.ctx).clone()
        }),
        ..h
    };
    let other = h.ctx.budget.replay_permit().await;
    let lease = h.lease(Checkpoint::TrimHorizon, Some(pending)).await;
    let reads = reads_during(&h, lease.clone(), Duration::from_secs(10)).await;
    assert_eq!(reads, 0, "no read before its turn");
    drop(other);
    h.run_until(lease, "the replay checkpointed", |h| h.row_checkpoint_is(4))
        .await
        .unwrap();
    assert_eq!(h.written(), (1..=4).map(seq).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn an_idle_shard_holds_no_reservation_while_it_waits() {
    let h = harness(1_000);
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    let token = CancellationToken::new();
    let task = tokio::spawn(ShardTask::new(h.ctx.clone(), lease).run(token.clone()));
    // Caught up: one read a second, each instant in paused time.
    tokio::time::sleep(Duration::from_millis(5_500)).await;
    assert!(h.shard.reads.load(Ordering::SeqCst) >= 5);
    assert_eq!(h.ctx.budget.used(), 0, "nothing reserved between reads");
    token.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_at_timestamp_lease_starts_at_its_stored_time() {
    // A LATEST lease is created as AT_TIMESTAMP(creation time); whoever
    // holds it later must start there, not at its own LATEST.
    let h = harness(1_000);
    for i in 1..=10 {
        h.shard.push(&seq(i), PAST + 1_000 * i as i64, b"t");
    }
    let mut lease = Lease::new(SHARD, Checkpoint::AtTimestamp, vec![]);
    lease.initial_timestamp = Some(
        chrono::DateTime::from_timestamp_millis(PAST + 6_000)
            .unwrap()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    );
    h.lease_table.create_lease(&lease).await.unwrap();
    let taken = h.lease_table.take_lease(&lease, "worker-2").await.unwrap();
    let held = Arc::new(HeldLease::new(h.lease_table.clone(), taken, Instant::now()));
    h.run_until(held, "five records in S3", |h| h.written().len() >= 5)
        .await
        .unwrap();
    assert_eq!(h.written(), (6..=10).map(seq).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn a_replay_whose_last_record_never_comes_drops_nothing() {
    let h = harness(1_000);
    // The pending batch says 3..=6, but the shard holds no 5 or 6.
    for i in [1, 2, 3, 4, 7, 8] {
        h.shard.push(&seq(i), PAST + 1_000 * i as i64, b"m");
    }
    let pending = PendingBatch {
        key: key_for(3, 6, PAST),
        first: SequenceNumber::parse(&seq(3)).unwrap(),
        last: SequenceNumber::parse(&seq(6)).unwrap(),
    };
    let checkpoint = Checkpoint::SequenceNumber(SequenceNumber::parse(&seq(2)).unwrap());
    let lease = h.lease(checkpoint.clone(), Some(pending)).await;
    let result = h
        .run_to_exit(lease, "the replay to fail on the missing records")
        .await;
    assert!(
        matches!(
            result,
            Err(ShardError::Commit(CommitError::Internal { .. }))
        ),
        "{result:?}"
    );
    assert!(
        h.bucket.objects.lock().unwrap().is_empty(),
        "nothing written"
    );
    assert_eq!(
        h.row().await.checkpoint,
        checkpoint,
        "no checkpoint past records 3 and 4"
    );
}

#[tokio::test(start_paused = true)]
async fn a_lost_lease_stops_all_writes() {
    let h = harness(2);
    for i in 1..=6 {
        h.shard.push(&seq(i), PAST + 1_000 * i as i64, b"l");
    }
    // Another worker takes the lease as soon as the first object lands.
    let table = h.table.clone();
    *h.bucket.on_put.lock().unwrap() = Some(Box::new(move |_key: &str, _creates: bool| {
        let mut items = table.items.lock().unwrap();
        let row = items.get_mut(SHARD).unwrap();
        row.insert(
            "leaseOwner".to_owned(),
            aws_sdk_dynamodb::types::AttributeValue::S("worker-2".to_owned()),
        );
        let counter: u64 = row["leaseCounter"].as_n().unwrap().parse().unwrap();
        row.insert(
            "leaseCounter".to_owned(),
            aws_sdk_dynamodb::types::AttributeValue::N((counter + 1).to_string()),
        );
    }));
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    let exit = h
        .run_to_exit(lease, "the task to notice the lost lease")
        .await
        .unwrap();
    assert_eq!(exit, ShardExit::LeaseLost);
    assert_eq!(
        h.bucket.put_attempts.lock().unwrap().len(),
        1,
        "no batch after the loss"
    );
    assert_eq!(h.row().await.lease_owner.as_deref(), Some("worker-2"));
}

#[tokio::test(start_paused = true)]
async fn records_read_after_the_lease_was_lost_never_reach_a_batch() {
    let h = harness(1);
    for i in 1..=3 {
        h.shard.push(&seq(i), PAST + 1_000 * i as i64, b"f");
    }
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    // The lease is lost while the first read is under way: its records
    // come back, and must go no further (batches of one record would be
    // written at once).
    *h.shard.cancel_on_read.lock().unwrap() = Some(lease.lost().clone());
    let exit = h
        .run_to_exit(lease, "the task to notice the lost lease")
        .await
        .unwrap();
    assert_eq!(exit, ShardExit::LeaseLost);
    // Dropped as they came: not counted as read, so never handed to the
    // resume skip, event decisions or a batch.
    assert_eq!(
        h.ctx.metrics.records_read.get(),
        0,
        "the records were handled"
    );
    assert!(
        h.bucket.put_attempts.lock().unwrap().is_empty(),
        "nothing read after the loss is written"
    );
    assert_eq!(h.row().await.pending_batch, None, "nor recorded");
}

#[tokio::test(start_paused = true)]
async fn an_object_with_other_records_is_never_overwritten() {
    let h = harness(1_000);
    for i in 1..=3 {
        h.shard.push(&seq(i), PAST + 1_000 * i as i64, b"c");
    }
    let key = key_for(1, 3, PAST);
    let other = crate::output::compression::Compression::Zstd(3)
        .compress(b"{\"sequenceNumber\":\"1\",\"data\":\"\"}\n")
        .unwrap();
    // Written after the resume skip's listing, so the writer meets it as a 412.
    let bucket = h.bucket.clone();
    let planted = Bytes::from(other);
    let planted_clone = planted.clone();
    let key_clone = key.clone();
    *h.bucket.on_put.lock().unwrap() = Some(Box::new(move |_k: &str, _creates: bool| {
        bucket
            .objects
            .lock()
            .unwrap()
            .entry(key_clone.clone())
            .or_insert_with(|| planted_clone.clone());
    }));
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    let result = h
        .run_to_exit(lease, "the task to stop on the conflicting object")
        .await;
    assert!(
        matches!(result, Err(ShardError::Commit(CommitError::ObjectConflict { ref key, .. })) if key.ends_with(".jsonl.zst")),
        "{result:?}"
    );
    assert_eq!(h.bucket.objects.lock().unwrap()[&key], planted);
    assert_eq!(
        h.row().await.checkpoint,
        Checkpoint::TrimHorizon,
        "no checkpoint past it"
    );
}

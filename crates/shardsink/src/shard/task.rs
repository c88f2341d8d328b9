//! [`ShardTask`]: reads one leased shard and writes its records to S3.
//!
//! Per record, in sequence order:
//! 1. While the pending batch from the lease row is being rebuilt
//!    ([`Replay`]), the record goes into it until the batch's last record;
//!    then that batch is written under its recorded key (C6).
//! 2. While dedup is on, a record already in S3 is skipped; the batch being
//!    built ends before it (batches are contiguous runs of records).
//! 3. A record of another arrival minute or hour (the time bucket) ends the
//!    batch being built.
//! 4. The record is appended; a batch past a buffering limit is written.
//!
//! Batches are written one at a time, in order (C4): the task awaits each
//! write — record pending, PUT, checkpoint — before reading on.
//!
//! # Layout
//! - this file: the task, its read loop and the steps above;
//! - `replaying`: rebuilding a batch exactly — the pending batch from the
//!   lease row, or an uncommitted batch whose error object is in S3;
//! - `retention`: reporting records that expired unread before anything is
//!   written past them.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use shard_lease::{Checkpoint, HeldLease};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, error, info, info_span, warn};

use crate::aws::backoff::Backoff;
use crate::aws::retry::{Classify, Failure, Retry, Stopped};
use crate::aws::{KinesisError, S3Error, ShardInfo};
use crate::commit::error::CommitError;
use crate::commit::writer::BatchWriter;
use crate::events::decider::{EventError, RebuildSource, ShardEvents};
use crate::events::decisions::UserDecision;
use crate::events::store::Lineage;
use crate::memory::Reservation;
use crate::ops::log::error_chain;
use crate::output::batch::{Batch, FlushReason};
use crate::read::reader::{ReadBatch, ShardReader};
use crate::read::record::ShardRecord;
use crate::shard::context::{ShardContext, ShardExit};
use crate::shard::dedup::Dedup;
use crate::shard::error::ShardError;
use crate::shard::frontier::Frontier;
use crate::shard::progress::Progress;
use crate::shard::replay::{Holding, Replay};

mod replaying;
mod retention;

/// Kinesis allows 5 GetRecords calls a second per shard (GetRecords API
/// reference); a busy shard is read at most this often.
const MIN_READ_INTERVAL: Duration = Duration::from_millis(200);

/// A time bucket is over for a caught-up shard this long after it ends by
/// the local clock: slack for clock skew between this host and Kinesis. A
/// record of the bucket that still arrives later only makes one more object.
const BUCKET_CLOSE_GRACE: Duration = Duration::from_secs(2);

/// One shard's reading and writing, for as long as the lease is held.
#[derive(Debug)]
pub struct ShardTask {
    ctx: Arc<ShardContext>,
    lease: Arc<HeldLease>,
    shard_id: String,
    writer: BatchWriter,
    dedup: Dedup,
    /// Event decisions, with `--event-id`.
    events: Option<ShardEvents>,
    /// Records read but not yet decided: with event decisions, a
    /// response's records are decided together, then batched
    /// ([`flush_run`](Self::flush_run)).
    run: Vec<ShardRecord>,
    batch: Option<Batch>,
    replay: Option<Replay>,
    frontier: Frontier,
    progress: Progress,
}

impl ShardTask {
    /// A task for the shard `lease` holds; dedup starts on (the lease was just
    /// taken).
    pub fn new(ctx: Arc<ShardContext>, lease: Arc<HeldLease>) -> Self {
        let mut writer = BatchWriter::new(
            ctx.store.clone(),
            ctx.output.clone(),
            lease.clone(),
            ctx.metrics.clone(),
            ctx.failover_time,
        );
        let events = ctx.events.as_ref().map(|runtime| {
            writer = writer.clone().with_events(&runtime.description);
            ShardEvents::new(
                runtime.clone(),
                Lineage::root(lease.shard_id()),
                RebuildSource {
                    store: ctx.store.clone(),
                    output: ctx.output.clone(),
                    metrics: ctx.metrics.clone(),
                    budget: ctx.budget.clone(),
                },
            )
        });
        let mut dedup = Dedup::new(
            ctx.store.clone(),
            ctx.output.layout.clone(),
            lease.shard_id(),
            ctx.metrics.clone(),
        );
        if ctx.output.format.can_reject() {
            dedup = dedup.with_error_layout(ctx.output.error_layout.clone());
        }
        if ctx.events.is_some() {
            dedup = dedup.with_decisions_layout(ctx.output.decisions_layout.clone());
        }
        Self {
            shard_id: lease.shard_id().to_owned(),
            ctx,
            lease,
            writer,
            dedup,
            events,
            run: Vec::new(),
            batch: None,
            replay: None,
            frontier: Frontier::new(Checkpoint::TrimHorizon),
            progress: Progress::new(),
        }
    }

    /// The shard's ancestors (nearest first), whose accepted copies of
    /// events its decisions inherit.
    pub fn with_ancestors(mut self, ancestors: Vec<String>) -> Self {
        if let Some(events) = &mut self.events {
            events.set_ancestors(ancestors);
        }
        self
    }

    /// Runs until `SHARD_END`, lease loss, or `shutdown`; then writes what is
    /// buffered (except after a lease loss) and returns.
    ///
    /// # Errors
    /// [`ShardError`] other than a lost lease (which is `Ok(LeaseLost)`).
    pub async fn run(self, shutdown: CancellationToken) -> Result<ShardExit, ShardError> {
        let span = info_span!("shard", shard_id = %self.shard_id);
        async move {
            match self.run_inner(shutdown).await {
                Err(err) if err.is_lease_lost() => Ok(ShardExit::LeaseLost),
                other => other,
            }
        }
        .instrument(span)
        .await
    }

    async fn run_inner(mut self, shutdown: CancellationToken) -> Result<ShardExit, ShardError> {
        let lease = self.lease.snapshot().await;
        if lease.checkpoint.is_shard_end() {
            return Ok(ShardExit::ShardEnd(Vec::new()));
        }
        self.frontier = Frontier::new(lease.checkpoint.clone());
        let start = self.ctx.start_position(&lease);
        info!(checkpoint = %lease.checkpoint, start = ?start, pending_batch = ?lease.pending_batch.as_ref().map(|p| &p.key), "shard started");
        let lost = self.lease.lost().clone();
        if let Some(pending) = lease.pending_batch {
            // A replay cannot be written early to make room: replays take
            // turns (see `MemoryBudget`).
            let turn = tokio::select! {
                biased;
                () = shutdown.cancelled() => return Ok(ShardExit::Shutdown),
                () = lost.cancelled() => return Ok(ShardExit::LeaseLost),
                turn = self.ctx.budget.replay_permit() => turn,
            };
            let plan = match self
                .writer
                .replay_plan(&pending, self.events.is_some(), &self.ctx.budget)
                .await
            {
                Err(CommitError::LeaseLost { .. }) => return Ok(ShardExit::LeaseLost),
                plan => plan?,
            };
            self.adopt(&plan.recorded).await?;
            let holding = Holding::new(turn, plan.held);
            self.replay = Some(Replay::new(pending, plan.format, plan.decisions, holding));
        }
        let mut reader = ShardReader::new(
            self.ctx.kinesis.clone(),
            self.shard_id.clone(),
            start,
            self.ctx.max_records_per_read,
        )
        .with_stream_retention(self.ctx.metrics.stream_retention());
        let (mut transient, mut persistent) = (Backoff::transient(), Backoff::persistent());
        loop {
            // Room in the memory budget for the response, taken before the
            // call; held (shrunk to the records) until they are in batches.
            let Some(mut response) = self.reserve_read(&shutdown).await? else {
                return self.finish_shutdown().await;
            };
            let started = Instant::now();
            let read = tokio::select! {
                biased;
                () = shutdown.cancelled() => return self.finish_shutdown().await,
                () = lost.cancelled() => return Ok(ShardExit::LeaseLost),
                read = reader.read() => read,
            };
            response.resize(read.as_ref().map_or(0, |read| self.held_for(read)));
            let delay = match read {
                Ok(mut read) => {
                    transient.reset();
                    persistent.reset();
                    if let Some(gap) = read.retention_gap.take() {
                        self.on_retention_gap(gap).await?;
                    }
                    let caught_up = read.is_caught_up();
                    self.progress.read(&read, &self.shard_id, &self.ctx.metrics);
                    self.prepare_replay(&read.records).await?;
                    for record in read.records {
                        self.on_record(record).await?;
                    }
                    self.flush_run().await?;
                    if read.shard_end {
                        return self.finish_shard_end(read.child_shards).await;
                    }
                    self.flush_if_due(caught_up).await?;
                    self.checkpoint_if_idle(false).await?;
                    if caught_up && self.is_fully_checkpointed() {
                        self.ctx.metrics.checkpoint_current(&self.shard_id);
                    }
                    if caught_up {
                        self.ctx.idle_time_between_reads
                    } else {
                        MIN_READ_INTERVAL.saturating_sub(started.elapsed())
                    }
                }
                Err(KinesisError::ExpiredIterator) => {
                    self.ctx
                        .metrics
                        .retry(crate::ops::metrics::RetryCause::kinesis_expired_iterator);
                    info!("shard iterator expired; getting a new one");
                    reader.reset_iterator();
                    Duration::ZERO
                }
                Err(err) => {
                    if matches!(err, KinesisError::NotFound(_)) && self.has_left_the_stream().await
                    {
                        return self.finish_shard_gone(reader.position()).await;
                    }
                    self.progress.read_failed();
                    let delay = self.read_failed(&err, &mut transient, &mut persistent);
                    // Buffers still age while reads fail.
                    self.flush_if_due(false).await?;
                    delay
                }
            };
            drop(response);
            self.note_unarchived(None);
            self.log_progress(false);
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return self.finish_shutdown().await,
                () = lost.cancelled() => return Ok(ShardExit::LeaseLost),
                () = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// Counts and logs a failed read; how long to wait before the next.
    /// Nothing a shard's read returns is final: the task keeps trying,
    /// slowly and loudly, until the failure is fixed or the lease is lost.
    fn read_failed(
        &self,
        err: &KinesisError,
        transient: &mut Backoff,
        persistent: &mut Backoff,
    ) -> Duration {
        match err.classify() {
            Failure::Transient(cause) => {
                self.ctx.metrics.retry(cause);
                let delay = transient.next_delay();
                warn!(error = %error_chain(err), ?delay, "read failed; retrying");
                delay
            }
            Failure::Persistent(cause) => {
                self.ctx.metrics.retry(cause);
                let delay = persistent.next_delay();
                error!(error = %error_chain(err), ?delay, "read failed; retrying until it is fixed");
                delay
            }
            Failure::Final => {
                let delay = persistent.next_delay();
                error!(error = %error_chain(err), ?delay, "read failed; retrying");
                delay
            }
        }
    }

    /// Room in the memory budget for one GetRecords response (see
    /// `MemoryBudget`). A replay reads whatever is used; otherwise the task
    /// waits for room — writing its own batch first, never waiting while it
    /// holds one. `None` when shutdown came first.
    async fn reserve_read(
        &mut self,
        shutdown: &CancellationToken,
    ) -> Result<Option<Reservation>, ShardError> {
        let budget = self.ctx.budget.clone();
        loop {
            if self.replay.is_some() {
                return Ok(Some(budget.reserve_read_anyway()));
            }
            if let Some(reservation) = budget.try_reserve_read() {
                return Ok(Some(reservation));
            }
            if let Some(batch) = self.batch.take() {
                self.write(batch, FlushReason::MemoryLimit).await?;
                continue;
            }
            let released = budget.released();
            tokio::pin!(released);
            released.as_mut().enable();
            if let Some(reservation) = budget.try_reserve_read() {
                return Ok(Some(reservation));
            }
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return Ok(None),
                () = self.lease.lost().cancelled() => return Err(self.lease_lost()),
                () = released => {}
            }
        }
    }

    /// What a response holds until its records are in batches: its
    /// records, and with event decisions what deciding them holds
    /// ([`ShardEvents::deciding_bytes`]).
    fn held_for(&self, read: &ReadBatch) -> u64 {
        let deciding = match &self.events {
            Some(_) => ShardEvents::deciding_bytes(&read.records),
            None => 0,
        };
        read.bytes + deciding
    }

    fn lease_lost(&self) -> ShardError {
        ShardError::lease_lost(&self.shard_id)
    }

    async fn on_record(&mut self, record: ShardRecord) -> Result<(), ShardError> {
        if self.replay.is_some() && self.feed_replay(&record).await? {
            return Ok(());
        }
        if self.is_written(&record).await? {
            self.flush_run().await?;
            if let Some(batch) = self.batch.take() {
                self.write(batch, FlushReason::Gap).await?;
            }
            self.progress
                .duplicates(record.user_record_count() as u64, &self.ctx.metrics);
            self.frontier.skipped(record.sequence_number);
            return Ok(());
        }
        if self.dedup.uncommitted_at(&record.sequence_number).is_some() {
            self.flush_run().await?;
        }
        if self.start_uncommitted(&record).await? {
            return Ok(());
        }
        if self.events.is_some() {
            self.run.push(record);
            return Ok(());
        }
        self.append(record, None).await
    }

    /// Decides the records held in the run and batches them.
    async fn flush_run(&mut self) -> Result<(), ShardError> {
        let Some(events) = &mut self.events else {
            return Ok(());
        };
        if self.run.is_empty() {
            return Ok(());
        }
        let run = std::mem::take(&mut self.run);
        let placed_through = self.frontier.placed_through().cloned();
        let decisions = events
            .decide(&run, placed_through.as_ref(), self.lease.lost())
            .await
            .map_err(|source| events_failed(&self.shard_id, source))?;
        for (record, decisions) in run.into_iter().zip(decisions) {
            self.append(record, Some(decisions)).await?;
        }
        Ok(())
    }

    /// Decides ahead the records of `records` a replay will take, when its
    /// decisions are to be made now: in one call, as any run.
    async fn prepare_replay(&mut self, records: &[ShardRecord]) -> Result<(), ShardError> {
        let (Some(replay), Some(events)) = (&mut self.replay, &mut self.events) else {
            return Ok(());
        };
        if !replay.needs_decisions() {
            return Ok(());
        }
        let wanted = replay.wanted(records);
        if wanted.is_empty() {
            return Ok(());
        }
        let placed_through = self.frontier.placed_through().cloned();
        let decisions = events
            .decide(wanted, placed_through.as_ref(), self.lease.lost())
            .await
            .map_err(|source| events_failed(&self.shard_id, source))?;
        replay.supply(decisions);
        Ok(())
    }

    /// Puts the accepted copies of decisions read back from S3 into the
    /// store (with event decisions on).
    pub(super) async fn adopt(
        &mut self,
        recorded: &[crate::events::decisions::RecordedDecision],
    ) -> Result<(), ShardError> {
        match &mut self.events {
            Some(events) if !recorded.is_empty() => events
                .adopt(recorded, self.lease.lost())
                .await
                .map_err(|source| events_failed(&self.shard_id, source)),
            _ => Ok(()),
        }
    }

    /// Adds a record (not in S3, not replayed) to the batch being built,
    /// writing batches that end before it or reach a limit with it.
    async fn append(
        &mut self,
        record: ShardRecord,
        decisions: Option<Vec<UserDecision>>,
    ) -> Result<(), ShardError> {
        let bucket = self.ctx.output.layout.bucket_of(record.arrival_millis);
        if let Some(batch) = self.batch.take_if(|batch| batch.bucket() != bucket) {
            self.write(batch, FlushReason::BucketOver).await?;
        }
        let batch = match &mut self.batch {
            Some(batch) => {
                batch.push(&record, decisions.as_deref());
                batch
            }
            None => self.batch.insert(Batch::start(
                &self.shard_id,
                &record,
                decisions.as_deref(),
                bucket,
                &self.ctx.output.format,
                self.ctx.budget.clone(),
            )),
        };
        if let Some(reason) = batch.flush_reason(&self.ctx.limits)
            && let Some(batch) = self.batch.take()
        {
            self.write(batch, reason).await?;
        }
        Ok(())
    }

    /// Whether dedup finds the record in S3.
    async fn is_written(&mut self, record: &ShardRecord) -> Result<bool, ShardError> {
        self.dedup
            .is_written(
                self.ctx.output.layout.bucket_of(record.arrival_millis),
                &record.sequence_number,
                self.lease.lost(),
            )
            .await
            .map_err(|stopped| ShardError::from_s3_stop(&self.shard_id, stopped))
    }

    async fn write(&mut self, batch: Batch, reason: FlushReason) -> Result<(), ShardError> {
        let first_arrival = batch.first_arrival_millis();
        self.note_unarchived(Some(first_arrival));
        let written = self.writer.write(batch, reason).await?;
        self.progress.batch_written();
        if reason != FlushReason::Gap {
            self.dedup.on_batch_written();
        }
        self.frontier.written(written.pending.last);
        self.events_written(first_arrival).await
    }

    /// Tells the event decisions that a batch whose first record arrived at
    /// `first_arrival` is written (see `ShardEvents::written`).
    pub(super) async fn events_written(&mut self, first_arrival: i64) -> Result<(), ShardError> {
        match &self.events {
            Some(events) => events
                .written(first_arrival)
                .await
                .map_err(|source| events_failed(&self.shard_id, source)),
            None => Ok(()),
        }
    }

    /// Writes the batch being built if a buffering limit is reached, or if its
    /// time bucket is over while the shard is caught up.
    async fn flush_if_due(&mut self, caught_up: bool) -> Result<(), ShardError> {
        let Some(batch) = &self.batch else {
            return Ok(());
        };
        let mut reason = batch.flush_reason(&self.ctx.limits);
        if reason.is_none() && caught_up {
            let grace = i64::try_from(BUCKET_CLOSE_GRACE.as_millis()).unwrap_or(i64::MAX);
            if Utc::now().timestamp_millis() >= batch.bucket().end_millis().saturating_add(grace) {
                reason = Some(FlushReason::BucketOver);
            }
        }
        if let Some(reason) = reason
            && let Some(batch) = self.batch.take()
        {
            self.write(batch, reason).await?;
        }
        Ok(())
    }

    /// Checkpoints past records dedup found in S3 when nothing is buffered and
    /// no write has checkpointed them for a while (or at shutdown).
    async fn checkpoint_if_idle(&mut self, force: bool) -> Result<(), ShardError> {
        if self.batch.is_some() || self.replay.is_some() {
            return Ok(());
        }
        if let Some(checkpoint) = self.frontier.idle_checkpoint(force) {
            self.writer.checkpoint(&checkpoint).await?;
            info!(checkpoint = %checkpoint, "checkpointed past records already in S3");
            self.frontier.checkpointed(checkpoint);
        }
        Ok(())
    }

    /// Nothing buffered, nothing being replayed, and the checkpoint covers
    /// every record handled.
    fn is_fully_checkpointed(&self) -> bool {
        self.batch.is_none() && self.replay.is_none() && self.frontier.is_current()
    }

    async fn finish_shard_end(mut self, children: Vec<ShardInfo>) -> Result<ShardExit, ShardError> {
        if let Some(replay) = self.replay.take() {
            if replay.batch().is_some() {
                // As for `Step::Broken`: consumed records must not be dropped.
                return Err(ShardError::internal(
                    &self.shard_id,
                    "the shard ended before the pending batch's last record",
                ));
            }
            warn!(key = %replay.pending().key, "shard ended before the pending batch's first record; its records left the stream, dedup covers it");
        }
        if let Some(batch) = self.batch.take() {
            self.write(batch, FlushReason::ShardEnd).await?;
        }
        self.writer.checkpoint(&Checkpoint::ShardEnd).await?;
        if let Some(events) = &self.events {
            events
                .shard_ended()
                .await
                .map_err(|source| events_failed(&self.shard_id, source))?;
        }
        self.log_progress(true);
        info!(children = ?children.iter().map(|c| &c.shard_id).collect::<Vec<_>>(), "shard reached SHARD_END; checkpointed");
        Ok(ShardExit::ShardEnd(children))
    }

    async fn finish_shutdown(mut self) -> Result<ShardExit, ShardError> {
        if self.replay.is_some() {
            // The pending batch stays in the row and is replayed next time.
            info!("shutdown during replay of the pending batch; it is replayed on the next start");
            return Ok(ShardExit::Shutdown);
        }
        if let Some(batch) = self.batch.take() {
            self.write(batch, FlushReason::Shutdown).await?;
        }
        self.checkpoint_if_idle(true).await?;
        self.log_progress(true);
        Ok(ShardExit::Shutdown)
    }

    /// Tells the retention gauge when this shard's oldest unarchived record
    /// arrived: the batch `writing` (if any), else the replay or buffered
    /// batch, else the next unread record when behind.
    fn note_unarchived(&self, writing: Option<i64>) {
        let buffered = self
            .replay
            .as_ref()
            .and_then(Replay::batch)
            .or(self.batch.as_ref())
            .map(Batch::first_arrival_millis);
        self.progress
            .unarchived(writing.or(buffered), &self.shard_id, &self.ctx.metrics);
    }

    fn log_progress(&mut self, force: bool) {
        self.progress
            .log(force, self.dedup.is_enabled(), self.frontier.checkpoint());
    }
}

/// A failed event decision as the shard task's error: a rebuild stopped by
/// the lease's loss is the lease's loss.
fn events_failed(shard_id: &str, source: EventError) -> ShardError {
    match source {
        EventError::Rebuild(stopped) => ShardError::from_s3_stop(shard_id, stopped),
        EventError::Manifest(Stopped::Cancelled) => ShardError::lease_lost(shard_id),
        source => ShardError::Events {
            shard_id: shard_id.to_owned(),
            source,
        },
    }
}

/// An S3 retry loop that counts its retries and stops when `lease` is lost
/// (the next owner does the work).
fn s3_retry<'a>(
    ctx: &'a ShardContext,
    lease: &'a HeldLease,
    what: &'static str,
) -> Retry<'a, S3Error> {
    Retry::new(what).metrics(&ctx.metrics).until(lease.lost())
}

#[cfg(test)]
mod tests {
    mod buckets;
    mod events;
    mod formats;
    mod replays;
    mod retention;

    use std::sync::atomic::Ordering;

    use bytes::Bytes;
    use sequence_range::SequenceNumber;
    use shard_lease::{Lease, LeaseTable, PendingBatch};

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
    use crate::test_wait;

    const SHARD: &str = "shardId-000000000000";
    /// 2020-01-01T00:00:00Z: a minute long over.
    const PAST: i64 = 1_577_836_800_000;

    /// The `i`-th sequence number: 56 digits, increasing, with gaps.
    fn seq(i: u64) -> String {
        let base =
            SequenceNumber::parse("49590338271490256608559692538361571095921575989136588898")
                .unwrap();
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
            failover_time: Duration::from_secs(10),
            events: None,
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
        async fn lease(
            &self,
            checkpoint: Checkpoint,
            pending: Option<PendingBatch>,
        ) -> Arc<HeldLease> {
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
        // A previous run wrote 3..=5 (listed ranges are all dedup reads).
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
                ..clone_ctx(&h.ctx)
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
                ..clone_ctx(&h.ctx)
            }),
            ..h
        }
    }

    fn clone_ctx(ctx: &ShardContext) -> ShardContext {
        ShardContext {
            kinesis: ctx.kinesis.clone(),
            store: ctx.store.clone(),
            output: ctx.output.clone(),
            limits: ctx.limits,
            budget: ctx.budget.clone(),
            metrics: ctx.metrics.clone(),
            initial_timestamp: ctx.initial_timestamp,
            idle_time_between_reads: ctx.idle_time_between_reads,
            max_records_per_read: ctx.max_records_per_read,
            failover_time: ctx.failover_time,
            events: ctx.events.clone(),
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
                ..clone_ctx(&h.ctx)
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
                ..clone_ctx(&h.ctx)
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
                ..clone_ctx(&h.ctx)
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
                ..clone_ctx(&h.ctx)
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
                ..clone_ctx(&h.ctx)
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
    async fn an_object_with_other_records_is_never_overwritten() {
        let h = harness(1_000);
        for i in 1..=3 {
            h.shard.push(&seq(i), PAST + 1_000 * i as i64, b"c");
        }
        let key = key_for(1, 3, PAST);
        let other = crate::output::compression::Compression::Zstd(3)
            .compress(b"{\"sequenceNumber\":\"1\",\"data\":\"\"}\n")
            .unwrap();
        // Written after dedup's listing, so the writer meets it as a 412.
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
}

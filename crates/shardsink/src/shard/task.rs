//! [`ShardTask`]: reads one leased shard and writes its records to S3.
//!
//! Per record, in sequence order:
//! 1. While the pending batch from the lease row is being rebuilt
//!    ([`Replay`]), the record goes into it until the batch's last record;
//!    then that batch is written under its recorded key (C6).
//! 2. While the resume skip is on, a record already in S3 is skipped; the batch being
//!    built ends before it (batches are contiguous runs of records).
//! 3. A record of another arrival minute or hour (the time bucket) ends the
//!    batch being built.
//! 4. The record is appended; a batch past a buffering limit is written.
//!
//! Batches are written one at a time, in order (C4): the task awaits each
//! write — record pending, PUT, checkpoint — before reading on.
//!
//! # Layout
//! - this file: the task and the steps above;
//! - `reading`: the read loop — memory for each response, GetRecords, the
//!   pause or the backoff before the next call;
//! - `replaying`: rebuilding a batch exactly — the pending batch from the
//!   lease row, or an uncommitted batch whose error object is in S3;
//! - `retention`: reporting records that expired unread before anything is
//!   written past them.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use shard_lease::{Checkpoint, HeldLease};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};

use crate::aws::retry::{Retry, Stopped};
use crate::aws::{S3Error, ShardInfo};
use crate::commit::error::CommitError;
use crate::commit::writer::BatchWriter;
use crate::events::decider::{EventError, RebuildSource, ShardEvents};
use crate::events::store::Lineage;
use crate::output::batch::{Batch, FlushReason};
use crate::output::decisions::UserDecision;
use crate::read::record::ShardRecord;
use crate::shard::context::{ShardContext, ShardExit, last_staged};
use crate::shard::error::ShardError;
use crate::shard::frontier::Frontier;
use crate::shard::progress::Progress;
use crate::shard::replay::{Holding, Replay};
use crate::shard::resume::ResumeSkip;
use crate::table::CatalogError;

mod reading;
mod replaying;
mod retention;

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
    resume: ResumeSkip,
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
    /// A task for the shard `lease` holds; the resume skip starts on (the lease was just
    /// taken).
    pub fn new(ctx: Arc<ShardContext>, lease: Arc<HeldLease>) -> Self {
        let mut writer = BatchWriter::new(
            ctx.store.clone(),
            ctx.output.clone(),
            lease.clone(),
            ctx.metrics.clone(),
            ctx.failover_time,
        );
        if let Some(table) = &ctx.table {
            writer = writer.with_table(table.clone());
        }
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
                    table: ctx.table.is_some(),
                },
            )
        });
        let mut resume = ResumeSkip::new(
            ctx.store.clone(),
            ctx.output.layout.clone(),
            lease.shard_id(),
            ctx.metrics.clone(),
        );
        if ctx.table.is_some() {
            // Records committed to the table are behind the start
            // (`adopt_committed_end`); the prefix holds no main objects.
            resume = resume.without_main_objects();
        }
        if ctx.output.format.can_reject() {
            resume = resume.with_error_layout(ctx.output.error_layout.clone());
        }
        if ctx.events.is_some() {
            resume = resume.with_decisions_layout(ctx.output.decisions_layout.clone());
        }
        Self {
            shard_id: lease.shard_id().to_owned(),
            ctx,
            lease,
            writer,
            resume,
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
        let lease = match self.adopt_committed_end(&shutdown).await? {
            Some(true) => self.lease.snapshot().await,
            Some(false) => lease,
            None => return Ok(ShardExit::Shutdown),
        };
        self.frontier = Frontier::new(lease.checkpoint.clone());
        if let Some(last) = last_staged(&lease) {
            self.frontier.staged_through(last);
        }
        let start = self.ctx.start_position(&lease);
        info!(checkpoint = %lease.checkpoint, start = ?start, pending_batch = ?lease.pending_batch.as_ref().map(|p| &p.key), "shard started");
        let lost = self.lease.lost().clone();
        if let Some(pending) = lease.pending_batch {
            self.frontier.replaying_from(&pending.first);
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
        self.read_loop(start, shutdown).await
    }

    fn lease_lost(&self) -> ShardError {
        ShardError::lease_lost(&self.shard_id)
    }

    /// With a table: moves the checkpoint to the shard's committed end as
    /// the table records it, when the lease row is behind it (its staged
    /// batches or its whole row lost with the lease table), so that reading
    /// goes on after the table's records. The table is read until it
    /// answers. `Some(changed)`, or `None` on shutdown.
    async fn adopt_committed_end(
        &mut self,
        shutdown: &CancellationToken,
    ) -> Result<Option<bool>, ShardError> {
        let Some(table) = self.ctx.table.clone() else {
            return Ok(Some(false));
        };
        let lost = self.lease.lost().clone();
        let shard_id = self.shard_id.clone();
        let retry = Retry::new("load the table's commit state")
            .metrics(&self.ctx.metrics)
            .until(&lost);
        let read = retry.run(|| async {
            table
                .committed_end(&shard_id)
                .await
                .map_err(CatalogError::running)
        });
        let end = tokio::select! {
            biased;
            () = shutdown.cancelled() => return Ok(None),
            end = read => end,
        };
        let end = match end {
            Ok(end) => end,
            Err(_) => return Err(self.lease_lost()),
        };
        let Some(end) = end else {
            return Ok(Some(false));
        };
        let changed = self.writer.move_to_committed(&end).await?;
        if changed {
            info!(committed_end = %end, "the table holds the shard's records up to its committed end; reading on from there");
        }
        Ok(Some(changed))
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
        if self
            .resume
            .uncommitted_at(&record.sequence_number)
            .is_some()
        {
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
        recorded: &[crate::output::decisions::RecordedDecision],
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

    /// Whether the resume skip finds the record in S3.
    async fn is_written(&mut self, record: &ShardRecord) -> Result<bool, ShardError> {
        self.resume
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
            self.resume.on_batch_written();
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

    /// Checkpoints past records the resume skip found in S3 when nothing is buffered and
    /// no write has checkpointed them for a while (or at shutdown).
    async fn checkpoint_if_idle(&mut self, force: bool) -> Result<(), ShardError> {
        if self.ctx.table.is_some() {
            // The checkpoint follows the table's commits.
            self.writer.apply_committed().await?;
            return Ok(());
        }
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
    /// every record handled: with a table, no batch staged and not yet
    /// committed.
    async fn is_fully_checkpointed(&self) -> bool {
        if self.batch.is_some() || self.replay.is_some() {
            return false;
        }
        match self.ctx.table {
            Some(_) => self.lease.snapshot().await.staged_batches.is_empty(),
            None => self.frontier.is_current(),
        }
    }

    async fn finish_shard_end(
        mut self,
        children: Vec<ShardInfo>,
        shutdown: &CancellationToken,
    ) -> Result<ShardExit, ShardError> {
        if let Some(replay) = self.replay.take() {
            if replay.batch().is_some() {
                // As for `Step::Broken`: consumed records must not be dropped.
                return Err(ShardError::internal(
                    &self.shard_id,
                    "the shard ended before the pending batch's last record",
                ));
            }
            warn!(key = %replay.pending().key, "shard ended before the pending batch's first record; its records left the stream, the resume skip covers it");
        }
        if let Some(batch) = self.batch.take() {
            self.write(batch, FlushReason::ShardEnd).await?;
        }
        if !self.await_committed(shutdown).await? {
            info!(
                "shutdown before the shard's last batches were committed to the table; the next owner checkpoints SHARD_END"
            );
            return Ok(ShardExit::Shutdown);
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

    /// With a table: waits until every batch staged in the lease row is
    /// committed (and the checkpoint moved past it), so that `SHARD_END`
    /// follows the shard's last record into the table. `false` on shutdown.
    async fn await_committed(&mut self, shutdown: &CancellationToken) -> Result<bool, ShardError> {
        let Some(table) = self.ctx.table.clone() else {
            return Ok(true);
        };
        let mut published = table.subscribe();
        loop {
            published.borrow_and_update();
            self.writer.apply_committed().await?;
            if self.lease.snapshot().await.staged_batches.is_empty() {
                return Ok(true);
            }
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return Ok(false),
                () = self.lease.lost().cancelled() => return Err(self.lease_lost()),
                changed = published.changed() => {
                    if changed.is_err() {
                        return Ok(false);
                    }
                }
            }
        }
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
            .log(force, self.resume.is_enabled(), self.frontier.checkpoint());
    }
}

/// A failed event decision as the shard task's error: a rebuild stopped by
/// the lease's loss is the lease's loss.
fn events_failed(shard_id: &str, source: EventError) -> ShardError {
    match source {
        EventError::Rebuild(stopped) => ShardError::from_s3_stop(shard_id, stopped),
        EventError::DynamoDb(Stopped::Cancelled) => ShardError::lease_lost(shard_id),
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
mod tests;

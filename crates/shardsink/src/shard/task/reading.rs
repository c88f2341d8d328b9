//! The shard task's read loop: room in the memory budget for each read (a
//! GetRecords response or a SubscribeToShardEvent), the read, its records
//! handed to the steps of [`ShardTask`], and the pause before the next —
//! the read interval, the idle time of a caught-up polled shard, none for a
//! subscription, or the backoff of a failed read ([`RetryStep`], as every
//! AWS call's).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::ShardTask;
use crate::aws::retry::{Log, Retry};
use crate::aws::{KinesisError, StartingPosition};
use crate::events::decider::ShardEvents;
use crate::memory::Reservation;
use crate::ops::metrics::RetryCause;
use crate::output::batch::FlushReason;
use crate::read::batch::ReadBatch;
use crate::read::mode::ReadMode;
use crate::read::mode::{Reader, ReaderOptions};
use crate::shard::context::ShardExit;
use crate::shard::error::ShardError;

impl ShardTask {
    /// Reads the shard from `start` until `SHARD_END`, lease loss or
    /// `shutdown`, handling each response's records in order.
    ///
    /// A failed read is retried forever: nothing a shard's read returns is
    /// final, so the task keeps trying — slowly and loudly for what an
    /// operator must fix — until the failure is fixed or the lease is lost.
    /// A shard missing from the stream ends as gone once ListShards agrees.
    ///
    /// # Errors
    /// [`ShardError`] from handling the records.
    pub(super) async fn read_loop(
        mut self,
        start: StartingPosition,
        shutdown: CancellationToken,
    ) -> Result<ShardExit, ShardError> {
        let lost = self.lease.lost().clone();
        let ctx = Arc::clone(&self.ctx);
        let options = ReaderOptions {
            source: &ctx.read_source,
            kinesis: ctx.kinesis.clone(),
            limit: ctx.max_records_per_read,
            stream_retention: ctx.metrics.stream_retention(),
            metrics: ctx.metrics.clone(),
        };
        let mut reader = Reader::new(options, &self.shard_id, start);
        let what = match ctx.read_source.mode() {
            ReadMode::Polling => "GetRecords",
            ReadMode::FanOut => "SubscribeToShard",
        };
        let mut retry = Retry::new(what)
            .metrics(&ctx.metrics)
            .retry_final()
            .log(Log::Read)
            .step();
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
            // The lease is the fence: records read after it was lost never
            // reach a batch.
            if lost.is_cancelled() {
                return Ok(ShardExit::LeaseLost);
            }
            response.resize(read.as_ref().map_or(0, |read| self.held_for(read)));
            let delay = match read {
                Ok(mut read) => {
                    retry.succeeded();
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
                        return self.finish_shard_end(read.child_shards, &shutdown).await;
                    }
                    self.flush_if_due(caught_up).await?;
                    self.checkpoint_if_idle(false).await?;
                    if caught_up && self.is_fully_checkpointed().await {
                        self.ctx.metrics.checkpoint_current(&self.shard_id);
                    }
                    reader.pause(caught_up, self.ctx.idle_time_between_reads, started)
                }
                // Not a failure to back off from: a new iterator at once.
                Err(KinesisError::ExpiredIterator) => {
                    self.ctx.metrics.retry(RetryCause::kinesis_expired_iterator);
                    info!("shard iterator expired; getting a new one");
                    reader.reset_iterator();
                    Duration::ZERO
                }
                Err(err) => {
                    if matches!(err, KinesisError::NotFound(_)) && self.has_left_the_stream().await
                    {
                        return self.finish_shard_gone(reader.position(), &shutdown).await;
                    }
                    self.progress.read_failed();
                    // No limit, no token, final errors retried: never stops.
                    let delay = retry.failed(err);
                    debug_assert!(delay.is_ok(), "a shard's read is retried forever");
                    let delay = delay.unwrap_or(Duration::ZERO);
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
}

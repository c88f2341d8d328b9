//! Rebuilding a batch exactly: the pending batch recorded in the lease row
//! (C6), or an uncommitted batch found in S3 — an error or decisions object
//! whose main object was never written, and whose lease row is gone.

use tracing::{error, info, warn};

use super::ShardTask;
use crate::aws::PutOutcome;
use crate::output::batch::FlushReason;
use crate::read::record::ShardRecord;
use crate::shard::error::ShardError;
use crate::shard::replay::{Holding, Replay, Step};

impl ShardTask {
    /// Feeds `record` to the replay in progress. Returns whether the record
    /// was consumed; `false` when the replay was abandoned before it (the
    /// record is then handled like any other).
    ///
    /// # Errors
    /// [`ShardError`] from the write, or an internal [`ShardError`] when the
    /// batch's last record is missing from the shard.
    pub(super) async fn feed_replay(&mut self, record: &ShardRecord) -> Result<bool, ShardError> {
        let Some(replay) = self.replay.take() else {
            return Ok(false);
        };
        match replay.feed(&self.shard_id, record, &self.ctx.output, &self.ctx.budget) {
            Step::Continue(replay) => {
                self.replay = Some(replay);
                Ok(true)
            }
            Step::Complete(done) => {
                let records = done.batch.user_records() as u64;
                let first_arrival = done.batch.first_arrival_millis();
                self.note_unarchived(Some(first_arrival));
                let written = if done.recorded {
                    self.writer
                        .replay(done.pending, done.batch, &done.format)
                        .await?
                } else {
                    self.writer
                        .write_uncommitted(done.pending, done.batch, &done.format)
                        .await?
                };
                drop(done.holding);
                info!(
                    key = %written.pending.key,
                    records,
                    already_present = written.outcome == PutOutcome::AlreadyExists,
                    recorded = done.recorded,
                    "pending batch replayed"
                );
                self.frontier.written(written.pending.last);
                self.events_written(first_arrival).await?;
                Ok(true)
            }
            Step::Abandoned(pending) => {
                warn!(
                    key = %pending.key,
                    first = %pending.first,
                    last = %pending.last,
                    found = %record.sequence_number,
                    "pending batch can no longer be replayed exactly (its records left the stream); the resume skip takes over"
                );
                // Clear the pending batch so the next one can be recorded.
                self.writer.checkpoint(self.frontier.checkpoint()).await?;
                Ok(false)
            }
            Step::Broken(pending) => {
                error!(key = %pending.key, found = %record.sequence_number, "the pending batch's last record is missing from the shard");
                Err(ShardError::internal(
                    &self.shard_id,
                    "the pending batch's last record is missing from the shard",
                ))
            }
        }
    }

    /// When `record` (not in S3) is the first of an uncommitted batch the resume skip
    /// found, writes the batch being built, waits for a turn to replay, and
    /// starts rebuilding that batch with `record`. Returns whether it did.
    ///
    /// # Errors
    /// [`ShardError`] from writing the batch being built or reading the error
    /// object's metadata.
    pub(super) async fn start_uncommitted(
        &mut self,
        record: &ShardRecord,
    ) -> Result<bool, ShardError> {
        let Some(uncommitted) = self.resume.uncommitted_at(&record.sequence_number) else {
            return Ok(false);
        };
        if let Some(batch) = self.batch.take() {
            self.write(batch, FlushReason::Gap).await?;
        }
        // Its reads go past the memory limit, as a pending batch's do: it
        // waits for its turn first (see `MemoryBudget`), holding no batch.
        let turn = tokio::select! {
            biased;
            () = self.lease.lost().cancelled() => return Err(self.lease_lost()),
            turn = self.ctx.budget.replay_permit() => turn,
        };
        let (pending, plan) = self
            .writer
            .uncommitted_batch(&uncommitted, &self.ctx.budget)
            .await?;
        warn!(
            key = %pending.key,
            found = uncommitted.key,
            "rebuilding an uncommitted batch: an object written before its main object is in S3, its main object is not"
        );
        self.adopt(&plan.recorded).await?;
        let holding = Holding::new(turn, plan.held);
        self.replay = Some(Replay::uncommitted(
            pending,
            plan.format,
            plan.decisions,
            holding,
        ));
        self.feed_replay(record).await
    }
}

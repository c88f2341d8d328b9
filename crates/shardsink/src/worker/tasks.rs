//! Shard tasks: one started per lease taken, and what follows when it ends
//! — the lease released, children added after `SHARD_END`, a failed shard
//! backed off — and the shutdown that waits for them all.

use std::sync::Arc;
use std::time::Duration;

use shard_lease::{HeldLease, Lease, LeaseError};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::main_loop::{HeldShard, TaskOutput, Worker};
use super::worker_summary;
use crate::aws::ShardInfo;
use crate::aws::backoff::Backoff;
use crate::aws::retry::{Retry, Stopped};
use crate::events::store::ancestors;
use crate::ops::log::error_chain;
use crate::shard::context::ShardExit;
use crate::shard::task::ShardTask;

impl Worker {
    pub(super) fn start_shard(
        &mut self,
        lease: Lease,
        taken_at: Instant,
        token: &CancellationToken,
    ) {
        let shard_id = lease.lease_key.clone();
        info!(shard_id = %shard_id, lease_counter = lease.lease_counter, "lease taken");
        let ancestors = ancestors(&lease.parent_shard_ids, &self.shards);
        let held = Arc::new(HeldLease::new(self.table.clone(), lease, taken_at));
        self.renewer.add(held.clone());
        let task = ShardTask::new(self.ctx.clone(), held.clone()).with_ancestors(ancestors);
        let child = token.child_token();
        let id_for_task = shard_id.clone();
        let handle = self
            .tasks
            .spawn(async move { (id_for_task, task.run(child).await) });
        self.task_shards.insert(handle.id(), shard_id.clone());
        self.metrics.shard_started(&shard_id);
        self.held.insert(
            shard_id,
            HeldShard {
                lease: held,
                task: handle.id(),
            },
        );
        self.metrics.leases_held.set(self.held.len() as i64);
    }

    /// Handles a finished shard task; returns whether the shard ended.
    pub(super) async fn on_task_end(
        &mut self,
        joined: Result<(tokio::task::Id, TaskOutput), tokio::task::JoinError>,
    ) -> Option<Vec<ShardInfo>> {
        let (shard_id, outcome) = match joined {
            Ok((id, (shard_id, outcome))) => {
                self.task_shards.remove(&id);
                (shard_id, Some(outcome))
            }
            Err(join_error) => {
                let shard_id = self
                    .task_shards
                    .remove(&join_error.id())
                    .unwrap_or_default();
                error!(shard_id = %shard_id, error = %join_error, "shard task panicked");
                (shard_id, None)
            }
        };
        let held = self.held.remove(&shard_id)?;
        self.renewer.remove(&shard_id);
        self.metrics.leases_held.set(self.held.len() as i64);
        self.metrics.shard_stopped(&shard_id);
        debug_assert!(!self.task_shards.contains_key(&held.task));
        let mut ended = None;
        match outcome {
            Some(Ok(ShardExit::ShardEnd(children))) => {
                ended = Some(children);
                self.failed.remove(&shard_id);
            }
            Some(Ok(ShardExit::LeaseLost)) => {
                info!(shard_id = %shard_id, "lease lost; stopped the shard");
                return None;
            }
            Some(Ok(ShardExit::Shutdown)) => {}
            Some(Err(err)) if err.is_table_missing() => {
                warn!(shard_id = %shard_id, "lease table missing; the shard restarts after it is recreated");
                return None;
            }
            Some(Err(err)) => {
                let (backoff, retry_at) =
                    self.failed.entry(shard_id.clone()).or_insert_with(|| {
                        (
                            Backoff::new(Duration::from_secs(30), Duration::from_secs(600)),
                            Instant::now(),
                        )
                    });
                let delay = backoff.next_delay();
                *retry_at = Instant::now() + delay;
                error!(shard_id = %shard_id, error = %error_chain(&err), retry_in = ?delay, "shard failed; releasing its lease");
            }
            None => {}
        }
        release(&held.lease).await;
        ended
    }

    pub(super) async fn shut_down(&mut self) {
        while let Some(joined) = self.tasks.join_next_with_id().await {
            self.on_task_end(joined).await;
        }
        // Leaving: other workers stop counting this one at once.
        if let Err(err) = self.table.remove_heartbeat(&self.settings.worker_id).await {
            debug!(error = %error_chain(&err), "removing the heartbeat failed; it goes stale instead");
        }
        let summary = worker_summary(&self.metrics);
        info!(
            records_read = summary.records_read,
            batches_written = summary.batches_written,
            batches_already_present = summary.batches_already_present,
            records_written = summary.records_written,
            duplicates_excluded = summary.duplicates_excluded,
            "shutdown complete"
        );
    }
}

/// Gives a lease up so another worker (or the next start) takes it at once
/// instead of waiting for it to expire. Throttling is retried a few times;
/// if the release still fails, the lease simply expires.
async fn release(lease: &HeldLease) {
    const ATTEMPTS: u32 = 5;
    let released = Retry::new("release lease")
        .until(lease.lost())
        .give_up_after(ATTEMPTS)
        .final_when(|err: &LeaseError| !err.is_retriable())
        .run(|| lease.release())
        .await;
    match released {
        Ok(()) => info!(shard_id = %lease.shard_id(), "lease released"),
        // Lost already: nothing to release.
        Err(Stopped::Cancelled) => {}
        Err(Stopped::Final(err) | Stopped::GaveUp(err)) => {
            warn!(shard_id = %lease.shard_id(), error = %error_chain(&err), "lease release failed; it expires instead");
        }
    }
}

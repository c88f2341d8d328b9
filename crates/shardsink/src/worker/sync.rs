//! One round of lease work, in three steps: observe (list shards, scan the
//! table, create leases for new shards and delete ended ones, note which
//! leases and workers stood still), plan (which leases to take and which to
//! steal), take.

use std::collections::BTreeSet;
use std::time::SystemTime;

use anyhow::Context as _;
use chrono::Utc;
use shard_lease::{
    Checkpoint, CreateOutcome, Lease, LeaseError, TABLE_ACTIVE_TIMEOUT, TableScan, TakePlan,
    plan_takes,
};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::main_loop::Worker;
use super::startup::START_UP_CALL_BOUND;
use crate::aws::ShardInfo;
use crate::config::InitialPosition;
use crate::memory::READ_RESERVATION;
use crate::ops::log::error_chain;
use crate::output::gap_marker;
use crate::read::mode::ReadMode;
use crate::read::retention::RetentionGap;
use crate::read::shard_graph::{NewLease, ShardGraph};

/// What one round saw of the table and the workers, observed after the
/// scan and this round's creations and deletions.
struct Observation {
    /// Every lease row, with this round's creations and without the leases
    /// of ended shards it deleted.
    leases: Vec<Lease>,
    /// The workers counted in the balance: this worker, and every other
    /// whose heartbeat counter moved within the failover time.
    live_workers: BTreeSet<String>,
    /// When the rows were observed: never earlier than they were read, so
    /// an expiry measured from here is never shorter than the failover time.
    at: Instant,
}

impl Worker {
    /// One round of lease work: [`observe`](Self::observe) the shards, the
    /// table and the workers, [`plan`](Self::plan) the takes and steal per
    /// [`plan_takes`], then [`take`](Self::take) them.
    pub(super) async fn sync(&mut self, token: &CancellationToken) -> Result<(), anyhow::Error> {
        let observation = self.observe().await?;
        let plan = self.plan(&observation);
        self.take(plan, token).await;
        Ok(())
    }

    /// Observes: refreshes the shard list when due, scans the table
    /// (creating it again when it is missing), creates missing leases,
    /// deletes ended ones past retention (only with a list read this
    /// round), and records which leases and workers stood still.
    ///
    /// # Errors
    /// The scan, the table's re-creation or a lease creation found the table
    /// missing or failed; the first shard list could not be read.
    async fn observe(&mut self) -> Result<Observation, anyhow::Error> {
        let list_due = self
            .shards_listed_at
            .is_none_or(|at| at.elapsed() >= self.settings.config.shard_sync_interval);
        let listed = list_due && self.list_shards().await?;
        let scan = self.scan_table().await?;
        let mut leases = scan.leases;
        self.create_missing_leases(&mut leases).await?;
        // Observed now, after the scan and the creations: never earlier than
        // the rows were read, so an expiry measured from here is never
        // shorter than the failover time.
        let now = Instant::now();
        self.expiry.observe(&leases, now);
        if listed {
            self.remove_ended_leases(&mut leases, now).await;
        }
        self.worker_expiry.observe_counters(
            scan.workers
                .iter()
                .map(|w| (w.worker_id.as_str(), w.heartbeat_counter)),
            now,
        );
        let failover = self.settings.config.failover_time;
        let me = &self.settings.worker_id;
        let live_workers = scan
            .workers
            .iter()
            .filter(|w| {
                w.worker_id == *me
                    || !self.worker_expiry.is_stale(
                        &w.worker_id,
                        w.heartbeat_counter,
                        now,
                        failover,
                    )
            })
            .map(|w| w.worker_id.clone())
            .collect();
        Ok(Observation {
            leases,
            live_workers,
            at: now,
        })
    }

    /// Scans the lease table; a missing table is created again (shards then
    /// restart from their initial position, and the resume skip keeps S3 exact) and
    /// reads as empty.
    ///
    /// # Errors
    /// The scan failed otherwise, or the table could not be created again.
    async fn scan_table(&mut self) -> Result<TableScan, anyhow::Error> {
        match self.table.scan().await {
            Ok(scan) => Ok(scan),
            Err(LeaseError::TableMissing { table }) => {
                warn!(lease_table = %table, "lease table missing; creating it again (shards restart from their initial position, the resume skip keeps S3 exact)");
                // Waiting for an old table to be deleted and the new one to
                // become ACTIVE can take minutes: alive, not ready.
                self.health.waiting(
                    format!("the lease table {table} is missing; creating it again"),
                    Instant::now() + TABLE_ACTIVE_TIMEOUT + START_UP_CALL_BOUND,
                );
                self.table.create_table_if_missing().await?;
                Ok(TableScan::default())
            }
            Err(err) => Err(err.into()),
        }
    }

    /// Plans the round from `observation`: among the leases whose shard may
    /// be worked on (parents done), those available to this worker are the
    /// ones it does not hold, is not backing off from after a failed task,
    /// and that expired — or, in the first round after start-up, that it
    /// owned already. Reports the round to the health state and logs the
    /// balance when it changed.
    fn plan(&mut self, observation: &Observation) -> TakePlan {
        let now = observation.at;
        let failover = self.settings.config.failover_time;
        let me = self.settings.worker_id.as_str();
        let graph = ShardGraph::new(&self.shards, &observation.leases);
        let workable: Vec<Lease> = observation
            .leases
            .iter()
            .filter(|l| graph.is_workable(l))
            .cloned()
            .collect();
        let own_at_start = !self.first_sync_done;
        let plan = plan_takes(me, &workable, &observation.live_workers, |lease| {
            let key = lease.lease_key.as_str();
            let backing_off = self
                .failed
                .get(key)
                .is_some_and(|(_, retry_at)| now < *retry_at);
            !self.held.contains_key(key)
                && !backing_off
                && ((own_at_start && lease.is_owned_by(me))
                    || self.expiry.is_expired(lease, now, failover))
        });
        self.first_sync_done = true;
        let settled = plan.take.is_empty() && plan.steal.is_none();
        self.health
            .scan_succeeded(self.held.len() + plan.take.len(), settled);
        if plan.take.len() + usize::from(plan.steal.is_some()) > 0
            || self.last_plan != (plan.target, plan.workers)
        {
            info!(
                held = self.held.len(),
                target = plan.target,
                workers = plan.workers,
                leases = workable.len(),
                taking = plan.take.len(),
                stealing = plan.steal.as_ref().map(|l| l.lease_key.as_str()),
                "lease balance"
            );
            self.last_plan = (plan.target, plan.workers);
            self.warn_if_budget_is_short_for_fan_out(plan.target);
        }
        plan
    }

    /// Takes the planned leases, then the one to steal, starting a shard
    /// task for each lease taken; stops early when `token` is cancelled. A
    /// lease that changed before it could be taken, or whose take failed,
    /// is left for a later round.
    async fn take(&mut self, plan: TakePlan, token: &CancellationToken) {
        let me = self.settings.worker_id.clone();
        let steal = plan.steal.into_iter().map(|lease| (lease, true));
        for (lease, stolen) in plan
            .take
            .into_iter()
            .map(|lease| (lease, false))
            .chain(steal)
        {
            if token.is_cancelled() {
                break;
            }
            // A lease lost while this process was frozen (SIGSTOP, a long
            // pause) can be planned as a steal before its old task has
            // noticed the loss and stopped: one task per shard, so it is
            // taken again only after that task ended.
            if self.held.contains_key(&lease.lease_key) {
                debug!(shard_id = %lease.lease_key, "the shard's previous task is still stopping; not taking it this round");
                continue;
            }
            let taken_at = Instant::now();
            match self.table.take_lease(&lease, &me).await {
                Ok(taken) => {
                    if stolen {
                        info!(shard_id = %lease.lease_key, from = ?lease.lease_owner, "lease stolen to balance");
                    }
                    self.start_shard(taken, taken_at, token);
                }
                Err(err) if err.is_lease_lost() => {
                    debug!(shard_id = %lease.lease_key, "the lease changed before it could be taken");
                }
                Err(err) => {
                    warn!(shard_id = %lease.lease_key, error = %error_chain(&err), "taking lease failed")
                }
            }
        }
    }

    /// Reads the shard list (ListShards). Returns whether it was read: on
    /// failure the last list is kept (and the next try waits a shard sync
    /// interval), but nothing may be concluded from a shard missing from it.
    ///
    /// # Errors
    /// A failure before any list was read.
    async fn list_shards(&mut self) -> anyhow::Result<bool> {
        // The retention period can change (raised during an outage, say):
        // read it again with the shard list for the retention gauge.
        match self.kinesis.describe_stream_summary().await {
            Ok(summary) => self.metrics.set_stream_retention(summary.retention),
            Err(err) => debug!(error = %error_chain(&err), "describing the stream failed"),
        }
        match self.kinesis.list_shards().await {
            Ok(shards) => {
                if shards != self.shards {
                    info!(shards = shards.len(), "shard list read");
                }
                self.shards = shards;
                self.shards_listed_at = Some(Instant::now());
                Ok(true)
            }
            Err(err) if self.shards.is_empty() => Err(err).context("failed to list shards"),
            Err(err) => {
                warn!(error = %error_chain(&err), "listing shards failed; using the last list");
                self.shards_listed_at = Some(Instant::now());
                Ok(false)
            }
        }
    }

    /// Adds shards a closed shard's GetRecords named as `ChildShards`, so
    /// children get leases even before the next ListShards shows them.
    pub(super) fn add_children(&mut self, children: Vec<ShardInfo>) {
        for child in children {
            if !self.shards.iter().any(|s| s.shard_id == child.shard_id) {
                info!(shard_id = %child.shard_id, parents = ?child.parent_shard_ids, "child shard discovered");
                self.shards.push(child);
            }
        }
        self.shards.sort_by(|a, b| a.shard_id.cmp(&b.shard_id));
    }

    /// Creates a lease for every listed shard that needs one (see
    /// [`ShardGraph::new_lease`]): children at `TRIM_HORIZON`, the others at
    /// the initial position. Conditional on absence, so workers racing to
    /// create the same lease both succeed.
    async fn create_missing_leases(&mut self, leases: &mut Vec<Lease>) -> Result<(), LeaseError> {
        let missing: Vec<(ShardInfo, NewLease)> = {
            let graph = ShardGraph::new(&self.shards, leases);
            self.shards
                .iter()
                .filter_map(|shard| graph.new_lease(shard).map(|kind| (shard.clone(), kind)))
                .collect()
        };
        for (shard, kind) in missing {
            // LATEST becomes AT_TIMESTAMP(now), stored in the row: a lease
            // that moves before its first checkpoint then resumes where its
            // first owner started, not at a later LATEST.
            let (checkpoint, initial_timestamp) =
                match (kind, self.settings.config.initial_position) {
                    (NewLease::Child, _)
                    | (NewLease::InitialPosition, InitialPosition::TrimHorizon) => {
                        (Checkpoint::TrimHorizon, None)
                    }
                    (NewLease::InitialPosition, InitialPosition::Latest) => {
                        (Checkpoint::AtTimestamp, Some(Utc::now()))
                    }
                    (NewLease::InitialPosition, InitialPosition::AtTimestamp) => (
                        Checkpoint::AtTimestamp,
                        self.settings.config.initial_timestamp,
                    ),
                };
            let mut lease = Lease::new(
                shard.shard_id.clone(),
                checkpoint,
                shard.parent_shard_ids.clone(),
            );
            lease.initial_timestamp = initial_timestamp
                .map(|time| time.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
            match self.table.create_lease(&lease).await {
                Ok(CreateOutcome::Created(created)) => {
                    info!(shard_id = %created.lease_key, checkpoint = %created.checkpoint, parents = ?created.parent_shard_ids, "lease created");
                    leases.push(*created);
                }
                Ok(CreateOutcome::AlreadyExists) => {
                    match self.table.get_lease(&shard.shard_id).await {
                        Ok(Some(current)) => leases.push(current),
                        Ok(None) => {}
                        Err(err @ LeaseError::TableMissing { .. }) => return Err(err),
                        // A row that does not decode: skip this shard, not the round.
                        Err(err) => {
                            warn!(shard_id = %shard.shard_id, error = %error_chain(&err), "cannot read the lease row; skipping the shard");
                        }
                    }
                }
                Err(err @ LeaseError::TableMissing { .. }) => return Err(err),
                Err(err) => {
                    warn!(shard_id = %shard.shard_id, error = %error_chain(&err), "creating the lease failed; retrying next round");
                }
            }
        }
        Ok(())
    }

    /// Deletes leases of ended shards past their retention (see
    /// [`ShardGraph::is_removable`]), given a shard list read this round;
    /// failures are logged and retried at the next shard sync. A lease not
    /// at `SHARD_END` goes only once its counter stood still for the
    /// failover time (observed at `now`): a lease some worker still renews
    /// is never deleted from under it.
    async fn remove_ended_leases(&mut self, leases: &mut Vec<Lease>, now: Instant) {
        let removable: Vec<Lease> = {
            let graph = ShardGraph::new(&self.shards, leases);
            let retention = self.settings.config.ended_lease_retention;
            let failover = self.settings.config.failover_time;
            leases
                .iter()
                .filter(|lease| {
                    graph.is_removable(lease, SystemTime::now(), retention)
                        // Batches staged for a table and not yet committed
                        // live only in the row.
                        && lease.staged_batches.is_empty()
                        && (lease.checkpoint.is_shard_end()
                            || self.expiry.is_lease_stale(lease, now, failover))
                })
                .cloned()
                .collect()
        };
        for lease in removable {
            if !lease.checkpoint.is_shard_end() {
                // Records past the checkpoint expired unread: said (marker,
                // error, counter) before the lease, the last trace of them,
                // is deleted; if the marker cannot be written, next time.
                let gap = RetentionGap::of_unread_lease(&lease);
                let reported = gap_marker::report(
                    &gap,
                    &lease.checkpoint,
                    &self.store,
                    &self.settings.prefix,
                    &self.metrics,
                )
                .await;
                if let Err(err) = reported {
                    warn!(shard_id = %lease.lease_key, error = %error_chain(&err), "writing the retention gap marker failed; the lease is kept until it is written");
                    continue;
                }
            }
            match self.table.delete_lease(&lease).await {
                Ok(()) => {
                    info!(shard_id = %lease.lease_key, "lease of ended shard deleted");
                    leases.retain(|l| l.lease_key != lease.lease_key);
                }
                Err(err) => {
                    debug!(shard_id = %lease.lease_key, error = %error_chain(&err), "deleting ended lease failed")
                }
            }
        }
    }
}

impl Worker {
    /// With fan-out, each shard waiting for its next event holds a read's
    /// room in the memory budget for about a second ([`READ_RESERVATION`]);
    /// says so when the budget cannot hold that for the `target` shards this
    /// worker is to read: they would take turns at waiting.
    fn warn_if_budget_is_short_for_fan_out(&self, target: usize) {
        let limit = self.ctx.budget.limit();
        if let Some(wanted) = fan_out_budget_shortfall(self.ctx.read_source.mode(), limit, target) {
            warn!(
                shards = target,
                buffer_memory_limit = limit,
                wanted,
                "with --read-mode fan-out each shard waiting for an event holds 24 MiB of --buffer-memory-limit; raise it to at least this many shards × 24 MiB, or quiet shards take turns at waiting"
            );
        }
    }
}

/// The budget `target` shards read by fan-out want for their waits
/// (`target` × [`READ_RESERVATION`]), when `limit` is below it; `None` when
/// polling (a call holds its room only while it runs) or when it fits.
fn fan_out_budget_shortfall(mode: ReadMode, limit: u64, target: usize) -> Option<u64> {
    let wanted = READ_RESERVATION.saturating_mul(u64::try_from(target).unwrap_or(u64::MAX));
    (mode == ReadMode::FanOut && wanted > limit).then_some(wanted)
}

#[cfg(test)]
mod fan_out_budget_tests {
    use super::*;

    #[test]
    fn fan_out_wants_a_read_s_room_per_shard() {
        let limit = 256 << 20;
        // 10 × 24 MiB fit in 256 MiB; 11 do not.
        assert_eq!(fan_out_budget_shortfall(ReadMode::FanOut, limit, 10), None);
        assert_eq!(
            fan_out_budget_shortfall(ReadMode::FanOut, limit, 11),
            Some(11 * READ_RESERVATION)
        );
        assert_eq!(
            fan_out_budget_shortfall(ReadMode::Polling, limit, 100),
            None
        );
    }
}

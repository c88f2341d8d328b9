//! [`run`]: the worker — shard discovery, leases, one task per leased shard,
//! and graceful shutdown.
//!
//! Loop, until shutdown:
//! - every `failover_time / 2`: list shards (every `shard_sync_interval`),
//!   scan the lease table, create leases for new shards, and take free,
//!   expired, or (at start) own leases whose parents are done; start a
//!   [`ShardTask`] for each;
//! - every `failover_time / 3`: renew every held lease;
//! - when a shard task ends: release its lease (after `SHARD_END`, a lost
//!   lease needs nothing), and re-list shards after a `SHARD_END` so children
//!   start promptly.
//!
//! On shutdown every task writes its buffer and checkpoints, leases are
//! released so another worker can take them at once, and a summary is logged.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use shard_lease::{
    Checkpoint, CreateOutcome, HeldLease, Lease, LeaseError, LeaseExpiry, LeaseTable,
};
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::aws::{AwsClients, Kinesis, KinesisError, ObjectStore, S3Error, ShardInfo};
use crate::backoff::Backoff;
use crate::batch::{BufferLimits, MemoryBudget};
use crate::compression::Compression;
use crate::config::{ConfigError, InitialPosition, Settings};
use crate::key::KeyLayout;
use crate::shard::{ShardContext, ShardExit, ShardTask};
use crate::stats::Stats;
use crate::writer::{ShardError, error_chain};

/// What a run did, logged at exit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// User records read from Kinesis.
    pub records_read: u64,
    /// Objects written.
    pub batches_written: u64,
    /// Objects found already written (replays).
    pub batches_already_present: u64,
    /// User records in written or already present objects.
    pub records_written: u64,
    /// User records skipped because they were already in S3.
    pub duplicates_excluded: u64,
}

/// Runs the worker until `shutdown` resolves, with clients from the standard
/// AWS configuration.
///
/// # Errors
/// A [`ConfigError`] (inside the `anyhow::Error`) when the stream or bucket
/// does not exist; other errors when start-up fails for good.
pub async fn run(
    settings: Settings,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<Summary> {
    let clients = AwsClients::from_env(settings.config.s3_force_path_style).await;
    run_with_clients(settings, clients, shutdown).await
}

/// [`run`] with given clients (tests pass mocked ones).
///
/// # Errors
/// As [`run`].
pub async fn run_with_clients(
    settings: Settings,
    clients: AwsClients,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<Summary> {
    let token = CancellationToken::new();
    let shutdown_token = token.clone();
    let shutdown_timeout = settings.config.shutdown_timeout;
    let mut worker = Worker::new(settings, clients);
    let stats = worker.stats.clone();
    let run = worker.run(token.clone());
    tokio::pin!(run);
    tokio::pin!(shutdown);
    tokio::select! {
        result = &mut run => return result,
        () = &mut shutdown => {
            info!(timeout = ?shutdown_timeout, "shutting down: writing buffered records, checkpointing, releasing leases");
            shutdown_token.cancel();
        }
    }
    // Shutdown: the worker loop notices the token, asks shard tasks to finish,
    // and releases leases; bound how long that may take.
    match tokio::time::timeout(shutdown_timeout, run).await {
        Ok(result) => result,
        Err(_) => {
            warn!(timeout = ?shutdown_timeout, "shutdown timed out; unfinished batches are replayed on the next start");
            Ok(worker_summary(&stats))
        }
    }
}

fn worker_summary(stats: &Stats) -> Summary {
    Summary {
        records_read: Stats::get(&stats.records_read),
        batches_written: Stats::get(&stats.batches_written),
        batches_already_present: Stats::get(&stats.batches_already_present),
        records_written: Stats::get(&stats.records_written),
        duplicates_excluded: Stats::get(&stats.duplicates_excluded),
    }
}

/// What a shard task returns: its shard id and how it ended.
type TaskOutput = (String, Result<ShardExit, ShardError>);

/// A shard this worker holds.
struct HeldShard {
    lease: Arc<HeldLease>,
    task: tokio::task::Id,
}

struct Worker {
    settings: Settings,
    kinesis: Kinesis,
    store: ObjectStore,
    table: LeaseTable,
    ctx: Arc<ShardContext>,
    stats: Arc<Stats>,
    shards: Vec<ShardInfo>,
    shards_listed_at: Option<Instant>,
    held: HashMap<String, HeldShard>,
    tasks: JoinSet<TaskOutput>,
    task_shards: HashMap<tokio::task::Id, String>,
    expiry: LeaseExpiry,
    /// Shards whose task failed, and when they may be taken again.
    failed: HashMap<String, (Backoff, Instant)>,
    first_sync_done: bool,
}

impl Worker {
    fn new(settings: Settings, clients: AwsClients) -> Self {
        let config = &settings.config;
        let stats = Arc::new(Stats::default());
        let kinesis = Kinesis::new(clients.kinesis, settings.stream.clone());
        let store = ObjectStore::new(clients.s3, config.bucket.clone());
        let ctx = Arc::new(ShardContext {
            kinesis: kinesis.clone(),
            store: store.clone(),
            layout: KeyLayout::new(settings.prefix.clone()),
            compression: Compression::new(config.compression, config.compression_level),
            limits: BufferLimits {
                max_bytes: config.buffer_max_bytes,
                max_records: config.buffer_max_records,
                max_age: config.buffer_max_age,
            },
            budget: MemoryBudget::new(config.buffer_memory_limit),
            stats: stats.clone(),
            initial_position: config.initial_position,
            initial_timestamp: config.initial_timestamp,
            idle_time_between_reads: config.idle_time_between_reads,
            max_records_per_read: config.max_records_per_read,
        });
        Self {
            table: LeaseTable::new(clients.dynamodb, settings.lease_table.clone()),
            settings,
            kinesis,
            store,
            ctx,
            stats,
            shards: Vec::new(),
            shards_listed_at: None,
            held: HashMap::new(),
            tasks: JoinSet::new(),
            task_shards: HashMap::new(),
            expiry: LeaseExpiry::new(),
            failed: HashMap::new(),
            first_sync_done: false,
        }
    }

    async fn run(&mut self, token: CancellationToken) -> anyhow::Result<Summary> {
        if !self.start_up(&token).await? {
            return Ok(worker_summary(&self.stats));
        }
        let failover = self.settings.config.failover_time;
        let mut sync_timer = tokio::time::interval(failover / 2);
        let mut renew_timer = tokio::time::interval(failover / 3);
        sync_timer.set_missed_tick_behavior(MissedTickBehavior::Delay);
        renew_timer.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = token.cancelled() => break,
                _ = sync_timer.tick() => {
                    if let Err(err) = self.sync(&token).await {
                        warn!(error = format!("{err:#}"), "lease sync failed; retrying next round");
                    }
                }
                _ = renew_timer.tick() => self.renew_all().await,
                Some(joined) = self.tasks.join_next_with_id() => {
                    let end_of_shard = self.on_task_end(joined).await;
                    if end_of_shard {
                        // Children may now start; look at once.
                        self.shards_listed_at = None;
                        sync_timer.reset_immediately();
                    }
                }
            }
        }
        self.shut_down().await;
        Ok(worker_summary(&self.stats))
    }

    /// Checks the stream and bucket and creates the lease table if missing.
    /// Returns `false` when shutdown came first.
    async fn start_up(&mut self, token: &CancellationToken) -> anyhow::Result<bool> {
        let stream = self.settings.stream.name().to_owned();
        let status = retry_until(
            token,
            "describe stream",
            || self.kinesis.describe_stream_summary(),
            KinesisError::is_retriable,
        )
        .await;
        match status {
            None => return Ok(false),
            Some(Err(KinesisError::NotFound(_))) => {
                return Err(ConfigError {
                    flag: "--stream".to_owned(),
                    env: "SHARDSINK_STREAM".to_owned(),
                    message: format!("stream {stream:?} does not exist"),
                }
                .into());
            }
            Some(result) => {
                let status =
                    result.with_context(|| format!("failed to describe stream {stream}"))?;
                info!(stream = %stream, status = %status, "stream found");
            }
        }
        let bucket = self.store.bucket().to_owned();
        match retry_until(
            token,
            "head bucket",
            || self.store.head_bucket(),
            S3Error::is_retriable,
        )
        .await
        {
            None => return Ok(false),
            Some(Err(S3Error::NoSuchBucket { .. })) => {
                return Err(ConfigError {
                    flag: "--bucket".to_owned(),
                    env: "SHARDSINK_BUCKET".to_owned(),
                    message: format!("bucket {bucket:?} does not exist"),
                }
                .into());
            }
            Some(result) => result.with_context(|| format!("failed to reach bucket {bucket}"))?,
        }
        let table = self.table.table_name().to_owned();
        match retry_until(
            token,
            "create lease table",
            || self.table.create_table_if_missing(),
            LeaseError::is_retriable,
        )
        .await
        {
            None => return Ok(false),
            Some(result) => {
                result.with_context(|| format!("failed to create or find lease table {table}"))?;
            }
        }
        info!(
            stream = %stream,
            bucket = %bucket,
            prefix = %self.settings.prefix,
            lease_table = %table,
            worker_id = %self.settings.worker_id,
            compression = ?self.ctx.compression,
            "shardsink started"
        );
        Ok(true)
    }

    /// One round of lease work.
    async fn sync(&mut self, token: &CancellationToken) -> Result<(), anyhow::Error> {
        let now = Instant::now();
        let list_due = self
            .shards_listed_at
            .is_none_or(|at| now.duration_since(at) >= self.settings.config.shard_sync_interval);
        if list_due {
            match self.kinesis.list_shards().await {
                Ok(shards) => {
                    if shards != self.shards {
                        info!(shards = shards.len(), "shard list read");
                    }
                    self.shards = shards;
                    self.shards_listed_at = Some(now);
                }
                Err(err) if self.shards.is_empty() => {
                    return Err(err).context("failed to list shards");
                }
                Err(err) => {
                    warn!(error = %error_chain(&err), "listing shards failed; using the last list")
                }
            }
        }
        let mut leases = match self.table.list_leases().await {
            Ok(leases) => leases,
            Err(LeaseError::TableMissing { table }) => {
                warn!(lease_table = %table, "lease table missing; creating it again (shards restart from their initial position, dedup keeps S3 exact)");
                self.table.create_table_if_missing().await?;
                Vec::new()
            }
            Err(err) => return Err(err.into()),
        };
        self.create_missing_leases(&mut leases).await?;
        self.expiry.observe(&leases, now);
        let by_key: HashMap<&str, &Lease> =
            leases.iter().map(|l| (l.lease_key.as_str(), l)).collect();
        let listed: HashSet<&str> = self.shards.iter().map(|s| s.shard_id.as_str()).collect();
        let mut to_take = Vec::new();
        for lease in &leases {
            let key = lease.lease_key.as_str();
            if self.held.contains_key(key)
                || lease.checkpoint.is_shard_end()
                || !listed.contains(key)
            {
                continue;
            }
            if self
                .failed
                .get(key)
                .is_some_and(|(_, retry_at)| now < *retry_at)
            {
                continue;
            }
            let parents_done =
                lease
                    .parent_shard_ids
                    .iter()
                    .all(|parent| match by_key.get(parent.as_str()) {
                        Some(parent_lease) => parent_lease.checkpoint.is_shard_end(),
                        // No lease and not listed: the parent left the stream's retention.
                        None => !listed.contains(parent.as_str()),
                    });
            if !parents_done {
                debug!(shard_id = key, parents = ?lease.parent_shard_ids, "waiting for parent shards to end");
                continue;
            }
            let own_at_start = !self.first_sync_done && lease.is_owned_by(&self.settings.worker_id);
            let failover = self.settings.config.failover_time;
            if own_at_start || self.expiry.is_expired(lease, now, failover) {
                to_take.push(lease.clone());
            }
        }
        self.first_sync_done = true;
        for lease in to_take {
            if token.is_cancelled() {
                break;
            }
            match self
                .table
                .take_lease(&lease, &self.settings.worker_id)
                .await
            {
                Ok(taken) => self.start_shard(taken, token),
                Err(err) if err.is_lease_lost() => {
                    debug!(shard_id = %lease.lease_key, "another worker took the lease first");
                }
                Err(err) => {
                    warn!(shard_id = %lease.lease_key, error = %error_chain(&err), "taking lease failed")
                }
            }
        }
        Ok(())
    }

    /// Creates a lease for every listed shard that has none. A child of a
    /// listed shard starts at `TRIM_HORIZON` (after its parents) whatever the
    /// initial position; the others at the initial position.
    async fn create_missing_leases(&mut self, leases: &mut Vec<Lease>) -> Result<(), LeaseError> {
        let existing: HashSet<String> = leases.iter().map(|l| l.lease_key.clone()).collect();
        let listed: HashSet<&str> = self.shards.iter().map(|s| s.shard_id.as_str()).collect();
        for shard in &self.shards {
            if existing.contains(&shard.shard_id) {
                continue;
            }
            let is_child = shard
                .parent_shard_ids
                .iter()
                .any(|p| listed.contains(p.as_str()) || existing.contains(p));
            let checkpoint = if is_child {
                Checkpoint::TrimHorizon
            } else {
                match self.settings.config.initial_position {
                    InitialPosition::TrimHorizon => Checkpoint::TrimHorizon,
                    InitialPosition::Latest => Checkpoint::Latest,
                    InitialPosition::AtTimestamp => Checkpoint::AtTimestamp,
                }
            };
            let lease = Lease::new(
                shard.shard_id.clone(),
                checkpoint,
                shard.parent_shard_ids.clone(),
            );
            match self.table.create_lease(&lease).await? {
                CreateOutcome::Created(created) => {
                    info!(shard_id = %created.lease_key, checkpoint = %created.checkpoint, "lease created");
                    leases.push(created);
                }
                CreateOutcome::AlreadyExists => {
                    if let Some(current) = self.table.get_lease(&shard.shard_id).await? {
                        leases.push(current);
                    }
                }
            }
        }
        Ok(())
    }

    fn start_shard(&mut self, lease: Lease, token: &CancellationToken) {
        let shard_id = lease.lease_key.clone();
        info!(shard_id = %shard_id, lease_counter = lease.lease_counter, "lease taken");
        let held = Arc::new(HeldLease::new(self.table.clone(), lease));
        let task = ShardTask::new(self.ctx.clone(), held.clone());
        let child = token.child_token();
        let id_for_task = shard_id.clone();
        let handle = self
            .tasks
            .spawn(async move { (id_for_task, task.run(child).await) });
        self.task_shards.insert(handle.id(), shard_id.clone());
        self.held.insert(
            shard_id,
            HeldShard {
                lease: held,
                task: handle.id(),
            },
        );
    }

    /// Handles a finished shard task; returns whether the shard ended.
    async fn on_task_end(
        &mut self,
        joined: Result<(tokio::task::Id, TaskOutput), tokio::task::JoinError>,
    ) -> bool {
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
        let Some(held) = self.held.remove(&shard_id) else {
            return false;
        };
        debug_assert!(!self.task_shards.contains_key(&held.task));
        let mut ended = false;
        match outcome {
            Some(Ok(ShardExit::ShardEnd)) => {
                ended = true;
                self.failed.remove(&shard_id);
            }
            Some(Ok(ShardExit::LeaseLost)) => {
                info!(shard_id = %shard_id, "lease lost; stopped the shard");
                return false;
            }
            Some(Ok(ShardExit::Shutdown)) => {}
            Some(Err(ShardError::TableMissing(_))) => {
                warn!(shard_id = %shard_id, "lease table missing; the shard restarts after it is recreated");
                return false;
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

    async fn renew_all(&self) {
        let renewals = self.held.values().map(|held| async move {
            if let Err(err) = held.lease.renew().await {
                if !err.is_lease_lost() {
                    warn!(shard_id = %held.lease.shard_id(), error = %error_chain(&err), "lease renewal failed");
                }
            }
        });
        futures::future::join_all(renewals).await;
    }

    async fn shut_down(&mut self) {
        while let Some(joined) = self.tasks.join_next_with_id().await {
            self.on_task_end(joined).await;
        }
        let summary = worker_summary(&self.stats);
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

/// Gives a lease up so another worker (or the next start) takes it at once.
async fn release(lease: &HeldLease) {
    if lease.is_lost() {
        return;
    }
    match lease.release().await {
        Ok(()) => debug!(shard_id = %lease.shard_id(), "lease released"),
        Err(err) => {
            debug!(shard_id = %lease.shard_id(), error = %error_chain(&err), "lease release failed; it expires instead")
        }
    }
}

/// Calls `op` until it succeeds or fails for good, backing off on retriable
/// errors; `None` when `token` is cancelled first.
async fn retry_until<T, E, F, Fut>(
    token: &CancellationToken,
    what: &str,
    op: F,
    retriable: fn(&E) -> bool,
) -> Option<Result<T, E>>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: std::error::Error + 'static,
{
    let mut backoff = Backoff::transient();
    loop {
        let result = tokio::select! {
            () = token.cancelled() => return None,
            result = op() => result,
        };
        match result {
            Err(err) if retriable(&err) => {
                let delay = backoff.next_delay();
                warn!(operation = what, error = %error_chain(&err), ?delay, "start-up call failed; retrying");
                tokio::select! {
                    () = token.cancelled() => return None,
                    () = tokio::time::sleep(delay) => {}
                }
            }
            other => return Some(other),
        }
    }
}

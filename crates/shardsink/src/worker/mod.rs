//! [`run`]: the worker — shard discovery, leases, one task per leased shard,
//! and graceful shutdown.
//!
//! Loop, until shutdown:
//! - every `--lease-taking-interval` (a fifth of the failover time): list shards (every `shard_sync_interval`),
//!   scan the lease table (leases and worker heartbeats), create leases for
//!   new shards, delete ended leases past retention, and take or steal leases
//!   per [`plan_takes`] (free, expired, or — at start — own leases whose
//!   parents are done; at most one steal a round); start a [`ShardTask`] for
//!   each;
//! - every `--lease-renewal-interval` (a third of it), on a task of its own
//!   ([`Renewer`]): renew every held lease and write this worker's heartbeat;
//! - when a shard task ends: release its lease (a lost lease needs nothing),
//!   and after `SHARD_END` add its `ChildShards` and re-list shards so
//!   children start promptly.
//!
//! On shutdown every task writes its buffer and checkpoints, leases are
//! released so another worker can take them at once, and a summary is logged.

pub(crate) mod renewer;

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use chrono::Utc;
use shard_lease::{
    Checkpoint, CreateOutcome, HeldLease, Lease, LeaseError, LeaseExpiry, LeaseTable,
    TABLE_ACTIVE_TIMEOUT, TableScan, plan_takes,
};
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::aws::backoff::Backoff;
use crate::aws::retry::{Classify, Retry, Stopped};
use crate::aws::{AwsClients, Kinesis, KinesisError, ObjectStore, S3Error, ShardInfo};
use crate::config::{ConfigError, InitialPosition, Settings};
use crate::ops::health::Health;
use crate::ops::log::error_chain;
use crate::ops::metrics::{Metrics, Outcome};
use crate::ops::{http, systemd};
use crate::output::batch::BufferLimits;
use crate::output::compression::Compression;
use crate::output::key::KeyLayout;
use crate::read::retention::RetentionGap;
use crate::read::shard_graph::{NewLease, ShardGraph};
use crate::shard::error::ShardError;
use crate::shard::memory::MemoryBudget;
use crate::shard::task::{ShardContext, ShardExit, ShardTask};
use crate::worker::renewer::Renewer;

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
    let metrics = Arc::new(Metrics::new());
    let health = Arc::new(Health::new(settings.lease_taking_interval));
    // The endpoints outlive the worker loop: health checks keep answering
    // while shard tasks finish during a shutdown.
    let endpoints_token = CancellationToken::new();
    let server = match settings.metrics_address {
        Some(address) => Some(
            http::serve(
                address,
                metrics.clone(),
                health.clone(),
                endpoints_token.clone(),
            )
            .await
            .map_err(|err| ConfigError {
                flag: "--metrics-address".to_owned(),
                env: "SHARDSINK_METRICS_ADDRESS".to_owned(),
                message: format!("cannot listen on {address}: {err}"),
            })?,
        ),
        None => None,
    };
    systemd::spawn_watchdog(health.clone(), endpoints_token.clone());
    let result = run_worker(settings, clients, metrics, health, shutdown).await;
    endpoints_token.cancel();
    if let Some(server) = server {
        let _ = server.await;
    }
    result
}

async fn run_worker(
    settings: Settings,
    clients: AwsClients,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<Summary> {
    let token = CancellationToken::new();
    let shutdown_token = token.clone();
    let shutdown_timeout = settings.config.shutdown_timeout;
    let mut worker = Worker::new(settings, clients, metrics.clone(), health);
    let run = worker.run(token.clone());
    tokio::pin!(run);
    tokio::pin!(shutdown);
    tokio::select! {
        result = &mut run => return result,
        () = &mut shutdown => {
            info!(timeout = ?shutdown_timeout, "shutting down: writing buffered records, checkpointing, releasing leases");
            systemd::stopping();
            shutdown_token.cancel();
        }
    }
    // Shutdown: the worker loop notices the token, asks shard tasks to finish,
    // and releases leases; bound how long that may take.
    match tokio::time::timeout(shutdown_timeout, run).await {
        Ok(result) => result,
        Err(_) => {
            warn!(timeout = ?shutdown_timeout, "shutdown timed out; unfinished batches are replayed on the next start");
            Ok(worker_summary(&metrics))
        }
    }
}

fn worker_summary(metrics: &Metrics) -> Summary {
    Summary {
        records_read: metrics.records_read.get(),
        batches_written: metrics.batches(Outcome::created),
        batches_already_present: metrics.batches(Outcome::already_present),
        records_written: metrics.records_written.get(),
        duplicates_excluded: metrics.duplicates_excluded.get(),
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
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    renewer: Renewer,
    shards: Vec<ShardInfo>,
    shards_listed_at: Option<Instant>,
    held: HashMap<String, HeldShard>,
    tasks: JoinSet<TaskOutput>,
    task_shards: HashMap<tokio::task::Id, String>,
    expiry: LeaseExpiry,
    /// Heartbeat counters of workers, for liveness.
    worker_expiry: LeaseExpiry,
    /// (target, workers) of the last plan, to log changes only.
    last_plan: (usize, usize),
    /// Shards whose task failed, and when they may be taken again.
    failed: HashMap<String, (Backoff, Instant)>,
    first_sync_done: bool,
}

impl Worker {
    fn new(
        settings: Settings,
        clients: AwsClients,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
    ) -> Self {
        let config = &settings.config;
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
            budget: MemoryBudget::new(config.buffer_memory_limit, config.buffer_max_bytes),
            metrics: metrics.clone(),
            initial_timestamp: config.initial_timestamp,
            idle_time_between_reads: config.idle_time_between_reads,
            max_records_per_read: config.max_records_per_read,
            failover_time: config.failover_time,
        });
        Self {
            table: LeaseTable::new(clients.dynamodb, settings.lease_table.clone())
                .with_failover_time(config.failover_time),
            settings,
            kinesis,
            store,
            ctx,
            metrics,
            health,
            renewer: Renewer::default(),
            shards: Vec::new(),
            shards_listed_at: None,
            held: HashMap::new(),
            tasks: JoinSet::new(),
            task_shards: HashMap::new(),
            expiry: LeaseExpiry::new(),
            worker_expiry: LeaseExpiry::new(),
            last_plan: (0, 0),
            failed: HashMap::new(),
            first_sync_done: false,
        }
    }

    async fn run(&mut self, token: CancellationToken) -> anyhow::Result<Summary> {
        if !self.start_up(&token).await? {
            return Ok(worker_summary(&self.metrics));
        }
        // Renewals run on their own task, so nothing this loop waits on can
        // make leases expire. It stops when the worker has shut down.
        let renewals_token = CancellationToken::new();
        self.renewer = Renewer::spawn(
            self.table.clone(),
            self.settings.worker_id.clone(),
            self.settings.lease_renewal_interval,
            renewals_token.clone(),
        );
        let _stop_renewals = renewals_token.drop_guard();
        // Scanning faster than renewing means a lease released by a worker
        // that shuts down is taken within one renewal interval.
        let mut sync_timer = tokio::time::interval(self.settings.lease_taking_interval);
        sync_timer.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = token.cancelled() => break,
                _ = sync_timer.tick() => {
                    self.health.tick();
                    if let Err(err) = self.sync(&token).await {
                        warn!(error = format!("{err:#}"), "lease sync failed; retrying next round");
                    }
                }
                Some(joined) = self.tasks.join_next_with_id() => {
                    if let Some(children) = self.on_task_end(joined).await {
                        // Children may now start; look at once.
                        self.add_children(children);
                        self.shards_listed_at = None;
                        sync_timer.reset_immediately();
                    }
                }
            }
        }
        self.shut_down().await;
        Ok(worker_summary(&self.metrics))
    }

    /// Checks the stream and bucket and creates the lease table if missing.
    /// Returns `false` when shutdown came first.
    async fn start_up(&mut self, token: &CancellationToken) -> anyhow::Result<bool> {
        let stream = self.settings.stream.name().to_owned();
        let status = retry_until(
            token,
            &self.health,
            StartUpStep {
                what: "describe stream",
                bound: START_UP_CALL_BOUND,
            },
            || self.kinesis.describe_stream_summary(),
            |err| matches!(err, KinesisError::NotFound(_)),
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
                let summary =
                    result.with_context(|| format!("failed to describe stream {stream}"))?;
                info!(stream = %stream, status = %summary.status, retention = ?summary.retention, "stream found");
                self.metrics.set_stream_retention(summary.retention);
            }
        }
        let bucket = self.store.bucket().to_owned();
        match retry_until(
            token,
            &self.health,
            StartUpStep {
                what: "head bucket",
                bound: START_UP_CALL_BOUND,
            },
            || self.store.head_bucket(),
            |err| matches!(err, S3Error::NoSuchBucket { .. }),
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
            &self.health,
            StartUpStep {
                what: "find or create the lease table",
                bound: TABLE_ACTIVE_TIMEOUT + START_UP_CALL_BOUND,
            },
            || self.table.create_table_if_missing(),
            |_| false,
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
        self.health.started();
        systemd::ready();
        Ok(true)
    }

    /// One round of lease work: refresh the shard list when due, scan the
    /// table, create missing leases, delete ended ones past retention, and
    /// take or steal leases per [`plan_takes`].
    async fn sync(&mut self, token: &CancellationToken) -> Result<(), anyhow::Error> {
        let list_due = self
            .shards_listed_at
            .is_none_or(|at| at.elapsed() >= self.settings.config.shard_sync_interval);
        let listed = list_due && self.list_shards().await?;
        let scan = match self.table.scan().await {
            Ok(scan) => scan,
            Err(LeaseError::TableMissing { table }) => {
                warn!(lease_table = %table, "lease table missing; creating it again (shards restart from their initial position, dedup keeps S3 exact)");
                // Waiting for an old table to be deleted and the new one to
                // become ACTIVE can take minutes: alive, not ready.
                self.health.waiting(
                    format!("the lease table {table} is missing; creating it again"),
                    Instant::now() + TABLE_ACTIVE_TIMEOUT + START_UP_CALL_BOUND,
                );
                self.table.create_table_if_missing().await?;
                TableScan::default()
            }
            Err(err) => return Err(err.into()),
        };
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
        let me = self.settings.worker_id.clone();
        let live_workers: BTreeSet<String> = scan
            .workers
            .iter()
            .filter(|w| {
                w.worker_id == me
                    || !self.worker_expiry.is_stale(
                        &w.worker_id,
                        w.heartbeat_counter,
                        now,
                        failover,
                    )
            })
            .map(|w| w.worker_id.clone())
            .collect();
        let graph = ShardGraph::new(&self.shards, &leases);
        let workable: Vec<Lease> = leases
            .iter()
            .filter(|l| graph.is_workable(l))
            .cloned()
            .collect();
        let own_at_start = !self.first_sync_done;
        let plan = plan_takes(&me, &workable, &live_workers, |lease| {
            let key = lease.lease_key.as_str();
            let backing_off = self
                .failed
                .get(key)
                .is_some_and(|(_, retry_at)| now < *retry_at);
            !self.held.contains_key(key)
                && !backing_off
                && ((own_at_start && lease.is_owned_by(&me))
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
        }
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
        Ok(())
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
    fn add_children(&mut self, children: Vec<ShardInfo>) {
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
                let reported = gap
                    .report(
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

    fn start_shard(&mut self, lease: Lease, taken_at: Instant, token: &CancellationToken) {
        let shard_id = lease.lease_key.clone();
        info!(shard_id = %shard_id, lease_counter = lease.lease_counter, "lease taken");
        let held = Arc::new(HeldLease::new(self.table.clone(), lease, taken_at));
        self.renewer.add(held.clone());
        let task = ShardTask::new(self.ctx.clone(), held.clone());
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
    async fn on_task_end(
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
            Some(Err(ShardError::TableMissing(_))) => {
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

    async fn shut_down(&mut self) {
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
        Ok(()) => debug!(shard_id = %lease.shard_id(), "lease released"),
        // Lost already: nothing to release.
        Err(Stopped::Cancelled) => {}
        Err(Stopped::Final(err) | Stopped::GaveUp(err)) => {
            debug!(shard_id = %lease.shard_id(), error = %error_chain(&err), "lease release failed; it expires instead");
        }
    }
}

/// The longest one start-up call may take: the SDK's attempts of up to 30 s
/// each, and its backoff between them.
const START_UP_CALL_BOUND: Duration = Duration::from_secs(120);

/// A start-up step retried by [`retry_until`].
struct StartUpStep {
    /// For logs and `/readyz`, e.g. "describe stream".
    what: &'static str,
    /// The longest one attempt may take.
    bound: Duration,
}

/// Calls `op` until it succeeds or fails with an error `is_final` says no
/// retry can fix (a stream or bucket that does not exist: a bad setting).
/// Transient failures are retried quickly; others — access denied, a wrong
/// endpoint — with a backoff up to 60 s and error logs, so that a daemon
/// started before its permissions were fixed heals instead of exiting into a
/// restart loop. Meanwhile `health` is alive and not ready, with the reason,
/// and systemd is told to keep waiting. `None` when `token` is cancelled
/// first.
async fn retry_until<T, E, F, Fut>(
    token: &CancellationToken,
    health: &Health,
    step: StartUpStep,
    op: F,
    is_final: fn(&E) -> bool,
) -> Option<Result<T, E>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: Classify + std::error::Error + 'static,
{
    let what = step.what;
    let status = format!("starting: {what}");
    health.waiting(status.clone(), Instant::now() + step.bound);
    systemd::starting(&status, step.bound);
    let on_retry = |err: &E, delay: Duration| {
        let status = format!("starting: {what} failed ({}); retrying", error_chain(err));
        health.waiting(status.clone(), Instant::now() + delay + step.bound);
        systemd::starting(&status, delay + step.bound);
    };
    let result = Retry::new(what)
        .until(token)
        .final_when(is_final)
        .on_retry(&on_retry)
        .run(op)
        .await;
    match result {
        Ok(value) => Some(Ok(value)),
        Err(Stopped::Final(err) | Stopped::GaveUp(err)) => Some(Err(err)),
        Err(Stopped::Cancelled) => None,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;
    use std::sync::atomic::Ordering;

    use aws_sdk_dynamodb::types::AttributeValue;
    use sequence_range::SequenceNumber;
    use tokio::sync::oneshot;

    use super::*;
    use crate::config::parse_flags_only;
    use crate::fake_aws::{self, FakeBucket, FakeStream, FakeTable};

    /// 2020-01-01T00:00:00Z: minutes long over, so batches close at once.
    const PAST: i64 = 1_577_836_800_000;

    fn settings(worker_id: &str) -> Settings {
        parse_flags_only(&[
            "--stream",
            "s",
            "--bucket",
            "bucket",
            "--worker-id",
            worker_id,
            "--failover-time",
            "2s",
            "--buffer-max-records",
            "5",
            "--idle-time-between-reads",
            "200ms",
            "--metrics-address",
            "off",
        ])
        .unwrap()
        .validate()
        .unwrap()
    }

    fn start(
        settings: Settings,
        clients: AwsClients,
    ) -> (
        oneshot::Sender<()>,
        tokio::task::JoinHandle<anyhow::Result<Summary>>,
    ) {
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(run_with_clients(settings, clients, async move {
            let _ = stopped.await;
        }));
        (stop, task)
    }

    /// In-memory Kinesis, S3 and DynamoDB; `shards` shards of `per_shard`
    /// records each, two seconds apart.
    fn fakes_with_records(
        shards: u64,
        per_shard: u64,
    ) -> (Arc<FakeStream>, Arc<FakeBucket>, Arc<FakeTable>) {
        let stream = Arc::new(FakeStream::default());
        let base =
            SequenceNumber::parse("49590338271490256608559692538361571095921575989136588898")
                .unwrap();
        for s in 0..shards {
            let shard = stream.shard(&format!("shardId-{s:012}"));
            for i in 1..=per_shard {
                let seq = SequenceNumber::from(base.as_biguint() + i * 1_000).to_string();
                shard.push(&seq, PAST + i as i64 * 2_000, format!("{s}-{i}").as_bytes());
            }
        }
        (stream, Default::default(), Default::default())
    }

    /// Every one of `records` records is in exactly one line of the bucket.
    fn assert_each_record_once(bucket: &FakeBucket, records: u64) {
        let mut seen: BTreeMap<(String, String), usize> = BTreeMap::new();
        for (_, line) in bucket.lines() {
            let id = (
                line["shardId"].as_str().unwrap().to_owned(),
                line["sequenceNumber"].as_str().unwrap().to_owned(),
            );
            *seen.entry(id).or_default() += 1;
        }
        assert_eq!(seen.len() as u64, records, "every record in S3");
        assert!(
            seen.values().all(|n| *n == 1),
            "no record twice: {:?}",
            seen.iter().filter(|(_, n)| **n > 1).collect::<Vec<_>>()
        );
    }

    /// Another worker steals both leases of this one. Until this worker's
    /// tasks notice (at their next renewal or conditional write), the table
    /// shows the other worker above its target, so the plan steals one back:
    /// it must wait until the old task of that shard stopped — one task per
    /// shard — then take it over cleanly.
    #[tokio::test(start_paused = true)]
    async fn a_lost_shard_is_not_taken_back_before_its_task_stopped() {
        let (shards, per_shard) = (2, 40);
        let (stream, bucket, table) = fakes_with_records(shards, per_shard);
        let (stop, worker) = start(
            settings("worker-a"),
            fake_aws::clients(stream, bucket.clone(), table.clone()),
        );
        let mut owned = false;
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if owners(&table).get("worker-a") == Some(&2) {
                owned = true;
                break;
            }
        }
        assert!(
            owned,
            "worker-a never took both leases: {:?}",
            owners(&table)
        );
        // Right after a renewal, with nothing left to write: the next scan
        // (every 400 ms) comes before the next renewal (every 667 ms).
        let counters = || -> Vec<String> {
            table
                .items
                .lock()
                .unwrap()
                .values()
                .filter_map(|item| item.get("leaseCounter")?.as_n().ok().cloned())
                .collect()
        };
        while bucket.lines().len() < (shards * per_shard) as usize {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let before = counters();
        while counters() == before {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for item in table.items.lock().unwrap().values_mut() {
            if item.contains_key("leaseOwner") {
                let counter: u64 = item["leaseCounter"].as_n().unwrap().parse().unwrap();
                item.insert(
                    "leaseOwner".to_owned(),
                    AttributeValue::S("worker-b".to_owned()),
                );
                item.insert(
                    "leaseCounter".to_owned(),
                    AttributeValue::N((counter + 1).to_string()),
                );
            }
        }
        tokio::time::sleep(Duration::from_secs(20)).await;
        let _ = stop.send(());
        worker.await.unwrap().unwrap();
        assert_each_record_once(&bucket, shards * per_shard);
    }

    /// A lease whose shard is missing from the shard list is deleted only
    /// when that list was read this round and nobody renews the lease: a
    /// failed ListShards (the last list kept, perhaps from before a
    /// reshard) deletes nothing. A deleted lease that was not at SHARD_END
    /// leaves a retention gap marker.
    #[tokio::test(start_paused = true)]
    async fn a_failed_shard_list_deletes_no_lease() {
        use shard_lease::{Checkpoint, Lease, LeaseTable};

        let (stream, bucket, table) = fakes_with_records(1, 5);
        let clients = fake_aws::clients(stream.clone(), bucket.clone(), table.clone());
        let mut settings = settings("worker-a");
        settings.config.shard_sync_interval = Duration::from_secs(1);
        let (stop, worker) = start(settings, clients.clone());
        let has_row = |key: &str| table.items.lock().unwrap().contains_key(key);
        while owners(&table).get("worker-a") != Some(&1) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // A child this worker's list does not show yet, as another worker
        // would create it; and every ListShards fails from now on.
        let child = "shardId-000000000009";
        stream.failing_lists.store(usize::MAX, Ordering::SeqCst);
        LeaseTable::new(clients.dynamodb.clone(), "shardsink-s")
            .create_lease(&Lease::new(child, Checkpoint::TrimHorizon, vec![]))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(has_row(child), "deleted on the strength of a stale list");

        // Lists read again, and the shard is not in the stream: the lease
        // goes once it stood still for the failover time.
        stream.failing_lists.store(0, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(
            !has_row(child),
            "a lease of a shard gone from the stream stays"
        );
        // Its records were never read: that is said in S3 before the row,
        // the last trace of them, goes.
        let marker = format!("s/_retention-gaps/{child}/TRIM_HORIZON.json");
        assert!(
            bucket.objects.lock().unwrap().contains_key(&marker),
            "no retention gap marker {marker}"
        );
        let _ = stop.send(());
        worker.await.unwrap().unwrap();
    }

    fn owners(table: &FakeTable) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for (key, item) in table.items.lock().unwrap().iter() {
            if key.starts_with("shardId-") {
                let owner = item
                    .get("leaseOwner")
                    .and_then(|v| v.as_s().ok())
                    .cloned()
                    .unwrap_or_default();
                *counts.entry(owner).or_default() += 1;
            }
        }
        counts
    }

    /// Issue 3, test 5: two workers, lease writes throttled every third call.
    /// The leases spread 2/2 through steals, nothing panics, and — checked at
    /// every PUT — only the worker that recorded a batch in the lease row can
    /// create its object, so no worker ever writes for a shard it does not
    /// hold. At the end every record is in S3 exactly once.
    #[tokio::test(start_paused = true)]
    async fn two_workers_share_shards_under_throttling_without_double_writes() {
        let (shards, per_shard) = (4, 40);
        let (stream, bucket, table) = fakes_with_records(shards, per_shard);
        table.throttle_every.store(3, Ordering::SeqCst);
        let violations = Arc::new(Mutex::new(Vec::new()));
        let (rows, seen) = (table.clone(), violations.clone());
        *bucket.on_put.lock().unwrap() = Some(Box::new(move |key: &str, creates: bool| {
            if !creates {
                return;
            }
            let shard = key.rsplit('/').nth(1).unwrap_or_default().to_owned();
            let pending = rows.items.lock().unwrap().get(&shard).and_then(|row| {
                row.get("pendingBatchKey")
                    .and_then(|v| v.as_s().ok())
                    .cloned()
            });
            if pending.as_deref() != Some(key) {
                seen.lock()
                    .unwrap()
                    .push(format!("{key} created while the row records {pending:?}"));
            }
        }));

        let clients = || fake_aws::clients(stream.clone(), bucket.clone(), table.clone());
        let (stop_a, a) = start(settings("worker-a"), clients());
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (stop_b, b) = start(settings("worker-b"), clients());
        let mut balanced = false;
        for _ in 0..120 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let counts = owners(&table);
            if counts.get("worker-a") == Some(&2) && counts.get("worker-b") == Some(&2) {
                balanced = true;
                break;
            }
        }
        assert!(balanced, "leases never spread 2/2: {:?}", owners(&table));
        tokio::time::sleep(Duration::from_secs(20)).await;
        // Releases are best effort (a few retries, then the lease expires):
        // under every-third-call throttling the calls of the two workers can
        // line up so that one release is throttled every time.
        table.throttle_every.store(0, Ordering::SeqCst);
        let _ = (stop_a.send(()), stop_b.send(()));
        a.await.unwrap().unwrap();
        b.await.unwrap().unwrap();

        assert_eq!(*violations.lock().unwrap(), Vec::<String>::new());
        assert_each_record_once(&bucket, shards * per_shard);
        assert_eq!(
            owners(&table).get(""),
            Some(&4),
            "both released their leases at shutdown"
        );
    }

    /// `GET path` on `address`: the status code and the body.
    async fn http_get(address: std::net::SocketAddr, path: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        let status = response
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap();
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, body)| body.to_owned())
            .unwrap_or_default();
        (status, body)
    }

    #[tokio::test(start_paused = true)]
    async fn start_up_that_keeps_failing_is_alive_and_not_ready() {
        // A permission still being fixed (DescribeStreamSummary denied for
        // five minutes), then a lease table that takes minutes to become
        // ACTIVE: far past the 60 s liveness window. A restart would not
        // help, so /healthz stays 200; /readyz says why it is not ready.
        let (stream, bucket, table) = fakes_with_records(1, 1);
        stream.failing_describes.store(1_000, Ordering::SeqCst);
        table.creating_polls.store(1_000, Ordering::SeqCst);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let address: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
        let mut settings = settings("worker-a");
        settings.metrics_address = Some(address);
        let (stop, worker) = start(
            settings,
            fake_aws::clients(stream.clone(), bucket, table.clone()),
        );

        tokio::time::sleep(Duration::from_secs(300)).await;
        assert!(
            stream.failing_describes.load(Ordering::SeqCst) > 0,
            "still failing"
        );
        assert_eq!(http_get(address, "/healthz").await.0, 200);
        let (status, body) = http_get(address, "/readyz").await;
        assert_eq!(status, 503);
        assert!(
            body.contains("starting: describe stream failed") && body.contains("AccessDenied"),
            "{body}"
        );

        // Fixed: the stream is found within one backoff (at most 120 s
        // with jitter); the table is still being created.
        stream.failing_describes.store(0, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(150)).await;
        assert!(
            table.creating_polls.load(Ordering::SeqCst) > 0,
            "still creating"
        );
        assert_eq!(http_get(address, "/healthz").await.0, 200);
        let (status, body) = http_get(address, "/readyz").await;
        assert_eq!(status, 503);
        assert!(body.contains("lease table"), "{body}");

        table.creating_polls.store(0, Ordering::SeqCst);
        let mut ready = false;
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if http_get(address, "/readyz").await.0 == 200 {
                ready = true;
                break;
            }
        }
        assert!(ready, "ready once started and the lease is held");
        stop.send(()).unwrap();
        worker.await.unwrap().unwrap();
    }
}

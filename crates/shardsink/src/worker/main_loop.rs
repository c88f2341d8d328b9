//! [`Worker`]: the worker's state, and its loop — lease work every taking
//! interval, shard tasks started and ended, shutdown.

use std::collections::HashMap;
use std::sync::Arc;

use shard_lease::{HeldLease, LeaseExpiry, LeaseTable};
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::committer::CommitterPart;
use super::renewer::Renewer;
use super::{Summary, worker_summary};
use crate::aws::attempts::AttemptsAsProgress;
use crate::aws::backoff::Backoff;
use crate::aws::{AwsClients, Kinesis, ObjectStore, ShardInfo};
use crate::config::Settings;
use crate::memory::MemoryBudget;
use crate::ops::health::Health;
use crate::ops::metrics::Metrics;
use crate::output::batch::BufferLimits;
use crate::read::mode::ReadSource;
use crate::shard::context::{ShardContext, ShardExit};
use crate::shard::error::ShardError;

/// What a shard task returns: its shard id and how it ended.
pub(super) type TaskOutput = (String, Result<ShardExit, ShardError>);

/// A shard this worker holds.
pub(super) struct HeldShard {
    pub(super) lease: Arc<HeldLease>,
    pub(super) task: tokio::task::Id,
}

/// The worker: its clients, its leases and shard tasks, and what it knows
/// of the stream and the other workers.
pub(super) struct Worker {
    pub(super) settings: Settings,
    pub(super) kinesis: Kinesis,
    pub(super) store: ObjectStore,
    /// The S3 client, for an Iceberg table's files.
    pub(super) s3: aws_sdk_s3::Client,
    /// The shared AWS configuration, for an Iceberg catalog's clients.
    pub(super) sdk: aws_config::SdkConfig,
    /// With `--format iceberg`, once start-up opened the table: the
    /// committer part, spawned when the loop starts.
    pub(super) committer: Option<CommitterPart>,
    pub(super) table: LeaseTable,
    /// DynamoDB, for the DynamoDB store.
    pub(super) dynamodb: aws_sdk_dynamodb::Client,
    pub(super) ctx: Arc<ShardContext>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) health: Arc<Health>,
    pub(super) renewer: Renewer,
    pub(super) shards: Vec<ShardInfo>,
    pub(super) shards_listed_at: Option<Instant>,
    pub(super) held: HashMap<String, HeldShard>,
    pub(super) tasks: JoinSet<TaskOutput>,
    pub(super) task_shards: HashMap<tokio::task::Id, String>,
    pub(super) expiry: LeaseExpiry,
    /// Heartbeat counters of workers, for liveness.
    pub(super) worker_expiry: LeaseExpiry,
    /// (target, workers) of the last plan, to log changes only.
    pub(super) last_plan: (usize, usize),
    /// Shards whose task failed, and when they may be taken again.
    pub(super) failed: HashMap<String, (Backoff, Instant)>,
    pub(super) first_sync_done: bool,
}

impl Worker {
    pub(super) fn new(
        settings: Settings,
        clients: AwsClients,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
    ) -> Self {
        // Each AWS attempt of the loop's long steps keeps the loop alive
        // (see `Health::watch`).
        let clients = clients.with_interceptor(AttemptsAsProgress);
        let config = &settings.config;
        let kinesis = Kinesis::new(clients.kinesis, settings.stream.clone());
        let store = ObjectStore::new(clients.s3.clone(), settings.bucket.clone());
        let ctx = Arc::new(ShardContext {
            kinesis: kinesis.clone(),
            store: store.clone(),
            output: settings.output.clone(),
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
            // Fan-out once start-up has found its consumer.
            read_source: ReadSource::Polling,
            failover_time: config.failover_time,
            events: None,
            // The table once start-up has opened it.
            table: None,
        });
        Self {
            table: LeaseTable::new(clients.dynamodb.clone(), settings.lease_table.clone())
                .with_failover_time(config.failover_time),
            dynamodb: clients.dynamodb,
            s3: clients.s3,
            sdk: clients.shared,
            committer: None,
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

    pub(super) async fn run(&mut self, token: CancellationToken) -> anyhow::Result<Summary> {
        // Each long step is watched: alive while its AWS calls make
        // attempts, not while it waits on something that never comes.
        let health = self.health.clone();
        if !health.watch(self.start_up(&token)).await? {
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
        let _stop_renewals = renewals_token.clone().drop_guard();
        // The committer too: shard tasks finishing at shutdown may still
        // see a commit.
        if let Some(committer) = self.committer.take() {
            committer.spawn(self.metrics.clone(), renewals_token.clone());
        }
        // Scanning faster than renewing means a lease released by a worker
        // that shuts down is taken within one renewal interval.
        let mut sync_timer = tokio::time::interval(self.settings.lease_taking_interval);
        sync_timer.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = token.cancelled() => break,
                _ = sync_timer.tick() => {
                    health.tick();
                    if let Err(err) = health.watch(self.sync(&token)).await {
                        warn!(error = format!("{err:#}"), "lease sync failed; retrying next round");
                    }
                }
                Some(joined) = self.tasks.join_next_with_id() => {
                    if let Some(children) = health.watch(self.on_task_end(joined)).await {
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
}

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
//! - with `--format iceberg`, on a task of its own: take or renew the table
//!   committer's row, commit every worker's staged batches once per
//!   `--iceberg-commit-interval` when this worker holds it, and pass the
//!   published state to the shard tasks;
//! - when a shard task ends: release its lease (a lost lease needs nothing),
//!   and after `SHARD_END` add its `ChildShards` and re-list shards so
//!   children start promptly.
//!
//! On shutdown every task writes its buffer and checkpoints, leases are
//! released so another worker can take them at once, and a summary is logged.
//!
//! # Layout
//! - `main_loop`: [`Worker`](main_loop::Worker), its state and its loop;
//! - `startup`: the checks before any lease is taken;
//! - `sync`: one round of lease work — observe, create and delete, plan,
//!   take;
//! - `tasks`: shard tasks started and ended, and shutdown;
//! - `renewer`: lease renewals and the heartbeat, on tasks of their own;
//! - `committer`: with `--format iceberg`, the table committer's rounds on
//!   a task of their own, and the published states handed to shard tasks.

mod committer;
mod main_loop;
pub(crate) mod renewer;
mod startup;
mod sync;
mod tasks;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use self::main_loop::Worker;
use crate::aws::AwsClients;
use crate::config::{ConfigError, Settings};
use crate::ops::health::Health;
use crate::ops::metrics::{Metrics, Outcome};
use crate::ops::{http, systemd};

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
    let clients = AwsClients::from_env(settings.config.archive.s3_force_path_style).await;
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

pub(super) fn worker_summary(metrics: &Metrics) -> Summary {
    Summary {
        records_read: metrics.records_read.get(),
        batches_written: metrics.batches(Outcome::created),
        batches_already_present: metrics.batches(Outcome::already_present),
        records_written: metrics.records_written.get(),
        duplicates_excluded: metrics.duplicates_excluded.get(),
    }
}

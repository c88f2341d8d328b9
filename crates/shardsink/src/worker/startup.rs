//! Start-up: the stream, the bucket and the lease table are checked (and
//! the table created) before any lease is taken, each retried until it
//! passes — alive and not ready meanwhile.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use shard_lease::TABLE_ACTIVE_TIMEOUT;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::committer::CommitterPart;
use super::main_loop::Worker;
use crate::aws::fan_out::ConsumerWait;
use crate::aws::retry::{Classify, Retry, Stopped};
use crate::aws::table_storage::S3TableStorageFactory;
use crate::aws::{KinesisError, S3Error};
use crate::config::{ConfigError, EventDedup, EventStoreSetting, IcebergSettings};
use crate::events::decider::{EventRuntime, EventStore};
use crate::events::dynamodb::DynamoDbStore;
use crate::events::dynamodb::cache::APPROXIMATE_BYTES_PER_ENTRY;
use crate::ops::health::Health;
use crate::ops::log::error_chain;
use crate::ops::systemd;
use crate::output::format::Format;
use crate::output::format::iceberg::IcebergLayout;
use crate::output::key::KeyLayout;
use crate::output::marker::{self, LayoutCheck, MarkerError, RecordedLayout};
use crate::read::mode::ReadSource;
use crate::table::committer::{Committer, CommitterOptions};
use crate::table::create::{NewTable, default_partition_spec, default_schema, find_or_create};
use crate::table::sink::TableSink;
use crate::table::{CatalogError, catalog};
use event_store::{LocalOptions, LocalStore};

impl Worker {
    /// Checks the stream and bucket and creates the lease table if missing.
    /// Returns `false` when shutdown came first.
    pub(super) async fn start_up(&mut self, token: &CancellationToken) -> anyhow::Result<bool> {
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
        let (retention, stream_arn) = match status {
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
                (summary.retention, summary.arn)
            }
        };
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
        let layout = &self.ctx.output.layout;
        match retry_until(
            token,
            &self.health,
            StartUpStep {
                what: "check the archive's key layout",
                bound: START_UP_CALL_BOUND,
            },
            || marker::check_or_record(&self.store, layout),
            |err| matches!(err, MarkerError::Unreadable { .. }),
        )
        .await
        {
            None => return Ok(false),
            Some(Ok(LayoutCheck::Matches)) => {}
            Some(Ok(LayoutCheck::Differs(recorded))) => {
                return Err(layout_differs(&bucket, layout, recorded).into());
            }
            Some(Err(err)) => {
                return Err(err).context("failed to check the archive's key layout");
            }
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
        if let Some(consumer_name) = self.settings.consumer_name.clone() {
            let Some(source) = self
                .start_fan_out(&stream_arn, &consumer_name, token)
                .await?
            else {
                return Ok(false);
            };
            let mut ctx = (*self.ctx).clone();
            ctx.read_source = source;
            self.ctx = Arc::new(ctx);
        }
        self.metrics
            .read
            .set_mode(self.ctx.read_source.mode().as_str());
        if let Some(iceberg) = self.settings.iceberg.clone() {
            let Some(table) = self.start_table(&iceberg, token).await? else {
                return Ok(false);
            };
            let mut ctx = (*self.ctx).clone();
            ctx.output.format = Format::Iceberg {
                layout: table.layout,
            };
            ctx.table = Some(table.sink);
            self.ctx = Arc::new(ctx);
            self.committer = Some(table.committer);
        }
        if let Some(events) = self.settings.events.clone() {
            let Some(runtime) = self.start_events(events, retention, token).await? else {
                return Ok(false);
            };
            let mut ctx = (*self.ctx).clone();
            ctx.events = Some(Arc::new(runtime));
            self.ctx = Arc::new(ctx);
        }
        info!(
            stream = %stream,
            bucket = %bucket,
            prefix = %self.settings.prefix,
            lease_table = %table,
            worker_id = %self.settings.worker_id,
            format = %self.ctx.output.format.description(),
            compression = ?self.ctx.output.compression,
            key_layout = self.ctx.output.layout.style().as_str(),
            time_bucket = self.ctx.output.layout.time_bucket().as_str(),
            error_prefix = self.ctx.output.error_layout.prefix(),
            read_mode = self.ctx.read_source.mode().as_str(),
            consumer = self.settings.consumer_name.as_deref(),
            event_id = self.settings.events.as_ref().map(|e| e.settings.source.to_string()),
            duplicates_prefix = self.settings.events.as_ref().map(|_| self.ctx.output.duplicates_layout.prefix()),
            iceberg_table = self.ctx.table.as_ref().map(|table| table.ident().to_string()),
            "shardsink started"
        );
        self.health.started();
        systemd::ready();
        Ok(true)
    }
}

/// The opened table: the format's layout, the shard tasks' sink and the
/// worker's committer part.
struct OpenedTable {
    layout: Arc<IcebergLayout>,
    sink: Arc<TableSink>,
    committer: CommitterPart,
}

impl Worker {
    /// Opens the catalog and finds or creates the table (`--format
    /// iceberg`), retried as the other start-up steps; `None` when shutdown
    /// came first.
    async fn start_table(
        &self,
        iceberg: &IcebergSettings,
        token: &CancellationToken,
    ) -> anyhow::Result<Option<OpenedTable>> {
        let target = &iceberg.target;
        let storage: Arc<dyn iceberg::io::StorageFactory> =
            Arc::new(S3TableStorageFactory::new(self.s3.clone()));
        let opened = retry_until(
            token,
            &self.health,
            StartUpStep {
                what: "open the Iceberg catalog",
                bound: START_UP_CALL_BOUND,
            },
            || async {
                catalog::open(&target.catalog, storage.clone(), &self.sdk)
                    .await
                    .map_err(CatalogError::starting)
            },
            CatalogError::is_setting,
        )
        .await;
        let catalog = match opened {
            None => return Ok(None),
            Some(result) => result.with_context(|| {
                format!(
                    "failed to open the Iceberg catalog ({})",
                    target.catalog.kind.as_str()
                )
            })?,
        };
        let payload = match &self.settings.output.format {
            Format::Parquet { schema } => schema.clone(),
            _ => None,
        };
        let new_table = || -> iceberg::Result<NewTable> {
            Ok(NewTable {
                schema: default_schema(payload.as_deref(), target.catalog.kind.instants())?,
                partition_spec: default_partition_spec(self.ctx.output.layout.time_bucket())?,
                location: None,
            })
        };
        let found = retry_until(
            token,
            &self.health,
            StartUpStep {
                what: "find or create the Iceberg table",
                bound: START_UP_CALL_BOUND,
            },
            || async {
                let new = new_table().map_err(CatalogError::starting)?;
                find_or_create(catalog.as_ref(), &target.table, new)
                    .await
                    .map_err(CatalogError::starting)
            },
            CatalogError::is_setting,
        )
        .await;
        let table = match found {
            None => return Ok(None),
            Some(result) => result
                .with_context(|| format!("failed to find or create table {}", target.table))?,
        };
        let metadata = table.metadata();
        let unwritable = |message: String| ConfigError {
            flag: "--iceberg-table".to_owned(),
            env: "SHARDSINK_ICEBERG_TABLE".to_owned(),
            message: format!("table {}: {message}", target.table),
        };
        let layout = IcebergLayout::new(
            metadata.current_schema().clone(),
            metadata.default_partition_spec().clone(),
        )
        .map_err(|err| unwritable(format!("cannot be written: {err}")))?;
        let (published, follow) = watch::channel(None);
        let sink = TableSink::new(catalog.clone(), &table, self.s3.clone(), follow)
            .map_err(|err| unwritable(err.to_string()))?;
        info!(
            table = %target.table,
            location = metadata.location(),
            schema_id = metadata.current_schema_id(),
            spec_id = metadata.default_partition_spec_id(),
            commit_interval = ?iceberg.commit_interval,
            "Iceberg table opened"
        );
        let committer = Committer::new(
            self.table.clone(),
            catalog,
            target.table.clone(),
            CommitterOptions {
                worker_id: self.settings.worker_id.clone(),
                interval: iceberg.commit_interval,
                failover_time: self.settings.config.failover_time,
                snapshot_retention: iceberg.snapshot_retention,
            },
        );
        Ok(Some(OpenedTable {
            layout: Arc::new(layout),
            sink: Arc::new(sink),
            committer: CommitterPart {
                committer,
                published,
                round_interval: iceberg
                    .commit_interval
                    .min(self.settings.lease_renewal_interval),
            },
        }))
    }
}

impl Worker {
    /// Makes sure the enhanced fan-out consumer `consumer_name` of the
    /// stream `stream_arn` exists and is `ACTIVE` (registered if missing;
    /// never deregistered). `None` when shutdown came first.
    async fn start_fan_out(
        &self,
        stream_arn: &str,
        consumer_name: &str,
        token: &CancellationToken,
    ) -> anyhow::Result<Option<ReadSource>> {
        let wait = ConsumerWait::default();
        let registered = retry_until(
            token,
            &self.health,
            StartUpStep {
                what: "register the stream consumer",
                bound: wait.interval * wait.attempts + START_UP_CALL_BOUND,
            },
            || {
                self.kinesis
                    .ensure_consumer(stream_arn, consumer_name, wait)
            },
            |_| false,
        )
        .await;
        let consumer_arn = match registered {
            None => return Ok(None),
            Some(result) => result.with_context(|| {
                format!("failed to register or find the stream consumer {consumer_name}")
            })?,
        };
        info!(consumer = consumer_name, consumer_arn = %consumer_arn, "stream consumer ACTIVE; reading by enhanced fan-out");
        Ok(Some(ReadSource::FanOut { consumer_arn }))
    }

    /// Opens the event store (`None` when shutdown came first). The local
    /// store's window must fit in the stream's `retention`: a store that is
    /// behind is rebuilt from what the archive recorded within it.
    async fn start_events(
        &self,
        events: EventDedup,
        retention: Duration,
        token: &CancellationToken,
    ) -> anyhow::Result<Option<EventRuntime>> {
        let store = match &events.store {
            EventStoreSetting::Local { dir } => {
                let window = Duration::from_millis(
                    u64::try_from(events.settings.rule.window_millis).unwrap_or(u64::MAX),
                );
                if window > retention {
                    return Err(ConfigError::new(
                        "event-dedup-window",
                        format!(
                            "{window:?} is longer than the stream's retention period ({retention:?}); with the local store it may be at most that"
                        ),
                    )
                    .into());
                }
                let dir = dir.clone();
                let store = tokio::task::spawn_blocking(move || {
                    LocalStore::open(&dir, LocalOptions::default())
                })
                .await
                .context("opening the event store did not complete")?
                .context("failed to open the event store (--event-dedup-dir)")?;
                info!(path = %store.path().display(), "event store opened");
                EventStore::Local(store)
            }
            EventStoreSetting::DynamoDb { table } => {
                let store = DynamoDbStore::new(
                    self.dynamodb.clone(),
                    table.clone(),
                    self.metrics.clone(),
                    DYNAMODB_CACHE_ENTRIES,
                );
                match retry_until(
                    token,
                    &self.health,
                    StartUpStep {
                        what: "find or create the DynamoDB event table",
                        bound: TABLE_ACTIVE_TIMEOUT + START_UP_CALL_BOUND,
                    },
                    || store.ensure_table(),
                    |_| false,
                )
                .await
                {
                    None => return Ok(None),
                    Some(result) => result.with_context(|| {
                        format!("failed to create or find DynamoDB event table {table}")
                    })?,
                }
                info!(
                    table,
                    cache_bytes = DYNAMODB_CACHE_ENTRIES * APPROXIMATE_BYTES_PER_ENTRY,
                    "DynamoDB event table ready"
                );
                EventStore::DynamoDb(store)
            }
        };
        Ok(Some(EventRuntime::new(events.settings, store)))
    }
}

/// The bad setting when the prefix holds an archive of another key layout
/// or time bucket.
fn layout_differs(bucket: &str, layout: &KeyLayout, recorded: RecordedLayout) -> ConfigError {
    let flag = if recorded.key_layout == layout.style() {
        "time-bucket"
    } else {
        "key-layout"
    };
    ConfigError::new(
        flag,
        format!(
            "s3://{bucket}/{} holds an archive written with {}; the resume skip would not find its objects under another layout. Keep those settings, or use a new --prefix",
            layout.list_prefix(),
            recorded.flags()
        ),
    )
}

/// Items the DynamoDB store's cache holds (about
/// `APPROXIMATE_BYTES_PER_ENTRY`, 300 bytes, each: some 30 MiB).
const DYNAMODB_CACHE_ENTRIES: usize = 100_000;

/// The longest one start-up call may take: the SDK's attempts of up to 30 s
/// each, and its backoff between them.
pub(super) const START_UP_CALL_BOUND: Duration = Duration::from_secs(120);

/// A start-up step retried by [`retry_until`].
struct StartUpStep {
    /// For logs and `/readyz`, e.g. "describe stream".
    what: &'static str,
    /// The longest one attempt may take.
    bound: Duration,
}

/// Calls `op` until it succeeds or fails with an error `is_final` says no
/// retry can fix (a stream or bucket that does not exist: a bad setting).
/// Every other error is retried, even one its type calls final elsewhere
/// (a lease table still being deleted when the wait for it ends).
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
        .retry_final()
        .on_retry(&on_retry)
        .run(op)
        .await;
    match result {
        Ok(value) => Some(Ok(value)),
        Err(Stopped::Final(err) | Stopped::GaveUp(err)) => Some(Err(err)),
        Err(Stopped::Cancelled) => None,
    }
}

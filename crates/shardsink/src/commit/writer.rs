//! [`BatchWriter`]: writes one batch the only way shardsink writes anything.
//!
//! 1. Record the batch (key, first, last) in the lease row, conditional on the
//!    lease counter (`pendingCheckpoint`; contract line C6). A worker that
//!    lost the lease fails here and writes nothing new.
//! 2. PUT the object with `If-None-Match: *` (C2). A 412 means the
//!    object exists: it is read back and must hold the same records, or the
//!    shard stops with [`ShardError::ObjectConflict`]; it is never overwritten.
//! 3. Checkpoint the batch's last sequence number, clearing the pending batch
//!    (C3: the checkpoint only passes records durably in S3).
//!
//! A crash between 1 and 3 leaves the pending batch in the row; whoever holds
//! the lease next replays exactly that batch — same key, same bytes — before
//! anything else ([`BatchWriter::replay`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use shard_lease::{Checkpoint, HeldLease, LeaseError, PendingBatch};
use tracing::{error, info, warn};

use super::existing::same_records;
use super::fence::Fence;
use crate::aws::retry::{Classify, Failure, Retry, Stopped};
use crate::aws::{ObjectStore, PutOutcome, S3Error};
use crate::config::CompressionCodec;
use crate::ops::failpoint::failpoint;
use crate::ops::metrics::{Metrics, Outcome};
use crate::output::batch::{Batch, FlushReason};
use crate::output::compression::{self, Compression};
use crate::output::key::{KeyLayout, parse_object_name};
use crate::shard::error::ShardError;

/// A batch as written: the pending batch it was recorded as (its last
/// sequence number is now the checkpoint), and what the PUT did.
#[derive(Debug, Clone)]
pub struct WrittenBatch {
    /// Key, first and last, as recorded in the lease row.
    pub pending: PendingBatch,
    /// Whether this call created the object or found it present.
    pub outcome: PutOutcome,
}

/// Writes a shard's batches through its lease.
#[derive(Debug, Clone)]
pub struct BatchWriter {
    store: ObjectStore,
    layout: KeyLayout,
    compression: Compression,
    lease: Arc<HeldLease>,
    fence: Fence,
    metrics: Arc<Metrics>,
}

/// Why one PUT attempt failed.
#[derive(Debug, thiserror::Error)]
enum PutError {
    /// The call failed; retried as S3 errors are.
    #[error(transparent)]
    S3(S3Error),
    /// The shard must stop: the lease is lost, or the key holds other
    /// records.
    #[error(transparent)]
    Stop(ShardError),
}

impl Classify for PutError {
    fn classify(&self) -> Failure {
        match self {
            Self::S3(err) => err.classify(),
            Self::Stop(_) => Failure::Final,
        }
    }
}

impl BatchWriter {
    /// A writer for the shard `lease` is for; its PUTs are fenced by the
    /// lease and `failover_time`.
    pub fn new(
        store: ObjectStore,
        layout: KeyLayout,
        compression: Compression,
        lease: Arc<HeldLease>,
        metrics: Arc<Metrics>,
        failover_time: Duration,
    ) -> Self {
        Self {
            store,
            layout,
            compression,
            fence: Fence::new(lease.clone(), failover_time),
            lease,
            metrics,
        }
    }

    fn shard_id(&self) -> &str {
        self.lease.shard_id()
    }

    fn lease_lost(&self) -> ShardError {
        ShardError::LeaseLost {
            shard_id: self.shard_id().to_owned(),
        }
    }

    /// Writes a batch: record pending → PUT → checkpoint.
    ///
    /// # Errors
    /// [`ShardError`]; transient failures are retried here with backoff.
    pub async fn write(
        &self,
        batch: Batch,
        reason: FlushReason,
    ) -> Result<WrittenBatch, ShardError> {
        let range = batch.range();
        let key = self.layout.object_key(
            batch.minute(),
            self.shard_id(),
            range,
            self.compression.codec(),
        );
        let pending = PendingBatch {
            key,
            first: range.first().clone(),
            last: range.last().clone(),
        };
        failpoint("before-pending").await;
        self.lease_write("record pending batch", || {
            self.lease.record_pending_batch(&pending)
        })
        .await?;
        failpoint("after-pending").await;
        self.put_and_checkpoint(pending, self.compression, batch, reason)
            .await
    }

    /// Replays the pending batch recorded in the lease row: `batch` must hold
    /// exactly the shard's records `pending.first..=pending.last`. Writes it
    /// under the recorded key with the codec the key names, then checkpoints.
    ///
    /// # Errors
    /// As [`write`](Self::write).
    pub async fn replay(
        &self,
        pending: PendingBatch,
        batch: Batch,
    ) -> Result<WrittenBatch, ShardError> {
        let codec = pending
            .key
            .rsplit('/')
            .next()
            .and_then(|name| parse_object_name(name).ok())
            .map_or(self.compression.codec(), |name| name.codec);
        let compression = if codec == self.compression.codec() {
            self.compression
        } else {
            // Settings changed since the batch was recorded: write what the
            // key says, at that codec's default level.
            Compression::new(codec, None)
        };
        self.put_and_checkpoint(pending, compression, batch, FlushReason::Replay)
            .await
    }

    /// Writes a checkpoint that no batch write carries: past records dedup
    /// found in S3, `SHARD_END`, or the current checkpoint again to clear a
    /// pending batch that can no longer be replayed.
    ///
    /// # Errors
    /// [`ShardError::LeaseLost`], [`ShardError::TableMissing`]; transient
    /// failures are retried.
    pub async fn checkpoint(&self, checkpoint: &Checkpoint) -> Result<(), ShardError> {
        self.lease_write("checkpoint", || self.lease.checkpoint(checkpoint))
            .await
    }

    async fn put_and_checkpoint(
        &self,
        pending: PendingBatch,
        compression: Compression,
        batch: Batch,
        reason: FlushReason,
    ) -> Result<WrittenBatch, ShardError> {
        let records = batch.user_records();
        // The lines and the body stay counted against the memory budget
        // until the PUT ended.
        let (lines, mut reservation) = batch.into_lines();
        let lines = Bytes::from(lines);
        let body = compress(compression, lines.clone())
            .await
            .map_err(|source| ShardError::Compression {
                shard_id: self.shard_id().to_owned(),
                source,
            })?;
        if compression != Compression::None {
            reservation.grow(body.len() as u64);
        }
        let outcome = self
            .put(&pending.key, &body, compression.codec(), &lines)
            .await?;
        let body_len = body.len();
        drop((lines, body, reservation));
        failpoint("after-put").await;
        let checkpoint = Checkpoint::SequenceNumber(pending.last.clone());
        self.lease_write("checkpoint", || self.lease.checkpoint(&checkpoint))
            .await?;
        failpoint("after-checkpoint").await;
        match outcome {
            PutOutcome::Created => {
                self.metrics.batch_written(Outcome::created);
                self.metrics.bytes_written.inc_by(body_len as u64);
            }
            PutOutcome::AlreadyExists => self.metrics.batch_written(Outcome::already_present),
        }
        self.metrics.records_written.inc_by(records as u64);
        info!(
            key = %pending.key,
            first = %pending.first,
            last = %pending.last,
            records,
            bytes = body_len,
            reason = reason.as_str(),
            already_present = outcome == PutOutcome::AlreadyExists,
            "batch written"
        );
        Ok(WrittenBatch { pending, outcome })
    }

    /// PUT with `If-None-Match: *`, retried until it succeeds or the lease is
    /// lost (the batch is recorded in the row: the new owner replays it).
    async fn put(
        &self,
        key: &str,
        body: &Bytes,
        codec: CompressionCodec,
        lines: &Bytes,
    ) -> Result<PutOutcome, ShardError> {
        let put = Retry::new("PutObject")
            .metrics(&self.metrics)
            .until(self.lease.lost())
            .run(|| self.put_once(key, body, codec, lines))
            .await;
        match put {
            Ok(outcome) => Ok(outcome),
            Err(Stopped::Final(PutError::Stop(err))) => Err(err),
            Err(Stopped::Cancelled) => Err(self.lease_lost()),
            // Not expected (S3 errors are not final and the loop does not
            // give up), but if so, a failure — never a silent lease loss.
            Err(Stopped::Final(PutError::S3(err)) | Stopped::GaveUp(PutError::S3(err))) => Err(
                ShardError::from_s3_stop(self.lease.shard_id(), Stopped::Final(err)),
            ),
            Err(Stopped::GaveUp(PutError::Stop(err))) => Err(err),
        }
    }

    /// One PUT attempt, fenced by the lease (confirmed first whenever it is
    /// not confirmed recently); a 412 is checked against the records.
    async fn put_once(
        &self,
        key: &str,
        body: &Bytes,
        codec: CompressionCodec,
        lines: &Bytes,
    ) -> Result<PutOutcome, PutError> {
        loop {
            let put = self
                .store
                .put_if_absent(key, body.clone(), compression::content_type(codec));
            let Some(attempt) = self.fence.within(put).await else {
                // Another worker could take the lease soon: confirm it (or
                // learn it is lost), then try again.
                warn!(
                    key,
                    "lease not confirmed recently; confirming it before writing"
                );
                self.lease_write("renew", || self.lease.renew())
                    .await
                    .map_err(PutError::Stop)?;
                continue;
            };
            return match attempt.map_err(PutError::S3)? {
                PutOutcome::Created => Ok(PutOutcome::Created),
                PutOutcome::AlreadyExists => {
                    self.metrics.conditional_write_conflicts.inc();
                    match same_records(&self.store, key, codec, lines).await {
                        Ok(true) => Ok(PutOutcome::AlreadyExists),
                        Ok(false) => {
                            error!(key, "object exists with different records");
                            Err(PutError::Stop(ShardError::ObjectConflict {
                                bucket: self.store.bucket().to_owned(),
                                key: key.to_owned(),
                            }))
                        }
                        Err(err) => Err(PutError::S3(err)),
                    }
                }
            };
        }
    }

    /// Runs a lease write, retrying transient DynamoDB failures; a lost lease
    /// or a missing table ends the shard task.
    async fn lease_write<F, Fut>(&self, what: &'static str, op: F) -> Result<(), ShardError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<(), LeaseError>>,
    {
        let is_checkpoint = what == "checkpoint";
        let written = Retry::new(what)
            .metrics(&self.metrics)
            .run(|| async {
                let result = op().await;
                if is_checkpoint {
                    self.metrics.checkpoint(self.shard_id(), result.is_ok());
                }
                result
            })
            .await;
        match written {
            Ok(()) => Ok(()),
            Err(Stopped::Final(err @ LeaseError::TableMissing { .. })) => {
                Err(ShardError::TableMissing(err))
            }
            // Lost, or a conflict: this worker must write nothing more.
            Err(Stopped::Final(_) | Stopped::GaveUp(_) | Stopped::Cancelled) => {
                Err(self.lease_lost())
            }
        }
    }
}

/// Compresses off the async threads: a 64 MiB batch takes tens of
/// milliseconds even with zstd.
async fn compress(compression: Compression, lines: Bytes) -> std::io::Result<Bytes> {
    if compression == Compression::None {
        return Ok(lines);
    }
    match tokio::task::spawn_blocking(move || compression.compress(&lines)).await {
        Ok(body) => body.map(Bytes::from),
        Err(join_error) => Err(std::io::Error::other(join_error)),
    }
}

//! [`BatchWriter`]: writes one batch the only way shardsink writes anything.
//!
//! 1. Record the batch (key, first, last) in the lease row, conditional on the
//!    lease counter (`pendingCheckpoint`; contract line C6). A worker that
//!    lost the lease fails here and writes nothing new.
//! 2. PUT the objects with `If-None-Match: *` (C2), in order: the decisions
//!    object (with `--event-id`), the error object (when the format
//!    rejected records), the duplicates object (when records were
//!    duplicates), then the main object, which is the batch's commit marker.
//!    A 412 means the object exists: it is read back and must hold the same
//!    records, or the shard stops with [`CommitError::ObjectConflict`]; it is
//!    never overwritten.
//! 3. Checkpoint the batch's last sequence number, clearing the pending batch
//!    (C3: the checkpoint only passes records durably in S3).
//!
//! A crash between 1 and 3 leaves the pending batch in the row; whoever holds
//! the lease next replays exactly that batch — same key, same bytes — before
//! anything else ([`BatchWriter::replay`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use shard_lease::{Checkpoint, HeldLease, LeaseError, PendingBatch};
use tracing::{error, info, warn};

use super::body::{self, EncodedBatch, ObjectBody, ObjectRole};
use super::existing::same_records;
use super::fence::Fence;
use crate::aws::retry::{Classify, Failure, Retry, Stopped};
use crate::aws::{ObjectStore, PutOutcome, S3Error};
use crate::commit::error::CommitError;
use crate::ops::failpoint::failpoint;
use crate::ops::metrics::{Metrics, Outcome};
use crate::output::Output;
use crate::output::batch::{Batch, FlushReason};
use crate::output::compression::Compression;
use crate::output::decisions::decisions_key;
use crate::output::format::{BodyKind, Format};
use crate::output::key::body_kind_of_key;

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
    pub(super) store: ObjectStore,
    pub(super) output: Output,
    pub(super) lease: Arc<HeldLease>,
    pub(super) fence: Fence,
    pub(super) metrics: Arc<Metrics>,
    /// The event settings' description, stored with decisions objects.
    pub(super) events: Option<Arc<str>>,
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
    Stop(CommitError),
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
        output: Output,
        lease: Arc<HeldLease>,
        metrics: Arc<Metrics>,
        failover_time: Duration,
    ) -> Self {
        Self {
            store,
            output,
            fence: Fence::new(lease.clone(), failover_time),
            lease,
            metrics,
            events: None,
        }
    }

    /// Decisions objects record `description` (the event settings).
    pub fn with_events(mut self, description: &str) -> Self {
        self.events = Some(Arc::from(description));
        self
    }

    pub(super) fn shard_id(&self) -> &str {
        self.lease.shard_id()
    }

    fn lease_lost(&self) -> CommitError {
        CommitError::LeaseLost {
            shard_id: self.shard_id().to_owned(),
        }
    }

    /// Writes a batch: record pending → PUT → checkpoint.
    ///
    /// # Errors
    /// [`CommitError`]; transient failures are retried here with backoff.
    pub async fn write(
        &self,
        batch: Batch,
        reason: FlushReason,
    ) -> Result<WrittenBatch, CommitError> {
        let range = batch.range();
        let key = self.output.layout.object_key(
            batch.bucket(),
            self.shard_id(),
            range,
            self.output.body_kind(),
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
        let kind = self.output.body_kind();
        self.put_and_checkpoint(pending, &self.output.format, kind, batch, reason)
            .await
    }

    /// Replays the pending batch recorded in the lease row: `batch` must hold
    /// exactly the shard's records `pending.first..=pending.last`, encoded
    /// in `format` ([`replay_format`](Self::replay_format)). Writes it under
    /// the recorded key with the codec the key names, then checkpoints.
    ///
    /// # Errors
    /// As [`write`](Self::write).
    pub async fn replay(
        &self,
        pending: PendingBatch,
        batch: Batch,
        format: &Format,
    ) -> Result<WrittenBatch, CommitError> {
        let kind = body_kind_of_key(&pending.key).unwrap_or_else(|| self.output.body_kind());
        self.put_and_checkpoint(pending, format, kind, batch, FlushReason::Replay)
            .await
    }

    /// Writes an uncommitted batch found in S3, rebuilt: records it in the
    /// lease row, then writes it as a replay (the error object is there
    /// already: 412 with the same bytes).
    ///
    /// # Errors
    /// As [`write`](Self::write).
    pub async fn write_uncommitted(
        &self,
        pending: PendingBatch,
        batch: Batch,
        format: &Format,
    ) -> Result<WrittenBatch, CommitError> {
        self.lease_write("record pending batch", || {
            self.lease.record_pending_batch(&pending)
        })
        .await?;
        self.replay(pending, batch, format).await
    }

    /// Writes a checkpoint that no batch write carries: past records the resume skip
    /// found in S3, `SHARD_END`, or the current checkpoint again to clear a
    /// pending batch that can no longer be replayed.
    ///
    /// # Errors
    /// [`CommitError::LeaseLost`], [`CommitError::TableMissing`]; transient
    /// failures are retried.
    pub async fn checkpoint(&self, checkpoint: &Checkpoint) -> Result<(), CommitError> {
        self.lease_write("checkpoint", || self.lease.checkpoint(checkpoint))
            .await
    }

    async fn put_and_checkpoint(
        &self,
        pending: PendingBatch,
        format: &Format,
        kind: BodyKind,
        batch: Batch,
        reason: FlushReason,
    ) -> Result<WrittenBatch, CommitError> {
        let bucket = batch.bucket();
        let range = batch.range().clone();
        // The bodies stay counted against the memory budget until the PUTs
        // ended.
        let (bodies, mut reservation) = batch.into_bodies();
        let encoded = encode(
            bodies,
            format.clone(),
            kind,
            self.output.compression,
            self.events.clone(),
        )
        .await
        .map_err(|source| CommitError::Compression {
            shard_id: self.shard_id().to_owned(),
            source,
        })?;
        reservation.grow(encoded.objects().map(|(_, body)| body.held_bytes()).sum());
        let mut encoded = encoded;
        encoded.main = encoded.main.with_budget(reservation.budget());
        let (mut bytes_written, mut outcome) = (0, PutOutcome::Created);
        for (role, body) in encoded.objects() {
            let key = match role {
                ObjectRole::Main => pending.key.clone(),
                ObjectRole::Decisions => decisions_key(
                    &self.output.decisions_layout,
                    bucket,
                    self.shard_id(),
                    &range,
                ),
                ObjectRole::Errors => {
                    self.output
                        .error_layout
                        .object_key(bucket, self.shard_id(), &range, body.kind)
                }
                ObjectRole::Duplicates => self.output.duplicates_layout.object_key(
                    bucket,
                    self.shard_id(),
                    &range,
                    body.kind,
                ),
            };
            let put = self.put(&key, body).await?;
            if put == PutOutcome::Created {
                bytes_written += body.bytes.len();
            }
            match role {
                ObjectRole::Main => outcome = put,
                ObjectRole::Decisions => failpoint("after-decisions-put").await,
                ObjectRole::Errors => failpoint("after-error-put").await,
                ObjectRole::Duplicates => failpoint("after-duplicates-put").await,
            }
        }
        let EncodedBatch {
            main,
            errors,
            duplicates,
            rejected,
            outcomes,
            ..
        } = encoded;
        let error_records = errors.as_ref().map_or(0, |errors| errors.records);
        let duplicate_records = duplicates.as_ref().map_or(0, |d| d.records);
        let records = main.records + error_records + duplicate_records;
        drop((main, errors, duplicates, reservation));
        failpoint("after-put").await;
        let checkpoint = Checkpoint::SequenceNumber(pending.last.clone());
        self.lease_write("checkpoint", || self.lease.checkpoint(&checkpoint))
            .await?;
        failpoint("after-checkpoint").await;
        match outcome {
            PutOutcome::Created => self.metrics.batch_written(Outcome::created),
            PutOutcome::AlreadyExists => self.metrics.batch_written(Outcome::already_present),
        }
        self.metrics.bytes_written.inc_by(bytes_written as u64);
        self.metrics.records_written.inc_by(records as u64);
        for (reason, count) in rejected {
            self.metrics.records_errored(reason.as_str(), count);
        }
        for (event_outcome, count) in outcomes {
            self.metrics.events(event_outcome.as_str(), count);
        }
        info!(
            key = %pending.key,
            first = %pending.first,
            last = %pending.last,
            records,
            error_records,
            duplicate_records,
            bytes = bytes_written,
            reason = reason.as_str(),
            already_present = outcome == PutOutcome::AlreadyExists,
            "batch written"
        );
        Ok(WrittenBatch { pending, outcome })
    }

    /// PUT with `If-None-Match: *`, retried until it succeeds or the lease is
    /// lost (the batch is recorded in the row: the new owner replays it).
    async fn put(&self, key: &str, body: &ObjectBody) -> Result<PutOutcome, CommitError> {
        let put = Retry::new("PutObject")
            .metrics(&self.metrics)
            .until(self.lease.lost())
            .run(|| self.put_once(key, body))
            .await;
        match put {
            Ok(outcome) => Ok(outcome),
            Err(Stopped::Final(PutError::Stop(err))) => Err(err),
            Err(Stopped::Cancelled) => Err(self.lease_lost()),
            // Not expected (S3 errors are not final and the loop does not
            // give up), but if so, a failure — never a silent lease loss.
            Err(Stopped::Final(PutError::S3(err)) | Stopped::GaveUp(PutError::S3(err))) => Err(
                CommitError::from_s3_stop(self.lease.shard_id(), Stopped::Final(err)),
            ),
            Err(Stopped::GaveUp(PutError::Stop(err))) => Err(err),
        }
    }

    /// One PUT attempt, fenced by the lease (confirmed first whenever it is
    /// not confirmed recently); a 412 is checked against the records.
    async fn put_once(&self, key: &str, body: &ObjectBody) -> Result<PutOutcome, PutError> {
        let metadata = body.metadata();
        loop {
            let put = self.store.put_if_absent(
                key,
                body.bytes.clone(),
                body.kind.content_type(),
                &metadata,
            );
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
                    match same_records(&self.store, key, body).await {
                        Ok(true) => Ok(PutOutcome::AlreadyExists),
                        Ok(false) => {
                            error!(key, "object exists with different records");
                            Err(PutError::Stop(CommitError::ObjectConflict {
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
    async fn lease_write<F, Fut>(&self, what: &'static str, op: F) -> Result<(), CommitError>
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
                Err(CommitError::TableMissing(err))
            }
            // Lost, or a conflict: this worker must write nothing more.
            Err(Stopped::Final(_) | Stopped::GaveUp(_) | Stopped::Cancelled) => {
                Err(self.lease_lost())
            }
        }
    }
}

/// Encodes a batch's bodies off the async threads: a 64 MiB batch takes
/// tens of milliseconds to compress even with zstd.
async fn encode(
    bodies: crate::output::format::Bodies,
    format: Format,
    kind: BodyKind,
    compression: Compression,
    events: Option<Arc<str>>,
) -> std::io::Result<EncodedBatch> {
    match tokio::task::spawn_blocking(move || {
        body::encode(bodies, &format, kind, compression, events.as_deref())
    })
    .await
    {
        Ok(encoded) => encoded,
        Err(join_error) => Err(std::io::Error::other(join_error)),
    }
}

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
//!
//! Into an Iceberg table (`--format iceberg`, [`BatchWriter::with_table`]),
//! 2 PUTs the batch's data files instead of the main object (to the table's
//! location, at paths named by the batch, with `If-None-Match: *` as
//! objects) and 3 stages the batch in the lease row instead of moving the
//! checkpoint: the checkpoint moves once a table commit has taken the batch
//! ([`BatchWriter::apply_committed`]). The pending batch's key then names
//! the batch as the key layout would (its error and duplicates objects are
//! under that name); no object is written at it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use sequence_range::SequenceNumber;
use shard_lease::{Checkpoint, HeldLease, LeaseError, MAX_STAGED_BYTES, PendingBatch};
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
use crate::output::format::iceberg::PartitionFile;
use crate::output::format::{BodyKind, Format};
use crate::output::key::body_kind_of_key;
use crate::table::sink::TableSink;
use crate::table::state::StagedBatch;

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
    /// The Iceberg table the batches go into, with `--format iceberg`.
    pub(super) table: Option<Arc<TableSink>>,
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
            table: None,
        }
    }

    /// Batches go into `table`: their data files are written and staged,
    /// and the checkpoint moves when a table commit has taken them.
    pub fn with_table(mut self, table: Arc<TableSink>) -> Self {
        self.table = Some(table);
        self
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
        reservation.grow(
            encoded
                .table_files
                .iter()
                .flatten()
                .map(|file| file.bytes.len() as u64)
                .sum(),
        );
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
            let put = self.put(&self.store, &key, body).await?;
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
        // Taken only now: `objects` leaves the main object out of a table
        // batch by its data files.
        let mut table_written = None;
        if let Some(files) = encoded.table_files.take() {
            let (written, created) = self.put_data_files(&pending, format, files).await?;
            bytes_written += created;
            table_written = Some(written);
        }
        let EncodedBatch {
            main,
            errors,
            duplicates,
            rejected,
            outcomes,
            ignored_fields,
            ..
        } = encoded;
        let error_records = errors.as_ref().map_or(0, |errors| errors.records);
        let duplicate_records = duplicates.as_ref().map_or(0, |d| d.records);
        let records = main.records + error_records + duplicate_records;
        drop((main, errors, duplicates, reservation));
        let data_files = table_written.as_ref().map(Vec::len);
        match table_written {
            None => {
                failpoint("after-put").await;
                let checkpoint = Checkpoint::SequenceNumber(pending.last.clone());
                self.lease_write("checkpoint", || self.lease.checkpoint(&checkpoint))
                    .await?;
                failpoint("after-checkpoint").await;
            }
            Some(written) => {
                failpoint("after-data-files-put").await;
                self.stage(&pending, &written).await?;
                failpoint("after-stage").await;
                self.metrics.iceberg.fields_ignored.inc_by(ignored_fields);
            }
        }
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
            data_files,
            "batch written"
        );
        Ok(WrittenBatch { pending, outcome })
    }

    /// PUTs a table batch's data files to the table's location, each at the
    /// path the batch and its partition name; returns each file with its
    /// path, and the bytes created (not found present).
    async fn put_data_files(
        &self,
        pending: &PendingBatch,
        format: &Format,
        files: Vec<PartitionFile>,
    ) -> Result<(Vec<(String, PartitionFile)>, usize), CommitError> {
        let table = self.table_sink()?;
        let mut written = Vec::with_capacity(files.len());
        let mut created = 0;
        for file in files {
            let (path, key) =
                table.data_file(&file, self.shard_id(), &pending.first, &pending.last);
            let body = ObjectBody {
                kind: BodyKind::PARQUET,
                bytes: file.bytes.clone(),
                plain: file.bytes.clone(),
                records: usize::try_from(file.record_count).unwrap_or(usize::MAX),
                format: format.description(),
                main_format: None,
                main_extension: None,
                budget: None,
            };
            if self.put(table.store(), &key, &body).await? == PutOutcome::Created {
                created += body.bytes.len();
            }
            written.push((path, file));
        }
        Ok((written, created))
    }

    fn table_sink(&self) -> Result<&Arc<TableSink>, CommitError> {
        self.table.as_ref().ok_or_else(|| CommitError::Internal {
            shard_id: self.shard_id().to_owned(),
            message: "a table batch without a table",
        })
    }

    /// Stages the written batch in the lease row, after the previous staged
    /// batch (or the checkpoint), waiting for table commits while the row
    /// has no room for it.
    async fn stage(
        &self,
        pending: &PendingBatch,
        written: &[(String, PartitionFile)],
    ) -> Result<(), CommitError> {
        let table = self.table_sink()?;
        let mut published = table.subscribe();
        loop {
            let lease = self.lease.snapshot().await;
            let after = staged_after(&lease.staged_batches, &lease.checkpoint);
            let entry = table
                .staged_entry(self.shard_id(), &after, &pending.last, written)
                .map_err(|err| {
                    error!(error = %err, "cannot describe a batch's data files");
                    CommitError::Internal {
                        shard_id: self.shard_id().to_owned(),
                        message: "a staged batch cannot be described",
                    }
                })?;
            let held: usize = lease.staged_batches.iter().map(String::len).sum();
            if held + entry.len() <= MAX_STAGED_BYTES {
                return self
                    .lease_write("stage batch", || self.lease.stage_batch(&entry))
                    .await;
            }
            if self.apply_committed().await? {
                continue;
            }
            warn!(
                staged_bytes = held,
                "the lease row's staged batches are full; waiting for a table commit"
            );
            tokio::select! {
                biased;
                () = self.lease.lost().cancelled() => return Err(self.lease_lost()),
                changed = published.changed() => {
                    if changed.is_err() {
                        // The committer stopped: the worker is shutting down.
                        return Err(self.lease_lost());
                    }
                }
            }
        }
    }

    /// Moves the checkpoint to the shard's committed end in the latest
    /// state the committer published, and drops the staged batches that
    /// end at or below it. Returns whether the lease row changed.
    ///
    /// # Errors
    /// As [`checkpoint`](Self::checkpoint).
    pub async fn apply_committed(&self) -> Result<bool, CommitError> {
        let Some(state) = self.table.as_ref().and_then(|table| table.published()) else {
            return Ok(false);
        };
        match state.committed_end(self.shard_id()) {
            Ok(Some(end)) => self.move_to_committed(&end).await,
            Ok(None) => Ok(false),
            Err(err) => {
                warn!(error = %err, "the published table state does not parse; ignored");
                Ok(false)
            }
        }
    }

    /// Moves the checkpoint to `end`, a committed end of the shard's (the
    /// table holds every record up to it), unless it is there or past it,
    /// and drops the staged batches ending at or below it. Returns whether
    /// the lease row changed.
    ///
    /// # Errors
    /// As [`checkpoint`](Self::checkpoint).
    pub async fn move_to_committed(&self, end: &SequenceNumber) -> Result<bool, CommitError> {
        let lease = self.lease.snapshot().await;
        if lease.checkpoint.is_shard_end() {
            return Ok(false);
        }
        let behind = lease
            .checkpoint
            .sequence_number()
            .is_none_or(|checkpoint| checkpoint < end);
        let keep: Vec<String> = lease
            .staged_batches
            .iter()
            .filter(|entry| StagedBatch::last_of(entry).is_none_or(|last| last > *end))
            .cloned()
            .collect();
        if !behind && keep.len() == lease.staged_batches.len() {
            return Ok(false);
        }
        let checkpoint = if behind {
            Checkpoint::SequenceNumber(end.clone())
        } else {
            lease.checkpoint.clone()
        };
        self.lease_write("checkpoint committed", || {
            self.lease.checkpoint_committed(&checkpoint, &keep)
        })
        .await?;
        info!(
            checkpoint = %checkpoint,
            committed_batches = lease.staged_batches.len() - keep.len(),
            staged_batches = keep.len(),
            "checkpointed records committed to the table"
        );
        Ok(true)
    }

    /// PUT with `If-None-Match: *` to `store`, retried until it succeeds or
    /// the lease is lost (the batch is recorded in the row: the new owner
    /// replays it).
    async fn put(
        &self,
        store: &ObjectStore,
        key: &str,
        body: &ObjectBody,
    ) -> Result<PutOutcome, CommitError> {
        let put = Retry::new("PutObject")
            .metrics(&self.metrics)
            .until(self.lease.lost())
            .run(|| self.put_once(store, key, body))
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
    async fn put_once(
        &self,
        store: &ObjectStore,
        key: &str,
        body: &ObjectBody,
    ) -> Result<PutOutcome, PutError> {
        let metadata = body.metadata();
        loop {
            let put =
                store.put_if_absent(key, body.bytes.clone(), body.kind.content_type(), &metadata);
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
                    match same_records(store, key, body).await {
                        Ok(true) => Ok(PutOutcome::AlreadyExists),
                        Ok(false) => {
                            error!(key, "object exists with different records");
                            Err(PutError::Stop(CommitError::ObjectConflict {
                                bucket: store.bucket().to_owned(),
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
        let is_checkpoint = what.starts_with("checkpoint");
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

/// Where the next staged batch continues from: the last staged batch's
/// end, else the checkpoint.
fn staged_after(staged: &[String], checkpoint: &Checkpoint) -> Checkpoint {
    staged
        .last()
        .and_then(|entry| StagedBatch::last_of(entry))
        .map_or_else(|| checkpoint.clone(), Checkpoint::SequenceNumber)
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

#[cfg(test)]
mod tests;

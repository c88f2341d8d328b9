//! [`BatchWriter`]: writes one batch the only way shardsink writes anything.
//!
//! 1. Record the batch (key, first, last) in the lease row, conditional on the
//!    lease counter (`pendingCheckpoint`; contract line C6). A worker that
//!    lost the lease fails here and writes nothing new.
//! 2. PUT the object with `If-None-Match: *` (C2) — first the error object,
//!    when the format rejected records, then the main object, which is the
//!    batch's commit marker. A 412 means the object exists: it is read back
//!    and must hold the same records, or the shard stops with
//!    [`ShardError::ObjectConflict`]; it is never overwritten.
//! 3. Checkpoint the batch's last sequence number, clearing the pending batch
//!    (C3: the checkpoint only passes records durably in S3).
//!
//! A crash between 1 and 3 leaves the pending batch in the row; whoever holds
//! the lease next replays exactly that batch — same key, same bytes — before
//! anything else ([`BatchWriter::replay`]).

use std::collections::HashMap;
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
use crate::events::decisions::{self, RecordedDecision, decisions_key};
use crate::ops::failpoint::failpoint;
use crate::ops::metrics::{Metrics, Outcome};
use crate::output::Output;
use crate::output::batch::{Batch, FlushReason};
use crate::output::compression::Compression;
use crate::output::format::{BodyKind, Format};
use crate::output::key::parse_object_name;
use crate::output::read_back::decisions::parse as parse_decisions;
use crate::output::read_back::metadata::{
    DECISIONS_COMPRESSION, MAIN_EXTENSION_METADATA, MAIN_FORMAT_METADATA,
};
use crate::shard::dedup::{Side, Uncommitted};
use crate::shard::error::ShardError;
use crate::shard::memory::{MemoryBudget, Reservation};
use crate::shard::replay::{ReplayDecisions, recorded_kind};

/// A batch as written: the pending batch it was recorded as (its last
/// sequence number is now the checkpoint), and what the PUT did.
#[derive(Debug, Clone)]
pub struct WrittenBatch {
    /// Key, first and last, as recorded in the lease row.
    pub pending: PendingBatch,
    /// Whether this call created the object or found it present.
    pub outcome: PutOutcome,
}

/// How a pending batch is rebuilt ([`BatchWriter::replay_plan`]).
#[derive(Debug)]
pub struct ReplayPlan {
    /// The format to encode it in.
    pub format: Format,
    /// Where its event decisions come from.
    pub decisions: ReplayDecisions,
    /// The decisions read back from its decisions object (empty when there
    /// is none): their accepted copies go into the store.
    pub recorded: Vec<RecordedDecision>,
    /// The bytes of `recorded` and `decisions`, held against the memory
    /// budget until the replay is written (`None` when nothing was read).
    pub held: Option<Reservation>,
}

impl ReplayPlan {
    /// A plan without event decisions.
    fn without_decisions(format: Format) -> Self {
        Self {
            format,
            decisions: ReplayDecisions::None,
            recorded: Vec::new(),
            held: None,
        }
    }

    /// A plan adopting the decisions `read` back.
    fn adopting(format: Format, read: ReadBack) -> Self {
        Self {
            format,
            decisions: ReplayDecisions::adopted(&read.recorded),
            recorded: read.recorded,
            held: Some(read.held),
        }
    }
}

/// A decisions object read back.
#[derive(Debug)]
struct ReadBack {
    recorded: Vec<RecordedDecision>,
    /// Its user metadata.
    metadata: HashMap<String, String>,
    /// [`decisions::held_bytes`] of `recorded`, against the memory budget.
    held: Reservation,
}

/// Writes a shard's batches through its lease.
#[derive(Debug, Clone)]
pub struct BatchWriter {
    store: ObjectStore,
    output: Output,
    lease: Arc<HeldLease>,
    fence: Fence,
    metrics: Arc<Metrics>,
    /// The event settings' description, stored with decisions objects.
    events: Option<Arc<str>>,
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

    /// How to rebuild the pending batch: in the format its recorded key
    /// names ([`Format::for_shape`]) — or, when the batch's error object is
    /// already in S3, the main format that error object was written for
    /// (`x-amz-meta-shardsink-main-format`), so that the records it holds are
    /// left out of the main object whatever the settings are now — and with
    /// the event decisions of its decisions object when that is in S3
    /// (adopted, whatever the settings are now). Without one, with event
    /// deduplication on (`events_on`), the records are decided afresh —
    /// unless the error or main object is there: then the batch was written
    /// without event decisions and is rebuilt without them.
    ///
    /// The decisions read back are counted against `budget` until the plan's
    /// [`held`](ReplayPlan::held) is dropped.
    ///
    /// # Errors
    /// [`ShardError`] when the lease is lost while S3 is retried, or when the
    /// decisions object does not parse.
    pub async fn replay_plan(
        &self,
        pending: &PendingBatch,
        events_on: bool,
        budget: &Arc<MemoryBudget>,
    ) -> Result<ReplayPlan, ShardError> {
        let kind = recorded_kind(&pending.key).unwrap_or_else(|| self.output.body_kind());
        let format = self.output.format.for_shape(kind.shape);
        let Ok(parsed) = self.output.layout.parse_key(&pending.key) else {
            return Ok(ReplayPlan::without_decisions(format));
        };
        let (bucket, range) = (parsed.bucket, &parsed.range);
        let error_key = self.output.error_layout.object_key(
            bucket,
            self.shard_id(),
            range,
            BodyKind::lines(body::error_codec(kind)),
        );
        let error_metadata = self.head_metadata(&error_key).await?;
        let format = match error_metadata
            .as_ref()
            .and_then(|metadata| metadata.get(MAIN_FORMAT_METADATA))
        {
            Some(written_for) => self.format_written_for(pending, &error_key, written_for, format),
            None => format,
        };
        let decisions_key = decisions_key(
            &self.output.decisions_layout,
            bucket,
            self.shard_id(),
            range,
        );
        if let Some(read) = self.read_decisions(&decisions_key, budget).await? {
            info!(key = %pending.key, decisions_key, "the pending batch's decisions object is in S3; rebuilding the batch as decided");
            return Ok(ReplayPlan::adopting(format, read));
        }
        let written_without_decisions =
            error_metadata.is_some() || self.head_metadata(&pending.key).await?.is_some();
        Ok(ReplayPlan {
            decisions: if events_on && !written_without_decisions {
                ReplayDecisions::Fresh(std::collections::VecDeque::new())
            } else {
                ReplayDecisions::None
            },
            ..ReplayPlan::without_decisions(format)
        })
    }

    /// `format`, or the one an existing error object says the batch's main
    /// object was written in (`written_for`), when it can be rebuilt.
    fn format_written_for(
        &self,
        pending: &PendingBatch,
        error_key: &str,
        written_for: &str,
        format: Format,
    ) -> Format {
        if *written_for == format.description() {
            return format;
        }
        match Format::from_description(written_for) {
            Some(original) if original.shape() == format.shape() => {
                warn!(
                    key = %pending.key,
                    error_key,
                    written_for = %written_for,
                    "the pending batch's error object was written for another format; replaying in that format"
                );
                original
            }
            _ => {
                warn!(
                    key = %pending.key,
                    error_key,
                    written_for = %written_for,
                    "the pending batch's error object was written for a format that cannot be rebuilt; replaying in the current one"
                );
                format
            }
        }
    }

    /// The decisions a decisions object records, with its user metadata,
    /// if it is in S3. What is read is counted against `budget` — the body,
    /// then its decompressed lines, then the decisions parsed from them —
    /// without waiting: only a replay, which has its turn, reads one.
    ///
    /// # Errors
    /// [`ShardError`] when the lease is lost while S3 is retried, or when
    /// the object does not decompress or parse.
    async fn read_decisions(
        &self,
        key: &str,
        budget: &Arc<MemoryBudget>,
    ) -> Result<Option<ReadBack>, ShardError> {
        let found = Retry::new("GetObject")
            .metrics(&self.metrics)
            .until(self.lease.lost())
            .run(|| self.store.get_if_exists_with_metadata(key))
            .await
            .map_err(|stopped| ShardError::from_s3_stop(self.shard_id(), stopped))?;
        let Some((body, metadata)) = found else {
            return Ok(None);
        };
        let corrupt = |message: String| {
            error!(key, message, "cannot read a decisions object");
            ShardError::Internal {
                shard_id: self.shard_id().to_owned(),
                message: "a decisions object does not parse",
            }
        };
        let mut held = budget.reserve();
        held.grow(body.len() as u64);
        let plain = crate::output::compression::decompress(DECISIONS_COMPRESSION.codec(), &body)
            .map_err(|err| corrupt(err.to_string()))?;
        held.grow(plain.len() as u64);
        drop(body);
        let recorded = parse_decisions(self.shard_id(), &plain).map_err(corrupt)?;
        drop(plain);
        held.resize(decisions::held_bytes(&recorded));
        Ok(Some(ReadBack {
            recorded,
            metadata,
            held,
        }))
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
    ) -> Result<WrittenBatch, ShardError> {
        let kind = recorded_kind(&pending.key).unwrap_or_else(|| self.output.body_kind());
        self.put_and_checkpoint(pending, format, kind, batch, FlushReason::Replay)
            .await
    }

    /// The pending batch and plan of an uncommitted batch found in S3: its
    /// main key is the one its error or decisions object was written beside
    /// (same time path, shard and range; the body kind of the main format
    /// that object records — for an error object at its own codec, for a
    /// decisions object the main extension it records). A decisions object's
    /// decisions are adopted, counted against `budget` as by
    /// [`replay_plan`](Self::replay_plan).
    ///
    /// # Errors
    /// [`ShardError`] when the lease is lost while S3 is retried, or when a
    /// decisions object does not parse.
    pub async fn uncommitted_batch(
        &self,
        batch: &Uncommitted,
        budget: &Arc<MemoryBudget>,
    ) -> Result<(PendingBatch, ReplayPlan), ShardError> {
        let (metadata, read) = match batch.side {
            Side::Errors => (self.head_metadata(&batch.key).await?, None),
            Side::Decisions => match self.read_decisions(&batch.key, budget).await? {
                Some(mut read) => (Some(std::mem::take(&mut read.metadata)), Some(read)),
                None => (None, None),
            },
        };
        let metadata = metadata.unwrap_or_default();
        let written_for = metadata.get(MAIN_FORMAT_METADATA);
        let shape = written_for
            .and_then(|text| Format::shape_of_description(text))
            .unwrap_or_else(|| self.output.format.shape());
        // A Parquet schema is recorded by its fingerprint only: the current
        // one is used.
        let format = written_for
            .and_then(|text| Format::from_description(text))
            .unwrap_or_else(|| self.output.format.for_shape(shape));
        let kind = match batch.side {
            Side::Errors => {
                let codec = parse_object_name(batch.key.rsplit('/').next().unwrap_or_default())
                    .map_or(self.output.compression.codec(), |name| name.body.codec);
                format.body_kind(codec)
            }
            Side::Decisions => metadata
                .get(MAIN_EXTENSION_METADATA)
                .and_then(|extension| BodyKind::from_extension(extension))
                .filter(|kind| kind.shape == format.shape())
                .unwrap_or_else(|| format.body_kind(self.output.compression.codec())),
        };
        let pending = PendingBatch {
            key: self
                .output
                .layout
                .object_key(batch.bucket, self.shard_id(), &batch.range, kind),
            first: batch.range.first().clone(),
            last: batch.range.last().clone(),
        };
        let plan = match read {
            Some(read) if !read.recorded.is_empty() => ReplayPlan::adopting(format, read),
            _ => ReplayPlan::without_decisions(format),
        };
        Ok((pending, plan))
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
    ) -> Result<WrittenBatch, ShardError> {
        self.lease_write("record pending batch", || {
            self.lease.record_pending_batch(&pending)
        })
        .await?;
        self.replay(pending, batch, format).await
    }

    async fn head_metadata(
        &self,
        key: &str,
    ) -> Result<Option<std::collections::HashMap<String, String>>, ShardError> {
        Retry::new("HeadObject")
            .metrics(&self.metrics)
            .until(self.lease.lost())
            .run(|| self.store.user_metadata(key))
            .await
            .map_err(|stopped| ShardError::from_s3_stop(self.shard_id(), stopped))
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
        format: &Format,
        kind: BodyKind,
        batch: Batch,
        reason: FlushReason,
    ) -> Result<WrittenBatch, ShardError> {
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
        .map_err(|source| ShardError::Compression {
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
            self.metrics.records_errored(reason, count);
        }
        for (event_outcome, count) in outcomes {
            self.metrics.events(event_outcome, count);
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
    async fn put(&self, key: &str, body: &ObjectBody) -> Result<PutOutcome, ShardError> {
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
                ShardError::from_s3_stop(self.lease.shard_id(), Stopped::Final(err)),
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

//! [`BatchWriter`]: writes one batch the only way shardsink writes anything.
//!
//! 1. Record the batch (key, first, last) in the lease row, conditional on the
//!    lease counter (`pendingCheckpoint`; brief contract line 6). A worker that
//!    lost the lease fails here and writes nothing new.
//! 2. PUT the object with `If-None-Match: *` (contract line 2). A 412 means the
//!    object exists: it is read back and must hold the same records, or the
//!    shard stops with [`ShardError::ObjectConflict`]; it is never overwritten.
//! 3. Checkpoint the batch's last sequence number, clearing the pending batch
//!    (contract line 3: the checkpoint only passes records durably in S3).
//!
//! A crash between 1 and 3 leaves the pending batch in the row; whoever holds
//! the lease next replays exactly that batch — same key, same bytes — before
//! anything else ([`BatchWriter::replay`]).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use shard_lease::{Checkpoint, HeldLease, LeaseError, PendingBatch};
use tokio_util::io::SyncIoBridge;
use tracing::{error, info, warn};

use crate::aws::backoff::Backoff;
use crate::aws::{BoxError, ObjectStore, PutOutcome, S3Error};
use crate::config::CompressionCodec;
use crate::ops::failpoint::failpoint;
use crate::ops::metrics::{Metrics, Outcome, RetryCause};
use crate::output::batch::{Batch, FlushReason};
use crate::output::compression::{self, Compression};
use crate::output::key::{KeyLayout, parse_object_name};

/// Why a shard task stopped other than by reaching `SHARD_END` or shutdown.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    /// The lease was lost; the task wrote nothing after noticing.
    #[error("lease lost for shard {shard_id}")]
    LeaseLost {
        /// The shard.
        shard_id: String,
    },
    /// An object with the batch's key exists and holds other records.
    /// shardsink never overwrites; an operator must look.
    #[error("object s3://{bucket}/{key} exists with different records; refusing to overwrite")]
    ObjectConflict {
        /// The bucket.
        bucket: String,
        /// The key.
        key: String,
    },
    /// The lease table is gone.
    #[error("lease table missing")]
    TableMissing(#[source] LeaseError),
    /// Compressing a batch failed (not expected for in-memory buffers).
    #[error("compressing a batch of shard {shard_id} failed")]
    Compression {
        /// The shard.
        shard_id: String,
        /// The codec's error.
        #[source]
        source: std::io::Error,
    },
    /// A bug: an invariant stated in the code does not hold.
    #[error("internal error on shard {shard_id}: {message}")]
    Internal {
        /// The shard.
        shard_id: String,
        /// What went wrong.
        message: &'static str,
    },
}

/// A batch as written.
#[derive(Debug, Clone)]
pub struct WrittenBatch {
    /// The key.
    pub key: String,
    /// The last Kinesis sequence number in it (now the checkpoint).
    pub last: String,
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
    metrics: Arc<Metrics>,
    failover_time: Duration,
}

/// A PUT attempt ends this long before the lease could be seen expired:
/// slack for a request whose body was fully sent when the attempt was
/// abandoned, which S3 may still complete.
const LEASE_MARGIN: Duration = Duration::from_secs(1);

impl BatchWriter {
    /// A writer for the shard `lease` is for.
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
            lease,
            metrics,
            failover_time,
        }
    }

    fn shard_id(&self) -> &str {
        self.lease.shard_id()
    }

    /// Writes a non-empty batch: record pending → PUT → checkpoint.
    ///
    /// # Errors
    /// [`ShardError`]; transient failures are retried here with backoff.
    pub async fn write(
        &self,
        batch: Batch,
        reason: FlushReason,
    ) -> Result<WrittenBatch, ShardError> {
        let range = batch.range().ok_or_else(|| ShardError::Internal {
            shard_id: self.shard_id().to_owned(),
            message: "write called with an empty batch",
        })?;
        let key = self.layout.object_key(
            batch.minute(),
            self.shard_id(),
            &range,
            self.compression.codec(),
        );
        let (first, last) = range.into_bounds();
        let pending = PendingBatch { key, first, last };
        failpoint("before-pending").await;
        self.lease_write("record pending batch", || {
            self.lease.record_pending_batch(&pending)
        })
        .await?;
        failpoint("after-pending").await;
        self.put_and_checkpoint(&pending, self.compression, batch, reason)
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
        pending: &PendingBatch,
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
        pending: &PendingBatch,
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
            .put(&pending.key, body.clone(), compression.codec(), &lines)
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
        Ok(WrittenBatch {
            key: pending.key.clone(),
            last: pending.last.to_string(),
            outcome,
        })
    }

    /// PUT with `If-None-Match: *`, retried until it succeeds or the lease is
    /// lost; a 412 is checked against the records.
    async fn put(
        &self,
        key: &str,
        body: Bytes,
        codec: CompressionCodec,
        lines: &Bytes,
    ) -> Result<PutOutcome, ShardError> {
        let mut backoff = Backoff::transient();
        let mut persistent = Backoff::persistent();
        loop {
            let put = self
                .store
                .put_if_absent(key, body.clone(), compression::content_type(codec));
            let Some(attempt) = self.within_lease(put).await else {
                // The lease was not confirmed in time: another worker could
                // take it. Confirm it (or learn it is lost), then try again.
                warn!(
                    key,
                    "lease not confirmed recently; confirming it before writing"
                );
                self.lease_write("renew", || self.lease.renew()).await?;
                continue;
            };
            if matches!(attempt, Ok(PutOutcome::AlreadyExists)) {
                self.metrics.conditional_write_conflicts.inc();
            }
            let err = match attempt {
                Ok(PutOutcome::Created) => return Ok(PutOutcome::Created),
                Ok(PutOutcome::AlreadyExists) => match self.same_records(key, codec, lines).await {
                    Ok(true) => return Ok(PutOutcome::AlreadyExists),
                    Ok(false) => {
                        error!(key, "object exists with different records");
                        return Err(ShardError::ObjectConflict {
                            bucket: self.store.bucket().to_owned(),
                            key: key.to_owned(),
                        });
                    }
                    Err(err) => err,
                },
                Err(err) => err,
            };
            if self.lease.is_lost() {
                // The batch is recorded in the row; the new owner replays it.
                return Err(ShardError::LeaseLost {
                    shard_id: self.shard_id().to_owned(),
                });
            }
            self.metrics.retry(if err.is_throttling() {
                RetryCause::s3_throttled
            } else {
                RetryCause::s3_error
            });
            let delay = retry_delay(&err, &mut backoff, &mut persistent);
            warn!(key, error = %error_chain(&err), ?delay, "s3 write failed; retrying");
            tokio::time::sleep(delay).await;
        }
    }

    /// Runs `write` only as long as the lease is confirmed: it is abandoned
    /// (`None`) once `LEASE_MARGIN` before the moment another worker could
    /// see the lease expire (last confirmation + failover time). Renewals,
    /// which keep going meanwhile, push that moment on. So a worker that
    /// loses its lease — or is paused, or sees its lease table vanish — cannot
    /// land a write after the next owner started: whoever takes the lease
    /// lists the shard after this write ended (DESIGN.md, "Fencing S3 writes").
    async fn within_lease<F: Future>(&self, write: F) -> Option<F::Output> {
        tokio::pin!(write);
        loop {
            let deadline =
                self.lease.confirmed_at() + self.failover_time.saturating_sub(LEASE_MARGIN);
            if deadline <= tokio::time::Instant::now() {
                return None;
            }
            // Deadline first: a worker resumed after a pause (SIGSTOP) past
            // its deadline abandons the write as soon as this task runs. The
            // HTTP connection is driven by a task of its own, which may send
            // a little more of the body first (DESIGN.md, "Known limits").
            tokio::select! {
                biased;
                () = tokio::time::sleep_until(deadline) => {}
                output = &mut write => return Some(output),
            }
        }
    }

    /// Whether the existing object `key` holds the same records as `lines`,
    /// line by line: byte-equal, or else the same sequence number,
    /// sub-sequence number and data (an older shardsink may have encoded the
    /// same records differently). The object is streamed and decompressed a
    /// buffer at a time, so neither it nor its decompressed copy is ever held
    /// whole.
    async fn same_records(
        &self,
        key: &str,
        codec: CompressionCodec,
        lines: &Bytes,
    ) -> Result<bool, S3Error> {
        let body = self.store.get_stream(key).await?.into_async_read();
        let expected = lines.clone();
        let compared = tokio::task::spawn_blocking(move || {
            let source = TrackedRead::new(SyncIoBridge::new(body));
            let read_failed = source.failed.clone();
            let result = compare_lines(codec, std::io::BufReader::new(source), &expected);
            (result, read_failed.load(Ordering::Relaxed))
        })
        .await;
        let retriable = |source: BoxError| S3Error::Other {
            operation: "GetObject",
            bucket: self.store.bucket().to_owned(),
            key: key.to_owned(),
            retriable: true,
            throttled: false,
            source,
        };
        match compared {
            Ok((Ok(comparison), _)) => {
                if comparison == Comparison::SameRecords {
                    warn!(
                        key,
                        "existing object holds the same records in another encoding"
                    );
                }
                Ok(comparison != Comparison::Different)
            }
            // Reading the object failed (a dropped connection): try again.
            Ok((Err(err), true)) => Err(retriable(Box::new(err))),
            // The bytes arrived but do not decode: not these records.
            Ok((Err(err), false)) => {
                warn!(key, error = %err, "existing object does not decompress");
                Ok(false)
            }
            Err(join_error) => Err(retriable(Box::new(join_error))),
        }
    }

    /// Runs a lease write, retrying transient DynamoDB failures; a lost lease
    /// or a missing table ends the shard task.
    async fn lease_write<F, Fut>(&self, what: &'static str, op: F) -> Result<(), ShardError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<(), LeaseError>>,
    {
        let mut backoff = Backoff::transient();
        let mut persistent = Backoff::persistent();
        let is_checkpoint = what == "checkpoint";
        loop {
            let result = op().await;
            if is_checkpoint {
                self.metrics.checkpoint(self.shard_id(), result.is_ok());
            }
            match result {
                Ok(()) => return Ok(()),
                Err(err) if err.is_lease_lost() => {
                    return Err(ShardError::LeaseLost {
                        shard_id: self.shard_id().to_owned(),
                    });
                }
                Err(err @ LeaseError::TableMissing { .. }) => {
                    return Err(ShardError::TableMissing(err));
                }
                Err(err) => {
                    self.metrics.retry(if err.is_throttling() {
                        RetryCause::dynamodb_throttled
                    } else {
                        RetryCause::dynamodb_error
                    });
                    let delay = if err.is_retriable() {
                        backoff.next_delay()
                    } else {
                        persistent.next_delay()
                    };
                    warn!(operation = what, error = %error_chain(&err), ?delay, "lease write failed; retrying");
                    tokio::time::sleep(delay).await;
                }
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

fn retry_delay(err: &S3Error, transient: &mut Backoff, persistent: &mut Backoff) -> Duration {
    if err.is_retriable() {
        transient.next_delay()
    } else {
        persistent.next_delay()
    }
}

/// How an existing object's lines compare with a batch's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Comparison {
    /// Byte for byte.
    SameBytes,
    /// The same records, encoded differently.
    SameRecords,
    /// Other records.
    Different,
}

/// Compares the lines `existing` decodes to (with `codec`) with `expected`,
/// one line at a time.
///
/// # Errors
/// I/O errors from reading or decoding `existing`.
fn compare_lines(
    codec: CompressionCodec,
    existing: impl std::io::BufRead,
    expected: &[u8],
) -> std::io::Result<Comparison> {
    use std::io::BufRead as _;

    let mut existing = std::io::BufReader::new(compression::decoder(codec, existing)?);
    let mut expected = expected.split_inclusive(|b| *b == b'\n');
    let mut line = Vec::new();
    let mut comparison = Comparison::SameBytes;
    loop {
        line.clear();
        existing.read_until(b'\n', &mut line)?;
        match (line.is_empty(), expected.next()) {
            (true, None) => return Ok(comparison),
            (true, Some(_)) | (false, None) => return Ok(Comparison::Different),
            (false, Some(want)) if line == want => {}
            (false, Some(want)) => match (identity(&line), identity(want)) {
                (Some(have), Some(want)) if have == want => {
                    comparison = Comparison::SameRecords;
                }
                _ => return Ok(Comparison::Different),
            },
        }
    }
}

/// A line's record identity: sequence number, sub-sequence number, data.
fn identity(line: &[u8]) -> Option<(Value, Value, Value)> {
    let value: Value = serde_json::from_slice(line).ok()?;
    Some((
        value.get("sequenceNumber")?.clone(),
        value
            .get("subSequenceNumber")
            .cloned()
            .unwrap_or(Value::Null),
        value.get("data")?.clone(),
    ))
}

/// A reader that remembers whether it failed, to tell a failed download
/// from a body that does not decode.
struct TrackedRead<R> {
    inner: R,
    failed: Arc<AtomicBool>,
}

impl<R> TrackedRead<R> {
    fn new(inner: R) -> Self {
        Self {
            inner,
            failed: Arc::default(),
        }
    }
}

impl<R: std::io::Read> std::io::Read for TrackedRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(buf).inspect_err(|_| {
            self.failed.store(true, Ordering::Relaxed);
        })
    }
}

/// An error and its sources, `: `-separated, for one log field.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use shard_lease::{Lease, LeaseTable};
    use tokio::time::Instant;

    use super::*;
    use crate::fake_aws::{self, FakeBucket, FakeStream, FakeTable};
    use crate::output::key::KeyLayout;

    const FAILOVER: Duration = Duration::from_secs(10);

    async fn writer() -> BatchWriter {
        let (stream, bucket, table) = (
            Arc::new(FakeStream::default()),
            Arc::new(FakeBucket::default()),
            Arc::new(FakeTable::default()),
        );
        let clients = fake_aws::clients(stream, bucket, table);
        let lease_table = LeaseTable::new(clients.dynamodb, "leases");
        let lease = Lease::new(
            "shardId-000000000000",
            shard_lease::Checkpoint::TrimHorizon,
            vec![],
        );
        lease_table.create_lease(&lease).await.unwrap();
        let taken_at = Instant::now();
        let taken = lease_table.take_lease(&lease, "worker-1").await.unwrap();
        BatchWriter::new(
            ObjectStore::new(clients.s3, "bucket"),
            KeyLayout::new("p"),
            Compression::None,
            Arc::new(HeldLease::new(lease_table, taken, taken_at)),
            Arc::new(Metrics::new()),
            FAILOVER,
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_cannot_outlive_the_lease_confirmation() {
        let writer = writer().await;
        let started = Instant::now();
        let outcome = writer
            .within_lease(tokio::time::sleep(Duration::from_secs(30)))
            .await;
        assert!(outcome.is_none(), "abandoned");
        assert_eq!(
            started.elapsed(),
            FAILOVER - LEASE_MARGIN,
            "before anyone could see the lease expire"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_let_a_long_write_finish() {
        let writer = writer().await;
        let lease = writer.lease.clone();
        // Renew every 3 s while a 25 s write runs.
        let renewals = tokio::spawn(async move {
            for _ in 0..10 {
                tokio::time::sleep(Duration::from_secs(3)).await;
                lease.renew().await.unwrap();
            }
        });
        let outcome = writer
            .within_lease(tokio::time::sleep(Duration::from_secs(25)))
            .await;
        assert!(outcome.is_some(), "the lease stayed confirmed");
        renewals.abort();
    }

    fn compare(existing: &[u8], expected: &[u8]) -> std::io::Result<Comparison> {
        let body = Compression::Zstd(3).compress(existing).unwrap();
        compare_lines(CompressionCodec::Zstd, &body[..], expected)
    }

    #[test]
    fn an_existing_object_is_compared_line_by_line() {
        let lines = b"{\"sequenceNumber\":\"1\",\"partitionKey\":\"a\",\"data\":\"eA==\"}\n\
                      {\"sequenceNumber\":\"2\",\"partitionKey\":\"b\",\"data\":\"eQ==\"}\n";
        assert_eq!(compare(lines, lines).unwrap(), Comparison::SameBytes);
        // The same records with the fields in another order.
        let reencoded = b"{\"data\":\"eA==\",\"sequenceNumber\":\"1\"}\n\
                          {\"data\":\"eQ==\",\"sequenceNumber\":\"2\"}\n";
        assert_eq!(compare(reencoded, lines).unwrap(), Comparison::SameRecords);
        let other_data = b"{\"sequenceNumber\":\"1\",\"partitionKey\":\"a\",\"data\":\"eA==\"}\n\
                           {\"sequenceNumber\":\"2\",\"partitionKey\":\"b\",\"data\":\"eg==\"}\n";
        assert_eq!(compare(other_data, lines).unwrap(), Comparison::Different);
        let first_only = &lines[..lines.iter().position(|b| *b == b'\n').unwrap() + 1];
        assert_eq!(compare(first_only, lines).unwrap(), Comparison::Different);
        assert_eq!(compare(lines, first_only).unwrap(), Comparison::Different);
        assert!(
            compare_lines(CompressionCodec::Zstd, &b"not zstd"[..], lines).is_err(),
            "a body that does not decode is an error, not a match"
        );
    }
}

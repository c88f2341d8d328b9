//! [`HeldLease`]: a lease this worker holds, shared by the task that renews
//! leases and the task that reads and writes the shard.

use tokio::sync::Mutex;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::{Checkpoint, Lease, LeaseError, LeaseTable, PendingBatch, WriteToken};

/// A lease held by this worker.
///
/// Writes go through one mutex, so a renewal and a checkpoint from different
/// tasks never race each other on `leaseCounter` (they would otherwise both
/// send the same expected counter and one would look like a lost lease).
///
/// Once any write finds the lease lost, [`lost`](Self::lost) is cancelled and
/// every later write fails at once with [`LeaseError::LeaseLost`] without
/// calling DynamoDB: a worker that lost a lease writes nothing more for it.
///
/// A write that failed in a way that may have applied (a timeout, a 5xx, a
/// dropped connection: any retriable error) is *in doubt*. Its retry — the
/// same write again — carries the same [`WriteToken`], so if the first
/// attempt did apply, the retry finds its own token in the row and succeeds.
/// Any other write first reads the row and adopts it if it carries the
/// doubtful write's token. Either way an applied write is never mistaken for
/// a lost lease.
#[derive(Debug)]
pub struct HeldLease {
    table: LeaseTable,
    shard_id: String,
    state: Mutex<State>,
    lost: CancellationToken,
    /// When the last successful write to the row *started*: the row was
    /// surely ours at that moment, and no other worker can see the lease
    /// expire before this instant plus the failover time.
    confirmed_at: std::sync::Mutex<Instant>,
}

/// The row as this worker last wrote or read it, and a write in doubt.
#[derive(Debug)]
struct State {
    lease: Lease,
    in_doubt: Option<InDoubt>,
}

/// A write whose last attempt failed in a way that may have applied.
#[derive(Debug)]
struct InDoubt {
    write: LeaseWrite,
    token: WriteToken,
    /// When its first attempt started: if any attempt applied, the row was
    /// ours from no earlier than this.
    started: Instant,
}

/// One owner write, with what it writes: the same value twice is a retry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LeaseWrite {
    Renew,
    RecordPendingBatch(PendingBatch),
    Checkpoint(Checkpoint),
    StageBatch(String),
    CheckpointCommitted {
        checkpoint: Checkpoint,
        keep: Vec<String>,
    },
    Release,
}

impl LeaseWrite {
    /// Whether `lease` already shows this write's effect, so it need not be
    /// sent again (an in-doubt write adopted from the row).
    fn is_done_in(&self, lease: &Lease) -> bool {
        match self {
            Self::Renew => false,
            Self::RecordPendingBatch(batch) => lease.pending_batch.as_ref() == Some(batch),
            Self::Checkpoint(checkpoint) => {
                lease.checkpoint == *checkpoint && lease.pending_batch.is_none()
            }
            Self::StageBatch(entry) => {
                lease.staged_batches.last() == Some(entry) && lease.pending_batch.is_none()
            }
            Self::CheckpointCommitted { checkpoint, keep } => {
                lease.checkpoint == *checkpoint && lease.staged_batches == *keep
            }
            Self::Release => lease.lease_owner.is_none(),
        }
    }
}

impl HeldLease {
    /// Wraps a lease this worker has just taken (its `lease_owner` is this
    /// worker); `taken_at` is when the take request started.
    pub fn new(table: LeaseTable, lease: Lease, taken_at: Instant) -> Self {
        debug_assert!(lease.lease_owner.is_some(), "a held lease has an owner");
        Self {
            table,
            shard_id: lease.lease_key.clone(),
            state: Mutex::new(State {
                lease,
                in_doubt: None,
            }),
            lost: CancellationToken::new(),
            confirmed_at: std::sync::Mutex::new(taken_at),
        }
    }

    /// Start of the last successful write (take, renew, pending batch,
    /// checkpoint, staged batch). A worker that lost the lease cannot see it confirmed
    /// again; another worker takes the lease only after it has been
    /// unchanged for the failover time, i.e. not before
    /// `confirmed_at() + failover time`. Writes to S3 that must not outlive
    /// the lease end before that.
    pub fn confirmed_at(&self) -> Instant {
        *self
            .confirmed_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The shard id.
    pub fn shard_id(&self) -> &str {
        &self.shard_id
    }

    /// A copy of the row as this worker last wrote or read it.
    pub async fn snapshot(&self) -> Lease {
        self.state.lock().await.lease.clone()
    }

    /// Cancelled when the lease is found lost; shard tasks `select!` on it.
    pub fn lost(&self) -> &CancellationToken {
        &self.lost
    }

    /// Whether the lease has been found lost.
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    /// Renews the lease ([`LeaseTable::renew_lease`]).
    ///
    /// # Errors
    /// As [`LeaseTable::renew_lease`]; `LeaseLost` at once after a loss.
    pub async fn renew(&self) -> Result<(), LeaseError> {
        self.write(LeaseWrite::Renew).await
    }

    /// Records the batch about to be written ([`LeaseTable::record_pending_batch`]).
    ///
    /// # Errors
    /// As [`LeaseTable::record_pending_batch`]; `LeaseLost` at once after a loss.
    pub async fn record_pending_batch(&self, batch: &PendingBatch) -> Result<(), LeaseError> {
        self.write(LeaseWrite::RecordPendingBatch(batch.clone()))
            .await
    }

    /// Checkpoints and clears the pending batch ([`LeaseTable::checkpoint`]).
    ///
    /// # Errors
    /// As [`LeaseTable::checkpoint`]; `LeaseLost` at once after a loss.
    pub async fn checkpoint(&self, checkpoint: &Checkpoint) -> Result<(), LeaseError> {
        self.write(LeaseWrite::Checkpoint(checkpoint.clone())).await
    }

    /// Stages a batch for an Iceberg table ([`LeaseTable::stage_batch`]):
    /// appends `entry` to the row's staged batches and clears the pending
    /// batch; the checkpoint stays.
    ///
    /// # Errors
    /// As [`LeaseTable::stage_batch`] (`StagedFull` leaves the lease held);
    /// `LeaseLost` at once after a loss.
    pub async fn stage_batch(&self, entry: &str) -> Result<(), LeaseError> {
        self.write(LeaseWrite::StageBatch(entry.to_owned())).await
    }

    /// Moves the checkpoint to the end a table commit reached and keeps
    /// only `keep` of the staged batches
    /// ([`LeaseTable::checkpoint_committed`]); `keep` is taken from the
    /// staged batches of [`snapshot`](Self::snapshot), which only this
    /// lease's writes change.
    ///
    /// # Errors
    /// As [`LeaseTable::checkpoint_committed`]; `LeaseLost` at once after a
    /// loss.
    pub async fn checkpoint_committed(
        &self,
        checkpoint: &Checkpoint,
        keep: &[String],
    ) -> Result<(), LeaseError> {
        self.write(LeaseWrite::CheckpointCommitted {
            checkpoint: checkpoint.clone(),
            keep: keep.to_vec(),
        })
        .await
    }

    /// Releases the lease ([`LeaseTable::release_lease`]); afterwards the lease
    /// counts as lost for this worker. A retriable failure (throttling) leaves
    /// the lease held, so the caller can try again.
    ///
    /// # Errors
    /// As [`LeaseTable::release_lease`]; `LeaseLost` at once after a loss.
    pub async fn release(&self) -> Result<(), LeaseError> {
        let result = self.write(LeaseWrite::Release).await;
        if !matches!(&result, Err(err) if err.is_retriable()) {
            self.lost.cancel();
        }
        result
    }

    /// Sends `write` against the current row under the lock and keeps the row
    /// it returns, settling a write in doubt first (see the type's docs).
    async fn write(&self, write: LeaseWrite) -> Result<(), LeaseError> {
        let mut state = self.state.lock().await;
        if self.lost.is_cancelled() {
            return Err(LeaseError::LeaseLost {
                shard_id: self.shard_id.clone(),
            });
        }
        let (token, started) = match state.in_doubt.take() {
            // A retry: the same token, and confirmation no later than the
            // first attempt's start, whichever attempt applied.
            Some(doubt) if doubt.write == write => (doubt.token, doubt.started),
            Some(doubt) => {
                if let Err(err) = self.settle(&mut state, &doubt).await {
                    state.in_doubt = Some(doubt);
                    return Err(self.note_failure(err));
                }
                (WriteToken::random(), Instant::now())
            }
            None => (WriteToken::random(), Instant::now()),
        };
        // E.g. the retry of a write in doubt that another write found
        // applied.
        if write.is_done_in(&state.lease) {
            return Ok(());
        }
        let lease = state.lease.clone();
        let result = match &write {
            LeaseWrite::Renew => self.table.renew_lease(&lease, &token).await,
            LeaseWrite::RecordPendingBatch(batch) => {
                self.table.record_pending_batch(&lease, batch, &token).await
            }
            LeaseWrite::Checkpoint(checkpoint) => {
                self.table.checkpoint(&lease, checkpoint, &token).await
            }
            LeaseWrite::StageBatch(entry) => self.table.stage_batch(&lease, entry, &token).await,
            LeaseWrite::CheckpointCommitted { checkpoint, keep } => {
                self.table
                    .checkpoint_committed(&lease, checkpoint, keep, &token)
                    .await
            }
            LeaseWrite::Release => self.table.release_lease(&lease, &token).await,
        };
        match result {
            Ok(lease) => {
                state.lease = lease;
                self.confirm(started);
                Ok(())
            }
            Err(err) => {
                if err.is_retriable() {
                    state.in_doubt = Some(InDoubt {
                        write,
                        token,
                        started,
                    });
                }
                Err(self.note_failure(err))
            }
        }
    }

    /// Reads the row after a write in doubt and adopts it if it carries
    /// that write's token (the write applied). Otherwise the write did not
    /// apply, or something wrote after it; either way the next conditional
    /// write finds out.
    async fn settle(&self, state: &mut State, doubt: &InDoubt) -> Result<(), LeaseError> {
        match self.table.get_lease(&self.shard_id).await? {
            Some(row) if row.last_write_token.as_deref() == Some(doubt.token.as_str()) => {
                debug!(shard_id = %self.shard_id, "a lease write in doubt had applied");
                state.lease = row;
                self.confirm(doubt.started);
            }
            _ => {}
        }
        Ok(())
    }

    fn confirm(&self, started: Instant) {
        *self
            .confirmed_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = started;
    }

    /// Cancels [`lost`](Self::lost) when `err` says the lease is gone.
    fn note_failure(&self, err: LeaseError) -> LeaseError {
        if err.is_lease_lost() || matches!(err, LeaseError::TableMissing { .. }) {
            warn!(shard_id = %self.shard_id, error = %err, "lease lost");
            self.lost.cancel();
        }
        err
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
    use std::sync::Arc;

    use aws_sdk_dynamodb::operation::update_item::{
        UpdateItemError, UpdateItemInput, UpdateItemOutput,
    };
    use aws_sdk_dynamodb::types::error::ConditionalCheckFailedException;
    use aws_smithy_mocks::{MockResponse, Rule, RuleMode, mock, mock_client};
    use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;
    use aws_smithy_types::error::ErrorMetadata;
    use aws_smithy_types::retry::RetryConfig;
    use sequence_range::SequenceNumber;

    use super::*;
    use crate::lease::attr;
    use crate::test_util::parse_update_item;

    fn lease(counter: u64, owner: &str) -> Lease {
        let mut lease = Lease::new("shardId-000000000000", Checkpoint::TrimHorizon, vec![]);
        lease.lease_owner = Some(owner.to_owned());
        lease.lease_counter = counter;
        lease
    }

    #[tokio::test]
    async fn tracks_the_counter_across_writes() {
        let (after_renew, after_pending) = (lease(2, "me"), {
            let mut l = lease(3, "me");
            l.pending_batch = Some(PendingBatch {
                key: "k".to_owned(),
                first: SequenceNumber::from(1u64),
                last: SequenceNumber::from(2u64),
            });
            l
        });
        let (r1, r2) = (after_renew.clone(), after_pending.clone());
        let renew = mock!(Client::update_item)
            .match_requests(|input| {
                input
                    .expression_attribute_values()
                    .is_some_and(|v| v.values().any(|v| v.as_n().is_ok_and(|n| n == "1")))
            })
            .then_output(move || {
                UpdateItemOutput::builder()
                    .set_attributes(Some(r1.to_item()))
                    .build()
            });
        let pending = mock!(Client::update_item)
            .match_requests(|input| {
                input
                    .expression_attribute_values()
                    .is_some_and(|v| v.values().any(|v| v.as_n().is_ok_and(|n| n == "2")))
            })
            .then_output(move || {
                UpdateItemOutput::builder()
                    .set_attributes(Some(r2.to_item()))
                    .build()
            });
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&renew, &pending]);
        let held = held_at_counter_1(client);
        held.renew().await.unwrap();
        held.record_pending_batch(after_pending.pending_batch.as_ref().unwrap())
            .await
            .unwrap();
        assert_eq!(held.snapshot().await, after_pending);
        assert_eq!((renew.num_calls(), pending.num_calls()), (1, 1));
    }

    #[tokio::test]
    async fn writes_nothing_after_the_lease_is_lost() {
        let update = mock!(Client::update_item).then_error(|| {
            UpdateItemError::ConditionalCheckFailedException(
                ConditionalCheckFailedException::builder()
                    .meta(
                        ErrorMetadata::builder()
                            .code("ConditionalCheckFailedException")
                            .build(),
                    )
                    .build(),
            )
        });
        let get = mock!(Client::get_item).then_output(|| {
            GetItemOutput::builder()
                .set_item(Some(lease(9, "other").to_item()))
                .build()
        });
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&update, &get]);
        let held = held_at_counter_1(client);
        assert!(held.renew().await.unwrap_err().is_lease_lost());
        assert!(held.is_lost());
        assert!(held.lost().is_cancelled());
        let batch = PendingBatch {
            key: "k".to_owned(),
            first: SequenceNumber::from(1u64),
            last: SequenceNumber::from(2u64),
        };
        assert!(
            held.record_pending_batch(&batch)
                .await
                .unwrap_err()
                .is_lease_lost()
        );
        assert!(
            held.checkpoint(&Checkpoint::ShardEnd)
                .await
                .unwrap_err()
                .is_lease_lost()
        );
        assert_eq!(update.num_calls(), 1, "no DynamoDB write after the loss");
    }

    /// The token an update stamps into `lastWriteToken`.
    fn stamped_token(input: &UpdateItemInput) -> String {
        let (update, _) = parse_update_item(input).unwrap();
        update
            .value_of(attr::LAST_WRITE_TOKEN)
            .unwrap()
            .as_s()
            .unwrap()
            .clone()
    }

    /// A 503 whose request DynamoDB may or may not have applied.
    fn unavailable() -> MockResponse<UpdateItemOutput, UpdateItemError> {
        MockResponse::Http(HttpResponse::new(
            StatusCode::try_from(503).unwrap(),
            SdkBody::from("{}"),
        ))
    }

    fn condition_failed() -> UpdateItemError {
        UpdateItemError::ConditionalCheckFailedException(
            ConditionalCheckFailedException::builder()
                .meta(
                    ErrorMetadata::builder()
                        .code("ConditionalCheckFailedException")
                        .build(),
                )
                .build(),
        )
    }

    fn checkpointed(counter: u64, token: &str) -> Lease {
        let mut row = lease(counter, "me");
        row.checkpoint = Checkpoint::SequenceNumber(SequenceNumber::from(9u64));
        row.last_write_token = Some(token.to_owned());
        row
    }

    /// A GetItem that returns the row as the in-doubt checkpoint left it:
    /// counter 2, stamped with the token the attempt carried.
    fn reads_checkpointed_row(stamped: Arc<std::sync::Mutex<Option<String>>>) -> Rule {
        mock!(Client::get_item).then_compute_output(move |_| {
            let token = stamped.lock().unwrap().clone().unwrap();
            GetItemOutput::builder()
                .set_item(Some(checkpointed(2, &token).to_item()))
                .build()
        })
    }

    fn held_at_counter_1(client: Client) -> HeldLease {
        HeldLease::new(
            LeaseTable::new(client, "leases"),
            lease(1, "me"),
            Instant::now(),
        )
    }

    #[tokio::test]
    async fn the_retry_of_a_write_that_applied_finds_it_applied() {
        // The first attempt applies, but its answer is lost (a 503); the
        // retry's condition then fails. With the same token the row shows
        // the write as this worker's own: not a lost lease.
        let stamped: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
        let (s1, s2) = (stamped.clone(), stamped.clone());
        let first = mock!(Client::update_item).then_compute_response(move |input| {
            *s1.lock().unwrap() = Some(stamped_token(input));
            unavailable()
        });
        let retried: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
        let r1 = retried.clone();
        let retry = mock!(Client::update_item).then_compute_response(move |input| {
            *r1.lock().unwrap() = Some(stamped_token(input));
            MockResponse::Error(condition_failed())
        });
        let read = reads_checkpointed_row(s2);
        let client = mock_client!(
            aws_sdk_dynamodb,
            RuleMode::Sequential,
            [&first, &retry, &read],
            |c| c.retry_config(RetryConfig::disabled())
        );
        let held = held_at_counter_1(client);
        let checkpoint = Checkpoint::SequenceNumber(SequenceNumber::from(9u64));
        let err = held.checkpoint(&checkpoint).await.unwrap_err();
        assert!(err.is_retriable(), "{err:?}");
        held.checkpoint(&checkpoint).await.unwrap();
        assert!(!held.is_lost());
        assert_eq!(held.snapshot().await.lease_counter, 2);
        assert_eq!(*retried.lock().unwrap(), *stamped.lock().unwrap());
    }

    #[tokio::test]
    async fn another_write_after_one_in_doubt_adopts_it_from_the_row() {
        // A checkpoint in doubt, then a renewal (from the renewer's task):
        // the renewal reads the row first, finds the checkpoint applied, and
        // writes on top of it; the checkpoint's retry then has nothing to do.
        let stamped: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
        let (s1, s2, s3) = (stamped.clone(), stamped.clone(), stamped.clone());
        let checkpoint_attempt = mock!(Client::update_item).then_compute_response(move |input| {
            *s1.lock().unwrap() = Some(stamped_token(input));
            unavailable()
        });
        let read = reads_checkpointed_row(s2);
        let renewal = mock!(Client::update_item)
            .match_requests(move |input| {
                // Conditional on the adopted row: counter 2 and its token.
                let values = input.expression_attribute_values().unwrap();
                let token = s3.lock().unwrap().clone().unwrap();
                values.values().any(|v| v.as_n().is_ok_and(|n| n == "2"))
                    && values.values().any(|v| v.as_s().is_ok_and(|s| *s == token))
            })
            .then_output(|| {
                UpdateItemOutput::builder()
                    .set_attributes(Some(checkpointed(3, "renewal").to_item()))
                    .build()
            });
        let client = mock_client!(
            aws_sdk_dynamodb,
            RuleMode::Sequential,
            [&checkpoint_attempt, &read, &renewal],
            |c| c.retry_config(RetryConfig::disabled())
        );
        let held = held_at_counter_1(client);
        let checkpoint = Checkpoint::SequenceNumber(SequenceNumber::from(9u64));
        assert!(held.checkpoint(&checkpoint).await.is_err());
        held.renew().await.unwrap();
        held.checkpoint(&checkpoint).await.unwrap();
        assert!(!held.is_lost());
        assert_eq!(held.snapshot().await.lease_counter, 3);
        assert_eq!(
            (
                checkpoint_attempt.num_calls(),
                read.num_calls(),
                renewal.num_calls()
            ),
            (1, 1, 1),
            "the checkpoint is not sent again"
        );
    }

    #[tokio::test]
    async fn a_stage_in_doubt_adopted_by_a_renewal_is_not_sent_again() {
        let entry = r#"{"files":["a.parquet"]}"#;
        let stamped: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
        let (s1, s2) = (stamped.clone(), stamped.clone());
        let stage_attempt = mock!(Client::update_item).then_compute_response(move |input| {
            *s1.lock().unwrap() = Some(stamped_token(input));
            unavailable()
        });
        let read = mock!(Client::get_item).then_compute_output(move |_| {
            let mut row = lease(2, "me");
            row.staged_batches = vec![entry.to_owned()];
            row.last_write_token = s2.lock().unwrap().clone();
            GetItemOutput::builder()
                .set_item(Some(row.to_item()))
                .build()
        });
        let renewal = mock!(Client::update_item).then_output(move || {
            let mut row = lease(3, "me");
            row.staged_batches = vec![entry.to_owned()];
            row.last_write_token = Some("renewal".to_owned());
            UpdateItemOutput::builder()
                .set_attributes(Some(row.to_item()))
                .build()
        });
        let client = mock_client!(
            aws_sdk_dynamodb,
            RuleMode::Sequential,
            [&stage_attempt, &read, &renewal],
            |c| c.retry_config(RetryConfig::disabled())
        );
        let held = held_at_counter_1(client);
        assert!(held.stage_batch(entry).await.unwrap_err().is_retriable());
        held.renew().await.unwrap();
        held.stage_batch(entry).await.unwrap();
        assert_eq!(held.snapshot().await.staged_batches, [entry]);
        assert_eq!(
            (
                stage_attempt.num_calls(),
                read.num_calls(),
                renewal.num_calls()
            ),
            (1, 1, 1),
            "the entry is not staged twice"
        );
    }
}

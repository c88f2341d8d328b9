//! [`HeldLease`]: a lease this worker holds, shared by the task that renews
//! leases and the task that reads and writes the shard.

use tokio::sync::Mutex;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::{Checkpoint, Lease, LeaseError, LeaseTable, PendingBatch};

/// A lease held by this worker.
///
/// Writes go through one mutex, so a renewal and a checkpoint from different
/// tasks never race each other on `leaseCounter` (they would otherwise both
/// send the same expected counter and one would look like a lost lease).
///
/// Once any write finds the lease lost, [`lost`](Self::lost) is cancelled and
/// every later write fails at once with [`LeaseError::LeaseLost`] without
/// calling DynamoDB: a worker that lost a lease writes nothing more for it.
#[derive(Debug)]
pub struct HeldLease {
    table: LeaseTable,
    shard_id: String,
    state: Mutex<Lease>,
    lost: CancellationToken,
    /// When the last successful write to the row *started*: the row was
    /// surely ours at that moment, and no other worker can see the lease
    /// expire before this instant plus the failover time.
    confirmed_at: std::sync::Mutex<Instant>,
}

impl HeldLease {
    /// Wraps a lease this worker has just taken (its `lease_owner` is this
    /// worker); `taken_at` is when the take request started.
    pub fn new(table: LeaseTable, lease: Lease, taken_at: Instant) -> Self {
        debug_assert!(lease.lease_owner.is_some(), "a held lease has an owner");
        Self {
            table,
            shard_id: lease.lease_key.clone(),
            state: Mutex::new(lease),
            lost: CancellationToken::new(),
            confirmed_at: std::sync::Mutex::new(taken_at),
        }
    }

    /// Start of the last successful write (take, renew, pending batch,
    /// checkpoint). A worker that lost the lease cannot see it confirmed
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
        self.state.lock().await.clone()
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
        self.write(|lease| async move { self.table.renew_lease(&lease).await })
            .await
    }

    /// Records the batch about to be written ([`LeaseTable::record_pending_batch`]).
    ///
    /// # Errors
    /// As [`LeaseTable::record_pending_batch`]; `LeaseLost` at once after a loss.
    pub async fn record_pending_batch(&self, batch: &PendingBatch) -> Result<(), LeaseError> {
        self.write(|lease| async move { self.table.record_pending_batch(&lease, batch).await })
            .await
    }

    /// Checkpoints and clears the pending batch ([`LeaseTable::checkpoint`]).
    ///
    /// # Errors
    /// As [`LeaseTable::checkpoint`]; `LeaseLost` at once after a loss.
    pub async fn checkpoint(&self, checkpoint: &Checkpoint) -> Result<(), LeaseError> {
        self.write(|lease| async move { self.table.checkpoint(&lease, checkpoint).await })
            .await
    }

    /// Releases the lease ([`LeaseTable::release_lease`]); afterwards the lease
    /// counts as lost for this worker. A retriable failure (throttling) leaves
    /// the lease held, so the caller can try again.
    ///
    /// # Errors
    /// As [`LeaseTable::release_lease`]; `LeaseLost` at once after a loss.
    pub async fn release(&self) -> Result<(), LeaseError> {
        let result = self
            .write(|lease| async move { self.table.release_lease(&lease).await })
            .await;
        if !matches!(&result, Err(err) if err.is_retriable()) {
            self.lost.cancel();
        }
        result
    }

    /// Runs `op` on a copy of the current row under the lock and keeps the row
    /// it returns.
    async fn write<F, Fut>(&self, op: F) -> Result<(), LeaseError>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = Result<Lease, LeaseError>>,
    {
        let mut state = self.state.lock().await;
        if self.lost.is_cancelled() {
            return Err(LeaseError::LeaseLost {
                shard_id: self.shard_id.clone(),
            });
        }
        let started = Instant::now();
        match op(state.clone()).await {
            Ok(lease) => {
                *state = lease;
                *self
                    .confirmed_at
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = started;
                Ok(())
            }
            Err(err) => {
                if err.is_lease_lost() || matches!(err, LeaseError::TableMissing { .. }) {
                    warn!(shard_id = %self.shard_id, error = %err, "lease lost");
                    self.lost.cancel();
                }
                Err(err)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
    use aws_sdk_dynamodb::operation::update_item::{UpdateItemError, UpdateItemOutput};
    use aws_sdk_dynamodb::types::error::ConditionalCheckFailedException;
    use aws_smithy_mocks::{RuleMode, mock, mock_client};
    use aws_smithy_types::error::ErrorMetadata;
    use sequence_range::SequenceNumber;

    use super::*;

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
        let held = HeldLease::new(
            LeaseTable::new(client, "leases"),
            lease(1, "me"),
            Instant::now(),
        );
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
        let held = HeldLease::new(
            LeaseTable::new(client, "leases"),
            lease(1, "me"),
            Instant::now(),
        );
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
}

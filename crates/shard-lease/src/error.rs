//! [`LeaseError`]: what a lease operation can end in besides success.

use std::error::Error as StdError;

use crate::{Checkpoint, MalformedLease};

/// The outcome of a lease operation that did not succeed.
///
/// `LeaseLost`, `CheckpointConflict` and `StagedConflict` are expected
/// outcomes, not failures of the system: callers match on them and stop
/// working on the shard. `StagedFull` is expected too: the caller waits for
/// a table commit before it stages more.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The lease is no longer this worker's: another worker took it, it was
    /// released, or its row is gone (table emptied). The caller must write
    /// nothing more for the shard. Also the outcome of a lost condition on
    /// the committer row (see [`crate::committer`]), with that row's key
    /// (`iceberg#committer`) as `shard_id`.
    #[error("lease lost for shard {shard_id}")]
    LeaseLost {
        /// The shard whose lease was lost (the row's `leaseKey`).
        shard_id: String,
    },
    /// The lease is still this worker's, but its checkpoint is not the one this
    /// worker last wrote — something else edited the row. The caller stops
    /// working on the shard, as for `LeaseLost`.
    #[error("checkpoint conflict on shard {shard_id}: expected {expected}, found {actual}")]
    CheckpointConflict {
        /// The shard.
        shard_id: String,
        /// The checkpoint this worker last wrote.
        expected: Checkpoint,
        /// The checkpoint in the row.
        actual: Checkpoint,
    },
    /// The lease is still this worker's and its checkpoint is the one this
    /// worker last wrote, but its staged batches (`stagedBatches`) are not
    /// the ones this worker last saw — something else edited the row, and
    /// replacing the list could drop an entry staged meanwhile. Returned by
    /// [`crate::LeaseTable::checkpoint_committed`]; the caller stops working
    /// on the shard, as for `LeaseLost`.
    #[error("staged batches of shard {shard_id} changed under their owner")]
    StagedConflict {
        /// The shard.
        shard_id: String,
    },
    /// Staging one more batch would make the row's staged entries larger
    /// than [`crate::MAX_STAGED_BYTES`] (counted as the UTF-8 bytes of the
    /// entries). Nothing was written; not retriable as such: the caller
    /// waits until a table commit lets it drop committed entries
    /// ([`crate::LeaseTable::checkpoint_committed`]), then stages again.
    #[error("staged batches of shard {shard_id} would take {bytes} bytes, over the bound")]
    StagedFull {
        /// The shard.
        shard_id: String,
        /// The UTF-8 bytes the staged entries, the new one included, would
        /// take.
        bytes: usize,
    },
    /// The lease table does not exist (DynamoDB `ResourceNotFoundException`).
    #[error("lease table {table} does not exist")]
    TableMissing {
        /// The table name.
        table: String,
    },
    /// A row could not be decoded.
    #[error(transparent)]
    Malformed(#[from] MalformedLease),
    /// A DynamoDB call failed; `retriable` tells whether trying again later may
    /// succeed (see [`crate::retry`]).
    #[error("dynamodb {operation} on lease table {table} failed")]
    Dynamo {
        /// The DynamoDB operation, e.g. `UpdateItem`.
        operation: &'static str,
        /// The table name.
        table: String,
        /// Whether a retry after a backoff may succeed.
        retriable: bool,
        /// Whether DynamoDB throttled the call (see [`crate::retry`]).
        throttled: bool,
        /// The SDK error.
        #[source]
        source: Box<dyn StdError + Send + Sync + 'static>,
    },
}

impl LeaseError {
    /// Whether the operation may succeed if tried again after a backoff
    /// (throttling, 5xx, timeouts). `LeaseLost`, `CheckpointConflict`,
    /// `StagedConflict`, `StagedFull`, `TableMissing` and `Malformed` are
    /// not.
    pub fn is_retriable(&self) -> bool {
        matches!(
            self,
            Self::Dynamo {
                retriable: true,
                ..
            }
        )
    }

    /// Whether DynamoDB throttled the call.
    pub fn is_throttling(&self) -> bool {
        matches!(
            self,
            Self::Dynamo {
                throttled: true,
                ..
            }
        )
    }

    /// Whether this worker must stop working on the shard.
    pub fn is_lease_lost(&self) -> bool {
        matches!(
            self,
            Self::LeaseLost { .. } | Self::CheckpointConflict { .. } | Self::StagedConflict { .. }
        )
    }
}

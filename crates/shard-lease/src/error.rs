//! [`LeaseError`]: what a lease operation can end in besides success.

use std::error::Error as StdError;

use crate::{Checkpoint, MalformedLease};

/// The outcome of a lease operation that did not succeed.
///
/// `LeaseLost` and `CheckpointConflict` are expected outcomes, not failures of
/// the system: callers match on them and stop working on the shard.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The lease is no longer this worker's: another worker took it, it was
    /// released, or its row is gone (table emptied). The caller must write
    /// nothing more for the shard.
    #[error("lease lost for shard {shard_id}")]
    LeaseLost {
        /// The shard whose lease was lost.
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
    /// `TableMissing` and `Malformed` are not.
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
            Self::LeaseLost { .. } | Self::CheckpointConflict { .. }
        )
    }
}

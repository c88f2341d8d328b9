//! [`ShardError`]: why a shard task stopped, other than by reaching
//! `SHARD_END` or shutdown.

use crate::aws::S3Error;
use crate::aws::retry::Stopped;
use crate::commit::error::CommitError;

/// Why a shard task stopped other than by reaching `SHARD_END` or shutdown.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    /// Writing a batch stopped: the lease was lost, the lease table is gone,
    /// an object at the batch's key holds other records, or S3 failed for
    /// good.
    #[error(transparent)]
    Commit(#[from] CommitError),
    /// The event store failed (retried after a backoff).
    #[error("event decisions for shard {shard_id} failed")]
    Events {
        /// The shard.
        shard_id: String,
        /// The store's error.
        #[source]
        source: crate::events::decider::EventError,
    },
}

impl ShardError {
    /// The lease of `shard_id` was lost; the task wrote nothing after
    /// noticing.
    pub(crate) fn lease_lost(shard_id: &str) -> Self {
        CommitError::LeaseLost {
            shard_id: shard_id.to_owned(),
        }
        .into()
    }

    /// A bug on `shard_id`: an invariant stated in the code does not hold.
    pub(crate) fn internal(shard_id: &str, message: &'static str) -> Self {
        CommitError::Internal {
            shard_id: shard_id.to_owned(),
            message,
        }
        .into()
    }

    /// See [`CommitError::from_s3_stop`].
    pub(crate) fn from_s3_stop(shard_id: &str, stopped: Stopped<S3Error>) -> Self {
        CommitError::from_s3_stop(shard_id, stopped).into()
    }

    /// Whether the task stopped because its lease was lost.
    pub(crate) fn is_lease_lost(&self) -> bool {
        matches!(self, Self::Commit(CommitError::LeaseLost { .. }))
    }

    /// Whether the task stopped because the lease table is gone.
    pub(crate) fn is_table_missing(&self) -> bool {
        matches!(self, Self::Commit(CommitError::TableMissing(_)))
    }
}

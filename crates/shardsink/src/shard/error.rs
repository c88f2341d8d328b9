//! [`ShardError`]: why a shard task stopped, other than by reaching
//! `SHARD_END` or shutdown.

use shard_lease::LeaseError;

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

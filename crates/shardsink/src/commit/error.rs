//! [`CommitError`]: why writing a batch through its lease stopped.

use shard_lease::LeaseError;

use crate::aws::S3Error;
use crate::aws::retry::Stopped;

/// Why writing a shard's batch (PUT, checkpoint, the check of an object
/// already at the key) stopped; everything else is retried where it
/// happened.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
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
    /// An S3 call failed and its retry loop stopped for another reason than
    /// the lease being lost (a failure classified final, or too many).
    #[error("s3 call for shard {shard_id} failed")]
    S3 {
        /// The shard.
        shard_id: String,
        /// The last error.
        #[source]
        source: S3Error,
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

impl CommitError {
    /// What an S3 retry loop bound to the lease (see `Retry::until`) ending
    /// without a result means: the lease was lost when it was cancelled,
    /// an S3 failure otherwise.
    pub(crate) fn from_s3_stop(shard_id: &str, stopped: Stopped<S3Error>) -> Self {
        match stopped {
            Stopped::Cancelled => Self::LeaseLost {
                shard_id: shard_id.to_owned(),
            },
            Stopped::Final(source) | Stopped::GaveUp(source) => Self::S3 {
                shard_id: shard_id.to_owned(),
                source,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_cancelled_s3_retry_means_the_lease_was_lost() {
        let failure = || S3Error::Other {
            operation: "PutObject",
            bucket: "b".to_owned(),
            key: "k".to_owned(),
            retriable: false,
            throttled: false,
            source: "denied".into(),
        };
        assert!(matches!(
            CommitError::from_s3_stop("s", Stopped::Cancelled),
            CommitError::LeaseLost { .. }
        ));
        for stopped in [Stopped::Final(failure()), Stopped::GaveUp(failure())] {
            assert!(matches!(
                CommitError::from_s3_stop("s", stopped),
                CommitError::S3 { .. }
            ));
        }
    }
}

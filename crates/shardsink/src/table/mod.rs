//! Apache Iceberg tables: the table shardsink writes into with
//! `--format iceberg`, and committing staged data files to it exactly once.
//!
//! - `catalog`: the catalog kinds and their settings (SQLite URIs, table
//!   names, warehouses), and opening a catalog;
//! - `create`: the table shardsink creates (the `parquet` format's columns,
//!   partitioned by arrival day or hour), and finding or creating it;
//! - `state`: [`CommitState`](state::CommitState), each shard's committed
//!   end, which every commit writes beside its snapshot; the staged batches;
//!   the plan of which staged batches continue the table;
//! - `staging`: a batch's data file paths and the staged batch recorded
//!   in the lease row;
//! - `commit`: one table commit of staged batches, pinned to the table it
//!   was planned on, with the check of a commit whose outcome is unknown.
//! - `expiry`: dropping snapshots older than the retention from the
//!   table's metadata;
//! - `sink`: what a shard's writer needs of the table (data file keys,
//!   staged entries, committed ends, published states);
//!
//! Why each record ends up in exactly one live data file: docs/DESIGN.md,
//! "Iceberg tables".

pub(crate) mod catalog;
pub(crate) mod commit;
pub(crate) mod committer;
pub(crate) mod create;
pub(crate) mod expiry;
pub(crate) mod sink;
pub(crate) mod staging;
pub(crate) mod state;

#[cfg(test)]
pub(crate) mod test_support;

use crate::aws::retry::{Classify, Failure};
use crate::ops::metrics::RetryCause;

/// A catalog or table call that failed ([`iceberg::Error`]), as the retry
/// loop takes it. What the catalog refuses as it is — data or a feature it
/// does not take, a table or namespace that is not there — waits for an
/// operator (retried slowly, logged as an error). Anything else is
/// iceberg's catch-all `Unexpected`, which covers I/O and 5xx as well as
/// what the AWS catalogs answer for access denied or a wrong endpoint
/// (iceberg-catalog-glue and -s3tables map every SDK error to it): at
/// start-up it is waited out slowly too, as the other start-up steps wait
/// for permissions ([`starting`](Self::starting)); while shards run, it is
/// retried soon ([`running`](Self::running)). Counted as
/// `shardsink_retries_total{cause="iceberg_error"}`.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub(crate) struct CatalogError {
    #[source]
    error: iceberg::Error,
    /// How an `Unexpected` error is retried.
    unexpected: Failure,
}

impl CatalogError {
    /// A start-up call's error.
    pub(crate) fn starting(error: iceberg::Error) -> Self {
        Self {
            error,
            unexpected: Failure::Persistent(RetryCause::iceberg_error),
        }
    }

    /// The error of a call made while shards run.
    pub(crate) fn running(error: iceberg::Error) -> Self {
        Self {
            error,
            unexpected: Failure::Transient(RetryCause::iceberg_error),
        }
    }

    /// A setting the catalog refuses (invalid data, an unsupported
    /// feature): at start-up, no retry helps.
    pub(crate) fn is_setting(&self) -> bool {
        matches!(
            self.error.kind(),
            iceberg::ErrorKind::DataInvalid | iceberg::ErrorKind::FeatureUnsupported
        )
    }
}

impl Classify for CatalogError {
    fn classify(&self) -> Failure {
        match self.error.kind() {
            iceberg::ErrorKind::DataInvalid
            | iceberg::ErrorKind::FeatureUnsupported
            | iceberg::ErrorKind::TableNotFound
            | iceberg::ErrorKind::NamespaceNotFound => {
                Failure::Persistent(RetryCause::iceberg_error)
            }
            iceberg::ErrorKind::Unexpected => self.unexpected,
            _ => Failure::Transient(RetryCause::iceberg_error),
        }
    }
}

#[cfg(test)]
mod tests {
    use iceberg::ErrorKind;

    use super::*;

    #[test]
    fn what_the_catalog_refuses_waits_for_an_operator_and_unexpected_errors_at_start_up_too() {
        let persistent = Failure::Persistent(RetryCause::iceberg_error);
        let transient = Failure::Transient(RetryCause::iceberg_error);
        let error = |kind| iceberg::Error::new(kind, "x");
        for kind in [
            ErrorKind::DataInvalid,
            ErrorKind::FeatureUnsupported,
            ErrorKind::TableNotFound,
            ErrorKind::NamespaceNotFound,
        ] {
            assert_eq!(
                CatalogError::running(error(kind)).classify(),
                persistent,
                "{kind}"
            );
            assert_eq!(
                CatalogError::starting(error(kind)).classify(),
                persistent,
                "{kind}"
            );
        }
        let unexpected = || error(ErrorKind::Unexpected);
        assert_eq!(CatalogError::running(unexpected()).classify(), transient);
        assert_eq!(CatalogError::starting(unexpected()).classify(), persistent);
        let conflict = || error(ErrorKind::CatalogCommitConflicts);
        assert_eq!(CatalogError::starting(conflict()).classify(), transient);
        assert!(CatalogError::starting(error(ErrorKind::DataInvalid)).is_setting());
        assert!(!CatalogError::starting(error(ErrorKind::TableNotFound)).is_setting());
        assert!(!CatalogError::starting(unexpected()).is_setting());
    }
}

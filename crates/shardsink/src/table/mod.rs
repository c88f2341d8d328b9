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
/// loop takes it: what the catalog refuses as it is — data or a feature it
/// does not take, a table or namespace that is not there — waits for an
/// operator (retried slowly, logged as an error); anything else (iceberg's
/// `Unexpected`: I/O, a 5xx, throttling) is retried soon. Counted as
/// `shardsink_retries_total{cause="iceberg_error"}`.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub(crate) struct CatalogError(pub(crate) iceberg::Error);

impl CatalogError {
    /// A setting the catalog refuses (invalid data, an unsupported
    /// feature): at start-up, no retry helps.
    pub(crate) fn is_setting(&self) -> bool {
        matches!(
            self.0.kind(),
            iceberg::ErrorKind::DataInvalid | iceberg::ErrorKind::FeatureUnsupported
        )
    }
}

impl Classify for CatalogError {
    fn classify(&self) -> Failure {
        match self.0.kind() {
            iceberg::ErrorKind::DataInvalid
            | iceberg::ErrorKind::FeatureUnsupported
            | iceberg::ErrorKind::TableNotFound
            | iceberg::ErrorKind::NamespaceNotFound => {
                Failure::Persistent(RetryCause::iceberg_error)
            }
            _ => Failure::Transient(RetryCause::iceberg_error),
        }
    }
}

#[cfg(test)]
mod tests {
    use iceberg::ErrorKind;

    use super::*;

    #[test]
    fn what_the_catalog_refuses_waits_for_an_operator_the_rest_is_retried_soon() {
        let error = |kind| CatalogError(iceberg::Error::new(kind, "x"));
        for kind in [
            ErrorKind::DataInvalid,
            ErrorKind::FeatureUnsupported,
            ErrorKind::TableNotFound,
            ErrorKind::NamespaceNotFound,
        ] {
            assert_eq!(
                error(kind).classify(),
                Failure::Persistent(RetryCause::iceberg_error),
                "{kind}"
            );
        }
        for kind in [ErrorKind::Unexpected, ErrorKind::CatalogCommitConflicts] {
            assert_eq!(
                error(kind).classify(),
                Failure::Transient(RetryCause::iceberg_error),
                "{kind}"
            );
        }
        assert!(error(ErrorKind::DataInvalid).is_setting());
        assert!(!error(ErrorKind::TableNotFound).is_setting());
        assert!(!error(ErrorKind::Unexpected).is_setting());
    }
}

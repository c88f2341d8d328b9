//! Snapshot expiry: the committer drops snapshots older than
//! `--iceberg-snapshot-retention` from the table's metadata, so that its
//! metadata file does not grow with every commit
//! ([Iceberg spec, "Snapshot retention"][retention]). The current snapshot
//! always stays, and with it every live data file; what a dropped snapshot
//! alone referenced is left for the catalog's maintenance or compaction to
//! delete (shardsink deletes no file).
//!
//! An expiry is a metadata-only commit: iceberg's own transaction, retried
//! by iceberg on a conflict (it computes the snapshots to drop again on the
//! newer table, which is always safe).
//!
//! [retention]: https://iceberg.apache.org/spec/#snapshot-retention-policy

use std::time::Duration;

use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, Result as IcebergResult, TableIdent};
use tracing::info;

use super::catalog::load_table;

/// How often the committer expires snapshots, at most.
pub const EXPIRY_INTERVAL: Duration = Duration::from_secs(3600);

/// Drops the snapshots of `table` whose timestamp is older than
/// `older_than_ms` (milliseconds since the Unix epoch), keeping the current
/// one. Returns how many were dropped.
///
/// # Errors
/// The catalog's errors.
pub async fn expire_snapshots(
    catalog: &dyn Catalog,
    table: &TableIdent,
    older_than_ms: i64,
) -> IcebergResult<usize> {
    let loaded = load_table(catalog, table).await?;
    let before = loaded.metadata().snapshots().count();
    let tx = Transaction::new(&loaded);
    let tx = tx
        .expire_snapshots()
        .expire_older_than_ms(older_than_ms)
        .retain_last(1)
        .apply(tx)?;
    let after = tx.commit(catalog).await?.metadata().snapshots().count();
    let dropped = before.saturating_sub(after);
    if dropped > 0 {
        info!(table = %table, dropped, kept = after, "snapshots expired");
    }
    Ok(dropped)
}

/// The cutoff of a retention: now minus `retention`, in milliseconds since
/// the Unix epoch.
pub fn cutoff(retention: Duration) -> i64 {
    let retention = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
    chrono::Utc::now()
        .timestamp_millis()
        .saturating_sub(retention)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::commit::{commit_staged, read_state};
    use crate::table::test_support::{events_table, live_files, memory_catalog, staged};

    #[tokio::test]
    async fn old_snapshots_go_and_the_current_one_keeps_every_live_file() {
        let catalog = memory_catalog().await;
        let (ident, table) = events_table(&catalog).await;
        for (after, last) in [("TRIM_HORIZON", "10"), ("10", "20"), ("20", "30")] {
            let batch = [staged(&table, "s0", after, last, 20000)];
            commit_staged(&catalog, &ident, &batch).await.unwrap();
        }
        // Nothing is older than a day.
        let kept = expire_snapshots(&catalog, &ident, cutoff(Duration::from_secs(86_400)))
            .await
            .unwrap();
        assert_eq!(kept, 0);
        // Everything is older than the end of time but the current one.
        let dropped = expire_snapshots(&catalog, &ident, i64::MAX).await.unwrap();
        assert_eq!(dropped, 2);
        let table = catalog.load_table(&ident).await.unwrap();
        assert_eq!(table.metadata().snapshots().count(), 1);
        assert_eq!(live_files(&table).await.len(), 3);
        // The commit state is a table property: it survives.
        assert_eq!(read_state(&table).await.unwrap().shards["s0"], "30");
        // And the next commit continues it.
        let batch = [staged(&table, "s0", "30", "40", 20000)];
        let outcome = commit_staged(&catalog, &ident, &batch).await.unwrap();
        assert_eq!(outcome.state().commit, 4);
    }
}

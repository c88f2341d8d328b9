//! The I/O of the table audit (`--iceberg-catalog`, with `--deep`): the
//! lease rows read first, the catalog opened with `verify`'s own clients,
//! the table's data directory listed (ListObjectsV2, all pages), then
//! `table.rs`'s audit and its comparison with the checkpoints.

use std::error::Error as StdError;
use std::future::Future;
use std::sync::Arc;

use anyhow::Context as _;
use iceberg::{Catalog, TableIdent};
use shard_lease::Lease;

use super::args::Plan;
use super::keys::list_keys;
use super::stream::read_leases;
use super::table::{TableAudit, audit_table};
use crate::aws::table_storage::{S3TableStorageFactory, parse_location};
use crate::aws::{AwsClients, ObjectStore};
use crate::config::IcebergTarget;
use crate::table::catalog::{self, CatalogKind, sqlite_path};

/// Audits the table of `target` (progress on stderr, a bar when `tty`).
///
/// The lease rows (with `--stream`, which names the lease table) are read
/// before the table is loaded: an owner moves its checkpoint only after
/// the commit that reaches it has landed, and committed ends only grow, so
/// every checkpoint read first is at or below the ends read after, even
/// while the daemon runs. The catalog is opened as the daemon opens it
/// (`table::catalog::open`), with the archive's S3 client for the table's
/// files and the shared AWS configuration for Glue and S3 Tables; a `sql`
/// catalog file must exist (opening one creates it, and an audit creates
/// nothing).
///
/// # Errors
/// The catalog file is missing or the catalog cannot be opened; the table
/// cannot be audited (`table::TableAuditError`); its data directory cannot
/// be listed.
pub(super) async fn audit_iceberg(
    target: &IcebergTarget,
    plan: &Plan,
    clients: &AwsClients,
    tty: bool,
) -> anyhow::Result<TableAudit> {
    let leases = match &plan.lease_table {
        Some(table) => Some(read_leases(clients, table).await),
        None => None,
    };
    let settings = &target.catalog;
    if settings.kind == CatalogKind::Sql {
        let uri = settings.uri.as_deref().unwrap_or_default();
        let path = sqlite_path(uri).map_err(anyhow::Error::msg)?;
        anyhow::ensure!(
            path.is_file(),
            "the catalog file {} ({uri}) does not exist",
            path.display()
        );
    }
    let storage = Arc::new(S3TableStorageFactory::new(clients.s3.clone()));
    let catalog = catalog::open(settings, storage, &clients.shared)
        .await
        .with_context(|| {
            format!(
                "failed to open the {} catalog {}",
                settings.kind.as_str(),
                settings.name
            )
        })?;
    let s3 = clients.s3.clone();
    audit_catalog(catalog.as_ref(), &target.table, leases, move |prefix| {
        list_data_files(s3, prefix, tty)
    })
    .await
}

/// The table audit of `ident` in an opened `catalog`, compared with
/// `leases` (read before; `None` without a lease table, `Some(Err(why))`
/// when it could not be read); `list_files` lists the data directory, as
/// for `table::audit_table`.
///
/// # Errors
/// `table::TableAuditError`.
pub(super) async fn audit_catalog<L, F, E>(
    catalog: &dyn Catalog,
    ident: &TableIdent,
    leases: Option<Result<Vec<Lease>, String>>,
    list_files: L,
) -> anyhow::Result<TableAudit>
where
    L: FnOnce(String) -> F,
    F: Future<Output = Result<Vec<String>, E>>,
    E: Into<Box<dyn StdError + Send + Sync>>,
{
    let mut audit = audit_table(catalog, ident, list_files).await?;
    audit.check_leases(leases);
    Ok(audit)
}

/// Every object under `location` (`s3://bucket/prefix/`, the table's data
/// directory), as `s3://bucket/key`, with `verify`'s retried listing
/// ([ListObjectsV2]).
///
/// [ListObjectsV2]: https://docs.aws.amazon.com/AmazonS3/latest/API/API_ListObjectsV2.html
///
/// # Errors
/// `location` is not an S3 location; the listing fails.
async fn list_data_files(
    s3: aws_sdk_s3::Client,
    location: String,
    tty: bool,
) -> anyhow::Result<Vec<String>> {
    let (bucket, prefix) = parse_location(&location)
        .with_context(|| format!("the table's data directory {location}"))?;
    let store = ObjectStore::new(s3, bucket);
    let keys = list_keys(&store, prefix, tty).await?;
    Ok(keys
        .into_iter()
        .map(|key| format!("s3://{bucket}/{key}"))
        .collect())
}

#[cfg(test)]
mod tests;

//! The I/O of the table audit (`--iceberg-catalog`, with `--deep`): the
//! lease rows read first, the catalog opened with `verify`'s own clients,
//! the table's data directory listed (ListObjectsV2, all pages), then
//! `table.rs`'s audit and its comparison with the checkpoints; with
//! `--stream`, the gap check of the table: each shard read up to its
//! committed end into its `TableShardCheck`.

use std::collections::HashMap;
use std::error::Error as StdError;
use std::future::Future;
use std::sync::Arc;

use anyhow::Context as _;
use iceberg::{Catalog, TableIdent};
use shard_lease::Lease;

use super::args::{EventCheck, Plan};
use super::gaps::{Flow, ReadEnd};
use super::keys::list_keys;
use super::report::{TableEventInputs, WindowOutcome};
use super::stream::{ShardCheck, read_leases, read_shards};
use super::table::{TableAudit, audit_table};
use super::table_gaps::{SideRecords, TableGaps, TableShardCheck, TableShardGaps};
use super::window::{Scope, ShardEvents, check_window, decided_batches};
use crate::aws::table_storage::{S3TableStorageFactory, parse_location};
use crate::aws::{AwsClients, Kinesis, ObjectStore};
use crate::config::IcebergTarget;
use crate::events::id::settings_description;
use crate::ops::log::error_chain;
use crate::read::record::ShardRecord;
use crate::table::catalog::{self, CatalogKind, sqlite_path};

/// Audits the table of `target` (progress on stderr, a bar when `tty`);
/// with `--stream`, checks it for gaps ([`check_table_gaps`]) against the
/// stream, the error and duplicates objects' records being `sides` (read
/// by the archive's audit).
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
    (sides, events): (&SideRecords, Option<&TableEventInputs>),
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
    let mut audit = audit_catalog(catalog.as_ref(), &target.table, leases, move |prefix| {
        list_data_files(s3, prefix, tty)
    })
    .await?;
    audit.check_sides(sides);
    audit.window = match (&plan.events, &plan.stream, events) {
        (None, ..) => WindowOutcome::NotRequested,
        (Some(_), None, _) => WindowOutcome::NotChecked("--stream reads the records"),
        (Some(_), Some(_), None) => WindowOutcome::NotChecked("--deep reads the decisions objects"),
        (Some(_), Some(_), Some(_)) => WindowOutcome::NotChecked("the stream could not be read"),
    };
    if let Some(stream) = &plan.stream {
        let kinesis = Kinesis::new(clients.kinesis.clone(), stream.clone());
        let events = plan.events.as_ref().zip(events);
        check_table_gaps(&kinesis, &mut audit, sides, events, plan, tty).await;
    }
    Ok(audit)
}

/// The gap check of a table: ListShards, then every shard with a committed
/// end read from its oldest retained record (or `--since`) up to it, a few
/// at a time; each user record read must be a live row of `audit` (whose
/// row keys it takes) or one of the shard's `sides`. Records after the
/// committed end are staged or not yet written, not expected in the table.
/// The outcome and its findings go into `audit`.
///
/// With `events` (`--event-id`), the same reading keys the records of the
/// batches decided with the settings — a table batch is committed when it
/// ends at or before its shard's committed end (it has no main object) —
/// and the window check (E2) runs on them: a record is kept when no
/// duplicates object holds it.
pub(super) async fn check_table_gaps(
    kinesis: &Kinesis,
    audit: &mut TableAudit,
    sides: &SideRecords,
    events: Option<(&EventCheck, &TableEventInputs)>,
    plan: &Plan,
    tty: bool,
) {
    let shards = match kinesis.list_shards().await {
        Ok(shards) => shards,
        Err(err) => {
            audit.record_gaps(TableGaps::Skipped(format!(
                "ListShards failed: {}",
                error_chain(&err)
            )));
            return;
        }
    };
    let mut live = std::mem::take(&mut audit.live);
    let mut ends: HashMap<&str, _> = audit
        .shards
        .iter()
        .filter_map(|shard| Some((shard.shard_id.as_str(), shard.committed_end.clone()?)))
        .collect();
    let (mut decided, other_settings) = match events {
        Some((check, inputs)) => {
            let description =
                settings_description(&check.settings.source, check.settings.fingerprint);
            decided_batches(
                inputs
                    .decisions
                    .iter()
                    .filter(|object| object.duplicates_listed)
                    .map(|object| (&object.key, object.format.as_deref())),
                |object| {
                    ends.get(object.shard_id.as_str())
                        .is_some_and(|end| object.range.last() <= end)
                },
                &description,
            )
        }
        None => (HashMap::new(), Vec::new()),
    };
    let mut notes = Vec::new();
    let mut checks = Vec::new();
    for shard in &shards {
        let shard_id = shard.shard_id.as_str();
        match ends.remove(shard_id) {
            Some(end) => checks.push((
                TableShardCheck::new(
                    shard_id,
                    end,
                    live.remove(shard_id).unwrap_or_default(),
                    sides.get(shard_id).cloned().unwrap_or_default(),
                    plan.from_first_archived,
                ),
                events.map(|(check, _)| {
                    let decided = decided.remove(shard_id).unwrap_or_default();
                    ShardEvents::new(&check.settings, shard_id, decided)
                }),
            )),
            None => notes.push(format!(
                "{shard_id}: no committed end in the table yet: not checked"
            )),
        }
    }
    let mut gone: Vec<&str> = ends.into_keys().collect();
    gone.sort_unstable();
    for shard_id in gone {
        notes.push(format!(
            "{shard_id}: in the table but not in the stream (past retention, or another \
             stream's): not checked"
        ));
    }

    let (results, copies) = read_shards(kinesis, checks, plan.since, tty).await;
    audit.record_gaps(TableGaps::Checked {
        shards: results,
        notes,
        since: plan.since,
    });
    if let Some((check, inputs)) = events {
        let scope = if check.stream_scope {
            Scope::Stream
        } else {
            Scope::lineage(&shards)
        };
        let result = check_window(&copies, &inputs.duplicates, &check.settings.rule, &scope);
        audit.window = WindowOutcome::Checked {
            result,
            scope: scope.describe(),
            window_millis: check.settings.rule.window_millis,
            other_settings,
        };
    }
}

impl ShardCheck for TableShardCheck {
    type Found = TableShardGaps;

    fn shard_id(&self) -> &str {
        TableShardCheck::shard_id(self)
    }

    fn observe(&mut self, record: &ShardRecord) -> Flow {
        TableShardCheck::observe(self, record)
    }

    fn finish(self, end: ReadEnd) -> TableShardGaps {
        TableShardCheck::finish(self, end)
    }

    fn checked(found: &TableShardGaps) -> (&str, u64) {
        (&found.shard_id, found.checked)
    }
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

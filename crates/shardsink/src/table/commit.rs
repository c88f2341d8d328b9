//! One table commit of staged batches, exactly once.
//!
//! [`commit_staged`] loads the table, reads the [`CommitState`] its
//! [`STATE_PROPERTY`] names, [`plan`]s the staged batches against it, writes
//! the next state, and commits one snapshot that appends the planned data
//! files and points [`STATE_PROPERTY`] at the new state — both in one
//! catalog commit, so the table's files and its state never disagree.
//!
//! The commit is built on the table as loaded and only on it: iceberg's
//! `Transaction::commit` reloads the table and re-applies its actions when
//! the table moved, which would append files that another commit has
//! already appended. The [`Pinned`] hook hands the transaction the loaded
//! table instead, so its requirement (`main` is still the loaded snapshot,
//! iceberg's `RefSnapshotIdMatch`) fails when anything was committed in
//! between; then the whole commit is planned again from the new state.
//!
//! A commit whose outcome is unknown (a lost response, a timeout, a 5xx) is
//! never retried as it was: the table is loaded again and the attempt's
//! marker ([`ATTEMPT_PROPERTY`], unique to the attempt) looked for in the
//! snapshots since the base; found, it landed; not found, the commit is
//! planned again from what the table holds now. Either way the plan comes
//! from the table's own state, so a late landing of the lost attempt makes
//! the new plan's batches count as committed, never appended twice.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use iceberg::spec::{DataFile, deserialize_data_file_from_json};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{
    Catalog, Error as IcebergError, ErrorKind, Namespace, NamespaceIdent, Result as IcebergResult,
    TableCommit, TableCreation, TableIdent,
};
use tracing::{info, warn};

use super::catalog::load_table;
use super::state::{
    ATTEMPT_PROPERTY, COMMIT_PROPERTY, CommitState, STATE_PROPERTY, StagedBatch, StateError, plan,
};
use crate::ops::failpoint::failpoint;

/// How many times a commit is planned again after a conflict before the
/// round gives up (the next round tries again).
pub const MAX_CONFLICTS: u32 = 8;

/// What [`commit_staged`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitOutcome {
    /// A snapshot appended the batches.
    Committed {
        /// The state the commit wrote: each shard's committed end.
        state: CommitState,
        /// The new snapshot's id.
        snapshot_id: i64,
        /// Batches appended.
        batches: usize,
        /// Data files appended.
        files: usize,
        /// Conflicts met (and planned again) first.
        conflicts: u32,
    },
    /// Nothing staged continues the table: no snapshot was made.
    NothingToCommit {
        /// The table's state as found.
        state: CommitState,
        /// Conflicts met first.
        conflicts: u32,
    },
}

impl CommitOutcome {
    /// The table's state after the call.
    pub fn state(&self) -> &CommitState {
        match self {
            Self::Committed { state, .. } | Self::NothingToCommit { state, .. } => state,
        }
    }
}

/// Why a commit did not happen.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The catalog or the table's files failed; the round retries later.
    #[error("table {table}: {source}")]
    Iceberg {
        /// The table.
        table: String,
        /// iceberg's error.
        #[source]
        source: IcebergError,
    },
    /// The table's state or a staged batch is malformed.
    #[error("table {table}: {source}")]
    State {
        /// The table.
        table: String,
        /// What is malformed.
        #[source]
        source: StateError,
    },
    /// Other commits kept landing first, [`MAX_CONFLICTS`] times.
    #[error("table {table}: {conflicts} commit conflicts in a row")]
    Contended {
        /// The table.
        table: String,
        /// Conflicts met.
        conflicts: u32,
    },
}

impl CommitError {
    /// Whether the catalog no longer has the table (iceberg's
    /// `TableNotFound`): it was dropped or renamed while shardsink ran.
    pub fn is_table_missing(&self) -> bool {
        matches!(self, Self::Iceberg { source, .. } if source.kind() == ErrorKind::TableNotFound)
    }
}

/// Commits the staged batches that continue the table's state, in one
/// snapshot; see the module documentation.
///
/// # Errors
/// [`CommitError`]; a conflict is planned again up to [`MAX_CONFLICTS`]
/// times first.
pub async fn commit_staged(
    catalog: &dyn Catalog,
    table: &TableIdent,
    staged: &[StagedBatch],
) -> Result<CommitOutcome, CommitError> {
    let name = table.to_string();
    let iceberg = |source| CommitError::Iceberg {
        table: name.clone(),
        source,
    };
    let state_error = |source| CommitError::State {
        table: name.clone(),
        source,
    };
    let mut conflicts = 0;
    loop {
        let base = load_table(catalog, table).await.map_err(iceberg)?;
        let state = read_state(&base).await.map_err(iceberg)?;
        let plan = plan(&state, staged).map_err(state_error)?;
        for (shard_id, after) in &plan.gaps {
            warn!(
                table = %name, shard_id, after,
                "a staged batch does not start where the shard's committed records end; held back"
            );
        }
        if plan.append.is_empty() {
            return Ok(CommitOutcome::NothingToCommit { state, conflicts });
        }
        let files = data_files(&base, &plan.append).map_err(iceberg)?;
        let file_count = files.len();
        let next = plan.next;
        let attempt = state_location(&base, next.commit);
        base.file_io()
            .new_output(&attempt)
            .map_err(iceberg)?
            .write(next.to_json().into())
            .await
            .map_err(iceberg)?;
        let commit_text = next.commit.to_string();
        let summary = HashMap::from([
            (COMMIT_PROPERTY.to_owned(), commit_text.clone()),
            (ATTEMPT_PROPERTY.to_owned(), attempt.clone()),
        ]);
        let tx = Transaction::new(&base);
        let tx = tx
            .fast_append()
            // The plan is the duplicate check: reading every manifest is
            // not needed, and would not fence a concurrent commit anyway.
            .with_check_duplicate(false)
            .add_data_files(files)
            .set_snapshot_properties(summary)
            .apply(tx)
            .map_err(iceberg)?;
        let tx = tx
            .update_table_properties()
            .set(STATE_PROPERTY.to_owned(), attempt.clone())
            .set(COMMIT_PROPERTY.to_owned(), commit_text)
            .apply(tx)
            .map_err(iceberg)?;
        let pinned = HookedCatalog {
            inner: catalog,
            hook: Pinned { base: base.clone() },
        };
        failpoint("before-table-commit").await;
        // The new snapshot's id when the commit landed.
        let landed = match tx.commit(&pinned).await {
            Ok(committed) => Some(find_attempt(&committed, &base, &attempt).unwrap_or_default()),
            Err(err) if err.kind() == ErrorKind::CatalogCommitConflicts => None,
            // Gone from the catalog: nothing can have landed on it.
            Err(err) if err.kind() == ErrorKind::TableNotFound => return Err(iceberg(err)),
            Err(err) => {
                warn!(table = %name, error = %err, attempt, "commit outcome unknown; looking for it in the table");
                let now = load_table(catalog, table).await.map_err(iceberg)?;
                find_attempt(&now, &base, &attempt)
            }
        };
        match landed {
            Some(snapshot_id) => {
                info!(
                    table = %name,
                    commit = next.commit,
                    snapshot_id,
                    batches = plan.append.len(),
                    files = file_count,
                    conflicts,
                    "table commit"
                );
                return Ok(CommitOutcome::Committed {
                    batches: plan.append.len(),
                    state: next,
                    snapshot_id,
                    files: file_count,
                    conflicts,
                });
            }
            None => {
                conflicts += 1;
                info!(
                    table = %name,
                    commit = next.commit,
                    conflicts,
                    "the table moved since the commit was planned (another commit landed first); planning again"
                );
                if conflicts >= MAX_CONFLICTS {
                    return Err(CommitError::Contended {
                        table: name,
                        conflicts,
                    });
                }
                // Another commit landed first: plan again from its state
                // after a short, growing pause.
                tokio::time::sleep(Duration::from_millis(50 << conflicts.min(6))).await;
            }
        }
    }
}

/// The table's state: the object its [`STATE_PROPERTY`] names, or the
/// empty state before its first shardsink commit.
///
/// # Errors
/// The object cannot be read or parsed.
pub async fn read_state(table: &Table) -> IcebergResult<CommitState> {
    let Some(location) = table.metadata().properties().get(STATE_PROPERTY) else {
        return Ok(CommitState::default());
    };
    let bytes = table.file_io().new_input(location)?.read().await?;
    CommitState::from_json(&bytes)
        .map_err(|err| IcebergError::new(ErrorKind::DataInvalid, format!("{location}: {err}")))
}

/// Where commit `number`'s state is written: in the table's metadata
/// directory, unique to the attempt.
fn state_location(table: &Table, number: u64) -> String {
    format!(
        "{}/metadata/shardsink/commit-{number:020}-{}.json",
        table.metadata().location().trim_end_matches('/'),
        attempt_id()
    )
}

/// 128 random bits in hex: names one commit attempt.
fn attempt_id() -> String {
    format!(
        "{:016x}{:016x}",
        rand::random::<u64>(),
        rand::random::<u64>()
    )
}

/// The id of the snapshot, on `table`'s main branch and newer than
/// `base`'s current one, whose summary names `attempt`.
fn find_attempt(table: &Table, base: &Table, attempt: &str) -> Option<i64> {
    let metadata = table.metadata();
    let stop = base.metadata().current_snapshot_id();
    let mut snapshot = metadata.current_snapshot().cloned();
    while let Some(current) = snapshot {
        if Some(current.snapshot_id()) == stop {
            return None;
        }
        let summary = &current.summary().additional_properties;
        if summary.get(ATTEMPT_PROPERTY).map(String::as_str) == Some(attempt) {
            return Some(current.snapshot_id());
        }
        snapshot = current
            .parent_snapshot_id()
            .and_then(|id| metadata.snapshot_by_id(id).cloned());
    }
    None
}

/// The planned batches' data files, read back from their staged entries
/// with the partition spec each was written for.
fn data_files(table: &Table, batches: &[&StagedBatch]) -> IcebergResult<Vec<DataFile>> {
    let metadata = table.metadata();
    let schema = metadata.current_schema();
    batches
        .iter()
        .flat_map(|batch| &batch.files)
        .map(|file| {
            let spec = metadata.partition_spec_by_id(file.spec_id).ok_or_else(|| {
                IcebergError::new(
                    ErrorKind::DataInvalid,
                    format!(
                        "a staged data file names partition spec {}, which the table does not have",
                        file.spec_id
                    ),
                )
            })?;
            let partition_type = spec.partition_type(schema)?;
            deserialize_data_file_from_json(&file.data_file, file.spec_id, &partition_type, schema)
        })
        .collect()
}

/// A catalog that passes every call to `inner`, except the two that a
/// [`CatalogHook`] answers: `load_table` and `update_table`.
pub(super) struct HookedCatalog<'a, H> {
    pub(super) inner: &'a dyn Catalog,
    pub(super) hook: H,
}

/// The calls a [`HookedCatalog`] answers itself; by default, as the inner
/// catalog does.
#[async_trait]
pub(super) trait CatalogHook: Send + Sync {
    /// `load_table`.
    async fn load_table(&self, inner: &dyn Catalog, table: &TableIdent) -> IcebergResult<Table> {
        inner.load_table(table).await
    }

    /// `update_table`: the commit.
    async fn update_table(&self, inner: &dyn Catalog, commit: TableCommit) -> IcebergResult<Table> {
        inner.update_table(commit).await
    }
}

/// The hook that pins a commit to the table as loaded: `load_table`
/// answers with it, so the transaction is built on it and never on a newer
/// table (see the module documentation); a failed commit is never
/// retryable, so iceberg's own retry loop does not run.
struct Pinned {
    base: Table,
}

#[async_trait]
impl CatalogHook for Pinned {
    async fn load_table(&self, inner: &dyn Catalog, table: &TableIdent) -> IcebergResult<Table> {
        if table == self.base.identifier() {
            Ok(self.base.clone())
        } else {
            inner.load_table(table).await
        }
    }

    async fn update_table(&self, inner: &dyn Catalog, commit: TableCommit) -> IcebergResult<Table> {
        inner.update_table(commit).await.map_err(|err| {
            let message = err.message().to_owned();
            IcebergError::new(err.kind(), message)
                .with_retryable(false)
                .with_source(err)
        })
    }
}

impl<H> fmt::Debug for HookedCatalog<'_, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HookedCatalog")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl<H: CatalogHook> Catalog for HookedCatalog<'_, H> {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> IcebergResult<Vec<NamespaceIdent>> {
        self.inner.list_namespaces(parent).await
    }

    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> IcebergResult<Namespace> {
        self.inner.create_namespace(namespace, properties).await
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> IcebergResult<Namespace> {
        self.inner.get_namespace(namespace).await
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> IcebergResult<bool> {
        self.inner.namespace_exists(namespace).await
    }

    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> IcebergResult<()> {
        self.inner.update_namespace(namespace, properties).await
    }

    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> IcebergResult<()> {
        self.inner.drop_namespace(namespace).await
    }

    async fn list_tables(&self, namespace: &NamespaceIdent) -> IcebergResult<Vec<TableIdent>> {
        self.inner.list_tables(namespace).await
    }

    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> IcebergResult<Table> {
        self.inner.create_table(namespace, creation).await
    }

    async fn load_table(&self, table: &TableIdent) -> IcebergResult<Table> {
        self.hook.load_table(self.inner, table).await
    }

    async fn drop_table(&self, table: &TableIdent) -> IcebergResult<()> {
        self.inner.drop_table(table).await
    }

    async fn purge_table(&self, table: &TableIdent) -> IcebergResult<()> {
        self.inner.purge_table(table).await
    }

    async fn table_exists(&self, table: &TableIdent) -> IcebergResult<bool> {
        self.inner.table_exists(table).await
    }

    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> IcebergResult<()> {
        self.inner.rename_table(src, dest).await
    }

    async fn register_table(
        &self,
        table: &TableIdent,
        metadata_location: String,
    ) -> IcebergResult<Table> {
        self.inner.register_table(table, metadata_location).await
    }

    async fn update_table(&self, commit: TableCommit) -> IcebergResult<Table> {
        self.hook.update_table(self.inner, commit).await
    }
}

#[cfg(test)]
mod tests;

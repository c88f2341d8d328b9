use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use super::*;
use crate::table::test_support::{events_table, live_files, memory_catalog, staged};

/// Each live data file's path once: a path listed twice is a file appended
/// twice.
fn assert_each_file_once(live: &[String]) {
    let mut unique = live.to_vec();
    unique.dedup();
    assert_eq!(unique, live, "a data file appended twice");
}

#[tokio::test]
async fn staged_batches_are_appended_once_with_the_state_beside_them() {
    let catalog = memory_catalog().await;
    let (ident, table) = events_table(&catalog).await;
    let batches = [
        staged(&table, "s0", "TRIM_HORIZON", "100", 20000),
        staged(&table, "s0", "100", "200", 20001),
        staged(&table, "s1", "TRIM_HORIZON", "7", 20000),
    ];
    let outcome = commit_staged(&catalog, &ident, &batches).await.unwrap();
    let CommitOutcome::Committed {
        state,
        batches: appended,
        files,
        ..
    } = outcome
    else {
        panic!("not committed: {outcome:?}");
    };
    assert_eq!((appended, files), (3, 3));
    assert_eq!(state.commit, 1);
    assert_eq!(state.shards["s0"], "200");
    assert_eq!(state.shards["s1"], "7");

    let table = catalog.load_table(&ident).await.unwrap();
    assert_eq!(read_state(&table).await.unwrap(), state);
    assert_eq!(table.metadata().properties()[COMMIT_PROPERTY], "1");
    let summary = table.metadata().current_snapshot().unwrap().summary();
    assert_eq!(summary.additional_properties[COMMIT_PROPERTY], "1");
    assert_eq!(live_files(&table).await.len(), 3);

    // The same staged batches again (their owners have not dropped them
    // yet): nothing to commit, no new snapshot.
    let again = commit_staged(&catalog, &ident, &batches).await.unwrap();
    assert!(
        matches!(again, CommitOutcome::NothingToCommit { .. }),
        "{again:?}"
    );
    let after = catalog.load_table(&ident).await.unwrap();
    assert_eq!(after.metadata().snapshots().count(), 1);

    // More of s0 continues the state in a second commit.
    let more = [staged(&table, "s0", "200", "300", 20001)];
    let outcome = commit_staged(&catalog, &ident, &more).await.unwrap();
    assert_eq!(outcome.state().commit, 2);
    assert_eq!(outcome.state().shards["s0"], "300");
    let table = catalog.load_table(&ident).await.unwrap();
    let live = live_files(&table).await;
    assert_eq!(live.len(), 4);
    assert_each_file_once(&live);
}

/// Lets another commit land inside this one's `update_table`, before it
/// reaches the catalog: the first attempt's base is then stale.
struct CommitsFirst<'a> {
    other: &'a [StagedBatch],
    ident: TableIdent,
    done: Mutex<bool>,
}

#[async_trait]
impl CatalogHook for CommitsFirst<'_> {
    async fn update_table(&self, inner: &dyn Catalog, commit: TableCommit) -> IcebergResult<Table> {
        let first = !std::mem::replace(&mut *self.done.lock().unwrap(), true);
        if first {
            commit_staged(inner, &self.ident, self.other)
                .await
                .expect("the other commit");
        }
        inner.update_table(commit).await
    }
}

#[tokio::test]
async fn a_conflicting_commit_is_planned_again_without_appending_twice() {
    let catalog = memory_catalog().await;
    let (ident, table) = events_table(&catalog).await;
    // Two committers see overlapping staged batches: B's commit lands while
    // A's is on its way.
    let a = [
        staged(&table, "s0", "TRIM_HORIZON", "100", 20000),
        staged(&table, "s0", "100", "200", 20000),
    ];
    let b = [
        staged(&table, "s0", "TRIM_HORIZON", "100", 20000),
        staged(&table, "s1", "TRIM_HORIZON", "9", 20000),
    ];
    let hooked = HookedCatalog {
        inner: &catalog,
        hook: CommitsFirst {
            other: &b,
            ident: ident.clone(),
            done: Mutex::new(false),
        },
    };
    let outcome = commit_staged(&hooked, &ident, &a).await.unwrap();
    let CommitOutcome::Committed {
        batches, conflicts, ..
    } = &outcome
    else {
        panic!("not committed: {outcome:?}");
    };
    // A met B's commit, planned again, and appended only what B had not.
    assert_eq!((*batches, *conflicts), (1, 1));
    assert_eq!(outcome.state().commit, 2);
    assert_eq!(outcome.state().shards["s0"], "200");
    assert_eq!(outcome.state().shards["s1"], "9");

    let table = catalog.load_table(&ident).await.unwrap();
    let live = live_files(&table).await;
    assert_eq!(live.len(), 3, "{live:#?}");
    assert_each_file_once(&live);
}

/// Fails the first `update_table` as a lost response would: `lands` says
/// whether that commit reached the catalog first.
struct LostResponse {
    lands: bool,
    calls: AtomicU32,
}

#[async_trait]
impl CatalogHook for LostResponse {
    async fn update_table(&self, inner: &dyn Catalog, commit: TableCommit) -> IcebergResult<Table> {
        if self.calls.fetch_add(1, Ordering::SeqCst) > 0 {
            return inner.update_table(commit).await;
        }
        if self.lands {
            inner.update_table(commit).await?;
        }
        Err(IcebergError::new(ErrorKind::Unexpected, "connection reset").with_retryable(true))
    }
}

#[tokio::test]
async fn a_commit_whose_response_was_lost_is_found_in_the_table_not_made_again() {
    for lands in [true, false] {
        let catalog = memory_catalog().await;
        let (ident, table) = events_table(&catalog).await;
        let batches = [
            staged(&table, "s0", "TRIM_HORIZON", "100", 20000),
            staged(&table, "s1", "TRIM_HORIZON", "5", 20000),
        ];
        let hooked = HookedCatalog {
            inner: &catalog,
            hook: LostResponse {
                lands,
                calls: AtomicU32::new(0),
            },
        };
        let outcome = commit_staged(&hooked, &ident, &batches).await.unwrap();
        assert!(
            matches!(outcome, CommitOutcome::Committed { .. }),
            "lands {lands}: {outcome:?}"
        );
        // When the lost commit had landed, it was found and not made again.
        let calls = hooked.hook.calls.load(Ordering::SeqCst);
        assert_eq!(calls, if lands { 1 } else { 2 }, "lands {lands}");
        let table = catalog.load_table(&ident).await.unwrap();
        assert_eq!(table.metadata().snapshots().count(), 1, "lands {lands}");
        assert_eq!(live_files(&table).await.len(), 2, "lands {lands}");
        assert_eq!(outcome.state().commit, 1);
    }
}

/// Answers every commit with a conflict, counting them.
struct AlwaysConflicts(AtomicU32);

#[async_trait]
impl CatalogHook for AlwaysConflicts {
    async fn update_table(&self, _: &dyn Catalog, _: TableCommit) -> IcebergResult<Table> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Err(IcebergError::new(ErrorKind::CatalogCommitConflicts, "conflict").with_retryable(true))
    }
}

#[tokio::test(start_paused = true)]
async fn iceberg_does_not_retry_a_pinned_commit_on_its_own() {
    // A conflict that keeps coming back ends the call after MAX_CONFLICTS
    // plans, each one catalog commit: iceberg's own retries would make more.
    let catalog = memory_catalog().await;
    let (ident, table) = events_table(&catalog).await;
    let batches = [staged(&table, "s0", "TRIM_HORIZON", "100", 20000)];
    let hooked = HookedCatalog {
        inner: &catalog,
        hook: AlwaysConflicts(AtomicU32::new(0)),
    };
    let err = commit_staged(&hooked, &ident, &batches).await.unwrap_err();
    assert!(
        matches!(err, CommitError::Contended { conflicts, .. } if conflicts == MAX_CONFLICTS),
        "{err}"
    );
    assert_eq!(hooked.hook.0.load(Ordering::SeqCst), MAX_CONFLICTS);
}

/// Drops the table from the catalog just before the commit reaches it, as
/// an operator's `DROP TABLE` racing the committer would.
struct DroppedFirst {
    ident: TableIdent,
    calls: AtomicU32,
}

#[async_trait]
impl CatalogHook for DroppedFirst {
    async fn update_table(&self, inner: &dyn Catalog, commit: TableCommit) -> IcebergResult<Table> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        inner.drop_table(&self.ident).await?;
        inner.update_table(commit).await
    }
}

/// Reports a missing table from `load_table` as `Unexpected`, as the Glue
/// catalog does (its `table_exists` still says `false`).
struct MissingAsUnexpected;

#[async_trait]
impl CatalogHook for MissingAsUnexpected {
    async fn load_table(&self, inner: &dyn Catalog, table: &TableIdent) -> IcebergResult<Table> {
        inner.load_table(table).await.map_err(|err| {
            IcebergError::new(ErrorKind::Unexpected, "aws sdk error").with_source(err)
        })
    }
}

#[tokio::test]
async fn a_dropped_table_is_reported_missing_and_registered_again_takes_the_staged_batches_once() {
    let catalog = memory_catalog().await;
    let (ident, table) = events_table(&catalog).await;
    let first = staged(&table, "s0", "TRIM_HORIZON", "100", 20000);
    commit_staged(&catalog, &ident, std::slice::from_ref(&first))
        .await
        .unwrap();
    let newest = catalog
        .load_table(&ident)
        .await
        .unwrap()
        .metadata_location()
        .unwrap()
        .to_owned();

    // Dropped while a commit is on its way: no outcome to look for.
    let batches = [first, staged(&table, "s0", "100", "200", 20001)];
    let hooked = HookedCatalog {
        inner: &catalog,
        hook: DroppedFirst {
            ident: ident.clone(),
            calls: AtomicU32::new(0),
        },
    };
    let err = commit_staged(&hooked, &ident, &batches).await.unwrap_err();
    assert!(err.is_table_missing(), "{err}");
    assert_eq!(hooked.hook.calls.load(Ordering::SeqCst), 1);
    let err = commit_staged(&catalog, &ident, &batches).await.unwrap_err();
    assert!(err.is_table_missing(), "{err}");
    // Also where the catalog's load reports the missing table as any
    // failure, as the Glue catalog does.
    let like_glue = HookedCatalog {
        inner: &catalog,
        hook: MissingAsUnexpected,
    };
    let err = commit_staged(&like_glue, &ident, &batches)
        .await
        .unwrap_err();
    assert!(err.is_table_missing(), "{err}");

    // Its newest metadata file registered again: the table's own state
    // says what it holds, and only the batch after it is appended.
    catalog.register_table(&ident, newest).await.unwrap();
    let outcome = commit_staged(&catalog, &ident, &batches).await.unwrap();
    let CommitOutcome::Committed { batches, .. } = &outcome else {
        panic!("not committed: {outcome:?}");
    };
    assert_eq!(*batches, 1);
    assert_eq!(outcome.state().shards["s0"], "200");
    let live = live_files(&catalog.load_table(&ident).await.unwrap()).await;
    assert_eq!(live.len(), 2, "{live:#?}");
    assert_each_file_once(&live);
}

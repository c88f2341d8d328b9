use std::convert::Infallible;
use std::future::{Ready, ready};

use iceberg::spec::{
    DataFile, MAIN_BRANCH, NestedField, Schema, SnapshotReference, SnapshotRetention,
    TableMetadataBuilder, UnboundPartitionSpec,
};
use iceberg::transaction::{ApplyTransactionAction, Transaction};

use super::*;
use crate::table::commit::commit_staged;
use crate::table::create::{NewTable, find_or_create};
use crate::table::state::StagedBatch;
use crate::table::test_support::{events_table, memory_catalog, staged_with, write_data_file};

const DAY: i32 = 20000;

/// Lists `paths` under a prefix, as a store would.
fn listing(
    paths: &[String],
) -> impl FnOnce(String) -> Ready<Result<Vec<String>, Infallible>> + use<> {
    let paths = paths.to_vec();
    move |prefix| {
        ready(Ok(paths
            .into_iter()
            .filter(|path| path.starts_with(&prefix))
            .collect()))
    }
}

/// Appends `file` with a plain fast append: no plan, no state.
async fn append_bypassing_the_plan(catalog: &dyn Catalog, ident: &TableIdent, file: DataFile) {
    let table = catalog.load_table(ident).await.unwrap();
    let tx = Transaction::new(&table);
    let tx = tx
        .fast_append()
        .with_check_duplicate(false)
        .add_data_files([file])
        .apply(tx)
        .unwrap();
    tx.commit(catalog).await.unwrap();
}

fn n(text: &str) -> SequenceNumber {
    text.parse().unwrap()
}

fn shard(id: &str, rows: u64, min_max: Option<(&str, &str)>, end: Option<&str>) -> ShardRows {
    ShardRows {
        shard_id: id.to_owned(),
        rows,
        min: min_max.map(|(min, _)| n(min)),
        max: min_max.map(|(_, max)| n(max)),
        committed_end: end.map(n),
    }
}

/// A batch of `shard` with no data file: all its records went elsewhere.
fn no_files(shard: &str, after: &str, last: &str) -> StagedBatch {
    StagedBatch {
        shard_id: shard.to_owned(),
        after: after.to_owned(),
        last: last.to_owned(),
        files: Vec::new(),
    }
}

#[tokio::test]
async fn a_table_committed_through_the_plan_is_exact_with_each_shards_rows() {
    let catalog = memory_catalog().await;
    let (ident, table) = events_table(&catalog).await;
    // Sequence numbers whose text order is not their order: "9" > "200" as
    // text, so a text comparison would find 9 beyond the end 200.
    let (a, file_a) = write_data_file(&table, "s0-a", DAY, &[("s0", "9"), ("s0", "10")]).await;
    let (b, file_b) = write_data_file(&table, "s0-b", DAY, &[("s0", "100"), ("s0", "200")]).await;
    let (c, file_c) = write_data_file(&table, "s1-a", DAY, &[("s1", "5")]).await;
    commit_staged(
        &catalog,
        &ident,
        &[
            staged_with(&table, "s0", "TRIM_HORIZON", "10", file_a),
            staged_with(&table, "s1", "TRIM_HORIZON", "5", file_c),
        ],
    )
    .await
    .unwrap();
    // A second commit, a second snapshot.
    commit_staged(
        &catalog,
        &ident,
        &[staged_with(&table, "s0", "10", "200", file_b)],
    )
    .await
    .unwrap();

    let audit = audit_table(&catalog, &ident, listing(&[a, b, c]))
        .await
        .unwrap();
    assert_eq!(audit.findings, []);
    assert!(audit.is_exact());
    assert_eq!(
        audit.shards,
        [
            shard("s0", 4, Some(("9", "200")), Some("200")),
            shard("s1", 1, Some(("5", "5")), Some("5")),
        ]
    );
    assert_eq!((audit.commit, audit.files), (2, 3));
    let current = catalog.load_table(&ident).await.unwrap();
    assert_eq!(audit.snapshot_id, current.metadata().current_snapshot_id());
    assert_eq!(audit.orphans, Orphans::default());
    let text = audit.render();
    assert!(
        text.contains("shard s0: 4 rows, 9..200, committed end 200"),
        "{text}"
    );
    assert!(
        text.ends_with("\nexact (checkpoints not checked)\n"),
        "{text}"
    );
}

#[tokio::test]
async fn a_file_appended_twice_is_a_duplicate_of_each_of_its_records() {
    let catalog = memory_catalog().await;
    let (ident, table) = events_table(&catalog).await;
    let (a, file_a) = write_data_file(&table, "s0-a", DAY, &[("s0", "1"), ("s0", "2")]).await;
    commit_staged(
        &catalog,
        &ident,
        &[staged_with(
            &table,
            "s0",
            "TRIM_HORIZON",
            "2",
            file_a.clone(),
        )],
    )
    .await
    .unwrap();
    append_bypassing_the_plan(&catalog, &ident, file_a).await;

    let audit = audit_table(&catalog, &ident, listing(std::slice::from_ref(&a)))
        .await
        .unwrap();
    let duplicate = |number: &str| TableFinding::Duplicate {
        shard_id: "s0".to_owned(),
        sequence_number: n(number),
        sub_sequence_number: None,
        files: vec![a.clone(), a.clone()],
    };
    assert_eq!(audit.findings, [duplicate("1"), duplicate("2")]);
    assert!(!audit.is_exact());
    assert_eq!(audit.shards, [shard("s0", 4, Some(("1", "2")), Some("2"))]);
    let text = audit.render();
    assert!(text.contains("duplicate in s0: 1 in 2 rows"), "{text}");
    assert!(text.ends_with("\nNOT exact\n"), "{text}");
}

#[tokio::test]
async fn rows_past_the_committed_end_or_of_a_shard_the_state_lacks_are_beyond() {
    let catalog = memory_catalog().await;
    let (ident, table) = events_table(&catalog).await;
    let (a, file_a) = write_data_file(
        &table,
        "s0-a",
        DAY,
        &[("s0", "1"), ("s0", "2"), ("s0", "30")],
    )
    .await;
    // The state says s0 ends at 2: row 30 is not accounted for.
    commit_staged(
        &catalog,
        &ident,
        &[staged_with(&table, "s0", "TRIM_HORIZON", "2", file_a)],
    )
    .await
    .unwrap();
    let (b, file_b) = write_data_file(&table, "s9-a", DAY, &[("s9", "7")]).await;
    append_bypassing_the_plan(&catalog, &ident, file_b).await;

    let audit = audit_table(&catalog, &ident, listing(&[a.clone(), b.clone()]))
        .await
        .unwrap();
    assert_eq!(
        audit.findings,
        [
            TableFinding::Beyond {
                shard_id: "s0".to_owned(),
                committed_end: Some(n("2")),
                rows: 1,
                highest: n("30"),
                files: vec![a],
            },
            TableFinding::Beyond {
                shard_id: "s9".to_owned(),
                committed_end: None,
                rows: 1,
                highest: n("7"),
                files: vec![b],
            },
        ]
    );
    assert!(!audit.is_exact());
    assert_eq!(audit.shards[1], shard("s9", 1, Some(("7", "7")), None));
    let text = audit.render();
    assert!(
        text.contains("beyond in s0: 1 rows after the committed end 2, up to 30"),
        "{text}"
    );
    assert!(text.ends_with("\nNOT exact\n"), "{text}");
}

#[tokio::test]
async fn an_uncommitted_file_is_an_orphan_and_a_shard_without_rows_is_empty_both_harmless() {
    let catalog = memory_catalog().await;
    let (ident, table) = events_table(&catalog).await;
    let (a, file_a) = write_data_file(&table, "s0-a", DAY, &[("s0", "1")]).await;
    // s1's batch had no kept record: committed, without a file.
    commit_staged(
        &catalog,
        &ident,
        &[
            staged_with(&table, "s0", "TRIM_HORIZON", "1", file_a),
            no_files("s1", "TRIM_HORIZON", "40"),
        ],
    )
    .await
    .unwrap();
    // Written, then the worker crashed before staging it.
    let (orphan, _) = write_data_file(&table, "s0-b", DAY + 1, &[("s0", "2")]).await;

    let audit = audit_table(&catalog, &ident, listing(&[a, orphan.clone()]))
        .await
        .unwrap();
    assert_eq!(
        audit.orphans,
        Orphans {
            count: 1,
            paths: vec![orphan.clone()],
        }
    );
    assert_eq!(
        audit.findings,
        [TableFinding::Empty {
            shard_id: "s1".to_owned(),
            committed_end: n("40"),
        }]
    );
    assert!(audit.is_exact());
    assert_eq!(audit.shards[1], shard("s1", 0, None, Some("40")));
    let text = audit.render();
    assert!(text.contains(&format!("\n  {orphan}\n")), "{text}");
    assert!(text.contains("empty s1: committed end 40"), "{text}");
    assert!(
        text.ends_with("\nexact (checkpoints not checked)\n"),
        "{text}"
    );
}

#[tokio::test]
async fn a_file_only_an_older_snapshot_names_is_no_orphan() {
    let catalog = memory_catalog().await;
    let (ident, table) = events_table(&catalog).await;
    let (a, file_a) = write_data_file(&table, "s0-a", DAY, &[("s0", "1")]).await;
    let (b, file_b) = write_data_file(&table, "s0-b", DAY, &[("s0", "2")]).await;
    commit_staged(
        &catalog,
        &ident,
        &[staged_with(&table, "s0", "TRIM_HORIZON", "1", file_a)],
    )
    .await
    .unwrap();
    let first = catalog.load_table(&ident).await.unwrap();
    let first_id = first.metadata().current_snapshot_id().unwrap();
    commit_staged(
        &catalog,
        &ident,
        &[staged_with(&table, "s0", "1", "2", file_b)],
    )
    .await
    .unwrap();
    // `main` rolled back to the first snapshot: b is no longer live, yet
    // the second snapshot still names it.
    let loaded = catalog.load_table(&ident).await.unwrap();
    let rolled_back = TableMetadataBuilder::new_from_metadata(loaded.metadata().clone(), None)
        .set_ref(
            MAIN_BRANCH,
            SnapshotReference::new(first_id, SnapshotRetention::branch(None, None, None)),
        )
        .unwrap()
        .build()
        .unwrap()
        .metadata;
    let rolled_back = Table::builder()
        .file_io(loaded.file_io().clone())
        .identifier(ident.clone())
        .metadata(rolled_back)
        .runtime(iceberg::Runtime::current())
        .build()
        .unwrap();

    let audit = audit_loaded(&rolled_back, listing(&[a, b])).await.unwrap();
    assert_eq!(audit.orphans, Orphans::default());
    assert_eq!((audit.snapshot_id, audit.files), (Some(first_id), 1));
    assert_eq!(audit.shards, [shard("s0", 1, Some(("1", "1")), Some("2"))]);
}

#[tokio::test]
async fn a_table_without_shard_id_is_not_a_shardsink_table() {
    let catalog = memory_catalog().await;
    let ident = TableIdent::from_strs(["archive", "other"]).unwrap();
    let schema = Schema::builder()
        .with_fields([
            NestedField::required(1, SEQUENCE_NUMBER, Type::Primitive(PrimitiveType::String))
                .into(),
            NestedField::optional(2, SUB_SEQUENCE_NUMBER, Type::Primitive(PrimitiveType::Long))
                .into(),
        ])
        .build()
        .unwrap();
    let new = NewTable {
        schema,
        partition_spec: UnboundPartitionSpec::builder().build(),
        location: None,
    };
    find_or_create(&catalog, &ident, new).await.unwrap();

    let err = audit_table(&catalog, &ident, listing(&[]))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            TableAuditError::NotAShardsinkTable {
                column: SHARD_ID,
                ..
            }
        ),
        "{err}"
    );
}

/// A lease row of `shard` at `checkpoint`, with `staged` staged batches.
fn lease(shard: &str, checkpoint: Checkpoint, staged: usize) -> Lease {
    let mut lease = Lease::new(shard, checkpoint, vec![]);
    lease.staged_batches = (0..staged).map(|i| format!("batch {i}")).collect();
    lease
}

#[tokio::test]
async fn a_checkpoint_after_the_committed_end_is_a_gap_and_staged_batches_are_information() {
    let catalog = memory_catalog().await;
    let (ident, table) = events_table(&catalog).await;
    let (_, file_a) = write_data_file(&table, "s0-a", DAY, &[("s0", "9"), ("s0", "200")]).await;
    let (_, file_b) = write_data_file(&table, "s1-a", DAY, &[("s1", "5"), ("s1", "100")]).await;
    commit_staged(
        &catalog,
        &ident,
        &[
            staged_with(&table, "s0", "TRIM_HORIZON", "200", file_a),
            staged_with(&table, "s1", "TRIM_HORIZON", "100", file_b),
            no_files("s5", "TRIM_HORIZON", "40"),
        ],
    )
    .await
    .unwrap();
    let mut audit = audit_table(&catalog, &ident, listing(&[])).await.unwrap();
    assert!(audit.is_exact());

    audit.check_leases(Some(Ok(vec![
        // Past the end 200: records 201..=300 are in no row, and the
        // daemon resumes after 300.
        lease("s0", Checkpoint::SequenceNumber(n("300")), 0),
        // 99 is below 100 (though not as text), with batches written and
        // not yet committed: information.
        lease("s1", Checkpoint::SequenceNumber(n("99")), 2),
        // A shard the state does not name.
        lease("s2", Checkpoint::SequenceNumber(n("7")), 0),
        // Sentinels say nothing to compare.
        lease("s3", Checkpoint::TrimHorizon, 1),
        lease("s4", Checkpoint::ShardEnd, 0),
        // At the end exactly.
        lease("s5", Checkpoint::SequenceNumber(n("40")), 0),
    ])));
    assert_eq!(
        audit.findings,
        [
            TableFinding::CheckpointBeyond {
                shard_id: "s0".to_owned(),
                checkpoint: n("300"),
                committed_end: Some(n("200")),
            },
            TableFinding::CheckpointBeyond {
                shard_id: "s2".to_owned(),
                checkpoint: n("7"),
                committed_end: None,
            },
            // The warning stays last.
            TableFinding::Empty {
                shard_id: "s5".to_owned(),
                committed_end: n("40"),
            },
        ]
    );
    assert!(!audit.is_exact());
    assert_eq!(
        audit.leases,
        LeaseCheck::Checked {
            leases: 6,
            staged: vec![("s1".to_owned(), 2), ("s3".to_owned(), 1)],
        }
    );
    let text = audit.render();
    assert!(
        text.contains("checkpoints: 6 lease rows compared with the committed ends"),
        "{text}"
    );
    assert!(
        text.contains("shard s1: 2 staged batches, written and not yet committed"),
        "{text}"
    );
    assert!(
        text.contains("checkpoint beyond in s0: checkpoint 300 after the committed end 200"),
        "{text}"
    );
    assert!(
        text.contains(
            "checkpoint beyond in s2: checkpoint 7 the commit state does not name the shard"
        ),
        "{text}"
    );
    assert!(text.ends_with("\nNOT exact\n"), "{text}");
}

#[tokio::test]
async fn checkpoints_at_or_below_the_ends_are_exact_and_an_unread_lease_table_is_a_caveat() {
    let catalog = memory_catalog().await;
    let (ident, table) = events_table(&catalog).await;
    let (_, file_a) = write_data_file(&table, "s0-a", DAY, &[("s0", "1"), ("s0", "2")]).await;
    commit_staged(
        &catalog,
        &ident,
        &[staged_with(&table, "s0", "TRIM_HORIZON", "2", file_a)],
    )
    .await
    .unwrap();
    let audit = audit_table(&catalog, &ident, listing(&[])).await.unwrap();

    let mut checked = audit.clone();
    checked.check_leases(Some(Ok(vec![lease(
        "s0",
        Checkpoint::SequenceNumber(n("2")),
        0,
    )])));
    assert_eq!(checked.findings, []);
    assert!(checked.render().ends_with("\nexact\n"));

    let mut unread = audit;
    unread.check_leases(Some(Err("no such table".to_owned())));
    assert!(unread.is_exact());
    let text = unread.render();
    assert!(
        text.contains("checkpoints: not checked (lease table not read: no such table)"),
        "{text}"
    );
    assert!(
        text.ends_with("\nexact (checkpoints not checked)\n"),
        "{text}"
    );
}

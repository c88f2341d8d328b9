use std::convert::Infallible;
use std::future::ready;

use aws_sdk_s3::Client;
use aws_smithy_mocks::{RuleMode, mock, mock_client};
use clap::{CommandFactory as _, FromArgMatches as _};
use shard_lease::Checkpoint;

use super::*;
use crate::events::rule::CopyRef;
use crate::output::read_back::listing::test_support::page;
use crate::table::commit::commit_staged;
use crate::table::test_support::{events_table, memory_catalog, staged_with, write_data_file};
use crate::verify::VerifyArgs;
use crate::verify::report::DecisionsObject;
use crate::verify::table::{LeaseCheck, TableFinding};
use crate::verify::table_gaps::TableShardGaps;
use crate::verify::test_support::{MINUTE_MILLIS, SHARD, n, test_plan};

#[tokio::test]
async fn the_audit_of_a_catalog_judges_the_checkpoints_read_before_it() {
    let catalog = memory_catalog().await;
    let (ident, table) = events_table(&catalog).await;
    let (path, file) = write_data_file(&table, "s0-a", 20000, &[("s0", "1"), ("s0", "2")]).await;
    commit_staged(
        &catalog,
        &ident,
        &[staged_with(&table, "s0", "TRIM_HORIZON", "2", file)],
    )
    .await
    .unwrap();
    // An orphan beside the committed file.
    let orphan = path.replace("s0-a", "s0-b");
    let listed = vec![path, orphan.clone()];
    let list = move |_prefix: String| ready(Ok::<_, Infallible>(listed));
    let leases = vec![Lease::new(
        "s0",
        Checkpoint::SequenceNumber("3".parse().unwrap()),
        vec![],
    )];

    let audit = audit_catalog(&catalog, &ident, Some(Ok(leases)), list)
        .await
        .unwrap();
    assert_eq!(
        audit.findings,
        [TableFinding::CheckpointBeyond {
            shard_id: "s0".to_owned(),
            checkpoint: "3".parse().unwrap(),
            committed_end: Some("2".parse().unwrap()),
        }]
    );
    assert!(!audit.is_exact());
    assert_eq!(audit.orphans.paths, [orphan]);
    assert!(matches!(
        audit.leases,
        LeaseCheck::Checked { leases: 1, .. }
    ));

    let audit = audit_catalog(&catalog, &ident, None, |_| {
        ready(Ok::<_, Infallible>(Vec::new()))
    })
    .await
    .unwrap();
    assert!(audit.is_exact());
    assert_eq!(audit.leases, LeaseCheck::NotRequested);
}

#[tokio::test]
async fn the_data_directory_is_listed_page_by_page_as_s3_locations() {
    let prefix = "warehouse/archive/events/data/";
    let first = vec![format!("{prefix}day=20000/a.parquet")];
    let second = vec![format!("{prefix}day=20001/b.parquet")];
    let page1 = mock!(Client::list_objects_v2)
        .match_requests(move |input| {
            input.bucket() == Some("lake")
                && input.prefix() == Some(prefix)
                && input.continuation_token().is_none()
        })
        .then_output(move || page(&first, Some("t1")));
    let page2 = mock!(Client::list_objects_v2)
        .match_requests(|input| input.continuation_token() == Some("t1"))
        .then_output(move || page(&second, None));
    let client = mock_client!(aws_sdk_s3, RuleMode::Sequential, [&page1, &page2]);

    let files = list_data_files(client, format!("s3://lake/{prefix}"), false)
        .await
        .unwrap();
    assert_eq!(
        files,
        [
            "s3://lake/warehouse/archive/events/data/day=20000/a.parquet",
            "s3://lake/warehouse/archive/events/data/day=20001/b.parquet",
        ]
    );
    assert_eq!((page1.num_calls(), page2.num_calls()), (1, 1));
}

#[tokio::test]
async fn a_missing_sql_catalog_file_is_refused_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("catalog.db");
    let uri = format!("sqlite://{}", file.display());
    let argv = [
        "shardsink verify",
        "--bucket",
        "archive",
        "--prefix",
        "p",
        "--deep",
        "--iceberg-catalog",
        "sql",
        "--iceberg-catalog-uri",
        &uri,
        "--iceberg-warehouse",
        "s3://lake/warehouse",
        "--iceberg-table",
        "archive.events",
    ];
    let command = VerifyArgs::command().mut_args(|arg| arg.env(None::<&str>));
    let args = VerifyArgs::from_arg_matches(&command.try_get_matches_from(argv).unwrap()).unwrap();
    let plan = Plan::from_args(&args).unwrap();
    let clients = AwsClients::from_env(true).await;

    let err = audit_iceberg(
        plan.iceberg.as_ref().unwrap(),
        &plan,
        &clients,
        (&SideRecords::new(), None),
        false,
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err:#}");
    assert!(!file.exists());
}

/// The table audit of a memory table whose [`SHARD`] holds one row per
/// sequence number of `rows`, committed up to `end`, then its gap check
/// against a fake stream whose [`SHARD`] holds records 1 to `records`,
/// with `sides` the error and duplicates objects' records.
async fn gap_check(records: u64, rows: &[u64], end: u64, sides: &[u64]) -> TableAudit {
    let payloads: Vec<&[u8]> = (0..records).map(|_| b"{}".as_slice()).collect();
    keyed_gap_check(&payloads, rows, end, sides, None).await
}

/// The audit (without a gap check) of a table whose one shard, [`SHARD`],
/// has live rows `rows` and the committed end `end`.
async fn committed_table(rows: &[u64], end: u64) -> TableAudit {
    let catalog = memory_catalog().await;
    let (ident, table) = events_table(&catalog).await;
    let texts: Vec<String> = rows.iter().map(u64::to_string).collect();
    let rows: Vec<(&str, &str)> = texts.iter().map(|row| (SHARD, row.as_str())).collect();
    let (path, file) = write_data_file(&table, "a", 20000, &rows).await;
    commit_staged(
        &catalog,
        &ident,
        &[staged_with(
            &table,
            SHARD,
            "TRIM_HORIZON",
            &end.to_string(),
            file,
        )],
    )
    .await
    .unwrap();
    let listed = vec![path];
    audit_catalog(&catalog, &ident, None, move |_| {
        ready(Ok::<_, Infallible>(listed))
    })
    .await
    .unwrap()
}

/// [`gap_check`] of records with these payloads (one a second), and with
/// `events` the window check on them.
async fn keyed_gap_check(
    payloads: &[&[u8]],
    rows: &[u64],
    end: u64,
    sides: &[u64],
    events: Option<(&EventCheck, &TableEventInputs)>,
) -> TableAudit {
    use std::sync::Arc;

    use crate::fake_aws::{self, FakeStream};

    let mut audit = committed_table(rows, end).await;

    let stream = Arc::new(FakeStream::default());
    let shard = stream.shard(SHARD);
    for (i, payload) in (1u64..).zip(payloads) {
        shard.push(&i.to_string(), MINUTE_MILLIS + i as i64 * 1_000, payload);
    }
    let clients = fake_aws::clients(stream, Default::default(), Default::default());
    let plan = test_plan();
    let kinesis = Kinesis::new(clients.kinesis.clone(), plan.stream.clone().unwrap());
    let sides = SideRecords::from([(
        SHARD.to_owned(),
        sides.iter().map(|&side| (n(side), None)).collect(),
    )]);
    check_table_gaps(&kinesis, &mut audit, &sides, events, &plan, false).await;
    audit
}

/// The gap check's one shard.
fn checked_shard(audit: &TableAudit) -> &TableShardGaps {
    let TableGaps::Checked { shards, .. } = &audit.gaps else {
        panic!("gaps not checked: {:?}", audit.gaps);
    };
    assert_eq!(shards.len(), 1, "{shards:?}");
    &shards[0]
}

#[tokio::test(start_paused = true)]
async fn a_record_missing_below_the_committed_end_is_a_gap_named_in_the_findings() {
    let audit = gap_check(6, &[1, 2, 4, 5, 6], 6, &[]).await;
    let text = audit.render();
    assert!(!audit.is_exact(), "{text}");
    assert_eq!(
        audit.findings,
        [TableFinding::Missing {
            shard_id: SHARD.to_owned(),
            committed_end: n(6),
            records: 1,
            first: vec![(n(3), None)],
        }],
        "{text}"
    );
    assert_eq!(checked_shard(&audit).checked, 6, "{text}");
    assert!(
        text.contains(&format!(
            "missing in {SHARD}: 1 records up to the committed end 6 in no live row nor error or \
             duplicates object: 3\n"
        )),
        "{text}"
    );
    assert!(text.ends_with("\nNOT exact\n"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn a_complete_table_is_exact_with_the_records_checked_per_shard() {
    let audit = gap_check(6, &[1, 2, 3, 4, 5, 6], 6, &[]).await;
    let text = audit.render();
    assert!(audit.is_exact(), "{text}");
    assert_eq!(audit.findings, [], "{text}");
    let shard = checked_shard(&audit);
    assert_eq!((shard.checked, shard.missing), (6, 0), "{text}");
    assert!(shard.notes.is_empty(), "{text}");
    assert!(
        text.contains(&format!(
            "  shard {SHARD}: 6 records checked (6 user records, 0 in error or duplicates \
             objects) up to 6, 0 missing\n"
        )),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_record_in_an_error_object_is_not_a_gap() {
    let audit = gap_check(6, &[1, 2, 4, 5, 6], 6, &[3]).await;
    let text = audit.render();
    assert!(audit.is_exact(), "{text}");
    let shard = checked_shard(&audit);
    assert_eq!((shard.checked, shard.in_sides), (6, 1), "{text}");
    // A side record of another sequence number does not stand in for 3.
    let audit = gap_check(6, &[1, 2, 4, 5, 6], 6, &[4]).await;
    assert!(!audit.is_exact(), "{}", audit.render());
}

#[tokio::test(start_paused = true)]
async fn records_after_the_committed_end_are_not_gaps() {
    // 7 to 9 are staged or not yet written: not expected in the table.
    let audit = gap_check(9, &[1, 2, 3, 4, 5, 6], 6, &[]).await;
    let text = audit.render();
    assert!(audit.is_exact(), "{text}");
    let shard = checked_shard(&audit);
    assert_eq!(
        (shard.checked, shard.committed_end.clone()),
        (6, n(6)),
        "{text}"
    );
    assert!(shard.notes.is_empty(), "{text}");
}

/// The event settings checked, and the objects of one batch decided with
/// them, `first..=last` of [`SHARD`], whose duplicates object holds
/// `duplicates` (record, accepted copy it names).
fn decided(first: u64, last: u64, duplicates: &[(u64, u64)]) -> (EventCheck, TableEventInputs) {
    decided_listed(first, last, duplicates, true)
}

/// [`decided`], the batch's duplicates object listed or not.
fn decided_listed(
    first: u64,
    last: u64,
    duplicates: &[(u64, u64)],
    duplicates_listed: bool,
) -> (EventCheck, TableEventInputs) {
    let settings = crate::verify::test_support::payload_settings();
    let description = settings_description(&settings.source, settings.fingerprint);
    let copy = |i: u64| CopyRef {
        shard_id: std::sync::Arc::from(SHARD),
        sequence_number: n(i),
        sub_sequence_number: None,
    };
    let inputs = TableEventInputs {
        decisions: vec![DecisionsObject {
            key: crate::verify::test_support::object(first, last),
            format: Some(description),
            duplicates_listed,
        }],
        duplicates: duplicates
            .iter()
            .map(|&(record, of)| (copy(record), copy(of)))
            .collect(),
    };
    let check = EventCheck {
        settings,
        stream_scope: false,
    };
    (check, inputs)
}

#[tokio::test(start_paused = true)]
async fn with_events_the_table_s_rows_hold_each_event_once_per_window() {
    let payloads: [&[u8]; 4] = [b"a", b"b", b"a", b"a"];
    // 3 and 4 are copies of 1, in the duplicates object.
    let (check, inputs) = decided(1, 4, &[(3, 1), (4, 1)]);
    let audit = keyed_gap_check(&payloads, &[1, 2], 4, &[3, 4], Some((&check, &inputs))).await;
    let text = audit.render();
    assert!(audit.is_exact(), "{text}");
    assert!(
        text.contains("once a window: 0 events kept twice, 0 duplicates not naming a kept copy (4 user records checked, 2 duplicates"),
        "{text}"
    );

    // 3 is a row too: the event is kept twice within the window.
    let (check, inputs) = decided(1, 4, &[(4, 1)]);
    let audit = keyed_gap_check(&payloads, &[1, 2, 3], 4, &[4], Some((&check, &inputs))).await;
    let text = audit.render();
    assert!(!audit.is_exact(), "{text}");
    assert!(
        text.contains("once a window: 1 events kept twice"),
        "{text}"
    );
    assert!(text.ends_with("\nNOT exact\n"), "{text}");

    // A batch past the committed end is not committed: not keyed.
    let (check, inputs) = decided(1, 5, &[(4, 1)]);
    let audit = keyed_gap_check(&payloads, &[1, 2, 3], 4, &[4], Some((&check, &inputs))).await;
    let text = audit.render();
    assert!(text.contains("(0 user records checked"), "{text}");

    // Its duplicates object written after the listing (a daemon running
    // beside the audit): not keyed either, or 3 and 4 would count as kept.
    let (check, inputs) = decided_listed(1, 4, &[], false);
    let audit = keyed_gap_check(&payloads, &[1, 2], 4, &[], Some((&check, &inputs))).await;
    let text = audit.render();
    assert!(
        text.contains("once a window: 0 events kept twice"),
        "{text}"
    );
    assert!(text.contains("(0 user records checked"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn a_live_row_also_in_an_error_or_duplicates_object_is_in_two_places() {
    let mut audit = committed_table(&[1, 2, 3, 4], 4).await;
    audit.check_sides(&SideRecords::from([(
        SHARD.to_owned(),
        [(n(3), None), (n(9), None)].into_iter().collect(),
    )]));
    let text = audit.render();
    assert!(!audit.is_exact(), "{text}");
    assert_eq!(
        audit.findings,
        [TableFinding::AlsoInObjects {
            shard_id: SHARD.to_owned(),
            records: 1,
            first: vec![(n(3), None)],
        }],
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "in two places in {SHARD}: 1 records in a live row and in an error or duplicates \
             object: 3\n"
        )),
        "{text}"
    );
}

#[tokio::test]
async fn without_the_stream_or_the_objects_the_table_s_window_is_not_checked() {
    let catalog = memory_catalog().await;
    let (ident, _) = events_table(&catalog).await;
    let mut audit = audit_catalog(&catalog, &ident, None, |_| {
        ready(Ok::<_, Infallible>(Vec::new()))
    })
    .await
    .unwrap();
    audit.window = WindowOutcome::NotChecked("--deep reads the decisions objects");
    let text = audit.render();
    assert!(
        text.contains("once a window: not checked (--deep reads the decisions objects)"),
        "{text}"
    );
    assert!(
        text.ends_with("exact (checkpoints not checked, events once per window not checked)\n"),
        "{text}"
    );
}

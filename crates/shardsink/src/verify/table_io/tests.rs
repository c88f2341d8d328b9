use std::convert::Infallible;
use std::future::ready;

use aws_sdk_s3::Client;
use aws_smithy_mocks::{RuleMode, mock, mock_client};
use clap::{CommandFactory as _, FromArgMatches as _};
use shard_lease::Checkpoint;

use super::*;
use crate::output::read_back::listing::test_support::page;
use crate::table::commit::commit_staged;
use crate::table::test_support::{events_table, memory_catalog, staged_with, write_data_file};
use crate::verify::VerifyArgs;
use crate::verify::table::{LeaseCheck, TableFinding};

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

    let err = audit_iceberg(plan.iceberg.as_ref().unwrap(), &plan, &clients, false)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err:#}");
    assert!(!file.exists());
}

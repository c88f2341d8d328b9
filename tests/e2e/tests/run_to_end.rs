//! Contract lines 1 and 5 on the happy path, with hostile input: 20,000
//! records (0 B to 1 MiB, binary and text, JSON-special and non-ASCII
//! partition keys, records that only look like KPL aggregates) plus real KPL
//! aggregates over 4 shards, small buffers so many objects are written; then
//! SIGTERM. Every record must be in exactly one object, with its fields and
//! arrival time, each line inside its key's shard, range and minute; the
//! shutdown must leave every checkpoint at its shard's last record.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

use std::time::Duration;

use shardsink_e2e::check::{clean_shutdown_problems, exactly_once};
use shardsink_e2e::producer::{kpl_record_specs, mixed_record_specs, put_kpl_records};
use shardsink_e2e::stream::read_stream;
use shardsink_e2e::{Daemon, Scenario, Versioning, archive_then_stop, require_env, scaled};

const RECORDS: usize = 20_000;
const BUFFER_MAX_RECORDS: usize = 500;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_to_end() {
    let env = require_env!();
    let scenario = Scenario::create(&env, "run-to-end", 4, Versioning::Off)
        .await
        .unwrap();
    let seed = shardsink_e2e::env::seed("run_to_end records", Some(20_000));

    let specs = mixed_record_specs(RECORDS, seed);
    let mut produced = scenario.put(&specs).await.unwrap();
    produced.extend(
        put_kpl_records(&env, &scenario.stream, &kpl_record_specs(20, seed))
            .await
            .unwrap(),
    );
    println!("produced {} user records", produced.len());

    let settings = scenario
        .settings
        .clone()
        .set("buffer-max-records", BUFFER_MAX_RECORDS.to_string())
        .set("buffer-max-age", "5s")
        .set("log-format", "json");
    let mut daemon = Daemon::spawn(&settings).unwrap();
    let mut reader = scenario.archive_reader();
    let archive = archive_then_stop(
        &mut reader,
        &produced,
        &mut daemon,
        scaled(Duration::from_secs(180)),
    )
    .await
    .unwrap();
    // The SIGTERM summary says how many records and batches were written.
    let log = std::fs::read_to_string(daemon.log_path()).unwrap();
    let summary: serde_json::Value = log
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|event| event["message"] == "shutdown complete")
        .unwrap_or_else(|| panic!("no shutdown summary in the log:\n{}", daemon.log_tail(20)));
    assert!(
        summary["records_written"] == produced.len()
            && summary["batches_written"] == archive.objects.len(),
        "summary {summary} does not match {} records in {} objects",
        produced.len(),
        archive.objects.len()
    );
    let truth = read_stream(&env, &scenario.stream).await.unwrap();
    let harness = truth.check_produced(&produced);
    assert!(
        harness.is_empty(),
        "the stream does not hold what the producer reported: {harness:#?}"
    );

    let mut report = exactly_once(&produced, &archive);
    report.check_arrival_times(&archive, &truth);
    report.assert_exact();

    // Small buffers: at least one object per 500 records.
    let most = archive
        .objects
        .iter()
        .map(|o| o.records.len())
        .max()
        .unwrap_or_default();
    assert!(
        archive.objects.len() >= RECORDS / BUFFER_MAX_RECORDS,
        "{} objects for {RECORDS} records with --buffer-max-records {BUFFER_MAX_RECORDS} \
         (largest object: {most} lines)",
        archive.objects.len()
    );

    let rows = scenario.lease_rows().await.unwrap();
    let problems = clean_shutdown_problems(&rows, &produced);
    assert!(
        problems.is_empty(),
        "after SIGTERM: {problems:#?}\nrows: {rows:#?}"
    );
    scenario.cleanup().await;
}

//! Contract lines 1 and 5 on the happy path, with hostile input: 20,000
//! records (0 B to 1 MiB, binary and text, JSON-special and non-ASCII
//! partition keys, records that only look like KPL aggregates) plus real KPL
//! aggregates over 4 shards, small buffers so many objects are written; then
//! SIGTERM. Every record must be in exactly one object, with its fields and
//! arrival time, each line inside its key's shard, range and minute; the
//! shutdown must leave every checkpoint at its shard's last record.

use shardsink_e2e::producer::{kpl_record_specs, mixed_record_specs, put_kpl_records};
use shardsink_e2e::{Daemon, Finish, Scenario, Versioning, require_env};

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
    // Also: the stream holds what was produced, arrival times, and every
    // checkpoint at its shard's last record after SIGTERM.
    let how = Finish::stopping(&mut daemon, 180)
        .ground_truth()
        .clean_shutdown();
    let archive = scenario.finish(&mut reader, &produced, how).await.archive;
    // The SIGTERM summary says how many records and batches were written.
    let summary: serde_json::Value = daemon
        .log_entries()
        .into_iter()
        .find(|event| event["message"] == "shutdown complete")
        .unwrap_or_else(|| panic!("no shutdown summary in the log:\n{}", daemon.log_tail(20)));
    assert!(
        summary["records_written"] == produced.len()
            && summary["batches_written"] == archive.objects.len(),
        "summary {summary} does not match {} records in {} objects",
        produced.len(),
        archive.objects.len()
    );

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
}

//! `deploy/iam-policy.json` grants exactly what shardsink uses.
//!
//! The daemon records every AWS operation it performs
//! (`SHARDSINK_RECORD_AWS_OPERATIONS`, test builds) through a run that takes
//! every path: first start (the lease table is created), a crash after a PUT
//! and its replay (the object is read back after 412), a second worker that
//! steals a lease (the loser re-reads its row after a failed condition),
//! clean stops (heartbeat rows deleted), and a restart after the lease table
//! was deleted — with event deduplication in a DynamoDB event table (the
//! table created, Time to Live turned on, items read and written). The test
//! fails if an operation needs an IAM action the policy lacks, or if the
//! policy grants an action nothing used.
//!
//! The run reads in the profile's read mode (`shardsink_e2e::env::read_mode`):
//! by polling, the policy's enhanced fan-out statement ([`FAN_OUT_SID`])
//! must go unused and is left out of the comparison; on the fanout profile
//! (`--read-mode fan-out`) every statement counts, so its actions must both
//! suffice and each be used.

use std::collections::BTreeSet;
use std::time::Duration;

use shardsink_e2e::fixtures::delete_lease_table;
use shardsink_e2e::iam;
use shardsink_e2e::producer::{RecordSpec, small_record_specs};
use shardsink_e2e::{
    Daemon, Finish, Scenario, Versioning, require_env, scaled, stop_gracefully, wait_for_archive,
    wait_until,
};

/// `specs` with no two payloads alike (each gets `label` and its index), so that
/// event deduplication by payload keeps every record in the main prefix,
/// where the archive is checked.
fn distinct(mut specs: Vec<RecordSpec>, label: &str) -> Vec<RecordSpec> {
    for (i, spec) in specs.iter_mut().enumerate() {
        spec.data
            .extend_from_slice(format!(" {label} distinct {i}").as_bytes());
    }
    specs
}

/// The `Sid` of the policy's statement that only `--read-mode fan-out`
/// needs (RegisterStreamConsumer, DescribeStreamConsumer, SubscribeToShard),
/// which polling-only deployments may drop.
const FAN_OUT_SID: &str = "FanOutRead";

/// The actions `deploy/iam-policy.json` grants, in the statements whose
/// `Sid` `keep` accepts.
fn policy_actions(keep: impl Fn(&str) -> bool) -> BTreeSet<String> {
    iam::policy_actions("iam-policy.json", keep)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_iam_policy_grants_exactly_the_operations_used() {
    let env = require_env!();
    let scenario = Scenario::create(&env, "iam", 2, Versioning::Off)
        .await
        .unwrap();
    let log_dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let operations = log_dir.join(format!("aws-operations-{}.txt", scenario.stream));
    let _ = std::fs::remove_file(&operations);
    let base = scenario
        .settings
        .clone()
        .set("buffer-max-records", "30")
        .set("record-aws-operations", operations.display().to_string())
        // Event deduplication in the DynamoDB event table: its calls too.
        .set("event-id", "payload")
        .set("event-dedup-store", "dynamodb");
    let worker_a = base.clone().set("worker-id", "iam-a");
    let worker_b = base.clone().set("worker-id", "iam-b");
    let mut produced = scenario
        .put(&distinct(small_record_specs(200, 2, "iam"), "first"))
        .await
        .unwrap();

    // 1. First start creates the table; crash right after the third PUT.
    let mut a = Daemon::spawn(&worker_a.clone().failpoints("after-put=2*off->return")).unwrap();
    let status = a.wait_exit(scaled(Duration::from_secs(60))).await.unwrap();
    assert!(!status.success(), "the failpoint aborts the daemon");

    // 2. Restart: the pending batch is replayed and meets its object (412 →
    //    GetObject). A second worker steals a lease; the loser's next
    //    conditional write fails and it re-reads its row (GetItem).
    let mut a = Daemon::spawn(&worker_a).unwrap();
    let mut reader = scenario.archive_reader();
    wait_for_archive(
        &mut reader,
        &produced,
        &mut a,
        scaled(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    let mut b = Daemon::spawn(&worker_b).unwrap();
    wait_until(
        scaled(Duration::from_secs(60)),
        "the second worker steals a lease",
        || {
            let log = a.log();
            async move { log.contains("lease lost") }
        },
    )
    .await
    .unwrap();
    stop_gracefully(&mut b, scaled(Duration::from_secs(40)))
        .await
        .unwrap();
    stop_gracefully(&mut a, scaled(Duration::from_secs(40)))
        .await
        .unwrap();

    // 3. The lease table is lost; the next start creates it again.
    delete_lease_table(&env, &base.lease_table()).await.unwrap();
    produced.extend(
        scenario
            .put(&distinct(small_record_specs(40, 2, "iam after"), "after"))
            .await
            .unwrap(),
    );
    let mut a = Daemon::spawn(&worker_a).unwrap();
    let how = Finish::stopping(&mut a, 60);
    scenario.finish(&mut reader, &produced, how).await;

    delete_lease_table(&env, &format!("{}-events", base.lease_table()))
        .await
        .unwrap();

    let recorded = std::fs::read_to_string(&operations).unwrap();
    let used = iam::recorded_actions(&recorded);
    // The fan-out statement's actions are used by a run with `--read-mode
    // fan-out` (the fanout profile's) and by no polling run.
    let fan_out = policy_actions(|sid| sid == FAN_OUT_SID);
    assert!(
        !fan_out.is_empty(),
        "deploy/iam-policy.json has no statement with Sid {FAN_OUT_SID}"
    );
    let read_mode = shardsink_e2e::env::read_mode();
    println!("read mode: {read_mode}");
    let granted = match read_mode {
        "fan-out" => policy_actions(|_| true),
        _ => {
            let fan_out_used: Vec<&String> = used.intersection(&fan_out).collect();
            assert!(
                fan_out_used.is_empty(),
                "a polling run used the fan-out actions {fan_out_used:?}"
            );
            policy_actions(|sid| sid != FAN_OUT_SID)
        }
    };
    // Fan-out reads a shard by GetRecords only to finish a closed shard on a
    // server that sends no child shards; this run closes none. The polling
    // run checks that those two are used.
    let polling_only = ["kinesis:GetRecords", "kinesis:GetShardIterator"];
    let missing: Vec<&String> = used.difference(&granted).collect();
    let unused: Vec<&String> = granted
        .difference(&used)
        .filter(|action| read_mode != "fan-out" || !polling_only.contains(&action.as_str()))
        .collect();
    println!("used: {used:?}");
    assert!(
        missing.is_empty(),
        "deploy/iam-policy.json lacks {missing:?} (used: {used:?})"
    );
    assert!(
        unused.is_empty(),
        "deploy/iam-policy.json grants {unused:?}, which no run used (used: {used:?})"
    );
}

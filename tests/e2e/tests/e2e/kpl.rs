//! KPL-aggregated records: each user record of an aggregate is its own
//! line, with `subSequenceNumber` (its position in the aggregate), its own
//! partition key and data; plain records in the same stream have no
//! `subSequenceNumber`. The aggregates are built by the harness's own
//! encoder, not the daemon's.

use shardsink_e2e::producer::{kpl_record_specs, put_kpl_records, small_record_specs};
use shardsink_e2e::{Daemon, Finish, Scenario, Versioning, require_env};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kpl_aggregates_are_unpacked() {
    let env = require_env!();
    let scenario = Scenario::create(&env, "kpl", 2, Versioning::Off)
        .await
        .unwrap();
    let mut produced = scenario
        .put(&small_record_specs(100, 8, "plain"))
        .await
        .unwrap();
    produced.extend(
        put_kpl_records(&env, &scenario.stream, &kpl_record_specs(60, 8))
            .await
            .unwrap(),
    );
    produced.extend(
        scenario
            .put(&small_record_specs(100, 9, "plain"))
            .await
            .unwrap(),
    );
    let aggregated = produced
        .iter()
        .filter(|r| r.sub_sequence_number.is_some())
        .count();
    println!(
        "{} user records, {aggregated} of them in 60 aggregates",
        produced.len()
    );

    let settings = scenario
        .settings
        .clone()
        .set("buffer-max-records", "100")
        .set("buffer-max-age", "2s")
        .set("compression", "gzip");
    let mut daemon = Daemon::spawn(&settings).unwrap();
    let mut reader = scenario.archive_reader();
    let how = Finish::stopping(&mut daemon, 90)
        .ground_truth()
        .clean_shutdown();
    scenario.finish(&mut reader, &produced, how).await;
}

//! The checkpoint table lost *while* shardsink runs (C7 in docs/DESIGN.md):
//! with a producer writing, the lease table is deleted (or
//! emptied) under the running daemon. Its lease writes then fail; it must
//! recreate the table (or the leases) by itself, restart each shard from the
//! oldest record with the resume skip on, and keep S3 exact — no restart, no operator.

use std::time::Duration;

use shardsink_e2e::fixtures::{clear_lease_table, delete_lease_table};
use shardsink_e2e::producer::{BackgroundOptions, BackgroundProducer};
use shardsink_e2e::{
    Daemon, Finish, Scenario, TestEnv, Versioning, require_env, scaled, wait_until,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loss {
    Deleted,
    Emptied,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lease_table_deleted_while_running() {
    let env = require_env!();
    lose_the_table_while_running(&env, Loss::Deleted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lease_table_emptied_while_running() {
    let env = require_env!();
    lose_the_table_while_running(&env, Loss::Emptied).await;
}

async fn lose_the_table_while_running(env: &TestEnv, loss: Loss) {
    let scenario = Scenario::create(env, "lost-running", 2, Versioning::Enabled)
        .await
        .unwrap();
    let settings = scenario
        .settings
        .clone()
        .set("buffer-max-records", "50")
        .set("buffer-max-age", "2s")
        .set("failover-time", "2s");
    let producer = BackgroundProducer::start(
        env,
        &scenario.stream,
        BackgroundOptions {
            records_per_second: 100,
            seed: shardsink_e2e::env::seed("lost_table_running", None),
            label: format!("lost-running-{loss:?}"),
            ..BackgroundOptions::default()
        },
    );
    let mut reader = scenario.archive_reader();
    let mut daemon = Daemon::spawn(&settings).unwrap();

    // Let it write a good part first, so the restart has records to skip.
    let scenario_ref = &scenario;
    wait_until(
        scaled(Duration::from_secs(60)),
        "200 records archived",
        || async move {
            let mut probe = scenario_ref.archive_reader();
            Ok::<_, anyhow::Error>(probe.read().await?.record_count() >= 200)
        },
    )
    .await
    .unwrap();

    let table = settings.lease_table();
    match loss {
        Loss::Deleted => assert!(delete_lease_table(env, &table).await.unwrap()),
        Loss::Emptied => assert!(clear_lease_table(env, &table).await.unwrap() > 0),
    }
    println!("lease table {table} {loss:?} under the running daemon");

    // Keep producing across the loss, then stop and require everything once.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let produced = producer.stop().await.unwrap();
    // Versioned bucket: nothing overwritten either.
    let how = Finish::stopping(&mut daemon, 120);
    scenario.finish(&mut reader, &produced, how).await;
    let rows = scenario.lease_rows().await.unwrap();
    assert!(!rows.is_empty(), "the daemon recreated its leases");
}

//! Contract line 7: with the checkpoint table lost, the daemon starts over
//! from the oldest record and the S3 listing alone keeps the output exact.
//! Run to completion, stop, lose the table (deleted, or emptied), produce
//! more, restart: nothing lost, nothing duplicated.
//!
//! The restart uses a different `--buffer-max-records`, so the replayed
//! batches do not line up with the first run's objects: only the resume skip against
//! the listing (not `If-None-Match` on identical keys) can keep the output
//! exact.

use shardsink_e2e::fixtures::{clear_lease_table, delete_lease_table};
use shardsink_e2e::producer::small_record_specs;
use shardsink_e2e::{Daemon, Finish, Scenario, TestEnv, Versioning, require_env};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loss {
    Deleted,
    Emptied,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_table_deleted() {
    let env = require_env!();
    lose_the_table(&env, Loss::Deleted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_table_emptied() {
    let env = require_env!();
    lose_the_table(&env, Loss::Emptied).await;
}

async fn lose_the_table(env: &TestEnv, loss: Loss) {
    let scenario = Scenario::create(env, "lost-table", 2, Versioning::Enabled)
        .await
        .unwrap();
    let settings = scenario
        .settings
        .clone()
        .set("buffer-max-records", "100")
        .set("buffer-max-age", "2s");
    let mut produced = scenario
        .put(&small_record_specs(800, 3, "first run"))
        .await
        .unwrap();

    let mut daemon = Daemon::spawn(&settings).unwrap();
    let mut reader = scenario.archive_reader();
    let how = Finish::stopping(&mut daemon, 90);
    let before = scenario.finish(&mut reader, &produced, how).await.archive;

    let table = settings.lease_table();
    match loss {
        Loss::Deleted => assert!(
            delete_lease_table(env, &table).await.unwrap(),
            "the lease table {table} did not exist"
        ),
        Loss::Emptied => assert!(
            clear_lease_table(env, &table).await.unwrap() > 0,
            "the lease table {table} had no rows"
        ),
    }
    println!("lease table {table} {loss:?}");

    produced.extend(
        scenario
            .put(&small_record_specs(400, 4, "second run"))
            .await
            .unwrap(),
    );
    // Different batch boundaries from the first run (see the module docs).
    let mut daemon = Daemon::spawn(&settings.clone().set("buffer-max-records", "70")).unwrap();
    // Versioned bucket: nothing overwritten; and a clean shutdown.
    let how = Finish::stopping(&mut daemon, 90).clean_shutdown();
    let after = scenario.finish(&mut reader, &produced, how).await.archive;
    // The first run's objects are untouched.
    for object in &before.objects {
        let now = after
            .object(&object.key.key)
            .unwrap_or_else(|| panic!("{} disappeared", object.key.key));
        assert_eq!(now.e_tag, object.e_tag, "{} changed", object.key.key);
    }
}

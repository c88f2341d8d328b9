//! Contract lines 1, 2, 3 and 4 under SIGKILL: while a background producer
//! writes, the daemon is killed at six random moments and restarted each
//! time. After each kill, every record at or below a shard's checkpoint
//! must already be in S3 (line 3), and each shard's archived records must be
//! a gap-free prefix of what was produced (line 4: batches in order). At the end every record is in exactly one
//! object (line 1), and in a versioned bucket every key has exactly one
//! version: nothing was ever overwritten (line 2).

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use shardsink_e2e::check::{checkpoint_problems, prefix_problems};
use shardsink_e2e::producer::{BackgroundOptions, BackgroundProducer};
use shardsink_e2e::{Daemon, Finish, Scenario, Versioning, require_env, scaled, wait_until};

const KILLS: usize = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn survives_repeated_sigkill() {
    let env = require_env!();
    let scenario = Scenario::create(&env, "kill-restart", 3, Versioning::Enabled)
        .await
        .unwrap();
    let seed = shardsink_e2e::env::seed("kill_restart kill delays", None);
    let mut rng = StdRng::seed_from_u64(seed);

    let settings = scenario
        .settings
        .clone()
        .set("buffer-max-records", "100")
        .set("buffer-max-age", "2s")
        .set("compression", "gzip");
    let producer = BackgroundProducer::start(
        &env,
        &scenario.stream,
        BackgroundOptions {
            records_per_second: 100,
            seed,
            label: "kill-restart".to_owned(),
            ..BackgroundOptions::default()
        },
    );
    let mut reader = scenario.archive_reader();
    let mut daemon = Daemon::spawn(&settings).unwrap();
    // A new deployment waits one failover time before taking never-owned
    // rows (DESIGN.md, "Never-owned rows wait"); the kills start once it owns
    // every shard, so that they land on a daemon at work. Restarts keep the
    // worker id and take their own leases back at once.
    wait_until(
        scaled(Duration::from_secs(60)),
        "every lease owned by the first daemon",
        || async {
            let rows = scenario.lease_rows().await?;
            Ok::<_, anyhow::Error>(
                rows.len() == 3 && rows.iter().all(|row| row.lease_owner.is_some()),
            )
        },
    )
    .await
    .unwrap();
    let mut archived_before = 0;
    let mut intervals_with_progress = 0;
    for kill in 1..=KILLS {
        let delay = Duration::from_millis(rng.random_range(1_000..=6_000));
        // Sleeping is the point here: the kill lands at a random moment.
        tokio::time::sleep(delay).await;
        assert!(
            daemon.is_running(),
            "shardsink exited on its own before kill {kill}: {:?}\n{}",
            daemon.exit_status(),
            daemon.log_tail(60)
        );
        daemon.kill().unwrap();
        println!(
            "kill {kill}/{KILLS} after {delay:?}; {} records produced",
            producer.count()
        );

        // Contract line 3, right at the crash: rows first, then the archive.
        let rows = scenario.lease_rows().await.unwrap();
        let archive = reader.read().await.unwrap();
        let produced_so_far = producer.produced();
        let problems = checkpoint_problems(&rows, &produced_so_far, &archive);
        assert!(problems.is_empty(), "after kill {kill}: {problems:#?}");
        // Contract line 4: frozen by the kill, each shard's archive has no gap.
        let gaps = prefix_problems(&produced_so_far, &archive);
        assert!(gaps.is_empty(), "after kill {kill}: {gaps:#?}");
        let archived = archive.record_count();
        println!(
            "  {archived} lines archived in {} objects",
            archive.objects.len()
        );
        if archived > archived_before {
            intervals_with_progress += 1;
        }
        archived_before = archived;

        daemon = Daemon::spawn(&settings).unwrap();
    }
    let produced = producer.stop().await.unwrap();
    println!("stopped producing: {} records", produced.len());
    // The kills must land on a daemon at work, not on one still starting.
    assert!(
        intervals_with_progress * 2 >= KILLS,
        "the archive grew in only {intervals_with_progress} of {KILLS} runs between kills"
    );

    // Versioned bucket: also nothing overwritten, one version per object.
    let how = Finish::stopping(&mut daemon, 120);
    scenario.finish(&mut reader, &produced, how).await;
}

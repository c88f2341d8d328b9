//! Many workers on one stream: leases spread evenly, a killed
//! worker's shards are taken over after the failover time, a rolling restart
//! with SIGTERM hands leases over within one renewal interval, and a paused
//! worker (a zombie) cannot add a duplicate when it wakes up. S3 is read
//! record by record at the end of each test.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use shardsink_e2e::producer::{BackgroundOptions, BackgroundProducer, small_record_specs};
use shardsink_e2e::{
    Daemon, Finish, LeaseRow, Scenario, Settings, TestEnv, Versioning, require_env, scaled,
    wait_for_archive, wait_until,
};

/// Failover time the workers run with (the harness default).
const FAILOVER: Duration = Duration::from_secs(4);

fn worker(settings: &Settings, id: &str) -> Settings {
    settings
        .clone()
        .set("worker-id", id)
        .set("failover-time", "4s")
}

/// Lease owner → number of leases, for shards not at SHARD_END.
fn owners(rows: &[LeaseRow]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for row in rows
        .iter()
        .filter(|r| r.checkpoint.as_deref() != Some("SHARD_END"))
    {
        *counts
            .entry(row.lease_owner.clone().unwrap_or_else(|| "-".to_owned()))
            .or_default() += 1;
    }
    counts
}

fn sorted_counts(counts: &BTreeMap<String, usize>) -> Vec<usize> {
    let mut values: Vec<usize> = counts.values().copied().collect();
    values.sort_unstable();
    values
}

async fn wait_for_spread(
    scenario: &Scenario,
    expected: &[usize],
    within: Duration,
) -> BTreeMap<String, usize> {
    let expected = expected.to_vec();
    wait_until(within, &format!("leases spread {expected:?}"), || async {
        let rows = scenario.lease_rows().await?;
        let counts = owners(&rows);
        Ok::<_, anyhow::Error>(!counts.contains_key("-") && sorted_counts(&counts) == expected)
    })
    .await
    .unwrap();
    owners(&scenario.lease_rows().await.unwrap())
}

fn producer(env: &TestEnv, scenario: &Scenario, label: &str) -> BackgroundProducer {
    BackgroundProducer::start(
        env,
        &scenario.stream,
        BackgroundOptions {
            records_per_second: 80,
            seed: shardsink_e2e::env::seed(label, None),
            label: label.to_owned(),
            ..BackgroundOptions::default()
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_workers_spread_and_take_over_a_killed_one() {
    let env = require_env!();
    let scenario = Scenario::create(&env, "three-workers", 8, Versioning::Enabled)
        .await
        .unwrap();
    let base = scenario
        .settings
        .clone()
        .set("buffer-max-records", "100")
        .set("buffer-max-age", "2s");
    let producer = producer(&env, &scenario, "three workers");
    let mut daemons: BTreeMap<String, Daemon> = BTreeMap::new();
    for id in ["w1", "w2", "w3"] {
        daemons.insert(id.to_owned(), Daemon::spawn(&worker(&base, id)).unwrap());
    }
    let spread = wait_for_spread(&scenario, &[2, 3, 3], scaled(Duration::from_secs(60))).await;
    println!("spread: {spread:?}");

    // Kill the worker holding three leases; the two others take them over,
    // but only once its leases expired (no live lease is stolen past the
    // target).
    let victim = spread
        .iter()
        .find(|(_, n)| **n == 3)
        .map(|(id, _)| id.clone())
        .unwrap();
    daemons.get_mut(&victim).unwrap().kill().unwrap();
    let killed_at = Instant::now();
    let taken_over = wait_for_spread(&scenario, &[4, 4], scaled(Duration::from_secs(60))).await;
    let took = killed_at.elapsed();
    println!("{victim} killed; taken over after {took:?}: {taken_over:?}");
    assert!(!taken_over.contains_key(&victim));
    assert!(
        took >= FAILOVER - FAILOVER / 3 - Duration::from_millis(500),
        "leases of the killed worker were taken after {took:?}, before they could expire"
    );
    daemons.remove(&victim);

    let produced = producer.stop().await.unwrap();
    let mut reader = scenario.archive_reader();
    let mut survivors: Vec<Daemon> = daemons.into_values().collect();
    let how = Finish::stopping_all(survivors.iter_mut().collect(), 120);
    scenario.finish(&mut reader, &produced, how).await;
}

/// Three workers restarted one at a time (SIGTERM, start again): each gives
/// its leases up at shutdown and the others take them as free leases, with
/// no wait for the failover time; the archive stays exact throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_restart_releases_every_lease_to_the_other_workers() {
    let env = require_env!();
    let scenario = Scenario::create(&env, "rolling", 8, Versioning::Enabled)
        .await
        .unwrap();
    let base = scenario
        .settings
        .clone()
        .set("buffer-max-records", "100")
        .set("buffer-max-age", "2s");
    let producer = producer(&env, &scenario, "rolling restart");
    let ids = ["w1", "w2", "w3"];
    let mut daemons: BTreeMap<&str, Daemon> = BTreeMap::new();
    for id in ids {
        daemons.insert(id, Daemon::spawn(&worker(&base, id)).unwrap());
    }
    wait_for_spread(&scenario, &[2, 3, 3], scaled(Duration::from_secs(60))).await;

    let renewal = FAILOVER / 3;
    // Observation granularity: the lease table is polled, not watched.
    let slack = Duration::from_millis(300);
    for id in ids {
        let held: Vec<String> = scenario
            .lease_rows()
            .await
            .unwrap()
            .into_iter()
            .filter(|r| r.lease_owner.as_deref() == Some(id))
            .map(|r| r.lease_key)
            .collect();
        let daemon = daemons.get_mut(id).unwrap();
        daemon.terminate().unwrap();
        // Watch each released lease from the moment it is seen free until
        // another worker owns it.
        let mut free_since: BTreeMap<String, Instant> = BTreeMap::new();
        let mut idle: BTreeMap<String, Duration> = BTreeMap::new();
        let deadline = Instant::now() + scaled(Duration::from_secs(60));
        while idle.len() < held.len() {
            assert!(
                Instant::now() < deadline,
                "released leases of {id} not taken: {idle:?} {free_since:?}"
            );
            for row in scenario.lease_rows().await.unwrap() {
                if !held.contains(&row.lease_key) || idle.contains_key(&row.lease_key) {
                    continue;
                }
                match row.lease_owner.as_deref() {
                    None => {
                        free_since
                            .entry(row.lease_key.clone())
                            .or_insert_with(Instant::now);
                    }
                    Some(owner) if owner != id => {
                        let since = free_since
                            .get(&row.lease_key)
                            .copied()
                            .unwrap_or_else(Instant::now);
                        idle.insert(row.lease_key.clone(), since.elapsed());
                    }
                    Some(_) => {}
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if let Err(error) = daemon.wait_exit_ok(scaled(Duration::from_secs(40))).await {
            panic!("{id}: {error:#}");
        }
        // Each lease was given up at shutdown, not left to expire: the
        // handover does not wait for the failover time. How long each shard
        // sat free is a measured figure (normally under one renewal
        // interval plus the table's polling), reported, not asserted: a
        // loaded machine delays the other workers' lease rounds.
        let log = daemon.log();
        for shard in &held {
            assert!(
                log.lines().any(
                    |line| line.contains("\"lease released\"") && line.contains(shard.as_str())
                ),
                "{id} did not release {shard} at shutdown; log {}",
                daemon.log_path().display()
            );
        }
        let over: Vec<_> = idle
            .iter()
            .filter(|(_, gap)| **gap > renewal + slack)
            .collect();
        println!(
            "{id} restarted; its shards were idle for {idle:?} (renewal interval {renewal:?}; over it: {over:?})"
        );
        daemons.insert(id, Daemon::spawn(&worker(&base, id)).unwrap());
        wait_for_spread(&scenario, &[2, 3, 3], scaled(Duration::from_secs(90))).await;
    }

    let produced = producer.stop().await.unwrap();
    let mut reader = scenario.archive_reader();
    // By id: w1 leads.
    let how = Finish::stopping_all(daemons.values_mut().collect(), 120);
    scenario.finish(&mut reader, &produced, how).await;
}

/// Contract line 6. Worker A records a batch in the lease row and is frozen
/// (SIGSTOP) before its PUT. Worker B takes the expired lease, replays that
/// exact batch and carries on. A is resumed: its PUT meets the object B wrote
/// (412), its checkpoint fails on the lease counter, and it writes nothing
/// more. S3 holds every record once and one version of every key.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_zombie_cannot_duplicate() {
    let env = require_env!();
    let scenario = Scenario::create(&env, "zombie", 1, Versioning::Enabled)
        .await
        .unwrap();
    let base = scenario
        .settings
        .clone()
        .set("buffer-max-records", "40")
        .set("buffer-max-age", "2s");
    let mut produced = scenario
        .put(&small_record_specs(200, 1, "before"))
        .await
        .unwrap();

    // A pauses (asynchronously, for a minute) after recording its third batch.
    let settings_a =
        worker(&base, "zombie-a").failpoints("after-pending=2*off->1*return(delay:60000)");
    let mut a = Daemon::spawn(&settings_a).unwrap();
    wait_until(
        scaled(Duration::from_secs(60)),
        "A reaches the failpoint",
        || {
            let log = a.log();
            async move { log.contains("failpoint reached") }
        },
    )
    .await
    .unwrap();
    a.pause().unwrap();
    let rows = scenario.lease_rows().await.unwrap();
    let pending = rows[0]
        .pending_batch()
        .expect("A recorded a batch before its PUT");
    assert_eq!(rows[0].lease_owner.as_deref(), Some("zombie-a"));
    println!("A frozen with pending batch {}", pending.key);

    // B takes over once A's lease expires, replays the batch, goes on.
    produced.extend(
        scenario
            .put(&small_record_specs(100, 1, "during"))
            .await
            .unwrap(),
    );
    let mut b = Daemon::spawn(&worker(&base, "zombie-b")).unwrap();
    let mut reader = scenario.archive_reader();
    wait_for_archive(
        &mut reader,
        &produced,
        &mut b,
        scaled(Duration::from_secs(90)),
    )
    .await
    .unwrap();
    let archive = reader.read().await.unwrap();
    assert!(
        archive.object(&pending.key).is_some(),
        "B wrote the recorded batch under its key"
    );
    assert!(
        b.log().contains("pending batch replayed"),
        "B replayed the batch:\n{}",
        b.log_tail(40)
    );

    // Wake A: its late PUT finds B's object; its checkpoint fails; it stops.
    let resumed_at_line = a.log().lines().count();
    a.resume().unwrap();
    wait_until(
        scaled(Duration::from_secs(60)),
        "A notices it lost the lease",
        || {
            let log = a.log();
            async move { log.contains("lease lost") }
        },
    )
    .await
    .unwrap();
    produced.extend(
        scenario
            .put(&small_record_specs(60, 1, "after"))
            .await
            .unwrap(),
    );
    wait_for_archive(
        &mut reader,
        &produced,
        &mut b,
        scaled(Duration::from_secs(90)),
    )
    .await
    .unwrap();
    let after_resume: Vec<String> = a
        .log()
        .lines()
        .skip(resumed_at_line)
        .map(str::to_owned)
        .collect();
    assert!(
        !after_resume
            .iter()
            .any(|line| line.contains("batch written")),
        "the zombie wrote a batch after it woke up:\n{}",
        after_resume.join("\n")
    );
    let rows = scenario.lease_rows().await.unwrap();
    assert_eq!(
        rows[0].lease_owner.as_deref(),
        Some("zombie-b"),
        "B keeps the lease"
    );

    // A, then B; all records are archived already.
    let how = Finish::stopping_all(vec![&mut a, &mut b], 90);
    scenario.finish(&mut reader, &produced, how).await;
}
